"""FedAUX: certainty-weighted ensemble distillation with (ε, δ)-DP scoring (Sattler et al., TNNLS 2021;
docs/methods/fedaux.md §0, §3.2–§3.3, §4).

The method, in a few lines: FedAUX is FedDF (:mod:`algorithms.feddf`: FedAvg warm start, then distillation of
every server model on unlabelled public data from the logit ensemble of the round's clients) with the ensemble
weighted per client and per sample by a certainty score s_i(x) (Eq. 7). Once per client (Alg. 1), client i
fits an ℓ2-regularised logistic regression w_i* separating the frozen features h_0(x) of its private data
(t = +1) from those of public negatives D⁻ (t = −1) (Eqs. 9–10), releases ŵ_i = w_i* + N(0, σ²I) with
σ² = 8 ln(1.25/δ)/(ε²λ²N²), N = |D_i| + |D⁻| (Theorem 1, §4), and the server scores every distillation sample
once: s_i(x) = sigmoid(⟨ŵ_i, h_0^{R[i]}(x)/γ_i⟩) + ξ (Eq. 11). The teacher of each round is then
softmax(Σ_i s_i(x) f_i(x) / Σ_j s_j(x)) over the round's clients (Eq. 7, FedDF's ``weighted_logit_ensemble``).

Variants and how to get them:

- **FedAUX**: ``algorithm.name: fedaux`` together with the platform's ``pretrain:`` section (SimCLR features
  for h_0 and for the models' initialisation). Without ``pretrain:`` it runs as "FedAUX without pre-training":
  h_0 is then the seeded *random* initialisation of the feature extractor, and scores are computed on
  random features.
- **FedDF**: ``feddf``. **FedDF+P / FedAvg+P**: ``feddf`` / ``fedavg`` with the platform's ``pretrain:`` section.
- **One-shot** (Table III): ``rounds: 1, clients.local_epochs: 40`` (and full participation).
- **Model-heterogeneous** (the "mixed" setting, Alg. 1/2 with prototypes): ``model.architectures``; every
  client is scored with the h_0 of its own architecture R[i], and every server model distils from the
  weighted ensemble of all the round's clients (FedDF's behaviour).
- **Non-private arm**: ``epsilon: .inf`` (σ = 0, ŵ_i = w_i* exactly). **λ → ∞** collapses every score to
  ≈ 0.5 + ξ, i.e. FedDF's uniform teacher (§4 (b)).

Deviations and choices (§10–§12):

- **h_0 (Alg. 1)** is the model's ``features`` submodule (every model is a ``Classifier``: f = head ∘ features)
  with the architecture's *initial* weights: on a client, ``ClientContext.initial_weights`` loaded into a copy
  of ``client.model`` (the shared model itself is never touched); on the server, ``ctx.models[arch]`` as
  ``init_server_state`` sees it (freshly built, i.e. initial; SimCLR-pre-trained when ``pretrain:`` is set).
  Features are taken in eval mode. Scores come from this frozen h_0 and are **never recomputed** from the
  evolving models (§3.2 P4).
- **γ normalisation** (``feature_norm``, §11 item 2): ``public_clip`` (default, the method page's [rec]):
  γ = max ‖h_0(x)‖ over the public negatives D⁻ only, and h̃ = h/max(γ, ‖h‖) per sample, for fitting and for
  scoring; γ is then public and Theorem 1 holds as stated. ``paper_max``: the paper's γ_i = max norm over
  D_i ∪ D⁻ and h̃ = h/γ_i, to reproduce the paper; γ_i is sent in the clear and is *not* covered by (ε, δ)
  (see :func:`algorithms.common.certainty.normalisation_scale`). Either way γ_i travels with ŵ_i.
- **Negatives D⁻ = the tail of the public pool**: the last ⌊negatives_fraction·|D_aux|⌋ samples, while FedDF
  distils on the first ⌊distill_fraction·|D_aux|⌋; the two are disjoint (validated: distill_fraction +
  negatives_fraction ≤ 1; §10 #3 [rec]). ``public.split: random`` makes the split random (P0).
- **Objective** exactly the paper's (§10 #1, §11 items 1, 3, 4): mean logistic loss with the corrected
  sign l(z) = log(1 + e^{−z}), t = +1 local / −1 negatives, (λ/2)‖w‖², **no bias term**, solved to convergence
  in float64 (:func:`~algorithms.common.certainty.fit_scoring_weights`). Not the code's sklearn objective.
- **One release per client.** Clients solve and release on every participation (they keep no state), but the
  server records the **first** release it receives from each client (``state.extra["releases"]``) and
  ignores later ones, so the scoring costs exactly (ε, δ) per client, as in the paper's preparation phase.
  The kept noise therefore comes from the (noise seed, first participation round, client) stream of
  ``ClientContext.noise_generator``. Clients with no training data release nothing (they are left out of the
  teacher anyway).
- **Caching** (§12): the non-private solve (w_i*, γ_i, N) goes through ``client.memo("fedaux_scoring",
  {lam, feature_norm, negatives_fraction}, …)``; the noise is drawn outside it, so a sweep over (ε, δ) redraws
  only the noise (a standard normal scaled by σ: for one seed (ŵ − w*)/σ is the same for every ε). The server's
  h_0 features of D_distill go through ``ctx.memo("fedaux_distill_features", {distill_fraction}, …)`` and are
  kept in ``state.extra["distill_features"]`` (float32, [|D_distill|, H] per architecture; they are part of
  the checkpoint). Scores ``state.extra["scores"][client_id]`` ([|D_distill|], float64) are computed once,
  when a client's release first arrives.
- **Privacy accounting** covers the scoring release only (§4): the per-round model updates are not
  privatised, as in the paper. The Gaussian-mechanism calibration is classic (proved for ε < 1; larger ε is
  accepted, §11 item 6).
- Everything else (teacher on logits, BN mode, optimiser persistence, one distillation epoch, …) is FedDF's.

Metrics (declared): FedDF's, plus ``privacy_epsilon`` and ``privacy_delta`` (the configured constants),
``privacy_sigma`` (mean σ over the releases kept so far) and ``mean_certainty`` (mean score of the round's
teacher clients over D_distill).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import nn

from algorithms.base import ClientContext, ClientUpdate, Metric, ServerContext, ServerState, register
from algorithms.common import set_flat_weights
from algorithms.common.certainty import (DEFAULT_XI, FEATURE_NORM_MODES, certainty_scores, fit_scoring_weights,
                                         normalisation_scale, normalise_features, privatise_scoring_weights,
                                         public_normalisation_scale)
from algorithms.common.params import spec
from algorithms.errors import ConfigError
from algorithms.common.evaluation import inference_slices
from algorithms.feddf import FedDF, FedDFHyperparams

SCORING_STAGE = "fedaux_scoring"
FEATURES_STAGE = "fedaux_distill_features"


@dataclass(frozen=True)
class FedAUXHyperparams(FedDFHyperparams):
    lam: float = spec(0.1, doc="λ, ℓ2 regularisation of the scoring logistic regression in mean-loss units "
                               "(docs/methods/fedaux.md §3.2 Eq. 9, §5: 0.1; the authors' exec.sh used 0.01). "
                               "Larger λ: "
                               "less DP noise relative to w*, but scores collapse towards 0.5 (uniform FedDF).",
                      gt=0)
    epsilon: float = spec(0.1, doc="ε of the (ε, δ)-DP release of the scoring weights (docs/methods/fedaux.md "
                                   "§4: 0.1); "
                                   ".inf = non-private (σ = 0).", gt=0, allow_inf=True)
    delta: float = spec(1e-5, doc="δ of the (ε, δ)-DP release (docs/methods/fedaux.md §4: 1e-5).", gt=0, lt=1)
    xi: float = spec(DEFAULT_XI, doc="ξ, added to every certainty score so that Σ_j s_j(x) > 0 "
                                     "(docs/methods/fedaux.md §3.2 Eq. 11: 1e-8).", ge=0)
    feature_norm: str = spec("public_clip", doc="γ normalisation of h_0 features (docs/methods/fedaux.md "
                                                "§11 item 2): "
                                                "public_clip (γ from D⁻ only, per-sample clipping; DP-sound, "
                                                "[rec]) | paper_max (γ_i = max norm over D_i ∪ D⁻, the paper's).",
                             choices=FEATURE_NORM_MODES)
    negatives_fraction: float = spec(0.2, doc="Share of the public pool used as negatives D⁻: its last "
                                              "⌊fraction·|D_aux|⌋ samples (docs/methods/fedaux.md §3.2 P0: 0.2); "
                                              "must "
                                              "not overlap D_distill: distill_fraction + negatives_fraction ≤ 1.",
                                     gt=0, lt=1)

    def validate(self, path: str) -> None:
        super().validate(path)

        def where(name: str) -> str:
            return f"{path}.{name}" if path else name

        if not math.isfinite(self.lam):
            raise ConfigError(where("lam"), f"the regularisation strength λ must be a finite number > 0, "
                                            f"got {self.lam!r}")
        if math.isnan(self.epsilon) or not self.epsilon > 0:
            raise ConfigError(where("epsilon"), f"must be > 0 (or .inf for no privacy), got {self.epsilon!r}")
        if not 0 < self.delta < 1:
            raise ConfigError(where("delta"), f"must be in the open interval (0, 1), got {self.delta!r}")
        if not math.isfinite(self.xi) or self.xi < 0:
            raise ConfigError(where("xi"), f"must be finite and >= 0, got {self.xi!r}")
        if self.distill_fraction + self.negatives_fraction > 1 + 1e-12:
            raise ConfigError(where("negatives_fraction"),
                              f"the negatives D⁻ (last {self.negatives_fraction:g} of the public pool) would overlap "
                              f"D_distill (first {self.distill_fraction:g}): distill_fraction + negatives_fraction "
                              f"must be <= 1, got {self.distill_fraction + self.negatives_fraction:g}")


@torch.no_grad()
def extract_features(features: nn.Module, x: torch.Tensor, device: torch.device,
                     batch_size: int | None = None) -> torch.Tensor:
    """h_0(x) in eval mode, batched, float32 on the CPU, [N, H]; in batches of ``batch_size`` (default:
    :func:`~algorithms.common.evaluation.inference_batch_size`)."""
    features.eval()
    out = [features(x[rows].to(device)).flatten(1).float().cpu() for rows in inference_slices(features, x, batch_size)]
    if not out:
        raise ValueError("no samples to extract features from")
    return torch.cat(out)


def _feature_module(model: nn.Module) -> nn.Module:
    features = getattr(model, "features", None)
    if not isinstance(features, nn.Module):
        raise TypeError(f"fedaux scores clients on the model's feature extractor: {type(model).__name__} has no "
                        f"`features` submodule (use a Classifier from algorithms.models)")
    return features


@register
class FedAUX(FedDF):
    name = "fedaux"
    Hyperparams = FedAUXHyperparams
    metrics = FedDF.metrics + (
        Metric("privacy_epsilon", "min", "ε of the (ε, δ)-DP release of each client's scoring weights (inf: no "
                                         "privacy)", setting=True),
        Metric("privacy_delta", "min", "δ of the (ε, δ)-DP release of each client's scoring weights",
               setting=True),
        Metric("privacy_sigma", "max", "σ of the Gaussian noise on the scoring weights, mean over the releases "
                                       "kept so far (0 for ε = inf)"),
        Metric("mean_certainty", "max", "mean certainty score s_i(x) of the round's teacher clients over "
                                        "D_distill"),
    )

    # --- configuration-derived values --------------------------------------------------------------------------
    def client_stage_fields(self) -> dict:
        """Clients train as FedDF's and also release ŵ_i, which depends on the scoring hyperparameters."""
        hp = self.hp
        return {"procedure": "fedaux_clients", "version": 1, "logit_clip": hp.logit_clip, "lam": hp.lam,
                "epsilon": hp.epsilon, "delta": hp.delta, "feature_norm": hp.feature_norm,
                "negatives_fraction": hp.negatives_fraction}

    def negatives_slice(self, pool: int) -> slice:
        """D⁻: the last ⌊negatives_fraction·pool⌋ public samples (at least 1), disjoint from D_distill."""
        m = max(1, int(math.floor(self.hp.negatives_fraction * pool + 1e-9)))
        if pool <= 0 or self.distillation_size(pool) + m > pool:
            raise ValueError(f"the public pool ({pool} samples) is too small for disjoint D_distill "
                             f"({self.distillation_size(pool)}) and negatives ({m})")
        return slice(pool - m, pool)

    @property
    def clip(self) -> bool:
        return self.hp.feature_norm == "public_clip"

    # --- client (Alg. 1, P2–P3) ----------------------------------------------------------------------------------
    def scoring_solution(self, client: ClientContext) -> tuple[torch.Tensor, float, int]:
        """(w_i*, γ_i, N): the non-private scoring solve on h_0(D_i) vs h_0(D⁻), float64. Deterministic given
        the data, h_0 and (λ, feature_norm, negatives_fraction): what ``client.memo`` caches."""
        if client.initial_weights is None:
            raise ValueError("fedaux needs ClientContext.initial_weights (the architecture's initial weights) "
                             "to build the frozen feature extractor h_0")
        public_x = client.public_x
        negatives = public_x[self.negatives_slice(len(public_x))]
        h0 = copy.deepcopy(client.model)
        set_flat_weights(h0, client.initial_weights)
        features = _feature_module(h0)
        pos = extract_features(features, client.x, client.device).to(torch.float64)
        neg = extract_features(features, negatives, client.device).to(torch.float64)
        if self.hp.feature_norm == "public_clip":
            gamma = public_normalisation_scale(neg)
        else:
            gamma = normalisation_scale(pos, neg)
        pos = normalise_features(pos, gamma, clip=self.clip)
        neg = normalise_features(neg, gamma, clip=self.clip)
        w = fit_scoring_weights(pos, neg, self.hp.lam)
        return w, float(gamma), int(pos.shape[0] + neg.shape[0])

    def client_update(self, payload: dict, client: ClientContext) -> ClientUpdate:
        update = super().client_update(payload, client)
        if client.num_samples == 0:
            return update  # nothing to score; such clients never join the teacher
        if client.public_x is None or len(client.public_x) == 0:
            raise ValueError("fedaux needs public data (negatives and distillation set): set public.source")
        hp = self.hp
        key = {"lam": hp.lam, "feature_norm": hp.feature_norm, "negatives_fraction": hp.negatives_fraction}
        w, gamma, n = client.memo(SCORING_STAGE, key, lambda: self.scoring_solution(client))
        w_hat, sigma = privatise_scoring_weights(w, hp.lam, int(n), hp.epsilon, hp.delta, client.noise_generator)
        update.tensors["scoring_w"] = w_hat
        update.tensors["scoring_gamma"] = torch.tensor(float(gamma), dtype=torch.float64)
        update.tensors["scoring_sigma"] = torch.tensor(float(sigma), dtype=torch.float64)
        return update

    # --- server (Alg. 1, P4; T) --------------------------------------------------------------------------------
    def distill_features(self, ctx: ServerContext) -> dict[str, torch.Tensor]:
        """h_0^P(D_distill) for every client architecture P, from the freshly built (initial) server models."""
        pool = len(ctx.public_x)
        x = ctx.public_x[:self.distillation_size(pool)]
        return {name: extract_features(_feature_module(ctx.models[name]), x, ctx.device)
                for name in sorted(ctx.architecture_clients)}

    def init_server_state(self, ctx: ServerContext) -> ServerState:
        if ctx.public_x is None or len(ctx.public_x) == 0:
            raise ValueError("fedaux needs public data (negatives and distillation set): set public.source")
        self.negatives_slice(len(ctx.public_x))  # refuses a pool too small for disjoint sets
        state = super().init_server_state(ctx)  # before anything trains: ctx.models hold the initial weights
        features = ctx.memo(FEATURES_STAGE, {"distill_fraction": self.hp.distill_fraction},
                            lambda: self.distill_features(ctx))
        state.extra.update(distill_features=features, scores={}, releases={})
        return state

    def record_releases(self, state: ServerState, updates: Sequence[ClientUpdate]) -> ServerState:
        """A state whose ``releases``/``scores`` hold the first release of every client seen so far (new dicts;
        ``state`` is not modified). Later releases of a client are ignored."""
        extra = dict(state.extra)
        features = extra.get("distill_features")
        if features is None:
            raise ValueError("fedaux's server state has no distill_features: build it with init_server_state")
        releases, scores = dict(extra.get("releases", {})), dict(extra.get("scores", {}))
        for u in updates:
            if u.weight <= 0 or "scoring_w" not in u.tensors:
                continue
            cid = int(u.client_id)
            if cid < 0:
                raise ValueError("fedaux needs each update's client_id (one update per client)")
            if cid in releases:
                continue
            architecture = u.architecture
            if not architecture and len(features) == 1:  # standalone use: an update without its architecture
                architecture = next(iter(features))
            if architecture not in features:
                raise ValueError(f"no h_0 features for architecture {architecture!r} (have {sorted(features)})")
            w_hat = u.tensors["scoring_w"]
            gamma = float(u.tensors["scoring_gamma"])
            releases[cid] = {"w": w_hat.detach().cpu().clone(), "gamma": gamma, "architecture": architecture,
                             "sigma": float(u.tensors.get("scoring_sigma", torch.tensor(0.0)))}
            scores[cid] = certainty_scores(w_hat.detach().cpu(), features[architecture], gamma, self.hp.xi,
                                           clip=self.clip)
        extra.update(releases=releases, scores=scores)
        return ServerState(weights=state.weights, round=state.round, optimizer=state.optimizer, extra=extra)

    def teacher_weights(self, updates: Sequence[ClientUpdate], state: ServerState,
                        ctx: ServerContext) -> Optional[torch.Tensor]:
        """s_i(x) on D_distill for the round's clients, in update order: [K, |D_distill|] (Eq. 7 weights)."""
        scores = state.extra.get("scores", {})
        missing = [u.client_id for u in updates if u.client_id not in scores]
        if missing:
            raise ValueError(f"no certainty scores for clients {missing}: their updates carried no scoring release")
        return torch.stack([scores[u.client_id] for u in updates])

    def aggregate(self, state: ServerState, updates: Sequence[ClientUpdate],
                  ctx: ServerContext) -> tuple[ServerState, dict]:
        state = self.record_releases(state, updates)
        new_state, metrics = super().aggregate(state, updates, ctx)
        hp = self.hp
        releases = state.extra["releases"]
        metrics.update(privacy_epsilon=float(hp.epsilon), privacy_delta=float(hp.delta))
        if releases:
            metrics["privacy_sigma"] = sum(r["sigma"] for r in releases.values()) / len(releases)
        active = [u.client_id for u in updates if u.weight > 0 and u.client_id in state.extra["scores"]]
        if active:
            metrics["mean_certainty"] = float(torch.stack([state.extra["scores"][c] for c in active]).mean())
        return new_state, metrics


__all__ = ["FedAUX", "FedAUXHyperparams", "extract_features"]
