"""``--dry-run`` and ``--estimate`` as a user runs them: a fresh interpreter, a space with a preset."""
import os

import yaml

from tests.conftest import run_cli
from tests.unit.test_presets import SPACE


def _space_file(tmp_path) -> str:
    path = tmp_path / "spaces" / "tiny.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    return str(path)


def test_dry_run_prints_the_plan_without_starting_ray(tmp_path):
    space = _space_file(tmp_path)
    ray_tmp = tmp_path / "ray"
    ray_tmp.mkdir()
    env = {"RAY_TMPDIR": str(ray_tmp), "RAY_ADDRESS": ""}
    result = run_cli("platform.sweep", space, "--preset", "paper", "--dry-run", "--set", "rounds=5",
                     cwd=str(tmp_path), env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("sweep tiny --preset paper (ten clients of five): dry run, nothing started")
    assert "rounds: 5" in out and "rounds per trial: 5" in out  # --set lands on top of the preset
    assert "cell  2  partition.alpha=0.1: 2 trial(s) (tpe)" in out
    assert os.listdir(ray_tmp) == []  # no Ray instance was started
    assert sorted(os.listdir(tmp_path)) == ["ray", "spaces"]  # nothing written: no MLflow store, no Tune storage
    run = run_cli("platform.run", space, "--preset", "paper", "--dry-run", cwd=str(tmp_path), env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("run tiny --preset paper (ten clients of five)") and "clients_per_round: 5" in run.stdout


def test_a_preset_needs_a_search_space(tmp_path):
    config = tmp_path / "experiment.yaml"
    config.write_text(yaml.safe_dump(SPACE["base"]))
    result = run_cli("platform.run", str(config), "--preset", "paper", "--dry-run", cwd=str(tmp_path), timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: --preset: ") and "is an experiment config" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_estimate_measures_rounds_and_predicts_the_sweep(tmp_path):
    space = _space_file(tmp_path)
    env = {"RAY_ADDRESS": "", "FEDSWEEP_HOME": str(tmp_path / "home")}
    result = run_cli("platform.run", space, "--preset", "paper", "--estimate", "--gpus", "2", "--address", "local",
                     cwd=str(tmp_path), env=env, timeout=300)
    assert result.returncode == 0, result.stderr + result.stdout
    out = result.stdout
    assert "the trial asks for a GPU and this cluster has none: measuring on CPUs" in out  # the preset: half a GPU
    assert "measuring 4 trial(s) of tiny (2 round(s) each, all 1 seed(s), 2 at once)" in out  # 2 waves: fresh, reused
    assert "round 1 of a fresh trial: " in out and "round 1 of a reused trial: " in out and "a later round: " in out
    assert "parameters)" in out and "per client (" in out  # the model's size and the data's
    assert "sweep tiny: 4 trial(s) x 1 seed(s) x 4 round(s)" in out
    assert "CPU(s) like these" in out and "GPU-hours" not in out and "GPU time: not predicted" in out
    assert sorted(os.listdir(tmp_path)) == ["spaces"]  # nothing written: the stage cache was temporary


def test_estimate_without_ray_times_the_rounds_in_process(tmp_path):
    """A machine without Ray (the GPU machines used for checks): --estimate times the trial's rounds in this
    process through the actors' classes, says that Tune's and MLflow's costs are not in the figures, and writes
    nothing."""
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    probe = ("import sys; sys.modules['ray'] = None; sys.argv = ['platform.sweep', *sys.argv[1:]]; "
             "from platform.cli import run_command; from platform.sweep.command import main; run_command(main)")
    done = subprocess.run([sys.executable, "-c", probe, "smoke", "--estimate", "--set", "rounds=3"], cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": REPO_ROOT, "FEDSWEEP_HOME": str(tmp_path / "home")})
    assert done.returncode == 0, done.stderr + done.stdout
    out = done.stdout
    assert "Ray is not installed here: timing 2 round(s) of one seed in this process" in out  # of its 3
    assert "in this process, without Ray" in out and "round 1 of a fresh trial: " in out and "a later round: " in out
    assert "predicted on" in out and "GPU-hours" not in out
    assert os.listdir(tmp_path) == []  # nothing written
