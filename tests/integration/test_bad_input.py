"""Bad input: one clear line on stderr, exit code 2, and nothing written to MLflow or Tune storage."""
import os

import pytest

from tests.conftest import run_cli

# A valid MNFL run of the smoke base (personalised: per-client test splits; distils on public data).
MNFL = ["--set", "algorithm.name=mnfl", "--set", "partition.test_fraction=0.25", "--set", "public.source=train_split"]

CASES = {
    "unknown search space": (["platform.sweep", "no_such_space"], "unknown search space 'no_such_space'; available: "),
    "unknown algorithm": (["platform.sweep", "smoke", "--set", "algorithm.name=fedmagic"], "algorithm.name"),
    "unknown model": (["platform.sweep", "smoke", "--set", "model.name=vgg99"], "model.name"),
    "alpha <= 0": (["platform.sweep", "smoke", "--set", "partition.alpha=0"], "partition.alpha: must be > 0"),
    "alpha inf": (["platform.sweep", "smoke", "--set", "partition.alpha=.inf"],
                  "partition.alpha: must be a finite number, got inf"),
    "clients per round > clients": (["platform.sweep", "smoke", "--set", "clients.clients_per_round=11"],
                                    "clients.clients_per_round: must be <= clients.num_clients (10)"),
    "negative lr": (["platform.run", "smoke", "--set", "clients.lr=-1"], "clients.lr: must be > 0"),
    "unknown --set key": (["platform.sweep", "smoke", "--set", "clients.speed=3"], "clients.speed: unknown key"),
    "missing data root": (["platform.sweep", "smoke", "--set", "dataset.name=mnist", "--set",
                           "dataset.root=/no/such/dir"], "dataset.root: data root '/no/such/dir' does not exist"),
    "bad num samples": (["platform.sweep", "smoke", "--num-samples", "0"], "--num-samples"),
    "storage path under a file": (["platform.sweep", "smoke", "--storage-path", "/etc/passwd/tune"],
                                  "--storage-path: /etc/passwd/tune is not a directory (/etc/passwd is a file)"),
    "cache dir under a file": (["platform.run", "smoke", "--cache-dir", "/etc/passwd/cache"],
                               "--cache-dir: /etc/passwd/cache is not a directory"),
    "tracking URI of no store": (["platform.sweep", "smoke", "--tracking-uri", "foo://bar"],
                                 "--tracking-uri: cannot use MLflow store 'foo://bar'"),
    "tracking server not answering": (["platform.sweep", "smoke", "--tracking-uri", "http://127.0.0.1:9/"],
                                      "--tracking-uri: cannot use MLflow store 'http://127.0.0.1:9/'"),
    "optuna storage not a URL": (["platform.sweep", "smoke", "--optuna-storage", "optuna.db"],
                                 "--optuna-storage: 'optuna.db' is not an RDB URL"),
    "fedaux epsilon <= 0": (["platform.sweep", "fedaux_dp", "--set", "algorithm.epsilon=0"],
                            "algorithm.epsilon: must be > 0"),
    "fedaux delta not in (0, 1)": (["platform.sweep", "fedaux_dp", "--set", "algorithm.delta=1"],
                                   "algorithm.delta: must be < 1"),
    "fedaux lambda <= 0": (["platform.run", "fedaux_dp", "--set", "algorithm.lam=0"], "algorithm.lam: must be > 0"),
    "pretraining without public data": (["platform.run", "fedaux_dp", "--set", "public.source=none"],
                                        "pretrain.method"),
    "missing source image": (["platform.run", "smoke", "--set", "public.source=image", "--set",
                              "public.image=/nonexistent.png"], "public.image: no image file '/nonexistent.png'"),
    "single image e = 1": (["platform.sweep", "single_image_pruning", "--set", "algorithm.entropy_rate=1"],
                           "algorithm.entropy_rate: must be < 1"),
    "single image K > pool": (["platform.sweep", "single_image_pruning", "--set", "algorithm.kmeans_k=5001"],
                              "algorithm.kmeans_k: K = 5001 clusters is more than the pool of 5000 crops"),
    "single image pool larger than the photo": (["platform.run", "single_image_pruning", "--set",
                                                 "public.size=1000000"], "public.size"),
    "mnfl rho < 0": (["platform.run", "smoke", *MNFL, "--set", "algorithm.rho=-1"], "algorithm.rho: must be >= 0"),
    "mnfl distill_passes < 1": (["platform.run", "smoke", *MNFL, "--set", "algorithm.distill_passes=0"],
                                "algorithm.distill_passes: must be >= 1"),
    "uneven architecture blocks": (["platform.run", "smoke", *MNFL, "--set", "model.architectures=[cnn,mlp,leaf_cnn]",
                                    "--set", "model.assignment=blocks"],
                                   "model.architectures: the shares do not divide clients.num_clients=10 into whole "
                                   "contiguous blocks (model.assignment blocks): cnn 3.333, mlp 3.333, leaf_cnn "
                                   "3.333 clients would be rounded to cnn 3, mlp 3, leaf_cnn 4"),
    "a key with a newline": (["platform.run", "smoke", "--set", "partition.x\ny=1"],
                             "partition.x\\ny: unknown key; allowed in partition: "),
    "a GPU trial on a cluster without GPUs": (["platform.sweep", "smoke", "--set", "resources.gpu=1"],
                                              "resources.gpu: the trial asks for 1 GPU but the Ray cluster has none"),
    "unknown preset": (["platform.sweep", "smoke", "--preset", "paper", "--dry-run"],
                       "--preset: unknown preset 'paper' for search space 'smoke'; allowed: none"),
    "a value of 10 kB": (["platform.sweep", "smoke", "--set", "algorithm.name=" + "z" * 10_000],
                         "algorithm.name: unknown algorithm 'zzz"),
}


