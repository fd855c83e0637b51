"""Bad input that used to pass a check or end in a traceback: a store that is no SQLite database (a device, a text
file, a directory) or an empty URI, a binary or non-UTF-8 space file, a YAML key given twice, a count in hex, octal
or with underscores, an empty section on --set, counts without bound, and a cluster address nothing answers at.
Each is exit 2 and one line, ``error: <field>: <what is wrong; what is allowed>``, with nothing written: neither in
the working directory nor in the results home ($FEDSWEEP_HOME, an empty directory of its own), with
MLFLOW_TRACKING_URI unset.

Every case calls the command's ``main()`` in this process (no Ray starts: each is refused before); a handful run as
a user would, in a fresh interpreter, where the exit status and all of stderr are the command's own."""
import importlib
import os

import pytest
import yaml

from tests.conftest import REPO_ROOT, run_cli

# (command, its arguments, the start of the one line); {inputs} is a directory of the bad files (see _inputs)
CASES = {
    "tracking store is a device": (["platform.sweep", "smoke", "--tracking-uri", "sqlite:////dev/null"],
                                   "error: --tracking-uri: /dev/null is a device, not a SQLite database; give a "
                                   "SQLite database file, or a new file in a writable directory"),
    "tracking store is a text file": (["platform.sweep", "smoke", "--tracking-uri", "sqlite:///{inputs}/notes.db"],
                                      "error: --tracking-uri: {inputs}/notes.db is not a SQLite database"),
    "tracking store is a directory": (["platform.sweep", "smoke", "--tracking-uri", "sqlite:///{inputs}"],
                                      "error: --tracking-uri: {inputs} is a directory; give the database file in "
                                      "it, e.g. sqlite:///{inputs}/mlflow.db"),
    "tracking URI empty": (["platform.sweep", "smoke", "--tracking-uri", ""], "error: --tracking-uri: is empty; give "),
    "optuna storage is a device": (["platform.sweep", "smoke", "--optuna-storage", "sqlite:////dev/null"],
                                   "error: --optuna-storage: /dev/null is a device, not a SQLite database"),
    "optuna storage is a text file": (["platform.sweep", "smoke", "--optuna-storage", "sqlite:///{inputs}/notes.db"],
                                      "error: --optuna-storage: {inputs}/notes.db is not a SQLite database"),
    "optuna storage is a directory": (["platform.sweep", "smoke", "--optuna-storage", "sqlite:///{inputs}"],
                                      "error: --optuna-storage: {inputs} is a directory"),
    "optuna storage empty": (["platform.sweep", "smoke", "--optuna-storage", ""],
                             "error: --optuna-storage: is empty; give an RDB URL"),
    "optuna study beside the store is a text file": (
        ["platform.sweep", "smoke", "--tracking-uri", "sqlite:///{inputs}/store/mlflow.db"],
        "error: --optuna-storage: {inputs}/store/optuna.db is not a SQLite database"),
    "storage path empty": (["platform.sweep", "smoke", "--storage-path", ""], "error: --storage-path: is empty"),
    "run: tracking store is a device": (["platform.run", "smoke", "--tracking-uri", "sqlite:////dev/null"],
                                        "error: --tracking-uri: /dev/null is a device, not a SQLite database"),
    "run: tracking URI empty": (["platform.run", "smoke", "--tracking-uri", ""], "error: --tracking-uri: is empty"),
    "report: tracking store is a text file": (["platform.report", "smoke", "--tracking-uri",
                                               "sqlite:///{inputs}/notes.db"],
                                              "error: --tracking-uri: {inputs}/notes.db is not a SQLite database"),
    "report: tracking URI empty": (["platform.report", "smoke", "--tracking-uri", ""],
                                   "error: --tracking-uri: is empty"),
    "space file not UTF-8": (["platform.sweep", "{inputs}/latin1.yaml"],
                             "error: {inputs}/latin1.yaml: not UTF-8 text (byte 0xe9 on line 2); a config or search "
                             "space is a UTF-8 YAML text file"),
    "space file binary": (["platform.sweep", "{inputs}/binary.yaml"],
                          "error: {inputs}/binary.yaml: a binary file (a NUL byte on line 2), not YAML"),
    "run: experiment file binary": (["platform.run", "{inputs}/binary.yaml"], "error: {inputs}/binary.yaml: a binary"),
    "space key twice": (["platform.sweep", "{inputs}/twice.yaml"],
                        "error: rounds: given twice in {inputs}/twice.yaml (lines 3 and 6); a mapping takes each key "
                        "once: keep one"),
    "experiment key twice": (["platform.run", "{inputs}/twice_experiment.yaml"],
                             "error: lr: given twice in {inputs}/twice_experiment.yaml (lines 3 and 5)"),
    "space count in hex": (["platform.sweep", "{inputs}/hex.yaml"],
                           "error: {inputs}/hex.yaml: line 4: 0x3 is not a plain decimal integer (YAML 1.1 reads it "
                           "as 3); write it in decimal digits"),
    "num samples too many": (["platform.sweep", "smoke", "--num-samples", "1000000000000"],
                             "error: --num-samples: must be an integer from 1 to 100000, got 1000000000000"),
    "space num_samples too many": (["platform.sweep", "{inputs}/many.yaml"],
                                   "error: search.num_samples: must be <= 100000, got 1000000000000"),
    "repeats too many": (["platform.sweep", "smoke", "--repeats", "1001"],
                         "error: --repeats: must be an integer from 1 to 1000, got 1001"),
    "repeats 0": (["platform.sweep", "smoke", "--repeats", "0"], "error: --repeats: must be an integer from 1 to 1000"),
    "--set count in hex": (["platform.sweep", "smoke", "--set", "rounds=0x3"],
                           "error: --set rounds: 0x3 is not a plain decimal integer (YAML 1.1 reads it as 3)"),
    "--set count in octal": (["platform.run", "smoke", "--set", "rounds=010"],
                             "error: --set rounds: 010 is not a plain decimal integer (YAML 1.1 reads it as 8)"),
    "--set count with underscores": (["platform.sweep", "smoke", "--set", "clients.num_clients=1_000"],
                                     "error: --set clients.num_clients: 1_000 is not a plain decimal integer"),
    "--set empty section": (["platform.sweep", "smoke", "--set", "clients={}"],
                            "error: --set clients: an empty mapping would reset the whole section to its defaults; "
                            "set one value of it with --set clients.<key>=<value>"),
    "--set key twice in a mapping": (["platform.run", "smoke", "--set", "public={source: none, source: dataset}"],
                                     "error: --set public: source is given twice; give each key once"),
    "address nothing answers at": (["platform.sweep", "smoke", "--address", "127.0.0.1:1"],
                                   "error: --address: no Ray cluster at 127.0.0.1:1 (tried a TCP connect to "
                                   "127.0.0.1:1: "),
    "address not host:port": (["platform.run", "smoke", "--address", "nowhere"],
                              "error: --address: 'nowhere' is not a cluster address; allowed: host:port"),
    "address empty": (["platform.sweep", "smoke", "--address", ""], "error: --address: is empty"),
}

