"""FedDF from a single shared image (Soni, Saeed & Asano 2024; docs/methods/single_image.md).

The paper's strategies ``feddf`` (one architecture) and ``feddf_hetero`` (client-model mirroring, §4.6) are one
method here, :class:`SingleImage` (``algorithm.name: single_image``): homogeneous with ``model.name``,
heterogeneous with ``model.architectures`` (one server model per architecture, each distilled from the one
cross-architecture teacher) and, for the paper's "with scheduling" arm, ``step_schedule: cosine_restart``
(``schedule_min_steps: 250``). It *is* :class:`algorithms.feddf.FedDF` — the same clients, teacher, FedAvg warm
start every ``fedavg_init_every`` rounds, server Adam distillation and validation checkpoint — plus a per-round
selection of the distillation set from the patch pool:

- **Pool** (§2): ``public.source: image`` makes ``public_x`` the seeded crop pool (N_pool = ``public.size``, built
  once per sweep by the platform with :func:`algorithms.common.patch_pool.make_patch_pool` and kept in the stage
  cache), normalised with the private dataset's statistics. Any other public source works too (Table 6 selects
  from a labelled proxy pool).
- **Selection** (§3), at the end of every ``aggregate`` for the next round (and in ``init_server_state`` for round
  1, with the untrained model, §8 A20): one batched eval-mode pass of the selection model over the whole pool
  gives embeddings z (``model.features``) and logits; then :func:`algorithms.common.pruning.select_pool`:
  K-means class balancing to s_K (``kmeans*``; sklearn ``KMeans(K, n_init=1, random_state=seed)``, the same
  seed every round as the code), then per-predicted-class confidence pruning of ``entropy_rate`` e
  (``entropy_mode``, ``entropy_score``). Only the indices travel: ``broadcast`` sends them and clients predict
  only on the selected crops (§8 A19). The selection is server state, so a checkpoint restores it.
- **Stages and sizes** (§3.4): ``kmeans`` and ``entropy`` switch the two stages, so the ablation grid (none,
  entropy only, K-means only, both) is two booleans. With both stages s_K = ⌊s/(1 − e)⌋ (s = ``num_distill``),
  with K-means only s_K = s, with entropy only the candidates are pruned (≈ (1 − e)·candidates).
  ``pool_sizing: paper`` (default) reproduces the paper's arms at equal s from one pool (the pool is
  prefix-stable, so its first M crops *are* the pool of size M): neither stage distils on the first s crops
  (Table 5's 5k-crop "no selection" pool), entropy only prunes the first ⌊s/(1 − e)⌋ (the paper sets N_pool =
  s/(1 − e), Table 9b), K-means starts from the whole pool. ``whole`` starts every arm from the whole pool.
  In the paper's main configuration (N_pool = 50k,
  s = 5k, e = 0.9) s_K = N_pool, so K-means selects everything and is skipped (reported as
  ``selection_kmeans_noop`` = 1, never silently): set ``kmeans_keep_ratio`` (s_K = ⌊ratio·N_pool⌋) or a pool
  larger than s/(1 − e) for K-means to act.
- **Heterogeneous selection model** (§4.6 step 1): the server model with the best *server validation*
  accuracy after the round (the code used test accuracy, §8 A18; ties and a missing validation split: the
  first architecture in ``model.architectures`` order).

Metrics per round (declared in :attr:`SingleImage.metrics`, besides FedDF's): the pool and stage sizes of the
selection this round distilled on, the number of predicted classes C in it and the largest class share; and
``selected_class_count.<c>``, the selected set's class histogram under the selection model's pseudo-labels.

Defaults are the single-image code's and logs' main configuration (§4.2, §5 [C][L]): server Adam 5e-3 with a
fresh optimiser every round, batch 512, 500 steps, τ = 1, LN_c clipping c = 2.5 on training-time logits, FedAvg
warm start every 5 rounds (ρ = 20 %), best-validation checkpoint every 50 steps, s = 5000, e = 0.9 ``top``,
K = 1000, F^K = 1, ``hard``. Clients use the platform's local training (the paper: Adam 0.01, batch 512, E = 40:
``clients: {optimizer: adam, lr: 0.01, batch_size: 512, local_epochs: 40}``).

Deviations and switches (each documented alternative is a switch):

- **Teacher weights** are the clients' sample counts N_k (§8 A14: the code weighted by local batches, uniform
  with its equal client sizes).
- **Easy heuristic** is (100, 0) as the paper describes; ``easy_as_in_code: true`` reproduces the code's easy,
  which behaves as mixed 50-50 (§3.2, §8 A4).
- **Random entropy removal** draws without replacement; ``entropy_random_as_in_code: true`` draws with
  replacement as the code (may remove fewer, §3.3).
- **FedProx clients** (§4.5): ``client_mu`` = μ (0 = off; the paper's "w/ FedProx" arm used 2.0) with the correct
  (μ/2)‖θ − θ_t‖²; ``fedprox_as_in_code: true`` uses the code's square of the sum (§8 A13).
- **Validation checkpoint and privacy** (§4.2, §8 A9): the code picked the distillation checkpoint on the union of
  the *clients'* held-out data, a privacy leak. Here it is scored on the server's own validation split
  (``server.val_fraction``, taken from the training pool before partitioning, never from test); with that
  split it is still labelled data the server holds, which a real deployment may not have — switch it off with
  ``val_checkpoint_every: null`` (last iterate kept, as FedDF).
- **``distill_fraction``** does not apply (the selection picks from the whole pool); it must stay 1.
"""
from __future__ import annotations

