"""FedAUX (docs/methods/fedaux.md §3.2 P0–P4 and T, §3.3 Alg. 1/2, §4) through the algorithm interface: pure torch,
no Ray."""
import json
import math
from collections import Counter

import pytest
import torch
import yaml
from torch import nn

import algorithms.feddf as feddf_module
from algorithms import ALGORITHMS, ClientContext, ServerContext
from algorithms.base import aggregate_round
from algorithms.common import LocalTraining, get_flat_weights
from algorithms.common.certainty import normalisation_scale, public_normalisation_scale, scoring_sigma
from algorithms.fedaux import FedAUX, FedAUXHyperparams, extract_features
from algorithms.feddf import FedDF, FedDFHyperparams
from algorithms.models import build_model
from platform.errors import ConfigError
from platform.config.schema import build

CPU = torch.device("cpu")
DIGITS = (1, 8, 8)
PUBLIC = 100  # D_distill = first 80, D⁻ = last 20


pytestmark = pytest.mark.usefixtures("one_torch_thread")


class DictMemo:
    """What the platform's memo does across trials: one compute per (name, key); counts the computes."""

    def __init__(self):
        self.store, self.calls = {}, Counter()

    def __call__(self, name, key, compute):
        k = (name, json.dumps(key, sort_keys=True))
        if k not in self.store:
            self.calls[name] += 1
            self.store[k] = compute()
        return self.store[k]


