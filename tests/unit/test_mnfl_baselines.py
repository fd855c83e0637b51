"""MNFL's baselines (docs/methods/mnfl.md §5): fedmd, sim_pfl, topk_pfl (algorithms/mnfl_baselines.py) and pfeddf
(algorithms/pfeddf.py), plus MNFL's bn_mode / private_first switches and the load-time refusals. Pure torch, no Ray."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

from algorithms import ALGORITHMS, ClientContext, ClientUpdate, ServerContext
from algorithms.base import aggregate_round
from algorithms.common import LocalTraining, evaluate, get_flat_weights, set_flat_weights, train_local
from algorithms.feddf import FedDF
from algorithms.mnfl import MNFL, MNFLHyperparams
from algorithms.mnfl_baselines import (FedMD, FedMDHyperparams, SimPFL, SimPFLHyperparams, TopKPFL,
                                       TopKPFLHyperparams)
from algorithms.pfeddf import PFedDF, PFedDFHyperparams
from platform.config.experiment import build_experiment
from platform.errors import ConfigError
from platform.config.models import build_model

CPU = torch.device("cpu")
DIGITS = (1, 8, 8)
ARCHS = ("cnn", "mlp", "cnn", "mlp")
CLIENT_HP = dict(temperature=3.0, public_size=24, distill_batch_size=8)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------------------------------------------------------
# harness (as tests/unit/test_mnfl.py)

def _models(seed=0):
    torch.manual_seed(seed)
    return {"cnn": build_model("cnn", DIGITS, 10), "mlp": build_model("mlp", DIGITS, 10)}


def _public(n=40, seed=7):
    return torch.rand(n, *DIGITS, generator=torch.Generator().manual_seed(seed))


def _client(k, model, state, public, round_, arch="cnn", init=None, n=16, epochs=1):
    g = torch.Generator().manual_seed(100 + k)  # the client's data: the same every round
    x, y = torch.rand(n, *DIGITS, generator=g), torch.randint(0, 10, (n,), generator=g) % (2 + k)
    vx, vy = torch.rand(6, *DIGITS, generator=g), torch.randint(0, 10, (6,), generator=g) % (2 + k)
    tx, ty = torch.rand(5, *DIGITS, generator=g), torch.randint(0, 10, (5,), generator=g) % (2 + k)
    return ClientContext(client_id=k, x=x, y=y, model=model, training=LocalTraining(epochs, 8, "sgd", 0.05, 0.0),
                         generator=torch.Generator().manual_seed(1000 * round_ + k),
                         noise_generator=torch.Generator(), state=state, device=CPU, architecture=arch,
                         val_x=vx, val_y=vy, test_x=tx, test_y=ty, public_x=public,
                         initial_weights=init if init is not None else get_flat_weights(model))


def _server(models, public, seed=0):
    return ServerContext.for_models(models, {"cnn": 2, "mlp": 2}, architecture="cnn", seed=seed,
                                    noise_generator=torch.Generator(), public_x=public)


def _run(algo, rounds=3, sample=None):
    """Drive ``rounds`` rounds of an MNFL-family method as the runtime does; per-round records."""
    models, public = _models(), _public()
    init = {k: get_flat_weights(m) for k, m in models.items()}
    ctx = _server(models, public)
    state = algo.init_server_state(ctx)
    states = {k: {} for k in range(4)}
    history = []
    for r in range(1, rounds + 1):
        sampled = sample(r) if sample else list(range(4))
        payload = algo.broadcast(state, sampled)
        updates = []
        for k in sampled:
            client = _client(k, models[ARCHS[k]], states[k], public, r, ARCHS[k], init[ARCHS[k]])
            updates.append(algo.client_update(payload, client))
            states[k] = client.state
        state, metrics = aggregate_round(algo, state, updates, ctx)
        history.append({"payload": payload, "updates": updates, "metrics": metrics, "state": state})
    return history


def _on_simplex(c):
    return bool((c >= -1e-12).all()) and torch.allclose(c.sum(dim=0), torch.ones(c.shape[1], dtype=c.dtype),
                                                         atol=1e-9)


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine of two flattened matrices, by hand."""
    a, b = a.reshape(-1).tolist(), b.reshape(-1).tolist()
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def _aggregate_predictions(algo, probs: torch.Tensor):
    """One aggregate on hand-made uploads (no models): the new state and the next round's targets."""
    n, m, _ = probs.shape
    ctx = ServerContext.for_models({"cnn": build_model("cnn", DIGITS, 10)}, {"cnn": n}, public_x=_public(m))
    state = algo.init_server_state(ctx)
    updates = [ClientUpdate(weight=10.0, tensors={"public_probs": probs[k]}, client_id=k) for k in range(n)]
    state, metrics = aggregate_round(algo, state, updates, ctx)
    return state, metrics, algo.broadcast(state, list(range(n)))["targets"]


