"""Every named sweep's ``paper`` preset, end to end on stand-in data (the real datasets' shapes and classes, 1 % of
their sizes), scaled down by ``--set`` to fit CI, on the CPU: ``platform.run`` of the preset's base config, and one
preset as a whole sweep with its report."""
import pytest

pytestmark = pytest.mark.slow  # paper presets on stand-in data: the slow tier

FRACTION = ["--set", "stand_in_fraction=0.01", "--set", "resources.gpu=0", "--set", "resources.cpu=1"]
# What each preset is scaled down by: rounds, local epochs, pools and distillation steps (the settings stay the paper's)
SCALE = {
    "feded_beta": ["algorithm.student_epochs=1", "algorithm.ae_epochs=1", "clients.local_epochs=1",
                   "algorithm.public_size=200"],
    "mnfl_rho": ["rounds=1", "clients.local_epochs=1", "algorithm.public_size=64"],
    "single_image_pruning": ["rounds=1", "clients.local_epochs=1", "public.size=700", "algorithm.num_distill=64",
                             "algorithm.distill_steps=50", "algorithm.kmeans_k=10", "clients.batch_size=64",
                             "algorithm.distill_batch_size=32"],
    "fedaux_dp": ["rounds=1", "pretrain.epochs=1", "pretrain.batch_size=64", "clients.num_clients=8",
                  "clients.clients_per_round=4"],
    "fedkp_bandwidth": ["clients.num_clients=10", "clients.clients_per_round=5", "clients.local_epochs=1"],
    "fedpa_shrinkage_burnin": ["rounds=2", "algorithm.burnin_rounds=1", "clients.num_clients=10",
                               "clients.clients_per_round=5", "clients.local_epochs=1"],
}
# Presets that need their own scaling (another algorithm, or a partition that 1 % of the data cannot hold)
PRESET_SCALE = {
    ("feded_beta", "paper_baselines"): ["rounds=1", "clients.local_epochs=1"],
    ("fedpa_shrinkage_burnin", "paper_cifar100"): [*SCALE["fedpa_shrinkage_burnin"], "partition.samples_per_client=40"],
    ("single_image_pruning", "paper"): [*SCALE["single_image_pruning"], "partition.samples_per_client=20"],
    ("single_image_pruning", "paper_cifar100"): [*SCALE["single_image_pruning"], "partition.samples_per_client=20"],
}
DATASET = {"feded_beta": "mnist", "mnfl_rho": "emnist", "single_image_pruning": "cifar10", "fedaux_dp": "cifar10",
           "fedkp_bandwidth": "mnist", "fedpa_shrinkage_burnin": "mnist"}


def _sets(space: str, preset: str = "paper") -> list[str]:
    out = list(FRACTION)
    for item in PRESET_SCALE.get((space, preset), SCALE[space]):
        out += ["--set", item]
    return out


def _presets_of_every_space():
    from platform.config.space_files import read_search_space

    return [(space, preset) for space in sorted(SCALE) for preset in read_search_space(space)[2]]


@pytest.mark.parametrize("space,preset", _presets_of_every_space())
def test_every_preset_passes_its_dry_run_and_trains_one_round_on_stand_in_data(space, preset, ray_local, tmp_path,
                                                                               capsys, monkeypatch):
    """Every preset of every space, secondary ones included, scaled by the same ``--set`` for both: the dry run
    passes, and the run then trains (the dry run fails wherever the run would: test_the_dry_runs_data_plan_is_what_
    the_run_builds_at_full_size)."""
    from platform.config.space_files import read_search_space
    from platform.run import main

    monkeypatch.setenv("FEDSWEEP_HOME", str(tmp_path))
    args = [space, "--preset", preset, "--stand-in", "--no-mlflow", "--cache-dir", str(tmp_path / "cache"),
            *_sets(space, preset)]
    assert main([*args, "--dry-run"]) == 0, capsys.readouterr()
    capsys.readouterr()
    rc = main(args)
    out = capsys.readouterr().out
    assert rc == 0, out
    dataset = read_search_space(space)[2][preset].values().get("dataset.name")
    if preset == "paper":
        assert dataset == DATASET[space]
    assert f" on {dataset or 'digits32'}:" in out  # the preset's dataset, generated
    rounds = [line for line in out.splitlines() if line.startswith("round ")]
    assert rounds and all("test_accuracy" in line for line in rounds), out


