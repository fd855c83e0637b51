"""Unit tests for algorithms/common/coefficients.py: MNFL's coefficient matrix c (docs/methods/mnfl.md §1, §2.1 Eq. 7,
§8, §10). Convention under test: c[m, n] = weight of teacher m in student n's target; columns lie on the simplex."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from algorithms.common.coefficients import (check_topk, coefficient_gradient, coefficient_objective,
                                            coefficient_step, cosine_similarities, personalised_targets,
                                            project_columns_to_simplex, similarity_coefficients, topk_coefficients,
                                            uniform_coefficients)
from algorithms.errors import ConfigError


# small tensors: torch's intra-op threads only add overhead (many times slower on a busy machine)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _random_soft(n: int, m: int, k: int, seed: int, temperature: float = 1.0) -> torch.Tensor:
    """Random tempered soft predictions S [N, M, C] in float64."""
    z = 2.0 * torch.randn(n, m, k, generator=_gen(seed), dtype=torch.float64)
    return torch.softmax(z / temperature, dim=-1)


def _self_explained_soft(n: int = 5, m: int = 64, d: int = 8, temperature: float = 2.0, seed: int = 0):
    """Construction for the ρ = 0 test: N fixed linear "models" f_m(x) = x·W_m + 3·e_m on a shared public pool x.

    Every client has its own random weights W_m and a bias toward its own class m (C = N), so the clients'
    tempered predictions s_m = softmax(f_m(x)/T) are pairwise different and no mixture of the others reproduces
    s_n. With w fixed, KL(Σ_m c[m, n] s_m ‖ s_n) is then minimised (value 0) only by column n = e_n, i.e. each
    client is best explained by itself (docs/methods/mnfl.md §1 [INF], §10 #13).
    """
    g = _gen(seed)
    x = torch.randn(m, d, generator=g, dtype=torch.float64)
    preds = []
    for client in range(n):
        w = 0.5 * torch.randn(d, n, generator=g, dtype=torch.float64)
        b = torch.zeros(n, dtype=torch.float64)
        b[client] = 3.0
        preds.append(torch.softmax((x @ w + b) / temperature, dim=-1))
    return torch.stack(preds)


def _brute_force_simplex_projection(v: torch.Tensor) -> torch.Tensor:
    """Exact QP min ‖x − v‖² s.t. x ≥ 0, Σx = 1 by enumerating supports (KKT: x_S = v_S − θ, θ common)."""
    k = v.numel()
    best, best_d = None, float("inf")
    for size in range(1, k + 1):
        for support in itertools.combinations(range(k), size):
            idx = list(support)
            x = torch.zeros_like(v)
            theta = (v[idx].sum() - 1.0) / size
            x[idx] = v[idx] - theta
            if (x >= -1e-15).all():
                d = float(((x - v) ** 2).sum())
                if d < best_d:
                    best, best_d = x.clamp_min(0.0), d
    return best


# ------------------------------------------------------------------------------------------------------------
# initialisation, projection, targets
# ------------------------------------------------------------------------------------------------------------

def test_uniform_coefficients_columns_sum_to_one():
    c = uniform_coefficients(7, dtype=torch.float64)
    assert c.shape == (7, 7)
    assert torch.allclose(c, torch.full((7, 7), 1.0 / 7, dtype=torch.float64))
    assert torch.allclose(c.sum(0), torch.ones(7, dtype=torch.float64))
    with pytest.raises(ValueError, match="n must be"):
        uniform_coefficients(0)


@pytest.mark.parametrize("v, expected", [
    ([0.5, 0.5], [0.5, 0.5]),                 # already on the simplex
    ([2.0, 0.0], [1.0, 0.0]),
    ([1.0, 1.0], [0.5, 0.5]),
    ([0.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]),
    ([-1.0, 3.0, 0.5], [0.0, 1.0, 0.0]),      # θ = 2
    ([0.6, 0.6, -0.2], [0.5, 0.5, 0.0]),      # θ = 0.1
    ([0.3, 0.2, 0.1, 0.0], [0.4, 0.3, 0.2, 0.1]),  # θ = −0.1 over all four
    ([0.9, 0.5, -0.3, 0.05], [0.7, 0.3, 0.0, 0.0]),   # θ = 0.2 over the top two
    ([5.0], [1.0]),
])
def test_projection_known_answers(v, expected):
    col = torch.tensor(v, dtype=torch.float64).unsqueeze(1)
    out = project_columns_to_simplex(col).squeeze(1)
    assert torch.allclose(out, torch.tensor(expected, dtype=torch.float64), atol=1e-12)


def test_projection_matches_brute_force_qp_columnwise():
    g = _gen(1)
    for k in (2, 3, 5, 7):
        c = 1.5 * torch.randn(k, 9, generator=g, dtype=torch.float64)
        c[:, 0] = torch.tensor([1.0 / k] * k, dtype=torch.float64)   # a column already on the simplex
        out = project_columns_to_simplex(c)
        for j in range(c.shape[1]):
            assert torch.allclose(out[:, j], _brute_force_simplex_projection(c[:, j]), atol=1e-12)
        assert (out >= 0).all() and torch.allclose(out.sum(0), torch.ones(9, dtype=torch.float64))
    assert torch.equal(c, c.clone())  # input untouched (pure function)


def test_projection_rejects_bad_input():
    with pytest.raises(ValueError, match="c must be a 2-D"):
        project_columns_to_simplex(torch.ones(3))
    with pytest.raises(ValueError, match="NaN"):
        project_columns_to_simplex(torch.tensor([[float("nan")], [0.0]]))


def test_personalised_targets_are_column_mixtures():
    s = _random_soft(4, 10, 3, seed=2)
    c = project_columns_to_simplex(torch.rand(4, 4, generator=_gen(3), dtype=torch.float64))
    q = personalised_targets(c, s)
    assert q.shape == (4, 10, 3)
    for n in range(4):
        expected = sum(c[m, n] * s[m] for m in range(4))
        assert torch.allclose(q[n], expected, atol=1e-14)
    assert torch.allclose(q.sum(-1), torch.ones(4, 10, dtype=torch.float64))
    # identity c: every client's target is its own prediction; uniform c: the FedMD average for everyone
    assert torch.allclose(personalised_targets(torch.eye(4, dtype=torch.float64), s), s)
    avg = s.mean(0)
    assert torch.allclose(personalised_targets(uniform_coefficients(4, torch.float64), s), avg.expand(4, -1, -1))


def test_shape_errors_name_the_argument():
    c = uniform_coefficients(3, torch.float64)
    with pytest.raises(ValueError, match="soft_predictions"):
        personalised_targets(c, torch.rand(4, 5, 2, dtype=torch.float64))   # wrong N
    with pytest.raises(ValueError, match="soft_predictions"):
        personalised_targets(c, torch.rand(3, 5, dtype=torch.float64))      # not 3-D
    with pytest.raises(ValueError, match="c must be a square"):
        personalised_targets(torch.rand(3, 2), torch.rand(3, 5, 2))
    with pytest.raises(ValueError, match="client_weights"):
        coefficient_objective(c, _random_soft(3, 5, 2, seed=0), client_weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="client_weights"):
        coefficient_gradient(c, _random_soft(3, 5, 2, seed=0), client_weights=[1.0, -2.0, 1.0])


# ------------------------------------------------------------------------------------------------------------
# Eq. 7: objective, gradient, step
# ------------------------------------------------------------------------------------------------------------

def test_objective_zero_at_identity_without_penalty_and_penalty_value():
    s = _random_soft(4, 6, 5, seed=4)
    eye = torch.eye(4, dtype=torch.float64)
    assert abs(float(coefficient_objective(eye, s, rho=0.0))) < 1e-12
    # at the identity the KL is 0 and the penalty is ρ·(N·(1 − 1/N)² + N(N−1)·(1/N)²) = ρ·(N − 1)
    assert float(coefficient_objective(eye, s, rho=0.7)) == pytest.approx(0.7 * 3, rel=1e-12)
    assert float(coefficient_objective(uniform_coefficients(4, torch.float64), s, rho=5.0)) > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_analytic_gradient_matches_central_differences(seed):
    n, m, k = 4, 7, 5
    s = _random_soft(n, m, k, seed=seed, temperature=3.0)
    g = _gen(100 + seed)
    c = 0.05 + torch.rand(n, n, generator=g, dtype=torch.float64)   # interior point, q > eps (not normalised)
    weights = torch.tensor([10.0, 30.0, 5.0, 55.0], dtype=torch.float64)   # D_n
    kw = dict(client_weights=weights, lam=1.7, rho=0.3)
    grad = coefficient_gradient(c, s, **kw)
    h = 1e-6
    fd = torch.zeros_like(c)
    for i in range(n):
        for j in range(n):
            e = torch.zeros_like(c)
            e[i, j] = h
            fd[i, j] = (coefficient_objective(c + e, s, **kw) - coefficient_objective(c - e, s, **kw)) / (2 * h)
    rel = float((grad - fd).norm() / fd.norm())
    assert rel < 1e-5
    # and it agrees with autograd
    c_req = c.clone().requires_grad_(True)
    auto, = torch.autograd.grad(coefficient_objective(c_req, s, **kw), c_req)
    assert torch.allclose(grad, auto, rtol=1e-10, atol=1e-12)


def test_unprojected_step_is_plain_gradient_step():
    s = _random_soft(3, 8, 4, seed=5)
    c = uniform_coefficients(3, torch.float64)
    out = coefficient_step(c, s, lr=0.05, lam=1.0, rho=0.7, project=False)
    assert torch.allclose(out, c - 0.05 * coefficient_gradient(c, s, lam=1.0, rho=0.7), atol=1e-15)
    assert torch.equal(c, uniform_coefficients(3, torch.float64))  # c itself is not modified


def test_c_stays_on_simplex_over_many_random_steps():
    g = _gen(6)
    n = 6
    c = uniform_coefficients(n, torch.float64)
    for step in range(300):
        s = _random_soft(n, 16, 4, seed=1000 + step, temperature=float(1 + step % 3))
        weights = torch.rand(n, generator=g, dtype=torch.float64) + 0.1
        lr = float(10 ** (-2 + 2 * torch.rand(1, generator=g)))          # 0.01 .. 1
        rho = float(torch.rand(1, generator=g)) * 0.9 / lr if step % 2 else 0.0
        c = coefficient_step(c, s, weights, lr=lr, lam=float(torch.rand(1, generator=g)) * 5, rho=rho)
        assert torch.isfinite(c).all()
        assert (c >= 0).all()
        assert torch.allclose(c.sum(0), torch.ones(n, dtype=torch.float64), atol=1e-6)
    c32 = uniform_coefficients(n)                                        # float32 path too
    for step in range(50):
        c32 = coefficient_step(c32, _random_soft(n, 16, 4, seed=step).float(), lr=0.5, rho=0.0)
    assert (c32 >= 0).all() and torch.allclose(c32.sum(0), torch.ones(n), atol=1e-6)


def test_huge_rho_keeps_c_uniform():
    n = 5
    s = _self_explained_soft(n)
    uniform = uniform_coefficients(n, torch.float64)
    rho = 1e6
    # explicit Eq. 7 needs eta3 * rho < 1
    c = uniform.clone()
    for _ in range(200):
        c = coefficient_step(c, s, lr=0.5 / rho, rho=rho)
    assert (c - uniform).abs().max() < 1e-6
    # the proximal form is stable at the default eta3 and pulls even a far-off c back to uniform in one step
    c = torch.eye(n, dtype=torch.float64)
    for _ in range(200):
        c = coefficient_step(c, s, lr=0.01, rho=rho, penalty="proximal")
    assert (c - uniform).abs().max() < 1e-6


def test_rho_zero_concentrates_each_column_on_the_client_itself():
    n = 5
    s = _self_explained_soft(n)
    c = uniform_coefficients(n, torch.float64)
    j0 = float(coefficient_objective(c, s, rho=0.0))
    for _ in range(300):
        c = coefficient_step(c, s, lr=1.0, rho=0.0)
    assert (c.argmax(0) == torch.arange(n)).all()
    assert (c.diagonal() > 0.99).all()
    assert float(coefficient_objective(c, s, rho=0.0)) < 1e-3 * j0
    # a moderate rho spreads weight to others but keeps self-weight largest (§1 [INF])
    c = uniform_coefficients(n, torch.float64)
    for _ in range(300):
        c = coefficient_step(c, s, lr=0.01, rho=0.7)
    assert (c.argmax(0) == torch.arange(n)).all()
    assert (c.diagonal() < 0.9).all() and (c > 0.05).all()


# ------------------------------------------------------------------------------------------------------------
# validation
# ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rho", [-0.1, float("nan"), float("inf"), "abc"])
def test_bad_rho_raises_config_error(rho):
    c, s = uniform_coefficients(3, torch.float64), _random_soft(3, 4, 2, seed=0)
    for fn in (lambda: coefficient_step(c, s, lr=0.01, rho=rho), lambda: coefficient_objective(c, s, rho=rho),
               lambda: coefficient_gradient(c, s, rho=rho)):
        with pytest.raises(ConfigError) as err:
            fn()
        assert err.value.field == "algorithm.rho"


@pytest.mark.parametrize("lr", [0.0, -0.01, float("nan"), None])
def test_bad_coefficient_lr_raises_config_error(lr):
    c, s = uniform_coefficients(3, torch.float64), _random_soft(3, 4, 2, seed=0)
    with pytest.raises(ConfigError) as err:
        coefficient_step(c, s, lr=lr, rho=0.7)
    assert err.value.field == "algorithm.coefficient_lr"


def test_unstable_explicit_step_and_other_fields():
    c, s = uniform_coefficients(3, torch.float64), _random_soft(3, 4, 2, seed=0)
    with pytest.raises(ConfigError) as err:
        coefficient_step(c, s, lr=0.5, rho=3.0)       # eta3 * rho = 1.5 >= 1
    assert err.value.field == "algorithm.coefficient_lr"
    coefficient_step(c, s, lr=0.5, rho=3.0, penalty="proximal")   # fine
    with pytest.raises(ConfigError) as err:
        coefficient_step(c, s, lr=0.01, rho=0.7, penalty="implicit")
    assert err.value.field == "algorithm.coefficient_penalty"
    with pytest.raises(ConfigError) as err:
        coefficient_objective(c, s, lam=-1.0)
    assert err.value.field == "algorithm.lam"


# ------------------------------------------------------------------------------------------------------------
# rule-based coefficients of the baselines (spec §5): cosine, Sim-pFL, TopK-pFL
# ------------------------------------------------------------------------------------------------------------

def _simplex_columns(c: torch.Tensor) -> bool:
    return bool((c >= 0).all()) and torch.allclose(c.sum(0), torch.ones(c.shape[1], dtype=c.dtype), atol=1e-12)


def test_cosine_similarities_match_loops_with_an_exact_unit_diagonal():
    s = _random_soft(5, 7, 3, seed=11)
    cos = cosine_similarities(s)
    flat = s.reshape(5, -1)
    for m in range(5):
        for n in range(5):
            if m != n:
                expected = float(flat[m] @ flat[n]) / float(flat[m].norm() * flat[n].norm())
                assert float(cos[m, n]) == pytest.approx(expected, abs=1e-14)
    assert torch.equal(cos.diagonal(), torch.ones(5, dtype=torch.float64))   # self = 1 exactly, not ≈ 1
    assert torch.equal(cos, cos.T)
    # a client with all-zero predictions: cosine 0 with the others, still 1 with itself
    z = s.clone()
    z[2] = 0.0
    cz = cosine_similarities(z)
    assert cz[2, [0, 1, 3, 4]].eq(0).all() and cz[2, 2] == 1.0


def test_similarity_coefficients_clip_negative_cosines_and_normalise():
    # not probabilities, so cosines can be negative: c ∝ max(cos, 0) drops client 1 from client 0's target
    s = torch.tensor([[[1.0, 0.0]], [[-1.0, 0.2]], [[1.0, 1.0]]], dtype=torch.float64)
    c = similarity_coefficients(s)
    cos01, cos02 = -1.0 / math.sqrt(1.04), 1.0 / math.sqrt(2.0)
    cos12 = -0.8 / math.sqrt(1.04 * 2.0)
    assert cos01 < 0 and cos12 < 0
    assert torch.allclose(c[:, 0], torch.tensor([1.0, 0.0, cos02], dtype=torch.float64) / (1.0 + cos02), atol=1e-14)
    assert torch.allclose(c[:, 1], torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64), atol=1e-14)
    assert _simplex_columns(c)
    # min–max: shift by the column's minimum, so the least similar gets 0 even when its cosine is positive
    p = _random_soft(4, 6, 3, seed=12)
    mm = similarity_coefficients(p, "minmax")
    cos = cosine_similarities(p)
    for n in range(4):
        w = cos[:, n] - cos[:, n].min()
        assert torch.allclose(mm[:, n], w / w.sum(), atol=1e-14)
        assert mm[int(cos[:, n].argmin()), n] == 0
    assert _simplex_columns(mm) and _simplex_columns(similarity_coefficients(p))
    # nothing to normalise (one client, or identical predictions): uniform
    assert torch.equal(similarity_coefficients(p[:1], "minmax"), torch.ones(1, 1, dtype=torch.float64))
    same = p[:1].expand(3, -1, -1)
    assert torch.allclose(similarity_coefficients(same, "minmax"), torch.full((3, 3), 1 / 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="weighting"):
        similarity_coefficients(p, "softmax")


def test_topk_keeps_self_first_even_on_ties_and_k_beyond_n_is_fedmd():
    p = _random_soft(4, 4, 3, seed=13)
    p[0] = p[1] = torch.eye(3, dtype=torch.float64)[[0, 1, 2, 0]]   # identical one-hot rows: cos = 4/(2·2) = 1
    assert cosine_similarities(p)[0, 1] == 1.0                      # an exact tie with self
    c = topk_coefficients(p, k=1)
    assert torch.equal(c, torch.eye(4, dtype=torch.float64))   # K = 1: only the student itself, never its twin
    c2 = topk_coefficients(p, k=2)
    assert c2[0, 1] == 0.5 and c2[1, 0] == 0.5 and c2[0, 0] == 0.5   # the twin is each other's nearest
    assert torch.equal(topk_coefficients(p, k=9), torch.full((4, 4), 0.25, dtype=torch.float64))
    for k in (1, 2, 3, 4):
        ck = topk_coefficients(_random_soft(6, 5, 3, seed=14 + k), k=k)
        assert _simplex_columns(ck) and (ck > 0).sum(0).eq(k).all() and ck.diagonal().eq(1.0 / k).all()
    with pytest.raises(ConfigError) as err:
        topk_coefficients(p, k=0)
    assert err.value.field == "algorithm.topk"
    with pytest.raises(ConfigError):
        check_topk(2.5)


def test_topk_median_selection_as_the_reference_code():
    # five clients: the threshold of each column is its 2nd smallest cosine (⌊5/2⌋ = 2), keep strictly above
    p = _random_soft(5, 8, 4, seed=15)
    c = topk_coefficients(p, selection="median")
    cos = cosine_similarities(p)
    for n in range(5):
        threshold = sorted(cos[:, n].tolist())[1]
        kept = [m for m in range(5) if float(cos[m, n]) > threshold or m == n]
        assert len(kept) == 3
        assert torch.allclose(c[:, n], torch.tensor([1 / 3 if m in kept else 0.0 for m in range(5)],
                                                     dtype=torch.float64))
    assert torch.equal(topk_coefficients(p[:1], selection="median"), torch.ones(1, 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="selection"):
        topk_coefficients(p, selection="threshold")
