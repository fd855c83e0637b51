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
one_line = _errors.one_line
del _errors


class EnvironmentFault(Exception):
    """What the machine did, not the input: a full disk, a store locked by another process past its wait, the loss
    of the driver's own Ray node. ``str()`` is the one line the command prints (after ``error: ``)."""


def exception_chain(err: BaseException) -> list:
    """``err`` and every exception it wraps: ``__cause__``, ``__context__``, Ray's ``cause`` (a trial's
    ``RayTaskError``) and SQLAlchemy's ``orig`` (the driver's own error)."""
    seen, todo, found = set(), [err], []
    while todo:
        item = todo.pop(0)
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        found.append(item)
        todo += [getattr(item, "cause", None), getattr(item, "orig", None), item.__cause__, item.__context__]
    return found


def disk_full(err: BaseException):
    """When ``err`` (or what it wraps) is a write that found no space -- ENOSPC, SQLite's "database or disk is full",
    a message of pyarrow's or Ray's saying "No space left on device" -- the file it named ("" when none); else
    None."""
    import errno

    for item in exception_chain(err):
        if isinstance(item, OSError) and item.errno == errno.ENOSPC:
            return str(item.filename or "")
        if any(text in str(item) for text in ("No space left on device", "database or disk is full")):
            return ""
    return None


def store_locked(err: BaseException) -> bool:
    """Whether ``err`` (or what it wraps) is SQLite's "database is locked": another process holds the file's lock."""
    return any("database is locked" in str(item) for item in exception_chain(err))


def error_line(err: BaseException) -> str:
    """What an unexpected exception was, in one line: the line of an :class:`~platform.errors.EnvironmentFault` in
    its chain, a full disk (the directory of the file it failed to write), a SQLite store locked by another process,
    else its type and the first line of its message."""
    import os

    fault = next((item for item in exception_chain(err) if isinstance(item, EnvironmentFault)), None)
    if fault is not None:  # found anywhere: Tune raises its own error while handling a callback's
        return one_line(str(fault))
    full = disk_full(err)
    if full is not None:
        return f"the disk holding {os.path.dirname(full) if full else 'a file it writes'} is full (ENOSPC)"
    if store_locked(err):
        return "a SQLite store is locked by another process (database is locked)"
    first = (str(err).strip().splitlines() or [""])[0]
    return one_line(f"{type(err).__name__}: {first}" if first else type(err).__name__)


__all__ = ["ConfigError", "EnvironmentFault", "UserError", "did_you_mean", "disk_full", "error_line",
           "exception_chain", "one_line", "store_locked"]

