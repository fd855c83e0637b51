"""FedDF: ensemble distillation for robust model fusion (Lin et al. 2020), as FedAUX runs it (docs/methods/fedaux.md
§2).

Each round (r = 1, 2, …; ``ServerState.round`` = r − 1 completed rounds):

- **Clients** run FedAvg's local training from the global model of their architecture and return
  Δ_k = θ_k − θ_t (weight N_k, as FedAvg) and their logits f_k(x) on the whole public pool D_aux
  (``public_logits`` [|D_aux|, C], eval mode, batched, float32). The logits are computed once per client per
  round and reused by every distillation step and every server model.
- **Server**, in ``aggregate``:

  1. *FedAvg warm start* per architecture (Eq. 17 / Alg. 2): each server model θ^P becomes the N_k-weighted
     FedAvg of that architecture's selected clients (:class:`algorithms.fedavg.FedAvg`'s own ``aggregate``,
     so ``server.lr``/``server.momentum`` apply as there). An architecture with no selected client keeps its
     previous θ^P (docs/methods/fedaux.md §11.13). With ``fedavg_init_every = P > 1`` (the single-image paper's
     ρ = 1/P, docs/methods/single_image.md §4.1–4.2) the warm start happens only in rounds r ≤ 1 and r ≡ 0
     (mod P); in the other rounds distillation continues from last round's distilled model.
  2. *Teacher* (Eq. 4, Eq. 7): ỹ(x) = softmax(Σ_k ω_k(x) f_k(x) / Σ_k ω_k(x)) over **all** selected clients
     with data, whatever their architecture (:func:`~algorithms.common.distillation.weighted_logit_ensemble`).
     ω comes from the hook :meth:`FedDF.teacher_weights` ([K, N] per-sample weights; FedDF returns None,
     the plain mean; FedAUX returns its certainty scores s_k(x)).
  3. *Distillation* of every server model on the first ⌊distill_fraction·|D_aux|⌋ public samples: τ²·KL(ỹ_τ ‖
     softmax(f(x; θ^P)/τ)) (batch mean, ``kl_soft`` with ``teacher_kind="logits"``), Adam (lr 5e-5, batch 128),
     one pass over the distillation set per round (``distill_epochs``) or ``distill_steps`` steps. The server
     models are distilled one after another with the server's training generator (batch order).

Metrics (declared in ``FedDF.metrics``): ``distill_loss`` (mean KL over the round's steps, averaged over server
models), ``distill_steps``, ``distill_size``, ``fedavg_init`` (1 when the warm start ran), ``student_agreement``
(share of distillation samples where the distilled model's argmax equals the teacher's, averaged over server
models) and, with ``val_checkpoint_every``, ``distill_val_accuracy`` (validation accuracy of the kept checkpoint).

Deviations and choices (every documented alternative is a switch):

- **No ``teacher_accuracy``.** Clients predict only on the public pool, which has no labels, and never on the
  server's validation split, so the ensemble's validation accuracy cannot be computed without sending the
  validation inputs to clients; ``student_agreement`` (student vs teacher argmax) is reported instead.
- **Distillation set.** FedAUX splits D_aux into D_distill (80 %) and negatives D⁻ (20 %) and FedDF distils on
  D_distill (docs/methods/fedaux.md §3.2 P0, §2), so ``distill_fraction`` defaults to 0.8 and takes the *first*
  80 % of the public pool (``public.split: random`` shuffles the pool); the remaining 20 % are left for FedAUX's
  negatives, disjoint as §10 #3 recommends. ``distill_fraction: 1`` distils on the whole pool (original FedDF).
- **Teacher logits in eval mode** on clients (BatchNorm running statistics). The FedAUX code used train mode
  (docs/methods/fedaux.md §10 #7, §11.9); ``bn_mode`` only sets the *student's* BatchNorm mode during
  distillation: ``train`` (default, as both reference codes: batch statistics, running statistics updated on
  public batches) or ``eval`` (running statistics from the warm start used and kept; the affine parameters still
  train).
- **Optimiser.** ``reset_optimizer: false`` (default) keeps each server model's Adam moments across rounds in
  ``ServerState.extra["distill_optimizer"]``, as the FedAUX code (docs/methods/fedaux.md §10 #8; the paper is silent
  and §11.10 recommends the code's behaviour); ``true`` makes a fresh Adam every round, as the single-image code
  (docs/methods/single_image.md A7).
- **Clients with N_k = 0** are left out of the teacher (their logits would be the untrained global model's).
  With no client holding data, or no distillation step, the round is plain FedAvg (bit-identical).
- **Temperature** τ (default 1, i.e. none, docs/methods/fedaux.md §5) softens the teacher logits (softmax(z/τ))
  and the student; the loss carries Hinton's τ² factor, which is 1 at τ = 1.
- **Logit clipping** (``logit_clip`` = c, off by default; the single-image paper ran c = 2.5, docs/methods/
  single_image.md §4.3): LN_c is applied to the training-time logits of clients (inside their cross-entropy)
  and of the student (inside the KL), never to teacher logits, predictions or evaluation.
- **Validation-based checkpoint** (``val_checkpoint_every``, off by default as FedAUX, docs/methods/fedaux.md
  §11.8; 50 in the single-image code, docs/methods/single_image.md §4.2): the distilled model is scored on the
  server's validation split after step 1, every that many steps and after the last step; the best (ties: the
  later) is kept. Needs ``server.val_fraction`` > 0.
- **Step schedule** ``cosine_restart`` (docs/methods/single_image.md §4.6, their hetero runs): steps(1) = S_max, then
  S_min + ½(S_max − S_min)(1 + cos(π(u − 1)/(P_s − 1))) with u = (r mod P_s) + 1, or 1 when r ≡ 0; S_max is the
  round's constant budget (``distill_steps`` or the epochs), S_min ``schedule_min_steps``, P_s ``schedule_period``.
- **Distillation batches** are slices of a seeded permutation (``ServerContext.training_generator``), reshuffled
  every pass; a last partial batch is kept. No augmentation of distillation inputs (docs/methods/fedaux.md
  §11.8).
- **Local training** is the platform's (``clients.*``); the FedAUX recipe is Adam 1e-3, batch 32, E = 1
  (``clients: {optimizer: adam, lr: 0.001, batch_size: 32, local_epochs: 1}``).
"""
from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from algorithms.base import (Algorithm, ClientContext, ClientUpdate, GlobalWeights, Metric, ServerContext,
                             ServerState, register, weights_for)
