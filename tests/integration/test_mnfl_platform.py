"""MNFL on real Ray actors: personalised models (client states on the parameter server) and the coefficient matrix c
survive a checkpoint/restore round trip, and a reused (warm) actor set starts a trial fresh, with no state of the
previous trial's clients."""
import os

import ray

from platform.config.experiment import build_experiment
from platform.runtime.federation import Federation, WarmActors
from platform.runtime.placement import own_placement
from platform.runtime.trial import run_rounds, start_federations, stop_federations

BASE = {
    "dataset": {"name": "digits"},
    "partition": {"kind": "dirichlet", "alpha": 0.5, "val_fraction": 0.1, "test_fraction": 0.25},
    "public": {"source": "train_split", "size": 64},
    "model": {"name": "cnn", "architectures": ["cnn", "mlp"], "assignment": "blocks"},
    "algorithm": {"name": "mnfl", "public_size": 32, "distill_batch_size": 16, "temperature": 3.0,
                  "coefficient_lr": 0.5, "rho": 0.1},
    # partial participation: each round some clients keep last round's personalised model untouched
    "clients": {"num_clients": 4, "clients_per_round": 3, "batch_size": 16, "lr": 0.05, "momentum": 0.9},
    "rounds": 4, "resources": {"cpu": 1},
}


def _config(**changes):
    """BASE with ``clients.state_memory_mb`` 0: every client state spills to the parameter server's disk (the path
    of a run with many personalised models), so the tests cover the spill files too."""
    return build_experiment({**BASE, "clients": {**BASE["clients"], "state_memory_mb": 0}, **changes})


def _comparable(metrics: dict) -> dict:
    """A round's metrics without wall-clock timings."""
    return {k: v for k, v in metrics.items() if k != "seconds" and not k.endswith("_seconds")}


def _rounds(federations, rounds, first_round=0) -> list[dict]:
    return [_comparable(m) for m in run_rounds(federations, rounds, first_round)]


def _store(fed) -> tuple[dict, list, str | None]:
    """The parameter server's client-state store as it is: {client: personalised weights}, the clients spilled to
    disk, its spill directory."""
    def look(server):
        store = server.client_states
        return ({k: v["weights"].clone() for k, v in store.snapshot().items()},
                sorted(set(store.clients()) - set(store._mem)), store.spill_dir)

    return ray.get(fed.server.__ray_call__.remote(look))


def test_personalised_models_and_c_survive_checkpoint_restore(ray_local, tmp_path):
    config = _config()
    feds = start_federations(config, [config.seed])
    fed = feds[0]
    try:
        first = _rounds(feds, 2)
        path = str(tmp_path / "mnfl.pt")
        fed.save(path)
        saved = ray.get(fed.server.checkpoint.remote())
        weights, spilled, _ = _store(fed)
        continued = _rounds(feds, 4, first_round=2)
    finally:
        stop_federations(feds)
    assert [m["round"] for m in first + continued] == [1, 2, 3, 4]
    assert all("client_test_accuracy" in m and "c_entropy" in m for m in first + continued)
    assert continued[0]["c_steps"] > 0  # distillation and c-steps happen after the checkpoint
    # what the checkpoint holds: every trained client's personalised model (spilled, read back whole) and c
    assert sorted(saved["client_states"]) == sorted(weights) and len(weights) >= 3 and spilled == sorted(weights)
    assert all(saved["client_states"][k]["weights"].equal(w) for k, w in weights.items())
    assert saved["server"].extra["c"].shape == (4, 4) and saved["server"].round == 2

    fresh = start_federations(config, [config.seed])
    try:
        fresh[0].load(path)
        assert fresh[0].round == 2
        restored, _, _ = _store(fresh[0])
        assert sorted(restored) == sorted(weights) and all(restored[k].equal(w) for k, w in weights.items())
        resumed = _rounds(fresh, 4, first_round=2)
    finally:
        stop_federations(fresh)
    assert resumed == continued


def test_reused_actors_start_the_next_trial_with_fresh_client_states(ray_local):
    """What a reused Tune trial does with MNFL: the previous trial's actors, reset, must hold no personalised model
    of its clients (the client-state store is emptied and its spill directory removed) and give exactly the
    metrics of new actors."""
    config = _config(rounds=2)
    placement = own_placement(config.resources)
    ray.get(placement.placement_group.ready())
    warm = WarmActors()
    try:
        fed = Federation(config, placement, warm=warm)  # new actors (none warm yet)
        assert len(warm) == 0
        expected = _rounds([fed], 2)
        weights, _, spill_dir = _store(fed)
        assert len(weights) >= 3 and spill_dir is not None and os.listdir(spill_dir)  # states on the server's disk
        reused = {a._actor_id for a in [fed.server, *fed.pools]}
        fed.shutdown(keep_warm=True)
        assert len(warm) == 1 + fed.num_actors

        fed = Federation(config, placement, warm=warm)  # the same config again, on the reset actors
        assert {a._actor_id for a in [fed.server, *fed.pools]} == reused and len(warm) == 0
        assert _store(fed) == ({}, [], None)  # nothing of the previous trial's clients ...
        assert not os.path.exists(spill_dir)  # ... not even on disk
        assert ray.get(fed.server.checkpoint.remote())["server"].round == 0
        again = _rounds([fed], 2)
        fed.shutdown()
        assert again == expected
    finally:
        warm.clear()
        placement.release()
