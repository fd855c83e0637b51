"""The report names the best as the console does: one order, ties included (mean, then std, then the
trial number), the lead over the runner-up "within noise" in the console's words, and one sentence per swept
parameter in units of the seeds' std. On a real SQLite MLflow store written the way a sweep writes it; no Ray."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tests.unit.test_sweep_results import _client, _log, _report, build_sweep, empty_store, tracking_uri  # noqa: F401

# name -> (per-seed val_accuracy, trial number, clients.lr): exact binary fractions, so the ties are exact.
# tied_a and tied_b tie on mean and std: the earlier trial (tied_b, number 1) ranks first; wide ties on the mean
# with a larger std and ranks after both.
TIED = {"tied_a": ([0.5, 0.75], 3, 0.05), "tied_b": ([0.5, 0.75], 1, 0.1), "wide": ([0.375, 0.875], 2, 0.2),
        "low": ([0.25, 0.5], 4, 0.01)}


def _tied_sweep(uri: str, numbered: bool = True) -> tuple[str, dict]:
    """A finished two-seed sweep of fedavg trials with :data:`TIED`'s values; returns (parent id, {name: run id})."""
    parent_id, _ = build_sweep(uri, trials=[])
    client = _client(uri)
    experiment_id = client.get_run(parent_id).info.experiment_id
    runs = {}
    for name, (values, number, lr) in TIED.items():
        tags = {"mlflow.parentRunId": parent_id, "status": "completed", "fedsweep.search_space": "toy",
                **({"fedsweep.trial_number": str(number)} if numbered else {})}
        run_id = client.create_run(experiment_id, run_name=name, tags=tags).info.run_id
        metrics = {"val_accuracy": float(np.mean(values)), "val_accuracy_std": float(np.std(values)),
                   "test_accuracy": 0.5, **{f"val_accuracy/seed_{s}": v for s, v in enumerate(values)}}
        _log(client, run_id, metrics, 2, params={"algorithm.name": "fedavg", "clients.lr": lr,
                                                 "search.seeds": [0, 1]})
        client.set_terminated(run_id, "FINISHED")
        runs[name] = run_id
    return parent_id, runs


def _console_order(names) -> list[str]:
    """The console's order (platform.sweep.study.rank_results) of :data:`TIED`, as Tune's results carry them."""
    from platform.sweep.study import rank_results

    results = [SimpleNamespace(metrics={"trial_id": name, "val_accuracy": float(np.mean(TIED[name][0])),
                                        "val_accuracy_std": float(np.std(TIED[name][0]))}) for name in names]
    callback = SimpleNamespace(numbers={name: TIED[name][1] for name in names})
    return [r.metrics["trial_id"] for r in rank_results(results, "val_accuracy", "max", callback)]


def test_ties_rank_the_same_in_the_report_and_the_console(tracking_uri, tmp_path):
    from platform.results.report_ranking import ranked_rows
    from platform.results.sweep_artifacts import trial_frame, trials_table
    from platform.results.sweep_results import load_sweep

    parent_id, runs = _tied_sweep(tracking_uri)
    results = load_sweep(tracking_uri, parent_id)
    rows = trial_frame(trials_table(results)).to_dict("records")
    report = [r["run_name"] for r in ranked_rows(rows, results.objective)]
    assert report == _console_order(list(reversed(TIED))) == ["tied_b", "tied_a", "wide", "low"]
    markdown = _report(tracking_uri, tmp_path, parent_id)
    best = next(line for line in markdown.splitlines() if line.startswith("Best: "))
    # an exact tie: lead 0 with a standard error over seeds, Welch p = 1, within noise, in the console's words
    assert best == (f"Best: **tied_b (`{runs['tied_b'][:8]}`)**, `val_accuracy` 0.6250 ± 0.1250; runner-up tied_a "
                    f"(`{runs['tied_a'][:8]}`), 0.6250 ± 0.1250; lead over the runner-up 0.0000 ± 0.1768 (SE, 2 "
                    f"seeds), Welch p = 1: within noise.")
    arm = next(line for line in markdown.splitlines() if line.startswith("| fedavg |"))
    assert arm.startswith(f"| fedavg | tied_b (`{runs['tied_b'][:8]}`) |")  # the ablation names the same best


def test_a_sweep_without_trial_numbers_breaks_ties_by_start_order(tracking_uri):
    from platform.results.report_ranking import ranked_rows
    from platform.results.sweep_artifacts import trial_frame, trials_table
    from platform.results.sweep_results import load_sweep

    parent_id, _ = _tied_sweep(tracking_uri, numbered=False)  # a store from before runs carried their number
    results = load_sweep(tracking_uri, parent_id)
    assert [t.number for t in results.trials] == [1, 2, 3, 4]  # the order of start, as the driver numbered them
    ranked = ranked_rows(trial_frame(trials_table(results)).to_dict("records"), results.objective)
    assert [r["run_name"] for r in ranked] == ["tied_a", "tied_b", "wide", "low"]  # tied_a started first


