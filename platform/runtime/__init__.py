"""Ray runtime: a parameter-server actor, a pool of client actors, and the round loop that drives them.

The names below load on first use, so the actor classes (:mod:`platform.runtime.actors`) import without Ray.
"""
import importlib as _importlib

_LAZY = {"Federation": "federation", "SharedData": "federation", "share_dataset": "federation",
         "Placement": "placement"}
__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(_importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
