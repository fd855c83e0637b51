"""The algorithm interface on the real runtime (local Ray): the methods that existed before it changed give the
same metrics, per-client splits, heterogeneous FedAvg, a personalised stateful method that survives checkpoints
and killed actors, and a DP method whose noise is the only thing a sweep over ε changes."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import ray
import torch

from algorithms.base import Algorithm, ClientUpdate, ServerState
from algorithms.common import evaluate, get_flat_weights, set_flat_weights, train_local
from algorithms.common.params import spec
from algorithms.common.privacy import GaussianMechanism, GaussianNoise, NormClip, apply_postprocessors
from algorithms.fedavg import FedAvg
from platform.config.experiment import build_experiment
from platform.runtime.federation import client_splits, share_dataset
from platform.runtime.trial import run_rounds, start_federations, stop_federations

HERE = "tests.integration.test_interface"
DIGITS = {"dataset": {"name": "digits"}, "model": {"name": "cnn"}, "partition": {"kind": "dirichlet", "alpha": 0.5},
          "clients": {"num_clients": 6, "clients_per_round": 4, "local_epochs": 1, "batch_size": 16, "lr": 0.05,
                      "momentum": 0.9}, "rounds": 3, "seed": 3}


def _config(**sections):
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in DIGITS.items()}
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return build_experiment(data)


def _run(config, rounds=None, kill_after: int | None = None, checkpoint_path=None, checkpoint_after=None):
    """Every round's metrics (timings dropped); optionally kill a client actor or save a checkpoint mid-run."""
    federations = start_federations(config, [config.seed])
    fed = federations[0]
    out = []
    try:
        for metrics in run_rounds(federations, rounds or config.rounds):
            out.append({k: v for k, v in metrics.items() if not k.endswith("seconds")})
            if kill_after == metrics["round"]:
                ray.kill(fed.pools[0])
            if checkpoint_after == metrics["round"]:
                fed.save(str(checkpoint_path))
    finally:
        stop_federations(federations)
    return out


def _resume(config, checkpoint_path):
    federations = start_federations(config, [config.seed])
    try:
        federations[0].load(str(checkpoint_path))
        return [{k: v for k, v in m.items() if not k.endswith("seconds")}
                for m in run_rounds(federations, config.rounds, federations[0].round)]
    finally:
        stop_federations(federations)


# Final-round metrics of each method before the interface changed (commit 6fb0af2), on the same config and seed,
# without the server's validation split (server.val_fraction = 0 leaves the training pool as it was). They were
# bit-equal after the change on the development machine; the tolerance only allows another CPU's kernels.
BEFORE = {
    "fedavg": ({}, 2.359649063152855, 0.2116991643454039, 1.739979977498833),
    "fedprox": ({"mu": 0.05}, 2.2891405365925315, 0.24233983286908078, 1.7543542559801386),
    "fedkp_cm": ({}, 2.2690249472275417, 0.24512534818941503, 1.848818109992966),
    "fedpa": ({"burnin_rounds": 1}, 2.2667816077102194, 0.116991643454039, 1.76026884630671),
    "sgld": ({}, 2.589644153138057, 0.2479108635097493, 1.6209808608728131),
}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_existing_methods_give_the_metrics_they_gave_before_the_interface_change(ray_local, name):
    params, loss, accuracy, train_loss = BEFORE[name]
    rounds = 2 if name == "fedkp_cm" else 3
    config = _config(algorithm={"name": name, **params}, server={"val_fraction": 0.0}, rounds=rounds)
    last = _run(config)[-1]
    assert last["test_loss"] == pytest.approx(loss, rel=1e-6)
    assert last["test_accuracy"] == pytest.approx(accuracy, abs=1e-9)
    assert last["train_loss"] == pytest.approx(train_loss, rel=1e-6)
    assert "val_accuracy" not in last  # no validation split asked for: none reported, nothing taken from test


