"""Our `platform` package must behave exactly like the stdlib module it shadows."""
import importlib.util
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


def _stdlib_platform():
    path = os.path.join(os.path.dirname(os.__file__), "platform.py")
    spec = importlib.util.spec_from_file_location("_stdlib_platform_for_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["system", "machine", "python_version", "uname", "platform", "release"])
def test_reexports_match_stdlib(name):
    import platform

    assert hasattr(platform, "__path__"), "import platform must give fedsweep's package (installed .pth missing?)"
    assert getattr(platform, name)() == getattr(_stdlib_platform(), name)()


def test_heavy_libraries_import_from_repo_root():
    code = "import torch, ray, mlflow, optuna, platform; print(platform.__file__, platform.system())"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == os.path.join(REPO_ROOT, "platform", "__init__.py")


def test_sweep_help_works_from_any_directory(tmp_path):
    out = subprocess.run([sys.executable, "-m", "platform.sweep", "--help"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "search_spaces/<name>.yaml" in out.stdout and "--num-samples" in out.stdout
