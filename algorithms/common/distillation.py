"""The one family of distillation losses, and one student-training loop, for every distillation method.

Used by FedED (docs/methods/feded.md §2.4, §2.6) and meant for FedDF, FedAUX and MNFL too. Every loss takes the
student's raw logits ``[B, C]`` and a teacher ``[B, C]`` and returns a scalar (the mean over the batch):

- ``mse_logits``: (1/(B·C)) Σ (z_S − z_T)², the student's **raw logits** regressed onto the teacher's
  probabilities (eq. 2.10 as the thesis code ran it, ``nn.MSELoss()(logits, z_T)``; §2.6, §9 item 1).
- ``mse_prob``: the same on the student's softmax probabilities (an extension, §10).
- ``ce_hard``: cross-entropy against the teacher's argmax, i.e. hard pseudo-labels (what the thesis calls
  "CE"; §2.6, §9 item 2).
- ``kl_soft``: τ²·KL(q_T ‖ q_S) with q_S = softmax(z_S/τ) (eqs. 2.8–2.9, Hinton's τ² scaling). The teacher is
  softened by :func:`soft_targets`: teacher **logits** (FedDF's averaged logits) give softmax(z_T/τ);
  teacher **probabilities** (FedED's weighted ensembles, which have no logits) give softmax(log z_T/τ)
  ∝ z_T^(1/τ), so τ = 1 targets z_T itself (normalised per sample).

Teachers that are not normalised (FedED-w1, §2.5) are used as they are by ``mse_*`` and ``ce_hard``
and normalised by ``kl_soft``. Zero teacher entries contribute 0 to the KL (0·log 0 = 0).

For logit ensembles (FedDF, FedAUX): :func:`weighted_logit_ensemble` forms the teacher logits
Σ_k ω_k(x) f_k(x) / Σ_k ω_k(x) (docs/methods/fedaux.md Eq. 4 with uniform ω, Eq. 7 with certainty scores), to be
used with ``kl_soft`` and ``teacher_kind="logits"``. :func:`logit_norm` is the single-image paper's logit
"clipping" LN_c (docs/methods/single_image.md §4.3), applied to student logits by the caller's loss. ``distill``'s
``bn_eval`` keeps BatchNorm layers in eval mode while the rest of the model trains (docs/methods/fedaux.md §11.9), and
its ``on_step`` hook sees the model after each step (validation-based checkpoint choice, single_image §4.2).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

DISTILLATION_LOSSES = ("mse_logits", "ce_hard", "kl_soft", "mse_prob")
TEACHER_KINDS = ("probs", "logits")


def mse_logits(student_logits: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean over batch and classes of (z_S − z_T)², z_S the raw logits (docs/methods/feded.md §2.6 [code])."""
    return F.mse_loss(student_logits, teacher)


