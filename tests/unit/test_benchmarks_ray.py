"""Every benchmark starts a local Ray of its own (``address="local"``): a plain ``ray.init()`` joins any cluster a
``ray start`` runs on the machine (benchmarks/feded_learning.py did), which measures someone else's cluster
and may run trials on it."""
import ast
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _ray_inits(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text(), str(path))
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "init" and isinstance(node.func.value, ast.Name) and node.func.value.id == "ray"]


def _starts_a_local_instance(call: ast.Call) -> bool:
    for keyword in call.keywords:
        if keyword.arg == "address":
            return isinstance(keyword.value, ast.Constant) and keyword.value.value == "local"
        if keyword.arg is None and "ray_init_options" in ast.unparse(keyword.value):  # platform.cli's: address local
            return True
    return False


def test_every_benchmark_starts_its_own_local_ray():
    from platform.cli import ray_init_options

    assert ray_init_options(False)["address"] == "local"
    calls = {f"{path.name}:{call.lineno}": call for path in sorted(BENCHMARKS.glob("*.py")) for call in _ray_inits(path)}
    assert calls  # the check sees the benchmarks' ray.init calls
    joining = [where for where, call in calls.items() if not _starts_a_local_instance(call)]
    assert not joining, f"ray.init without address='local' (joins any cluster on the machine): {joining}"