def _model(name: str = "cnn", seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return build_model(name, DIGITS, 10)


def _public(seed: int = 7) -> torch.Tensor:
    return torch.randn(PUBLIC, *DIGITS, generator=torch.Generator().manual_seed(seed))


def _hp(cls=FedAUXHyperparams, **kw):
    kw.setdefault("distill_batch_size", 16)  # a few distillation steps on the 80 distillation samples
    return build(cls, kw, "algorithm")


def _client(k: int, public_x: torch.Tensor, round_index: int = 0, architecture: str = "cnn", n=None,
            memo=None) -> ClientContext:
    n = 30 + 10 * k if n is None else n
    g = torch.Generator().manual_seed(100 + k)
    y = torch.randint(0, 10, (n,), generator=g) % (3 + k)  # label skew
    x = torch.randn(n, *DIGITS, generator=g) + 0.5 * k  # and feature skew, so scores differ between clients
    shared = _model(architecture, seed=50 + round_index)  # the actor's model holds someone else's weights
    fields = {} if memo is None else {"memo": memo}
    return ClientContext(client_id=k, x=x, y=y, model=shared,
                         training=LocalTraining(epochs=1, batch_size=8, lr=0.1),
                         generator=torch.Generator().manual_seed(1000 * round_index + 200 + k),
                         noise_generator=torch.Generator().manual_seed(1000 * round_index + 300 + k), state={},
                         device=CPU, architecture=architecture, public_x=public_x,
                         initial_weights=get_flat_weights(_model(architecture, seed=0)), **fields)


def _ctx(public_x: torch.Tensor, architectures=("cnn",), memo=None) -> ServerContext:
    fields = {} if memo is None else {"memo": memo}
    return ServerContext.for_models({a: _model(a, seed=0) for a in architectures}, {a: 2 for a in architectures},
                                    seed=11, public_x=public_x, **fields)


def _updates(algo, state, public_x, clients, round_index=0, architectures=None):
    payload = algo.broadcast(state, list(clients))
    out = []
    for k in clients:
        arch = (architectures or {}).get(k, "cnn")
        u = algo.client_update(payload, _client(k, public_x, round_index, architecture=arch))
        u.architecture, u.client_id = arch, k  # what the runtime fills in
        out.append(u)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Release: memoised non-private solve, noise outside the memo

def test_release_is_the_memoised_solution_plus_noise_and_the_solve_runs_once_per_lambda():
    public_x = _public()
    memo = DictMemo()
    released = {}
    for lam, epsilon in ((0.1, math.inf), (0.1, 0.1), (0.1, 0.5), (0.3, 0.1), (0.3, 0.5)):
        algo = FedAUX(_hp(lam=lam, epsilon=epsilon))
        state = algo.init_server_state(_ctx(public_x))
        update = algo.client_update(algo.broadcast(state, [0]), _client(0, public_x, memo=memo))
        key = ("fedaux_scoring", json.dumps({"lam": lam, "feature_norm": "public_clip", "negatives_fraction": 0.2},
                                            sort_keys=True))
        w, gamma, n = memo.store[key]
        assert n == 30 + 20 and update.tensors["scoring_gamma"].item() == gamma
        sigma = update.tensors["scoring_sigma"].item()
        assert sigma == pytest.approx(scoring_sigma(lam, n, epsilon, 1e-5))
        released[lam, epsilon] = (update.tensors["scoring_w"], w, sigma)
    w_hat, w, sigma = released[0.1, math.inf]
    assert sigma == 0.0 and w.dtype == torch.float64 and torch.equal(w_hat, w)  # ε = inf: ŵ = w* exactly
    for lam in (0.1, 0.3):
        (a, w, s1), (b, w2, s2) = released[lam, 0.1], released[lam, 0.5]
        assert w is w2 and s1 == pytest.approx(5 * s2) and not torch.equal(a, w)
        assert torch.allclose((a - w) / s1, (b - w) / s2, rtol=1e-9, atol=1e-12)  # same standard-normal draw
    assert memo.calls == Counter({"fedaux_scoring": 2})  # one solve per distinct λ, none per (ε, δ)


def test_paper_max_uses_the_max_norm_over_private_data_and_negatives():
    public_x = _public()
    algo = FedAUX(_hp(feature_norm="paper_max"))
    client = _client(1, public_x)
    w, gamma, n = algo.scoring_solution(client)
    h0 = _model("cnn", seed=0).features
    pos, neg = extract_features(h0, client.x, CPU), extract_features(h0, public_x[80:], CPU)
    assert gamma == pytest.approx(normalisation_scale(pos, neg))
    assert gamma >= public_normalisation_scale(neg) and n == 40 + 20
    # h_0 is the architecture's initial weights, not whatever the shared actor model holds
    assert torch.equal(client.model.features[0].weight, _model("cnn", seed=50).features[0].weight)


# ---------------------------------------------------------------------------------------------------------------
# Server: scores once per client, teacher weights of exactly the round's clients

def test_scores_are_computed_once_per_client_and_weight_exactly_the_rounds_clients(monkeypatch):
    public_x = _public()
    algo = FedAUX(_hp())
    ctx = _ctx(public_x)
    state = algo.init_server_state(ctx)
    assert state.extra["distill_features"]["cnn"].shape[0] == 80
    seen = []
    original = feddf_module.weighted_logit_ensemble

    def recording(logits, weights=None):
        seen.append(None if weights is None else weights.clone())
        return original(logits, weights)

    monkeypatch.setattr(feddf_module, "weighted_logit_ensemble", recording)

    # round 1: clients in the order 2, 0, 1 (plus client 4 without data, left out of the teacher)
    updates = _updates(algo, state, public_x, [2, 0, 1])
    empty = algo.client_update(algo.broadcast(state, [4]), _client(4, public_x, n=0))
    empty.architecture, empty.client_id = "cnn", 4
    assert empty.weight == 0.0 and "scoring_w" not in empty.tensors
    state1, metrics1 = aggregate_round(algo, state, updates + [empty], ctx)
    scores1 = {k: v.clone() for k, v in state1.extra["scores"].items()}
    assert sorted(scores1) == [0, 1, 2] and all(s.shape == (80,) for s in scores1.values())
    assert all(bool(((s > 0) & (s <= 1 + 1e-8)).all()) for s in scores1.values())
    assert torch.equal(seen[-1], torch.stack([scores1[2], scores1[0], scores1[1]]))
    assert not torch.allclose(scores1[0], scores1[2])  # the clients' scores differ (feature-skewed data)
    assert metrics1["mean_certainty"] == pytest.approx(float(torch.stack(list(scores1.values())).mean()))
    releases1 = {k: dict(v) for k, v in state1.extra["releases"].items()}

    # round 2: clients 1 and 3 (1 participates again with a new noise stream: its new release is ignored)
    updates2 = _updates(algo, state1, public_x, [1, 3], round_index=1)
    assert not torch.equal(updates2[0].tensors["scoring_w"], releases1[1]["w"])
    state2, metrics2 = aggregate_round(algo, state1, updates2, ctx)
    for k in (0, 1, 2):
        assert torch.equal(state2.extra["scores"][k], scores1[k])
        assert torch.equal(state2.extra["releases"][k]["w"], releases1[k]["w"])
    assert sorted(state2.extra["scores"]) == [0, 1, 2, 3] and sorted(state1.extra["scores"]) == [0, 1, 2]
    assert torch.equal(seen[-1], torch.stack([scores1[1], state2.extra["scores"][3]]))

    declared = FedAUX.declared_metrics()
    for metrics in (metrics1, metrics2):
        assert set(metrics) <= set(declared), set(metrics) - set(declared)
        assert {"privacy_epsilon", "privacy_delta", "privacy_sigma", "mean_certainty", "distill_loss"} <= set(metrics)
        assert metrics["privacy_epsilon"] == 0.1 and metrics["privacy_delta"] == 1e-5
    sigmas = [r["sigma"] for r in state2.extra["releases"].values()]
    assert metrics2["privacy_sigma"] == pytest.approx(sum(sigmas) / len(sigmas)) and min(sigmas) > 0
    assert declared["privacy_epsilon"].mode == "min" and declared["privacy_delta"].mode == "min"
    assert declared["privacy_sigma"].mode == "max"


def test_heterogeneous_clients_are_scored_with_their_own_architectures_features():
    public_x = _public()
    algo = FedAUX(_hp())
    memo = DictMemo()
    ctx = _ctx(public_x, architectures=("cnn", "mlp"), memo=memo)
    state = algo.init_server_state(ctx)
    assert algo.init_server_state(ctx).extra["distill_features"] is state.extra["distill_features"]
    assert memo.calls == Counter({"fedaux_distill_features": 1})  # h_0(D_distill) once per configuration
    features = state.extra["distill_features"]
    assert set(features) == {"cnn", "mlp"} and features["cnn"].shape[1] != features["mlp"].shape[1]
    updates = _updates(algo, state, public_x, [0, 1], architectures={0: "cnn", 1: "mlp"})
    assert updates[1].tensors["scoring_w"].shape == (features["mlp"].shape[1],)
    new_state, metrics = aggregate_round(algo, state, updates, ctx)
    assert new_state.extra["releases"][1]["architecture"] == "mlp"
    assert set(new_state.weights) == {"cnn", "mlp"} and set(metrics) <= set(FedAUX.declared_metrics())


# ---------------------------------------------------------------------------------------------------------------
# λ → ∞ is FedDF

def test_huge_lambda_gives_uniform_scores_and_feddfs_server_model():
    public_x = _public()
    fedaux = FedAUX(_hp(lam=1e6))
    ctx_a = _ctx(public_x)
    state_a = fedaux.init_server_state(ctx_a)
    updates = _updates(fedaux, state_a, public_x, [0, 1, 2])
    new_a, metrics_a = aggregate_round(fedaux, state_a, updates, ctx_a)
    for s in new_a.extra["scores"].values():
        assert torch.allclose(s, torch.full_like(s, 0.5 + 1e-8), atol=1e-5)

    feddf = FedDF(_hp(FedDFHyperparams))
    ctx_b = _ctx(public_x)
    new_b, metrics_b = aggregate_round(feddf, feddf.init_server_state(ctx_b), updates, ctx_b)
    assert metrics_a["distill_steps"] == metrics_b["distill_steps"] == 5
    assert torch.allclose(new_a.weights, new_b.weights, atol=1e-5)
    assert metrics_a["distill_loss"] == pytest.approx(metrics_b["distill_loss"], rel=1e-4)


# ---------------------------------------------------------------------------------------------------------------
# Hyperparameters

def test_defaults_registration_and_infinite_epsilon():
    assert ALGORITHMS["fedaux"] is FedAUX and issubclass(FedAUX, FedDF)
    hp = _hp()
    assert (hp.lam, hp.epsilon, hp.delta, hp.xi, hp.feature_norm, hp.negatives_fraction, hp.distill_fraction) == \
        (0.1, 0.1, 1e-5, 1e-8, "public_clip", 0.2, 0.8)
    assert build(FedAUXHyperparams, yaml.safe_load("epsilon: .inf"), "algorithm").epsilon == math.inf
    assert all(doc for doc in FedAUX.hyperparameter_docs().values())
    fields = FedAUX(hp).client_stage_fields()
    assert fields["procedure"] == "fedaux_clients" and fields["epsilon"] == 0.1 and fields["lam"] == 0.1


@pytest.mark.parametrize("values, field", [
    ({"epsilon": 0.0}, "algorithm.epsilon"), ({"epsilon": -1.0}, "algorithm.epsilon"),
    ({"delta": 0.0}, "algorithm.delta"), ({"delta": 1.0}, "algorithm.delta"), ({"delta": 2.0}, "algorithm.delta"),
    ({"lam": 0.0}, "algorithm.lam"), ({"lam": -0.1}, "algorithm.lam"), ({"lam": math.inf}, "algorithm.lam"),
    ({"distill_fraction": 0.9}, "algorithm.negatives_fraction"),
    ({"negatives_fraction": 0.3}, "algorithm.negatives_fraction"),
    ({"feature_norm": "l2"}, "algorithm.feature_norm"), ({"xi": -1.0}, "algorithm.xi"),
])
def test_bad_hyperparameters_name_their_field(values, field):
    with pytest.raises(ConfigError) as info:
        build(FedAUXHyperparams, values, "algorithm")
    assert info.value.field == field


def test_a_smaller_disjoint_split_is_allowed():
    hp = build(FedAUXHyperparams, {"distill_fraction": 0.7, "negatives_fraction": 0.3}, "algorithm")
    assert FedAUX(hp).negatives_slice(PUBLIC) == slice(70, 100)
