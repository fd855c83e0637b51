"""The interface every FL method implements, in plain PyTorch (no Ray, no MLflow).

One round, as the platform runs it (cf. Flower's strategy: configure, fit, aggregate, evaluate)::

    payload = algorithm.broadcast(server_state, sampled_clients)            # on the parameter server, once
    update_k = algorithm.client_update(payload, client_k)                   # on client actors, per virtual client
    scores_k = algorithm.client_evaluate(payload, client_k)                 # only if ``evaluates_clients``
    partial = reduce_updates([update_k, ...])                               # in each actor, per architecture, if
                                                                            # ``summable``
    server_state, metrics = algorithm.aggregate(server_state, partials, ctx)  # on the parameter server

The runtime owns the round counter (``ServerState.round`` counts completed rounds; algorithms read it, never
set it), evaluates the global model(s) on the server's validation and test splits, and reports the
metrics ``aggregate`` returns. ``broadcast`` may send weights, indices into public data or personalised
targets; ``aggregate`` may train on server-side data (distillation) using :class:`ServerContext`.

Per-client state (a personalised model, an optimiser) lives in ``ClientContext.state``: a dict the runtime
loads from its client-state store before ``client_update`` and saves after it; methods that use it declare
``keeps_client_state``. Random numbers come from the contexts' generators only: ``generator`` (batch order; the
training seed), ``augment_generator`` (``clients.augment``'s crops and flips; the training seed, its own stream)
and ``noise_generator`` (DP and Langevin noise; the noise seed), so a sweep over a noise scale redraws only the
noise and switching augmentation on leaves the batch order as it was.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Optional, Sequence, TypeVar, Union

import torch
from torch import nn

from algorithms.common.training import LocalTraining
from algorithms.common.weights import get_flat_weights

#: A global model as the server holds it: one flat vector, or one per architecture (model-heterogeneous runs).
GlobalWeights = Union[torch.Tensor, dict[str, torch.Tensor]]

T = TypeVar("T")


def compute_now(name: str, key: dict, compute: Callable[[], T]) -> T:
    """The memo used without the platform's stage cache: computes every time."""
    return compute()


#: ``memo(name, key, compute)``: the result of ``compute()``, cached across trials by the platform's stage cache
#: under ``name``, the method's ``key`` (exactly the hyperparameters the result depends on, e.g. ``{"lam": λ}``),
#: the code of the method's module and the data the context holds (dataset, partition, public data, models,
#: pre-training, seeds, and on a client its id). One-shot work (FedAUX's scoring solve, features of public data)
#: runs once per distinct key for the whole sweep. Results must be picklable tensors/arrays/dicts.
Memo = Callable[[str, dict, Callable[[], Any]], Any]


@dataclass
class ServerState:
    """Everything the parameter server must checkpoint to resume a run.

    ``weights`` is the global model: a flat vector (see :mod:`algorithms.common.weights`), a dict
    architecture → flat vector for methods that keep one global model per architecture, or None for methods
    with no global model (purely personalised ones, judged by ``client_evaluate``).
    """

    weights: Optional[GlobalWeights]
    round: int = 0  # completed rounds; set by the runtime after each aggregate
    optimizer: dict = field(default_factory=dict)  # server optimiser state (e.g. momentum buffer)
    extra: dict = field(default_factory=dict)  # the algorithm's own server-side state


