"""The Ray runtime with real actors: determinism, checkpoint/restore, pool sizes, and learning."""
import numpy as np
import pytest
import ray

from platform.preflight import load_experiment
from platform.runtime.federation import Federation, WarmActors
from platform.runtime.placement import own_placement
from platform.runtime.trial import run_rounds, start_federations, stop_federations
from tests.conftest import mlflow_runs

SMALL = {"rounds": 3, "clients": {"num_clients": 6, "clients_per_round": 4, "lr": 0.05, "momentum": 0.9,
                                  "batch_size": 16}}


def _metrics(config, rounds=None):
    feds = start_federations(config, [config.seed])
    try:
        return [{k: m[k] for k in ("test_accuracy", "test_loss", "train_loss")}
                for m in run_rounds(feds, rounds or config.rounds)]
    finally:
        stop_federations(feds)


ONE_ACTOR = {**SMALL, "resources": {"cpu": 1, "actors": 1}}


@pytest.fixture(scope="module")
def one_actor_metrics(ray_local):
    """The metrics of ONE_ACTOR, run once for the tests that compare other runs with them (a run starts actors)."""
    return _metrics(load_experiment(ONE_ACTOR))


def test_same_config_and_seed_give_identical_metrics(one_actor_metrics):
    config = load_experiment(ONE_ACTOR)
    assert _metrics(config) == one_actor_metrics
    assert _metrics(load_experiment({**ONE_ACTOR, "seed": 1})) != one_actor_metrics


@pytest.mark.slow  # the fast tier keeps the same-seed determinism test of this module
def test_pool_size_does_not_change_results(one_actor_metrics):
    one = one_actor_metrics
    three = _metrics(load_experiment({**SMALL, "resources": {"cpu": 1, "actors": 3}}))
    np.testing.assert_allclose([m["test_loss"] for m in one], [m["test_loss"] for m in three], rtol=1e-4)


def test_checkpoint_restore_continues_exactly(ray_local, tmp_path):
    config = load_experiment({**SMALL, "rounds": 5, "server": {"lr": 1.0, "momentum": 0.5},
                              "algorithm": {"name": "fedprox", "mu": 0.1}})
    feds = start_federations(config, [config.seed])
    fed = feds[0]
    list(run_rounds(feds, 2))
    path = str(tmp_path / "ckpt.pt")
    fed.save(path)
    continued = [m["test_loss"] for m in run_rounds(feds, 5, first_round=2)]
    stop_federations(feds)
    fresh = start_federations(config, [config.seed])
    fresh[0].load(path)
    assert fresh[0].round == 2
    assert ray.get(fresh[0].server.checkpoint.remote())["server"].optimizer["velocity"] is not None
    resumed = [m["test_loss"] for m in run_rounds(fresh, 5, first_round=2)]
    stop_federations(fresh)
    assert resumed == continued


def _actor_ids(fed) -> set:
    return {a._actor_id for a in [fed.server, *fed.pools]}


def test_warm_actors_reset_for_another_config_give_a_fresh_run(ray_local):
    """What a reused Tune trial does: the previous trial's actors, reset, must give exactly the metrics of new
    actors, dropout included (leaf_cnn), whatever they trained before."""
    first = load_experiment({**SMALL, "algorithm": {"name": "fedprox", "mu": 0.1}})
    second = load_experiment({**SMALL, "seed": 3, "model": {"name": "leaf_cnn"},
                              "clients": {**SMALL["clients"], "lr": 0.1}})
    expected = _metrics(second)
    placement = own_placement(first.resources)
    ray.get(placement.placement_group.ready())
    warm = WarmActors()
    try:
        fed = Federation(first, placement, warm=warm)
        list(run_rounds([fed], 2))
        reused = _actor_ids(fed)
        fed.shutdown(keep_warm=True)
        assert len(warm) == 1 + fed.num_actors
        fed = Federation(second, placement, warm=warm)
        assert _actor_ids(fed) == reused and len(warm) == 0
        got = [{k: m[k] for k in ("test_accuracy", "test_loss", "train_loss")}
               for m in run_rounds([fed], second.rounds)]
        fed.shutdown()
        assert got == expected
    finally:
        warm.clear()
        placement.release()


def test_clients_sampled_per_round_are_seeded(ray_local):
    config = load_experiment(SMALL)
    feds = start_federations(config, [config.seed])
    fed = feds[0]
    try:
        rounds = [fed.sampled_clients(r).tolist() for r in range(5)]
        assert all(len(r) == 4 and len(set(r)) == 4 for r in rounds)
        assert len({tuple(r) for r in rounds}) > 1
        assert rounds == [fed.sampled_clients(r).tolist() for r in range(5)]
    finally:
        stop_federations(feds)


@pytest.mark.learning
def test_fedavg_digits_reaches_90_percent_via_platform_run(ray_local, tracking_uri, capsys):
    """`platform.run` FedAvg on digits, 10 clients, α=100: ≥ 0.90 test accuracy within 20 rounds."""
    from platform.run import main

    rc = main(["smoke", "--set", "rounds=20", "--set", "partition.alpha=100", "--set", "algorithm.name=fedavg",
               "--tracking-uri", tracking_uri, "--experiment", "learning"])
    out = capsys.readouterr().out
    assert rc == 0, out
    client, runs = mlflow_runs(tracking_uri, "learning")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    history = client.get_metric_history(runs[0].info.run_id, "test_accuracy")
    assert [m.step for m in history] == list(range(1, 21))
    best = max(m.value for m in history)
    print(f"FedAvg digits alpha=100: best test accuracy {best:.4f}, final {history[-1].value:.4f}")
    assert best >= 0.90
    assert "round  20" in out
