"""FL methods, one module per family, each a subclass of :class:`algorithms.base.Algorithm`.

Algorithms are pure PyTorch: they never touch Ray or MLflow, so each can be tested on its own.
"""
from algorithms.base import Algorithm, ClientContext, ClientUpdate, ServerContext, ServerState, reduce_updates
from algorithms.fedavg import FedAvg
from algorithms.fedprox import FedProx
from algorithms.fedkp import FedKP, FedKPCM, FedKPPA
from algorithms.fedpa import FedPA
from algorithms.sgld import SGLD
from algorithms.feded import FedED

ALGORITHMS: dict[str, type[Algorithm]] = {cls.name: cls for cls in (FedAvg, FedProx, FedKP, FedKPCM, FedKPPA, FedPA,
                                                                      SGLD, FedED)}

__all__ = ["ALGORITHMS", "Algorithm", "ClientContext", "ClientUpdate", "ServerContext", "ServerState",
           "reduce_updates"]
