"""Unit tests for algorithms/common/certainty.py: FedAUX scoring (docs/methods/fedaux.md §3.2, §4, Eqs. 7, 9–11)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from algorithms.common.certainty import (DEFAULT_XI, certainty_scores, certainty_weights, fit_scoring_weights,
                                         fit_scoring_weights_batched, normalisation_scale, normalise_features,
                                         privatise_scoring_weights, public_normalisation_scale,
                                         scoring_objective, scoring_sensitivity, scoring_sigma)
from algorithms.errors import ConfigError


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _ball(rng: np.random.Generator, k: int, h: int, sphere: bool = False) -> torch.Tensor:
    """k points uniform in the unit ball of R^h (on the unit sphere if ``sphere``), float64."""
    x = rng.standard_normal((k, h))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    if not sphere:
        x *= rng.random((k, 1)) ** (1.0 / h)
    return torch.from_numpy(x)


def _grad_J(w: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, lam: float) -> torch.Tensor:
    """∇J by autograd, written independently of the module: mean logistic loss + (λ/2)‖w‖², no bias."""
    w = w.detach().to(torch.float64).clone().requires_grad_(True)
    x = torch.cat([pos, neg]).to(torch.float64)
    t = torch.cat([torch.ones(len(pos)), -torch.ones(len(neg))]).to(torch.float64)
    J = torch.nn.functional.softplus(-t * (x @ w)).mean() + 0.5 * lam * w.dot(w)
    (g,) = torch.autograd.grad(J, w)
    return g


# ------------------------------------------------------------------------------------------- solver


@pytest.mark.parametrize("lam", [0.01, 0.1, 1.0])
def test_solver_reaches_the_optimum_and_respects_the_norm_bound(lam):
    rng = np.random.default_rng(1)
    pos, neg = _ball(rng, 60, 8), _ball(rng, 40, 8)
    w = fit_scoring_weights(pos, neg, lam)
    assert w.shape == (8,) and w.dtype == torch.float64
    assert float(_grad_J(w, pos, neg, lam).norm()) < 1e-6
    assert float(w.norm()) <= 1.0 / lam
    value, grad = scoring_objective(w, pos, neg, lam)
    assert float(grad.norm()) < 1e-6
    assert value < scoring_objective(w + 1e-3 * torch.randn(8, dtype=torch.float64, generator=_gen(0)),
                                     pos, neg, lam)[0]


def test_norm_bound_is_nearly_tight_on_separable_data_and_a_sum_loss_would_break_it():
    rng = np.random.default_rng(2)
    e1 = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    pos = 0.95 * e1 + 0.05 * _ball(rng, 30, 3)
    neg = -0.95 * e1 + 0.05 * _ball(rng, 30, 3)
    lam, n = 1.0, 60
    w = fit_scoring_weights(pos, neg, lam)
    assert float(_grad_J(w, pos, neg, lam).norm()) < 1e-6
    assert 0.3 / lam < float(w.norm()) <= 1.0 / lam
    assert w[0] > 0  # positives score high: l(z) = log(1 + e^{-z}), not the paper's misprint
    # The sklearn-style sum loss (λ effectively divided by N, spec §10 #1) violates the bound here:
    assert float(fit_scoring_weights(pos, neg, lam / n).norm()) > 1.0 / lam


def test_solver_keeps_dtype_batched_matches_single_and_refuses_unnormalised_features():
    rng = np.random.default_rng(3)
    problems = [(_ball(rng, 20, 4), _ball(rng, 15, 4)), (_ball(rng, 5, 6), _ball(rng, 15, 6))]
    batched = fit_scoring_weights_batched(problems, 0.1)
    for (pos, neg), wb in zip(problems, batched):
        assert torch.equal(wb, fit_scoring_weights(pos, neg, 0.1))
    w32 = fit_scoring_weights(problems[0][0].float(), problems[0][1].float(), 0.1)
    assert w32.dtype == torch.float32
    assert torch.allclose(w32.double(), batched[0], atol=1e-6)
    with pytest.raises(ValueError, match="‖x‖ ≤ 1"):
        fit_scoring_weights(problems[0][0] * 3.0, problems[0][1], 0.1)
    with pytest.raises(ValueError, match="neg"):
        fit_scoring_weights(problems[0][0], problems[1][1], 0.1)


# ---------------------------------------------------------------------------------- sensitivity


@pytest.mark.parametrize("lam", [0.01, 0.1, 1.0])
def test_empirical_sensitivity_never_exceeds_theorem_1(lam, capsys):
    """Replace-one neighbours on D_i (D⁻ fixed): ‖w*(D) − w*(D')‖ ≤ 2/(λN) on every draw (Theorem 1)."""
    rng = np.random.default_rng(int(lam * 1000) + 7)
    n_i, m, h = 20, 20, 50
    bound = scoring_sensitivity(lam, n_i + m)
    assert bound == pytest.approx(2.0 / (lam * (n_i + m)), rel=1e-15)
    neg = _ball(rng, m, h, sphere=True)
    ratios = []
    for _ in range(200):
        pos = _ball(rng, n_i, h, sphere=True)
        pos_adj = pos.clone()
        pos_adj[rng.integers(n_i)] = _ball(rng, 1, h, sphere=True)[0]
        delta_w = float((fit_scoring_weights(pos, neg, lam) - fit_scoring_weights(pos_adj, neg, lam)).norm())
        assert delta_w <= bound + 1e-9
        ratios.append(delta_w / bound)
    with capsys.disabled():
        print(f"\n[sensitivity] lam={lam}: max ratio ‖Δw‖/(2/(λN)) = {max(ratios):.4f} over {len(ratios)} draws")
    assert max(ratios) > 0.1  # not vacuous: some neighbours move w* by a sizeable fraction of the bound


# --------------------------------------------------------------------------------------- privacy


@pytest.mark.parametrize("epsilon,delta,lam,n", [(0.1, 1e-5, 0.1, 22_500), (0.04, 1e-6, 0.01, 21_250),
                                                 (2.0, 1e-3, 1.0, 40)])
def test_sigma_is_the_closed_form(epsilon, delta, lam, n):
    w = torch.zeros(16, dtype=torch.float64)
    _, sigma = privatise_scoring_weights(w, lam, n, epsilon, delta, _gen(0))
    expected = math.sqrt(8 * math.log(1.25 / delta) / (epsilon ** 2 * lam ** 2 * n ** 2))
    assert sigma == pytest.approx(expected, rel=1e-12)
    assert scoring_sigma(lam, n, epsilon, delta) == pytest.approx(expected, rel=1e-12)


def test_spec_worked_numbers():
    assert scoring_sigma(0.1, 22_500, 0.1, 1e-5) == pytest.approx(0.0431, abs=5e-5)
    assert scoring_sigma(0.01, 21_250, 0.04, 1e-6) == pytest.approx(1.247, abs=5e-4)


def test_noise_is_seeded_only_from_the_generator_and_eps_only_rescales_it():
    w = torch.randn(32, dtype=torch.float64, generator=_gen(5))
    lam, n, delta = 0.1, 500, 1e-5
    w_inf, sigma_inf = privatise_scoring_weights(w, lam, n, math.inf, delta, _gen(1))
    assert sigma_inf == 0.0 and torch.equal(w_inf, w)

    global_state = torch.get_rng_state()
    a, sigma_a = privatise_scoring_weights(w, lam, n, 0.1, delta, _gen(11))
    b, _ = privatise_scoring_weights(w, lam, n, 0.1, delta, _gen(11))
    c, _ = privatise_scoring_weights(w, lam, n, 0.1, delta, _gen(12))
    d, sigma_d = privatise_scoring_weights(w, lam, n, 0.7, delta, _gen(11))
    assert torch.equal(torch.get_rng_state(), global_state)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert sigma_a > 0 and sigma_d == pytest.approx(sigma_a * 0.1 / 0.7, rel=1e-12)
    assert torch.allclose((a - w) / sigma_a, (d - w) / sigma_d, rtol=0, atol=1e-9)
    assert not torch.equal(a, w)


# ------------------------------------------------------------------------------- scores, weights


def _weighted_ensemble(weights: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """softmax(Σ_k w_k(x) z_k(x)); weights [K, N], logits [K, N, C] → [N, C]."""
    return torch.softmax((weights.unsqueeze(-1) * logits).sum(dim=0), dim=-1)


def test_huge_lambda_collapses_to_the_uniform_mean_ensemble():
    rng = np.random.default_rng(4)
    K, n_distill, h, classes = 3, 50, 6, 4
    raw_distill = 5.0 * _ball(rng, n_distill, h)
    raw_neg = 5.0 * _ball(rng, 30, h)
    logits = torch.randn(K, n_distill, classes, dtype=torch.float64, generator=_gen(3)) * 3
    scores = {}
    for lam in (1e6, 0.01):
        rows = []
        for k in range(K):
            raw_pos = 5.0 * _ball(rng, 25, h) + torch.eye(h, dtype=torch.float64)[k]
            gamma = normalisation_scale(raw_pos, raw_neg)
            w = fit_scoring_weights(raw_pos / gamma, raw_neg / gamma, lam)
            w_hat, _ = privatise_scoring_weights(w, lam, 55, math.inf, 1e-5, _gen(k))
            rows.append(certainty_scores(w_hat, raw_distill, gamma))
        scores[lam] = torch.stack(rows)
    big = scores[1e6]
    assert torch.allclose(big, torch.full_like(big, 0.5 + DEFAULT_XI), rtol=0, atol=1e-6)
    weights = certainty_weights(big)
    assert torch.allclose(weights, torch.full_like(weights, 1.0 / K), rtol=0, atol=1e-6)
    mean_ensemble = torch.softmax(logits.mean(dim=0), dim=-1)
    assert torch.allclose(_weighted_ensemble(weights, logits), mean_ensemble, rtol=0, atol=1e-5)
    # contrast: a small λ gives clearly non-uniform weights, so the comparison above is not vacuous
    assert float((certainty_weights(scores[0.01]) - 1.0 / K).abs().max()) > 0.05


def test_certainty_weighting_beats_the_uniform_ensemble_on_two_clients():
    gen = _gen(21)
    centre_a = torch.tensor([1.0, 0.0], dtype=torch.float64)

    def near(centre, k):
        return centre + 0.15 * torch.randn(k, 2, dtype=torch.float64, generator=gen)

    pos_a, pos_b = near(centre_a, 60), near(-centre_a, 60)
    neg = torch.cat([near(centre_a, 20), near(-centre_a, 20)])
    distill = torch.cat([near(centre_a, 100), near(-centre_a, 100)])
    truth = torch.cat([torch.zeros(100, dtype=torch.long), torch.ones(100, dtype=torch.long)])
    # each client's "model" predicts its own class everywhere, B slightly more confidently (no ties)
    logits = torch.stack([torch.tensor([4.0, 0.0], dtype=torch.float64).expand(200, 2),
                          torch.tensor([0.0, 5.0], dtype=torch.float64).expand(200, 2)])
    lam = 0.01
    rows = []
    for k, pos in enumerate((pos_a, pos_b)):
        gamma = normalisation_scale(pos, neg)
        w = fit_scoring_weights(pos / gamma, neg / gamma, lam)
        w_hat, sigma = privatise_scoring_weights(w, lam, len(pos) + len(neg), math.inf, 1e-5, _gen(k))
        assert sigma == 0.0
        rows.append(certainty_scores(w_hat, distill, gamma))
    weights = certainty_weights(torch.stack(rows))
    acc_weighted = float((_weighted_ensemble(weights, logits).argmax(1) == truth).double().mean())
    acc_uniform = float((_weighted_ensemble(torch.full((2, 200), 0.5, dtype=torch.float64), logits).argmax(1)
                         == truth).double().mean())
    assert acc_weighted >= acc_uniform
    assert acc_weighted > acc_uniform
    assert acc_uniform == 0.5 and acc_weighted >= 0.95


def test_scores_weights_and_normalisation_formulas():
    w_hat = torch.tensor([2.0, -1.0], dtype=torch.float64)
    feats = torch.tensor([[4.0, 0.0], [0.0, 4.0], [0.0, 0.0]], dtype=torch.float64)
    s = certainty_scores(w_hat, feats, gamma=4.0, xi=1e-3)
    assert torch.allclose(s, torch.sigmoid(torch.tensor([2.0, -1.0, 0.0], dtype=torch.float64)) + 1e-3)
    scores = torch.tensor([[1.0, 0.2, 0.0], [3.0, 0.2, 2.0]])
    weights = certainty_weights(scores)
    assert torch.allclose(weights, torch.tensor([[0.25, 0.5, 0.0], [0.75, 0.5, 1.0]]))
    with pytest.raises(ValueError, match="positive total"):
        certainty_weights(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="2-D"):
        certainty_weights(torch.ones(3))

    private = torch.tensor([[3.0, 4.0]])
    negative = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    assert normalisation_scale(private, negative) == pytest.approx(5.0)
    assert public_normalisation_scale(negative) == pytest.approx(2.0)
    clipped = normalise_features(private, 2.0, clip=True)
    assert torch.allclose(clipped, torch.tensor([[0.6, 0.8]]))
    assert torch.allclose(normalise_features(negative, 2.0, clip=True), negative / 2.0)
    with pytest.raises(ValueError, match="features_negative"):
        normalisation_scale(private, torch.ones(2, 3))


# ------------------------------------------------------------------------------------ validation


@pytest.mark.parametrize("lam", [0.0, -0.1, math.inf, math.nan, "0.1", True, None])
def test_invalid_lambda_names_algorithm_lam(lam):
    pos, neg = torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float64)
    for call in (lambda: fit_scoring_weights(pos, neg, lam), lambda: scoring_sensitivity(lam, 10),
                 lambda: privatise_scoring_weights(torch.zeros(3), lam, 10, 0.1, 1e-5, _gen(0)),
                 lambda: fit_scoring_weights_batched([(pos, neg)], lam)):
        with pytest.raises(ConfigError, match="> 0") as info:
            call()
        assert info.value.field == "algorithm.lam"


@pytest.mark.parametrize("epsilon", [0.0, -1.0, -math.inf, math.nan, "inf", None])
def test_invalid_epsilon_names_algorithm_epsilon(epsilon):
    with pytest.raises(ConfigError, match="inf for no privacy") as info:
        privatise_scoring_weights(torch.zeros(3), 0.1, 10, epsilon, 1e-5, _gen(0))
    assert info.value.field == "algorithm.epsilon"


@pytest.mark.parametrize("delta", [0.0, 1.0, 1.5, -1e-5, math.nan, None])
def test_invalid_delta_names_algorithm_delta(delta):
    with pytest.raises(ConfigError, match=r"open interval \(0, 1\)") as info:
        privatise_scoring_weights(torch.zeros(3), 0.1, 10, 0.1, delta, _gen(0))
    assert info.value.field == "algorithm.delta"
    with pytest.raises(ConfigError) as info:
        scoring_sigma(0.1, 10, 0.1, delta)
    assert info.value.field == "algorithm.delta"