@dataclass
class ServerContext:
    """What the server side of an algorithm may use besides its state."""

    models: dict[str, nn.Module]  # one built model per architecture (the server's and every client's)
    architecture: str  # the server model's architecture (model.name)
    architecture_clients: dict[str, int]  # clients per client architecture ({model.name: K} when homogeneous)
    server_lr: float
    server_momentum: float
    num_classes: int
    device: torch.device
    training_generator: torch.Generator  # server-side batch order (distillation); seeded by the training seed
    noise_generator: torch.Generator  # server-side noise (DP); seeded by the noise seed
    public_x: Optional[torch.Tensor] = None  # unlabelled public data, for distillation methods
    val_x: Optional[torch.Tensor] = None  # the server's validation split (from the training pool)
    val_y: Optional[torch.Tensor] = None
    test_y: Optional[torch.Tensor] = None  # held-out test labels: for metrics of client ensembles (FedED)
    memo: Memo = compute_now  # cross-trial cache for one-shot server work (see :data:`Memo`)

    @classmethod
    def for_models(cls, models: dict[str, nn.Module], architecture_clients: dict[str, int], *,
                   architecture: Optional[str] = None, server_lr: float = 1.0, server_momentum: float = 0.0,
                   num_classes: int = 10, device: torch.device = torch.device("cpu"), seed: int = 0,
                   **fields: Any) -> "ServerContext":
        """A context without the platform (tests, notebooks): one model per architecture, ``architecture`` the
        server's (default: the first of ``models``), generators seeded from ``seed`` (training) and ``seed + 1``
        (noise) unless given in ``fields``."""
        fields.setdefault("training_generator", torch.Generator().manual_seed(seed))
        fields.setdefault("noise_generator", torch.Generator().manual_seed(seed + 1))
        return cls(models=models, architecture=architecture or next(iter(models)),
                   architecture_clients=architecture_clients, server_lr=server_lr, server_momentum=server_momentum,
                   num_classes=num_classes, device=device, **fields)

    @classmethod
    def for_model(cls, model: nn.Module, **options: Any) -> "ServerContext":
        """A homogeneous context around one model (architecture ``"model"``); options as :meth:`for_models`."""
        return cls.for_models({"model": model}, {"model": 1}, **options)

    @property
    def model(self) -> nn.Module:
        """The server model (architecture ``model.name``)."""
        return self.models[self.architecture]

    @property
    def heterogeneous(self) -> bool:
        """True when the clients do not all run the server's architecture."""
        return set(self.architecture_clients) != {self.architecture}


@dataclass
class ClientContext:
    """One virtual client as an actor presents it to ``client_update`` and ``client_evaluate``."""

    client_id: int
    x: torch.Tensor  # the client's training split
    y: torch.Tensor
    model: nn.Module  # built once per actor per architecture and shared by its virtual clients: load weights into it
    training: LocalTraining
    generator: torch.Generator  # batch order etc.; seeded by (training seed, round, client)
    noise_generator: torch.Generator  # DP or sampling noise; seeded by (noise seed, round, client)
    state: dict  # persistent per-client state across rounds (declare ``keeps_client_state``)
    device: torch.device
    architecture: str = "model"  # the client's model architecture (model.architectures; model.name if homogeneous)
    val_x: Optional[torch.Tensor] = None  # the client's own validation split (partition.val_fraction)
    val_y: Optional[torch.Tensor] = None
    test_x: Optional[torch.Tensor] = None  # the client's own test split (partition.test_fraction)
    test_y: Optional[torch.Tensor] = None
    public_x: Optional[torch.Tensor] = None  # unlabelled public data (distillation methods), shared by all clients
    global_test_x: Optional[torch.Tensor] = None  # the server's test inputs (no labels), if ``clients_see_test_inputs``
    #: the stream torch's global generator is seeded with before this client's ``client_update`` (dropout draws
    #: from it), as a generator of its own: batched training (:meth:`Algorithm.client_update_many`) draws each
    #: client's dropout masks from it, so both paths draw the same masks. None outside the platform.
    dropout_generator: Optional[torch.Generator] = None
    #: ``clients.augment``'s crops and flips (pass it to ``train_local`` as ``augment_generator``): seeded by
    #: (training seed, round, client, an augmentation key), a stream of its own, so augmentation does not change the
    #: batch order ``generator`` draws. None outside the platform (then ``training.augment`` must be ``none``).
    augment_generator: Optional[torch.Generator] = None
    #: the flat weights ``model`` had when built (the seeded initialisation of its architecture): where a
    #: personalised model starts. ``model`` itself holds whatever the previous client on this actor left in it.
    initial_weights: Optional[torch.Tensor] = None
    memo: Memo = compute_now  # cross-trial cache for one-shot client work (see :data:`Memo`)

    @property
    def num_samples(self) -> int:
        return int(self.y.shape[0])


