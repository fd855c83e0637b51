"""The two actor types: a parameter server holding global state, and client actors hosting virtual clients.

Plain classes: :mod:`platform.runtime.federation` makes them Ray actors (``ray.remote``), and nothing here imports
Ray at module level, so one process can also drive them directly (``benchmarks.round_throughput --in-process``,
on a machine without Ray).

Neither knows any algorithm: they call the :class:`algorithms.base.Algorithm` interface. Each builds one model
per architecture once; virtual clients copy weights into it in place. The parameter server also owns the
client-state store (:class:`platform.runtime.state_store.ClientStateStore`): client actors receive the states of
the clients they train with the round's work and return the new states with their results, which the server
commits when it aggregates. A client actor that dies therefore loses nothing, and a restored trial resumes every
client exactly.
"""
from __future__ import annotations

import importlib
import logging
import re
import sys
import threading
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence, Union

import numpy as np
import torch

from algorithms import ClientContext, ServerContext, reduce_updates, resolve_algorithm
from algorithms.base import aggregate_round, group_by_architecture, mean_metrics
from algorithms.common import LocalTraining, evaluate, get_flat_weights, set_flat_weights
from algorithms.common.batched_training import BatchingUnsupported, prefers_batched
from platform.config.models import build_model, client_architectures
from platform.config.run_schema import MAX_ARRAY_ELEMENTS, RESULT_ARRAYS, RESULT_CACHE_CORRUPT, RESULT_CLIENT_PATHS
from platform.stages.cache import take_corrupt_reports
from platform.runtime.pretrain import load_pretrained_features
from platform.runtime.seeding import derived_seed, generator
from platform.runtime.shards import ClientShards, ClientSplits
from platform.runtime.state_store import ClientStateStore
from platform.stages.memo import Memos

SERVER_STREAM_KEY = 2**32 - 1  # distinguishes the server's streams from every (round, client) stream
GLOBAL_RNG_KEY = 2**32 - 2  # distinguishes a client's global-RNG seed (dropout) from its training generator's
AUGMENT_KEY = 2**32 - 3  # distinguishes a client's augmentation stream (clients.augment) from its batch order's

log = logging.getLogger(__name__)


def _pick_device(wants_gpu: bool) -> torch.device:
    if wants_gpu and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def _as_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    with warnings.catch_warnings():  # arrays from the object store are read-only; we never write to them
        warnings.simplefilter("ignore", UserWarning)
        return torch.as_tensor(array, device=device)


def _model_for(config, input_shape, num_classes, device, name: Optional[str] = None,
               pretrained: Optional[Mapping[str, dict]] = None) -> torch.nn.Module:
    """The model of architecture ``name`` (default ``model.name``), seeded by the init stream; with
    ``pretrain.method`` set, its ``features`` get the prepared pre-trained state (``pretrained``: architecture ->
    features state_dict or its ObjectRef), strict, and the head stays as built."""
    name = name or config.model.name
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.stream_seed("init"))
        model = build_model(name, input_shape, num_classes)
    if config.pretrain.method != "none":
        load_pretrained_features(model, name, config, pretrained)
    return model.to(device)


def _resolve_pretrained(pretrained: Optional[Mapping]) -> Optional[dict]:
    """architecture -> features state_dict, fetching the object-store references (nested, so not resolved by
    Ray when the actor was created)."""
    if pretrained is None:
        return None
    import ray  # loaded already in an actor process

    refs = {k: v for k, v in pretrained.items() if isinstance(v, ray.ObjectRef)}
    fetched = dict(zip(refs, ray.get(list(refs.values())))) if refs else {}
    return {k: fetched.get(k, v) for k, v in pretrained.items()}


