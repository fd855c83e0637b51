"""The one-machine, two-node recipe of ``clusters/local.md`` as argument lists: the end-to-end tests start their
cluster from it (``tests/e2e/conftest.py``) and ``tests/unit/test_clusters.py`` checks it, so the tested recipe is the
documented one."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[1] / "clusters" / "local.md"
# The ports a test swaps for free ones (another cluster on the machine, a parallel test run, may hold the documented)
PORT_FLAGS = ("--port", "--dashboard-port", "--ray-client-server-port")


def commands(path: Path = RECIPE) -> list[list[str]]:
    """Every command of the recipe's first ``bash`` block, split as the shell would (comments dropped)."""
    block = re.search(r"```bash\n(.*?)```", path.read_text(), re.S)
    assert block, f"no ```bash block in {path}"
    return [words for line in block.group(1).splitlines() if (words := shlex.split(line, comments=True))]


def ray_starts(path: Path = RECIPE) -> tuple[list[str], list[str]]:
    """The arguments after ``ray start`` of the head's command and of the (first) second node's."""
    starts = [c[2:] for c in commands(path) if c[:2] == ["ray", "start"]]
    heads = [s for s in starts if "--head" in s]
    workers = [s for s in starts if "--head" not in s]
    assert len(heads) == 1 and workers, f"{path}: expected one `ray start --head` and a `ray start --address`"
    return heads[0], workers[0]


def flags(args: list[str]) -> dict:
    """``--name=value`` (or ``--name value``) as {name: value}; a bare flag as {name: None}."""
    out: dict = {}
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if not eq and i + 1 < len(args) and not args[i + 1].startswith("--"):
            value, i = args[i + 1], i + 1
        out[name] = value if (eq or value) else None
        i += 1
    return out


def replaced(args: list[str], values: dict) -> list[str]:
    """``args`` (``--name=value`` form) with the values of the flags in ``values`` replaced."""
    out = []
    for arg in args:
        name = arg.partition("=")[0]
        out.append(f"{name}={values[name]}" if name in values else arg)
    return out
