"""MNFL's server-side knowledge-coefficient matrix ``c`` (docs/methods/mnfl.md §1, §2.1 Eqs. 2, 4, 6, 7; §8; §10).

Convention (docs/methods/mnfl.md §1, §8 "Indexing", §10 #6): ``c`` is an N×N tensor and ``c[m, n]`` is the weight
that teacher client m gets in student client n's target. **Column n** holds client n's weights, so columns are
normalised (each column lies on the probability simplex) and the targets are ``Q[n] = Σ_m c[m, n] · S[m]``,
i.e. ``einsum('mn,mbk->nbk', c, S)``. (The KT-pFL reference code stores the transpose; do not mix the two.)

The c-objective is the part of Eq. 4 that depends on c, with w fixed (the objective behind Eq. 7):

    J(c) = λ · Σ_n p_n · mean_{x̂∈ξ_r} KL( q_n(x̂) ‖ s_n(x̂) )  +  ρ · ‖c − (1/N)·𝟙‖²_F,
    q_n = Σ_m c[m, n] · s_m,     p_n = D_n / D,

where s_m = softmax(z^m / T) are client m's tempered predictions on the public mini-batch ξ_r. Resolutions
followed: x̂ ranges over public data (§10 #2); 𝟙 is the all-ones matrix, Frobenius norm (§10 #4); the KL is
**mean**-reduced over public samples and summed over classes (§8, §10 #13–14), so η3 = 0.01 is meaningful;
clients are weighted by D_n/D (Eq. 7); c_0 is uniform (§10 #11); the default constraint is a Euclidean
projection of every column onto the simplex after each step (§8, §10 #12), with ``project=False`` as the
faithful ``c_constraint='none'`` ablation (q is then clamped at ``eps`` inside the log, §8).

The baselines of §5 form c from a rule instead of Eq. 7 (same convention: column n = student n's teacher
weights, on the simplex; :mod:`algorithms.mnfl_baselines`): :func:`cosine_similarities` (cosine of the flattened
soft-prediction matrices on the round's public subset, self = 1, §5 / §10 #28), :func:`similarity_coefficients`
(Sim-pFL: c[·, n] ∝ max(cos, 0), or the reference code's min–max weights, §5, §11) and :func:`topk_coefficients`
(TopK-pFL: uniform over the top-K by cosine, self included, or the reference code's median threshold, §3, §5, §11).

Everything here is a pure function of tensors (no models, no I/O); the round structure (§2.2) and the update
order switches (§2.3) belong to the algorithm that calls these.
"""
from __future__ import annotations

import math
from typing import Sequence, Union

import torch

from algorithms.errors import ConfigError

EPS = 1e-12  # clamp inside log for q and s (docs/methods/mnfl.md §2.2 pseudo-code, §8 'none' constraint)

Weights = Union[torch.Tensor, Sequence[float], None]


# ---------------------------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------------------------