# Run as a user would, in a fresh interpreter (exit status and all of stderr); the other cases call the same
# entry points in this process (each fresh interpreter costs ~5 s of imports on 2 CPUs).
# `python -m platform.sweep` runs the package's __main__; its main() is platform.sweep.command's
COMMAND_MODULES = {"platform.sweep": "platform.sweep.command"}
IN_A_NEW_PROCESS = {"unknown search space", "a GPU trial on a cluster without GPUs", "negative lr", "alpha inf", "tracking server not answering",
                    "a key with a newline"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_fails_cleanly(case, tmp_path_factory, tmp_path, monkeypatch, capsys):
    """Each case: exit 2, one line, and nothing written, neither in the working directory nor in the results home
    ($FEDSWEEP_HOME, an empty directory of its own)."""
    (module, *args), expected = CASES[case]
    home = tmp_path_factory.mktemp("home")
    if case in IN_A_NEW_PROCESS:
        result = run_cli(module, *args, cwd=str(tmp_path), env={"MLFLOW_TRACKING_URI": "", "FEDSWEEP_HOME": str(home)},
                         timeout=180)
        code, stderr = result.returncode, result.stderr
    else:
        import importlib

        monkeypatch.chdir(tmp_path)
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
        monkeypatch.setenv("FEDSWEEP_HOME", str(home))
        code = importlib.import_module(COMMAND_MODULES.get(module, module)).main(args)
        stderr = capsys.readouterr().err
    assert code == 2, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]
    assert len(lines[0]) < 2100 and lines[0].isprintable(), lines[0]  # names and values quoted on one short line
    if case == "unknown search space":
        assert "smoke" in lines[0] and "fedkp_bandwidth" in lines[0]  # lists what is available
    assert os.listdir(tmp_path) == [], f"{case} wrote {os.listdir(tmp_path)}"
    assert os.listdir(home) == [], f"{case} wrote {os.listdir(home)} in the results home"


def _sets(flags: list[str]) -> list[str]:
    return [f for f in flags if f != "--set"]


def test_the_mnfl_base_of_the_bad_cases_is_valid_and_whole_blocks_are_accepted():
    """The MNFL cases above fail on the field they name, not on their base; contiguous blocks that divide the
    clients, or explicit shares that multiply out to whole counts, load; random assignment rounds as documented."""
    from platform.run import resolve_config

    config, _ = resolve_config("smoke", _sets(MNFL))
    assert config.algorithm.name == "mnfl" and config.clients.num_clients == 10
    for sets in (["model.architectures=[cnn,mlp]", "model.assignment=blocks"],
                 ["model.architectures=[{name: cnn, share: 3}, {name: mlp, share: 3}, {name: leaf_cnn, share: 4}]",
                  "model.assignment=blocks"],
                 ["model.architectures=[{name: cnn, share: 0.3}, {name: mlp, share: 0.7}]", "model.assignment=blocks"],
                 ["model.architectures=[cnn,mlp,leaf_cnn]"]):  # random: 3/3/4 by largest remainder, permuted
        config, _ = resolve_config("smoke", _sets(MNFL) + sets)
        assert config.model.architectures is not None
    from platform.errors import ConfigError

    with pytest.raises(ConfigError) as info:  # explicit shares that do not multiply out: refused too
        resolve_config("smoke", _sets(MNFL) + ["model.architectures=[{name: cnn, share: 1}, {name: mlp, share: 2}]",
                                               "model.assignment=blocks"])
    assert info.value.field == "model.architectures" and "cnn 3.333, mlp 6.667" in str(info.value)
    assert "rounded to cnn 3, mlp 7" in str(info.value) and "\n" not in str(info.value)


