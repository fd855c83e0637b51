"""How a trial's CPUs and GPUs are split between its parameter server and its client actors.

A trial holds one placement group (``PlacementGroupFactory`` of :func:`trial_bundles`):

* bundle 0: the Tune trainable (the round loop), a sliver of CPU;
* bundle 1: the parameter server(s), a sliver of CPU;
* bundles 2..n+1: one per client actor, the rest of the CPUs and all GPUs, split evenly.

Every actor a trial creates must fit these bundles, or the trial waits forever. With several seeds per
trial, the seeds' actors share the same bundles, each taking 1/S of a bundle.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

SLIVER_CPU = 0.01


def pool_size(resources) -> int:
    """Client actors per trial: explicit, else one per whole GPU, else one per whole CPU."""
    if resources.actors:
        return resources.actors
    if resources.gpu >= 1:
        return int(resources.gpu)
    return max(1, int(resources.cpu))


def client_bundle(resources) -> dict:
    n = pool_size(resources)
    bundle = {"CPU": max(resources.cpu - 2 * SLIVER_CPU, SLIVER_CPU) / n}
    if resources.gpu > 0:
        bundle["GPU"] = resources.gpu / n
    return bundle


def trial_bundles(resources) -> list[dict]:
    return [{"CPU": SLIVER_CPU}, {"CPU": SLIVER_CPU}] + [client_bundle(resources)] * pool_size(resources)


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

    def server_options(self) -> dict:
        return self._options(self.server_bundle, {"CPU": SLIVER_CPU})

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