def mse_prob(student_logits: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean over batch and classes of (softmax(z_S) − z_T)² (docs/methods/feded.md §10 extension)."""
    return F.mse_loss(F.softmax(student_logits, dim=1), teacher)


def ce_hard(student_logits: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against the hard pseudo-labels argmax_c z_T (docs/methods/feded.md §2.6 [code])."""
    return F.cross_entropy(student_logits, teacher.argmax(dim=1))


def soft_targets(teacher: torch.Tensor, temperature: float = 1.0, teacher_kind: str = "probs") -> torch.Tensor:
    """q_T: softmax(z_T/τ) for logits; softmax(log z_T/τ) for (possibly unnormalised) probabilities."""
    if teacher_kind == "logits":
        return F.softmax(teacher / temperature, dim=1)
    if teacher_kind != "probs":
        raise ValueError(f"unknown teacher kind {teacher_kind!r}; allowed: {', '.join(TEACHER_KINDS)}")
    return F.softmax(torch.log(teacher.clamp_min(0.0)) / temperature, dim=1)  # log 0 = -inf -> weight 0


def kl_soft(student_logits: torch.Tensor, teacher: torch.Tensor, temperature: float = 1.0,
            teacher_kind: str = "probs") -> torch.Tensor:
    """τ²·KL(q_T ‖ softmax(z_S/τ)), averaged over the batch (eqs. 2.8–2.9)."""
    q_t = soft_targets(teacher, temperature, teacher_kind).detach()
    log_q_s = F.log_softmax(student_logits / temperature, dim=1)
    kl = (torch.special.xlogy(q_t, q_t) - q_t * log_q_s).sum(dim=1)
    return kl.mean() * temperature ** 2


def logit_norm(logits: torch.Tensor, c: Optional[float]) -> torch.Tensor:
    """LN_c(z) = c·z/‖z‖₂ for rows with ‖z‖₂ > 1/c, z otherwise (docs/methods/single_image.md §4.3);
    c = None: z."""
    if c is None:
        return logits
    norm = logits.norm(dim=1, keepdim=True)
    return torch.where(norm > 1.0 / c, c * logits / norm.clamp_min(torch.finfo(logits.dtype).tiny), logits)


def weighted_logit_ensemble(logits: torch.Tensor, weights: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Σ_k ω_k(x_j) z_k(x_j) / Σ_k ω_k(x_j): the per-sample weighted mean of client logits ``[K, N, C]`` -> ``[N, C]``.

    ``weights`` ``[K, N]`` (non-negative, e.g. FedAUX's certainty scores s_k(x), docs/methods/fedaux.md Eq. 7) are
    normalised per sample over the K clients; None is the plain mean (FedDF, Eq. 4). A sample whose weights
    sum to 0 gets the plain mean. The result has ``logits``' dtype; weights are normalised in float64.
    """
    if logits.dim() != 3:
        raise ValueError(f"logits must be [K, N, C], got shape {tuple(logits.shape)}")
    if logits.shape[0] == 0:
        raise ValueError("the ensemble needs at least one member")
    if weights is None:
        return logits.mean(dim=0)
    w = torch.as_tensor(weights, dtype=torch.float64, device=logits.device)
    if w.shape != logits.shape[:2]:
        raise ValueError(f"weights must be [K, N] = {tuple(logits.shape[:2])}, got {tuple(w.shape)}")
    if bool((w < 0).any()) or not bool(torch.isfinite(w).all()):
        raise ValueError("ensemble weights must be finite and non-negative")
    total = w.sum(dim=0, keepdim=True)
    uniform = torch.full_like(w, 1.0 / w.shape[0])
    w = torch.where(total > 0, w / total.clamp_min(torch.finfo(torch.float64).tiny), uniform)
    return (w.unsqueeze(-1) * logits.to(torch.float64)).sum(dim=0).to(logits.dtype)


def distillation_loss(name: str, temperature: float = 1.0,
                      teacher_kind: str = "probs") -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The loss ``name`` (one of :data:`DISTILLATION_LOSSES`) as ``fn(student_logits, teacher)``."""
    if name == "mse_logits":
        return mse_logits
    if name == "mse_prob":
        return mse_prob
    if name == "ce_hard":
        return ce_hard
    if name == "kl_soft":
        return lambda s, t: kl_soft(s, t, temperature, teacher_kind)
    raise ValueError(f"unknown distillation loss {name!r}; allowed: {', '.join(DISTILLATION_LOSSES)}")


def distill(model: nn.Module, x: torch.Tensor, teacher: torch.Tensor,
            loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], optimizer: torch.optim.Optimizer,
            steps: int, batch_size: int, generator: Optional[torch.Generator] = None,
            scheduler: Optional[object] = None, *, bn_eval: bool = False,
            on_step: Optional[Callable[[int, nn.Module], None]] = None) -> float:
    """Train ``model`` in place for exactly ``steps`` optimiser steps on (x, teacher); return the mean loss.

    Batches are consecutive slices of a seeded permutation of x, reshuffled at every pass over the data
    (epoch); the last batch of a pass may be smaller. ``scheduler.step()`` runs after every step if given.
    ``bn_eval``: BatchNorm layers stay in eval mode (running statistics used, never updated; their affine
    parameters still train). ``on_step(t, model)`` runs after step t (0-based); it may switch the model to eval
    mode (e.g. to score it), the loop restores the training mode before the next step.
    """
    n = len(x)
    if n == 0 or steps <= 0:
        return 0.0
    _train_mode(model, bn_eval)
    total, done = 0.0, 0
    device = x.device
    while done < steps:
        order = torch.randperm(n, generator=generator).to(device)
        for start in range(0, n, batch_size):
            if done >= steps:
                break
            idx = order[start:start + batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), teacher[idx])
            loss.backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            total += float(loss.detach())
            done += 1
            if on_step is not None:
                on_step(done - 1, model)
                _train_mode(model, bn_eval)
    return total / done


def _train_mode(model: nn.Module, bn_eval: bool) -> None:
    model.train()
    if bn_eval:
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.eval()


__all__ = ["DISTILLATION_LOSSES", "TEACHER_KINDS", "ce_hard", "distill", "distillation_loss", "kl_soft",
           "logit_norm", "mse_logits", "mse_prob", "soft_targets", "weighted_logit_ensemble"]