import dataclasses
import warnings
import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from algorithms.base import (ClientContext, ClientUpdate, GlobalWeights, Metric, ServerContext, ServerState, Setting,
                             register, weights_for)
from algorithms.common import evaluate, set_flat_weights
from algorithms.common.params import spec
from algorithms.common.pruning import ENTROPY_MODES, KMEANS_VARIANTS, confidence_scores, select_pool
from algorithms.errors import ConfigError
from algorithms.common.evaluation import inference_slices
from algorithms.feddf import FedDF, FedDFHyperparams
from algorithms.fedprox import proximal_term

ENTROPY_SCORES = ("maxprob", "maxlogit", "entropy")
POOL_SIZINGS = ("paper", "whole")


@dataclass(frozen=True)
class SingleImageHyperparams(FedDFHyperparams):
    # FedDF's fields with the single-image code's values (docs/methods/single_image.md §4.2, §5).
    distill_lr: float = spec(5e-3, doc="η_s, server Adam learning rate (docs/methods/single_image.md §5: 5e-3; "
                                       "Table 11: "
                                       ">= 5e-2 is known bad).", gt=0)
    distill_batch_size: int = spec(512, doc="B_d, distillation batch (docs/methods/single_image.md §5: 512, or 32 in "
                                            "Tables 1, 3, 4, 6; changes passes per round 16x, §8 A24).", ge=1)
    distill_steps: Optional[int] = spec(500, doc="Distillation steps per round (docs/methods/single_image.md "
                                                 "§4.2: 500; "
                                                 "250 in Tables 5, 7, 8, 9, 11); null = distill_epochs passes.",
                                        ge=0)
    distill_fraction: float = spec(1.0, doc="Does not apply: the selection picks from the whole pool; must be 1.",
                                   gt=0, le=1)
    reset_optimizer: bool = spec(True, doc="true (default): a fresh server Adam every round, as the single-image "
                                           "code (docs/methods/single_image.md §8 A7); false: keep its moments.")
    logit_clip: Optional[float] = spec(2.5, doc="c of LN_c on training-time logits of clients and student "
                                                "(docs/methods/single_image.md §4.3: 2.5 in every run); null = "
                                                "off.", gt=0)
    fedavg_init_every: int = spec(5, doc="P = 100/ρ: FedAvg warm start in rounds r <= 1 and r ≡ 0 (mod P) "
                                         "(docs/methods/single_image.md §4.1: ρ = 20 %, P = 5; 1 = every "
                                         "round).", ge=1)
    val_checkpoint_every: Optional[int] = spec(50, doc="Keep the distillation checkpoint with the best server "
                                                       "validation accuracy, scored after step 1, every this many "
                                                       "steps and at the end (docs/methods/single_image.md §4.2: 50); "
                                                       "null "
                                                       "= the last iterate (no labelled server data needed).", ge=1)
    # Selection (docs/methods/single_image.md §3).
    num_distill: int = spec(5000, doc="s, the selected crops per round that K-means sizing aims at "
                                      "(docs/methods/single_image.md §2.4: 5000).", ge=1)
    entropy: bool = spec(True, doc="Entropy (confidence) pruning after K-means (docs/methods/single_image.md §3.3).")
    entropy_rate: float = spec(0.9, doc="e, share of each predicted class removed by entropy pruning "
                                        "(docs/methods/single_image.md §3.3: 0.9; Table 9b: 0.1, 0.5, "
                                        "0.9).", ge=0, lt=1)
    entropy_mode: str = spec("top", doc="H^E: top (remove the most confident, the paper's) | bottom | random "
                                        "(docs/methods/single_image.md §3.3).", choices=ENTROPY_MODES)
    entropy_score: str = spec("maxprob", doc="Confidence score: maxprob (max softmax, the code's and Alg. 3's) | "
                                             "maxlogit (Eq. 4 as written) | entropy (negated Shannon entropy) "
                                             "(docs/methods/single_image.md §8 A2).", choices=ENTROPY_SCORES)
    entropy_random_as_in_code: bool = spec(False, doc="random removal draws with replacement, as the code (may "
                                                      "remove fewer, docs/methods/single_image.md §3.3).")
    kmeans: bool = spec(True, doc="K-means class balancing before entropy pruning (docs/methods/single_image.md "
                                  "§3.2).")
    pool_sizing: str = spec("paper", doc="Which crops the selection starts from. paper: as the paper's arms at "
                                         "equal s (docs/methods/single_image.md §2.4, §3.4, Table 5): the first s "
                                         "crops "
                                         "with neither stage (its 'no selection' pool), the first ⌊s/(1 − e)⌋ "
                                         "with entropy pruning only, the whole pool with K-means. whole: always "
                                         "the whole pool (neither stage then distils on all of it).",
                            choices=POOL_SIZINGS)
    kmeans_k: int = spec(1000, doc="K, clusters (docs/methods/single_image.md §5: 1000; Table 8a: 5–1000).", ge=1)
    kmeans_factor: float = spec(1.0, doc="F^K, per-class balancing factor (docs/methods/single_image.md §3.2: 1.0).",
                                ge=0, le=1)
    kmeans_variant: str = spec("hard", doc="H^K: easy (nearest to their centroid) | hard (farthest, the paper's) | "
                                           "mixed (kmeans_mix % easy) (docs/methods/single_image.md §3.2).",
                               choices=KMEANS_VARIANTS)
    kmeans_mix: float = spec(50.0, doc="mixed: percent of each quota taken from the easy end "
                                       "(docs/methods/single_image.md §3.2: 50).", ge=0, le=100)
    kmeans_keep_ratio: Optional[float] = spec(None, doc="s_K = ⌊ratio·N_pool⌋ instead of the paper's ⌊s/(1 − e)⌋ "
                                                        "(docs/methods/single_image.md §3.4, §9), so K-means acts in "
                                                        "the "
                                                        "main configuration; null = the paper's sizing.", gt=0, le=1)
    easy_as_in_code: bool = spec(False, doc="easy behaves as the code's (mixed 50-50, docs/methods/single_image.md "
                                            "§3.2, "
                                            "§8 A4); false = easy as the paper (100 % nearest).")
    client_mu: float = spec(0.0, doc="μ of FedProx clients (docs/methods/single_image.md §4.5: 2.0 in "
                                     "'Ours w/ FedProx'); "
                                     "0 = plain local training.", ge=0)
    fedprox_as_in_code: bool = spec(False, doc="the code's FedProx penalty (μ/2)(Σ(θ − θ_t))² instead of "
                                               "(μ/2)‖θ − θ_t‖² (docs/methods/single_image.md §8 A13).")

    def validate(self, path: str) -> None:
        super().validate(path)
        if self.distill_fraction != 1.0:
            raise ConfigError(f"{path}.distill_fraction" if path else "distill_fraction",
                              f"must be 1 for single_image (the selection picks from the whole pool; set "
                              f"num_distill, entropy_rate or kmeans_keep_ratio), got {self.distill_fraction}")


