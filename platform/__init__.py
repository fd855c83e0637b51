"""fedsweep's machinery package, which also stands in for the standard-library ``platform`` module.

The name is fixed by the product's layout and collides with the stdlib module. Everything the stdlib
module defines is re-exported here unchanged, so ``platform.system()`` and friends behave exactly as
before for Ray, torch, MLflow and everyone else. Keep this file light: it runs in every interpreter.
"""
import importlib.util as _importlib_util
import os as _os
import sys as _sys

_STDLIB_NAME = "_stdlib_platform"


def _load_stdlib_platform():
    module = _sys.modules.get(_STDLIB_NAME)
    if module is None:
        path = _os.path.join(_os.path.dirname(_os.__file__), "platform.py")
        spec = _importlib_util.spec_from_file_location(_STDLIB_NAME, path)
        module = _importlib_util.module_from_spec(spec)
        _sys.modules[_STDLIB_NAME] = module
        spec.loader.exec_module(module)
    return module


_stdlib = _load_stdlib_platform()
_IDENTITY = {"__name__", "__file__", "__path__", "__spec__", "__loader__", "__package__", "__builtins__",
             "__cached__", "__doc__"}
globals().update({k: v for k, v in vars(_stdlib).items() if k not in _IDENTITY})
del _IDENTITY