def test_a_public_pool_of_another_shape_than_the_private_inputs_is_refused(monkeypatch):
    """Every public source conforms its pool to the private inputs today (dataset: resized and re-channelled;
    train_split: the same data; image: crops of the private side), so this guard is for a source that does not."""
    import numpy as np

    import platform.data.public as public
    from platform.config.experiment import DatasetConfig
    from platform.data import load_dataset
    from platform.errors import ConfigError

    cfg = public.PublicDataConfig(source="dataset", dataset="mnist")
    public.check_public_shape((1, 8, 8), (1, 8, 8), cfg)
    with pytest.raises(ConfigError) as info:
        public.check_public_shape((1, 28, 28), (1, 8, 8), cfg)
    assert info.value.field == "public.source"
    assert str(info.value) == ("public.source: the public inputs (dataset mnist) have shape (1, 28, 28) per sample "
                               "but the private inputs have (1, 8, 8); the same models consume both")

    train, _ = load_dataset(DatasetConfig(name="digits"))
    split = public.take_public(train, public.PublicDataConfig(source="train_split"), 0, DatasetConfig())
    assert split.x.shape[1:] == train.input_shape == (1, 8, 8)  # the real conformer: the private shape
    # take_public checks what a source produced: one that conforms wrongly is caught there
    monkeypatch.setattr(public, "_split_public", lambda train, cfg, *args: (train, np.zeros((4, 3, 8, 8), np.float32)))
    with pytest.raises(ConfigError, match=r"^public.source: the public inputs \(train_split\) have shape \(3, 8, 8\)"):
        public.take_public(train, public.PublicDataConfig(source="train_split"), 0, DatasetConfig())


def test_values_valid_alone_but_invalid_together_are_refused_before_anything_starts(tmp_path_factory, tmp_path,
                                                                                      monkeypatch, capsys):
    """Each value passes alone (4 or 10 clients; 4 or 8 a round), but 8 a round of 4 clients does not: the sweep
    refuses the space at load time, in one line naming both values, with nothing started or written (not
    in the first trial that draws them, which would leave a FAILED parent run)."""
    import yaml

    from platform.sweep.command import main

    space = yaml.safe_load(open(os.path.join(os.path.dirname(__file__), "..", "..", "search_spaces", "smoke.yaml")))
    space["base"]["clients"]["clients_per_round"] = 4
    space["parameters"] = {"clients.num_clients": {"choice": [4, 10]},
                           "clients.clients_per_round": {"choice": [4, 8]},
                           "clients.lr": {"loguniform": [0.005, 0.2]}}
    path = tmp_path_factory.mktemp("spaces") / "pair.yaml"
    path.write_text(yaml.safe_dump(space))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("FEDSWEEP_HOME", raising=False)
    code = main([str(path)])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert lines[0] == ("error: parameters.clients.clients_per_round: value 8 is invalid together with "
                        "clients.num_clients=4: clients.clients_per_round: must be <= clients.num_clients (4), got 8")
    assert os.listdir(tmp_path) == []


REFUSED_BY_THE_DATA = {
    "description": "no Dirichlet draw at alpha 0.01 (seed 0) gives 10 clients of 10 classes a share above 0.9 "
                   "each: every trial refuses it",
    "base": {"dataset": {"name": "digits"}, "partition": {"kind": "dirichlet", "alpha": 0.01, "min_share": 0.9},
             "model": {"name": "cnn"}, "algorithm": {"name": "fedavg"}, "rounds": 1, "seed": 0,
             "clients": {"num_clients": 10, "clients_per_round": 10, "local_epochs": 1, "batch_size": 16,
                         "lr": 0.05}},  # 10 clients of 10 classes: a mean share of 1.0 each
    "parameters": {"clients.batch_size": {"grid": [16]}},
    "search": {"searcher": "grid", "num_samples": 1, "seeds": [0], "metric": "val_accuracy"},
    "resources": {"cpu": 1},
}


def test_bad_input_only_the_trials_can_find_exits_2_with_its_line_in_every_cell(ray_local, tracking_uri, tmp_path,
                                                                                 capsys):
    """A value the data refuse (a seeded Dirichlet draw, found only as a trial partitions the data) fails every
    trial of every scenario cell: the sweep ends with its one line and exit 2, as bad input found at load does (it
    exited 1), every run closed. Real Ray, real MLflow. (One study: ``test_sweep.py::
    test_failed_trial_is_marked_failed``.)"""
    import yaml

    from platform.sweep.command import main
    from tests.conftest import mlflow_runs

    space = dict(REFUSED_BY_THE_DATA, scenarios={"clients.lr": [0.05, 0.1]})
    path = tmp_path / "refused.yaml"
    path.write_text(yaml.safe_dump(space))
    code = main([str(path), "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune"),
                 "--cache-dir", str(tmp_path / "cache")])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2, lines
    assert lines[-1] == ("error: partition.min_share: no Dirichlet draw gave every client a share > 0.9 after 10000 "
                         "tries; lower it or raise alpha (every trial failed on it)")
    _, runs = mlflow_runs(tracking_uri, "refused")
    assert len(runs) == 3 and all(r.info.status == "FAILED" for r in runs)