class Reusable:
    """An actor that a later trial can take over: :meth:`reset` makes it a fresh instance for new arguments.

    Why: a new actor process pays for interpreter start and ``import torch`` (~2 s of CPU here), far more
    than building a model; a reused Tune trial keeps its actors (see :class:`platform.runtime.federation.WarmActors`)
    and resets them instead.
    """

    def reset(self, *args) -> bool:
        self.__dict__.clear()
        self.__init__(*args)
        return True

    def peak_memory(self) -> dict:
        """This process's peak resident memory (bytes) and, where it uses a GPU, the peak GPU memory torch allocated,
        with where it ran: the node's host name and the device (``platform.run --estimate`` says what it measured
        on)."""
        import resource

        uses_gpu = torch.cuda.is_available() and torch.cuda.is_initialized()
        peak = {"rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, **where_this_runs(uses_gpu)}
        if uses_gpu:
            peak["gpu_bytes"] = int(torch.cuda.max_memory_allocated())
        return peak


def where_this_runs(uses_gpu: bool) -> dict:
    """This process's node (``host``, its host name) and ``device``: its GPU's name where ``uses_gpu``, else the
    node's CPU cores (what ``--estimate`` says it measured on)."""
    import os
    import socket

    device = (f"GPU ({torch.cuda.get_device_name(torch.cuda.current_device())})" if uses_gpu
              else f"CPU ({os.cpu_count()} cores)")
    return {"host": socket.gethostname(), "device": device}


_WARMING: list[threading.Thread] = []  # the background import of torch._dynamo, once per process


def _warm_training_imports() -> None:
    """Start importing ``torch._dynamo`` in a background thread, once per process.

    Local training's first step imports it (torch.optim's first optimiser, torch.func's first transform): about
    1.3 s of CPU, which round 1 waited for while the other actor and the driver sat idle. A client actor starts the
    import when it is created, so it runs while the other actor still starts and the driver opens its MLflow run.
    :meth:`ClientPool.train` waits for it first (:func:`_training_imports_ready`), so two threads never import at
    once."""
    if not _WARMING and "torch._dynamo" not in sys.modules:
        thread = threading.Thread(target=importlib.import_module, args=("torch._dynamo",), name="import-torch-dynamo",
                                  daemon=True)
        thread.start()
        _WARMING.append(thread)


def _training_imports_ready() -> None:
    if _WARMING:
        _WARMING[0].join()


def _seed_global_rng(*keys: int, device: Optional[torch.device] = None) -> None:
    """Seed torch's global generator (dropout draws from it) from ``keys``, so results do not depend on what
    this process ran before: another trial (a reused actor) or other clients (balanced assignment). Only the
    generators in use: ``torch.manual_seed`` would cost ~0.1 ms a call (it visits every accelerator backend)."""
    seed = derived_seed(*keys)
    torch.default_generator.manual_seed(seed)
    if device is not None and device.type == "cuda":
        torch.cuda.manual_seed(seed)


@dataclass
class RoundResult:
    """What one client actor returns for a round: its (pre-reduced) updates, the new state of each stateful
    client it trained (an empty dict deletes a client's state), and each client's own evaluation as
    ``(split sizes, metrics)`` for methods that evaluate clients."""

    updates: list
    states: dict = field(default_factory=dict)
    evaluations: list = field(default_factory=list)
    paths: list = field(default_factory=list)  # how each architecture's clients trained (see RESULT_CLIENT_PATHS)
    batched_clients: int = 0  # clients trained by a batched client_update_many
    cache_corrupt: list = field(default_factory=list)  # stage-cache entries found corrupt (RESULT_CACHE_CORRUPT)

    @property
    def seconds(self) -> float:
        return float(sum(u.seconds for u in self.updates))


def summarise_client_evaluations(evaluations: Sequence[tuple[dict, dict]]) -> dict[str, float]:
    """``client_<metric>``: the mean over clients weighted by the size of the split the metric is on (``val_*``
    by the client's validation size, ``test_*`` by its test size, others by its training size), and
    ``client_<metric>_p10``: the 10th percentile over clients (pfl-research, Flower). Clients whose split is
    empty are left out of that metric."""
    out: dict[str, float] = {}
    keys = sorted(set().union(*(m for _, m in evaluations))) if evaluations else []
    for key in keys:
        split = key.split("_", 1)[0]
        pairs = [(sizes.get(split, sizes.get("train", 1)), float(m[key])) for sizes, m in evaluations if key in m]
        pairs = [(w, v) for w, v in pairs if w > 0]
        if not pairs:
            continue
        w = np.array([p[0] for p in pairs], dtype=float)
        v = np.array([p[1] for p in pairs], dtype=float)
        out[f"client_{key}"] = float((w * v).sum() / w.sum())
        out[f"client_{key}_p10"] = float(np.percentile(v, 10))
    return out


def arrays_due(round_index: int, every: int, rounds: int) -> bool:
    """Whether a method's arrays are logged after round ``round_index`` (1-based): every ``every`` rounds
    (``tracking.arrays_every``; 0 = never on the way) and after the last round ``rounds``."""
    return round_index == rounds or (every > 0 and round_index % every == 0)


def plottable_arrays(arrays: Mapping, skipped: set) -> dict[str, list]:
    """:meth:`Algorithm.report_arrays`'s arrays as nested lists of float64 rows (what a trial reports to Tune and
    the tracking side plots), keyed by names safe in artifact paths; a 1-D array becomes one row. Arrays that are
    not 1-D or 2-D, are empty, or hold more than ``MAX_ARRAY_ELEMENTS`` are skipped, with one warning per name
    (``skipped``: the names already warned about)."""
    out = {}
    for name, value in arrays.items():
        key = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).strip(".") or "array"
        shape = tuple(value.shape) if hasattr(value, "shape") else np.shape(value)
        size = int(np.prod(shape)) if shape else 1
        if len(shape) not in (1, 2) or size == 0:
            problem = f"its shape {shape} is not that of a non-empty 1-D or 2-D array"
        elif size > MAX_ARRAY_ELEMENTS:
            problem = f"it has {size} elements, more than {MAX_ARRAY_ELEMENTS}"
        else:
            array = (value.detach().to("cpu", torch.float64).numpy() if isinstance(value, torch.Tensor)
                     else np.asarray(value, dtype=np.float64))
            out[key] = array.reshape(1, -1).tolist() if array.ndim == 1 else array.tolist()
            continue
        if key not in skipped:
            skipped.add(key)
            warnings.warn(f"report_arrays: {name!r} is not logged: {problem}", RuntimeWarning, stacklevel=2)
    return out


