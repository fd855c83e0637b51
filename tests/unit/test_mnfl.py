"""MNFL (docs/methods/mnfl.md §2.2, §2.3, §8, §10 #27) through the algorithm interface by hand: pure torch, no
Ray."""
import math

import pytest
import torch

from algorithms import ALGORITHMS, ClientContext, ServerContext
from algorithms.base import aggregate_round
from algorithms.common import LocalTraining, get_flat_weights, set_flat_weights
from algorithms.mnfl import C_UPDATE_ORDERS, MNFL, MNFLHyperparams
from platform.errors import ConfigError
from platform.config.models import build_model
from platform.config.schema import build

CPU = torch.device("cpu")
DIGITS = (1, 8, 8)
ARCHS = ("cnn", "mlp", "cnn", "mlp")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _models(seed=0):
    torch.manual_seed(seed)
    return {"cnn": build_model("cnn", DIGITS, 10), "mlp": build_model("mlp", DIGITS, 10)}


def _public(seed=7, n=40):
    return torch.rand(n, *DIGITS, generator=torch.Generator().manual_seed(seed))


def _client(k, models, init, state, public, round_, n=16):
    g = torch.Generator().manual_seed(100 + k)  # the client's data: the same every round
    x, y = torch.rand(n, *DIGITS, generator=g), torch.randint(0, 10, (n,), generator=g)
    vx, vy = torch.rand(6, *DIGITS, generator=g), torch.randint(0, 10, (6,), generator=g)
    tx, ty = torch.rand(5, *DIGITS, generator=g), torch.randint(0, 10, (5,), generator=g)
    arch = ARCHS[k]
    return ClientContext(client_id=k, x=x, y=y, model=models[arch], training=LocalTraining(1, 8, "sgd", 0.05, 0.0),
                         generator=torch.Generator().manual_seed(1000 * round_ + k),
                         noise_generator=torch.Generator(), state=state, device=CPU, architecture=arch,
                         val_x=vx, val_y=vy, test_x=tx, test_y=ty, public_x=public, initial_weights=init[arch])


def _server(models, public, seed=0):
    return ServerContext.for_models(models, {"cnn": 2, "mlp": 2}, architecture="cnn", seed=seed,
                                    noise_generator=torch.Generator(), public_x=public)


def _run(hp, rounds=3, sample=None, seed=0):
    """Drive ``rounds`` rounds as the runtime does; return (algo, states, per-round records)."""
    algo = MNFL(hp)
    models, public = _models(seed), _public()
    init = {k: get_flat_weights(m) for k, m in models.items()}
    ctx = _server(models, public, seed)
    state = algo.init_server_state(ctx)
    states = {k: {} for k in range(4)}  # the runtime's client-state store
    history = []
    for r in range(1, rounds + 1):
        sampled = sample(r) if sample else list(range(4))
        payload = algo.broadcast(state, sampled)
        start = {k: dict(states[k]) for k in sampled}
        updates, scores = [], {}
        for k in sampled:
            client = _client(k, models, init, states[k], public, r)
            updates.append(algo.client_update(payload, client))
            scores[k] = algo.client_evaluate(payload, client)
            states[k] = client.state  # saved after the update
        state, metrics = aggregate_round(algo, state, updates, ctx)
        history.append({"payload": payload, "start": start, "updates": updates, "scores": scores,
                        "metrics": metrics, "state": state,
                        "weights": {k: states[k]["weights"].clone() for k in sampled}})
    return algo, init, states, history


def _on_simplex(c):
    return bool((c >= -1e-9).all()) and torch.allclose(c.sum(dim=0), torch.ones(c.shape[1], dtype=c.dtype),
                                                        atol=1e-6)


HP = MNFLHyperparams(temperature=3.0, public_size=24, distill_batch_size=8, coefficient_lr=0.5, rho=0.1)