def _predictions(rows) -> torch.Tensor:
    """[N, M, C] soft predictions from nested lists (float32, as clients upload them)."""
    return torch.tensor(rows, dtype=torch.float32)


# three clients, two public samples, two classes: cos(0,1) = cos(1,2) = 1/2, cos(0,2) = 0
THREE = [[[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [0.0, 1.0]]]
# four soft clients for the similarity tests (no two alike)
FOUR = [[[0.9, 0.1], [0.8, 0.2], [0.7, 0.3]],
        [[0.6, 0.4], [0.5, 0.5], [0.9, 0.1]],
        [[0.2, 0.8], [0.3, 0.7], [0.4, 0.6]],
        [[0.85, 0.15], [0.7, 0.3], [0.75, 0.25]]]


# ---------------------------------------------------------------------------------------------------------------
# registration

def test_registered_with_mnfl_machinery_and_declared_metrics():
    for name, cls in (("fedmd", FedMD), ("sim_pfl", SimPFL), ("topk_pfl", TopKPFL)):
        assert ALGORITHMS[name] is cls and issubclass(cls, MNFL)
        assert cls.keeps_client_state and cls.evaluates_clients and cls.heterogeneous_models and not cls.summable
        declared = cls.declared_metrics()
        assert {"c_self_weight", "c_entropy", "distill_loss", "client_val_accuracy"} <= set(declared)
        assert "c_steps" not in declared
        assert all(cls.hyperparameter_docs().values())
        # MNFL's client procedure is inherited, not copied
        assert cls.client_update is MNFL.client_update and cls.client_evaluate is MNFL.client_evaluate
    assert ALGORITHMS["pfeddf"] is PFedDF and issubclass(PFedDF, FedDF) and PFedDF.evaluates_clients
    assert PFedDF.client_update is FedDF.client_update and PFedDF.heterogeneous_models
    assert all(PFedDF.hyperparameter_docs().values())
    assert TopKPFLHyperparams().topk == 5 and TopKPFLHyperparams().selection == "topk"
    assert SimPFLHyperparams().similarity_weights == "clipped"
    assert PFedDFHyperparams().finetune_epochs == 5
    d = MNFLHyperparams()
    assert d.bn_mode == "train" and d.private_first is False
    assert not hasattr(FedMDHyperparams(), "rho")  # no c-step, no c-step hyperparameters


# ---------------------------------------------------------------------------------------------------------------
# the rules, through aggregate → broadcast

def test_fedmd_targets_are_the_same_mean_for_every_student():
    probs = _predictions(FOUR)
    state, metrics, targets = _aggregate_predictions(FedMD(FedMDHyperparams()), probs)
    mean = probs.double().mean(dim=0).float()
    assert set(targets) == {0, 1, 2, 3}
    for k in range(4):
        assert torch.equal(targets[k], targets[0])          # identical for all students
        assert torch.allclose(targets[k], mean, atol=1e-7)  # the mean of the teachers' predictions
    assert torch.allclose(state.extra["c"], torch.full((4, 4), 0.25, dtype=torch.float64))
    assert metrics["c_self_weight"] == pytest.approx(0.25)
    assert metrics["c_entropy"] == pytest.approx(math.log(4))
    assert set(metrics) == {"c_self_weight", "c_entropy"}


def test_sim_pfl_weights_match_a_hand_computation():
    probs = _predictions(THREE)
    state, _, targets = _aggregate_predictions(SimPFL(SimPFLHyperparams()), probs)
    c = state.extra["c"]
    # c[m, n] = max(cos, 0) / Σ_m max(cos, 0), self with cos = 1
    expected = torch.tensor([[1.0, 0.5, 0.0], [0.5, 1.0, 0.5], [0.0, 0.5, 1.0]], dtype=torch.float64)
    expected = expected / expected.sum(dim=0, keepdim=True)  # columns 2/3,1/3,0 | 1/4,1/2,1/4 | 0,1/3,2/3
    assert torch.allclose(c, expected, atol=1e-12)
    assert c[0, 0] == pytest.approx(2 / 3, abs=1e-12) and c[1, 1] == pytest.approx(1 / 2, abs=1e-12)
    for n in range(3):
        q = sum(float(c[m, n]) * probs[m] for m in range(3))
        assert torch.allclose(targets[n], q, atol=1e-6)


def test_sim_pfl_on_soft_predictions_matches_the_formula_by_hand():
    probs = _predictions(FOUR)
    state, _, _ = _aggregate_predictions(SimPFL(SimPFLHyperparams()), probs)
    c = state.extra["c"]
    for n in range(4):
        w = [1.0 if m == n else max(_cos(probs[m], probs[n]), 0.0) for m in range(4)]
        for m in range(4):
            assert float(c[m, n]) == pytest.approx(w[m] / sum(w), abs=1e-9)
    # min-max (reference code): w_m = cos − min_m cos, the least similar teacher gets 0
    state, _, _ = _aggregate_predictions(SimPFL(SimPFLHyperparams(similarity_weights="minmax")), probs)
    c = state.extra["c"]
    for n in range(4):
        cos = [1.0 if m == n else _cos(probs[m], probs[n]) for m in range(4)]
        w = [v - min(cos) for v in cos]
        for m in range(4):
            assert float(c[m, n]) == pytest.approx(w[m] / sum(w), abs=1e-9)
        assert float(c[n, n]) == max(c[:, n].tolist())


def test_topk_two_of_four_gives_one_half_to_self_and_the_most_similar():
    probs = _predictions(FOUR)
    state, _, targets = _aggregate_predictions(TopKPFL(TopKPFLHyperparams(topk=2)), probs)
    c = state.extra["c"]
    for n in range(4):
        others = [m for m in range(4) if m != n]
        nearest = max(others, key=lambda m: _cos(probs[m], probs[n]))
        expected = torch.zeros(4, dtype=torch.float64)
        expected[[n, nearest]] = 0.5
        assert torch.equal(c[:, n], expected), (n, c[:, n])
        assert torch.allclose(targets[n], (probs[n] + probs[nearest]) / 2, atol=1e-6)
    # client 2 predicts the other class: its nearest is client 1, and nobody else picks it
    assert c[1, 2] == 0.5 and c[2, [0, 1, 3]].eq(0).all()


def test_topk_median_keeps_those_above_the_median_cosine():
    probs = _predictions(FOUR)
    state, _, _ = _aggregate_predictions(TopKPFL(TopKPFLHyperparams(selection="median")), probs)
    c = state.extra["c"]
    for n in range(4):
        cos = [1.0 if m == n else _cos(probs[m], probs[n]) for m in range(4)]
        threshold = sorted(cos)[4 // 2 - 1]  # the reference code's partitionOfK(…, int(N/2) − 1)
        kept = {m for m in range(4) if cos[m] > threshold} | {n}
        expected = torch.tensor([1.0 / len(kept) if m in kept else 0.0 for m in range(4)], dtype=torch.float64)
        assert torch.equal(c[:, n], expected)


@pytest.mark.parametrize("algo", [FedMD(FedMDHyperparams(**CLIENT_HP)),
                                  SimPFL(SimPFLHyperparams(**CLIENT_HP)),
                                  SimPFL(SimPFLHyperparams(**CLIENT_HP, similarity_weights="minmax")),
                                  TopKPFL(TopKPFLHyperparams(**CLIENT_HP, topk=2)),
                                  TopKPFL(TopKPFLHyperparams(**CLIENT_HP, selection="median"))],
                         ids=["fedmd", "sim", "sim_minmax", "topk2", "topk_median"])
def test_every_baseline_keeps_c_on_the_simplex_under_sampling(algo):
    samples = {1: [0, 1, 2, 3], 2: [1, 2, 3], 3: [0, 1, 3]}
    history = _run(algo, rounds=3, sample=samples.get)
    assert history[0]["payload"]["targets"] == {}  # round 1: nobody has predicted yet
    for rec in history:
        c = rec["state"].extra["c"]
        assert c.shape == (4, 4) and _on_simplex(c)
        assert set(rec["metrics"]) <= set(type(algo).declared_metrics())
        assert all("distilled_probs" not in u.tensors for u in rec["updates"])  # no second upload
        for q in rec["payload"]["targets"].values():
            assert torch.allclose(q.sum(dim=1), torch.ones(q.shape[0]), atol=1e-5)
    # round 2's senders were {1, 2, 3}: client 0 is not a teacher, and its column is uniform over the senders
    c2 = history[1]["state"].extra["c"]
    assert c2[0].eq(0).all() and torch.allclose(c2[1:, 0], torch.full((3,), 1 / 3, dtype=torch.float64))
    # round 3's target of client 0 (absent in round 2) is the senders' average
    probs = {u.client_id: u.tensors["public_probs"] for u in history[1]["updates"]}
    assert torch.allclose(history[2]["payload"]["targets"][0], (probs[1] + probs[2] + probs[3]) / 3, atol=1e-6)
    assert all(u.metrics["distill_loss"] >= 0 for u in history[2]["updates"])


def test_baseline_c_is_recomputed_not_stepped():
    """The same uploads give the same c whatever c was before (no memory, no gradient step)."""
    probs = _predictions(FOUR)
    algo = SimPFL(SimPFLHyperparams())
    ctx = ServerContext.for_models({"cnn": build_model("cnn", DIGITS, 10)}, {"cnn": 4}, public_x=_public(3))
    updates = [ClientUpdate(weight=10.0, tensors={"public_probs": probs[k]}, client_id=k) for k in range(4)]
    state = algo.init_server_state(ctx)
    once, _ = aggregate_round(algo, state, updates, ctx)
    twice, _ = aggregate_round(algo, once, updates, ctx)
    assert torch.equal(once.extra["c"], twice.extra["c"])
    assert not torch.equal(once.extra["c"], state.extra["c"])


# ---------------------------------------------------------------------------------------------------------------
# MNFL switches: bn_mode, private_first

class _BNNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).flatten(1))


