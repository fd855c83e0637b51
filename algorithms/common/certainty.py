"""FedAUX certainty scoring (Sattler et al., FedAUX §3.2, Eqs. 7, 9–11; docs/methods/fedaux.md §3.2, §4, §11).

Each client i, once, in the preparation phase (P2–P3), and the server afterwards (P4, T):

1. :func:`normalisation_scale` / :func:`public_normalisation_scale` and :func:`normalise_features`: map the
   frozen h_0 features into the unit ball, h̃ = h/γ (‖h̃‖ ≤ 1 is a premise of Theorem 1).
2. :func:`fit_scoring_weights`: the ℓ2-regularised logistic regression of Eqs. (9)–(10), local data (t = +1)
   against the public negatives D⁻ (t = −1), mean loss, **no bias**, solved to convergence in float64.
   :func:`fit_scoring_weights_batched` solves several clients.
3. :func:`privatise_scoring_weights`: ŵ_i = w_i* + N(0, σ²I) with the Gaussian mechanism of
   :mod:`algorithms.common.privacy` at sensitivity Δ₂ = 2/(λN) (Theorem 1, :func:`scoring_sensitivity`),
   i.e. σ² = 8 ln(1.25/δ)/(ε²λ²N²), N = |D_i| + |D⁻|. Released once, so scoring costs exactly (ε, δ);
   everything computed from ŵ_i afterwards is post-processing.
4. :func:`certainty_scores`: s_i(x) = sigmoid(⟨ŵ_i, h_0(x)/γ_i⟩) + ξ on D_distill (Eq. 11).
5. :func:`certainty_weights`: per-sample weights s_i(x)/Σ_j s_j(x) over the selected clients (Eq. 7); the
   teacher is then softmax(Σ_i w_i(x) f_i(x)) on the client **logits**.

Caching (§12): w_i* depends on (features, λ) only, so it is solved once per (split, α, n, λ,
feature_norm) and cached; a sweep over (ε, δ) only redraws the noise (the standard-normal draw does not even
depend on ε, δ: see :mod:`algorithms.common.privacy`), and the score matrix [n, |D_distill|] is computed once
per configuration.

Invalid λ, ε, δ raise :class:`algorithms.errors.ConfigError` naming the config key (``algorithm.lam``,
``algorithm.epsilon``, ``algorithm.delta``); malformed tensors (wrong rank, mismatched feature dimension)
are programming errors and raise a plain ``ValueError`` naming the argument.

Pure PyTorch + numpy + scipy.
"""
from __future__ import annotations

import contextlib
import math
from typing import ContextManager, Sequence

import numpy as np
import torch

from algorithms.common.privacy import GaussianMechanism
from algorithms.errors import ConfigError

__all__ = [
    "DEFAULT_XI",
    "FEATURE_NORM_MODES",
    "certainty_scores",
    "certainty_weights",
    "fit_scoring_weights",
    "fit_scoring_weights_batched",
    "normalisation_scale",
    "normalise_features",
    "privatise_scoring_weights",
    "public_normalisation_scale",
    "scoring_objective",
    "scoring_sensitivity",
    "scoring_sigma",
    "validate_delta",
    "validate_epsilon",
    "validate_lam",
]

DEFAULT_XI = 1e-8
"""ξ of Eq. (11): added to every score so that Σ_j s_j(x) > 0 (fixed at 1e-8 in the paper)."""

FEATURE_NORM_MODES = ("public_clip", "paper_max")
"""How γ is chosen (docs/methods/fedaux.md §11 item 2): ``public_clip`` (γ from D⁻ only, per-sample clipping;
the DP-sound default, [rec]) or ``paper_max`` (γ_i = max norm over D_i ∪ D⁻, the paper's choice, for
reproduction)."""

_NORM_SLACK = 1e-6  # relative slack on ‖h̃‖ ≤ 1 for float32 rounding of h/γ

_BLAS_CONTROLLER: object = None


