"""The two actor types: a parameter server holding global state, and client actors hosting virtual clients.

Neither knows any algorithm: they call the :class:`algorithms.base.Algorithm` interface. Each builds its
model once; virtual clients copy weights into it in place.
"""
from __future__ import annotations

import time
import warnings
from typing import Mapping, Optional, Sequence, Union

import numpy as np
import ray
import torch

from algorithms import ALGORITHMS, ClientContext, ServerContext, reduce_updates
from algorithms.base import mean_metrics
from algorithms.common import LocalTraining, evaluate, get_flat_weights, set_flat_weights
from platform.models import assign_architectures, build_model
from platform.runtime.seeding import derived_seed, generator

SERVER_STREAM_KEY = 2**32 - 1  # distinguishes the server's noise stream from every (round, client) stream
GLOBAL_RNG_KEY = 2**32 - 2  # distinguishes a client's global-RNG seed (dropout) from its training generator's


def _pick_device(wants_gpu: bool) -> torch.device:
    if wants_gpu and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def _as_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    with warnings.catch_warnings():  # arrays from the object store are read-only; we never write to them
        warnings.simplefilter("ignore", UserWarning)
        return torch.as_tensor(array, device=device)


def _model_for(config, input_shape, num_classes, device, name: Optional[str] = None) -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.stream_seed("init"))
        model = build_model(name or config.model.name, input_shape, num_classes)
    return model.to(device)


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


def _seed_global_rng(*keys: int, device: Optional[torch.device] = None) -> None:
    """Seed torch's global generator (dropout draws from it) from ``keys``, so results do not depend on what
    this process ran before: another trial (a reused actor) or other clients (balanced assignment). Only the
    generators in use: ``torch.manual_seed`` would cost ~0.1 ms a call (it visits every accelerator backend)."""
    seed = derived_seed(*keys)
    torch.default_generator.manual_seed(seed)
    if device is not None and device.type == "cuda":
        torch.cuda.manual_seed(seed)


class ParameterServer(Reusable):
    """Holds the global model, the round, the server optimiser state and the algorithm's server state."""

    def __init__(self, config, test_data: tuple[np.ndarray, np.ndarray], input_shape, num_classes: int,
                 num_threads: int = 1, wants_gpu: bool = False, public_x: Optional[np.ndarray] = None):
        torch.set_num_threads(num_threads)
        self.config = config
        self.device = _pick_device(wants_gpu)
        _seed_global_rng(config.stream_seed("noise"), SERVER_STREAM_KEY, device=self.device)
        self.algorithm = ALGORITHMS[config.algorithm.name](config.algorithm.params)
        model = _model_for(config, input_shape, num_classes, self.device)
        self.ctx = ServerContext(model=model, server_lr=config.server.lr, server_momentum=config.server.momentum,
                                 num_classes=num_classes, device=self.device,
                                 public_x=None if public_x is None else _as_tensor(public_x, self.device),
                                 generator=generator(config.stream_seed("noise"), SERVER_STREAM_KEY))
        self.test_x = _as_tensor(test_data[0], self.device)
        self.test_y = _as_tensor(test_data[1], self.device)
        self.ctx.test_y = self.test_y
        self.state = self.algorithm.init_server_state(get_flat_weights(model), self.ctx)

    def ready(self) -> bool:
        return True

    def broadcast(self, sampled_clients: Sequence[int]) -> dict:
        start = time.perf_counter()
        payload = self.algorithm.broadcast(self.state, sampled_clients)
        self._broadcast_seconds = time.perf_counter() - start
        return payload

    def aggregate(self, *partials) -> dict:
        """Aggregate the actors' results (one list of updates per actor), step the round, evaluate the model.

        Besides the test metrics and the clients' mean metrics, reports the time of each phase (for
        ``platform.run --profile``) and any metrics the algorithm left in ``state.extra["metrics"]``.
        """
        aggregated = self._aggregate(partials)
        metrics = self.evaluate_global()
        metrics.update(aggregated)  # the algorithm's own metrics win over the test metrics of the same name
        return metrics

    def aggregate_and_broadcast(self, next_sampled: Sequence[int], *partials) -> tuple[dict, dict]:
        """:meth:`aggregate` without the evaluation, plus the next round's payload: called with two returns, so
        the next round's clients can start on the payload while this server evaluates (:meth:`evaluate_global`)."""
        metrics = self._aggregate(partials)
        return metrics, self.broadcast(next_sampled)

    def _aggregate(self, partials) -> dict:
        start = time.perf_counter()
        updates = [u for part in partials for u in part]
        local_train = max((sum(u.seconds for u in part) for part in partials), default=0.0)
        self.state = self.algorithm.aggregate(self.state, updates, self.ctx)
        algorithm_metrics = self.state.extra.pop("metrics", {}) if isinstance(self.state.extra, dict) else {}
        metrics = mean_metrics(updates)
        metrics.update({k: float(v) for k, v in algorithm_metrics.items()})
        metrics.update({"round": self.state.round, "clients": sum(u.num_clients for u in updates),
                        "broadcast_seconds": getattr(self, "_broadcast_seconds", 0.0),
                        "local_train_seconds": local_train, "aggregate_seconds": time.perf_counter() - start})
        return metrics

    def evaluate_global(self, num_threads: Optional[int] = None) -> dict:
        """Test metrics of the current global model, and ``evaluate_seconds``.

        ``num_threads``: torch threads for this call only. While the next round's clients train, the cores are
        theirs: a multi-threaded evaluation would then stall at every parallel region waiting for a preempted
        thread (measured: a 1.5 ms evaluation took 27 ms), so the runtime asks for 1 thread there.
        """
        start = time.perf_counter()
        before = torch.get_num_threads()
        if num_threads:
            torch.set_num_threads(num_threads)
        try:
            set_flat_weights(self.ctx.model, self.algorithm.evaluation_weights(self.state))
            metrics = evaluate(self.ctx.model, self.test_x, self.test_y)
        finally:
            torch.set_num_threads(before)
        metrics["evaluate_seconds"] = time.perf_counter() - start
        return metrics

    def get_state(self):
        return self.state

    def set_state(self, state) -> None:
        self.state = state

    def global_weights(self) -> torch.Tensor:
        return self.algorithm.evaluation_weights(self.state)