def _bn_stats(model):
    return {k: v.clone() for k, v in model.state_dict().items()
            if k.startswith("bn.") and ("running" in k or k.endswith("num_batches_tracked"))}


@pytest.mark.parametrize("private_first", [False, True])
def test_bn_mode_eval_freezes_running_stats_during_distillation(private_first):
    torch.manual_seed(0)
    public = _public(16)
    target = torch.softmax(torch.randn(16, 10, generator=torch.Generator().manual_seed(3)), dim=1)
    payload = {"targets": {0: target}, "target_indices": None, "public_indices": None}
    results = {}
    for mode in ("train", "eval"):
        model = _BNNet()
        start = get_flat_weights(model)
        before = _bn_stats(model)
        algo = MNFL(MNFLHyperparams(bn_mode=mode, private_first=private_first, distill_batch_size=8))
        # epochs = 0: no private training, so distillation is the only thing that can move the statistics
        client = _client(0, model, {}, public, 2, init=start, epochs=0)
        update = algo.client_update(payload, client)
        after = _bn_stats(model)
        results[mode] = (before, after)
        assert update.metrics["distill_loss"] > 0
        moved = get_flat_weights(model) != start
        assert moved.any()  # the student trained (conv, bn affine, head)
        assert not model.bn.weight.detach().eq(1.0).all()  # BN affine parameters train in both modes
    before, after = results["eval"]
    assert all(torch.equal(before[k], after[k]) for k in before)  # running stats untouched
    before, after = results["train"]
    assert not torch.equal(before["bn.running_mean"], after["bn.running_mean"])
    assert after["bn.num_batches_tracked"] == 2  # 16 samples / batch 8 = 2 distillation steps


