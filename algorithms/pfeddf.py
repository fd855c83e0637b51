"""pFedDF: FedDF judged per client after local fine-tuning, MNFL's personalised baseline (docs/methods/mnfl.md §5,
§10 #29).

§5: "start from FedDF's fused prototype models at the last round. Each client then fine-tunes its prototype on its
private data for 'several' epochs" (the footnote's "pFedD" is a typo). Training is :class:`algorithms.feddf.FedDF`'s,
unchanged (clients train from their architecture's server model θ^P and send Δ_k and public logits; the server
warm-starts each θ^P by FedAvg within the architecture and distils it on the ensemble of all clients' logits,
see that module's docstring). What is new is how the method is judged:

- ``evaluates_clients = True``: in every round, after ``client_update``, :meth:`PFedDF.client_evaluate` copies the
  client's *own architecture's* server model θ^P from the round's payload, fine-tunes the copy on the client's
  private training split for ``finetune_epochs`` = E_ft epochs (``algorithms.common.train_local`` with the
  client's local-training settings ``client.training`` — optimiser, learning rate, batch size, momentum, weight
  decay — only the epoch count replaced, batch order from ``client.generator``; cross-entropy, with LN_c when
  ``logit_clip`` is set, as FedDF's local training), and scores it on the client's own validation and test
  splits. The fine-tuned copy is **thrown away after scoring**: it never reaches the server, the client's next
  round or anything ``client_update`` returned, so FedDF's training trajectory is exactly FedDF's and the score
  of round t is what pFedDF would report if training stopped there.
- "several" became **E_ft = 5** (§10 #29), configurable. ``finetune_epochs: 0`` scores the server model
  itself on each client's splits: the ``FedDF`` row of Table 1 (one global model per architecture, judged like the
  personalised methods).
- No global-model evaluation: :meth:`PFedDF.evaluation_weights` is None, so the standard ``val_*``/``test_*``
  metrics are the clients' own means (``client_val_accuracy`` etc. and their p10 are reported too), exactly as for
  ``mnfl``, ``fedmd``, ``sim_pfl`` and ``topk_pfl``: one sweep with the method as a categorical arm compares like
  with like (select on ``client_val_accuracy`` or ``val_accuracy``; report ``test_accuracy``, §4, §8
  "Evaluation").

**One-round lag.** ``client_evaluate`` only sees the payload broadcast at the start of the round, so the score
reported for round t is of the server models fused at the end of round t−1 (round 1: the initial models,
fine-tuned, i.e. local training only); the models fused in the last round are never scored. Run one round more
than the comparison needs if the last fusion must count.

**Public data** comes from the same ``public`` config section as MNFL's (``public.source``, ``public.size`` …;
``ServerContext.public_x`` on the server, ``ClientContext.public_x`` on clients); a setting without one is refused at
load (``public.source``). Following §4's settings for all methods of the heterogeneous comparison, pFedDF's
defaults differ from FedDF's (FedAUX's) in three places, each a switch:

- ``public_size`` = N_pub (default 3000, §3, §4, §10 #18): a fresh random subset of the distillation pool is drawn
  every round (server training generator; sorted indices in ``ServerState.extra["public_indices"]``, sent to the
  clients, who predict only on it, as the single-image method's selection); null = FedDF's fixed pool.
- ``distill_fraction`` = 1 (the whole public pool; FedDF keeps 0.8 for FedAUX's negatives, which do not exist
  here); the per-round subset is drawn from the first ⌊distill_fraction·|pool|⌋ samples.
- ``distill_batch_size`` = 256 (B_pub, §3, §4; FedDF: 128).

The server's distillation optimiser and its learning rate (Adam, ``distill_lr`` 5e-5, one pass per round) are
FedDF's; the document gives none for FedDF (its Appendix B is missing, §0), so sweep ``distill_lr``.

**Cost.** Every sampled client trains E_ft more epochs per round (on top of the E local epochs: +25 % client compute
at E = 20, E_ft = 5), on a deep copy of one model (memory of one more model per actor while it runs); server cost
and communication are FedDF's. ``finetune_epochs: 0`` adds only the copy and two evaluations.

Load-time checks: ``finetune_epochs`` < 0 (``algorithm.finetune_epochs``), no public data (``public.source``),
``val_checkpoint_every`` without a server validation split (``algorithm.val_checkpoint_every``); FedDF's rules
otherwise.
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from algorithms.base import ClientContext, ClientUpdate, ServerContext, ServerState, Setting, register, weights_for
from algorithms.common import evaluate, set_flat_weights, train_local
from algorithms.common.distillation import logit_norm
from algorithms.common.params import spec
from algorithms.errors import ConfigError
from algorithms.feddf import FedDF, FedDFHyperparams


@dataclass(frozen=True)
class PFedDFHyperparams(FedDFHyperparams):
    distill_batch_size: int = spec(256, doc="Server distillation batch size (docs/methods/mnfl.md §3, §4: public "
                                            "batch "
                                            "256 for all methods; FedDF's default is 128).", ge=1)
    distill_fraction: float = spec(1.0, doc="Share of the public pool distilled on: its first "
                                            "⌊fraction·|pool|⌋ samples, from which public_size draws (pFedDF: 1, "
                                            "the whole pool; FedDF keeps 0.8 for FedAUX's negatives).", gt=0, le=1)
    public_size: Optional[int] = spec(3000, doc="N_pub, public samples drawn afresh every round for the clients' "
                                                "logits and the server's distillation (docs/methods/mnfl.md §3, §4, "
                                                "§10 #18: "
                                                "3000, as MNFL); null = FedDF's fixed distillation pool.", ge=1)
    finetune_epochs: int = spec(5, doc="E_ft, epochs a copy of the client's architecture's server model is "
                                       "fine-tuned on the client's private data before it is scored on the client's "
                                       "splits (docs/methods/mnfl.md §5 'several', §10 #29: 5); 0 = plain FedDF "
                                       "scored per "
                                       "client (Table 1's FedDF row).", ge=0)


@register
class PFedDF(FedDF):
    name = "pfeddf"
    Hyperparams = PFedDFHyperparams
    evaluates_clients = True

    # --- configuration ------------------------------------------------------------------------------------------
    def check_setting(self, setting: Setting) -> None:
        if self.hp.finetune_epochs < 0:
            raise ConfigError("algorithm.finetune_epochs", f"must be >= 0, got {self.hp.finetune_epochs}")
        if setting.public_source == "none":
            raise ConfigError("public.source", "pfeddf distils on public data: set public.source (the same public "
                                               "section as mnfl's, docs/methods/mnfl.md §4)")
        if self.hp.val_checkpoint_every is not None and not setting.server_validation:
            raise ConfigError("algorithm.val_checkpoint_every", "needs the server's validation split: set "
                                                                "server.val_fraction > 0, or null")

    def client_stage_fields(self) -> dict:
        """Clients predict on the round's drawn subset: never share FedDF's cached client stage."""
        return {"procedure": self.name, **dataclasses.asdict(self.hp)}

    def evaluation_weights(self, state: ServerState):
        return None  # judged per client only (module docstring)

    # --- per-round public subset --------------------------------------------------------------------------------
    def draw_public_indices(self, ctx: ServerContext) -> Optional[torch.Tensor]:
        """Sorted pool indices of the next round's public subset, or None for the whole distillation pool."""
        if self.hp.public_size is None or ctx.public_x is None or len(ctx.public_x) == 0:
            return None
        pool = self.distillation_size(len(ctx.public_x))
        if self.hp.public_size >= pool:
            return None
        drawn = torch.randperm(pool, generator=ctx.training_generator)[:self.hp.public_size]
        return torch.sort(drawn).values

    def init_server_state(self, ctx: ServerContext) -> ServerState:
        state = super().init_server_state(ctx)
        state.extra["public_indices"] = self.draw_public_indices(ctx)
        return state

    def distillation_indices(self, state: ServerState) -> Optional[torch.Tensor]:
        return state.extra.get("public_indices")

    def aggregate(self, state: ServerState, updates: Sequence[ClientUpdate],
                  ctx: ServerContext) -> tuple[ServerState, dict]:
        new_state, metrics = super().aggregate(state, updates, ctx)
        extra = dict(new_state.extra)
        extra["public_indices"] = self.draw_public_indices(ctx)  # for the next round
        return dataclasses.replace(new_state, extra=extra), metrics

    # --- per-client judgement -----------------------------------------------------------------------------------
    def finetuned_model(self, payload: dict, client: ClientContext) -> torch.nn.Module:
        """A copy of the client's architecture's server model, fine-tuned for ``finetune_epochs`` on its data."""
        model = copy.deepcopy(client.model)
        for p in model.parameters():
            p.grad = None
        set_flat_weights(model, weights_for(payload["weights"], client.architecture))
        if self.hp.finetune_epochs > 0 and client.num_samples > 0:
            clip = self.hp.logit_clip
            loss_fn = F.cross_entropy if clip is None else (lambda z, y: F.cross_entropy(logit_norm(z, clip), y))
            training = dataclasses.replace(client.training, epochs=self.hp.finetune_epochs)
            train_local(model, client.x, client.y, training, client.generator, loss_fn=loss_fn,
                        augment_generator=client.augment_generator)
        return model

    def client_evaluate(self, payload: dict, client: ClientContext) -> dict[str, float]:
        model = self.finetuned_model(payload, client)
        scores = {}
        for prefix, x, y in (("val_", client.val_x, client.val_y), ("test_", client.test_x, client.test_y)):
            if x is not None and y is not None and len(y) > 0:
                scores.update(evaluate(model, x.to(client.device), y.to(client.device), prefix=prefix))
        return scores  # the fine-tuned copy is dropped here


__all__ = ["PFedDF", "PFedDFHyperparams"]
