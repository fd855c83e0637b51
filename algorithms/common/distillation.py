"""The one family of distillation losses, and one student-training loop, for every distillation method.

Used by FedED (spec/feded.md §2.4, §2.6) and meant for FedDF, FedAUX and MNFL too. Every loss takes the
student's raw logits ``[B, C]`` and a teacher ``[B, C]`` and returns a scalar (the mean over the batch):

- ``mse_logits``: (1/(B·C)) Σ (z_S − z_T)², the student's **raw logits** regressed onto the teacher's
  probabilities (eq. 2.10 as the thesis code ran it, ``nn.MSELoss()(logits, z_T)``; spec §2.6, §9 item 1).
- ``mse_prob``: the same on the student's softmax probabilities (an extension, spec §10).
- ``ce_hard``: cross-entropy against the teacher's argmax, i.e. hard pseudo-labels (what the thesis calls
  "CE"; spec §2.6, §9 item 2).
- ``kl_soft``: τ²·KL(q_T ‖ q_S) with q_S = softmax(z_S/τ) (eqs. 2.8–2.9, Hinton's τ² scaling). The teacher is
  softened by :func:`soft_targets`: teacher **logits** (FedDF's averaged logits) give softmax(z_T/τ);
  teacher **probabilities** (FedED's weighted ensembles, which have no logits) give softmax(log z_T/τ)
  ∝ z_T^(1/τ), so τ = 1 targets z_T itself (normalised per sample).

Teachers that are not normalised (FedED-w1, spec §2.5) are used as they are by ``mse_*`` and ``ce_hard``
and normalised by ``kl_soft``. Zero teacher entries contribute 0 to the KL (0·log 0 = 0).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

DISTILLATION_LOSSES = ("mse_logits", "ce_hard", "kl_soft", "mse_prob")
TEACHER_KINDS = ("probs", "logits")


def mse_logits(student_logits: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean over batch and classes of (z_S − z_T)², z_S the raw logits (spec/feded.md §2.6 [code])."""
    return F.mse_loss(student_logits, teacher)


def mse_prob(student_logits: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean over batch and classes of (softmax(z_S) − z_T)² (spec/feded.md §10 extension)."""
    return F.mse_loss(F.softmax(student_logits, dim=1), teacher)


def ce_hard(student_logits: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against the hard pseudo-labels argmax_c z_T (spec/feded.md §2.6 [code])."""
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
            scheduler: Optional[object] = None) -> float:
    """Train ``model`` in place for exactly ``steps`` optimiser steps on (x, teacher); return the mean loss.

    Batches are consecutive slices of a seeded permutation of x, reshuffled at every pass over the data
    (epoch); the last batch of a pass may be smaller. ``scheduler.step()`` runs after every step if given.
    """
    n = len(x)
    if n == 0 or steps <= 0:
        return 0.0
    model.train()
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
    return total / done


__all__ = ["DISTILLATION_LOSSES", "TEACHER_KINDS", "ce_hard", "distill", "distillation_loss", "kl_soft",
           "mse_logits", "mse_prob", "soft_targets"]