def test_private_first_distils_the_privately_trained_model(monkeypatch):
    """Round 1 has no target, so both orders only train and agree exactly. In round 2 the default distils the
    loaded model and then trains the distilled one; private_first trains the loaded model and distils that."""
    import algorithms.mnfl as mnfl_module

    calls = []
    real_distill, real_train = mnfl_module.distill, mnfl_module.train_local

    def spy_distill(model, *args, **kwargs):
        start = get_flat_weights(model)
        out = real_distill(model, *args, **kwargs)
        calls.append(("distill", start, get_flat_weights(model)))
        return out

    def spy_train(model, *args, **kwargs):
        start = get_flat_weights(model)
        out = real_train(model, *args, **kwargs)
        calls.append(("train", start, get_flat_weights(model)))
        return out

    monkeypatch.setattr(mnfl_module, "distill", spy_distill)
    monkeypatch.setattr(mnfl_module, "train_local", spy_train)
    runs = {}
    for private_first in (False, True):
        calls.clear()
        algo = MNFL(MNFLHyperparams(**CLIENT_HP, coefficient_lr=0.5, rho=0.1, private_first=private_first))
        history = _run(algo, rounds=2)
        runs[private_first] = (history, list(calls))
    (default, d_calls), (first, f_calls) = runs[False], runs[True]
    # round 1: train only (4 clients), identical in both orders
    assert [c[0] for c in d_calls[:4]] == [c[0] for c in f_calls[:4]] == ["train"] * 4
    for a, b in zip(default[0]["updates"], first[0]["updates"]):
        assert torch.equal(a.tensors["public_probs"], b.tensors["public_probs"])
    # round 2, client by client: (distill, train) vs (train, distill)
    d2, f2 = d_calls[4:], f_calls[4:]
    assert [c[0] for c in d2] == ["distill", "train"] * 4 and [c[0] for c in f2] == ["train", "distill"] * 4
    for k in range(4):
        (_, d_in, d_out), (_, t_in, t_out) = d2[2 * k], d2[2 * k + 1]
        assert torch.equal(t_in, d_out)          # default: the distilled model is trained
        (_, t_in2, t_out2), (_, d_in2, d_out2) = f2[2 * k], f2[2 * k + 1]
        assert torch.equal(d_in2, t_out2)        # private_first: the trained model is distilled
        assert torch.equal(d_in, t_in2)          # both start from the client's round-1 model
        assert not torch.equal(t_out, d_out2)    # and end elsewhere
    # with private_first the uploaded predictions (and the refresh upload) come from the distilled model
    for a, b in zip(default[1]["updates"], first[1]["updates"]):
        assert not torch.equal(a.tensors["public_probs"], b.tensors["public_probs"])
        assert "distilled_probs" in b.tensors


