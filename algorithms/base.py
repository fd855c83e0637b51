"""The interface every FL method implements, in plain PyTorch (no Ray, no MLflow).

One round, as the platform runs it::

    payload = algorithm.broadcast(server_state, sampled_clients)        # on the parameter server, once
    update_k = algorithm.client_update(payload, client_k)               # on client actors, per virtual client
    partial = reduce_updates([update_k, ...])                           # in each actor, if `summable`
    server_state = algorithm.aggregate(server_state, partials, ctx)     # on the parameter server

``broadcast`` may send weights, indices into public data or personalised targets; ``aggregate`` may
train on server-side data (distillation) using ``ServerContext``. Methods that keep per-client state
between rounds (MNFL, FedPA) keep it in ``ClientContext.state``; the actor that hosts the client holds it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Sequence

import torch
from torch import nn

from algorithms.common.training import LocalTraining


@dataclass
class ServerState:
    """Everything the parameter server must checkpoint to resume a run."""

    weights: torch.Tensor  # flat global model (see algorithms.common.weights)
    round: int = 0
    optimizer: dict = field(default_factory=dict)  # server optimiser state (e.g. momentum buffer)
    extra: dict = field(default_factory=dict)  # the algorithm's own server-side state


@dataclass
class ServerContext:
    """What the server side of an algorithm may use besides its state."""

    model: nn.Module  # built once; load weights into it for evaluation or server-side training
    server_lr: float
    server_momentum: float
    num_classes: int
    device: torch.device
    public_x: Optional[torch.Tensor] = None  # unlabelled public data, for distillation methods
    generator: Optional[torch.Generator] = None
    test_y: Optional[torch.Tensor] = None  # held-out test labels: for metrics of client ensembles (FedED)


@dataclass
class ClientContext:
    """One virtual client as an actor presents it to ``client_update``."""

    client_id: int
    x: torch.Tensor
    y: torch.Tensor
    model: nn.Module  # built once per actor and shared by all its virtual clients: load weights into it
    training: LocalTraining
    generator: torch.Generator  # batch order etc.; seeded by (training seed, round, client)
    noise_generator: torch.Generator  # DP or sampling noise; seeded by (noise seed, round, client)
    state: dict  # persistent per-client state across rounds
    device: torch.device
    public_x: Optional[torch.Tensor] = None  # unlabelled public data (distillation methods), shared by all clients
    test_x: Optional[torch.Tensor] = None  # the held-out test inputs (no labels): for ensemble-of-clients metrics

    @property
    def num_samples(self) -> int:
        return int(self.y.shape[0])


@dataclass
class ClientUpdate:
    """A client's result, or the weighted mean of several (see :func:`reduce_updates`)."""

    weight: float  # e.g. N_k
    tensors: dict[str, torch.Tensor]
    metrics: dict[str, float] = field(default_factory=dict)  # weighted means, e.g. train_loss
    num_clients: int = 1
    seconds: float = 0.0  # compute time spent producing it (summed when reduced); the runtime fills it in


def reduce_updates(updates: Sequence[ClientUpdate]) -> ClientUpdate:
    """Weighted mean of updates, weighted by ``weight``.

    Associative: the mean of partial means (each weighted by its weight sum) is the mean of all, so
    client actors can pre-reduce their clients and the server reduces the partial results again.
    """
    updates = [u for u in updates if u is not None]
    if not updates:
        raise ValueError("no client updates to reduce")
    total = float(sum(u.weight for u in updates))
    coeffs = [u.weight / total if total > 0 else 0.0 for u in updates]
    tensors = {key: sum(c * u.tensors[key] for c, u in zip(coeffs, updates)) for key in updates[0].tensors}
    return ClientUpdate(weight=total, tensors=tensors, metrics=mean_metrics(updates),
                        num_clients=sum(u.num_clients for u in updates), seconds=sum(u.seconds for u in updates))


def mean_metrics(updates: Sequence[ClientUpdate]) -> dict[str, float]:
    """The weight-weighted mean of each client metric (e.g. train_loss weighted by N_k)."""
    total = float(sum(u.weight for u in updates))
    keys = set().union(*(u.metrics for u in updates))
    if total <= 0:
        return {k: float(sum(u.metrics.get(k, 0.0) for u in updates) / len(updates)) for k in keys}
    return {k: float(sum(u.weight * u.metrics.get(k, 0.0) for u in updates) / total) for k in keys}


class Algorithm:
    """Base class: subclasses set ``name`` and ``Hyperparams`` and implement ``client_update``/``aggregate``."""

    name: ClassVar[str]
    Hyperparams: ClassVar[type]
    #: True when the server only needs the weighted mean of client updates, so actors may pre-reduce.
    #: Methods that need every client's model (FedKP) set False and receive one update per client.
    summable: ClassVar[bool] = True
    #: True when clients may run different architectures (``model.architectures``): the method exchanges
    #: predictions or distilled targets, never weights.
    heterogeneous_models: ClassVar[bool] = False
    #: True when clients predict on the test inputs (never labels) so the server can score their ensemble.
    clients_see_test_inputs: ClassVar[bool] = False
    #: True when ``client_update`` keeps something in ``client.state`` for the client's next round (e.g. a
    #: personalised model). Each client then always trains on the actor that holds its state, and the runtime
    #: does not start a round's training before the previous round has been reported. Storing state without
    #: declaring it is an error.
    keeps_client_state: ClassVar[bool] = False

    def __init__(self, hparams: Any = None):
        self.hp = hparams if hparams is not None else self.Hyperparams()

    def init_server_state(self, initial_weights: torch.Tensor, ctx: ServerContext) -> ServerState:
        return ServerState(weights=initial_weights.clone())

    def broadcast(self, state: ServerState, sampled_clients: Sequence[int]) -> dict:
        return {"weights": state.weights}

    def client_update(self, payload: dict, client: ClientContext) -> ClientUpdate:
        raise NotImplementedError

    def aggregate(self, state: ServerState, updates: Sequence[ClientUpdate], ctx: ServerContext) -> ServerState:
        raise NotImplementedError

    def client_stage_fields(self) -> dict:
        """What determines ``client_update``'s result besides data, model and local training settings.

        The platform caches one-round client stages under these values, so methods that share a client
        procedure (FedAvg, FedKP: plain local SGD) share cached clients. Default: this method's name and
        all its hyperparameters (safe: never shares wrongly).
        """
        return {"procedure": self.name, **dataclasses.asdict(self.hp)}

    def burn_in_rounds(self) -> int:
        """Server rounds before the method behaves as itself (FedPA, FedKPPA, SGLD: ``burnin_rounds``).

        Schedulers must not judge a trial before this many rounds plus a margin (spec/fedkp_fedpa.md §13).
        """
        return int(getattr(self.hp, "burnin_rounds", 0) or 0)

    def evaluation_weights(self, state: ServerState) -> torch.Tensor:
        """The flat weights of the model evaluated on the test set after each round."""
        return state.weights

    @classmethod
    def hyperparameter_docs(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(cls.Hyperparams)}
