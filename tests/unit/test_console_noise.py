"""The sweep's console holds the sweep's own lines: what a library says about itself is kept out of it."""
from __future__ import annotations

import os
import subprocess
import sys


def _run(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_COLOR_PREFIX"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)


def test_optunas_already_reported_step_is_not_shown_on_resume():
    """Tune replays a restored trial's results to the Optuna searcher on --resume; optuna.trial.Trial.report warns
    for each step it already holds. A real study, a real trial: the warning is raised, and not printed."""
    code = ("import optuna\nfrom platform.cli import quiet_libraries\nquiet_libraries()\n"
            "study = optuna.create_study()\ntrial = study.ask()\ntrial.report(0.5, step=1)\ntrial.report(0.5, step=1)\n"
            "print('done')")
    out = _run(code)
    assert out.stdout.strip() == "done"
    assert "already reported" not in out.stderr
    # without the filter, the same script prints the warning: the test can fail
    bare = _run(code.replace("quiet_libraries()\n", ""))
    assert "is already reported" in bare.stderr


def test_lines_ray_forwards_carry_no_colour_codes():
    out = _run("import os\nfrom platform.cli import quiet_libraries\nquiet_libraries()\n"
               "print(os.environ.get('RAY_COLOR_PREFIX'))")
    assert out.stdout.strip() == "0"