def test_registered_and_declared():
    assert ALGORITHMS["mnfl"] is MNFL
    assert MNFL.keeps_client_state and MNFL.evaluates_clients and MNFL.heterogeneous_models and not MNFL.summable
    d = MNFL.Hyperparams()
    assert (d.rho, d.coefficient_lr, d.lam, d.distill_passes, d.distill_batch_size, d.public_size) == (
        0.7, 0.01, 1.0, 1, 256, 3000)
    assert d.c_update_order == "after_distill_refresh" and d.project_simplex
    assert {"c_self_weight", "c_entropy"} <= set(MNFL.declared_metrics())


@pytest.mark.parametrize("order", C_UPDATE_ORDERS)
def test_three_rounds_keep_state_and_c_on_the_simplex(order):
    hp = MNFLHyperparams(**{**HP.__dict__, "c_update_order": order})
    algo, init, states, history = _run(hp)
    first, second, third = history
    # round 1: no predictions yet, so no targets and no distillation
    assert first["payload"]["targets"] == {} and all("distill_loss" not in u.metrics for u in first["updates"])
    # later rounds: a target per sampled client on the previous round's public subset
    for rec in (second, third):
        targets = rec["payload"]["targets"]
        assert set(targets) == {0, 1, 2, 3}
        previous = history[[id(h) for h in history].index(id(rec)) - 1]
        assert torch.equal(rec["payload"]["target_indices"], previous["payload"]["public_indices"])
        for q in targets.values():
            assert q.shape == (24, 10) and torch.allclose(q.sum(dim=1), torch.ones(24), atol=1e-5)
        assert all(u.metrics["distill_loss"] >= 0 for u in rec["updates"])
    # round-2 targets under uniform c are the mean of the round-1 predictions (unless c stepped first)
    if order != "before_distill":
        mean = torch.stack([u.tensors["public_probs"] for u in first["updates"]]).mean(dim=0)
        assert torch.allclose(second["payload"]["targets"][0], mean, atol=1e-6)
    for rec in history:
        u = rec["updates"][0]
        assert u.weight == 16.0 and u.tensors["public_probs"].shape == (24, 10)
        assert torch.allclose(u.tensors["public_probs"].sum(dim=1), torch.ones(24), atol=1e-5)
        assert set(rec["metrics"]) <= set(MNFL.declared_metrics())  # every reported metric is declared
        assert all(set(m) <= set(MNFL.declared_metrics()) for m in (u.metrics, *rec["scores"].values()))
        c = rec["state"].extra["c"]
        assert c.shape == (4, 4) and _on_simplex(c)
        assert rec["state"].weights is None
        assert 0 <= rec["metrics"]["c_self_weight"] <= 1
        assert 0 <= rec["metrics"]["c_entropy"] <= math.log(4) + 1e-9
        for s in rec["scores"].values():
            assert {"val_accuracy", "val_loss", "test_accuracy", "test_loss"} == set(s)
    assert first["metrics"]["c_steps"] == (3 if order == "before_distill" else 0)  # 24 samples / batch 8
    assert third["metrics"]["c_steps"] == 3
    assert not torch.allclose(third["state"].extra["c"], torch.full((4, 4), 0.25, dtype=torch.float64))
    # state survives: round 2 starts from round-1 weights, round 1 from the seeded initialisation
    for k in range(4):
        assert "weights" not in first["start"][k]
        assert torch.equal(second["start"][k]["weights"], first["weights"][k])
        assert torch.equal(third["start"][k]["weights"], second["weights"][k])
        assert not torch.equal(first["weights"][k], init[ARCHS[k]])
    assert set(third["state"].extra["probs"]) == {0, 1, 2, 3}


def test_same_seeds_give_identical_weights_and_c():
    _, _, a, ha = _run(HP)
    _, _, b, hb = _run(HP)
    assert all(torch.equal(a[k]["weights"], b[k]["weights"]) for k in range(4))
    assert torch.equal(ha[-1]["state"].extra["c"], hb[-1]["state"].extra["c"])
    assert ha[-1]["metrics"] == hb[-1]["metrics"]