def test_a_paper_preset_sweeps_and_reports(ray_local, tmp_path, tracking_uri, capsys, monkeypatch):
    """The sweep path with a preset: tagged on the parent run, reported with ``--preset``."""
    from platform.report import main as report_main
    from platform.sweep.command import main as sweep_main

    monkeypatch.setenv("FEDSWEEP_HOME", str(tmp_path))
    rc = sweep_main(["fedkp_bandwidth", "--preset", "paper", "--stand-in", "--num-samples", "1",
                     "--set", "partition.alpha=10.0", "--set", "algorithm.name=fedkp",
                     *_sets("fedkp_bandwidth"), "--tracking-uri", tracking_uri, "--storage-path",
                     str(tmp_path / "tune"), "--cache-dir", str(tmp_path / "cache"), "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0, out
    from tests.conftest import mlflow_runs

    _, runs = mlflow_runs(tracking_uri, "fedkp_bandwidth")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parent.data.tags["fedsweep.preset"] == "paper" and parent.data.params["base.stand_in"] == "True"
    rc = report_main(["fedkp_bandwidth", "--preset", "paper", "--tracking-uri", tracking_uri, "--out",
                      str(tmp_path / "report")])
    assert rc == 0
    report = (tmp_path / "report" / "report.md").read_text()
    assert "preset `paper`" in report


def _every_preset():
    from platform.config.space_files import read_search_space

    spaces = ("feded_beta", "mnfl_rho", "single_image_pruning", "fedaux_dp", "fedkp_bandwidth",
              "fedpa_shrinkage_burnin")
    return [(space, preset) for space in spaces for preset in read_search_space(space)[2]]


@pytest.fixture(scope="session")
def preset_stage_cache(tmp_path_factory):
    """One stage cache for the full-size presets: the single-image presets share their 50,000-crop pool (minutes to
    cut on 2 CPUs), as a sweep's trials do."""
    from platform.stages.cache import StageCache

    return StageCache(str(tmp_path_factory.mktemp("preset_cache")))


@pytest.mark.parametrize("space,preset", _every_preset())
def test_the_dry_runs_data_plan_is_what_the_run_builds_at_full_size(space, preset, preset_stage_cache):
    """Every preset of every space (secondary ones included), at its real size on stand-in data: the dry run's data
    plan succeeds exactly where the run's data stage does (the shared data, then every client's splits, as a trial
    builds them before it trains), with the same sizes, and fails with the same line where it fails."""
    from types import SimpleNamespace

    from platform.config.search_space import load_search_space
    from platform.errors import ConfigError
    from platform.preflight.data_plan import data_plan
    from platform.runtime.federation import client_splits, load_shared_data

    config = load_search_space(space, {"stand_in": True}, preset=preset).trial_config({})
    try:
        plan, planned = data_plan(config), None
    except ConfigError as err:
        plan, planned = None, str(err)
    try:
        data = load_shared_data(config, preset_stage_cache)
        splits = client_splits(config, SimpleNamespace(train_labels=data.train.y, train_groups=data.train.groups,
                                                       train_coarse_labels=data.train.coarse_y))
        built = None
    except ConfigError as err:
        built = str(err)
    assert planned == built  # both succeed, or both fail with the same line
    if plan is not None:
        clients = range(config.clients.num_clients)
        assert plan.client_train == tuple(len(splits.train[k]) for k in clients)
        assert plan.pool == len(data.train) and plan.test == len(data.test)
        assert plan.server_val == (0 if data.val is None else len(data.val[1]))
        assert plan.public == (0 if data.public_x is None else len(data.public_x))
