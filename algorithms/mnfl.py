"""MNFL: personalised knowledge transfer through a learned coefficient matrix c (docs/methods/mnfl.md §2, §3, §8,
§10).

Every client keeps its own model (any architecture) in ``client.state``; model parameters never leave it. The
server holds only c (N×N, ``c[m, n]`` = weight of teacher m for student n, columns on the simplex, see
:mod:`algorithms.common.coefficients`) and the clients' latest tempered soft predictions on public data, and
sends each sampled client its personalised target ``Q_n = Σ_m c[m, n] s_m`` (§2.2 step C). There is no global
model (``ServerState.weights = None``); the method is judged by :meth:`MNFL.client_evaluate` on each client's
own validation and test splits.

One platform round is one broadcast → client → aggregate exchange, so the document's two exchanges per round
(upload S, receive Q) are **pipelined with a one-round lag** (the main deviation; with full participation and the
default ``private_first: false`` it is the document's sequence shifted by half a round):

- ``broadcast`` (round t): Q_n for every sampled client n from the current c and the predictions received in
  round t−1 (teachers = the clients that sent predictions last round). Round 1 has no predictions: no targets,
  clients only train. The first targets use c_0 = uniform (§10 #11) unless ``before_distill`` stepped c already.
- ``client_update``: load the personalised model (``state["weights"]``, else ``initial_weights``) and its local
  optimiser's state (``state["optimizer"]``: momentum buffers or Adam moments carry over between the client's
  rounds; empty for the paper's plain SGD, so nothing changes there), (D) distil R
  passes over the target's public subset towards Q_n (Eq. 6; plain SGD at ``distill_lr``, BatchNorm as
  ``bn_mode``), then (A) E local epochs of private cross-entropy (Eq. 5, the runtime's local-training settings),
  then (B) upload the tempered soft predictions ``softmax(f(x̂)/T)`` (eval mode) on this round's public subset
  (``public_probs``, weight N_k). With ``after_distill_refresh`` the client also uploads its post-distillation
  predictions on the target's subset (``distilled_probs``, the second upload of §2.2's message table), taken
  right after distillation (before private training by default; at the end with ``private_first``).
- ``aggregate``: the c-step (Eq. 7, ``coefficient_step``, one step per public mini-batch of
  ``distill_batch_size``, §10 #14) and storage of the new predictions; it draws next round's public subset with
  ``ctx.training_generator``.

So in platform round t a client performs the distillation of document round t−1 followed by the private
training of document round t. Consequences: the model evaluated after round t is the model after private
training (the document's round ends with distillation); the last round's targets are never distilled on.

``private_first`` (§2.3 [REC], §9; default false): the order *within* a client's platform round.

- ``false`` (default): distil towards Q_n, then train privately, as above (and as the KT-pFL reference code,
  §11: … → distil → private training). Uploaded predictions, and so the next targets, reflect this round's
  private training, as in the document's step (B); the document's train → upload → distil order is recovered
  across two platform rounds.
- ``true``: train privately (A), then distil (D) towards the Q_n received this round, then upload (B) the
  post-distillation predictions. This is the document's order inside one client round, but because of the lag
  Q_n was built from predictions uploaded in round t−1, i.e. *before* this round's private training of every
  client, the student included (in the document Q_n comes from post-training predictions of the same round).
  The evaluated model is the distilled one (the document's round ends with distillation), the uploaded
  predictions are post-distillation ones (so the c-step of ``before_distill`` / ``after_distill_reuse`` sees
  S after distillation, and ``distilled_probs`` of ``after_distill_refresh`` come from the same final model as
  ``public_probs``, on the previous round's subset), and in round 1, which has no targets, both orders are the
  same (private training only). As with the default, the predictions uploaded in the last round never become
  targets, but the evaluated model has now distilled on the last targets it received.

``c_update_order`` (§2.3):

- ``after_distill_refresh`` (default, document order): c_{t+1} from post-distillation predictions S*; the
  c-step of document round t runs in the aggregate of platform round t+1 over the clients that distilled and
  sent ``distilled_probs``.
- ``after_distill_reuse``: the c-step uses the pre-distillation predictions the targets were built from (the
  previous round's senders, stored on the server); it runs in the next aggregate, before the new predictions
  are stored, so the targets of a round still come from the c before that step.
- ``before_distill`` (KT-pFL reference-code order): the aggregate steps c on the predictions just received,
  and the next broadcast builds targets from the new c: predictions → c-step → targets → distil → train.
  (The reference code also trains privately last, as the default ``private_first: false``.)

Client sampling (§8, §10 #27): targets for a sampled client n use only the teachers A that sent predictions
last round; with ``project_simplex`` the weights c[A, n] are renormalised over A (uniform over A if they sum to
0). A c-step over a client set P updates only the submatrix c[P, P]: its columns are renormalised over P, stepped
(regulariser pulling toward 1/|P|, simplex projection in |P| dimensions) and scaled back by their previous mass
Σ_{m∈P} c[m, n], so every column of the full c stays on the simplex and entries outside c[P, P] are untouched.
With full participation this is exactly Eq. 7 on the whole c. Without ``project_simplex`` (the faithful
unconstrained ablation) nothing is renormalised or rescaled; c then drifts off the simplex (the gradient's "+1"
term shrinks every column) and the targets are clamped at 1e-12 before the log, which with the logits form of
the teacher below amounts to distilling towards Q_n renormalised per sample.
Clients whose predictions are stale (not sent last round) are kept in ``state.extra["probs"]`` but never used
as teachers.

Other choices:

- N = Σ ``ctx.architecture_clients`` (client ids 0..N−1); c is kept in float64 on the CPU.
- Distillation loss: the shared :func:`algorithms.common.distillation.kl_soft` with the target passed as
  logits ``T·log Q`` so that its tempered softmax is exactly Q: ``KL(Q ‖ softmax(z/T))``, batch-mean (§8). kl_soft
  multiplies by T²; that is kept only with ``kd_t2_scale`` (§8's optional flag), otherwise it is divided out.
- Distillation optimiser: plain SGD (momentum 0, §3 "optimiser"), a fresh one per round; ``distill_lr`` null =
  the local learning rate (η2 = η1, §3). R passes = R·⌈|subset| / B_pub⌉ steps (§10 #17).
- ``bn_mode`` (§8 ``bn_mode_in_distill``, §9): ``train`` (default, standard practice: the student's BatchNorm uses
  batch statistics and its running statistics are updated on public batches, which matters with 2-class
  private data) or ``eval`` (BatchNorm layers in eval mode during distillation: running statistics, as left by
  private training, are used and not updated; their affine parameters and everything else still train;
  :func:`algorithms.common.distillation.distill`'s ``bn_eval``). Private training always runs in train mode,
  predictions and evaluation in eval mode.
- Public subset: ``public_size`` samples drawn without replacement per round, the same for all clients (§10 #18);
  null = the whole pool. Predictions are uploaded as float32 on the CPU.
- c-step weights p_n = N_n / Σ N (Eq. 7), from the clients' update weights.
- Metrics: ``c_self_weight`` (mean of diag c) and ``c_entropy`` (mean over columns of the entropy of column n),
  over the full c, after the round's step; ``c_steps`` (c-steps taken this round); clients report
  ``train_loss`` and, when they distilled, ``distill_loss``.
- A setting with ``public.source: none`` is refused at load (``check_setting``, naming ``public.source``).

Baselines (§5: FedMD, Sim-pFL, TopK-pFL) are subclasses in :mod:`algorithms.mnfl_baselines` that share this client
procedure, the public subset and the hyperparameters of :class:`MNFLClientHyperparams`, and replace only
:meth:`MNFL.update_coefficients` (c from a rule on the latest predictions instead of Eq. 7). pFedDF is
:mod:`algorithms.pfeddf`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from algorithms.base import (Algorithm, ClientContext, ClientUpdate, Metric, ServerContext, ServerState,
                             Setting, register)
from algorithms.common import evaluate, get_flat_weights, set_flat_weights, train_local
from algorithms.common.coefficients import (EPS, coefficient_step, personalised_targets,
                                            uniform_coefficients)
from algorithms.common.distillation import distill, distillation_loss
from algorithms.common.evaluation import inference_slices
from algorithms.common.params import spec
from algorithms.errors import ConfigError

C_UPDATE_ORDERS = ("after_distill_refresh", "after_distill_reuse", "before_distill")
BN_MODES = ("train", "eval")


@dataclass(frozen=True)
class MNFLClientHyperparams:
    """The client procedure and the public subset, shared by MNFL and its baselines (algorithms.mnfl_baselines)."""

    temperature: float = spec(1.0, doc="T, softmax temperature of uploaded predictions and of the student in "
                                        "distillation; docs/methods/mnfl.md §3: not given, sweep {1, 3, 10}", gt=0)
    distill_passes: int = spec(1, doc="R, distillation passes over the round's public subset "
                                      "(docs/methods/mnfl.md §3, §10 #17)",
                               ge=1)
    distill_lr: Optional[float] = spec(None, doc="η2, SGD learning rate of distillation (Eq. 6); null = the local "
                                                 "learning rate (docs/methods/mnfl.md §3: η2 = η1)", gt=0)
    distill_batch_size: int = spec(256, doc="B_pub, public batch size for distillation and for the c-steps "
                                            "(docs/methods/mnfl.md §3: 256)", ge=1)
    public_size: Optional[int] = spec(3000, doc="N_pub, public samples drawn per round, the same for all clients "
                                                "(docs/methods/mnfl.md §3, §10 #18: 3000); null = the whole pool",
                                      ge=1)
    kd_t2_scale: bool = spec(False, doc="Multiply the distillation KL by T² (docs/methods/mnfl.md §8's optional "
                                        "flag)")
    bn_mode: str = spec("train", doc="BatchNorm of the student during distillation (docs/methods/mnfl.md §8, §9 "
                                     "bn_mode_in_distill): train (batch statistics, running statistics updated on "
                                     "public batches) | eval (running statistics frozen, the rest trains)",
                        choices=BN_MODES)
    private_first: bool = spec(False, doc="Order within a client round (docs/methods/mnfl.md §2.3, §9): false = "
                                          "distil towards the target received this round, then train privately "
                                          "(the reference code's order); true = train privately, then distil (the "
                                          "document's order, with the target one round stale, see the module "
                                          "docstring)")


@dataclass(frozen=True)
class MNFLHyperparams(MNFLClientHyperparams):
    rho: float = spec(0.7, doc="ρ, pull of c toward 1/N (Eq. 4); docs/methods/mnfl.md §3, §10 #32: 0.7", ge=0)
    coefficient_lr: float = spec(0.01, doc="η3, learning rate of the c-step (Eq. 7); docs/methods/mnfl.md §3: 0.01",
                                 gt=0)
    lam: float = spec(1.0, doc="λ, weight of the KL term in the c-objective (Eq. 7); docs/methods/mnfl.md §3, "
                               "§10 #8: 1.0", ge=0)
    c_update_order: str = spec("after_distill_refresh", doc="When c is stepped relative to distillation "
                                                             "(docs/methods/mnfl.md §2.3)", choices=C_UPDATE_ORDERS)
    project_simplex: bool = spec(True, doc="Project each column of c onto the simplex after every c-step "
                                           "(docs/methods/mnfl.md §8 c_constraint='simplex'); false = the "
                                           "unconstrained ablation")

    def validate(self, path: str) -> None:
        where = f"{path}.coefficient_lr" if path else "coefficient_lr"
        if self.coefficient_lr * self.rho >= 1.0:
            raise ConfigError(where, f"coefficient_lr * rho = {self.coefficient_lr * self.rho:g} >= 1 makes the "
                                     "Eq. 7 step unstable; lower coefficient_lr or rho")


@register
class MNFL(Algorithm):
    """Personalised distillation towards c-weighted mixtures of the other clients' public predictions."""

    name = "mnfl"
    Hyperparams = MNFLHyperparams
    summable = False
    heterogeneous_models = True
    keeps_client_state = True
    evaluates_clients = True
    metrics = (
        Metric("c_self_weight", "max", "mean diagonal of c: how much each client listens to itself"),
        Metric("c_entropy", "max", "mean entropy (nats) of the columns of c; log N = uniform"),
        Metric("c_steps", "max", "c-steps (Eq. 7, one per public mini-batch) taken this round"),
        Metric("distill_loss", "min", "clients' mean KL(Q_n ‖ s_n) over their distillation steps"),
    )

    # --- configuration -----------------------------------------------------------------------------------------
    def check_setting(self, setting: Setting) -> None:
        if setting.public_source == "none":
            raise ConfigError("public.source", f"{self.name} distils on public data: set public.source (e.g. "
                                               "dataset, docs/methods/mnfl.md §4: MNIST for EMNIST/FMNIST, CIFAR-100 "
                                               "for "
                                               f"CIFAR-10)")

    def uploads_distilled_predictions(self) -> bool:
        """Whether clients also upload their post-distillation predictions on the target's subset (the second
        upload of §2.2, needed by the ``after_distill_refresh`` c-step)."""
        return self.hp.c_update_order == "after_distill_refresh"

    def renormalises_targets(self) -> bool:
        """Whether a student's teacher weights c[A, n] are renormalised over the teachers A that sent predictions."""
        return self.hp.project_simplex

    # --- server ------------------------------------------------------------------------------------------------
    def init_server_state(self, ctx: ServerContext) -> ServerState:
        if ctx.public_x is None or len(ctx.public_x) == 0:
            raise ValueError(f"{self.name} distils on public data: set public.source")
        n = int(sum(ctx.architecture_clients.values()))
        extra = {"c": uniform_coefficients(n, dtype=torch.float64), "probs": {}, "sizes": {}, "senders": [],
                 "pred_indices": None, "indices": self._draw_indices(ctx)}
        return ServerState(weights=None, extra=extra)

    def _draw_indices(self, ctx: ServerContext) -> Optional[torch.Tensor]:
        pool = len(ctx.public_x)
        if self.hp.public_size is None or self.hp.public_size >= pool:
            return None
        return torch.randperm(pool, generator=ctx.training_generator)[:self.hp.public_size]

    def broadcast(self, state: ServerState, sampled_clients: Sequence[int]) -> dict:
        extra = state.extra
        teachers = list(extra.get("senders", []))
        targets = {}
        if teachers:
            targets = self._targets(extra["c"], teachers, [int(k) for k in sampled_clients], extra["probs"])
        return {"targets": targets, "target_indices": extra.get("pred_indices"),
                "public_indices": extra.get("indices"), "round": state.round}

    def _targets(self, c: torch.Tensor, teachers: list[int], students: list[int], probs: dict) -> dict:
        """Q_n for every student from the teachers' predictions (§2.2 C; sampling: §8, §10 #27)."""
        union = sorted(set(teachers) | set(students))
        pos = {k: i for i, k in enumerate(union)}
        idx = torch.tensor(union)
        sub = c[idx][:, idx].clone()
        is_teacher = torch.tensor([k in set(teachers) for k in union])
        sub[~is_teacher] = 0.0
        if self.renormalises_targets():
            mass = sub.sum(dim=0, keepdim=True)
            uniform = is_teacher.to(sub.dtype).unsqueeze(1).expand_as(sub) / float(len(teachers))
            sub = torch.where(mass > 0, sub / mass.clamp_min(torch.finfo(sub.dtype).tiny), uniform)
        shape = probs[teachers[0]].shape
        s = torch.stack([probs[k] if k in pos and bool(is_teacher[pos[k]]) else torch.zeros(shape)
                         for k in union]).to(sub.dtype)
        q = personalised_targets(sub, s)
        return {k: q[pos[k]].float() for k in students}

    def aggregate(self, state: ServerState, updates: Sequence[ClientUpdate],
                  ctx: ServerContext) -> tuple[ServerState, dict[str, float]]:
        old = state.extra
        c = old["c"].clone()
        probs, sizes = dict(old.get("probs", {})), dict(old.get("sizes", {}))
        present = [u for u in updates if u is not None and "public_probs" in u.tensors]
        for u in present:
            sizes[int(u.client_id)] = float(u.weight)
        new_probs = {int(u.client_id): u.tensors["public_probs"].float().cpu() for u in present}
        metrics = self.update_coefficients(c, old, present, new_probs, sizes)
        probs.update(new_probs)
        extra = {"c": c, "probs": probs, "sizes": sizes, "senders": sorted(new_probs),
                 "pred_indices": old.get("indices"), "indices": self._draw_indices(ctx)}
        return ServerState(weights=None, extra=extra), {**coefficient_metrics(c), **metrics}

    def update_coefficients(self, c: torch.Tensor, old: dict, present: Sequence[ClientUpdate], new_probs: dict,
                            sizes: dict) -> dict[str, float]:
        """Update c in place for the next round's targets; return the round's own metrics besides
        :func:`coefficient_metrics`. ``old`` is the previous server state's ``extra`` (its ``probs`` and
        ``senders`` are the predictions this round's targets were built from), ``new_probs`` the predictions just
        received (client id -> [M, C]), ``sizes`` the clients' N_k. MNFL: the Eq. 7 c-step in the order
        ``c_update_order`` (§2.3); the baselines recompute c from ``new_probs`` by a rule."""
        order = self.hp.c_update_order
        steps = 0
        if order == "after_distill_refresh":
            distilled = {int(u.client_id): u.tensors["distilled_probs"] for u in present
                         if "distilled_probs" in u.tensors}
            steps = self._c_step(c, distilled, sizes)
        elif order == "after_distill_reuse":
            senders = list(old.get("senders", []))
            if senders:  # targets were built from these senders' predictions, so clients distilled
                steps = self._c_step(c, {k: old["probs"][k] for k in senders}, sizes)
        elif order == "before_distill":
            steps = self._c_step(c, new_probs, sizes)
        return {"c_steps": float(steps)}

    def _c_step(self, c: torch.Tensor, preds: dict, sizes: dict) -> int:
        """Eq. 7 on the submatrix c[P, P] of the clients P in ``preds`` (in place); the number of steps taken."""
        if not preds:
            return 0
        ids = sorted(preds)
        idx = torch.tensor(ids)
        sub = c[idx][:, idx]
        mass = sub.sum(dim=0, keepdim=True)
        if self.hp.project_simplex:
            uniform = torch.full_like(sub, 1.0 / len(ids))
            sub = torch.where(mass > 0, sub / mass.clamp_min(torch.finfo(sub.dtype).tiny), uniform)
        s = torch.stack([preds[k] for k in ids]).to(c.dtype)
        weights = [sizes.get(k, 0.0) for k in ids]
        weights = weights if sum(weights) > 0 else None
        steps = 0
        for start in range(0, s.shape[1], self.hp.distill_batch_size):
            sub = coefficient_step(sub, s[:, start:start + self.hp.distill_batch_size], weights,
                                   lr=self.hp.coefficient_lr, lam=self.hp.lam, rho=self.hp.rho,
                                   project=self.hp.project_simplex)
            steps += 1
        if self.hp.project_simplex:
            sub = sub * mass
        c[idx.unsqueeze(1), idx.unsqueeze(0)] = sub
        return steps

    # --- client ------------------------------------------------------------------------------------------------
    def _load(self, client: ClientContext) -> None:
        weights = client.state.get("weights", client.initial_weights)
        if weights is None:
            raise ValueError("mnfl needs client.initial_weights for a client's first visit")
        set_flat_weights(client.model, weights)

    def _public(self, client: ClientContext, indices: Optional[torch.Tensor]) -> torch.Tensor:
        if client.public_x is None or len(client.public_x) == 0:
            raise ValueError("mnfl distils on public data: set public.source")
        x = client.public_x if indices is None else client.public_x[indices.to(client.public_x.device)]
        return x.to(client.device)

    @torch.no_grad()
    def _predict(self, model, x: torch.Tensor) -> torch.Tensor:
        """softmax(f(x)/T) in eval mode, float32 on the CPU (§2.2 B, §8)."""
        model.eval()
        out = [F.softmax(model(x[rows]).float() / self.hp.temperature, dim=1).cpu()
               for rows in inference_slices(model, x)]
        return torch.cat(out)

    def _distill(self, payload: dict, client: ClientContext, tensors: dict, metrics: dict) -> None:
        """(D) R passes of Eq. 6 towards this client's target Q_n, if the payload holds one (in place)."""
        target = payload.get("targets", {}).get(client.client_id)
        if target is None:
            return
        model = client.model
        x = self._public(client, payload.get("target_indices"))
        if len(target) != len(x):
            raise ValueError(f"target of client {client.client_id} has {len(target)} rows for {len(x)} public "
                             f"samples")
        t = self.hp.temperature
        # teacher passed as logits T·log Q: kl_soft's softmax(logits / T) is then exactly Q
        teacher = (t * target.clamp_min(EPS).log()).to(client.device)
        kl = distillation_loss("kl_soft", t, "logits")
        scale = 1.0 if self.hp.kd_t2_scale else 1.0 / t ** 2
        lr = self.hp.distill_lr if self.hp.distill_lr is not None else client.training.lr
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        steps = self.hp.distill_passes * math.ceil(len(x) / self.hp.distill_batch_size)
        loss = distill(model, x, teacher, lambda s, q: kl(s, q) * scale, optimizer, steps,
                       self.hp.distill_batch_size, client.generator, bn_eval=self.hp.bn_mode == "eval")
        metrics["distill_loss"] = loss / (scale * t ** 2)  # the plain KL(Q ‖ s), whatever the scaling
        if self.uploads_distilled_predictions():
            tensors["distilled_probs"] = self._predict(model, x)

    def client_update(self, payload: dict, client: ClientContext) -> ClientUpdate:
        self._load(client)
        model = client.model
        tensors, metrics = {}, {}
        optimizer_state = client.state.setdefault("optimizer", {})  # the client's own local optimiser state

        def train() -> None:
            metrics["train_loss"] = train_local(model, client.x, client.y, client.training, client.generator,
                                                optimizer_state=optimizer_state,
                                                augment_generator=client.augment_generator)

        if self.hp.private_first:
            train()
            self._distill(payload, client, tensors, metrics)
        else:
            self._distill(payload, client, tensors, metrics)
            train()
        client.state["weights"] = get_flat_weights(model)
        tensors["public_probs"] = self._predict(model, self._public(client, payload.get("public_indices")))
        return ClientUpdate(weight=float(client.num_samples), tensors=tensors, metrics=metrics,
                            architecture=client.architecture, client_id=client.client_id)

    def report_arrays(self, state: ServerState) -> dict[str, torch.Tensor]:
        """The coefficient matrix c (c[m, n]: weight of teacher m, row, for student n, column), logged by the
        platform as a heat-map every ``tracking.arrays_every`` rounds and at the end."""
        return {"coefficients": state.extra["c"]}

    def client_evaluate(self, payload: dict, client: ClientContext) -> dict[str, float]:
        self._load(client)
        scores = {}
        for prefix, x, y in (("val_", client.val_x, client.val_y), ("test_", client.test_x, client.test_y)):
            if x is not None and y is not None and len(y) > 0:
                scores.update(evaluate(client.model, x.to(client.device), y.to(client.device), prefix=prefix))
        return scores


def coefficient_metrics(c: torch.Tensor) -> dict[str, float]:
    """``c_self_weight`` (mean diagonal) and ``c_entropy`` (mean column entropy, nats) of c."""
    p = c.clamp_min(0.0)
    entropy = -(torch.special.xlogy(p, p)).sum(dim=0)
    return {"c_self_weight": float(torch.diagonal(c).mean()), "c_entropy": float(entropy.mean())}


__all__ = ["BN_MODES", "C_UPDATE_ORDERS", "MNFL", "MNFLClientHyperparams", "MNFLHyperparams", "coefficient_metrics"]