def test_server_validation_split_comes_from_the_training_pool(ray_local):
    config = _config(server={"val_fraction": 0.2})
    shared = share_dataset(config)
    plain = share_dataset(_config(server={"val_fraction": 0.0}))
    val_x, val_y = ray.get(shared.val_ref)
    train_x, _ = ray.get(shared.train_ref)
    assert len(val_y) + len(train_x) == len(plain.train_labels)  # the pool is split, the test set untouched
    assert ray.get(shared.test_ref)[1].tolist() == ray.get(plain.test_ref)[1].tolist()
    assert abs(len(val_y) - 0.2 * len(plain.train_labels)) <= 10  # stratified: within one per class
    last = _run(config, rounds=2)[-1]
    assert 0 <= last["val_accuracy"] <= 1 and last["val_loss"] > 0


def test_client_splits_are_disjoint_cover_each_client_and_repeat_across_trials(ray_local):
    config = _config(partition={"val_fraction": 0.2, "test_fraction": 0.25})
    shared = share_dataset(config)
    first, again = client_splits(config, shared), client_splits(config, shared)
    plain = client_splits(_config(), shared).train  # the same partition without splits
    for k in range(config.clients.num_clients):
        parts = [first.train[k], first.val[k], first.test[k]]
        joined = np.concatenate(parts)
        assert len(np.unique(joined)) == len(joined)  # disjoint
        assert sorted(joined.tolist()) == sorted(plain[k].tolist())  # they cover the client's data
        assert abs(len(first.test[k]) - 0.25 * len(joined)) <= 1 and abs(len(first.val[k]) - 0.2 * len(joined)) <= 1
        assert all(np.array_equal(getattr(first, s)[k], getattr(again, s)[k]) for s in ("train", "val", "test"))
    other = client_splits(_config(partition={"val_fraction": 0.2, "test_fraction": 0.25}, seeds={"partition": 9}),
                          shared)
    assert any(not np.array_equal(first.val[k], other.val[k]) for k in range(config.clients.num_clients))


def test_two_architecture_fedavg_averages_within_groups(ray_local):
    config = _config(model={"architectures": ["cnn", "mlp"]}, rounds=2)
    history = _run(config)
    last = history[-1]
    assert {"test_accuracy.cnn", "test_accuracy.mlp", "val_accuracy.cnn", "val_accuracy.mlp"} <= set(last)
    # the headline is the client-weighted mean over the groups (3 clients each here)
    assert last["test_accuracy"] == pytest.approx((last["test_accuracy.cnn"] + last["test_accuracy.mlp"]) / 2)
    assert last["test_accuracy.cnn"] != last["test_accuracy.mlp"]


def test_fedavg_state_per_architecture_is_the_mean_of_that_group_only():
    from algorithms.base import ServerContext, aggregate_round, initial_weights
    from platform.config.models import build_model

    torch.manual_seed(0)
    models = {"cnn": build_model("cnn", (1, 8, 8), 10), "mlp": build_model("mlp", (1, 8, 8), 10)}
    ctx = ServerContext.for_models(models, {"cnn": 2, "mlp": 1})
    state = FedAvg().init_server_state(ctx)
    assert set(state.weights) == {"cnn", "mlp"} and torch.equal(state.weights["cnn"], initial_weights(ctx)["cnn"])
    deltas = [(name, w, torch.randn(len(state.weights[name]))) for name, w in (("cnn", 1.0), ("cnn", 3.0),
                                                                              ("mlp", 2.0))]
    updates = [ClientUpdate(weight=w, tensors={"delta": d}, architecture=name) for name, w, d in deltas]
    new, _ = aggregate_round(FedAvg(), state, updates, ctx)
    expected_cnn = state.weights["cnn"] + (1.0 * deltas[0][2] + 3.0 * deltas[1][2]) / 4.0
    assert torch.allclose(new.weights["cnn"], expected_cnn, atol=1e-6)
    assert torch.allclose(new.weights["mlp"], state.weights["mlp"] + deltas[2][2], atol=1e-6)
    assert new.round == 1


# --- a personalised method: no global model, a model per client in the client-state store ---------------------

@dataclass(frozen=True)
class PersonalisedHyperparams:
    pass