@dataclass(frozen=True)
class Setting:
    """What the platform knows about an experiment when its config loads, before any data is read: an
    algorithm's :meth:`Algorithm.check_setting` refuses settings it cannot run (one :class:`ConfigError`)."""

    num_clients: int
    rounds: int
    input_shape: Optional[tuple[int, ...]] = None  # the private inputs' shape (C, H, W), when known without loading
    public_size: Optional[int] = None  # |public pool|, when the config fixes it (public.size); None = unknown
    public_source: str = "none"  # public.source
    server_validation: bool = False  # the server holds a validation split (server.val_fraction > 0)


@dataclass
class ClientUpdate:
    """A client's result, or the weighted mean of several of one architecture (see :func:`reduce_updates`)."""

    weight: float  # e.g. N_k
    tensors: dict[str, torch.Tensor]
    metrics: dict[str, float] = field(default_factory=dict)  # weighted means, e.g. train_loss
    num_clients: int = 1
    seconds: float = 0.0  # compute time spent producing it (summed when reduced); the runtime fills it in
    architecture: str = ""  # the client's architecture; the runtime fills it in
    client_id: int = -1  # the client's id; -1 once several are reduced into one


@dataclass(frozen=True)
class Metric:
    """A metric a method reports, and which way is better (what a search space may select on)."""

    name: str
    mode: str  # "max" or "min"
    doc: str = ""
    headline: bool = False  # one of the method's results (printed by platform.run, logged per seed by a sweep)
    # a configured value the method reports (FedAUX's privacy ε and δ), not a measured one: it may be infinite
    # (ε = ∞ is the non-private arm), which is a value, never a sign that training diverged
    setting: bool = False


#: Reported for every method: the global model on the server's validation and test splits, and the clients'
#: mean training loss. For methods without a global model they are the clients' own (client_evaluate) means.
STANDARD_METRICS = (
    Metric("val_accuracy", "max", "accuracy of the global model on the server's validation split"),
    Metric("val_loss", "min", "mean cross-entropy on the server's validation split"),
    Metric("test_accuracy", "max", "accuracy on the test set (report it; never select on it)"),
    Metric("test_loss", "min", "mean cross-entropy on the test set"),
    Metric("train_loss", "min", "the clients' mean local training loss, weighted by N_k"),
)
#: Reported for methods that evaluate clients on their own splits: the mean weighted by each client's split size
#: (``client_val_accuracy``) and the 10th percentile over clients (``client_val_accuracy_p10``).
CLIENT_EVALUATION_METRICS = tuple(
    Metric(f"client_{split}_{kind}{suffix}", mode, f"clients' own {split} split, {what}")
    for split in ("val", "test") for kind, mode in (("accuracy", "max"), ("loss", "min"))
    for suffix, what in (("", "weighted mean over clients"), ("_p10", "10th percentile over clients")))


def reduce_updates(updates: Sequence[ClientUpdate]) -> ClientUpdate:
    """Weighted mean of updates, weighted by ``weight``.

    Associative: the mean of partial means (each weighted by its weight sum) is the mean of all, so
    client actors can pre-reduce their clients and the server reduces the partial results again. Updates of
    different architectures cannot be averaged: reduce each group of :func:`group_by_architecture`.
    """
    updates = [u for u in updates if u is not None]
    if not updates:
        raise ValueError("no client updates to reduce")
    architectures = {u.architecture for u in updates}
    if len(architectures) > 1:
        raise ValueError(f"cannot average updates of different architectures {sorted(architectures)}; "
                         "reduce each group_by_architecture group")
    total = float(sum(u.weight for u in updates))
    coeffs = [u.weight / total if total > 0 else 0.0 for u in updates]
    tensors = {key: sum(c * u.tensors[key] for c, u in zip(coeffs, updates)) for key in updates[0].tensors}
    return ClientUpdate(weight=total, tensors=tensors, metrics=mean_metrics(updates),
                        num_clients=sum(u.num_clients for u in updates), seconds=sum(u.seconds for u in updates),
                        architecture=updates[0].architecture,
                        client_id=updates[0].client_id if len(updates) == 1 else -1)