def _single_threaded_blas() -> ContextManager:
    """Limit BLAS to one thread while solving (threadpoolctl, installed with scikit-learn; no-op without it).

    The scoring problems are tiny (H ≤ ~800); multi-threaded OpenBLAS on them only spins, and on a busy
    machine (several Ray trials per node) L-BFGS-B then runs up to ~100× slower.
    """
    global _BLAS_CONTROLLER
    if _BLAS_CONTROLLER is None:
        try:
            from threadpoolctl import ThreadpoolController
            _BLAS_CONTROLLER = ThreadpoolController()
        except Exception:  # optional speed-up only
            _BLAS_CONTROLLER = False
    if _BLAS_CONTROLLER is False:
        return contextlib.nullcontext()
    return _BLAS_CONTROLLER.limit(limits=1, user_api="blas")


# ---------------------------------------------------------------------------------------------------------
# validation


def _is_real(x: object) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def validate_lam(lam: float) -> float:
    """λ of Eq. (9): must be a finite number > 0. Raises ConfigError(``algorithm.lam``) otherwise."""
    if not _is_real(lam) or not math.isfinite(float(lam)) or not float(lam) > 0:
        raise ConfigError("algorithm.lam",
                          f"the regularisation strength λ must be a finite number > 0, got {lam!r}")
    return float(lam)


def validate_epsilon(epsilon: float) -> float:
    """ε: must be > 0, or ``math.inf`` for the non-private arm. Raises ConfigError(``algorithm.epsilon``)."""
    if not _is_real(epsilon) or math.isnan(float(epsilon)) or not float(epsilon) > 0:
        raise ConfigError("algorithm.epsilon",
                          f"the privacy budget ε must be a number > 0 (or inf for no privacy), got {epsilon!r}")
    return float(epsilon)


def validate_delta(delta: float) -> float:
    """δ: must lie in the open interval (0, 1). Raises ConfigError(``algorithm.delta``) otherwise."""
    if not _is_real(delta) or not 0 < float(delta) < 1:
        raise ConfigError("algorithm.delta",
                          f"the privacy parameter δ must be in the open interval (0, 1), got {delta!r}")
    return float(delta)


def _validate_count(n: int) -> int:
    if not isinstance(n, (int, np.integer)) or isinstance(n, (bool, np.bool_)) or n < 1:
        raise ValueError(f"n: the number of scoring samples N = |D_i| + |D⁻| must be an integer >= 1, got {n!r}")
    return int(n)


def _validate_gamma(gamma: float) -> float:
    if not _is_real(gamma) or not math.isfinite(float(gamma)) or not float(gamma) > 0:
        raise ValueError(f"gamma: the feature normalisation scale γ must be finite and > 0, got {gamma!r}")
    return float(gamma)


def _check_matrix(name: str, x: torch.Tensor, dim: int | None = None) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"{name}: expected a 2-D tensor [samples, H], got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name}: expected floating-point features, got {x.dtype}")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(f"{name}: feature dimension {x.shape[1]} does not match H = {dim}")


def _check_vector(name: str, w: torch.Tensor) -> None:
    if not isinstance(w, torch.Tensor) or w.dim() != 1 or not w.is_floating_point():
        raise ValueError(f"{name}: expected a 1-D floating-point tensor [H], got "
                         f"{(tuple(w.shape), w.dtype) if isinstance(w, torch.Tensor) else type(w).__name__}")


# ---------------------------------------------------------------------------------------------------------
# (P2) feature normalisation