# Run in a fresh interpreter too: one per path in the fast tier (a store, the --set values, the cluster address),
# the rest in the slow one
FAST_END_TO_END = ("tracking store is a device", "--set count in hex", "address nothing answers at")
SLOW_END_TO_END = ("space file not UTF-8", "num samples too many", "experiment key twice",
                   "report: tracking URI empty", "optuna storage is a text file")

COMMAND_MODULES = {"platform.sweep": "platform.sweep.command"}  # python -m platform.sweep runs this main()


def _inputs(directory) -> str:
    """The bad files the cases name, in ``directory``."""
    (directory / "notes.db").write_text("not a database\n")
    (directory / "store").mkdir()
    (directory / "store" / "optuna.db").write_text("not a database either\n")
    (directory / "latin1.yaml").write_bytes("description: one\ncaveat: caf\xe9\n".encode("latin-1"))
    (directory / "binary.yaml").write_bytes(b"base:\n\x00\x01\x02\xff")
    (directory / "twice.yaml").write_text("base:\n  seed: 0\n  rounds: 3\n  clients: {lr: 0.1}\n"
                                          "  algorithm: {name: fedavg}\n  rounds: 5\nparameters: {}\n")
    (directory / "twice_experiment.yaml").write_text("rounds: 2\nclients:\n  lr: 0.1\n  batch_size: 16\n  lr: 0.2\n")
    (directory / "hex.yaml").write_text("description: counts in hex\nbase:\n  seed: 0\n  rounds: 0x3\n")
    space = yaml.safe_load(open(os.path.join(REPO_ROOT, "search_spaces", "smoke.yaml")))
    space["search"]["num_samples"] = 10 ** 12
    (directory / "many.yaml").write_text(yaml.safe_dump(space))
    return str(directory)


def _check_refused(case: str, code: int, stderr: str, expected: str, home, cwd, inputs: str, before: list) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, f"{case}: exit {code}\n{stderr}"
    assert len(lines) == 1, f"{case}: {stderr}"
    assert lines[0].startswith(expected.replace("{inputs}", inputs)), f"{case}: {lines[0]}"
    assert os.listdir(home) == [], f"{case} wrote {os.listdir(home)} in the results home"
    assert os.listdir(cwd) == [], f"{case} wrote {os.listdir(cwd)} in the working directory"
    assert sorted(os.listdir(inputs)) == before, f"{case} wrote beside its inputs"


@pytest.fixture
def places(tmp_path_factory):
    """(results home, working directory, inputs directory, its listing): the first two empty."""
    inputs = _inputs(tmp_path_factory.mktemp("inputs"))
    return tmp_path_factory.mktemp("home"), tmp_path_factory.mktemp("cwd"), inputs, sorted(os.listdir(inputs))


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_in_one_line_with_nothing_written(case, places, monkeypatch, capsys):
    home, cwd, inputs, before = places
    (module, *args), expected = CASES[case]
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("FEDSWEEP_HOME", str(home))
    for variable in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS", "FEDSWEEP_OPTUNA_STORAGE", "FEDSWEEP_STORAGE",
                     "FEDSWEEP_CACHE"):
        monkeypatch.delenv(variable, raising=False)
    main = importlib.import_module(COMMAND_MODULES.get(module, module)).main
    code = main([a.replace("{inputs}", inputs) for a in args])
    _check_refused(case, code, capsys.readouterr().err, expected, home, cwd, inputs, before)


@pytest.mark.parametrize("case", [*FAST_END_TO_END,
                                  *(pytest.param(c, marks=pytest.mark.slow) for c in SLOW_END_TO_END)])
def test_refused_in_one_line_as_a_user_runs_it(case, places):
    """The command in a fresh interpreter: its exit status and all of its stderr (no traceback, no line of Ray's or
    a library's). A generous timeout only: a refusal takes well under a second where it needs no torch."""
    home, cwd, inputs, before = places
    (module, *args), expected = CASES[case]
    done = run_cli(module, *[a.replace("{inputs}", inputs) for a in args], cwd=str(cwd), timeout=120,
                   env={"FEDSWEEP_HOME": str(home), "MLFLOW_TRACKING_URI": "", "RAY_ADDRESS": ""})
    assert not done.stdout.strip(), done.stdout
    _check_refused(case, done.returncode, done.stderr, expected, home, cwd, inputs, before)


def test_a_database_a_new_file_and_an_empty_file_are_accepted(tmp_path):
    """The check refuses what is no database and nothing else: a real SQLite database, a file that does not exist yet
    and an empty file (SQLite writes its header on first use) all pass; a header cut short and a FIFO do not."""
    import sqlite3

    from platform.errors import UserError
    from platform.results.tracking import check_sqlite_file, check_tracking_uri

    with sqlite3.connect(tmp_path / "real.db") as db:
        db.execute("create table runs (id integer)")
    check_tracking_uri(f"sqlite:///{tmp_path / 'real.db'}")
    check_tracking_uri(f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}")
    (tmp_path / "empty.db").write_bytes(b"")
    check_sqlite_file(str(tmp_path / "empty.db"), "--optuna-storage", "optuna.db")
    (tmp_path / "short.db").write_bytes(b"SQLite")
    with pytest.raises(UserError, match=r"^--optuna-storage: .*short.db is not a SQLite database"):
        check_sqlite_file(str(tmp_path / "short.db"), "--optuna-storage", "optuna.db")
    os.mkfifo(tmp_path / "fifo.db")
    with pytest.raises(UserError, match=r"^--tracking-uri: .*fifo.db is a FIFO, not a SQLite database"):
        check_tracking_uri(f"sqlite:///{tmp_path / 'fifo.db'}")
