"""One experiment's actors and its round loop, driven from the trial (or ``platform.run``) process.

Per round: sample clients with the seeded sampler, ask the parameter server for the payload (one
object-store reference shared by every actor), run local updates on the client actors in parallel,
and hand their results straight to the parameter server, which aggregates and evaluates. Weights never
pass through the driver. When another round follows, the server returns the next payload with the
aggregate and evaluates afterwards, and the next round's clients are launched on that payload at once, so
evaluation and reporting overlap training (:meth:`Federation.start_round`).
"""
from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import ray
import torch

from algorithms import resolve_algorithm
from platform.data.sampling import client_sampling_probabilities, sample_clients_weighted
from platform.runtime.actors import ClientPool, ParameterServer, RoundResult
from platform.runtime.local_data import LocalData, client_splits_of, load_shared_data
from platform.runtime.placement import (Placement, SLIVER_CPU, client_bundle, pool_size, server_bundle, server_threads,
                                        torch_threads)
from platform.runtime.pretrain import PretrainNotPrepared, architectures_of, pretrained_key
from platform.runtime.seeding import sample_clients
from platform.runtime.shards import ClientSplits

RemoteParameterServer = ray.remote(ParameterServer)
RemoteClientPool = ray.remote(ClientPool)


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
    val_fraction: float = 0.0  # server.val_fraction the server's validation split was taken with
    val_ref: Optional[ray.ObjectRef] = None  # the server's validation split (x, y)
    # Pre-trained feature extractors (platform.runtime.pretrain), put in the object store once by the driver:
    # (architecture, init seed, PretrainConfig) -> ObjectRef of the features state_dict.
    pretrained: Optional[dict] = None
    # public.source image: the pool's first crops, uint8 [<=64, 3, S, S], for the logged grid (public/patches.png)
    public_samples: Optional[np.ndarray] = None
    split_seed: Optional[int] = None  # seeds.split the public and validation splits were taken with
    val_source: str = "train"  # server.val_source: the split the validation split was taken from

    def serves(self, config) -> bool:
        """Whether this data serves ``config``: the same dataset, public pool and validation split, and, when
        ``config`` pre-trains, every (architecture, seed) it needs prepared."""
        return (self.dataset == config.dataset and self.public == config.public
                and self.val_fraction == config.server.val_fraction and self.val_source == config.server.val_source
                and (self.split_seed == config.split_seed() or (self.val_ref is None and self.public_ref is None))
                and self.missing_pretrained(config) == [])

    def missing_pretrained(self, config) -> list[str]:
        """The architectures of ``config`` whose pre-trained features this data does not hold."""
        if config.pretrain.method == "none":
            return []
        have = self.pretrained or {}
        return [a for a in architectures_of(config) if pretrained_key(config, a) not in have]

    def pretrained_for(self, config) -> Optional[dict]:
        """architecture -> ObjectRef of its pre-trained features for ``config`` (None without pre-training);
        raises :class:`platform.runtime.pretrain.PretrainNotPrepared` when one was not prepared."""
        if config.pretrain.method == "none":
            return None
        missing = self.missing_pretrained(config)
        if missing:
            raise PretrainNotPrepared(
                f"pretrain.method is {config.pretrain.method} but no pre-trained features of {', '.join(missing)} "
                f"(init seed {config.stream_seed('init')}, {config.pretrain}) were prepared for this run; the "
                f"driver prepares them before any trial starts (platform.runtime.pretrain.prepare_pretrained, done by "
                f"platform.sweep.command and platform.run). Swept continuous pretrain.* values and swept dataset/public "
                f"sections cannot be prepared")
        return {a: self.pretrained[pretrained_key(config, a)] for a in architectures_of(config)}


def share_dataset(config, cache=None, loaded: Optional[LocalData] = None) -> SharedData:
    """Put the config's data (:func:`load_shared_data`; ``loaded``: what it returned for this config, else it is
    called now) in the object store once."""
    data = loaded if loaded is not None else load_shared_data(config, cache)
    train = data.train
    public_ref = None if data.public_x is None else ray.put(data.public_x)
    val_ref = None if data.val is None else ray.put(data.val)
    return SharedData(config.dataset, ray.put((train.x, train.y)), ray.put((data.test.x, data.test.y)), train.y,
                      train.input_shape, train.num_classes, train.groups, train.coarse_y, config.public, public_ref,
                      config.server.val_fraction, val_ref, val_source=config.server.val_source,
                      public_samples=data.public_samples,
                      split_seed=config.split_seed())