def test_one_sentence_per_swept_parameter_in_seeds_std(tracking_uri, tmp_path):
    parent_id, _ = _tied_sweep(tracking_uri)
    markdown = _report(tracking_uri, tmp_path, parent_id)
    spread = [line for line in markdown.splitlines() if line.startswith("- `val_accuracy`")]
    assert len(spread) == 3  # one per swept parameter: algorithm.name, algorithm.mu, clients.lr
    # means 0.625, 0.625, 0.625, 0.375 over four lrs: range 0.25; the stds' root mean square sqrt(0.02734375)
    assert ("- `val_accuracy` ranges over `clients.lr` by 0.2500, i.e. 1.5 seeds' std (std: the root mean square of "
            "the trials' std over seeds, 0.1654; 4 trials, the other swept parameters varying too; highest 0.6250 at "
            "0.1, lowest 0.3750 at 0.01).") in spread  # the direction: which value is best, which worst
    assert "- `val_accuracy` cannot range over `algorithm.name`: one value (fedavg) reported." in spread
    assert ("- `val_accuracy` cannot range over `algorithm.mu`: no trial reported it with the parameter active."
            in spread)  # fedavg trials: mu inactive


def _row(name: str, values, lr, n_seeds=None, number=1) -> dict:
    std = float(np.std(values)) if len(values) > 1 else None
    return {"run_id": f"{name:0<32}", "run_name": name, "status": "completed", "trial_number": number,
            "clients.lr": lr, "n_seeds": n_seeds or len(values), "val_accuracy_mean": float(np.mean(values)),
            "val_accuracy_std": std}


def test_a_range_is_said_in_seeds_std_or_said_unknown_with_one_seed():
    from platform.results.report_ranking import spread_sentence
    from platform.results.sweep_results import Objective

    objective = Objective("val_accuracy", "max")
    one_seed = [_row("a", [0.8], 0.1), _row("b", [0.7], 0.2)]
    assert spread_sentence(one_seed, "clients.lr", objective, False) == (
        "`val_accuracy` ranges over `clients.lr` by 0.1000 (2 trials; highest 0.8000 at 0.1, lowest 0.7000 at 0.2); "
        "the seeds' std is unknown (one seed), so how that compares with noise cannot be said.")
    flat = [_row("a", [0.8, 0.8], 0.1), _row("b", [0.7, 0.7], 0.2)]
    assert "the seeds gave no spread (std 0)" in spread_sentence(flat, "clients.lr", objective, False)
    noisy = [_row("a", [0.5, 0.75], 0.1), _row("b", [0.5, 0.625], 0.1), _row("c", [0.5, 0.75], 0.2)]
    sentence = spread_sentence(noisy, "clients.lr", objective, False, cell="partition.alpha=0.1")
    # per value: 0.1 -> mean(0.625, 0.5625), 0.2 -> 0.625; range 0.03125 over stds 0.125, 0.0625, 0.125
    assert sentence.startswith("`val_accuracy` ranges over `clients.lr` in cell `partition.alpha=0.1` by 0.0312, "
                               "i.e. 0.3 seeds' std: no more than the seeds' own spread (")
    assert sentence.endswith("; 2 values over 3 trials; highest 0.6250 at 0.2, lowest 0.5938 at 0.1).")


def test_the_winner_sentence_says_within_noise_or_beyond_one_standard_error():
    from platform.results.noise import lead_over
    from platform.results.report_ranking import Winner, winner_sentence
    from platform.results.sweep_results import Objective

    objective = Objective("val_accuracy", "max")
    best, runner_up = [0.90, 0.91, 0.92], [0.80, 0.81, 0.79]
    clear = Winner(None, [_row("best", best, 0.1), _row("next", runner_up, 0.2)],
                   lead_over(best, runner_up, "max"))
    assert winner_sentence(clear, objective).endswith(": beyond one standard error.")
    close = [0.905, 0.915, 0.905]
    noisy = Winner("partition.alpha=0.1", [_row("best", best, 0.1), _row("next", close, 0.2)],
                   lead_over(best, close, "max"))
    text = winner_sentence(noisy, objective)
    assert text.startswith("Cell `partition.alpha=0.1`: best: **best (`best") and text.endswith(": within noise.")
    alone = Winner(None, [_row("only", [0.9], 0.1)], None)
    assert winner_sentence(alone, objective).endswith("(the only trial that reported it: no runner-up to compare "
                                                      "with).")


def test_the_best_per_cell_is_each_cells_first_in_the_one_order(tracking_uri):
    from platform.results.report_ranking import ranked_rows, winners
    from platform.results.sweep_artifacts import trial_frame, trials_table
    from platform.results.sweep_results import load_sweep

    parent_id, _ = build_sweep(tracking_uri, scenarios={"partition.alpha": [0.1, 1.0]})
    results = load_sweep(tracking_uri, parent_id)
    frame = trial_frame(trials_table(results))
    found = winners(results, frame, results.objective)
    assert [w.cell for w in found] == ["partition.alpha=0.1", "partition.alpha=1.0"]
    for winner in found:
        rows = [r for r in frame.to_dict("records") if r["cell"] == winner.cell]
        assert winner.best["val_accuracy_mean"] == max(r["val_accuracy_mean"] for r in rows)
        assert [r["run_id"] for r in winner.ranked] == [r["run_id"] for r in ranked_rows(rows, results.objective)]
        assert winner.lead is not None and winner.lead.lead == pytest.approx(
            winner.ranked[0]["val_accuracy_mean"] - winner.ranked[1]["val_accuracy_mean"])
