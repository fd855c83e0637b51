"""FL methods, one module per family, each a subclass of :class:`algorithms.base.Algorithm` registered with
:func:`algorithms.base.register`.

Algorithms are pure PyTorch: they never touch Ray, MLflow or the ``platform`` package, so each can be tested on
its own. A method of your own needs no change here: see docs/how-to/adding_a_method.md.
"""
from algorithms.base import (ALGORITHMS, Algorithm, ClientContext, ClientUpdate, Metric, ServerContext, ServerState,
                             reduce_updates, register, resolve_algorithm)
# Each module registers its methods (@register) when imported.
from algorithms import fedavg, fedprox, fedkp, fedpa, sgld, feded, feddf, fedaux, mnfl, single_image  # noqa: F401,E402
from algorithms import mnfl_baselines, pfeddf  # noqa: F401,E402
# An attribute of the package even when platform.errors loaded the module on its own, before this package.
from algorithms import errors  # noqa: F401,E402

__all__ = ["ALGORITHMS", "Algorithm", "ClientContext", "ClientUpdate", "Metric", "ServerContext", "ServerState",
           "reduce_updates", "register", "resolve_algorithm"]
