"""A store on procfs or sysfs, where root's ``os.access`` says yes but no file can be created: the
command, run as a user would, exits 2 with one line naming the flag, before Ray starts, and writes no MLflow run
(the private store stays empty) and nothing else."""
import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import run_cli

SWEEP = ["platform.sweep", "smoke", "--set", "rounds=1", "--num-samples", "1", "--address", "local"]
RUN = ["platform.run", "smoke", "--set", "rounds=1", "--address", "local"]

# (command, the flag under test and its value, the start of the one line); {tmp} is the test's directory
CASES = {
    "sweep storage on procfs": (SWEEP, ["--storage-path", "/proc/x"],
                                "error: --storage-path: /proc/x is not writable (cannot create a file in /proc"),
    "sweep storage on sysfs": (SWEEP, ["--storage-path", "/sys/x"],
                               "error: --storage-path: /sys/x is not writable (cannot create a file in /sys"),
    "sweep cache on procfs": (SWEEP, ["--cache-dir", "/proc/x"],
                              "error: --cache-dir: /proc/x is not writable (cannot create a file in /proc"),
    "sweep tracking store on procfs": (SWEEP, ["--tracking-uri", "sqlite:////proc/m.db"],
                                       "error: --tracking-uri: /proc is not writable (cannot create a file in /proc"),
    "sweep tracking store under procfs": (SWEEP, ["--tracking-uri", "sqlite:////proc/nonexistent/dir/m.db"],
                                          "error: --tracking-uri: /proc/nonexistent/dir is not writable"),
    "sweep optuna storage on procfs": (SWEEP, ["--optuna-storage", "sqlite:////proc/optuna.db"],
                                       "error: --optuna-storage: directory /proc is not writable"),
    "run cache on procfs": (RUN, ["--cache-dir", "/proc/x"],
                            "error: --cache-dir: /proc/x is not writable (cannot create a file in /proc"),
    "run tracking store on sysfs": (RUN, ["--tracking-uri", "sqlite:////sys/m.db"],
                                    "error: --tracking-uri: /sys is not writable (cannot create a file in /sys"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_store_no_file_can_be_created_in_is_one_line_and_no_run(case, tmp_path, tracking_uri):
    (module, *command), given, expected = CASES[case]
    flags = {"--tracking-uri": tracking_uri, "--storage-path": str(tmp_path / "tune"),
             "--cache-dir": str(tmp_path / "cache")}
    if module == "platform.run":
        del flags["--storage-path"]
    flags.update(dict(zip(given[::2], given[1::2])))
    args = [*command, *[part for pair in flags.items() for part in pair]]
    done = run_cli(module, *args, cwd=str(tmp_path), env={"MLFLOW_TRACKING_URI": "", "FEDSWEEP_HOME": str(tmp_path)},
                   timeout=300)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(lines) == 1 and lines[0].startswith(expected), done.stderr
    assert "Traceback" not in done.stdout + done.stderr and not done.stdout.strip(), done.stdout
    # the private store: not one experiment or run was written (the default experiment only, as MLflow made it)
    client = MlflowClient(tracking_uri=tracking_uri)
    experiments = client.search_experiments()
    assert [e.name for e in experiments] == ["Default"], [e.name for e in experiments]
    assert client.search_runs([e.experiment_id for e in experiments]) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]  # no Tune directory, cache or results home


def test_platform_run_probes_the_cache_named_by_the_environment(tmp_path, tracking_uri):
    """$FEDSWEEP_CACHE is the cache platform.run opens when no --cache-dir is given: it is probed too, and the one
    line names the variable."""
    done = run_cli(*RUN, "--tracking-uri", tracking_uri, cwd=str(tmp_path), timeout=300,
                   env={"MLFLOW_TRACKING_URI": "", "FEDSWEEP_HOME": str(tmp_path), "FEDSWEEP_CACHE": "/proc/x"})
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: FEDSWEEP_CACHE: /proc/x is not writable"), done.stderr
    client = MlflowClient(tracking_uri=tracking_uri)
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []
