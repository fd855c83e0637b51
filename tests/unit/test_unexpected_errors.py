"""An exception nobody expected, raised by a command's own process: one line saying what it was and where its
traceback is kept (the results home's ``logs/``), exit 1, no traceback on the console. A real interpreter running
``platform.cli.run_command``."""
import os
import subprocess
import sys

from tests.conftest import REPO_ROOT

COMMAND = ("from platform.cli import run_command\n"
           "def main(argv=None):\n"
           "    raise {error}\n"
           "run_command(main)\n")


def _run(tmp_path, error: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", COMMAND.format(error=error)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "FEDSWEEP_HOME": str(tmp_path)})


def test_an_unexpected_error_is_one_line_and_its_traceback_a_file(tmp_path):
    done = _run(tmp_path, "KeyError('no such stage')")
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: KeyError: 'no such stage' (traceback: ") and line.endswith(".log)"), line
    log = line.rsplit("(traceback: ", 1)[1][:-1]
    assert os.path.dirname(log) == str(tmp_path / "logs")
    assert "Traceback (most recent call last)" in open(log).read() and "no such stage" in open(log).read()