class Personalised(Algorithm):
    """Each client trains its own model from where it left off; judged on its own validation and test splits."""

    name = "personalised_toy"
    Hyperparams = PersonalisedHyperparams
    keeps_client_state = True
    evaluates_clients = True
    heterogeneous_models = True

    def init_server_state(self, ctx):
        return ServerState(weights=None)

    def broadcast(self, state, sampled_clients):
        return {"round": state.round}

    def _load(self, client):
        # first visit: the seeded initialisation of the client's architecture (never what the shared model holds)
        set_flat_weights(client.model, client.state.get("weights", client.initial_weights))

    def client_update(self, payload, client):
        self._load(client)
        loss = train_local(client.model, client.x, client.y, client.training, client.generator)
        client.state["weights"] = get_flat_weights(client.model)
        client.state["visits"] = client.state.get("visits", 0) + 1
        return ClientUpdate(weight=float(client.num_samples), tensors={},
                            metrics={"train_loss": loss, "visits": float(client.state["visits"])})

    def client_evaluate(self, payload, client):
        set_flat_weights(client.model, client.state["weights"])
        return {**evaluate(client.model, client.val_x, client.val_y, prefix="val_"),
                **evaluate(client.model, client.test_x, client.test_y, prefix="test_")}

    def aggregate(self, state, updates, ctx):
        return ServerState(weights=None), {}


def _personal_config(**changes):
    return _config(**{"algorithm": {"name": f"{HERE}:Personalised"}, "rounds": 4,
                      "partition": {"val_fraction": 0.2, "test_fraction": 0.2},
                      "model": {"architectures": ["cnn", "mlp"]}, **changes})


@pytest.fixture(scope="module")
def personal_history(ray_local):
    """Every round's metrics of the personalised method on _personal_config(), run once for the tests that read them."""
    return _run(_personal_config())


def test_personalised_method_keeps_state_and_reports_client_metrics(personal_history):
    history = personal_history
    for m in history:
        assert m["client_val_accuracy_p10"] <= m["client_val_accuracy"] + 1e-12
        assert m["val_accuracy"] == m["client_val_accuracy"]  # no global model: the clients' own scores
        assert m["test_accuracy"] == m["client_test_accuracy"]
    # 4 of 6 clients a round: visits grow, so the state survived between rounds
    assert history[0]["visits"] == 1.0 and history[-1]["visits"] > 1.5
    assert history[-1]["client_val_accuracy"] > history[0]["client_val_accuracy"]


@pytest.mark.slow
def test_personalised_state_survives_checkpoint_restore_and_a_killed_actor(ray_local, tmp_path):
    config = _personal_config(resources={"cpu": 2})
    reference = _run(config)
    path = tmp_path / "ckpt.pt"
    first = _run(config, checkpoint_after=2, checkpoint_path=path)
    assert first == reference  # same config and seed, same metrics
    resumed = _resume(config, path)
    assert [m["round"] for m in resumed] == [3, 4]
    assert resumed == reference[2:]
    killed = _run(config, kill_after=2)  # client actor 0 dies after round 2; the runtime replaces it
    assert killed == reference


def test_state_store_spills_on_the_parameter_server(personal_history):
    """A bound of 0 MB keeps every client's model on the server's disk: the run is still exact."""
    assert _run(_personal_config(clients={"state_memory_mb": 0.0}), rounds=3) == personal_history[:3]


# --- a DP method on the privacy layer: a sweep over ε changes only the noise ---------------------------------

@dataclass(frozen=True)
class DPFedAvgHyperparams:
    epsilon: float = spec(1.0, doc="ε", gt=0)
    delta: float = spec(1e-5, doc="δ", gt=0, lt=1)
    clip: float = spec(1.0, doc="C, the L2 bound of a client's delta (the sensitivity)", gt=0)


class DPFedAvg(FedAvg):
    name = "dp_fedavg_toy"
    Hyperparams = DPFedAvgHyperparams
    heterogeneous_models = False

    def client_update(self, payload, client):
        update = super().client_update(payload, client)
        chain = [NormClip(self.hp.clip), GaussianNoise(GaussianMechanism(self.hp.epsilon, self.hp.delta, self.hp.clip))]
        update.tensors, privacy = apply_postprocessors(chain, update.tensors, client.noise_generator)
        update.metrics.update(privacy)
        return update


