"""One experiment's actors and its round loop, driven from the trial (or ``platform.run``) process.

Per round: sample clients with the seeded sampler, ask the parameter server for the payload (one
object-store reference shared by every actor), run local updates on the client actors in parallel,
and hand their results straight to the parameter server, which aggregates and evaluates. Weights never
pass through the driver.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import ray
import torch

from platform.data import load_dataset, partition_clients
from platform.data.public import split_public
from platform.data.sampling import client_sampling_probabilities, sample_clients_weighted
from platform.runtime.actors import RemoteClientPool, RemoteParameterServer
from platform.runtime.placement import Placement, SLIVER_CPU, client_bundle, pool_size, torch_threads
from platform.runtime.seeding import sample_clients


@dataclass(frozen=True)
class SharedData:
    """A dataset placed in the object store once; every actor of every seed reads the same copy."""

    dataset: object  # the DatasetConfig it was loaded from
    train_ref: ray.ObjectRef  # (x, y) NumPy arrays
    test_ref: ray.ObjectRef
    train_labels: np.ndarray
    input_shape: tuple
    num_classes: int
    train_groups: Optional[np.ndarray] = None
    train_coarse_labels: Optional[np.ndarray] = None
    public: object = None  # the PublicDataConfig the public split came from
    public_ref: Optional[ray.ObjectRef] = None  # unlabelled public inputs (NumPy), if the config asks for them

    def serves(self, config) -> bool:
        return self.dataset == config.dataset and self.public == config.public


def share_dataset(config) -> SharedData:
    """Load the config's dataset (and its public split, if any) and put it in the object store once.

    The public/local split is part of the shared data, so it is the same for every seed of a sweep (seeded
    by the base config's partition stream; the spec's ``first_half`` split does not depend on any seed).
    """
    train, test = load_dataset(config.dataset)
    public_ref = None
    if config.public.source != "none":
        train, public_x = split_public(train, config.public, config.stream_seed("partition"), config.dataset)
        public_ref = ray.put(public_x)
    return SharedData(config.dataset, ray.put((train.x, train.y)), ray.put((test.x, test.y)), train.y,
                      train.input_shape, train.num_classes, train.groups, train.coarse_y, config.public, public_ref)


class Federation:
    """A parameter server and a pool of client actors for one experiment config (one seed)."""

    def __init__(self, config, placement: Placement, data: Optional[SharedData] = None, wait: bool = True,
                 lazy_clients: bool = False):
        """``lazy_clients``: create the client actors only when a round needs them (a cached one-round
        analysis may never need them)."""
        self.config = config
        self.placement = placement
        if data is None or not data.serves(config):
            data = share_dataset(config)
        self.data = data
        clients = config.clients
        self.shards = partition_clients(data.train_labels, config.partition, clients.num_clients,
                                        config.stream_seed("partition"), data.train_groups, data.train_coarse_labels)
        self.sampling_probabilities = (
            None if config.partition.sampling_alpha is None else
            client_sampling_probabilities(clients.num_clients, config.partition.sampling_alpha,
                                          config.stream_seed("sampling")))
        self.num_actors = min(pool_size(config.resources), clients.num_clients)
        self.owner = np.arange(clients.num_clients) % self.num_actors
        from algorithms import ALGORITHMS

        self.algorithm_needs_test_inputs = ALGORITHMS[config.algorithm.name].clients_see_test_inputs
        # Every .remote() below returns at once: the actors are created concurrently.
        self.server = RemoteParameterServer.options(**placement.server_options()).remote(
            config, data.test_ref, data.input_shape, data.num_classes, 1, False, data.public_ref)
        self.pools: list = []
        if not lazy_clients:
            self._create_pools()
        self.ready_refs = [self.server.ready.remote()] + [p.ready.remote() for p in self.pools]
        if wait:
            ray.get(self.ready_refs)
        self.round = 0
        self._started: Optional[float] = None

    def _create_pools(self) -> None:
        config, data = self.config, self.data
        bundle = client_bundle(config.resources)
        threads = torch_threads(bundle, self.placement.replicas)
        self.pools = [
            RemoteClientPool.options(**self.placement.client_options(a, bundle)).remote(
                config, data.train_ref, {k: self.shards[k] for k in np.flatnonzero(self.owner == a)},
                data.input_shape, data.num_classes, threads, config.resources.gpu > 0, data.public_ref,
                data.test_ref if self.algorithm_needs_test_inputs else None)
            for a in range(self.num_actors)
        ]

    def client_updates(self, round_index: int, sampled: np.ndarray, reduce: bool = True) -> list[ray.ObjectRef]:
        """Launch local training of the sampled clients on their actors; one reference per busy actor."""
        if not self.pools:
            self._create_pools()
        payload = self.server.broadcast.remote(sampled.tolist())  # one object, shared by all actors
        return [pool.train.remote(payload, sampled[self.owner[sampled] == a].tolist(), round_index, reduce)
                for a, pool in enumerate(self.pools) if np.any(self.owner[sampled] == a)]

    def run_one_round_cached(self, cache, stage) -> dict:
        """One-round analysis: client models trained once per upstream config (cached), then aggregated.

        The client stage (train the round-0 sample from the common initialisation) is looked up in the
        stage cache under exactly the config fields it depends on; a trial that finds it trains no client.
        """
        self._started = time.perf_counter()
        sampled = self.sampled_clients(0)

        def train_clients() -> list:
            return [u for part in ray.get(self.client_updates(0, sampled, reduce=False)) for u in part]

        updates, hit = cache.get_or_compute(stage, one_round_stage_fields(self.config), train_clients)
        metrics = ray.get(self.server.aggregate.remote(updates))
        self.round = 1
        metrics["seconds"] = time.perf_counter() - self._started
        metrics["client_stage_cached"] = float(hit)
        return metrics

    def sampled_clients(self, round_index: int) -> np.ndarray:
        """Uniform without replacement, or skewed by Dir(partition.sampling_alpha) probabilities (§7.3)."""
        c = self.config.clients
        if self.sampling_probabilities is not None:
            return sample_clients_weighted(self.sampling_probabilities, c.clients_per_round,
                                           self.config.stream_seed("sampling"), round_index)
        return sample_clients(c.num_clients, c.clients_per_round, self.config.stream_seed("sampling"), round_index)

    def start_round(self) -> ray.ObjectRef:
        """Launch the next round; returns a reference to its metrics (see :meth:`finish_round`)."""
        self._started = time.perf_counter()
        sampled = self.sampled_clients(self.round)
        self._sample_seconds = time.perf_counter() - self._started
        partials = self.client_updates(self.round, sampled)
        return self.server.aggregate.remote(*partials)

    def finish_round(self, metrics_ref: ray.ObjectRef) -> dict:
        metrics = ray.get(metrics_ref)
        self.round += 1
        metrics["seconds"] = time.perf_counter() - self._started
        metrics["sample_seconds"] = getattr(self, "_sample_seconds", 0.0)
        return metrics

    def run_round(self) -> dict:
        return self.finish_round(self.start_round())

    # --- checkpointing -------------------------------------------------------------------------------------
    def checkpoint(self) -> dict:
        """Everything needed to continue: server state, the round, and every client's persistent state."""
        client_states = {}
        for states in ray.get([p.get_client_states.remote() for p in self.pools]):
            client_states.update(states)
        return {"round": self.round, "server": ray.get(self.server.get_state.remote()), "clients": client_states}

    def restore(self, checkpoint: dict) -> None:
        self.round = int(checkpoint["round"])
        ray.get([self.server.set_state.remote(checkpoint["server"])]
                + [p.set_client_states.remote(checkpoint["clients"]) for p in self.pools])

    def save(self, path: str) -> None:
        torch.save(self.checkpoint(), path)

    def load(self, path: str) -> None:
        self.restore(torch.load(path, weights_only=False))

    def global_weights(self) -> torch.Tensor:
        return ray.get(self.server.global_weights.remote())

    def shutdown(self) -> None:
        for actor in [self.server, *self.pools]:
            ray.kill(actor)