from algorithms.common import evaluate, get_flat_weights, set_flat_weights, train_local
from algorithms.common.evaluation import inference_slices
from algorithms.common.distillation import distill, kl_soft, logit_norm, weighted_logit_ensemble
from algorithms.common.params import spec
from algorithms.errors import ConfigError
from algorithms.fedavg import FedAvg

BN_MODES = ("train", "eval")
STEP_SCHEDULES = ("constant", "cosine_restart")


@dataclass(frozen=True)
class FedDFHyperparams:
    distill_lr: float = spec(5e-5, doc="η, Adam learning rate of server distillation (docs/methods/fedaux.md "
                                       "§2 Eq. 3, §5: "
                                       "5e-5; the single-image paper used 5e-3).", gt=0)
    distill_batch_size: int = spec(128, doc="Distillation batch size (docs/methods/fedaux.md §2, §5: 128).", ge=1)
    distill_epochs: int = spec(1, doc="Passes over D_distill per round (docs/methods/fedaux.md §2, §5: 1 epoch); "
                                      "replaced by distill_steps when that is set. 0 = FedAvg only.", ge=0)
    distill_steps: Optional[int] = spec(None, doc="Distillation steps per round, replacing distill_epochs "
                                                  "(docs/methods/single_image.md §4.2: 500); null = distill_epochs "
                                                  "passes. 0 = FedAvg only.", ge=0)
    temperature: float = spec(1.0, doc="τ, softmax temperature of teacher and student in the KL, with τ² "
                                       "scaling (docs/methods/fedaux.md §5, §11.8: none, i.e. 1).", gt=0)
    distill_fraction: float = spec(0.8, doc="Share of the public pool D_aux distilled on: its first "
                                            "⌊fraction·|D_aux|⌋ samples, D_distill (docs/methods/fedaux.md "
                                            "§3.2 P0: "
                                            "0.8; the rest is FedAUX's D⁻). 1 = the whole pool.", gt=0, le=1)
    bn_mode: str = spec("train", doc="BatchNorm of the student during distillation: train (batch statistics, "
                                     "running statistics updated, as the reference codes) | eval (running "
                                     "statistics fixed) (docs/methods/fedaux.md §10 #7, §11.9).", choices=BN_MODES)
    reset_optimizer: bool = spec(False, doc="false (default): each server model's distillation Adam keeps its "
                                            "moments across rounds, as the FedAUX code (docs/methods/fedaux.md "
                                            "§10 #8, "
                                            "§11.10 recommends matching it); true: a fresh Adam every round, as "
                                            "the single-image code (docs/methods/single_image.md A7).")
    logit_clip: Optional[float] = spec(None, doc="c of the logit 'clipping' LN_c on training-time logits of clients "
                                                 "and student (docs/methods/single_image.md §4.3: 2.5); null = "
                                                 "off.", gt=0)
    fedavg_init_every: int = spec(1, doc="P = 1/ρ: FedAvg warm start of the server models in rounds r ≤ 1 and "
                                         "r ≡ 0 (mod P), else distil on from last round's model "
                                         "(docs/methods/single_image.md §4.1–4.2; FedDF/FedAUX: 1, every "
                                         "round).", ge=1)
    val_checkpoint_every: Optional[int] = spec(None, doc="Keep the distillation checkpoint with the best server "
                                                         "validation accuracy, scored after step 1, every this many "
                                                         "steps and at the end (docs/methods/single_image.md §4.2: "
                                                         "50); "
                                                         "null = keep the last iterate (docs/methods/fedaux.md "
                                                         "§11.8).",
                                               ge=1)
    step_schedule: str = spec("constant", doc="Distillation steps over rounds: constant | cosine_restart "
                                              "(cosine annealing with warm restarts from the round's budget down "
                                              "to schedule_min_steps, docs/methods/single_image.md §4.6).",
                              choices=STEP_SCHEDULES)
    schedule_min_steps: Optional[int] = spec(None, doc="S_min of the cosine_restart schedule "
                                                       "(docs/methods/single_image.md §4.6: 250 with S_max "
                                                       "500).", ge=0)
    schedule_period: int = spec(5, doc="P_s, period in rounds of the cosine_restart schedule "
                                       "(docs/methods/single_image.md §4.6: 5).", ge=2)

    def validate(self, path: str) -> None:
        def where(name: str) -> str:
            return f"{path}.{name}" if path else name

        if self.step_schedule == "cosine_restart":
            if self.schedule_min_steps is None:
                raise ConfigError(where("schedule_min_steps"), "required when step_schedule is cosine_restart")
            if self.distill_steps is not None and self.schedule_min_steps > self.distill_steps:
                raise ConfigError(where("schedule_min_steps"), f"must be <= distill_steps ({self.distill_steps}), "
                                                               f"got {self.schedule_min_steps}")
        else:
            if self.schedule_min_steps is not None:
                raise ConfigError(where("schedule_min_steps"), "only applies when step_schedule is cosine_restart")
            if self.schedule_period != 5:
                raise ConfigError(where("schedule_period"), "only applies when step_schedule is cosine_restart")