@pytest.mark.slow  # a sweep of its own (27 s); the fast tier keeps a test of each path
def test_a_sweep_over_epsilon_redraws_only_the_noise(ray_local):
    runs = {eps: _run(_config(algorithm={"name": f"{HERE}:DPFedAvg", "epsilon": eps}), rounds=1)[0]
            for eps in (1.0, 4.0)}
    a, b = runs[1.0], runs[4.0]
    assert a["train_loss"] == b["train_loss"]  # the clients trained identically (training seeds unchanged)
    assert a["update_norm"] == b["update_norm"]  # the same deltas before clipping and noise
    assert a["privacy_epsilon"] == 1.0 and b["privacy_epsilon"] == 4.0
    assert a["privacy_sigma"] == pytest.approx(4 * b["privacy_sigma"])
    assert a["test_loss"] != b["test_loss"]  # only the noise scale differs


def test_reused_actors_start_the_next_trial_with_no_client_state(ray_local):
    """Tune's reuse_actors hands a trial's actors to the next: its clients must not inherit the last one's models."""
    from platform.runtime.federation import Federation, WarmActors
    from platform.runtime.placement import own_placement

    config = _personal_config(rounds=2)
    placement = own_placement(config.resources)
    ray.get(placement.placement_group.ready())
    warm = WarmActors()
    try:
        fed = Federation(config, placement, warm=warm)
        first = [m["visits"] for m in run_rounds([fed], 2)]
        reused = {a._actor_id for a in [fed.server, *fed.pools]}
        fed.shutdown(keep_warm=True)
        fed = Federation(config, placement, warm=warm)
        assert {a._actor_id for a in [fed.server, *fed.pools]} == reused  # the same processes, reset
        again = [m["visits"] for m in run_rounds([fed], 2)]
        fed.shutdown()
        assert again == first and again[0] == 1.0  # every client starts from scratch again
    finally:
        warm.clear()
        placement.release()


# --- memo: one-shot work cached across trials under exactly the key it depends on -----------------------------

@dataclass(frozen=True)
class MemoHyperparams:
    lam: float = spec(1.0, doc="a hyperparameter the memoised work depends on", gt=0)
    other: float = spec(0.0, doc="one it does not depend on")


class Memoising(FedAvg):
    name = "memo_toy"
    Hyperparams = MemoHyperparams
    heterogeneous_models = False

    def client_update(self, payload, client):
        update = super().client_update(payload, client)
        summary = client.memo("label_mean", {"lam": self.hp.lam},
                              lambda: {"mean": client.y.float().mean() * self.hp.lam})
        update.metrics["memo_value"] = float(summary["mean"])
        return update


@pytest.mark.slow  # the fast tier keeps one test of the path (docs/how-to/testing.md)
def test_memo_computes_once_per_key_across_trials(ray_local, tmp_path):
    from platform.stages.cache import StageCache

    cache = StageCache(str(tmp_path / "cache"))

    def run(**params):
        config = _config(algorithm={"name": f"{HERE}:Memoising", **params}, rounds=2,
                         clients={"clients_per_round": 6})
        federations = start_federations(config, [config.seed], cache=cache)
        try:
            return [m["memo_value"] for m in run_rounds(federations, 2)]
        finally:
            stop_federations(federations)

    first = run(lam=1.0)
    computed = cache.count("memo_toy.label_mean", "computed")
    assert computed == 6  # every client once, although each trains in both rounds
    assert run(lam=1.0, other=5.0) == first  # a hyperparameter outside the key: every client hits
    assert cache.count("memo_toy.label_mean", "computed") == computed
    assert cache.count("memo_toy.label_mean", "hit") == 6 + 12  # round 2 of the first run, both of the second
    doubled = run(lam=2.0)  # a key hyperparameter: recomputed
    assert doubled == [2 * v for v in first] and cache.count("memo_toy.label_mean", "computed") > computed
