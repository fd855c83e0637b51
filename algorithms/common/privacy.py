"""Differential privacy for client updates: norm clipping, the Gaussian mechanism, a postprocessor chain.

Pure PyTorch + stdlib. The pieces:

- :func:`gaussian_sigma`: the classic Gaussian mechanism (Dwork & Roth 2014, Thm A.1),
  σ = Δ₂ · sqrt(2 ln(1.25/δ)) / ε, with ε = inf meaning "no privacy" (σ = 0).
- :func:`clip_by_norm`: scale a dict of tensors jointly so that ‖concat(all entries)‖₂ ≤ C.
- :class:`GaussianMechanism`: (ε, δ, Δ₂) → σ, and ``privatize`` adding σ·N(0, I) drawn only from a given
  ``torch.Generator``.
- A postprocessor chain in the spirit of pfl-research: :class:`Postprocessor` (a Protocol),
  :class:`NormClip`, :class:`GaussianNoise` and :func:`apply_postprocessors`. Typical DP use::

      chain = [NormClip(C), GaussianNoise(GaussianMechanism(epsilon, delta, sensitivity=C))]
      private, metrics = apply_postprocessors(chain, update, generator)

Reproducibility: noise is drawn as a *standard* normal z ~ N(0, I) (:func:`standard_noise`, keys in sorted
order, on the generator's device) and only then scaled, x̃ = x + σ·z. The draws therefore do not depend on
ε, δ or Δ: for one generator seed, the noise added under ε₁ and under ε₂ differ only by the factor σ₁/σ₂.
A sweep over ε with a fixed seed hence redraws only the noise *scale*, never the noise itself.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import torch

__all__ = [
    "GaussianMechanism",
    "GaussianNoise",
    "NormClip",
    "Postprocessor",
    "apply_postprocessors",
    "clip_by_norm",
    "gaussian_sigma",
    "joint_norm",
    "standard_noise",
]

TensorDict = dict[str, torch.Tensor]


def _validate_epsilon(epsilon: float) -> None:
    if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool) or not epsilon > 0:
        raise ValueError(f"epsilon: must be > 0 (or inf for no privacy), got {epsilon!r}")


def _validate_delta(delta: float) -> None:
    if not isinstance(delta, (int, float)) or isinstance(delta, bool) or not 0 < delta < 1:
        raise ValueError(f"delta: must be in the open interval (0, 1), got {delta!r}")


def _validate_sensitivity(sensitivity: float) -> None:
    if (not isinstance(sensitivity, (int, float)) or isinstance(sensitivity, bool)
            or not math.isfinite(sensitivity) or sensitivity < 0):
        raise ValueError(f"sensitivity: must be finite and >= 0, got {sensitivity!r}")


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Noise std of the classic Gaussian mechanism (Dwork & Roth 2014, Thm A.1).

    σ = Δ₂ · sqrt(2 ln(1.25/δ)) / ε, where Δ₂ is the L2 sensitivity of the released quantity. Adding
    N(0, σ²I) gives (ε, δ)-DP (the theorem is stated for ε < 1; larger ε is accepted, as is common practice).
    ``epsilon = math.inf`` means non-private and gives σ = 0.

    With Δ₂ = 2/(λN) (L2-regularised logistic regression on N samples with regulariser λ, FedAUX §3.2) this
    is σ² = 8 ln(1.25/δ) / (ε² λ² N²).

    Raises ValueError unless ε > 0 (inf allowed), 0 < δ < 1, and 0 ≤ Δ₂ < inf.
    """
    _validate_epsilon(epsilon)
    _validate_delta(delta)
    _validate_sensitivity(sensitivity)
    if math.isinf(epsilon):
        return 0.0
    return float(sensitivity) * math.sqrt(2.0 * math.log(1.25 / delta)) / float(epsilon)


def joint_norm(tensors: TensorDict) -> float:
    """‖concat(all entries)‖₂ = sqrt(Σ_k ‖t_k‖₂²), accumulated in float64 (0.0 if empty)."""
    total = 0.0
    for t in tensors.values():
        total += float(t.detach().to(torch.float64).pow(2).sum())
    return math.sqrt(total)


def clip_by_norm(tensors: TensorDict, max_norm: float) -> tuple[TensorDict, float]:
    """Scale all tensors together so their joint L2 norm is at most ``max_norm``.

    With n = ‖concat(tensors)‖₂ (see :func:`joint_norm`), every tensor is multiplied by min(1, C/n): the
    direction is kept and the norm is never scaled up. Returns ``(clipped, n)``; the clipped tensors are new
    tensors, the inputs are not modified. ``max_norm = inf`` disables clipping.

    Raises ValueError unless max_norm > 0.
    """
    if not isinstance(max_norm, (int, float)) or isinstance(max_norm, bool) or not max_norm > 0:
        raise ValueError(f"max_norm: must be > 0, got {max_norm!r}")
    norm = joint_norm(tensors)
    if norm > max_norm:
        scale = max_norm / norm
        return {k: t.detach() * scale for k, t in tensors.items()}, norm
    return {k: t.detach().clone() for k, t in tensors.items()}, norm