class ClientShards:
    """Every client's sample indices as two arrays, whatever the number of clients (CSR layout): client
    ``clients[i]`` (``i`` itself when ``clients`` is None) owns ``indices[offsets[i]:offsets[i + 1]]``.

    One object per federation, put in the object store once and read zero-copy by every client actor, so an
    idle virtual client costs its indices (8 bytes a sample) and no Python object of its own.
    """

    def __init__(self, indices: np.ndarray, offsets: np.ndarray, clients: Optional[np.ndarray] = None):
        self.indices, self.offsets, self.clients = indices, offsets, clients

    @classmethod
    def from_parts(cls, parts: Sequence[np.ndarray], clients: Optional[Sequence[int]] = None) -> "ClientShards":
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(p) for p in parts])
        indices = (np.concatenate([np.asarray(p, dtype=np.int64) for p in parts]) if len(parts)
                   else np.zeros(0, dtype=np.int64))
        return cls(indices, offsets, None if clients is None else np.asarray(clients, dtype=np.int64))

    @classmethod
    def from_mapping(cls, shards: Mapping[int, np.ndarray]) -> "ClientShards":
        keys = sorted(int(k) for k in shards)
        return cls.from_parts([shards[k] for k in keys], keys)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _position(self, k: int) -> int:
        if self.clients is None:
            if not 0 <= k < len(self):
                raise KeyError(k)
            return k
        i = int(np.searchsorted(self.clients, k))
        if i >= len(self.clients) or self.clients[i] != k:
            raise KeyError(k)
        return i

    def bounds(self, k: int) -> tuple[int, int]:
        i = self._position(int(k))
        return int(self.offsets[i]), int(self.offsets[i + 1])

    def __getitem__(self, k: int) -> np.ndarray:
        start, end = self.bounds(k)
        return self.indices[start:end]

    def __contains__(self, k) -> bool:
        try:
            self._position(int(k))
            return True
        except KeyError:
            return False

    def keys(self) -> np.ndarray:
        return np.arange(len(self), dtype=np.int64) if self.clients is None else self.clients