def normalisation_scale(features_private: torch.Tensor, features_negative: torch.Tensor) -> float:
    """γ_i = max_{x ∈ D_i ∪ D⁻} ‖h_0(x)‖₂, the paper's scale (§3.2, h̃_0 = h_0/γ_i so that ‖h̃_0‖ ≤ 1).

    Args: ``features_private`` [n_i, H] = h_0(D_i); ``features_negative`` [m, H] = h_0(D⁻).

    **What is private about γ_i (docs/methods/fedaux.md §11 item 2).** γ_i is a max over the client's *private*
    features, it is sent to the server in the clear next to ŵ_i (the server needs it to score, Alg. 1), and it
    is **not** covered by the (ε, δ) guarantee: it can reveal the norm of the client's largest feature vector,
    and replacing one private sample can change γ_i and with it *every* normalised feature h̃, so Theorem 1's
    premise (all features fixed except the replaced one) fails and neither γ_i nor the released ŵ_i is
    (ε, δ)-DP under this map.

    **Our choice (the method page's [rec]).** The default is a data-independent map that guarantees ‖h̃‖ ≤ 1:
    ``feature_norm="public_clip"``: γ from the public negatives only (:func:`public_normalisation_scale`)
    and per-sample clipping h̃ = h/max(γ, ‖h‖) (:func:`normalise_features` with ``clip=True``); γ is then
    public and Theorem 1 applies as stated. This function is the ``feature_norm="paper_max"`` option,
    kept to reproduce the paper; a run using it should log that mode (its privacy claim covers ŵ_i only
    conditionally on γ_i).
    """
    _check_matrix("features_private", features_private)
    _check_matrix("features_negative", features_negative, features_private.shape[1])
    if features_private.shape[0] + features_negative.shape[0] == 0:
        raise ValueError("features_private, features_negative: both are empty, γ_i is undefined")
    norms = torch.cat([features_private.detach().to(torch.float64).norm(dim=1),
                       features_negative.detach().to(torch.float64).norm(dim=1)])
    gamma = float(norms.max())
    if not math.isfinite(gamma) or gamma <= 0:
        raise ValueError(f"features_private, features_negative: the largest feature norm must be finite and > 0, "
                         f"got {gamma!r}")
    return gamma


def public_normalisation_scale(features_negative: torch.Tensor) -> float:
    """γ = max_{x ∈ D⁻} ‖h_0(x)‖₂, computed on the public negatives alone
    (docs/methods/fedaux.md §11 item 2 [rec]).

    Data-independent with respect to every client's private data, so it may be shared by all clients using
    the same h_0 and released freely. Use it with :func:`normalise_features` (``clip=True``): private
    features can be longer than γ and are then clipped onto the unit sphere.
    """
    _check_matrix("features_negative", features_negative)
    if features_negative.shape[0] == 0:
        raise ValueError("features_negative: empty, the public scale γ is undefined")
    gamma = float(features_negative.detach().to(torch.float64).norm(dim=1).max())
    if not math.isfinite(gamma) or gamma <= 0:
        raise ValueError(f"features_negative: the largest feature norm must be finite and > 0, got {gamma!r}")
    return gamma


def normalise_features(features: torch.Tensor, gamma: float, *, clip: bool = False) -> torch.Tensor:
    """h̃ = h/γ (§3.2), or with ``clip=True`` h̃ = h/max(γ, ‖h‖), which has ‖h̃‖ ≤ 1 for any γ > 0.

    The clipped map acts on each sample separately, so replacing one sample changes one row only (the
    premise of Theorem 1). With γ = :func:`normalisation_scale` both maps agree on D_i ∪ D⁻.
    """
    _check_matrix("features", features)
    gamma = _validate_gamma(gamma)
    if not clip:
        return features / gamma
    norms = features.norm(dim=1, keepdim=True)
    return features / torch.clamp(norms, min=gamma)


# ---------------------------------------------------------------------------------------------------------
# (P2) scoring model, Eqs. (9)–(10)


def _design(pos: torch.Tensor, neg: torch.Tensor) -> np.ndarray:
    """Rows t_x·h̃(x) in float64: +pos then −neg (the labels folded into the features)."""
    return np.concatenate([pos.detach().to("cpu", torch.float64).numpy(),
                           -neg.detach().to("cpu", torch.float64).numpy()], axis=0)


def _expit(z: np.ndarray) -> np.ndarray:
    # scipy is imported where it is first used: only fedaux fits scoring weights, and every process that imports the
    # algorithms (each actor) would otherwise pay scipy's 0.3 s import
    from scipy.special import expit

    return expit(z)


def _objective(w: np.ndarray, tx: np.ndarray, lam: float) -> tuple[float, np.ndarray]:
    z = tx @ w
    value = float(np.mean(np.logaddexp(0.0, -z))) + 0.5 * lam * float(w @ w)
    grad = -(tx.T @ _expit(-z)) / tx.shape[0] + lam * w
    return value, grad