ONE_ROUND_STAGE = "one_round_clients"
ONE_ROUND_STAGE_VERSION = "1"
_UPSTREAM_SECTIONS = ("dataset.", "partition.", "model.", "clients.", "seeds.", "public.")


def one_round_stage_fields(config) -> dict:
    """Exactly the config values the one-round client stage depends on (the cache key)."""
    from algorithms import ALGORITHMS

    flat = config.flat()
    fields = {k: v for k, v in flat.items() if k.startswith(_UPSTREAM_SECTIONS)}
    fields["seed"] = config.seed
    algorithm = ALGORITHMS[config.algorithm.name](config.algorithm.params)
    fields.update({f"algorithm.client.{k}": v for k, v in algorithm.client_stage_fields().items()})
    return fields


def one_round_stage(config):
    from platform.cache import Stage

    return Stage(ONE_ROUND_STAGE, ONE_ROUND_STAGE_VERSION, tuple(sorted(one_round_stage_fields(config))))


def replicate_over_seeds(config, seeds) -> list:
    """One config per seed (the sweep's ``seeds`` list); each stream seed then derives from it."""
    return [dataclasses.replace(config, seed=int(s)) for s in seeds]


__all__ = ["Federation", "SharedData", "SLIVER_CPU", "replicate_over_seeds", "share_dataset"]