class InProcess:
    """An object in this process that callers drive like an actor: ``handle.method.remote(*args)`` resolves
    ObjectRef arguments, runs the method at once with ``num_threads`` torch threads (as the actor would have)
    and returns an ObjectRef to the result."""

    def __init__(self, cls, *args, num_threads: int = 1):
        self._threads = num_threads
        self._obj = self._call(cls, args)

    def _call(self, fn, args):
        args = [ray.get(a) if isinstance(a, ray.ObjectRef) else a for a in args]
        before = torch.get_num_threads()
        torch.set_num_threads(self._threads)
        try:
            return fn(*args)
        finally:
            torch.set_num_threads(before)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        method = getattr(self._obj, name)
        call = self._call

        class _Method:
            @staticmethod
            def remote(*args):
                return ray.put(call(method, args))

        return _Method


class WarmActors:
    """Actors kept alive between the trials that one (reused) Tune trial process runs.

    Tune with ``reuse_actors`` hands a finished trial's process, and its placement group, to the next trial
    with the same resources. Its parameter servers and client actors then stay too: the next trial resets
    them (:meth:`platform.runtime.actors.Reusable.reset`) instead of paying a process start and ``import
    torch`` per actor. Actors are keyed by their placement-group bundle and resource request, so a reused
    actor always fits the bundle it came from. When Tune ends the trial process it removes the placement
    group, which kills every actor in it.
    """

    def __init__(self):
        self._idle: dict[tuple, list] = {}

    def take(self, key: tuple):
        """An idle actor for ``key``, or None. Idle actors in the same bundle under another key are killed, so
        a new actor for ``key`` fits the bundle."""
        stack = self._idle.get(key)
        if stack:
            return stack.pop()
        for other in [k for k in self._idle if k[:2] == key[:2] and k != key]:
            for actor in self._idle.pop(other):
                ray.kill(actor)
        return None

    def give(self, key: tuple, actor) -> None:
        self._idle.setdefault(key, []).append(actor)

    def clear(self) -> None:
        """Kill every idle actor (after a failure, nothing is known about them)."""
        for actors in self._idle.values():
            for actor in actors:
                ray.kill(actor)
        self._idle.clear()

    def __len__(self) -> int:
        return sum(len(v) for v in self._idle.values())


def _actor_key(kind: str, options: dict) -> tuple:
    """(placement group, bundle, kind, resources): what a reused actor must match to fit where it runs."""
    strategy = options["scheduling_strategy"]
    return (strategy.placement_group.id.hex(), strategy.placement_group_bundle_index, kind,
            options["num_cpus"], options.get("num_gpus", 0))