@torch.no_grad()
def embed_and_predict(model, x: torch.Tensor, batch_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(z, logits) of every input in one batched eval-mode pass: z = ``model.features(x)`` (the penultimate
    embedding after global pooling, docs/methods/single_image.md §3.1) and the head's raw logits, float32 on the
    CPU."""
    model.eval()
    features, logits = [], []
    for rows in inference_slices(model, x, batch_size):
        z = model.features(x[rows])
        features.append(z.float().cpu())
        logits.append(model.head(z).float().cpu())
    return torch.cat(features), torch.cat(logits)


@register
class SingleImage(FedDF):
    name = "single_image"
    Hyperparams = SingleImageHyperparams
    metrics = FedDF.metrics + (
        Metric("selection_pool", "max", "crops the selection started from: the pool, or its first s or "
                                        "⌊s/(1 − e)⌋ crops under pool_sizing: paper without K-means"),
        Metric("selection_kmeans_target", "max", "s_K, the K-means stage's target size (0 with K-means off)"),
        Metric("selection_kmeans_noop", "max", "1 when K-means was skipped because s_K covers the whole pool"),
        Metric("selection_after_kmeans", "max", "crops left after K-means class balancing"),
        Metric("selection_after_entropy", "max", "crops left after entropy pruning: the distillation set"),
        Metric("selection_classes", "max", "C, the classes the selection model predicts on the selected crops"),
        Metric("selection_class_share_max", "min", "the largest predicted class's share of the selected crops"),
    )

    # --- configuration ------------------------------------------------------------------------------------------
    def check_setting(self, setting: Setting) -> None:
        hp = self.hp
        if setting.public_source == "none":
            raise ConfigError("public.source", "single_image distils on a public pool: set public.source: image "
                                               "(the patch pool of one photo, docs/methods/single_image.md §2)")
        if self.hp.val_checkpoint_every is not None and not setting.server_validation:
            raise ConfigError("algorithm.val_checkpoint_every", "needs the server's validation split: set "
                                                                "server.val_fraction > 0, or null to keep the "
                                                                "last iterate")
        pool = setting.public_size
        if pool is None:
            return
        candidates = self.candidate_count(pool)
        if hp.pool_sizing == "paper" and not hp.kmeans and candidates > pool:
            need = "s" if not hp.entropy else f"⌊s/(1 − e)⌋ = ⌊{hp.num_distill}/(1 − {hp.entropy_rate:g})⌋"
            raise ConfigError("algorithm.num_distill", f"the selection starts from the first {need} = {candidates} "
                                                       f"crops (pool_sizing: paper), the pool has {pool} "
                                                       f"(public.size); allowed: a pool of at least {candidates}")
        if not hp.kmeans:
            return
        if hp.kmeans_k > pool:
            raise ConfigError("algorithm.kmeans_k", f"K = {hp.kmeans_k} clusters is more than the pool of {pool} "
                                                    f"crops (public.size); allowed: 1..{pool}")
        if hp.kmeans_keep_ratio is None and hp.num_distill > pool:
            raise ConfigError("algorithm.num_distill", f"s = {hp.num_distill} selected crops is more than the pool "
                                                       f"of {pool} (public.size); allowed: 1..{pool}")

    def candidate_count(self, pool: int) -> int:
        """How many crops (a prefix of the pool) the selection starts from (``pool_sizing``)."""
        hp = self.hp
        if hp.pool_sizing == "whole" or hp.kmeans:
            return pool
        if hp.entropy and hp.entropy_rate > 0:
            return int(math.floor(hp.num_distill / (1.0 - hp.entropy_rate) + 1e-9))
        return hp.num_distill

    def client_stage_fields(self) -> dict:
        return {"procedure": self.name, **dataclasses.asdict(self.hp)}  # clients predict on the selected crops

    # --- client -------------------------------------------------------------------------------------------------
    def proximal_term(self, client: ClientContext, payload: dict):
        return proximal_term(client.model, self.hp.client_mu, square_of_sum=self.hp.fedprox_as_in_code)

    # --- server -------------------------------------------------------------------------------------------------
    def init_server_state(self, ctx: ServerContext) -> ServerState:
        state = super().init_server_state(ctx)
        state.extra["selection"] = self.select(state.weights, ctx)  # round 1: the untrained model (§8 A20)
        return state

    def distillation_indices(self, state: ServerState) -> Optional[torch.Tensor]:
        selection = state.extra.get("selection")
        return None if selection is None else selection["indices"]

    def teacher_weights(self, updates: Sequence[ClientUpdate], state: ServerState,
                        ctx: ServerContext) -> Optional[torch.Tensor]:
        """ω_k = N_k for every crop (docs/methods/single_image.md §4.2, §8 A14)."""
        n = len(updates[0].tensors["public_logits"])
        return torch.tensor([float(u.weight) for u in updates], dtype=torch.float32)[:, None].expand(-1, n)

    def aggregate(self, state: ServerState, updates: Sequence[ClientUpdate],
                  ctx: ServerContext) -> tuple[ServerState, dict]:
        new_state, metrics = super().aggregate(state, updates, ctx)
        used = state.extra.get("selection")
        if used is not None:
            metrics.update(used["metrics"])
        extra = dict(new_state.extra)
        extra["selection"] = self.select(new_state.weights, ctx)  # for the next round, with the new global model
        return dataclasses.replace(new_state, extra=extra), metrics

    def selection_architecture(self, weights: GlobalWeights, ctx: ServerContext) -> str:
        """The server model that selects: the only one, or the best on the server's validation split (ties: the
        first in order, docs/methods/single_image.md §4.6 step 1 with validation instead of test, §8 A18)."""
        if not isinstance(weights, dict) or len(weights) == 1:
            return next(iter(weights)) if isinstance(weights, dict) else ctx.architecture
        names = list(weights)
        if ctx.val_x is None or ctx.val_y is None or len(ctx.val_y) == 0:
            return names[0]
        scores = []
        for name in names:
            model = ctx.models[name]
            set_flat_weights(model, weights[name])
            scores.append(evaluate(model, ctx.val_x, ctx.val_y, prefix="val_")["val_accuracy"])
        return names[max(range(len(names)), key=lambda i: (scores[i], -i))]

    def select(self, weights: GlobalWeights, ctx: ServerContext) -> dict:
        """This round's distillation set: {"indices", "architecture", "metrics"} (module docstring)."""
        if ctx.public_x is None or len(ctx.public_x) == 0:
            raise ConfigError("public.source", "single_image distils on a public pool: set public.source: image")
        hp = self.hp
        architecture = self.selection_architecture(weights, ctx)
        model = ctx.models[architecture]
        set_flat_weights(model, weights_for(weights, architecture))
        candidates = min(self.candidate_count(len(ctx.public_x)), len(ctx.public_x))
        features, logits = embed_and_predict(model, ctx.public_x[:candidates])
        probs = torch.softmax(logits.double(), dim=1)
        with warnings.catch_warnings():  # a K-means no-op is reported as selection_kmeans_noop, every round
            warnings.simplefilter("ignore", UserWarning)
            indices, stats = select_pool(
                probs, features, num_distill=hp.num_distill, entropy_rate=hp.entropy_rate if hp.entropy else 0.0,
                entropy_mode=hp.entropy_mode, kmeans=hp.kmeans, kmeans_k=hp.kmeans_k, kmeans_factor=hp.kmeans_factor,
                kmeans_variant=hp.kmeans_variant, kmeans_keep_ratio=hp.kmeans_keep_ratio,
                easy_bug=hp.easy_as_in_code, mix_easy_pct=hp.kmeans_mix,
                seed=ctx.training_generator.initial_seed() % 2**32, generator=ctx.training_generator,
                confidence=confidence_scores(logits, hp.entropy_score),
                random_with_replacement=hp.entropy_random_as_in_code)
        indices = indices.to(torch.int64).sort().values
        counts = torch.bincount(probs.argmax(dim=1)[indices], minlength=probs.shape[1])
        metrics = {"selection_pool": float(stats["pool"]),
                   "selection_kmeans_target": float(stats["kmeans_target"] or 0),
                   "selection_kmeans_noop": float(stats["kmeans_noop"]),
                   "selection_after_kmeans": float(stats["after_kmeans"]),
                   "selection_after_entropy": float(stats["after_entropy"]),
                   "selection_classes": float((counts > 0).sum()),
                   "selection_class_share_max": float(counts.max()) / max(1, len(indices))}
        metrics.update({f"selected_class_count.{c}": float(v) for c, v in enumerate(counts.tolist())})
        return {"indices": indices, "architecture": architecture, "metrics": metrics}


__all__ = ["SingleImage", "SingleImageHyperparams", "embed_and_predict"]
