"""``--dry-run`` text and ``--estimate``'s prediction (the measuring itself runs in tests/integration/test_plan.py)."""
import copy

import yaml

from platform.config.search_space import load_search_space
from platform.preflight.estimate import predict
from platform.preflight.plan import sweep_plan
from tests.unit.test_presets import SPACE


def _space(tmp_path, preset=None, **search):
    space = copy.deepcopy(SPACE)
    (space["presets"]["paper"] if preset else space)["search"].update(search)
    if preset:
        space["presets"]["paper"]["cite"].update({f"search.{k}": {"paper": None, "where": "platform"} for k in search})
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return load_search_space(str(path), preset=preset)


def test_dry_run_text_names_what_would_run(tmp_path):
    space = _space(tmp_path, "paper", seeds=[0, 1, 2])
    text = sweep_plan(space, space.trial_config({}))
    assert text.splitlines()[0] == "sweep space --preset paper (ten clients of five): dry run, nothing started"
    assert "data: digits (embedded): found" in text
    assert "cell  1  partition.alpha=10: 2 trial(s) (tpe)" in text
    assert "cell  2  partition.alpha=0.1: 2 trial(s) (tpe)" in text
    assert "seeds: [0, 1, 2]" in text and "rounds per trial: 4" in text
    assert "resources per trial: cpu 1, gpu 0.5" in text
    assert "total: 4 trial(s) x 3 seed(s) = 12 run(s)" in text
    assert "clients_per_round: 5" in text  # the resolved config


def test_grid_trials_per_cell(tmp_path):
    raw = copy.deepcopy(SPACE)
    raw["parameters"]["clients.lr"] = {"choice": [0.01, 0.05, 0.1]}
    raw["search"].update(searcher="grid", num_samples=2)
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert load_search_space(str(path)).trials_per_cell() == [("", 12)]  # 3 x 2 grid points x 2 repetitions
    assert load_search_space(str(path), {"clients.lr": 0.05}).trials_per_cell() == [("", 4)]  # pinned: momentum only


def test_prediction_scales_the_measured_trials_to_the_sweep(tmp_path):
    """The command starts once; each cell pays its Tune experiment's start and end; its first wave costs a fresh
    trial (its first round includes the start), every later wave a reused one, rounds after the first at the steady
    rate; the driver's records run one trial after another."""
    space = _space(tmp_path, "paper", seeds=[0, 1], num_samples=5)  # 2 cells x 5 trials, 0.5 GPU each
    config = space.cell_space(0).trial_config({})
    measured = {"round_seconds": [9.0, 1.0], "fresh_first_round_seconds": 9.0, "reused_first_round_seconds": 3.0,
                "seeds_measured": 2, "startup_seconds": 7.0, "cell_seconds": 4.0, "trial_overhead_seconds": 0.5,
                "device": "GPU (test)", "gpu_bytes": 2**30}
    one_gpu = predict(measured, config, space, gpus=1)
    fresh, reused = 9.0 + 1.0 * 3, 3.0 + 1.0 * 3  # the first round, then 3 more at the steady rate (4 rounds)
    assert one_gpu["first_trial_seconds"] == fresh and one_gpu["trial_seconds"] == reused
    assert one_gpu["trials"] == 10 and one_gpu["side_by_side"] == 2
    assert one_gpu["wall_seconds"] == 7.0 + 2 * (4.0 + fresh + 2 * reused)  # per cell ceil(5 / 2) = 3 waves
    assert abs(one_gpu["gpu_hours"] - 2 * (2 * fresh + 3 * reused) * 0.5 / 3600) < 1e-12
    eight = predict(measured, config, space, gpus=8)
    assert eight["side_by_side"] == 16 and eight["wall_seconds"] == 7.0 + 2 * (4.0 + fresh)
    capped = _space(tmp_path, "paper", seeds=[0, 1], num_samples=5, max_concurrent_trials=1)
    assert predict(measured, config, capped, gpus=8)["wall_seconds"] == 7.0 + 2 * (4.0 + fresh + 4 * reused)
    # trials too short to hide the driver's records: they run one trial after another
    quick = dict(measured, round_seconds=[0.1, 0.0], fresh_first_round_seconds=0.1, reused_first_round_seconds=0.0,
                 trial_overhead_seconds=2.0)
    assert predict(quick, config, space, gpus=1)["wall_seconds"] == 7.0 + 2 * (4.0 + 5 * 2.0)
    # a single run measured on one seed: scaled to the sweep's seeds
    single = dict(measured, seeds_measured=1)
    assert predict(single, config, space, gpus=1)["first_trial_seconds"] == 2 * fresh


def test_measured_on_cpus_a_gpu_trial_is_predicted_for_those_cpus_and_no_gpu_time(tmp_path):
    """A trial that asks for half a GPU, measured on CPUs (the cluster has none): the wall time is for the CPUs
    measured, trials side by side as their cores allow; no GPU wall time, no GPU-hours, and the text says where to
    measure instead."""
    from platform.preflight.estimate import estimate_text

    space = _space(tmp_path, "paper", seeds=[0, 1], num_samples=5)
    config = space.cell_space(0).trial_config({})
    assert config.resources.gpu > 0
    measured = {"round_seconds": [3.0, 1.0], "fresh_first_round_seconds": 3.0, "reused_first_round_seconds": 1.5,
                "seeds_measured": 2, "trials_measured": 4, "wave_measured": 2, "cell_seconds": 2.0,
                "trial_overhead_seconds": 0.1, "startup_seconds": 5.0, "rss_bytes": None, "gpu_bytes": None,
                "host": "node-a", "device": "CPU (4 cores)", "parameters": 1234}
    cpu = predict(measured, config, space, gpus=8, cpus=4)
    assert cpu["gpu_hours"] is None and not cpu["on_gpu"]
    assert cpu["side_by_side"] == int(4 // config.resources.cpu)  # the CPUs decide, not the 8 GPUs asked about
    text = estimate_text(measured, cpu, config, space, gpus=8, command="python -m platform.sweep tiny --estimate")
    assert "GPU-hours" not in text and "GPU(s)" not in text
    assert "GPU time: not predicted" in text and "ray job submit" in text
    assert "measured on node-a, CPU (4 cores)" in text and "1,234 parameters" in text
    assert "a Tune experiment of 4 trial(s), 2 at once" in text
    assert "round 1 of a fresh trial (2 seed(s)): 3.00 s (warm-up" in text
    assert "round 1 of a reused trial (2 seed(s)): 1.50 s" in text and "a later round (2 seed(s)): 1.00 s (steady" in text