class ParameterServer(Reusable):
    """Holds the global model(s), the round, the server optimiser state, the algorithm's server state and the
    client-state store."""

    def __init__(self, config, test_data: tuple[np.ndarray, np.ndarray], input_shape, num_classes: int,
                 num_threads: int = 1, wants_gpu: bool = False, public_x: Optional[np.ndarray] = None,
                 val_data: Optional[tuple[np.ndarray, np.ndarray]] = None, cache=None,
                 pretrained: Optional[Mapping] = None):
        """``cache``: the stage cache behind ``ServerContext.memo`` (None: the memo computes every time).
        ``pretrained``: architecture -> pre-trained features (or their ObjectRefs), with ``pretrain.method`` set."""
        torch.set_num_threads(num_threads)
        self.config = config
        pretrained = _resolve_pretrained(pretrained)
        self.device = _pick_device(wants_gpu)
        noise_seed, training_seed = config.stream_seed("noise"), config.stream_seed("training")
        _seed_global_rng(noise_seed, SERVER_STREAM_KEY, device=self.device)
        self.algorithm = resolve_algorithm(config.algorithm.name)(config.algorithm.params)
        names = client_architectures(config)
        clients_per_architecture = (dict(Counter(names)) if names is not None
                                    else {config.model.name: config.clients.num_clients})
        models = {name: _model_for(config, input_shape, num_classes, self.device, name, pretrained)
                  for name in dict.fromkeys([config.model.name, *clients_per_architecture])}
        has_val = val_data is not None and len(val_data[1]) > 0
        self.ctx = ServerContext(
            models=models, architecture=config.model.name, architecture_clients=clients_per_architecture,
            server_lr=config.server.lr, server_momentum=config.server.momentum, num_classes=num_classes,
            device=self.device, training_generator=generator(training_seed, SERVER_STREAM_KEY),
            noise_generator=generator(noise_seed, SERVER_STREAM_KEY),
            public_x=None if public_x is None else _as_tensor(public_x, self.device),
            val_x=_as_tensor(val_data[0], self.device) if has_val else None,
            val_y=_as_tensor(val_data[1], self.device) if has_val else None,
            memo=Memos(cache, config, type(self.algorithm)).for_context())
        self.test_x = _as_tensor(test_data[0], self.device)
        self.test_y = _as_tensor(test_data[1], self.device)
        self.ctx.test_y = self.test_y
        self.state = self.algorithm.init_server_state(self.ctx)
        self.client_states = ClientStateStore(int(config.clients.state_memory_mb * 2**20))
        self._skipped_arrays: set = set()  # report_arrays names already warned about (skipped)

    def ready(self) -> bool:
        return True

    def broadcast(self, sampled_clients: Sequence[int]) -> dict:
        start = time.perf_counter()
        payload = self.algorithm.broadcast(self.state, sampled_clients)
        self._broadcast_seconds = time.perf_counter() - start
        return payload

    def states_of(self, clients: Sequence[int]) -> dict[int, dict]:
        """The stored state of each of ``clients`` that has one (what a client actor needs for a round)."""
        return self.client_states.get_many([int(k) for k in clients])

    def aggregate(self, *results: RoundResult) -> dict:
        """Commit the clients' new states, aggregate, step the round, and evaluate the global model.

        Reports the validation and test metrics, the clients' mean metrics, the algorithm's own metrics (which
        win over the others of the same name), the clients' own evaluations, the time of each phase (for
        ``platform.run --profile``) and, on the rounds due (``tracking.arrays_every``, the last round), the method's
        arrays (:meth:`Algorithm.report_arrays`) under ``RESULT_ARRAYS``: {name: nested list}, not a metric.
        """
        aggregated = self._aggregate(results)
        metrics = self.evaluate_global()
        metrics.update(aggregated)
        return metrics

    def aggregate_and_broadcast(self, next_sampled: Sequence[int], *results: RoundResult) -> tuple[dict, dict]:
        """:meth:`aggregate` without the evaluation, plus the next round's payload: called with two returns, so
        the next round's clients can start on the payload while this server evaluates (:meth:`evaluate_global`)."""
        metrics = self._aggregate(results)
        return metrics, self.broadcast(next_sampled)

    def _aggregate(self, results: Sequence[RoundResult]) -> dict:
        start = time.perf_counter()
        updates = [u for result in results for u in result.updates]
        for result in results:
            for k, state in result.states.items():
                if state:
                    self.client_states.put(k, state)
                else:
                    self.client_states.delete(k)
        local_train = max((result.seconds for result in results), default=0.0)
        self.state, algorithm_metrics = aggregate_round(self.algorithm, self.state, updates, self.ctx)
        metrics = mean_metrics(updates)
        client_metrics = summarise_client_evaluations([e for result in results for e in result.evaluations])
        metrics.update(client_metrics)
        if self.algorithm.evaluation_weights(self.state) is None:  # no global model: the clients' own scores
            metrics.update({k[len("client_"):]: v for k, v in client_metrics.items() if not k.endswith("_p10")})
        metrics.update({k: float(v) for k, v in algorithm_metrics.items()})
        arrays = self._due_arrays()
        if arrays:
            metrics[RESULT_ARRAYS] = arrays
        metrics["batched_clients"] = sum(result.batched_clients for result in results)
        metrics[RESULT_CLIENT_PATHS] = "; ".join(p for result in results for p in result.paths)
        corrupt = [line for result in results for line in result.cache_corrupt] + take_corrupt_reports()
        if corrupt:
            metrics[RESULT_CACHE_CORRUPT] = "\n".join(corrupt)
        metrics.update({"round": self.state.round, "clients": sum(u.num_clients for u in updates),
                        "broadcast_seconds": getattr(self, "_broadcast_seconds", 0.0),
                        "local_train_seconds": local_train, "aggregate_seconds": time.perf_counter() - start})
        return metrics

    def _due_arrays(self) -> dict[str, list]:
        """The method's arrays (:meth:`Algorithm.report_arrays`) as nested lists when this round is due for them
        (``tracking.arrays_every``, the last round), else nothing."""
        if not arrays_due(self.state.round, self.config.tracking.arrays_every, self.config.rounds):
            return {}
        return plottable_arrays(self.algorithm.report_arrays(self.state) or {}, self._skipped_arrays)

    def evaluate_global(self, num_threads: Optional[int] = None) -> dict:
        """Validation and test metrics of the current global model(s), and ``evaluate_seconds``.

        With one global model per architecture, ``test_accuracy.<arch>`` etc. are each model's, and the plain
        names their mean weighted by the architecture's number of clients.

        ``num_threads``: torch threads for this call only. While the next round's clients train, the cores are
        theirs: a multi-threaded evaluation would then stall at every parallel region waiting for a preempted
        thread (measured: a 1.5 ms evaluation took 27 ms), so the runtime asks for 1 thread there.
        """
        start = time.perf_counter()
        before = torch.get_num_threads()
        if num_threads:
            torch.set_num_threads(num_threads)
        try:
            weights = self.algorithm.evaluation_weights(self.state)
            if weights is None:
                metrics = {}
            elif isinstance(weights, dict):
                metrics = self._evaluate_per_architecture(weights)
            else:
                metrics = self._score(self.ctx.model, weights)
        finally:
            torch.set_num_threads(before)
        metrics["evaluate_seconds"] = time.perf_counter() - start
        return metrics

    def _score(self, model: torch.nn.Module, weights: torch.Tensor) -> dict:
        set_flat_weights(model, weights)
        metrics = evaluate(model, self.test_x, self.test_y)
        if self.ctx.val_y is not None:
            metrics.update(evaluate(model, self.ctx.val_x, self.ctx.val_y, prefix="val_"))
        return metrics

    def _evaluate_per_architecture(self, weights: dict) -> dict:
        scores = {name: self._score(self.ctx.models[name], w) for name, w in weights.items()}
        counts = {name: self.ctx.architecture_clients.get(name, 0) for name in scores}
        total = sum(counts.values())
        metrics = {}
        for key in next(iter(scores.values())):
            if total > 0:
                metrics[key] = sum(counts[n] * s[key] for n, s in scores.items()) / total
            else:
                metrics[key] = float(np.mean([s[key] for s in scores.values()]))
            metrics.update({f"{key}.{name}": s[key] for name, s in scores.items()})
        return metrics

    def checkpoint(self) -> dict:
        """The server state, every client's stored state and the server's random streams (distillation batch
        order, noise, the global generator): all a restored trial needs to continue exactly."""
        return {"server": self.state, "client_states": self.client_states.snapshot(),
                "generators": {"training": self.ctx.training_generator.get_state(),
                               "noise": self.ctx.noise_generator.get_state(), "global": torch.get_rng_state()}}

    def restore(self, checkpoint: dict) -> None:
        self.state = checkpoint["server"]
        self.client_states.restore(checkpoint.get("client_states", {}))
        streams = checkpoint.get("generators")
        if streams is not None:
            self.ctx.training_generator.set_state(streams["training"])
            self.ctx.noise_generator.set_state(streams["noise"])
            torch.set_rng_state(streams["global"])


