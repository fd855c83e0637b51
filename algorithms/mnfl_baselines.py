"""MNFL's heterogeneous-model baselines FedMD, Sim-pFL and TopK-pFL (docs/methods/mnfl.md §5, §3, §10 #28, #35;
§11).

All three are :class:`algorithms.mnfl.MNFL` with a different rule for the teacher weights: the client procedure
(personalised model in ``client.state``; distil R passes towards Q_n, train E epochs privately, upload tempered
soft predictions; ``bn_mode``, ``private_first``), the per-round public subset, the one-round pipelining of
upload and target, client sampling, ``client_evaluate`` and the metrics are MNFL's, unchanged (see its module
docstring). Only :meth:`~algorithms.mnfl.MNFL.update_coefficients` differs: instead of the Eq. 7 c-step, c is
**recomputed from the latest predictions every round, by a rule, with no gradient step and no memory of the
previous c**; the next round's targets are ``Q_n = Σ_m c[m, n] s_m`` from the same predictions (so the order is
MNFL's ``before_distill``: predictions → c → targets → distil). Symbols as in MNFL: c[m, n] = weight of teacher m
for student n, columns on the simplex; s_m = softmax(f_m(x̂)/T) on the round's public subset (N_pub samples);
P = the clients that sent predictions this round (all N with full participation).

- ``fedmd`` (§5 FedMD [13]): c[m, n] = 1/|P| for every teacher m ∈ P: every student distils towards the same
  global average of all (sampled, fresh) clients' soft predictions, itself included; not personalised. This is
  MNFL with c fixed at c_0 = uniform and never stepped (large-ρ MNFL, §1).
- ``sim_pfl`` (§5 Sim-pFL; Table 1's "Sim-pFD", §10 #35): cos[m, n] = cosine similarity of the flattened
  [N_pub, C] soft-prediction matrices of m and n (§10 #28: predictions, not parameters, which cannot be compared
  across architectures), self = 1. ``similarity_weights: clipped`` ([REC], default): c[m, n] = max(cos, 0) /
  Σ_m' max(cos, 0), self included. ``minmax`` ([EXT], the reference code's ``KT-pFL_cos``): c[m, n] ∝ cos[m, n] −
  min_m' cos[m', n], so the least similar teacher gets 0 (uniform if all cosines of a column are equal).
- ``topk_pfl`` (§3, §5 TopK-pFL; "TopK-pFD"): ``selection: topk`` ([REC], default): c[·, n] uniform over the
  ``topk`` = K (default 5, §3) clients with the highest cosine, the student itself always among them (cos = 1;
  ties broken by the lower client id); K ≥ |P| keeps all of P (FedMD). ``median`` ([EXT], the reference code's
  ``KT-pFL_topk``): uniform over the clients whose cosine is strictly above the ⌊|P|/2⌋-th smallest cosine of the
  column (about half of them), plus the student; ``topk`` is then unused.

Functions: :func:`algorithms.common.coefficients.similarity_coefficients` and
:func:`~algorithms.common.coefficients.topk_coefficients` (pure tensor code, tested there).

Choices and deviations:

- **Client sampling.** Similarities and weights are computed among P only (soft predictions of clients absent
  this round are on another public subset and cannot be compared): c[P, P] is the rule's matrix, the rows of
  clients outside P are 0, and the column of a client outside P is uniform over P (it gets FedMD's target if it is
  sampled next round). Every column stays on the simplex. A round in which nobody sent predictions keeps c.
- **c_0** (MNFL's uniform c) is never used for a target: round 1 has no targets, and its aggregate already
  replaces c by the rule's, from which round 2's targets are built.
- **Hyperparameters**: the client/public ones of :class:`~algorithms.mnfl.MNFLClientHyperparams` (``temperature``,
  ``distill_passes``, ``distill_lr``, ``distill_batch_size``, ``public_size``, ``kd_t2_scale``, ``bn_mode``,
  ``private_first``), with MNFL's defaults, plus the rule's own switches. MNFL's c-step fields (``rho``,
  ``coefficient_lr``, ``lam``, ``c_update_order``, ``project_simplex``) do not exist here: there is no c-step,
  targets are always renormalised over the senders, and clients never send the second, post-distillation upload.
- **Cosine in float64** on the server, over the predictions as uploaded (float32, tempered with the run's T: the
  reference code used T = 1 for the similarity; T changes the cosines).
- **Metrics**: ``c_self_weight`` and ``c_entropy`` of the new c (as MNFL; for ``fedmd`` they are 1/N and log N
  with full participation, a check that the run is the baseline it claims), ``distill_loss`` and ``train_loss``.
  No ``c_steps``.
- ``topk`` < 1 is refused at load (``algorithm.topk``), and so is ``topk`` larger than the number of clients
  (it would silently be FedMD); ``distill_passes`` < 1 and the other field rules are MNFL's.

Other FedMD details (its transfer-learning pre-training on the public labels, its "digest/revisit" epochs) are not
part of the MNFL paper's comparison and are not reproduced: FedMD here is the MNFL procedure with a uniform c, as
§5 describes it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from algorithms.base import ClientUpdate, Setting, register
from algorithms.common.coefficients import (SIMILARITY_WEIGHTINGS, TOPK_SELECTIONS, check_topk,
                                            similarity_coefficients, topk_coefficients)
from algorithms.common.params import spec
from algorithms.errors import ConfigError
from algorithms.mnfl import MNFL, MNFLClientHyperparams


@dataclass(frozen=True)
class FedMDHyperparams(MNFLClientHyperparams):
    """FedMD: only MNFL's client procedure and public subset."""


