"""The house rules of ``platform/`` (docs/explanation/architecture.md), read off the source: imports run one way
between the layers, there is no import circle (imports inside functions included), no module is over 600 lines and
no folder holds more than 12 modules."""
import ast
import os
from collections import defaultdict

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_LINES = 600
MAX_ENTRIES = 12

# Lowest first. A module may import from its own floor and below, never above. Packages on one floor do not import
# each other unless listed in SIDEWAYS.
FLOORS = {
    "platform": 0, "platform._boot": 0, "platform.errors": 0, "platform.reaper": 0,
    "platform.cli": 1,
    "platform.config": 2, "platform.stages": 2,
    "platform.data": 3,
    "platform.runtime": 4, "platform.results": 4,
    "platform.preflight": 5,
    "platform.run": 6, "platform.report": 6, "platform.sweep": 6,
}
SIDEWAYS: set[tuple[str, str]] = set()


def _modules() -> dict[str, str]:
    found = {}
    for package in ("platform", "algorithms"):
        for directory, dirs, files in os.walk(os.path.join(REPO, package)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(directory, name)
                    module = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
                    found[module.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _imports(module: str, path: str) -> set[str]:
    """Every module of ours that ``module`` imports, anywhere in its body (functions included)."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    resolved = set()
    for name in names:
        parts = name.split(".")
        while parts and ".".join(parts) not in MODULES:
            parts.pop()
        target = ".".join(parts)
        # a module importing its own package (the package face) or a package importing its own modules is no edge
        if target and target != module and not module.startswith(target + ".") and not target.startswith(module + "."):
            resolved.add(target)
    return resolved


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _floor(module: str) -> tuple[str, int]:
    parts = module.split(".")
    while parts:
        key = ".".join(parts)
        if key in FLOORS:
            return key, FLOORS[key]
        parts.pop()
    raise AssertionError(f"{module} is on no floor: add its package to FLOORS "
                         f"(and to docs/explanation/architecture.md)")


def test_every_import_runs_down_the_layers():
    wrong = []
    for module, targets in GRAPH.items():
        if not module.startswith("platform."):
            continue
        home, floor = _floor(module)
        for target in targets:
            if not target.startswith("platform"):
                continue
            there, target_floor = _floor(target)
            if there == home or target_floor < floor or (home, there) in SIDEWAYS:
                continue
            wrong.append(f"{module} (floor {floor}) imports {target} (floor {target_floor})")
    assert not wrong, "\n".join(sorted(wrong))


def test_config_imports_nothing_of_the_platform_but_the_errors():
    for module, targets in GRAPH.items():
        if module.startswith("platform.config"):
            ours = {t for t in targets if t.startswith("platform") and not t.startswith("platform.config")}
            assert ours <= {"platform.errors"}, f"{module} imports {sorted(ours)}"


def test_algorithms_never_import_the_platform():
    for module, targets in GRAPH.items():
        if module.startswith("algorithms"):
            assert not [t for t in targets if t.startswith("platform")], f"{module} imports the platform"


def private_imports() -> list[str]:
    """``from platform.x import _name`` across modules: each module shows its neighbours a public surface, and a
    name with a leading underscore is its own business."""
    found = []
    for module, path in MODULES.items():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("platform",
                                                                                              "algorithms"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__") and node.module != module:
                        found.append(f"{module} imports {node.module}.{alias.name}")
    return found


def test_no_module_imports_another_modules_private_name():
    assert not private_imports(), "\n".join(private_imports())


def test_no_import_circle():
    index, low, stack, on_stack, circles, counter = {}, {}, [], set(), [], [0]

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in GRAPH:
        if node not in index:
            visit(node)
    assert not circles, circles


@pytest.mark.parametrize("package", ["platform", "algorithms"])
def test_no_module_over_600_lines(package):
    long = {m: sum(1 for _ in open(p, encoding="utf-8")) for m, p in MODULES.items() if m.startswith(package)}
    assert not {m: n for m, n in long.items() if n > MAX_LINES}


def test_no_folder_of_platform_holds_more_than_12_modules():
    for directory, dirs, files in os.walk(os.path.join(REPO, "platform")):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith("_")]
        entries = [f for f in files if f.endswith(".py") and f != "__init__.py"] + dirs
        assert len(entries) <= MAX_ENTRIES, f"{os.path.relpath(directory, REPO)}: {sorted(entries)}"


def test_the_rules_can_fail():
    """The graph is really read: known edges are in it (a broken reader would pass every rule above)."""
    assert "platform.errors" in GRAPH["platform.cli"]
    assert "platform.config.experiment" in GRAPH["platform.preflight"]
    assert _floor("platform.sweep.command") == ("platform.sweep", 6) and _floor("platform.cli") == ("platform.cli", 1)
