"""How a trial's CPUs and GPUs are split between its parameter server and its client actors.

A trial holds one placement group (``PlacementGroupFactory`` of :func:`trial_bundles`):

* bundle 0: the Tune trainable (the round loop), a sliver of CPU;
* bundle 1: the parameter server(s), a sliver of CPU and, when the trial has GPUs, a sliver of GPU
  (:func:`server_bundle`), so that server-side work (FedDF / FedAUX distillation, evaluation) runs on CUDA;
* bundles 2..n+1: one per client actor, the rest of the CPUs and GPUs, split evenly.

Every actor a trial creates must fit these bundles, or the trial waits forever. With several seeds per
trial, the seeds' actors share the same bundles, each taking 1/S of a bundle. :func:`check_cluster_fits` says,
before anything starts, when a trial cannot fit the cluster at all.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from platform.errors import ConfigError

SLIVER_CPU = 0.01
#: The parameter server's GPU share when a trial has GPUs (at most a tenth of the trial's), taken from the client
#: actors' share. Ray schedules fractions of a GPU down to 0.0001, and a unit resource above 1 must be whole.
SLIVER_GPU = 0.01


def pool_size(resources) -> int:
    """Client actors per trial: explicit, else one per whole GPU, else one per whole CPU."""
    if resources.actors:
        return resources.actors
    if resources.gpu >= 1:
        return int(resources.gpu)
    return max(1, int(resources.cpu))


def server_gpu(resources) -> float:
    """The parameter server's GPU share: :data:`SLIVER_GPU` (at most a tenth of ``resources.gpu``) when the trial
    has GPUs, else 0. Also 0 when the client actors hold more than one GPU each (``actors`` < ``gpu``): their whole
    GPUs cannot give up a fraction (Ray needs a GPU request above 1 to be whole), so the server stays on CPU."""
    if resources.gpu <= 0 or resources.gpu / pool_size(resources) > 1:
        return 0.0
    return round(min(SLIVER_GPU, resources.gpu / 10), 4)


def server_bundle(resources) -> dict:
    """The parameter server's bundle: a CPU sliver, and :func:`server_gpu` of GPU when that is above 0."""
    gpu = server_gpu(resources)
    return {"CPU": SLIVER_CPU, "GPU": gpu} if gpu > 0 else {"CPU": SLIVER_CPU}


def client_bundle(resources) -> dict:
    n = pool_size(resources)
    bundle = {"CPU": max(resources.cpu - 2 * SLIVER_CPU, SLIVER_CPU) / n}
    if resources.gpu > 0:
        bundle["GPU"] = (resources.gpu - server_gpu(resources)) / n
    return bundle


def trial_bundles(resources) -> list[dict]:
    return [{"CPU": SLIVER_CPU}, server_bundle(resources)] + [client_bundle(resources)] * pool_size(resources)


def _plural(amount: float, unit: str) -> str:
    text = f"{amount:g} {unit}"
    return text if amount == 1 else text + "s"


def check_cluster_fits(resources, cluster_resources: Mapping[str, float], autoscaling: bool,
                       nodes: Sequence[Mapping[str, float]] = ()) -> None:
    """Raise a :class:`ConfigError` on ``resources.gpu`` or ``resources.cpu`` when a trial of ``resources`` can
    never start on the cluster: it asks for GPUs and the cluster has none, or more CPUs / GPUs than the cluster
    has, or one of its bundles (:func:`trial_bundles`; a client actor's, the largest) needs more than the largest
    node has. ``cluster_resources``: the cluster's totals (``ray.cluster_resources()``); ``nodes``: each alive
    node's resources (``[n["Resources"] for n in ray.nodes() if n["Alive"]]``), for the per-node check (skipped
    when not given). A trial's bundles are packed (``PACK``) but may spread over nodes, so the trial as a whole
    needs the cluster's totals, each bundle one node. With ``autoscaling`` nothing is refused: the autoscaler may
    add the nodes. Also refused, on any cluster: a client actor's GPU share above 1 that is not whole, which Ray
    cannot schedule."""
    bundles = trial_bundles(resources)
    client_gpu = client_bundle(resources).get("GPU", 0.0)
    if client_gpu > 1 and not float(client_gpu).is_integer():
        raise ConfigError("resources.gpu", f"{resources.gpu:g} GPUs over {pool_size(resources)} client actors "
                                           f"gives each {client_gpu:g}; Ray schedules a GPU share of at most 1 or "
                                           f"a whole number: set resources.gpu to a whole multiple of the actors, "
                                           f"or resources.actors")
    if autoscaling:
        return
    hint = {"GPU": "run on CPUs with --set resources.gpu=0, or start a cluster with GPUs (clusters/)",
            "CPU": "lower resources.cpu, or start a larger cluster (clusters/)"}
    for key, field, asked in (("GPU", "resources.gpu", resources.gpu), ("CPU", "resources.cpu", resources.cpu)):
        if asked <= 0:
            continue
        have = float(cluster_resources.get(key, 0.0))
        if have <= 0:
            raise ConfigError(field, f"the trial asks for {_plural(asked, key)} but the Ray cluster has none; "
                                     f"{hint[key]}")
        needed = sum(b.get(key, 0.0) for b in bundles)
        if needed > have + 1e-9:
            raise ConfigError(field, f"the trial asks for {_plural(asked, key)} but the Ray cluster has "
                                     f"{have:g} in all; {hint[key]}")
        if nodes:
            largest = max(float(n.get(key, 0.0)) for n in nodes)
            biggest = max(b.get(key, 0.0) for b in bundles)
            if biggest > largest + 1e-9:
                raise ConfigError(field, f"the trial asks for {_plural(asked, key)} and one client actor needs "
                                         f"{biggest:g} on one node, but the largest node of the Ray cluster has "
                                         f"{largest:g}; {hint[key]}")