@dataclass(frozen=True)
class SimPFLHyperparams(MNFLClientHyperparams):
    similarity_weights: str = spec("clipped", doc="Sim-pFL teacher weights from the cosine of soft predictions: "
                                                  "clipped (c ∝ max(cos, 0), self = 1; docs/methods/mnfl.md "
                                                  "§5 [REC]) | "
                                                  "minmax (c ∝ cos − min cos, the reference code; §5 [EXT], §11)",
                                   choices=SIMILARITY_WEIGHTINGS)


@dataclass(frozen=True)
class TopKPFLHyperparams(MNFLClientHyperparams):
    topk: int = spec(5, doc="K, clients (self included) whose predictions are averaged for each student "
                            "(docs/methods/mnfl.md §3, §5: 5); at least 1, at most the number of clients", ge=1)
    selection: str = spec("topk", doc="topk (the K most similar, docs/methods/mnfl.md §5 [REC]) | median (those "
                                      "above the median cosine, the reference code; §5 [EXT], §11; topk unused)",
                          choices=TOPK_SELECTIONS)


class RuleCoefficientMNFL(MNFL):
    """MNFL whose c is recomputed from the latest predictions by :meth:`coefficient_rule` (not registered)."""

    Hyperparams = MNFLClientHyperparams
    metrics = tuple(m for m in MNFL.metrics if m.name != "c_steps")

    def coefficient_rule(self, soft_predictions: torch.Tensor) -> torch.Tensor:
        """c for the senders P: [|P|, |P|] with columns on the simplex, from their predictions S [|P|, M, C]."""
        raise NotImplementedError

    def uploads_distilled_predictions(self) -> bool:
        return False  # no c-step, so no second upload

    def renormalises_targets(self) -> bool:
        return True

    def update_coefficients(self, c: torch.Tensor, old: dict, present: Sequence[ClientUpdate], new_probs: dict,
                            sizes: dict) -> dict[str, float]:
        if not new_probs:
            return {}
        ids = sorted(new_probs)
        idx = torch.tensor(ids)
        rule = self.coefficient_rule(torch.stack([new_probs[k] for k in ids]).to(c.dtype))
        c.zero_()
        c[idx] = 1.0 / len(ids)  # columns of clients outside P: uniform over P
        c[idx.unsqueeze(1), idx.unsqueeze(0)] = rule
        return {}


@register
class FedMD(RuleCoefficientMNFL):
    """Every client distils towards the plain average of all senders' predictions."""

    name = "fedmd"
    Hyperparams = FedMDHyperparams

    def coefficient_rule(self, soft_predictions: torch.Tensor) -> torch.Tensor:
        n = soft_predictions.shape[0]
        return torch.full((n, n), 1.0 / n, dtype=soft_predictions.dtype)


@register
class SimPFL(RuleCoefficientMNFL):
    """Teacher weights ∝ cosine similarity of soft predictions."""

    name = "sim_pfl"
    Hyperparams = SimPFLHyperparams

    def coefficient_rule(self, soft_predictions: torch.Tensor) -> torch.Tensor:
        return similarity_coefficients(soft_predictions, self.hp.similarity_weights)


@register
class TopKPFL(RuleCoefficientMNFL):
    """Uniform average over the K most similar clients (self included)."""

    name = "topk_pfl"
    Hyperparams = TopKPFLHyperparams

    def check_setting(self, setting: Setting) -> None:
        super().check_setting(setting)
        check_topk(self.hp.topk)
        if self.hp.selection == "topk" and self.hp.topk > setting.num_clients:
            raise ConfigError("algorithm.topk", f"K = {self.hp.topk} is more than the {setting.num_clients} clients "
                                                f"(it would average everyone, i.e. fedmd); allowed: "
                                                f"1..{setting.num_clients}")

    def coefficient_rule(self, soft_predictions: torch.Tensor) -> torch.Tensor:
        return topk_coefficients(soft_predictions, self.hp.topk, self.hp.selection)


__all__ = ["FedMD", "FedMDHyperparams", "RuleCoefficientMNFL", "SimPFL", "SimPFLHyperparams", "TopKPFL",
           "TopKPFLHyperparams"]