class Federation:
    """A parameter server and a pool of client actors for one experiment config (one seed).

    In ``mode: one_round`` the parameter server is no actor but an :class:`InProcess` object in the calling
    (trial) process: it aggregates once, from client updates this process already holds (the stage cache
    returns them here), so an actor would only add a process start and a copy of every update.

    A client actor that dies mid-round is replaced and the round is run again (at most ``MAX_ROUND_RETRIES``
    times): nothing of the round was committed, client states live on the parameter server, and every client
    draws from its own (round, client) generators, so the retried round gives exactly the same results.
    """

    MAX_ROUND_RETRIES = 2

    def __init__(self, config, placement: Placement, data: Optional[SharedData] = None, wait: bool = True,
                 lazy_clients: bool = False, warm: Optional[WarmActors] = None, cache=None):
        """``lazy_clients``: create the client actors only when a round needs them (a cached one-round
        analysis may never need them). ``warm``: take idle actors from there (reset for this config) before
        creating new ones, and give them back at :meth:`shutdown`. ``cache``: the stage cache behind the
        algorithm contexts' ``memo`` and the source-image crop pool (None: one-shot work is recomputed in every
        trial)."""
        self.config = config
        self.cache = cache
        self.warm = warm
        self._keys: dict = {}  # actor id -> its WarmActors key
        self.placement = placement
        if data is None or not data.serves(config):
            data = share_dataset(config, cache=cache)
        self.data = data
        self.pretrained = data.pretrained_for(config)  # arch -> ObjectRef; raises if not prepared
        self.splits = client_splits(config, data)
        self.shards = self.splits.train
        self._splits_ref = None
        clients = config.clients
        self.sampling_probabilities = (
            None if config.partition.sampling_alpha is None else
            client_sampling_probabilities(clients.num_clients, config.partition.sampling_alpha,
                                          config.stream_seed("sampling")))
        self.num_actors = min(pool_size(config.resources), clients.num_clients)
        self.owner = np.arange(clients.num_clients) % self.num_actors  # each client's home actor
        # A round's clients go to the least-loaded actors (by samples; every actor reads all data and all indices,
        # and stateful clients' states come from the server, so any actor can train any client).
        self.client_sizes = np.diff(self.shards.offsets)
        self._prefetched: dict[int, list] = {}  # round -> its clients' results, launched ahead (start_round)
        self._clock: Optional[float] = None  # when the previous round finished
        algorithm = resolve_algorithm(config.algorithm.name)
        self.algorithm_needs_test_inputs = algorithm.clients_see_test_inputs
        self.keeps_client_state = algorithm.keeps_client_state
        self.balance = self.num_actors > 1
        # Every .remote() below returns at once: the actors are created concurrently.
        threads = server_threads(config.resources, placement.replicas)
        self.server_in_process = config.mode == "one_round"
        bundle = server_bundle(config.resources)
        # the server actor holds a GPU share when the trial has GPUs (placement.server_bundle); in process, the
        # trial's own bundle has none
        wants_gpu = bool(bundle.get("GPU")) and not self.server_in_process
        server_args = (config, data.test_ref, data.input_shape, data.num_classes, threads, wants_gpu, data.public_ref,
                       data.val_ref, cache, self.pretrained)
        self.ready_refs: list = []
        if self.server_in_process:
            self.server = InProcess(ParameterServer, *server_args, num_threads=threads)
        else:
            self.server = self._actor("server", RemoteParameterServer, placement.server_options(bundle), server_args)
        self.pools: list = []
        self._pool_specs: list = []  # (options, args) of each client actor, to replace one that dies
        if not lazy_clients:
            self._create_pools()
        if wait:
            ray.get(self.ready_refs)
        self.round = 0
        self._started: Optional[float] = None

    def _create_pools(self) -> None:
        config, data = self.config, self.data
        bundle = client_bundle(config.resources)
        threads = torch_threads(bundle, self.placement.replicas)
        if self._splits_ref is None:
            self._splits_ref = ray.put(self.splits)
        self._pool_specs = [
            (self.placement.client_options(a, bundle), (
                config, data.train_ref, self._splits_ref, data.input_shape, data.num_classes, threads,
                config.resources.gpu > 0, data.public_ref, data.test_ref if self.algorithm_needs_test_inputs else None,
                np.flatnonzero(self.owner == a), self.cache, self.pretrained))
            for a in range(self.num_actors)]
        self.pools = [self._actor("clients", RemoteClientPool, options, args) for options, args in self._pool_specs]

    def _actor(self, kind: str, remote_class, options: dict, args: tuple):
        """A reset warm actor, or a new one; its readiness reference goes to ``self.ready_refs``. Every call
        returns at once, so all actors start concurrently."""
        key = _actor_key(kind, options)
        actor = self.warm.take(key) if self.warm is not None else None
        if actor is None:
            actor = remote_class.options(**options).remote(*args)
            self.ready_refs.append(actor.ready.remote())
        else:
            self.ready_refs.append(actor.reset.remote(*args))
        self._keys[actor._actor_id] = key
        return actor

    def replace_dead_pools(self) -> int:
        """Replace every client actor that no longer answers by a new one; returns how many were replaced."""
        replaced = 0
        for a, pool in enumerate(self.pools):
            try:
                ray.get(pool.ready.remote(), timeout=60)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                ray.kill(pool)
                options, args = self._pool_specs[a]
                self._keys.pop(pool._actor_id, None)
                self.pools[a] = RemoteClientPool.options(**options).remote(*args)
                self._keys[self.pools[a]._actor_id] = _actor_key("clients", options)
                replaced += 1
        ray.get([pool.ready.remote() for pool in self.pools])
        return replaced

    def assign(self, sampled: np.ndarray) -> list[np.ndarray]:
        """The sampled clients each actor trains this round (in sampled order within an actor).

        Balanced: largest client first to the actor with the fewest samples so far (ties: lower client id,
        lower actor), so the actors finish together; deterministic, and results do not depend on it (each
        client trains from the same weights with its own (round, client) generators). With one actor: all.
        """
        sampled = np.asarray(sampled, dtype=np.int64)
        if not self.balance:
            return [sampled[self.owner[sampled] == a] for a in range(self.num_actors)]
        sizes = self.client_sizes[sampled]
        load = np.zeros(self.num_actors, dtype=np.int64)
        actor_of = np.empty(len(sampled), dtype=np.int64)
        for i in np.lexsort((sampled, -sizes)):
            a = int(np.argmin(load))
            actor_of[i] = a
            load[a] += sizes[i]
        return [sampled[actor_of == a] for a in range(self.num_actors)]

    def client_updates(self, round_index: int, sampled: np.ndarray, reduce: bool = True,
                       payload: Optional[ray.ObjectRef] = None) -> list[ray.ObjectRef]:
        """Launch local training of the sampled clients on the actors; one :class:`RoundResult` reference per
        busy actor (whose clients are in ``self._round_parts``, in the same order). ``payload``: the round's
        payload if already asked for (else the server broadcasts it now). A stateful method's actors get their
        clients' states from the server, asked for after the previous round's aggregate (actor calls from one
        caller run in order)."""
        if not self.pools:
            self._create_pools()
        if payload is None:
            payload = self.server.broadcast.remote(sampled.tolist())  # one object, shared by all actors
        busy = [(pool, part) for pool, part in zip(self.pools, self.assign(sampled)) if len(part)]
        self._round_parts = [part for _, part in busy]
        return [pool.train.remote(payload, part.tolist(), round_index, reduce,
                                  self.server.states_of.remote(part.tolist()) if self.keeps_client_state else None)
                for pool, part in busy]

    def run_one_round_cached(self, cache, stage) -> dict:
        """One-round analysis: client models trained once per upstream config (cached), then aggregated.

        The client stage (train the round-0 sample from the common initialisation) is looked up in the
        stage cache under exactly the config fields it depends on; a trial that finds it trains no client.
        """
        self._started = time.perf_counter()
        sampled = self.sampled_clients(0)

        def train_clients() -> list:  # one update per client, in sampled order whatever the actors
            refs = self.client_updates(0, sampled, reduce=False)
            by_client = {int(k): u for part, got in zip(self._round_parts, ray.get(refs))
                         for k, u in zip(part, got.updates)}
            return [by_client[int(k)] for k in sampled]

        updates, hit = cache.get_or_compute(stage, one_round_stage_fields(self.config), train_clients)
        metrics = ray.get(self.server.aggregate.remote(RoundResult(updates=updates)))
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

    def start_round(self, launch_next: bool = False) -> tuple:
        """Launch the next round; returns the references :meth:`finish_round` waits for.

        With ``launch_next`` (the caller will run another round; never for methods that keep client state),
        the server aggregates, hands out the next round's payload at once and only then evaluates, and the next
        round's clients are launched on that payload now: they train while the server evaluates and while this
        round's metrics are reported. Nothing else changes: the same payload, the same clients, the same
        results, and the server state stays this round's until the next :meth:`start_round`.
        """
        if self._clock is None:
            self._clock = time.perf_counter()
        self._launch_next = launch_next
        started = time.perf_counter()
        r = self.round
        partials = self._prefetched.pop(r, None)
        if partials is None:
            partials = self.client_updates(r, self.sampled_clients(r))
        self._sample_seconds = time.perf_counter() - started
        if not launch_next or self.keeps_client_state:
            return self.server.aggregate.remote(*partials), None
        following = self.sampled_clients(r + 1)
        metrics_ref, payload_ref = self.server.aggregate_and_broadcast.options(num_returns=2).remote(
            following.tolist(), *partials)
        evaluation_ref = self.server.evaluate_global.remote(1)  # 1 thread: the clients hold the cores now
        self._prefetched = {r + 1: self.client_updates(r + 1, following, payload=payload_ref)}
        return metrics_ref, evaluation_ref

    def finish_round(self, refs: tuple, retries: int = MAX_ROUND_RETRIES) -> dict:
        """The round's metrics; ``seconds`` is the wall time since the previous round finished. A round whose
        client actor died is run again on a replacement (see the class docstring)."""
        metrics_ref, evaluation_ref = refs
        try:
            if evaluation_ref is None:
                metrics = ray.get(metrics_ref)
            else:
                aggregated, metrics = ray.get([metrics_ref, evaluation_ref])
                metrics.update(aggregated)
        except ray.exceptions.RayActorError:
            if retries <= 0 or not self.pools or not self.replace_dead_pools():
                raise
            self._prefetched = {}
            return self.finish_round(self.start_round(self._launch_next), retries - 1)
        self.round += 1
        now = time.perf_counter()
        metrics["seconds"] = now - self._clock
        self._clock = now
        metrics["sample_seconds"] = getattr(self, "_sample_seconds", 0.0)
        return metrics

    # --- checkpointing -------------------------------------------------------------------------------------
    def checkpoint(self) -> dict:
        """Everything needed to continue: the round, the server state and every client's stored state."""
        return {"round": self.round, **ray.get(self.server.checkpoint.remote())}

    def restore(self, checkpoint: dict) -> None:
        self.round = int(checkpoint["round"])
        self._prefetched = {}
        ray.get(self.server.restore.remote(checkpoint))

    def save(self, path: str) -> None:
        torch.save(self.checkpoint(), path)

    def load(self, path: str) -> None:
        self.restore(torch.load(path, weights_only=False))

    def peak_memory(self) -> list[dict]:
        """Each actor's peak memory (:meth:`Reusable.peak_memory`): the parameter server's first, then each client
        pool's; an in-process server reports this process."""
        actors = [self.server] + list(self.pools)
        return ray.get([actor.peak_memory.remote() for actor in actors])

    def shutdown(self, keep_warm: bool = False) -> None:
        """Kill the actors, or, with ``keep_warm`` and a :class:`WarmActors`, leave them idle there for the next
        trial (only after a clean end: an actor that failed mid-call must not be reused)."""
        for actor in ([] if self.server_in_process else [self.server]) + self.pools:
            if keep_warm and self.warm is not None:
                self.warm.give(self._keys[actor._actor_id], actor)
            else:
                ray.kill(actor)
        self.pools = []