class ClientPool(Reusable):
    """Hosts a fixed shard of virtual clients; trains the sampled ones in turn with one model instance.

    ``shards``: a mapping client → sample indices (the clients it hosts), or a :class:`ClientShards` of every
    client with ``hosted`` naming the ones this actor hosts. Nothing is kept per idle client: its indices stay
    in the shared arrays and its persistent state exists only once an algorithm stores some.
    """

    def __init__(self, config, train_data: tuple[np.ndarray, np.ndarray],
                 shards: Union[Mapping[int, np.ndarray], ClientShards],
                 input_shape, num_classes: int, num_threads: int = 1, wants_gpu: bool = False,
                 public_x: Optional[np.ndarray] = None, test_data: Optional[tuple[np.ndarray, np.ndarray]] = None,
                 hosted: Optional[np.ndarray] = None):
        torch.set_num_threads(num_threads)
        self.config = config
        self.device = _pick_device(wants_gpu)
        self.public_x = None if public_x is None else _as_tensor(public_x, self.device)
        self.test_x = None if test_data is None else _as_tensor(test_data[0], self.device)  # inputs only
        self.algorithm = ALGORITHMS[config.algorithm.name](config.algorithm.params)
        self.shards = shards if isinstance(shards, ClientShards) else ClientShards.from_mapping(shards)
        self.hosted = np.asarray(self.shards.keys() if hosted is None else hosted, dtype=np.int64)
        # One model instance per architecture, built once; virtual clients copy weights into it.
        self._names = None  # client -> architecture, only with heterogeneous architectures
        names_used = [config.model.name]
        if config.model.architectures is not None:
            self._names = assign_architectures(config.model.architectures, config.clients.num_clients)
            names_used = [self._names[k] for k in self.hosted]
        self.input_shape, self.num_classes = input_shape, num_classes
        self.models = {name: _model_for(config, input_shape, num_classes, self.device, name)
                       for name in sorted(set(names_used))}
        self.x = _as_tensor(train_data[0], torch.device("cpu"))  # zero-copy view of the object-store array
        self.y = _as_tensor(train_data[1], torch.device("cpu"))
        self._indices = _as_tensor(self.shards.indices, torch.device("cpu"))  # zero-copy too
        self.client_state: dict[int, dict] = {}
        c = config.clients
        self.training = LocalTraining(c.local_epochs, c.batch_size, c.optimizer, c.lr, c.momentum, c.weight_decay)
        self.training_seed = config.stream_seed("training")
        self.noise_seed = config.stream_seed("noise")

    def ready(self) -> bool:
        return True

    def train(self, payload: dict, client_ids: Sequence[int], round_index: int, reduce: bool = True) -> list:
        """Run ``client_update`` for each sampled client; pre-reduce to one partial mean if the method allows."""
        updates = []
        for k in client_ids:
            k = int(k)
            lo, hi = self.shards.bounds(k)
            idx = self._indices[lo:hi]
            state = self.client_state.get(k, {})
            client = ClientContext(
                client_id=k, x=self.x[idx].to(self.device), y=self.y[idx].to(self.device),
                model=self._model(k),
                training=self.training, generator=generator(self.training_seed, round_index, k),
                noise_generator=generator(self.noise_seed, round_index, k),
                state=state, device=self.device, public_x=self.public_x, test_x=self.test_x)
            _seed_global_rng(self.training_seed, round_index, k, GLOBAL_RNG_KEY, device=self.device)
            start = time.perf_counter()
            update = self.algorithm.client_update(payload, client)
            update.seconds = time.perf_counter() - start
            updates.append(update)
            if state:  # kept only once the algorithm stores something (most never do)
                if not self.algorithm.keeps_client_state:
                    raise RuntimeError(f"{type(self.algorithm).__name__} stored client state without declaring "
                                       "keeps_client_state = True")
                self.client_state[k] = state
        if reduce and self.algorithm.summable and len(updates) > 1:
            return [reduce_updates(updates)]
        return updates

    def architecture(self, k: int) -> str:
        return self.config.model.name if self._names is None else self._names[k]

    def _model(self, k: int) -> torch.nn.Module:
        """The model of client ``k``'s architecture; built on first use for a client hosted elsewhere (a
        balanced round may hand this actor any client)."""
        name = self.architecture(k)
        if name not in self.models:
            self.models[name] = _model_for(self.config, self.input_shape, self.num_classes, self.device, name)
        return self.models[name]

    def get_client_states(self) -> dict[int, dict]:
        return self.client_state

    def set_client_states(self, states: dict[int, dict]) -> None:
        keys = np.fromiter((int(k) for k in states), dtype=np.int64, count=len(states))
        mine = np.isin(keys, self.hosted)
        self.client_state = {int(k): v for k, v, own in zip(keys, states.values(), mine) if own and v}


RemoteParameterServer = ray.remote(ParameterServer)
RemoteClientPool = ray.remote(ClientPool)
__all__ = ["ClientPool", "ClientShards", "GLOBAL_RNG_KEY", "ParameterServer", "Reusable", "RemoteClientPool", "RemoteParameterServer", "derived_seed"]