def scoring_objective(w: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, lam: float) -> tuple[float, torch.Tensor]:
    """J(w) and ∇J(w) of Eqs. (9)–(10) in float64.

    J(w) = (1/N) Σ_{x ∈ D_i ∪ D⁻} log(1 + exp(−t_x⟨w, x⟩)) + (λ/2)‖w‖², t_x = +1 on ``pos`` (D_i) and −1 on
    ``neg`` (D⁻), N = n_i + m, no bias. (The paper prints l(z) = log(1 + e^z); that is a sign typo,
    docs/methods/fedaux.md §3.2.) ∇J(w) = −(1/N) Σ t_x·sigmoid(−t_x⟨w, x⟩)·x + λw.
    """
    lam = validate_lam(lam)
    _check_vector("w", w)
    _check_matrix("pos", pos, w.shape[0])
    _check_matrix("neg", neg, w.shape[0])
    value, grad = _objective(w.detach().to("cpu", torch.float64).numpy(), _design(pos, neg), lam)
    return value, torch.from_numpy(grad)


def _newton_polish(w: np.ndarray, tx: np.ndarray, lam: float, tol: float, steps: int = 5) -> np.ndarray:
    """A few guarded Newton steps on J (Hessian λI + (1/N) Xᵀ diag(σ'(z)) X, H×H), kept only if ‖∇J‖ drops.

    L-BFGS-B's line search can stop a little short of a 1e-10 gradient tolerance in float64; J is smooth and
    λ-strongly convex, so from there Newton converges quadratically to the exact minimiser.
    """
    _, grad = _objective(w, tx, lam)
    gnorm = float(np.max(np.abs(grad))) if grad.size else 0.0
    h = tx.shape[1]
    for _ in range(steps):
        if gnorm <= tol:
            break
        p = _expit(tx @ w)
        hess = (tx.T * (p * (1.0 - p))) @ tx / tx.shape[0] + lam * np.eye(h)
        w_new = w - np.linalg.solve(hess, grad)
        _, grad_new = _objective(w_new, tx, lam)
        gnorm_new = float(np.max(np.abs(grad_new)))
        if not gnorm_new < gnorm:
            break
        w, grad, gnorm = w_new, grad_new, gnorm_new
    return w


def fit_scoring_weights(pos: torch.Tensor, neg: torch.Tensor, lam: float, tol: float = 1e-10,
                        max_iter: int = 1000, *, check_norm: bool = True) -> torch.Tensor:
    """w_i* = argmin_w J(w), the client's scoring weights (Eqs. 9–10; see :func:`scoring_objective`).

    Args:
        pos: [n_i, H] normalised private features h̃_0(D_i) (already divided by γ_i), label t = +1.
        neg: [m, H] normalised public negatives h̃_0(D⁻), label t = −1.
        lam: λ > 0 in the paper's mean-loss units (sklearn's C would be 1/(λN),
            docs/methods/fedaux.md §11 item 3).
        tol: stopping tolerance on the ∞-norm of ∇J (L-BFGS-B's ``gtol``).
        max_iter: L-BFGS iteration cap (1000, as in the paper).
        check_norm: refuse rows with ‖x‖ > 1 (Theorem 1's premise; the privacy claim needs it).

    Solved in float64 with ``scipy.optimize.minimize(method="L-BFGS-B", jac=True)`` from w = 0; J is
    λ-strongly convex, so the minimiser is unique and then refined by at most a few Newton steps when the
    line search stopped short of ``tol`` (so the result is converged to ‖∇J‖∞ ≤ tol up to float64 rounding).
    At the optimum λw* = (1/N) Σ t_x sigmoid(−t_x⟨w*, x⟩) x, hence ‖w*‖ ≤ 1/λ when every ‖x‖ ≤ 1.

    Returns w* [H] on ``pos``'s device, in the floating dtype promoted from ``pos`` and ``neg`` (float64 for
    float64 inputs, float32 for float32 inputs).
    """
    lam = validate_lam(lam)
    _check_matrix("pos", pos)
    _check_matrix("neg", neg, pos.shape[1])
    if pos.shape[0] + neg.shape[0] == 0:
        raise ValueError("pos, neg: both are empty, the scoring objective is undefined")
    if not (_is_real(tol) and tol > 0):
        raise ValueError(f"tol: must be > 0, got {tol!r}")
    if not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter: must be an integer >= 1, got {max_iter!r}")
    tx = _design(pos, neg)
    if not np.all(np.isfinite(tx)):
        raise ValueError("pos, neg: features must be finite")
    if check_norm and tx.size:
        largest = float(np.max(np.linalg.norm(tx, axis=1)))
        if largest > 1.0 + _NORM_SLACK:
            raise ValueError(f"pos, neg: every feature must have ‖x‖ ≤ 1 (divide by γ first, "
                             f"see normalise_features); the largest norm is {largest:.6g}")
    from scipy.optimize import minimize  # see _expit

    with _single_threaded_blas():
        result = minimize(_objective, np.zeros(tx.shape[1]), args=(tx, lam), method="L-BFGS-B", jac=True,
                          options={"maxiter": max_iter, "gtol": float(tol), "ftol": 0.0, "maxcor": 20})
        w = _newton_polish(np.asarray(result.x, dtype=np.float64), tx, lam, float(tol))
    dtype = torch.promote_types(pos.dtype, neg.dtype)
    return torch.from_numpy(w).to(device=pos.device, dtype=dtype)