@dataclass
class Placement:
    """Where one replica (seed) of an experiment puts its actors."""

    placement_group: object  # ray.util.placement_group.PlacementGroup
    server_bundle: int
    first_client_bundle: int
    replicas: int = 1  # seeds sharing the bundles
    owned: bool = False  # created by us (outside Tune), so ours to remove

    def release(self) -> None:
        if self.owned:
            from ray.util import remove_placement_group

            remove_placement_group(self.placement_group)
            self.owned = False

    def server_options(self, bundle: Optional[dict] = None) -> dict:
        """Actor options of a parameter server holding ``bundle`` (:func:`server_bundle`; default: a CPU
        sliver)."""
        return self._options(self.server_bundle, bundle or {"CPU": SLIVER_CPU})

    def client_options(self, actor_index: int, bundle: dict) -> dict:
        return self._options(self.first_client_bundle + actor_index, bundle)

    def _options(self, index: int, bundle: dict) -> dict:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        options = {"num_cpus": bundle["CPU"] / self.replicas,
                   "scheduling_strategy": PlacementGroupSchedulingStrategy(
                       placement_group=self.placement_group, placement_group_bundle_index=index)}
        if bundle.get("GPU"):
            options["num_gpus"] = bundle["GPU"] / self.replicas
        return options


def torch_threads(bundle: dict, replicas: int = 1) -> int:
    """Threads for an actor holding ``bundle`` (shared by ``replicas`` actors): its whole-CPU share, at least 1.

    The two slivers of the trial's CPUs that the trial loop and the parameter server hold (at most
    ``2 * SLIVER_CPU`` per bundle) do not cost a client actor a thread: a 1.98-CPU bundle runs 2 threads.
    """
    return max(1, math.floor(bundle["CPU"] / replicas + 2 * SLIVER_CPU + 1e-9))


def server_threads(resources, replicas: int = 1) -> int:
    """Threads for a parameter server: it aggregates and evaluates while its own client actors wait for the
    next round, so it may use its experiment's whole-CPU share (``resources.cpu`` over the seeds sharing it)."""
    return max(1, math.floor(resources.cpu / replicas + 1e-9))


def current_placement(replicas: int = 1) -> Optional[Placement]:
    """The placement of the Tune trial we run in, or None outside Tune."""
    from ray.util import get_current_placement_group

    pg = get_current_placement_group()
    if pg is None:
        return None
    return Placement(pg, server_bundle=1, first_client_bundle=2, replicas=replicas)


def own_placement(resources, replicas: int = 1) -> Placement:
    """A placement group of our own (outside Tune), with the same bundles minus the trainable's."""
    from ray.util import placement_group

    pg = placement_group(trial_bundles(resources)[1:], strategy="PACK")
    return Placement(pg, server_bundle=0, first_client_bundle=1, replicas=replicas, owned=True)


AUTOSCALING_ENV = "FEDSWEEP_AUTOSCALING"  # set (to 1) on the clusters of clusters/, whose autoscaler adds nodes


def check_fits_connected_cluster(resources) -> None:
    """:func:`check_cluster_fits` against the Ray cluster this process is connected to (one line before anything is
    written when a trial could never start there). A cluster that autoscales says so with ``FEDSWEEP_AUTOSCALING=1``
    (clusters/ sets it on every node)."""
    import ray

    autoscaling = os.environ.get(AUTOSCALING_ENV, "").strip().lower() in ("1", "true", "yes")
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    check_cluster_fits(resources, ray.cluster_resources(), autoscaling, nodes)


def trials_at_once(resources, max_concurrent: Optional[int]) -> str:
    """How many trials of ``resources`` the connected cluster runs side by side now, in words for the sweep's first
    line (``search.max_concurrent_trials`` caps it; without it Tune fits as many as the cluster holds, and an
    autoscaling cluster grows)."""
    import ray

    have = ray.cluster_resources()
    fits = [math.floor(have.get(key, 0.0) / asked + 1e-9)
            for key, asked in (("GPU", resources.gpu), ("CPU", resources.cpu)) if asked > 0]
    n = max(min(fits), 1) if fits else 1
    if max_concurrent:
        n = min(n, max_concurrent)
    where = (f"{have.get('GPU', 0):g} GPU(s), {have.get('CPU', 0):g} CPU(s) in the cluster"
             + (" now" if os.environ.get(AUTOSCALING_ENV) else ""))
    return f"{n} trial(s) at once ({where}" + (f", max_concurrent_trials {max_concurrent})" if max_concurrent else ")")