def client_splits(config, data: SharedData) -> ClientSplits:
    """Every client's splits (:func:`platform.runtime.local_data.client_splits_of`) of the shared data."""
    return client_splits_of(config, data.train_labels, data.train_groups, data.train_coarse_labels)


ONE_ROUND_STAGE = "one_round_clients"
_UPSTREAM_SECTIONS = ("dataset.", "partition.", "model.", "clients.", "seeds.", "public.")


def one_round_stage_fields(config) -> dict:
    """Exactly the config values the one-round client stage depends on (the cache key)."""
    flat = config.flat()
    fields = {k: v for k, v in flat.items() if k.startswith(_UPSTREAM_SECTIONS)}
    fields["seed"] = config.seed
    fields["server.val_fraction"] = config.server.val_fraction  # the server's split shrinks the clients' pool
    fields["server.val_source"] = config.server.val_source  # ... unless it comes from the test split
    algorithm = resolve_algorithm(config.algorithm.name)(config.algorithm.params)
    fields.update({f"algorithm.client.{k}": v for k, v in algorithm.client_stage_fields().items()})
    return fields


def one_round_stage(config):
    """The one-round client stage; its code version covers the modules that produce a client's update: the
    algorithm's classes, local training, flat weights, the models, the data layer and the client actor."""
    # The modules hashed below, by name (loaded already: this module and the actors import them).
    import algorithms.common.batched_training
    import algorithms.common.training
    import algorithms.common.weights
    import algorithms.models
    import platform.config.models
    import platform.data.datasets
    import platform.data.partition
    import platform.data.public
    import platform.data.splits
    import platform.data.stand_in
    import platform.runtime.actors
    import platform.runtime.seeding
    import platform.runtime.shards
    from platform.stages.cache import Stage, code_version

    algorithm = resolve_algorithm(config.algorithm.name)
    own = [cls for cls in algorithm.__mro__ if cls.__module__.startswith("algorithms.") or cls is algorithm]
    version = code_version(*own, algorithms.common.training, algorithms.common.batched_training,
                           algorithms.common.weights, algorithms.models,
                           *(module for name, module in sorted(vars(algorithms.models).items())
                             if inspect.ismodule(module) and module.__name__.startswith("algorithms.models.")),
                           platform.config.models, platform.data.datasets, platform.data.partition,
                           platform.data.public, platform.data.splits, platform.data.stand_in, platform.runtime.actors,
                           platform.runtime.seeding, platform.runtime.shards)
    return Stage(ONE_ROUND_STAGE, version, tuple(sorted(one_round_stage_fields(config))))


__all__ = ["Federation", "LocalData", "SharedData", "SLIVER_CPU", "WarmActors", "load_shared_data",
           "share_dataset"]
