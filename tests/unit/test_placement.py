"""A trial's bundles (platform/runtime/placement.py) and the pre-start check that a trial fits the cluster."""
from types import SimpleNamespace

import pytest

from platform.errors import ConfigError
from platform.runtime.placement import (SLIVER_CPU, check_cluster_fits, client_bundle, pool_size, server_bundle,
                                        server_gpu, trial_bundles)


def _resources(cpu=2.0, gpu=0.0, actors=None):
    return SimpleNamespace(cpu=cpu, gpu=gpu, actors=actors)


def _total(bundles, key):
    return sum(b.get(key, 0.0) for b in bundles)


def test_without_gpus_the_bundles_are_cpu_slivers_and_client_shares_as_before():
    resources = _resources(cpu=2.0)
    assert server_gpu(resources) == 0.0 and server_bundle(resources) == {"CPU": SLIVER_CPU}
    assert trial_bundles(resources) == [{"CPU": SLIVER_CPU}, {"CPU": SLIVER_CPU}, {"CPU": 0.99}, {"CPU": 0.99}]
    assert not any("GPU" in b for b in trial_bundles(resources))


@pytest.mark.parametrize("gpu,actors,server,client", [(1.0, None, 0.01, 0.99), (0.5, None, 0.01, 0.49),
                                                      (0.05, None, 0.005, 0.045), (4.0, None, 0.01, 0.9975),
                                                      (1.0, 2, 0.01, 0.495)])
def test_with_gpus_the_server_takes_a_sliver_from_the_clients(gpu, actors, server, client):
    resources = _resources(cpu=1.0, gpu=gpu, actors=actors)
    bundles = trial_bundles(resources)
    assert bundles[0] == {"CPU": SLIVER_CPU}  # the trial loop
    assert bundles[1] == {"CPU": SLIVER_CPU, "GPU": server}  # the parameter server: it runs on CUDA
    assert len(bundles) == 2 + pool_size(resources)
    assert all(b["GPU"] == pytest.approx(client) for b in bundles[2:])
    assert _total(bundles, "GPU") == pytest.approx(gpu)  # the trial asks for what it asked for, no more


def test_client_actors_holding_whole_gpus_keep_them_and_the_server_stays_on_cpu():
    resources = _resources(cpu=2.0, gpu=2.0, actors=1)  # Ray cannot schedule 1.99 GPUs
    assert server_gpu(resources) == 0.0 and client_bundle(resources)["GPU"] == 2.0


def test_server_options_hold_the_server_bundle_per_seed(monkeypatch):
    import ray.util.scheduling_strategies as strategies

    from platform.runtime.placement import Placement

    monkeypatch.setattr(strategies, "PlacementGroupSchedulingStrategy", lambda **kw: kw)
    placement = Placement(placement_group="pg", server_bundle=1, first_client_bundle=2, replicas=2)
    options = placement.server_options(server_bundle(_resources(gpu=1.0)))
    assert options["num_cpus"] == SLIVER_CPU / 2 and options["num_gpus"] == 0.005
    assert options["scheduling_strategy"]["placement_group_bundle_index"] == 1
    assert "num_gpus" not in placement.server_options()


NODE = {"CPU": 8.0, "GPU": 1.0, "memory": 1e10}


@pytest.mark.parametrize("resources,cluster,nodes,field,words", [
    (_resources(gpu=1.0), {"CPU": 16.0}, [{"CPU": 16.0}], "resources.gpu",
     ["asks for 1 GPU but the Ray cluster has none", "--set resources.gpu=0", "clusters/"]),
    (_resources(gpu=2.0), {"CPU": 16.0, "GPU": 1.0}, [NODE], "resources.gpu", ["asks for 2 GPUs", "has 1 in all"]),
    (_resources(cpu=32.0), {"CPU": 16.0, "GPU": 2.0}, [NODE, NODE], "resources.cpu", ["asks for 32 CPUs", "16"]),
    (_resources(cpu=12.0, actors=1), {"CPU": 16.0}, [NODE, NODE], "resources.cpu", ["one client actor needs",
                                                                                    "largest node", "8"]),
    (_resources(gpu=2.0, actors=1), {"CPU": 16.0, "GPU": 2.0}, [NODE, NODE], "resources.gpu", ["largest node"]),
])
def test_a_trial_that_cannot_fit_is_refused_in_one_line(resources, cluster, nodes, field, words):
    with pytest.raises(ConfigError) as info:
        check_cluster_fits(resources, cluster, autoscaling=False, nodes=nodes)
    message = str(info.value)
    assert info.value.field == field and "\n" not in message
    assert all(w in message for w in words), message


def test_a_trial_that_fits_or_may_fit_after_scaling_passes():
    check_cluster_fits(_resources(cpu=2.0), {"CPU": 2.0}, autoscaling=False)
    check_cluster_fits(_resources(cpu=2.0, gpu=0.25), {"CPU": 2.0, "GPU": 1.0}, autoscaling=False, nodes=[NODE])
    # a trial larger than any one node spreads over several (PACK is best effort): each client actor fits a node
    check_cluster_fits(_resources(cpu=12.0), {"CPU": 16.0}, autoscaling=False, nodes=[NODE, NODE])
    check_cluster_fits(_resources(cpu=2.0, gpu=1.0), {"CPU": 2.0}, autoscaling=True)  # the autoscaler adds GPUs


def test_a_fractional_gpu_share_above_one_is_refused_on_any_cluster():
    with pytest.raises(ConfigError, match="resources.gpu.*1.25"):
        check_cluster_fits(_resources(cpu=2.0, gpu=2.5), {"CPU": 2.0, "GPU": 4.0}, autoscaling=True)
