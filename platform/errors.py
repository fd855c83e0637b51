"""User-facing errors: one clear line, exit code 2, nothing written anywhere (defined in ``algorithms.errors``).

``algorithms.errors`` is loaded on its own, without the ``algorithms`` package (whose ``__init__`` imports every
method, and torch): the command-line entry points import this module first and start Ray before torch is imported
(``platform.cli.start_ray_early``). The package, once imported, finds the same module in ``sys.modules``, so there
is one ``UserError`` class.
"""
import sys as _sys


def _load_algorithms_errors():
    module = _sys.modules.get("algorithms.errors")
    if module is not None or "algorithms" in _sys.modules:
        import algorithms.errors as module

        return module
    import importlib.util
    import os

    spec = importlib.util.find_spec("algorithms")
    if spec is None or not spec.submodule_search_locations:
        import algorithms.errors as module

        return module
    path = os.path.join(list(spec.submodule_search_locations)[0], "errors.py")
    spec = importlib.util.spec_from_file_location("algorithms.errors", path)
    module = importlib.util.module_from_spec(spec)
    _sys.modules["algorithms.errors"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del _sys.modules["algorithms.errors"]
        raise
    return module


_errors = _load_algorithms_errors()
ConfigError = _errors.ConfigError
UserError = _errors.UserError
did_you_mean = _errors.did_you_mean
del _errors

__all__ = ["ConfigError", "UserError", "did_you_mean"]