def fit_scoring_weights_batched(problems: Sequence[tuple[torch.Tensor, torch.Tensor]], lam: float,
                                tol: float = 1e-10, max_iter: int = 1000) -> list[torch.Tensor]:
    """w_i* for several clients: ``problems[i] = (pos_i, neg_i)``, returns ``[w_1*, …, w_K*]``.

    The clients' problems are independent, each a λ-strongly convex program with its own unique minimiser
    (they share nothing but λ, and possibly the negatives), so solving them one after the other gives
    exactly the per-client answers of :func:`fit_scoring_weights`; a loop is used (H ≤ ~800, each solve is
    milliseconds to seconds on CPU). Feature dimensions may differ between clients (architecture
    prototypes). Every result is cacheable per (features, λ)
    (docs/methods/fedaux.md §12).
    """
    lam = validate_lam(lam)
    return [fit_scoring_weights(pos, neg, lam, tol=tol, max_iter=max_iter) for pos, neg in problems]


# ---------------------------------------------------------------------------------------------------------
# (P3) differential privacy, Theorem 1 and §4


def scoring_sensitivity(lam: float, n: int) -> float:
    """Δ₂ = 2/(λN) (Theorem 1, after Chaudhuri, Monteleoni & Sarwate 2011), N = |D_i| + |D⁻|.

    The ℓ2 sensitivity of D_i ↦ w_i* under **replace-one** adjacency on D_i (N fixed, D⁻ public and fixed;
    docs/methods/fedaux.md §4 [rec], §11 item 5), valid because R = ½‖w‖² is 1-strongly convex, |l′| ≤ 1 and ‖h̃‖ ≤ 1.
    """
    return 2.0 / (validate_lam(lam) * _validate_count(n))


def scoring_sigma(lam: float, n: int, epsilon: float, delta: float) -> float:
    """σ = Δ₂·sqrt(2 ln(1.25/δ))/ε, i.e. σ² = 8 ln(1.25/δ)/(ε²λ²N²) (§4); 0 for ε = inf."""
    epsilon, delta = validate_epsilon(epsilon), validate_delta(delta)
    return GaussianMechanism(epsilon, delta, scoring_sensitivity(lam, n)).sigma