class ClientPool(Reusable):
    """Hosts a fixed shard of virtual clients; trains the sampled ones in turn with one model per architecture,
    or, per ``clients.batched``, each architecture's sampled clients at once (:meth:`Algorithm.client_update_many`).

    ``shards``: :class:`ClientSplits`, a :class:`ClientShards` of every client's training indices, or a mapping
    client → training indices. ``hosted`` names the clients this actor hosts by default (a balanced round may
    hand it any client: every actor reads all data and all indices). Nothing is kept per client: a stateful
    method's client states come with each round's work from the parameter server and go back with the results.
    """

    def __init__(self, config, train_data: tuple[np.ndarray, np.ndarray],
                 shards: Union[ClientSplits, ClientShards, Mapping[int, np.ndarray]],
                 input_shape, num_classes: int, num_threads: int = 1, wants_gpu: bool = False,
                 public_x: Optional[np.ndarray] = None, test_data: Optional[tuple[np.ndarray, np.ndarray]] = None,
                 hosted: Optional[np.ndarray] = None, cache=None, pretrained: Optional[Mapping] = None):
        """``cache``: the stage cache behind ``ClientContext.memo`` (None: the memo computes every time).
        ``pretrained``: architecture -> pre-trained features (or their ObjectRefs), with ``pretrain.method`` set."""
        torch.set_num_threads(num_threads)
        self.pretrained = _resolve_pretrained(pretrained)
        self.config = config
        self.device = _pick_device(wants_gpu)
        self.public_x = None if public_x is None else _as_tensor(public_x, self.device)
        self.global_test_x = None if test_data is None else _as_tensor(test_data[0], self.device)  # inputs only
        self.algorithm = resolve_algorithm(config.algorithm.name)(config.algorithm.params)
        self.memos = Memos(cache, config, type(self.algorithm))  # one code-version hash per actor
        if not isinstance(shards, ClientSplits):
            shards = ClientSplits(shards if isinstance(shards, ClientShards) else ClientShards.from_mapping(shards))
        self.splits = shards
        self.hosted = np.asarray(self.splits.train.keys() if hosted is None else hosted, dtype=np.int64)
        # One model instance per architecture, built once; virtual clients copy weights into it.
        self._names = client_architectures(config)  # client -> architecture, only with heterogeneous architectures
        names_used = [config.model.name] if self._names is None else [self._names[k] for k in self.hosted]
        self.input_shape, self.num_classes = input_shape, num_classes
        self.models = {name: _model_for(config, input_shape, num_classes, self.device, name, self.pretrained)
                       for name in sorted(set(names_used))}
        self._initial = {name: get_flat_weights(model) for name, model in self.models.items()}
        self.x = _as_tensor(train_data[0], torch.device("cpu"))  # zero-copy view of the object-store array
        self.y = _as_tensor(train_data[1], torch.device("cpu"))
        c = config.clients
        self.training = LocalTraining(c.local_epochs, c.batch_size, c.optimizer, c.lr, c.momentum, c.weight_decay,
                                      augment=c.augment, augment_padding=c.augment_padding, precision=c.precision)
        self.training_seed = config.stream_seed("training")
        self.noise_seed = config.stream_seed("noise")
        _warm_training_imports()

    def ready(self) -> bool:
        return True

    def _data(self, shards: Optional[ClientShards], k: int) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        if shards is None:
            return None, None
        idx = torch.from_numpy(np.asarray(shards[k], dtype=np.int64))
        return self.x[idx].to(self.device), self.y[idx].to(self.device)

    def client(self, k: int, round_index: int, state: dict) -> ClientContext:
        """Client ``k`` as ``client_update`` sees it in round ``round_index``, with its stored ``state``."""
        x, y = self._data(self.splits.train, k)
        val_x, val_y = self._data(self.splits.val, k)
        test_x, test_y = self._data(self.splits.test, k)
        return ClientContext(
            client_id=k, x=x, y=y, model=self._model(k), architecture=self.architecture(k),
            training=self.training, generator=generator(self.training_seed, round_index, k),
            dropout_generator=generator(self.training_seed, round_index, k, GLOBAL_RNG_KEY),
            augment_generator=generator(self.training_seed, round_index, k, AUGMENT_KEY),
            noise_generator=generator(self.noise_seed, round_index, k), state=state, device=self.device,
            val_x=val_x, val_y=val_y, test_x=test_x, test_y=test_y, public_x=self.public_x,
            global_test_x=self.global_test_x, initial_weights=self._initial[self.architecture(k)],
            memo=self.memos.for_context(k))

    def train(self, payload: dict, client_ids: Sequence[int], round_index: int, reduce: bool = True,
              states: Optional[Mapping[int, dict]] = None) -> RoundResult:
        """Run ``client_update`` (and ``client_evaluate`` where declared) for each sampled client; pre-reduce to one
        partial mean per architecture if the method allows. ``states``: the stored state of the clients that
        have one (from the parameter server)."""
        _training_imports_ready()
        algorithm = self.algorithm
        states = states or {}
        result = RoundResult(updates=[])
        batched = self._train_batched(payload, [int(k) for k in client_ids], round_index, states, result)
        for k in client_ids:
            k = int(k)
            had_state = k in states
            if k in batched:
                client, update = batched[k]
            else:
                client = self.client(k, round_index, dict(states.get(k, {})))
                _seed_global_rng(self.training_seed, round_index, k, GLOBAL_RNG_KEY, device=self.device)
                start = time.perf_counter()
                update = algorithm.client_update(payload, client)
                update.seconds = time.perf_counter() - start
            update.architecture, update.client_id = client.architecture, k
            result.updates.append(update)
            if algorithm.evaluates_clients:
                sizes = {"train": client.num_samples, "val": 0 if client.val_y is None else len(client.val_y),
                         "test": 0 if client.test_y is None else len(client.test_y)}
                result.evaluations.append((sizes, algorithm.client_evaluate(payload, client)))
            if client.state:
                if not algorithm.keeps_client_state:
                    raise RuntimeError(f"{type(algorithm).__name__} stored client state without declaring "
                                       "keeps_client_state = True")
                result.states[k] = client.state
            elif had_state:
                result.states[k] = {}  # the method cleared it
        if reduce and algorithm.summable and len(result.updates) > 1:
            result.updates = [reduce_updates(group) for group in group_by_architecture(result.updates).values()]
        result.cache_corrupt = take_corrupt_reports()  # the memos this round read (ClientContext.memo)
        return result

    def _train_batched(self, payload: dict, client_ids: list[int], round_index: int, states: Mapping[int, dict],
                       result: RoundResult) -> dict[int, tuple[ClientContext, object]]:
        """Train the clients of each architecture batched where ``clients.batched`` and the method allow
        (:meth:`Algorithm.batching_obstacle`, :meth:`Algorithm.client_update_many`); returns client -> (context,
        update) for those, and notes in ``result`` how each architecture's clients trained and why (the reason
        is logged once per actor). The others are left to :meth:`train`'s loop over ``client_update``."""
        mode = self.config.clients.batched
        groups: dict[str, list[int]] = {}
        for k in client_ids:
            groups.setdefault(self.architecture(k), []).append(k)
        out: dict[int, tuple[ClientContext, object]] = {}
        for name, group in groups.items():
            if mode == "off":
                reason = "clients.batched = off"
            elif mode == "auto":
                wanted, reason = prefers_batched(self._model(group[0]), self.training.batch_size, len(group),
                                                 self.device)
                reason = f"auto: {reason}"
                if wanted:
                    reason = self._batch(payload, group, round_index, states, out, result, reason)
            else:
                reason = self._batch(payload, group, round_index, states, out, result, "clients.batched = on")
            if group[0] in out:
                result.paths.append(f"{name}: batched, {len(group)} clients ({reason})")
                result.batched_clients += len(group)
            else:
                result.paths.append(f"{name}: sequential, {len(group)} clients ({reason})")
            self._log_once(f"clients of {name} train {'batched' if group[0] in out else 'sequentially'}: {reason}",
                           fallback=mode == "on" and group[0] not in out)
        return out

    def _batch(self, payload, group, round_index, states, out, result, reason: str) -> str:
        """client_update_many on ``group``; returns ``reason``, or why it fell back to sequential training."""
        algorithm = self.algorithm
        prefix = "auto" if reason.startswith("auto") else "fell back"
        obstacle = algorithm.batching_obstacle(payload, ())  # the method's own answer, before any data is gathered
        if obstacle:
            return f"{prefix}: {obstacle}"
        contexts = [self.client(k, round_index, dict(states.get(k, {}))) for k in group]
        obstacle = algorithm.batching_obstacle(payload, contexts)
        if obstacle:
            return f"{prefix}: {obstacle}"
        start = time.perf_counter()
        try:
            updates = algorithm.client_update_many(payload, contexts)
        except BatchingUnsupported as err:
            return f"{prefix}: {err}"
        seconds = (time.perf_counter() - start) / len(contexts)  # the batch's time, shared evenly
        for client, update in zip(contexts, updates):
            update.seconds = seconds
            out[client.client_id] = (client, update)
        return reason

    def _log_once(self, message: str, fallback: bool) -> None:
        logged = self.__dict__.setdefault("_logged", set())
        if message not in logged:
            logged.add(message)
            log.log(logging.WARNING if fallback else logging.INFO, message)

    def architecture(self, k: int) -> str:
        return self.config.model.name if self._names is None else self._names[k]

    def _model(self, k: int) -> torch.nn.Module:
        """The model of client ``k``'s architecture; built on first use for a client hosted elsewhere (a
        balanced round may hand this actor any client)."""
        name = self.architecture(k)
        if name not in self.models:
            self.models[name] = _model_for(self.config, self.input_shape, self.num_classes, self.device, name,
                                           self.pretrained)
            self._initial[name] = get_flat_weights(self.models[name])
        return self.models[name]


__all__ = ["AUGMENT_KEY", "ClientPool", "GLOBAL_RNG_KEY", "ParameterServer", "Reusable", "RoundResult", "arrays_due",
           "plottable_arrays", "summarise_client_evaluations"]