def _checked(value, field: str, what: str, *, above: float, strict: bool) -> float:
    """``value`` as a finite float that is > ``above`` (``strict``) or >= it; else ConfigError(``field``)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(field, f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(v):
        raise ConfigError(field, f"{what} must be finite, got {value!r}")
    if (v <= above) if strict else (v < above):
        raise ConfigError(field, f"{what} must be {'>' if strict else '>='} {above:g}, got {value!r}")
    return v


def check_rho(rho) -> float:
    """ρ ≥ 0 (Eq. 4; ρ = 0 is the no-regulariser ablation of docs/methods/mnfl.md §9). Raises
    ConfigError('algorithm.rho')."""
    return _checked(rho, "algorithm.rho", "rho (pull of c toward 1/N, Eq. 4)", above=0, strict=False)


def check_coefficient_lr(lr) -> float:
    """η3 > 0 (Eq. 7). Raises ConfigError('algorithm.coefficient_lr')."""
    return _checked(lr, "algorithm.coefficient_lr", "coefficient_lr (eta3, Eq. 7)", above=0, strict=True)


def check_lam(lam) -> float:
    """λ ≥ 0 (Eqs. 2, 7; docs/methods/mnfl.md §1 asks λ > 0, 0 is allowed as a penalty-only ablation).
    ConfigError('algorithm.lam')."""
    return _checked(lam, "algorithm.lam", "lam (weight of the KL term, Eqs. 2, 7)", above=0, strict=False)


def _check_c(c, name: str = "c") -> torch.Tensor:
    if not isinstance(c, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(c).__name__}")
    if c.dim() != 2 or c.shape[0] != c.shape[1] or c.shape[0] < 1:
        raise ValueError(f"{name} must be a square N×N matrix with N >= 1, got shape {tuple(c.shape)}")
    if not c.dtype.is_floating_point:
        raise ValueError(f"{name} must be a floating-point tensor, got {c.dtype}")
    return c


def _check_soft(c: torch.Tensor, soft_predictions, name: str = "soft_predictions") -> torch.Tensor:
    if not isinstance(soft_predictions, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(soft_predictions).__name__}")
    s = soft_predictions
    if s.dim() != 3:
        raise ValueError(f"{name} must have shape [N, M, C] (clients, public samples, classes), "
                         f"got {tuple(s.shape)}")
    if s.shape[0] != c.shape[0]:
        raise ValueError(f"{name} has {s.shape[0]} clients along dim 0 but c is {c.shape[0]}×{c.shape[1]}")
    if s.shape[1] < 1 or s.shape[2] < 1:
        raise ValueError(f"{name} needs at least one public sample and one class, got {tuple(s.shape)}")
    if not s.dtype.is_floating_point:
        raise ValueError(f"{name} must be a floating-point tensor, got {s.dtype}")
    return s.to(c.dtype)


def _client_weights(c: torch.Tensor, client_weights: Weights) -> torch.Tensor:
    """p_n = D_n / D: sizes (or any non-negative weights) normalised to sum 1; uniform 1/N when None."""
    n = c.shape[0]
    if client_weights is None:
        return torch.full((n,), 1.0 / n, dtype=c.dtype, device=c.device)
    p = torch.as_tensor(client_weights, dtype=c.dtype, device=c.device)
    if p.shape != (n,):
        raise ValueError(f"client_weights must have shape [{n}] (one D_n per client), got {tuple(p.shape)}")
    if not torch.isfinite(p).all() or (p < 0).any() or float(p.sum()) <= 0:
        raise ValueError("client_weights must be finite, non-negative and not all zero")
    return p / p.sum()


# ---------------------------------------------------------------------------------------------------------------
# initialisation, projection, targets
# ---------------------------------------------------------------------------------------------------------------

def uniform_coefficients(n: int, dtype: torch.dtype = torch.float32,
                         device: Union[str, torch.device, None] = None) -> torch.Tensor:
    """c_0 = (1/N)·𝟙, N×N (docs/methods/mnfl.md §3 'c_0', §10 #11). Every column (and row) sums to 1.

    This is also the minimiser of the regulariser ρ‖c − 1/N‖²_F of Eq. 4.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1 (number of clients), got {n!r}")
    return torch.full((n, n), 1.0 / n, dtype=dtype, device=device)


def project_columns_to_simplex(c: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of every column of ``c`` onto the probability simplex {x ≥ 0, Σ x = 1}.

    docs/methods/mnfl.md §8 / §10 #12 (default ``c_constraint='simplex'``). Exact sort-based algorithm
    (Held, Wolfe & Crowder 1974; Duchi et al. 2008): for a column v sorted descending into u, let
    ρ* = max{j : u_j − (Σ_{i≤j} u_i − 1)/j > 0}, θ = (Σ_{i≤ρ*} u_i − 1)/ρ*; the projection is max(v − θ, 0).
    Accepts any [K, N] matrix (each of the N columns of length K is projected); returns a new tensor.
    """
    if not isinstance(c, torch.Tensor) or c.dim() != 2 or c.shape[0] < 1:
        raise ValueError(f"c must be a 2-D tensor with at least one row, got "
                         f"{tuple(c.shape) if isinstance(c, torch.Tensor) else type(c).__name__}")
    if not c.dtype.is_floating_point:
        raise ValueError(f"c must be a floating-point tensor, got {c.dtype}")
    if not torch.isfinite(c).all():
        raise ValueError("c contains NaN or inf; cannot project onto the simplex")
    k = c.shape[0]
    u, _ = torch.sort(c, dim=0, descending=True)
    css = torch.cumsum(u, dim=0) - 1.0
    j = torch.arange(1, k + 1, dtype=c.dtype, device=c.device).unsqueeze(1)
    cond = (u - css / j) > 0                          # true for a prefix of the sorted entries; j = 1 always true
    r = cond.to(torch.int64).sum(dim=0, keepdim=True)  # ρ*, ≥ 1
    theta = css.gather(0, r - 1) / r.to(c.dtype)
    return torch.clamp(c - theta, min=0.0)


def personalised_targets(c: torch.Tensor, soft_predictions: torch.Tensor) -> torch.Tensor:
    """Every client's distillation target Q[n] = Σ_m c[m, n] · s(w^m, ·)  (Eq. 2's teacher, Eq. 6; §10 #6).

    ``soft_predictions`` S is [N, M, C]: client m's tempered softmax on the M public samples. Returns Q,
    [N, M, C], where Q[n] is the target sent to client n only (§2.2 step C). Q[n] is a distribution when
    column n of c lies on the simplex; no renormalisation is done here. The result carries no gradient
    requirement of its own (the teacher is a constant target for Eq. 6; detach if c requires grad).
    """
    _check_c(c)
    s = _check_soft(c, soft_predictions)
    return torch.einsum("mn,mbk->nbk", c, s)


# ---------------------------------------------------------------------------------------------------------------
# Eq. 7: objective, analytic gradient, step
# ---------------------------------------------------------------------------------------------------------------

def _per_client_kl(q: torch.Tensor, s: torch.Tensor, eps: float) -> torch.Tensor:
    """mean_b Σ_k q log(max(q, eps)/max(s, eps)), per client: [N]."""
    return (q * (q.clamp_min(eps).log() - s.clamp_min(eps).log())).sum(-1).mean(-1)


def coefficient_objective(c: torch.Tensor, soft_predictions: torch.Tensor, client_weights: Weights = None,
                          lam: float = 1.0, rho: float = 0.7, eps: float = EPS) -> torch.Tensor:
    """J(c) = λ Σ_n p_n · mean_b KL(q_n ‖ s_n) + ρ ‖c − 1/N‖²_F  (Eq. 4 with w fixed; the objective of Eq. 7).

    ``soft_predictions`` S [N, M, C] are the (fixed) post-update predictions s(w^{m,*}, ξ_r); ``client_weights``
    are D_n (normalised to p_n = D_n/D; uniform when None). q is clamped at ``eps`` inside the log only (§8).
    Differentiable in c (autograd works); returns a 0-dim tensor.
    """
    _check_c(c)
    s = _check_soft(c, soft_predictions)
    lam, rho = check_lam(lam), check_rho(rho)
    p = _client_weights(c, client_weights)
    q = torch.einsum("mn,mbk->nbk", c, s)
    n = c.shape[0]
    return lam * (p * _per_client_kl(q, s, eps)).sum() + rho * ((c - 1.0 / n) ** 2).sum()


def coefficient_gradient(c: torch.Tensor, soft_predictions: torch.Tensor, client_weights: Weights = None,
                         lam: float = 1.0, rho: float = 0.7, eps: float = EPS,
                         include_penalty: bool = True) -> torch.Tensor:
    """Analytic ∂J/∂c, N×N (docs/methods/mnfl.md §2.1 'Closed-form gradient'):

        ∂J/∂c[m, n] = λ p_n · mean_b Σ_k s_{m,k}(x̂_b) · (log q̃_{n,k} − log s̃_{n,k} + 1[q_{n,k} > eps])
                      + 2ρ (c[m, n] − 1/N),

    with q̃ = max(q, eps), s̃ = max(s, eps): the exact derivative of :func:`coefficient_objective` including its
    clamp (the indicator is the "+1" of §2.1's formula; on the simplex it only shifts each column by a
    constant, which the projection removes). Column n depends only on client n's term. With
    ``include_penalty=False`` the 2ρ(c − 1/N) part is left out (used by the proximal step).
    """
    _check_c(c)
    s = _check_soft(c, soft_predictions)
    lam, rho = check_lam(lam), check_rho(rho)
    p = _client_weights(c, client_weights)
    c_ = c.detach()
    q = torch.einsum("mn,mbk->nbk", c_, s)
    a = q.clamp_min(eps).log() - s.clamp_min(eps).log() + (q > eps).to(c.dtype)   # [N(student), M, C]
    g = torch.einsum("mbk,nbk->mn", s, a) / s.shape[1]                            # mean over samples
    g = lam * g * p.unsqueeze(0)
    if include_penalty:
        g = g + 2.0 * rho * (c_ - 1.0 / c.shape[0])
    return g


def coefficient_step(c: torch.Tensor, soft_predictions: torch.Tensor, client_weights: Weights = None, *,
                     lr: float = 0.01, lam: float = 1.0, rho: float = 0.7, project: bool = True,
                     penalty: str = "explicit", eps: float = EPS) -> torch.Tensor:
    """One server c-step (Eq. 7) on a public mini-batch, then the simplex switch; returns a new tensor.

    ``penalty='explicit'`` (default, Eq. 7 as written):
        c' = c − η3·λ Σ_n p_n ∇_c KL_n − 2η3ρ(c − 1/N).
    The penalty part multiplies (c − 1/N) by (1 − 2η3ρ), so it is stable only for η3·ρ < 1; larger values raise
    ConfigError('algorithm.coefficient_lr') instead of oscillating.
    ``penalty='proximal'``: the exact proximal step of ρ‖c − 1/N‖², c' = (c − η3·g_KL + 2η3ρ/N) / (1 + 2η3ρ),
    equal to Eq. 7 to first order in η3 and stable for any ρ (ρ → ∞ gives c' = 1/N exactly). Not in
    docs/methods/mnfl.md.
    ``project=True`` (``c_constraint='simplex'``, the default of §8/§10 #12) projects every column onto the
    simplex afterwards; ``project=False`` is the faithful unconstrained ablation.
    """
    _check_c(c)
    lr = check_coefficient_lr(lr)
    rho = check_rho(rho)
    if penalty not in ("explicit", "proximal"):
        raise ConfigError("algorithm.coefficient_penalty",
                          f"must be 'explicit' (Eq. 7) or 'proximal', got {penalty!r}")
    if penalty == "explicit" and lr * rho >= 1.0:
        raise ConfigError("algorithm.coefficient_lr",
                          f"coefficient_lr * rho = {lr * rho:g} >= 1 makes the explicit Eq. 7 step unstable "
                          "(the penalty multiplies c - 1/N by 1 - 2*eta3*rho); lower coefficient_lr or use the "
                          "proximal penalty step")
    with torch.no_grad():
        n = c.shape[0]
        g = coefficient_gradient(c, soft_predictions, client_weights, lam=lam, rho=rho, eps=eps,
                                 include_penalty=penalty == "explicit")
        c_new = c.detach() - lr * g
        if penalty == "proximal":
            c_new = (c_new + 2.0 * lr * rho / n) / (1.0 + 2.0 * lr * rho)
        if project:
            c_new = project_columns_to_simplex(c_new)
    return c_new


# ---------------------------------------------------------------------------------------------------------------
# rule-based coefficients of the baselines (docs/methods/mnfl.md §5): Sim-pFL, TopK-pFL
# ---------------------------------------------------------------------------------------------------------------

SIMILARITY_WEIGHTINGS = ("clipped", "minmax")
TOPK_SELECTIONS = ("topk", "median")


def check_topk(k) -> int:
    """K ≥ 1 clients kept by TopK-pFL (docs/methods/mnfl.md §3: 5). Raises ConfigError('algorithm.topk')."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError("algorithm.topk", "topk (clients kept per student, docs/methods/mnfl.md §3) must be an "
                                            "integer "
                                            f">= 1, got {k!r}")
    return k


def _check_predictions(soft_predictions) -> torch.Tensor:
    if not isinstance(soft_predictions, torch.Tensor):
        raise ValueError(f"soft_predictions must be a torch.Tensor, got {type(soft_predictions).__name__}")
    s = soft_predictions
    if s.dim() != 3 or s.shape[0] < 1 or s.shape[1] < 1 or s.shape[2] < 1:
        raise ValueError(f"soft_predictions must have shape [N, M, C] (clients, public samples, classes) with "
                         f"N, M, C >= 1, got {tuple(s.shape)}")
    if not s.dtype.is_floating_point:
        raise ValueError(f"soft_predictions must be a floating-point tensor, got {s.dtype}")
    return s


def cosine_similarities(soft_predictions: torch.Tensor) -> torch.Tensor:
    """cos[m, n] = ⟨vec s_m, vec s_n⟩ / (‖vec s_m‖ ‖vec s_n‖), N×N, symmetric, diagonal exactly 1.

    ``soft_predictions`` S [N, M, C] are the clients' tempered soft predictions on the round's public subset;
    each client's M×C matrix is flattened (docs/methods/mnfl.md §5, §10 #28: similarity of soft predictions, not of
    parameters; §11: the reference code's ``get_cosdist`` on ``raw_logits[i].flatten()``, self = 1). A client
    whose predictions are all zero has cosine 0 with every other client. Returned in ``S``'s dtype, clamped to
    [−1, 1] (probabilities give [0, 1]).
    """
    s = _check_predictions(soft_predictions)
    flat = s.reshape(s.shape[0], -1)
    norms = flat.norm(dim=1)
    denom = (norms.unsqueeze(1) * norms.unsqueeze(0)).clamp_min(torch.finfo(s.dtype).tiny)
    cos = (flat @ flat.T) / denom
    cos = (0.5 * (cos + cos.T)).clamp(-1.0, 1.0)   # exactly symmetric (the matmul is only up to rounding)
    cos.fill_diagonal_(1.0)
    return cos


def similarity_coefficients(soft_predictions: torch.Tensor, weighting: str = "clipped") -> torch.Tensor:
    """Sim-pFL's c (docs/methods/mnfl.md §5), columns on the simplex, from :func:`cosine_similarities`:

    - ``'clipped'`` ([REC]): c[m, n] = max(cos[m, n], 0) / Σ_m' max(cos[m', n], 0). The student itself is a
      teacher with cos = 1, so every column sum is ≥ 1 and no column is empty.
    - ``'minmax'`` ([EXT], the reference code's ``KT-pFL_cos``): c[m, n] ∝ cos[m, n] − min_m' cos[m', n] (the
      min over the student's teachers, self included); the least similar teacher gets weight 0. A column whose
      cosines are all equal (e.g. N = 1, or identical predictions) has nothing to normalise and is uniform.
    """
    if weighting not in SIMILARITY_WEIGHTINGS:
        raise ValueError(f"unknown similarity weighting {weighting!r}; allowed: {', '.join(SIMILARITY_WEIGHTINGS)}")
    cos = cosine_similarities(soft_predictions)
    if weighting == "clipped":
        w = cos.clamp_min(0.0)
    else:
        w = cos - cos.min(dim=0, keepdim=True).values
    total = w.sum(dim=0, keepdim=True)
    uniform = torch.full_like(w, 1.0 / w.shape[0])
    return torch.where(total > 0, w / total.clamp_min(torch.finfo(w.dtype).tiny), uniform)


def topk_coefficients(soft_predictions: torch.Tensor, k: int = 5, selection: str = "topk") -> torch.Tensor:
    """TopK-pFL's c (docs/methods/mnfl.md §3, §5), columns on the simplex: a uniform average over a set of teachers.

    - ``'topk'`` ([REC]): for student n, the K teachers with the highest cos[m, n], the student itself always
      first (cos = 1; it is kept even if another client's cosine ties at 1), other ties broken by the lower client
      index; K ≥ N keeps everyone (FedMD's uniform average). c[m, n] = 1/min(K, N) on the kept set.
    - ``'median'`` ([EXT], the reference code's ``KT-pFL_topk``): with N ≥ 2 the threshold is the ⌊N/2⌋-th
      smallest cosine of column n (self included), and the teachers whose cosine is strictly above it are kept
      (about N/2 of them), plus the student itself. ``k`` is not used.
    """
    if selection not in TOPK_SELECTIONS:
        raise ValueError(f"unknown top-K selection {selection!r}; allowed: {', '.join(TOPK_SELECTIONS)}")
    cos = cosine_similarities(soft_predictions)
    n = cos.shape[0]
    eye = torch.eye(n, dtype=torch.bool, device=cos.device)
    if selection == "topk":
        k = check_topk(k)
        score = cos.masked_fill(eye, float("inf"))                      # self first
        order = torch.sort(score, dim=0, descending=True, stable=True).indices
        keep = torch.zeros_like(eye)
        keep.scatter_(0, order[:min(k, n)], True)
    else:
        if n >= 2:
            threshold = torch.sort(cos, dim=0).values[n // 2 - 1]      # the ⌊N/2⌋-th smallest of each column
            keep = (cos > threshold.unsqueeze(0)) | eye
        else:
            keep = eye.clone()
    w = keep.to(cos.dtype)
    return w / w.sum(dim=0, keepdim=True)


__all__ = ["EPS", "SIMILARITY_WEIGHTINGS", "TOPK_SELECTIONS", "check_coefficient_lr", "check_lam", "check_rho",
           "check_topk", "coefficient_gradient", "coefficient_objective", "coefficient_step",
           "cosine_similarities", "personalised_targets", "project_columns_to_simplex", "similarity_coefficients",
           "topk_coefficients", "uniform_coefficients"]
