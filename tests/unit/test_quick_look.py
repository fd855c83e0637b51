"""A newcomer's first hour: --num-samples on a grid, --repeats, --set rounds under ASHA's grace period,
errors before Ray, Tune's log off the console, Optuna studies named by their cells, --list."""
import logging
import os
import subprocess
import sys
import time

import pytest
import yaml

from platform.errors import ConfigError, UserError
from tests.conftest import REPO_ROOT

GRID = {"description": "grid. Second sentence.",
        "base": {"rounds": 4, "clients": {"num_clients": 4, "clients_per_round": 4}},
        "parameters": {"clients.lr": {"grid": [0.01, 0.02, 0.03, 0.04, 0.05]}},
        "search": {"searcher": "grid", "num_samples": 2}}


def _write(tmp_path, space, name="space"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return str(path)


# ---- 1. --num-samples N: at most N trials per cell; --repeats K repeats a grid ----

def test_spread_indices_are_even_and_deterministic():
    from platform.config.trials import spread_indices

    assert spread_indices(8, 2) == [0, 7]
    assert spread_indices(8, 3) == [0, 4, 7]  # round(3.5) half up
    assert spread_indices(5, 4) == [0, 1, 3, 4]
    assert spread_indices(8, 1) == [3]  # the middle
    assert spread_indices(3, 5) == [0, 1, 2]


def test_num_samples_on_a_grid_takes_points_spread_over_it(tmp_path):
    from platform.config.search_space import grid_points, load_search_space
    from platform.sweep import segments
    from platform.sweep.study import count_expected_trials

    path = _write(tmp_path, GRID)
    own = load_search_space(path)  # the file's num_samples on a grid: repetitions, as before
    assert own.search.num_samples == 2 and len(grid_points(own)) == 5 and count_expected_trials(own) == 10
    quick = load_search_space(path, num_samples=2)
    assert [p["clients.lr"] for p in grid_points(quick)] == [0.01, 0.05]
    assert quick.search.num_samples == 1 and count_expected_trials(quick) == 2 and quick.trials_per_cell() == [("", 2)]
    assert [p["clients.lr"] for s in segments.plan(quick) for p in s.grid_points] == [0.01, 0.05]  # what Tune gets
    repeated = load_search_space(path, num_samples=3, repeats=2)
    assert ([p["clients.lr"] for p in grid_points(repeated)] == [0.01, 0.03, 0.05]
            and count_expected_trials(repeated) == 6)
    assert count_expected_trials(load_search_space(path, repeats=3)) == 15
    with pytest.raises(UserError, match="--repeats: repeats a grid"):
        load_search_space(_write(tmp_path, {**GRID, "parameters": {"clients.lr": {"loguniform": [0.01, 0.1]}},
                                            "search": {"searcher": "tpe", "num_samples": 4}}, "tpe"), repeats=2)


def test_dry_run_of_a_grid_with_num_samples_shows_at_most_that_many_trials_per_cell(capsys):
    from platform.sweep.command import main

    assert main(["mnfl_rho", "--num-samples", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "trials: 2 (grid)" in out
    assert "2 of 8 grid points (--num-samples 2, spread evenly over the grid): algorithm.rho=0.0; algorithm.rho=3.0" \
        in out
    assert "total: 2 trial(s) x 3 seed(s)" in out


# ---- 3. --set rounds below ASHA's grace period ----

ASHA = {"description": "asha", "base": {"rounds": 10, "clients": {"num_clients": 4, "clients_per_round": 4}},
        "parameters": {"clients.lr": {"loguniform": [0.01, 0.1]}},
        "search": {"searcher": "tpe", "num_samples": 2, "scheduler": {"kind": "asha", "grace_period": 3}}}


def test_set_rounds_below_the_grace_period_shrinks_it_and_says_so(tmp_path):
    from platform.config.search_space import load_search_space

    space = load_search_space(_write(tmp_path, ASHA), {"rounds": 2})
    assert space.search.scheduler.grace_period == 2
    assert space.notes == ("search.scheduler.grace_period lowered from 3 to 2 to fit --set rounds=2: ASHA stops no "
                           "trial early at this length",)
    assert load_search_space(_write(tmp_path, ASHA), {"rounds": 5}).notes == ()  # it fits: unchanged
    inconsistent = {**ASHA, "base": {**ASHA["base"], "rounds": 2}}  # the file by itself: still an error
    for overrides in ({}, {"rounds": 2}):
        with pytest.raises(ConfigError, match="grace_period: must be <= base.rounds"):
            load_search_space(_write(tmp_path, inconsistent, "inconsistent"), overrides)


def test_a_grace_period_shrunk_below_a_burn_in_stops_nothing_early_so_it_is_allowed(tmp_path):
    """FedPA burns in for 25 rounds: ASHA needs grace >= 25 + margin; --set rounds=5 shrinks the grace to 5, where
    ASHA stops no trial (its one rung is the last round), so neither the burn-in nor the rung rule applies."""
    from platform.config.search_space import load_search_space

    space = {**ASHA, "base": {**ASHA["base"], "rounds": 50, "algorithm": {"name": "fedpa", "burnin_rounds": 25}},
             "search": {**ASHA["search"], "scheduler": {"kind": "asha", "grace_period": 40, "burnin_margin": 10}}}
    path = _write(tmp_path, space)
    assert load_search_space(path, {"rounds": 5}).search.scheduler.grace_period == 5
    early = {**space, "search": {**space["search"], "scheduler": {"kind": "asha", "grace_period": 20}}}
    with pytest.raises(ConfigError, match="burn-in"):  # a grace period that can stop trials: the rule holds
        load_search_space(_write(tmp_path, early, "early"))


def test_smoke_with_two_rounds_plans(capsys):
    from platform.sweep.command import main

    assert main(["smoke", "--num-samples", "2", "--set", "rounds=2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "note: search.scheduler.grace_period lowered from 3 to 2 to fit --set rounds=2" in out
    assert "early stopping: ASHA, grace period 2 round(s)" in out and "trials: 2 (tpe)" in out


# ---- 4. errors before Ray (and before torch) ----

_PROBE = ("import atexit, sys, time; start = time.time(); "
          "atexit.register(lambda: print('torch' in sys.modules, 'ray' in sys.modules, round(time.time() - start, 2)));"
          " sys.argv = ['platform.sweep', *sys.argv[1:]]; from platform.cli import run_command; "
          "from platform.sweep.command import main; run_command(main)")


@pytest.mark.parametrize("args, error", [
    (["no_such_space"], "error: unknown search space 'no_such_space'; available: "),
    (["fedkp_bandwith"], "error: unknown search space 'fedkp_bandwith' (did you mean 'fedkp_bandwidth'?); available: "),
    (["smoke", "--preset", "paper"], "error: --preset: unknown preset 'paper'"),
    (["smoke", "--storage-path", "/etc/passwd/tune"], "error: --storage-path: /etc/passwd/tune is not a directory"),
])
def test_a_bad_space_preset_or_store_exits_2_before_torch_and_ray(args, error, tmp_path):
    """The command's own process (``main()`` with sys.argv, which starts Ray early): the checks that need no torch
    come first, so the process ends having imported neither torch nor Ray (an exit through the reaper, after a Ray
    start, would not print the probe's line at all)."""
    started = time.time()
    done = subprocess.run([sys.executable, "-c", _PROBE, *args, "--address", "local"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "FEDSWEEP_HOME": str(tmp_path / "home")})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and done.stderr.startswith(error), done.stderr
    torch, ray, seconds = done.stdout.split()
    assert (torch, ray) == ("False", "False"), (done.stdout, time.time() - started)
    assert not (tmp_path / "home").exists()


# ---- 5, 6. Tune's own log records go to the study's log, not the console ----

def test_tune_log_records_go_to_the_file_not_the_console(tmp_path):
    from platform.sweep.study import tune_log_to

    seen = []

    class Console(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    console = Console()
    ray_logger = logging.getLogger("ray")
    ray_logger.addHandler(console)
    try:
        path = tmp_path / "study" / "tune_driver.log"
        with tune_log_to(str(path)):
            logging.getLogger("ray.tune.tune").warning("Experiment has been interrupted, but the most recent state "
                                                       "was saved.\nResume experiment with: Tuner.restore(...)")
            logging.getLogger("ray.tune.execution.tune_controller").error("Trial task failed for trial t1")
            logging.getLogger("ray.tune.utils.util").warning("The `process_trial_result` operation took 2.1 s")
        assert seen == []
        text = path.read_text()
        assert "Tuner.restore" in text and "Trial task failed" in text and "process_trial_result" in text
        logging.getLogger("ray.tune.tune").warning("after the study")  # the console again once the study ended
        assert seen == ["after the study"]
    finally:
        ray_logger.removeHandler(console)


def test_the_error_line_names_the_traceback_in_tune_storage(tmp_path):
    from types import SimpleNamespace

    from platform.sweep.callback import error_log

    def trial(kind):
        return SimpleNamespace(error_file="/tmp/staging/trial_1/error.txt", storage=SimpleNamespace(
            trial_fs_path="/runs/sweep/trial_1" if kind == "local" else "bucket/runs/sweep/trial_1",
            storage_filesystem=SimpleNamespace(type_name=kind)))

    assert error_log(trial("local")) == "/runs/sweep/trial_1/error.txt"
    assert error_log(trial("s3")) == "s3://bucket/runs/sweep/trial_1/error.txt"
    assert error_log(trial("gcs")) == "gs://bucket/runs/sweep/trial_1/error.txt"


# ---- 7. Optuna studies named by their cells ----

def test_study_names_say_their_cell():
    from platform.sweep.cells import study_names

    sweep = "fedaux_dp-20261126-011227-624ecf"
    assert study_names(sweep, [{"algorithm.lam": 0.001}, {"algorithm.lam": 0.01}]) == [
        f"{sweep}/lam=0.001", f"{sweep}/lam=0.01"]
    two = study_names(sweep, [{"algorithm.lam": 0.1, "algorithm.delta": 1e-05}])
    assert two == [f"{sweep}/lam=0.1 delta=1e-05"]
    clash = study_names(sweep, [{"partition.alpha": 1, "algorithm.alpha": True}])  # same last part: full keys
    assert clash == [f"{sweep}/partition.alpha=1 algorithm.alpha=true"]
    listed = study_names(sweep, [{"model.architectures": ["cnn", "mlp"]}])
    assert "," not in listed[0]  # the parent run's tag lists the studies comma-separated


# ---- 8. --list ----

def test_list_names_each_spaces_question_presets_and_minutes(tmp_path, monkeypatch, capsys):
    from platform.sweep.command import main

    monkeypatch.setenv("FEDSWEEP_SEARCH_SPACES", str(tmp_path))
    long = "One question: " + "why " * 40 + "? More."
    _write(tmp_path, {**GRID, "description": long, "default_minutes": 2.5}, "aaa_long")
    _write(tmp_path, GRID, "aaa_short")
    assert main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = lines.index(next(ln for ln in lines if ln.startswith("aaa_long ")))
    assert lines[first].split(None, 1)[1].startswith("Why why") and lines[first].endswith("…")
    assert len(lines[first].split(None, 1)[1]) == 100
    assert lines[first + 1].split() == "presets: none; default setting: about 2.5 min on 2 CPUs".split()
    assert lines[first + 2].split(None, 1) == ["aaa_short", "Grid."]
    shipped = [ln for ln in lines if ln.startswith("smoke ")]
    assert shipped and "FedAvg vs FedProx" in shipped[0]
    assert all("time not measured" not in ln for ln in lines[lines.index(shipped[0]):][:2])


NOT_TIMED: set = set()  # every shipped space has a measured default time


def test_every_shipped_space_says_how_long_its_default_takes():
    repo = os.path.join(REPO_ROOT, "search_spaces")
    for path in sorted(os.listdir(repo)):
        name = os.path.splitext(path)[0]
        raw = yaml.safe_load(open(os.path.join(repo, path)))
        assert (raw.get("default_minutes") is None) == (name in NOT_TIMED), name


@pytest.mark.parametrize("value", [0, -1, "ten", True, float("nan")])
def test_default_minutes_must_be_a_positive_number(tmp_path, value):
    from platform.config.space_files import read_search_space

    with pytest.raises(ConfigError, match="default_minutes: must be a positive number"):
        read_search_space(_write(tmp_path, {**GRID, "default_minutes": value}))


def test_a_caveat_is_one_line_that_list_shows(tmp_path, monkeypatch, capsys):
    """A space whose default setting cannot show its answer says so in one line, under its name in --list."""
    from platform.config.space_files import read_search_space
    from platform.sweep.command import main

    monkeypatch.setenv("FEDSWEEP_SEARCH_SPACES", str(tmp_path))
    _write(tmp_path, {**GRID, "caveat": "at this scale the knob moves nothing"}, "aaa_caveat")
    assert main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = lines.index(next(ln for ln in lines if ln.startswith("aaa_caveat ")))
    assert lines[first + 2].split(None, 1) == ["caveat:", "at this scale the knob moves nothing"]
    for bad in ("two\nlines", "", 3):
        with pytest.raises(ConfigError, match="caveat: must be one line"):
            read_search_space(_write(tmp_path, {**GRID, "caveat": bad}, "bad_caveat"))


def test_a_mistyped_space_name_gets_the_close_match_from_platform_run():
    from platform.run import resolve_config

    with pytest.raises(UserError) as err:
        resolve_config("fedkp_bandwith", [])
    assert str(err.value).startswith("no config file or search space named 'fedkp_bandwith' (did you mean "
                                     "'fedkp_bandwidth'?); search spaces: fedaux_dp, ")


def test_platform_run_answers_a_mistyped_name_before_importing_torch():
    """The name is checked before the config (which imports torch) is loaded: the answer is immediate."""
    code = ("import sys; from platform.run import resolve_config\n"
            "try:\n    resolve_config('fedkp_bandwith', [])\nexcept Exception as e:\n    print(type(e).__name__)\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["UserError", "False"]


@pytest.mark.parametrize("override, message", [
    ("clients.lrr=0.1", "clients.lrr: unknown key (did you mean 'lr'?); allowed in clients: "),
    ("algorithm.name=fedprx", "algorithm.name: unknown algorithm 'fedprx' (did you mean 'fedprox'?); allowed: "),
    ("algorithm.nam=fedprox", "algorithm.nam: unknown key for algorithm 'fedavg' (did you mean 'name'?); allowed: "),
    ("model.name=cnnn", "model.name: unknown model 'cnnn' (did you mean 'cnn'?); allowed: "),
    ("dataset.name=mnits", "dataset.name: unknown dataset 'mnits' (did you mean 'mnist'?); allowed: "),
    ("partition.kind=dirichlett", "partition.kind: unknown partition 'dirichlett' (did you mean 'dirichlet'?); "),
    ("clients.optimizer=sgdd", "clients.optimizer: unknown value 'sgdd' (did you mean 'sgd'?); allowed: sgd, adam"),
    ("clients.lr_schedule_x=1", "clients.lr_schedule_x: unknown key; allowed in clients: "),  # nothing close
])
def test_a_mistyped_key_or_value_names_the_close_match(override, message):
    from platform.config.experiment import parse_overrides
    from platform.config.search_space import load_search_space
    from platform.preflight import check_settings

    with pytest.raises(ConfigError) as err:
        load_search_space("smoke", overrides=parse_overrides([override]), check=check_settings)
    assert str(err.value).startswith(message)


def test_a_mistyped_preset_names_the_close_match():
    from platform.config.search_space import load_search_space

    with pytest.raises(ConfigError) as err:
        load_search_space("fedkp_bandwidth", preset="papr")
    assert err.value.field == "--preset" and "(did you mean 'paper'?); allowed: paper" in str(err.value)


def test_list_uses_a_wide_terminals_width(tmp_path, monkeypatch, capsys):
    from platform.sweep.command import main

    monkeypatch.setenv("FEDSWEEP_SEARCH_SPACES", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "250")
    _write(tmp_path, {**GRID, "description": "One question: " + "why " * 80 + "? More."}, "aaa_long")
    assert main(["--list"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("aaa_long "))
    assert len(line) == 250 and line.endswith("…")  # the whole terminal, not 100 characters


def test_an_interrupt_says_what_it_left_once(capsys):
    """Ctrl-C before the sweep started its trials: one line saying nothing needs resuming, exit 130; an interrupt the
    command has already announced (with its resume line) gets no second line."""
    from platform.cli import main_wrapper

    @main_wrapper(interrupted="interrupted before the sweep started its trials: nothing needs resuming")
    def early(argv=None):
        raise KeyboardInterrupt

    @main_wrapper
    def announced(argv=None):
        print("interrupted; continue with: python -m platform.sweep smoke --resume x", file=sys.stderr)
        interrupt = KeyboardInterrupt()
        interrupt.announced = True
        raise interrupt

    assert early() == 130
    assert capsys.readouterr().err == "interrupted before the sweep started its trials: nothing needs resuming\n"
    assert announced() == 130
    assert capsys.readouterr().err.splitlines() == ["interrupted; continue with: python -m platform.sweep smoke "
                                                     "--resume x"]