def test_client_sampling_touches_only_the_sampled_block_and_uses_last_senders():
    samples = {1: [0, 1, 2], 2: [1, 2, 3], 3: [0, 1, 3]}
    _, _, states, history = _run(HP, sample=samples.get)
    second, third = history[1], history[2]
    assert set(second["payload"]["targets"]) == {1, 2, 3}
    assert second["state"].extra["senders"] == [1, 2, 3]
    # the round-2 c-step (refresh) ran over the clients that distilled: only c[P, P] with P = {1, 2, 3} moved
    c1, c2 = history[0]["state"].extra["c"], second["state"].extra["c"]
    assert torch.equal(c1, torch.full((4, 4), 0.25, dtype=torch.float64))
    assert torch.equal(c2[0], c1[0]) and torch.equal(c2[:, 0], c1[:, 0])
    assert not torch.equal(c2[1:, 1:], c1[1:, 1:])
    assert all(_on_simplex(rec["state"].extra["c"]) for rec in history)
    # client 0 skipped round 2: its round-3 start is its round-1 result
    assert torch.equal(third["start"][0]["weights"], history[0]["weights"][0])
    # a target of a client that was not a teacher last round is a mixture of the teachers' predictions
    assert 0 in third["payload"]["targets"] and torch.allclose(third["payload"]["targets"][0].sum(dim=1),
                                                               torch.ones(24), atol=1e-5)


def test_whole_pool_and_unconstrained_variants_run():
    hp = MNFLHyperparams(**{**HP.__dict__, "public_size": None, "project_simplex": False, "distill_passes": 2})
    _, _, _, history = _run(hp, rounds=2)
    assert history[1]["payload"]["targets"][0].shape == (40, 10)
    assert history[1]["updates"][0].tensors["public_probs"].shape == (40, 10)
    c = history[1]["state"].extra["c"]
    assert torch.isfinite(c).all() and history[1]["metrics"]["c_steps"] == 5  # ⌈40 / 8⌉ steps on the whole pool
    # the unconstrained step (faithful ablation) leaves the simplex: the gradient's "+1" term shrinks every column
    assert (c.sum(dim=0) < 1.0).all()
    assert all(math.isfinite(u.metrics["distill_loss"]) for u in history[1]["updates"])


@pytest.mark.parametrize("field,value", [("rho", -0.1), ("distill_passes", 0), ("coefficient_lr", 0.0),
                                         ("c_update_order", "sometimes"), ("temperature", 0.0)])
def test_bad_hyperparameters_name_their_field(field, value):
    with pytest.raises(ConfigError) as err:
        build(MNFLHyperparams, {field: value}, "algorithm")
    assert f"algorithm.{field}" in str(err.value)


def test_unstable_coefficient_step_is_refused_at_load_time():
    with pytest.raises(ConfigError, match="algorithm.coefficient_lr"):
        build(MNFLHyperparams, {"coefficient_lr": 2.0, "rho": 0.7}, "algorithm")
    assert build(MNFLHyperparams, {"rho": 0.0, "distill_lr": None, "public_size": None}, "algorithm").rho == 0.0


def test_a_client_keeps_its_own_local_optimiser_state_across_rounds():
    """With momentum, the local optimiser's buffers are the client's state: carried into its next round."""
    from algorithms.common import train_local

    model = build_model("mlp", DIGITS, 10)
    g = torch.Generator().manual_seed(3)
    x, y = torch.rand(16, *DIGITS, generator=g), torch.randint(0, 10, (16,), generator=g)
    cfg = LocalTraining(1, 8, "sgd", 0.05, 0.9)
    state: dict = {}
    train_local(model, x, y, cfg, torch.Generator().manual_seed(0), optimizer_state=state)
    buffers = [v["momentum_buffer"].clone() for v in state["state"].values()]
    assert buffers and all(b.abs().sum() > 0 for b in buffers)
    start = get_flat_weights(model)
    train_local(model, x, y, cfg, torch.Generator().manual_seed(1), optimizer_state=state)
    with_state = get_flat_weights(model)
    set_flat_weights(model, start)
    train_local(model, x, y, cfg, torch.Generator().manual_seed(1))  # a fresh optimiser: other weights
    assert not torch.equal(with_state, get_flat_weights(model))
    # and MNFL stores it per client (empty buffers for the paper's plain SGD)
    _, _, states, _ = _run(HP, rounds=2)
    assert all("optimizer" in s and "param_groups" in s["optimizer"] for s in states.values())
