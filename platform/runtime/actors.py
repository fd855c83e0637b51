"""The two actor types: a parameter server holding global state, and client actors hosting virtual clients.

Neither knows any algorithm: they call the :class:`algorithms.base.Algorithm` interface. Each builds its
model once; virtual clients copy weights into it in place.
"""
from __future__ import annotations

import time
import warnings
from typing import Optional, Sequence

import numpy as np
import ray
import torch

from algorithms import ALGORITHMS, ClientContext, ServerContext, reduce_updates
from algorithms.base import mean_metrics
from algorithms.common import LocalTraining, evaluate, get_flat_weights, set_flat_weights
from platform.models import assign_architectures, build_model
from platform.runtime.seeding import derived_seed, generator

SERVER_STREAM_KEY = 2**32 - 1  # distinguishes the server's noise stream from every (round, client) stream


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


class ParameterServer:
    """Holds the global model, the round, the server optimiser state and the algorithm's server state."""

    def __init__(self, config, test_data: tuple[np.ndarray, np.ndarray], input_shape, num_classes: int,
                 num_threads: int = 1, wants_gpu: bool = False, public_x: Optional[np.ndarray] = None):
        torch.set_num_threads(num_threads)
        self.config = config
        self.device = _pick_device(wants_gpu)
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
        start = time.perf_counter()
        updates = [u for part in partials for u in part]
        local_train = max((sum(u.seconds for u in part) for part in partials), default=0.0)
        self.state = self.algorithm.aggregate(self.state, updates, self.ctx)
        algorithm_metrics = self.state.extra.pop("metrics", {}) if isinstance(self.state.extra, dict) else {}
        aggregated = time.perf_counter()
        set_flat_weights(self.ctx.model, self.algorithm.evaluation_weights(self.state))
        metrics = evaluate(self.ctx.model, self.test_x, self.test_y)
        metrics.update(mean_metrics(updates))
        metrics.update({k: float(v) for k, v in algorithm_metrics.items()})
        metrics.update({"round": self.state.round, "clients": sum(u.num_clients for u in updates),
                        "broadcast_seconds": getattr(self, "_broadcast_seconds", 0.0),
                        "local_train_seconds": local_train, "aggregate_seconds": aggregated - start,
                        "evaluate_seconds": time.perf_counter() - aggregated})
        return metrics

    def get_state(self):
        return self.state

    def set_state(self, state) -> None:
        self.state = state

    def global_weights(self) -> torch.Tensor:
        return self.algorithm.evaluation_weights(self.state)


class ClientPool:
    """Hosts a fixed shard of virtual clients; trains the sampled ones in turn with one model instance."""

    def __init__(self, config, train_data: tuple[np.ndarray, np.ndarray], shards: dict[int, np.ndarray],
                 input_shape, num_classes: int, num_threads: int = 1, wants_gpu: bool = False,
                 public_x: Optional[np.ndarray] = None, test_data: Optional[tuple[np.ndarray, np.ndarray]] = None):
        torch.set_num_threads(num_threads)
        self.config = config
        self.device = _pick_device(wants_gpu)
        self.public_x = None if public_x is None else _as_tensor(public_x, self.device)
        self.test_x = None if test_data is None else _as_tensor(test_data[0], self.device)  # inputs only
        self.algorithm = ALGORITHMS[config.algorithm.name](config.algorithm.params)
        # One model instance per architecture, built once; virtual clients copy weights into it.
        self.architecture = {k: config.model.name for k in shards}
        if config.model.architectures is not None:
            names = assign_architectures(config.model.architectures, config.clients.num_clients)
            self.architecture = {k: names[k] for k in shards}
        self.models = {name: _model_for(config, input_shape, num_classes, self.device, name)
                       for name in sorted(set(self.architecture.values()))}
        self.x = _as_tensor(train_data[0], torch.device("cpu"))  # zero-copy view of the object-store array
        self.y = _as_tensor(train_data[1], torch.device("cpu"))
        self.shards = {k: torch.as_tensor(v) for k, v in shards.items()}
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
            idx = self.shards[k]
            client = ClientContext(
                client_id=int(k), x=self.x[idx].to(self.device), y=self.y[idx].to(self.device),
                model=self.models[self.architecture[k]],
                training=self.training, generator=generator(self.training_seed, round_index, k),
                noise_generator=generator(self.noise_seed, round_index, k),
                state=self.client_state.setdefault(int(k), {}), device=self.device, public_x=self.public_x,
                test_x=self.test_x)
            start = time.perf_counter()
            update = self.algorithm.client_update(payload, client)
            update.seconds = time.perf_counter() - start
            updates.append(update)
        if reduce and self.algorithm.summable and len(updates) > 1:
            return [reduce_updates(updates)]
        return updates

    def get_client_states(self) -> dict[int, dict]:
        return self.client_state

    def set_client_states(self, states: dict[int, dict]) -> None:
        self.client_state = {int(k): v for k, v in states.items() if int(k) in self.shards}


RemoteParameterServer = ray.remote(ParameterServer)
RemoteClientPool = ray.remote(ClientPool)
__all__ = ["ClientPool", "ParameterServer", "RemoteClientPool", "RemoteParameterServer", "derived_seed"]