def standard_noise(tensors: TensorDict, generator: torch.Generator) -> TensorDict:
    """z_k ~ N(0, I) shaped like each tensor, drawn only from ``generator``, keys in sorted order.

    The draws are made on the generator's device in the tensor's dtype and then moved to the tensor's
    device, so for a given seed they do not depend on where the tensors live. They also do not depend on any
    privacy parameter; callers scale them by σ. Raises ValueError for non-floating-point tensors.
    """
    noise: TensorDict = {}
    for key in sorted(tensors):
        t = tensors[key]
        if not t.is_floating_point():
            raise ValueError(f"tensors: entry {key!r} must be floating point to receive noise, got {t.dtype}")
        z = torch.randn(t.shape, generator=generator, dtype=t.dtype, device=generator.device)
        noise[key] = z.to(t.device)
    return noise


@dataclass(frozen=True)
class GaussianMechanism:
    """The Gaussian mechanism with parameters (ε, δ, Δ₂); σ from :func:`gaussian_sigma`.

    ``privatize`` returns x + σ·z with z from :func:`standard_noise`. Because z does not depend on
    (ε, δ, Δ₂), two mechanisms fed the same generator seed add noise that differs only by σ₁/σ₂: sweeping ε
    at a fixed seed changes only the noise scale.
    """

    epsilon: float
    delta: float
    sensitivity: float

    def __post_init__(self) -> None:
        gaussian_sigma(self.epsilon, self.delta, self.sensitivity)  # validates, raises ValueError

    @property
    def sigma(self) -> float:
        """σ = Δ₂ · sqrt(2 ln(1.25/δ)) / ε (0 for ε = inf)."""
        return gaussian_sigma(self.epsilon, self.delta, self.sensitivity)

    def privatize(self, tensors: TensorDict, generator: torch.Generator) -> TensorDict:
        """x̃_k = x_k + σ·z_k, z ~ N(0, I) from ``generator`` only (sorted keys); new tensors.

        When σ = 0 (ε = inf or Δ₂ = 0) returns copies of the inputs and draws nothing, so the generator's
        state is unchanged.
        """
        sigma = self.sigma
        if sigma == 0.0:
            return {k: t.detach().clone() for k, t in tensors.items()}
        noise = standard_noise(tensors, generator)
        return {k: t.detach() + sigma * noise[k] for k, t in tensors.items()}

    def metrics(self) -> dict[str, float]:
        """``{"privacy_epsilon": ε, "privacy_delta": δ, "privacy_sigma": σ}`` (ε may be inf)."""
        return {"privacy_epsilon": float(self.epsilon), "privacy_delta": float(self.delta),
                "privacy_sigma": self.sigma}


@runtime_checkable
class Postprocessor(Protocol):
    """One step applied to a client update: returns new tensors and the metrics it wants reported."""

    def apply(self, tensors: TensorDict, generator: torch.Generator) -> tuple[TensorDict, dict[str, float]]:
        ...


@dataclass(frozen=True)
class NormClip:
    """Clip the update's joint L2 norm to ``max_norm`` (:func:`clip_by_norm`).

    Metrics: ``update_norm`` (the norm before clipping) and ``clipped`` (1.0 if it was scaled down, else 0.0).
    """

    max_norm: float

    def __post_init__(self) -> None:
        if not isinstance(self.max_norm, (int, float)) or isinstance(self.max_norm, bool) or not self.max_norm > 0:
            raise ValueError(f"max_norm: must be > 0, got {self.max_norm!r}")

    def apply(self, tensors: TensorDict, generator: torch.Generator) -> tuple[TensorDict, dict[str, float]]:
        clipped, norm = clip_by_norm(tensors, self.max_norm)
        return clipped, {"update_norm": norm, "clipped": 1.0 if norm > self.max_norm else 0.0}


@dataclass(frozen=True)
class GaussianNoise:
    """Add Gaussian-mechanism noise (:meth:`GaussianMechanism.privatize`); metrics = ``mechanism.metrics()``."""

    mechanism: GaussianMechanism

    def apply(self, tensors: TensorDict, generator: torch.Generator) -> tuple[TensorDict, dict[str, float]]:
        return self.mechanism.privatize(tensors, generator), self.mechanism.metrics()


def apply_postprocessors(chain: Sequence[Postprocessor], tensors: TensorDict,
                         generator: torch.Generator) -> tuple[TensorDict, dict[str, float]]:
    """Run ``chain`` in order, each step on the previous step's output; merge their metrics.

    Later steps win on a metric name clash. An empty chain returns copies of the inputs and no metrics.
    """
    out: TensorDict = {k: t.detach().clone() for k, t in tensors.items()}
    metrics: dict[str, float] = {}
    for step in chain:
        out, step_metrics = step.apply(out, generator)
        metrics.update(step_metrics)
    return out, metrics