# ---------------------------------------------------------------------------------------------------------------
# pFedDF

def _pfeddf_round(hp):
    models, public = _models(), _public(30)
    ctx = _server(models, public)
    algo = PFedDF(hp)
    state = algo.init_server_state(ctx)
    sampled = [0, 1, 2, 3]
    payload = algo.broadcast(state, sampled)
    clients = {k: _client(k, models[ARCHS[k]], {}, public, 1, ARCHS[k], n=24) for k in sampled}
    updates = []
    for k in sampled:
        u = algo.client_update(payload, clients[k])
        u.architecture, u.client_id = ARCHS[k], k
        updates.append(u)
    state, metrics = aggregate_round(algo, state, updates, ctx)
    return algo, models, public, state, metrics


def test_pfeddf_draws_a_public_subset_per_round_and_runs_feddf():
    algo, models, public, state, metrics = _pfeddf_round(PFedDFHyperparams(public_size=12, distill_batch_size=4))
    assert metrics["distill_size"] == 12 and metrics["distill_steps"] == 3
    first = algo.broadcast(state, [0])["public_indices"]
    assert first.shape == (12,) and torch.equal(first, first.sort().values) and int(first.max()) < 30
    assert set(state.weights) == {"cnn", "mlp"} and algo.evaluation_weights(state) is None
    whole = PFedDF(PFedDFHyperparams(public_size=None))
    ctx = _server(models, public)
    assert "public_indices" not in whole.broadcast(whole.init_server_state(ctx), [0])


def _scores_of(model, client):
    out = evaluate(model, client.val_x, client.val_y, prefix="val_")
    out.update(evaluate(model, client.test_x, client.test_y, prefix="test_"))
    return out


def test_pfeddf_without_finetuning_scores_exactly_the_server_model():
    algo, models, public, state, _ = _pfeddf_round(PFedDFHyperparams(public_size=12, finetune_epochs=0))
    payload = algo.broadcast(state, [1, 2])
    for k in (1, 2):
        arch = ARCHS[k]
        client = _client(k, models[arch], {}, public, 2, arch, n=24)
        algo.client_update(payload, client)
        scores = algo.client_evaluate(payload, client)
        reference = build_model(arch, DIGITS, 10)
        set_flat_weights(reference, state.weights[arch])
        assert scores == _scores_of(reference, client)


