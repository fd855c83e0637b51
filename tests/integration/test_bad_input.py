"""Bad input: one clear line on stderr, exit code 2, and nothing written to MLflow or Tune storage."""
import os

import pytest

from tests.conftest import run_cli

CASES = {
    "unknown search space": (["platform.sweep", "no_such_space"], "unknown search space 'no_such_space'; available: "),
    "unknown algorithm": (["platform.sweep", "smoke", "--set", "algorithm.name=fedmagic"], "algorithm.name"),
    "unknown model": (["platform.sweep", "smoke", "--set", "model.name=vgg99"], "model.name"),
    "alpha <= 0": (["platform.sweep", "smoke", "--set", "partition.alpha=0"], "partition.alpha: must be > 0"),
    "clients per round > clients": (["platform.sweep", "smoke", "--set", "clients.clients_per_round=11"],
                                    "clients.clients_per_round: must be <= clients.num_clients (10)"),
    "negative lr": (["platform.run", "smoke", "--set", "clients.lr=-1"], "clients.lr: must be > 0"),
    "unknown --set key": (["platform.sweep", "smoke", "--set", "clients.speed=3"], "clients.speed: unknown key"),
    "missing data root": (["platform.sweep", "smoke", "--set", "dataset.name=mnist", "--set",
                           "dataset.root=/no/such/dir"], "dataset.root: data root '/no/such/dir' does not exist"),
    "bad num samples": (["platform.sweep", "smoke", "--num-samples", "0"], "--num-samples"),
    "fedaux epsilon <= 0": (["platform.sweep", "fedaux_dp", "--set", "algorithm.epsilon=0"],
                            "algorithm.epsilon: must be > 0"),
    "fedaux delta not in (0, 1)": (["platform.sweep", "fedaux_dp", "--set", "algorithm.delta=1"],
                                   "algorithm.delta: must be < 1"),
    "fedaux lambda <= 0": (["platform.run", "fedaux_dp", "--set", "algorithm.lam=0"], "algorithm.lam: must be > 0"),
    "pretraining without public data": (["platform.run", "fedaux_dp", "--set", "public.source=none"],
                                        "pretrain.method"),
    "missing source image": (["platform.run", "smoke", "--set", "public.source=image", "--set",
                              "public.image=/nonexistent.png"], "public.image: no image file '/nonexistent.png'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_fails_cleanly(case, tmp_path):
    (module, *args), expected = CASES[case]
    result = run_cli(module, *args, cwd=str(tmp_path), env={"MLFLOW_TRACKING_URI": ""}, timeout=180)
    assert result.returncode == 2, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]
    if case == "unknown search space":
        assert "smoke" in lines[0] and "fedkp_bandwidth" in lines[0]  # lists what is available
    assert os.listdir(tmp_path) == [], f"{case} wrote {os.listdir(tmp_path)}"
