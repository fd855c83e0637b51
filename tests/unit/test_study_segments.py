"""A long study as consecutive Tune experiments (platform/sweep/segments.py): the plan, the seeds, the searcher's
carried-over history and the record --resume reads."""
import math

import optuna
import pytest
import yaml

from platform.sweep import segments as seg
from platform.errors import ConfigError
from platform.config.search_space import load_search_space

SPACE = {
    "description": "segments",
    "base": {"rounds": 1},
    "parameters": {"algorithm.name": {"choice": ["fedavg", "fedprox"]},
                   "algorithm.mu": {"loguniform": [0.001, 1.0], "when": {"algorithm.name": "fedprox"}},
                   "clients.lr": {"loguniform": [0.005, 0.2]},
                   "clients.local_epochs": {"int": [1, 3]}},
    "search": {"searcher": "tpe", "num_samples": 7, "trials_per_experiment": 3},
}


def _space(tmp_path, **search):
    raw = {**SPACE, "search": {**SPACE["search"], **search}}
    if raw["search"]["searcher"] == "grid":
        raw["parameters"] = {"clients.lr": {"grid": [0.01, 0.02, 0.03, 0.04, 0.05]}}
    path = tmp_path / "segments.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_search_space(str(path))


def test_a_study_is_split_into_experiments_of_at_most_the_limit(tmp_path):
    segments = seg.plan(_space(tmp_path))
    assert [s.num_samples for s in segments] == [3, 3, 1]
    assert [s.dir_name for s in segments] == ["segment-001", "segment-002", "segment-003"]
    assert [s.num_samples for s in seg.plan(_space(tmp_path, trials_per_experiment=500))] == [7]


def test_a_grid_is_split_by_points_keeping_each_points_repetitions_together(tmp_path):
    segments = seg.plan(_space(tmp_path, searcher="grid", num_samples=2, trials_per_experiment=4))
    assert [len(s.grid_points) for s in segments] == [2, 2, 1]
    assert [s.trials for s in segments] == [4, 4, 2]
    assert [p["clients.lr"] for s in segments for p in s.grid_points] == [0.01, 0.02, 0.03, 0.04, 0.05]
    # more repetitions than the limit: one point per experiment
    assert [s.trials for s in seg.plan(_space(tmp_path, searcher="grid", num_samples=6, trials_per_experiment=4))] \
        == [6] * 5


def test_the_limit_is_validated_at_load_time(tmp_path):
    with pytest.raises(ConfigError, match="search.trials_per_experiment"):
        _space(tmp_path, trials_per_experiment=0)


def test_the_first_segment_keeps_the_studys_sampler_seed_and_later_ones_differ():
    assert seg.segment_sampler_seed(7, 0) == 7
    later = [seg.segment_sampler_seed(7, i) for i in (1, 2, 3)]
    assert len(set(later)) == 3 and 7 not in later
    assert later == [seg.segment_sampler_seed(7, i) for i in (1, 2, 3)]  # reproducible


def test_the_next_segments_study_starts_with_every_finished_trial(tmp_path):
    space = _space(tmp_path)
    outcomes = [
        seg.TrialOutcome({"val_accuracy": 0.8, "round": 1}, {"algorithm.name": "fedprox", "algorithm.mu": 0.01,
                                                             "clients.lr": 0.05, "clients.local_epochs": 2}),
        seg.TrialOutcome({"val_accuracy": 0.6, "round": 1}, {"algorithm.name": "fedavg", "clients.lr": 0.01,
                                                             "clients.local_epochs": 1}),
        seg.TrialOutcome({"val_accuracy": float("nan"), "round": 1}, {"algorithm.name": "fedavg", "clients.lr": 0.2,
                                                                      "clients.local_epochs": 1}),  # diverged
        seg.TrialOutcome({}, {"algorithm.name": "fedavg", "clients.lr": 0.1, "clients.local_epochs": 3},
                         error="RuntimeError: boom"),  # failed
    ]
    storage, added = seg.warm_start_study(space, outcomes, "history")
    assert added == 2
    study = optuna.load_study(study_name="history", storage=storage)
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    assert study.best_trial.params == {"algorithm.name": "fedprox", "algorithm.mu": 0.01, "clients.lr": 0.05,
                                       "clients.local_epochs": 2}
    assert [t.value for t in study.trials] == [0.8, 0.6]


def test_a_segments_searcher_continues_the_history(tmp_path):
    """Tune's Optuna searcher built for a later segment sees the earlier trials (TPE leaves its random start-up)."""
    from platform.sweep.study import make_searcher

    space = _space(tmp_path)
    outcomes = [seg.TrialOutcome({"val_accuracy": 0.1 * i, "round": 1},
                                 {"algorithm.name": "fedavg", "clients.lr": 0.005 + 0.01 * i,
                                  "clients.local_epochs": 1}) for i in range(12)]
    searcher = make_searcher(space, 2, outcomes)
    assert len(searcher._ot_study.trials) == 12
    assert searcher._sampler._rng.rng.random() != optuna.samplers.TPESampler(seed=0)._rng.rng.random()


def test_the_record_round_trips_outcomes_with_non_finite_values(tmp_path):
    segment = seg.plan(_space(tmp_path))[1]
    outcomes = [seg.TrialOutcome({"val_accuracy": float("nan"), "round": 1, "trial_id": "a"}, {"clients.lr": 0.1}),
                seg.TrialOutcome({"val_accuracy": 0.5, "round": 1, "trial_id": "b"}, {"clients.lr": 0.2})]
    record = seg.record_segment(str(tmp_path), {}, segment, outcomes, {"runs": {"a": "r1"}})
    assert seg.read_record(str(tmp_path))["callback"] == {"runs": {"a": "r1"}}
    back = seg.ended_cleanly(seg.read_record(str(tmp_path)), segment)
    assert math.isnan(back[0].metrics["val_accuracy"]) and back[1] == outcomes[1]
    assert seg.ended_cleanly(record, seg.plan(_space(tmp_path))[0]) is None  # never ran


def test_a_segment_with_a_failed_trial_is_not_skipped_on_resume(tmp_path):
    segment = seg.plan(_space(tmp_path))[0]
    outcomes = [seg.TrialOutcome({}, {"clients.lr": 0.1}, error="RuntimeError: boom")]
    record = seg.record_segment(str(tmp_path), {}, segment, outcomes, {})
    assert seg.ended_cleanly(record, segment) is None


def test_an_outcome_keeps_only_what_the_report_reads():
    class Result:
        metrics = {"val_accuracy": 0.5, "val_accuracy_std": 0.01, "test_accuracy": 0.4, "round": 3,
                   "trial_id": "t1", "details": "{...}", "time_total_s": 1.0}
        config = {"clients.lr": 0.1}
        error = None

    kept = seg.outcome(Result(), ["val_accuracy", "test_accuracy"])
    assert kept.metrics == {"val_accuracy": 0.5, "val_accuracy_std": 0.01, "test_accuracy": 0.4, "round": 3,
                            "trial_id": "t1"}
    assert kept.config == {"clients.lr": 0.1} and kept.error is None