def privatise_scoring_weights(w: torch.Tensor, lam: float, n: int, epsilon: float, delta: float,
                              generator: torch.Generator) -> tuple[torch.Tensor, float]:
    """(P3) ŵ_i = w_i* + N(0, σ²I_H) with σ² = 8 ln(1.25/δ)/(ε²λ²N²); returns ``(ŵ_i, σ)``.

    Uses :class:`~algorithms.common.privacy.GaussianMechanism` with sensitivity 2/(λN)
    (:func:`scoring_sensitivity`), so the noise is a standard normal drawn **only** from ``generator`` and
    then scaled by σ: the global torch RNG is untouched, one seed gives one ŵ, and for one seed
    (ŵ − w)/σ is the same for every (ε, δ) (an ε sweep changes only the noise scale). ``epsilon = math.inf``
    is the non-private arm: σ = 0 and ŵ equals w exactly (nothing is drawn). The classic Gaussian-mechanism
    calibration is proved for ε < 1 only (docs/methods/fedaux.md §11 item 6); larger ε is accepted as in common
    practice.

    Released once per client, so the scoring step costs exactly (ε, δ) however many scores are computed.
    Raises ConfigError naming ``algorithm.lam`` / ``algorithm.epsilon`` / ``algorithm.delta``.
    """
    lam = validate_lam(lam)
    epsilon, delta = validate_epsilon(epsilon), validate_delta(delta)
    _check_vector("w", w)
    mechanism = GaussianMechanism(epsilon, delta, scoring_sensitivity(lam, n))
    w_hat = mechanism.privatize({"w": w}, generator)["w"]
    return w_hat, mechanism.sigma


# ---------------------------------------------------------------------------------------------------------
# (P4) scores, Eq. (11), and (T) weights, Eq. (7)


def certainty_scores(w_hat: torch.Tensor, features: torch.Tensor, gamma: float, xi: float = DEFAULT_XI, *,
                     clip: bool = False) -> torch.Tensor:
    """s_i(x) = sigmoid(⟨ŵ_i, h_0(x)/γ_i⟩) + ξ for every x in D_distill (Eq. 11); returns [N_distill].

    ``features`` [N_distill, H] are the frozen h_0^{R[i]} features of the distillation set, ``gamma`` the
    client's γ_i (normalised with :func:`normalise_features`; pass ``clip=True`` in the ``public_clip``
    mode so scoring uses the same map as fitting). ξ ≥ 0 (default 1e-8) keeps Σ_j s_j(x) > 0. Computed in
    the promoted dtype of ``w_hat`` and ``features``, on ``features``' device. Post-processing of ŵ_i: no
    further privacy cost.
    """
    _check_vector("w_hat", w_hat)
    _check_matrix("features", features, w_hat.shape[0])
    if not _is_real(xi) or not math.isfinite(float(xi)) or xi < 0:
        raise ValueError(f"xi: the score offset ξ must be finite and >= 0, got {xi!r}")
    dtype = torch.promote_types(w_hat.dtype, features.dtype)
    h = normalise_features(features.to(dtype), gamma, clip=clip)
    return torch.sigmoid(h @ w_hat.to(device=features.device, dtype=dtype)) + float(xi)


def certainty_weights(scores: torch.Tensor) -> torch.Tensor:
    """w_i(x) = s_i(x) / Σ_j s_j(x) over the K selected clients, per sample (Eq. 7); [K, N] → [K, N].

    The certainty-weighted teacher is then softmax(Σ_i w_i(x) f_i(x)) on the client logits f_i(x). Rows are
    clients, columns distillation samples; each column sums to 1. Scores must be finite and ≥ 0 with a
    positive sum per column (ξ > 0 guarantees it).
    """
    if not isinstance(scores, torch.Tensor) or scores.dim() != 2 or not scores.is_floating_point():
        got = ((tuple(scores.shape), scores.dtype) if isinstance(scores, torch.Tensor)
               else type(scores).__name__)
        raise ValueError(f"scores: expected a 2-D floating-point tensor [clients, samples], got {got}")
    if scores.shape[0] == 0:
        raise ValueError("scores: needs at least one client (row)")
    if not bool(torch.isfinite(scores).all()) or bool((scores < 0).any()):
        raise ValueError("scores: must be finite and >= 0")
    total = scores.sum(dim=0, keepdim=True)
    if bool((total <= 0).any()):
        raise ValueError("scores: every sample (column) needs a positive total score; use ξ > 0")
    return scores / total