def group_by_architecture(updates: Sequence[ClientUpdate]) -> dict[str, list[ClientUpdate]]:
    """The updates of each architecture, in the order given (architectures in order of first appearance)."""
    groups: dict[str, list[ClientUpdate]] = {}
    for u in updates:
        groups.setdefault(u.architecture, []).append(u)
    return groups


def mean_metrics(updates: Sequence[ClientUpdate]) -> dict[str, float]:
    """The weight-weighted mean of each client metric (e.g. train_loss weighted by N_k)."""
    total = float(sum(u.weight for u in updates))
    keys = set().union(*(u.metrics for u in updates))
    if total <= 0:
        return {k: float(sum(u.metrics.get(k, 0.0) for u in updates) / len(updates)) for k in keys}
    return {k: float(sum(u.weight * u.metrics.get(k, 0.0) for u in updates) / total) for k in keys}


def aggregate_round(algorithm: "Algorithm", state: ServerState, updates: Sequence[ClientUpdate],
                    ctx: ServerContext) -> tuple[ServerState, dict[str, float]]:
    """One server step as the runtime runs it: ``algorithm.aggregate``, then the round is counted."""
    new_state, metrics = algorithm.aggregate(state, updates, ctx)
    new_state.round = state.round + 1
    return new_state, metrics


def weights_for(weights: GlobalWeights, architecture: str) -> torch.Tensor:
    """The flat weights of ``architecture`` in a global model (the vector itself when there is one)."""
    return weights[architecture] if isinstance(weights, dict) else weights


def initial_weights(ctx: ServerContext) -> GlobalWeights:
    """The initial global model: the server model's flat weights, or, when clients run other architectures, one
    vector per client architecture (each averaged within its group by weight-averaging methods)."""
    if not ctx.heterogeneous:
        return get_flat_weights(ctx.model)
    return {name: get_flat_weights(ctx.models[name]) for name in ctx.architecture_clients}


#: ``@register`` fills this: name -> class. ``algorithms/__init__`` imports the built-in methods.
ALGORITHMS: dict[str, type["Algorithm"]] = {}