def test_pfeddf_finetuning_changes_the_score_and_nothing_else():
    hp = PFedDFHyperparams(public_size=12, finetune_epochs=3)
    algo, models, public, state, _ = _pfeddf_round(hp)
    plain = PFedDF(PFedDFHyperparams(public_size=12, finetune_epochs=0))
    payload = algo.broadcast(state, [0])
    server = {a: w.clone() for a, w in state.weights.items()}
    sent = {a: w.clone() for a, w in payload["weights"].items()}
    client = _client(0, models["cnn"], {}, public, 2, "cnn", n=24)
    update = algo.client_update(payload, client)
    returned = {k: v.clone() for k, v in update.tensors.items()}
    local = get_flat_weights(client.model)
    tuned = algo.client_evaluate(payload, client)
    untuned = plain.client_evaluate(payload, _client(0, models["cnn"], {}, public, 2, "cnn", n=24))
    assert tuned != untuned and tuned["val_loss"] != untuned["val_loss"]
    assert all(torch.equal(state.weights[a], server[a]) for a in server)      # the server model is untouched
    assert all(torch.equal(payload["weights"][a], sent[a]) for a in sent)     # so is the broadcast
    assert all(torch.equal(update.tensors[k], returned[k]) for k in returned)  # and what the client sent
    assert torch.equal(get_flat_weights(client.model), local)                # the copy was fine-tuned, not it
    # the fine-tuned copy is the server model trained E_ft epochs with the client's settings and generator
    copy_ = build_model("cnn", DIGITS, 10)
    set_flat_weights(copy_, state.weights["cnn"])
    again = _client(0, models["cnn"], {}, public, 2, "cnn", n=24)
    algo.client_update(payload, again)  # advances the generator as in the run above
    train_local(copy_, again.x, again.y, dataclasses.replace(again.training, epochs=3), again.generator)
    assert tuned == _scores_of(copy_, again)


# ---------------------------------------------------------------------------------------------------------------
# bad input, refused when the config loads

BASE = {"dataset": {"name": "digits"}, "model": {"name": "cnn"},
        "partition": {"kind": "dirichlet", "alpha": 0.5, "val_fraction": 0.1, "test_fraction": 0.25},
        "clients": {"num_clients": 4, "clients_per_round": 4}, "public": {"source": "train_split"}, "rounds": 2}


@pytest.mark.parametrize("name,params,field", [
    ("mnfl", {"rho": -0.1}, "algorithm.rho"),
    ("mnfl", {"distill_passes": 0}, "algorithm.distill_passes"),
    ("mnfl", {"bn_mode": "frozen"}, "algorithm.bn_mode"),
    ("fedmd", {"distill_passes": 0}, "algorithm.distill_passes"),
    ("fedmd", {"rho": 0.5}, "algorithm.rho"),  # no c-step: an unknown key
    ("sim_pfl", {"similarity_weights": "softmax"}, "algorithm.similarity_weights"),
    ("topk_pfl", {"topk": 0}, "algorithm.topk"),
    ("topk_pfl", {"topk": 5}, "algorithm.topk"),  # more than the 4 clients
    ("topk_pfl", {"topk": 2, "selection": "threshold"}, "algorithm.selection"),
    ("pfeddf", {"finetune_epochs": -1}, "algorithm.finetune_epochs"),
    ("pfeddf", {"public_size": 0}, "algorithm.public_size"),
])
def test_bad_values_are_refused_at_load_naming_the_field(name, params, field):
    with pytest.raises(ConfigError) as err:
        build_experiment({**BASE, "algorithm": {"name": name, **params}})
    assert err.value.field == field


@pytest.mark.parametrize("name", ["mnfl", "fedmd", "sim_pfl", "topk_pfl", "pfeddf"])
def test_no_public_data_is_refused_and_a_good_config_loads(name):
    params = {"topk": 2} if name == "topk_pfl" else {}
    with pytest.raises(ConfigError) as err:
        build_experiment({**BASE, "public": {"source": "none"}, "algorithm": {"name": name, **params}})
    assert err.value.field == "public.source"
    config = build_experiment({**BASE, "algorithm": {"name": name, **params, "distill_lr": 0.01}})
    assert config.algorithm.name == name and config.algorithm.params.distill_lr == 0.01