@torch.no_grad()
def predict_logits(model: nn.Module, x: torch.Tensor, batch_size: int | None = None) -> torch.Tensor:
    """f(x), raw logits in eval mode, float32 on the CPU, [N, C]; in batches of ``batch_size`` (default:
    :func:`~algorithms.common.evaluation.inference_batch_size`)."""
    model.eval()
    out = [model(x[rows]).float().cpu() for rows in inference_slices(model, x, batch_size)]
    return torch.cat(out) if out else torch.empty(0, 0)


def cosine_restart_steps(round_number: int, max_steps: int, min_steps: int, period: int) -> int:
    """Steps of round ``round_number`` (1-based) under the single-image paper's cosine schedule with warm
    restarts (docs/methods/single_image.md §4.6): 500, 375, 286, 250, 500, 463, … for (500, 250, 5)."""
    if round_number <= 1:
        return int(max_steps)
    m = round_number % period
    u = m + 1 if m != 0 else 1
    return int(math.floor(min_steps + 0.5 * (max_steps - min_steps) * (1 + math.cos(math.pi * (u - 1) / (period - 1)))
                          + 1e-9))


@register
class FedDF(Algorithm):
    name = "feddf"
    Hyperparams = FedDFHyperparams
    summable = False  # the teacher needs every client's logits
    heterogeneous_models = True  # one server model per architecture, one teacher for all
    metrics = (
        Metric("distill_loss", "min", "mean KL(teacher ‖ student) over the round's distillation steps, averaged "
                                      "over the server models"),
        Metric("distill_steps", "max", "distillation steps per server model this round"),
        Metric("distill_size", "max", "public samples distilled on (|D_distill|)"),
        Metric("fedavg_init", "max", "1 when the server models were warm-started by FedAvg this round"),
        Metric("student_agreement", "max", "share of D_distill where the distilled model's argmax equals the "
                                           "teacher's, averaged over the server models"),
        Metric("distill_val_accuracy", "max", "server validation accuracy of the kept distillation checkpoint "
                                              "(val_checkpoint_every), averaged over the server models"),
    )

    def __init__(self, hparams=None):
        super().__init__(hparams)
        self.fedavg = FedAvg()

    # --- configuration-derived values --------------------------------------------------------------------------
    def client_stage_fields(self) -> dict:
        """Clients train as FedAvg (plus LN_c when clipping) and predict on the public pool."""
        return {"procedure": "feddf_clients", "version": 1, "logit_clip": self.hp.logit_clip}

    def distills(self) -> bool:
        hp = self.hp
        return (hp.distill_steps if hp.distill_steps is not None else hp.distill_epochs) > 0

    def distillation_size(self, pool: int) -> int:
        """|D_distill|: the first ⌊distill_fraction·pool⌋ public samples (at least 1 of a non-empty pool)."""
        if pool <= 0:
            return 0
        return max(1, int(math.floor(self.hp.distill_fraction * pool + 1e-9)))

    def fedavg_init_round(self, completed_rounds: int) -> bool:
        """Whether round r = completed_rounds + 1 starts from FedAvg: r ≤ 1 or r ≡ 0 (mod fedavg_init_every)."""
        r = completed_rounds + 1
        return r <= 1 or r % self.hp.fedavg_init_every == 0

    def comparable_round(self, round_number: int) -> bool:
        """With a FedAvg warm start every P > 1 rounds, accuracy jumps on warm-start rounds: compare trials (ASHA
        rungs) only there (docs/methods/single_image.md §9)."""
        return self.fedavg_init_round(round_number - 1)

    def distill_steps_for(self, completed_rounds: int, size: int) -> int:
        hp = self.hp
        budget = hp.distill_steps if hp.distill_steps is not None else \
            hp.distill_epochs * math.ceil(size / hp.distill_batch_size)
        if hp.step_schedule == "cosine_restart":
            return cosine_restart_steps(completed_rounds + 1, budget, min(hp.schedule_min_steps, budget),
                                        hp.schedule_period)
        return budget

    # --- client ------------------------------------------------------------------------------------------------
    def proximal_term(self, client: ClientContext, payload: dict):
        """An extra loss on each local batch (none; a FedProx-regularised variant would override this)."""
        return None

    def client_update(self, payload: dict, client: ClientContext) -> ClientUpdate:
        start = weights_for(payload["weights"], client.architecture)
        if client.num_samples == 0:
            return ClientUpdate(weight=0.0, tensors={"delta": torch.zeros_like(start)}, metrics={"train_loss": 0.0})
        public_x = client.public_x
        if public_x is not None and payload.get("public_indices") is not None:
            public_x = public_x[payload["public_indices"].to(public_x.device)]
        if self.distills() and (public_x is None or len(public_x) == 0):
            raise ValueError("feddf distils on public data: set public.source (e.g. train_split or dataset)")
        model = client.model
        set_flat_weights(model, start)
        clip = self.hp.logit_clip
        loss_fn = F.cross_entropy if clip is None else (lambda z, y: F.cross_entropy(logit_norm(z, clip), y))
        loss = train_local(model, client.x, client.y, client.training, client.generator,
                           extra_loss=self.proximal_term(client, payload), loss_fn=loss_fn,
                           augment_generator=client.augment_generator)
        tensors = {"delta": get_flat_weights(model) - start}
        if public_x is not None and len(public_x) > 0:
            tensors["public_logits"] = predict_logits(model, public_x)
        return ClientUpdate(weight=float(client.num_samples), tensors=tensors, metrics={"train_loss": loss})

    # --- server ------------------------------------------------------------------------------------------------
    def broadcast(self, state: ServerState, sampled_clients: Sequence[int]) -> dict:
        """The global model(s) and, when the method selects a distillation subset, its pool indices: clients
        predict only on those (docs/methods/single_image.md §4.1: only indices travel)."""
        payload = {"weights": state.weights}
        indices = self.distillation_indices(state)
        if indices is not None:
            payload["public_indices"] = indices
        return payload

    def distillation_indices(self, state: ServerState) -> Optional[torch.Tensor]:
        """Pool indices of this round's distillation set (sorted, int64), or None for the first
        ⌊distill_fraction·|D_aux|⌋ samples (FedDF, FedAUX). The single-image method selects a new set every
        round with the global model (:class:`algorithms.single_image.SingleImage`)."""
        return None

    def teacher_weights(self, updates: Sequence[ClientUpdate], state: ServerState,
                        ctx: ServerContext) -> Optional[torch.Tensor]:
        """Per-sample ensemble weights ω_k(x) ``[K, N]`` for ``updates`` (the clients with data, in order) on the
        public pool (N = |D_aux|; only the first |D_distill| columns are used) or on D_distill. None = the plain
        mean (FedDF, Eq. 4). FedAUX overrides this with its certainty scores s_k(x) (Eq. 7)."""
        return None

    def teacher_logits(self, updates: Sequence[ClientUpdate], state: ServerState, ctx: ServerContext,
                       size: int) -> torch.Tensor:
        """Ensemble logits Σ_k ω_k f_k / Σ_k ω_k on the first ``size`` public samples, [size, C] on ctx.device."""
        logits = torch.stack([u.tensors["public_logits"][:size] for u in updates]).to(ctx.device, torch.float32)
        weights = self.teacher_weights(updates, state, ctx)
        if weights is not None:
            weights = torch.as_tensor(weights)
            if weights.dim() != 2 or weights.shape[0] != len(updates) or weights.shape[1] < size:
                raise ValueError(f"teacher_weights must be [K={len(updates)}, N>={size}], got "
                                 f"{tuple(weights.shape)}")
            weights = weights[:, :size].to(ctx.device)
        return weighted_logit_ensemble(logits, weights)

    def warm_start(self, state: ServerState, updates: Sequence[ClientUpdate],
                   ctx: ServerContext) -> tuple[GlobalWeights, dict]:
        """FedAvg's aggregate on the deltas (per architecture when heterogeneous): (weights, optimizer state)."""
        deltas = [dataclasses.replace(u, tensors={"delta": u.tensors["delta"]}) for u in updates]
        averaged, _ = self.fedavg.aggregate(state, deltas, ctx)
        return averaged.weights, averaged.optimizer

    def distill_model(self, model: nn.Module, start: torch.Tensor, x: torch.Tensor, teacher: torch.Tensor,
                      steps: int, ctx: ServerContext, optimizer_state: Optional[dict]) -> tuple[torch.Tensor, dict]:
        """Distil ``model`` from ``start`` onto the teacher logits; returns (weights, {loss, agreement, [val],
        optimizer})."""
        hp = self.hp
        set_flat_weights(model, start)
        optimizer = torch.optim.Adam(model.parameters(), lr=hp.distill_lr)
        if optimizer_state is not None:
            optimizer.load_state_dict(copy.deepcopy(optimizer_state))

        def loss_fn(student_logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return kl_soft(logit_norm(student_logits, hp.logit_clip), target, hp.temperature, "logits")

        best: dict = {}
        on_step = None
        if hp.val_checkpoint_every is not None:
            if ctx.val_x is None or ctx.val_y is None or len(ctx.val_y) == 0:
                raise ConfigError("algorithm.val_checkpoint_every", "needs the server's validation split: set "
                                                                    "server.val_fraction > 0")
            every = hp.val_checkpoint_every

            def on_step(t: int, m: nn.Module) -> None:
                if t == 0 or (t + 1) % every == 0 or t == steps - 1:
                    acc = evaluate(m, ctx.val_x, ctx.val_y, prefix="val_")["val_accuracy"]
                    if not best or acc >= best["accuracy"]:
                        best.update(accuracy=acc, weights=get_flat_weights(m))

        loss = distill(model, x, teacher, loss_fn, optimizer, steps, hp.distill_batch_size, ctx.training_generator,
                       bn_eval=hp.bn_mode == "eval", on_step=on_step)
        if best:
            set_flat_weights(model, best["weights"])
        model.eval()
        with torch.no_grad():
            predicted = torch.cat([model(x[rows]).argmax(dim=1) for rows in inference_slices(model, x)])
        info = {"loss": loss, "agreement": float((predicted == teacher.argmax(dim=1)).double().mean()),
                "optimizer": None if hp.reset_optimizer else copy.deepcopy(optimizer.state_dict())}
        if best:
            info["val_accuracy"] = best["accuracy"]
        return get_flat_weights(model), info

    def aggregate(self, state: ServerState, updates: Sequence[ClientUpdate],
                  ctx: ServerContext) -> tuple[ServerState, dict]:
        if any(u.num_clients != 1 for u in updates):
            raise ValueError("feddf needs one update per client (summable = False), got a pre-reduced one")
        fedavg_init = self.fedavg_init_round(state.round)
        if fedavg_init:
            weights, optimizer = self.warm_start(state, updates, ctx)
        else:
            weights, optimizer = state.weights, state.optimizer
        metrics = {"fedavg_init": float(fedavg_init)}
        active = [u for u in updates if u.weight > 0]
        pool = 0 if ctx.public_x is None else len(ctx.public_x)
        indices = self.distillation_indices(state)
        size = self.distillation_size(pool) if indices is None else len(indices)
        predicted = pool if indices is None else size  # what each client predicted on
        steps = self.distill_steps_for(state.round, size) if self.distills() else 0
        if not active or steps == 0 or size == 0:
            metrics["distill_steps"] = 0.0
            return ServerState(weights=weights, optimizer=optimizer, extra=state.extra), metrics
        if pool == 0:
            raise ValueError("feddf distils on public data on the server: set public.source")
        pools = sorted({len(u.tensors["public_logits"]) for u in active if "public_logits" in u.tensors})
        if len(pools) != 1 or pools[0] != predicted or any("public_logits" not in u.tensors for u in active):
            raise ValueError(f"the clients predicted on {pools} public samples, the server expected {predicted}: "
                             f"they must share one public pool")
        teacher = self.teacher_logits(active, state, ctx, size)
        x = (ctx.public_x[:size] if indices is None else ctx.public_x[indices.to(ctx.public_x.device)]).to(ctx.device)
        saved = state.extra.get("distill_optimizer", {})
        architectures = list(weights) if isinstance(weights, dict) else [ctx.architecture]
        new_weights: GlobalWeights = dict(weights) if isinstance(weights, dict) else weights
        kept_optimizers, infos = {}, []
        for name in architectures:
            start = weights_for(weights, name)
            distilled, info = self.distill_model(ctx.models[name], start, x, teacher, steps, ctx,
                                                 None if self.hp.reset_optimizer else saved.get(name))
            if isinstance(new_weights, dict):
                new_weights[name] = distilled
            else:
                new_weights = distilled
            if info["optimizer"] is not None:
                kept_optimizers[name] = info["optimizer"]
            infos.append(info)
        extra = dict(state.extra)
        if kept_optimizers:
            extra["distill_optimizer"] = kept_optimizers
        metrics.update(distill_steps=float(steps), distill_size=float(size),
                       distill_loss=sum(i["loss"] for i in infos) / len(infos),
                       student_agreement=sum(i["agreement"] for i in infos) / len(infos))
        if all("val_accuracy" in i for i in infos):
            metrics["distill_val_accuracy"] = sum(i["val_accuracy"] for i in infos) / len(infos)
        return ServerState(weights=new_weights, optimizer=optimizer, extra=extra), metrics


__all__ = ["FedDF", "FedDFHyperparams", "cosine_restart_steps", "predict_logits"]