def register(cls: type["Algorithm"]) -> type["Algorithm"]:
    """Class decorator: make ``cls`` available as ``algorithm.name: <cls.name>`` in configs.

    A method outside this package needs no registration: name it ``package.module:ClassName``
    (see :func:`resolve_algorithm`)."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__name__} needs a class attribute name = '...' to be registered")
    if name in ALGORITHMS and ALGORITHMS[name] is not cls:
        raise ValueError(f"algorithm name {name!r} is taken by {ALGORITHMS[name].__module__}."
                         f"{ALGORITHMS[name].__qualname__}")
    ALGORITHMS[name] = cls
    return cls


def resolve_algorithm(name: str) -> type["Algorithm"]:
    """The class for ``name``: a registered name, or ``package.module:ClassName`` imported now.

    Raises :class:`algorithms.errors.ConfigError` on ``algorithm.name`` when it is neither."""
    from algorithms.errors import ConfigError, did_you_mean

    if name in ALGORITHMS:
        return ALGORITHMS[name]
    if not isinstance(name, str) or ":" not in name:
        raise ConfigError("algorithm.name", f"unknown algorithm {name!r}{did_you_mean(name, ALGORITHMS)}; allowed: "
                                            f"{', '.join(ALGORITHMS)}, or "
                                            f"package.module:ClassName for a method of your own")
    import importlib

    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError("algorithm.name", f"cannot import module {module_name!r} ({err}); it must be importable "
                                            f"on the driver and on every worker (PYTHONPATH, or runtime_env "
                                            f"py_modules / working_dir)") from None
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise ConfigError("algorithm.name", f"{name!r} is not an Algorithm subclass (module {module_name!r} has "
                                            f"{'no ' + repr(attr) if cls is None else repr(attr) + ' of another kind'})")
    return cls


class Algorithm:
    """Base class: subclasses set ``name`` and ``Hyperparams`` and implement ``client_update``/``aggregate``."""

    name: ClassVar[str]
    Hyperparams: ClassVar[type]
    #: True when the server only needs the weighted mean of client updates, so actors may pre-reduce (within
    #: each architecture). Methods that need every client's model (FedKP) set False and get one update per client.
    summable: ClassVar[bool] = True
    #: True when clients may run different architectures (``model.architectures``). Updates then carry their
    #: ``architecture``; weight-averaging methods average within each group (:func:`group_by_architecture`),
    #: others exchange predictions. A method that leaves this False is refused mixed architectures at load time.
    heterogeneous_models: ClassVar[bool] = False
    #: True when clients predict on the test inputs (never labels) so the server can score their ensemble.
    clients_see_test_inputs: ClassVar[bool] = False
    #: True when ``client_update`` keeps something in ``client.state`` for the client's next round (e.g. a
    #: personalised model). The runtime then does not start a round's training before the previous round's states
    #: are stored. Storing state without declaring it is an error.
    keeps_client_state: ClassVar[bool] = False
    #: True when the runtime should call :meth:`client_evaluate` on every trained client after ``client_update``
    #: (personalised methods, judged on each client's own validation and test splits).
    evaluates_clients: ClassVar[bool] = False
    #: The method's own metrics besides :data:`STANDARD_METRICS` (and :data:`CLIENT_EVALUATION_METRICS`).
    metrics: ClassVar[tuple[Metric, ...]] = ()
    #: The method's own defaults for other config sections: section -> {key: value}, e.g.
    #: ``{"clients": {"local_epochs": 20, "lr": 1e-3}}`` for a method whose paper trains clients differently from
    #: the platform's global defaults. Applied *under* the user's config when it loads
    #: (:func:`platform.config.experiment.build_experiment`): a key the config sets (in its file, with ``--set``, in a search
    #: space's base or drawn as a parameter) wins; only absent keys take these values, then the section's own
    #: defaults apply. Sections and keys must be existing config fields (checked at load, one ConfigError naming
    #: the field); the method's own hyperparameters belong in ``Hyperparams``, not here.
    config_defaults: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    def __init__(self, hparams: Any = None):
        self.hp = hparams if hparams is not None else self.Hyperparams()

    @classmethod
    def declared_metrics(cls) -> dict[str, Metric]:
        """Every metric this method reports, by name: what a search space may select on."""
        declared = list(STANDARD_METRICS)
        if cls.evaluates_clients:
            declared += CLIENT_EVALUATION_METRICS
        declared += cls.metrics
        return {m.name: m for m in declared}

    @classmethod
    def headline_metrics(cls) -> tuple[str, ...]:
        """The metrics that are this method's results: validation and test accuracy and loss (the clients' own with
        ``evaluates_clients``) and the method's own ``headline`` metrics (FedED's teacher, ``ensemble_accuracy``)."""
        standard = [m.name for m in STANDARD_METRICS if m.name != "train_loss"]
        if cls.evaluates_clients:
            standard += [m.name for m in CLIENT_EVALUATION_METRICS]
        return tuple(dict.fromkeys([*standard, *(m.name for m in cls.metrics if m.headline)]))

    def init_server_state(self, ctx: ServerContext) -> ServerState:
        return ServerState(weights=initial_weights(ctx))

    def broadcast(self, state: ServerState, sampled_clients: Sequence[int]) -> dict:
        return {"weights": state.weights}

    def client_update(self, payload: dict, client: ClientContext) -> ClientUpdate:
        raise NotImplementedError

    def batching_obstacle(self, payload: dict, clients: Sequence[ClientContext]) -> Optional[str]:
        """Why :meth:`client_update_many` cannot train ``clients`` (all of one architecture) as one batched
        computation, or None when it can (``clients.batched``). The platform asks first with no clients (the
        method's own answer, before it gathers any data), then with the clients. Default: the method does not
        batch; methods that override ``client_update_many`` with a batched loop override this too."""
        return f"{self.name} trains its clients one at a time (no batched client_update_many)"

    def client_update_many(self, payload: dict, clients: Sequence[ClientContext]) -> list[ClientUpdate]:
        """The updates of several clients of one architecture, in order; the same results as ``client_update`` on
        each in turn up to float rounding. The platform calls it (``clients.batched``, see
        :meth:`batching_obstacle`) instead of a loop over ``client_update`` where batching pays. It may raise
        :class:`algorithms.common.batched_training.BatchingUnsupported` before changing anything; the platform
        then trains the clients in turn and logs the reason. Default: ``client_update`` on each in turn."""
        return [self.client_update(payload, client) for client in clients]

    def client_evaluate(self, payload: dict, client: ClientContext) -> dict[str, float]:
        """Scores of client ``client`` on its own splits, e.g. ``evaluate(model, client.val_x, client.val_y,
        "val_")`` merged with the same on the test split. Keys ``val_*`` are averaged over clients weighted by
        their validation sizes, ``test_*`` by their test sizes. Called after ``client_update`` in the same round
        (so ``client.state`` holds the updated state) when ``evaluates_clients`` is True."""
        raise NotImplementedError(f"{self.name} sets evaluates_clients but does not implement client_evaluate")

    def aggregate(self, state: ServerState, updates: Sequence[ClientUpdate],
                  ctx: ServerContext) -> tuple[ServerState, dict[str, float]]:
        """The server step: the next state and the metrics to report for this round (besides the standard
        ones the runtime adds). The runtime sets the returned state's ``round``."""
        raise NotImplementedError

    def client_stage_fields(self) -> dict:
        """What determines ``client_update``'s result besides data, model and local training settings.

        The platform caches one-round client stages under these values, so methods that share a client
        procedure (FedAvg, FedKP: plain local SGD) share cached clients. Default: this method's name and
        all its hyperparameters (safe: never shares wrongly).
        """
        return {"procedure": self.name, **dataclasses.asdict(self.hp)}

    def check_setting(self, setting: Setting) -> None:
        """Refuse, at config load, a setting this method cannot run (raise :class:`~algorithms.errors.ConfigError`
        naming the field, e.g. ``algorithm.kmeans_k`` when K exceeds the public pool). Default: accept all."""

    def comparable_round(self, round_number: int) -> bool:
        """Whether trials of this method may be compared after round ``round_number`` (1-based): a scheduler's
        rungs (ASHA) must fall on such rounds. Default: every round. Methods whose accuracy jumps on some
        rounds (the single-image method's FedAvg-initialisation rounds, docs/methods/single_image.md §9) say which."""
        return True

    def burn_in_rounds(self) -> int:
        """Server rounds before the method behaves as itself (FedPA, FedKPPA, SGLD: ``burnin_rounds``).

        Schedulers must not judge a trial before this many rounds plus a margin (docs/methods/fedkp_fedpa.md §13).
        """
        return int(getattr(self.hp, "burnin_rounds", 0) or 0)

    def evaluation_weights(self, state: ServerState) -> Optional[GlobalWeights]:
        """The global model evaluated after each round: flat weights, one vector per architecture, or None
        (no global model: the standard metrics then come from ``client_evaluate``)."""
        return state.weights

    def report_arrays(self, state: ServerState) -> dict[str, torch.Tensor]:
        """Small 2-D arrays worth plotting (e.g. MNFL's coefficient matrix c), by name; the platform logs each as a
        heat-map PNG and a CSV artifact every ``tracking.arrays_every`` rounds and after the last round.
        Default: none."""
        return {}

    @classmethod
    def hyperparameter_docs(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(cls.Hyperparams)}


def describe_metrics(declared: Mapping[str, Metric]) -> str:
    return ", ".join(f"{m.name} ({m.mode})" for m in declared.values())
