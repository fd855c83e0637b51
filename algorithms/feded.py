"""FedED: one-shot federated ensemble distillation with the weighting schemes w0/w1/w2 (docs/methods/feded.md
§2.4–§2.7).

One communication round. Each client k trains its own model (any architecture) from the common
initialisation for E local epochs, then sends once (the *client stage*, cached by ``mode: one_round``):

- Z_k = softmax(f_k(x)) on the public pool D_0 (``public_probs``, [|D_0|, C]) and on the test inputs
  (``test_probs``; only for the ENSEMBLE-w* metrics, §2.7);
- its label histogram N_k^c (``label_counts``, [C]); N_k is the update's weight;
- with ``train_autoencoders``: the per-sample reconstruction MSE l_k(x) of an autoencoder trained on D_k
  (Adam, lr 1e-3, weight decay 1e-5, E_AE epochs, eval mode when scoring; §2.4, §2.5) on the public pool
  (``public_ae_loss``) and the test inputs (``test_ae_loss``).

The server (``aggregate``) takes the first |D_0| public samples (nested prefixes), forms the teacher
z_T = Σ_k ω_k ⊙ Z_k with

- ``w0``   ω_k = N_k / Σ_k' N_k'                                         (eq. 3.1)
- ``w1``   ω_k^c = N_k^c / Σ_k' N_k'^c, and 0 for a class no client holds (eq. 3.2)
- ``w2``   ω_k^j = softmax_k(−β·log l_k(x_j)) = l_k^(−β) / Σ_k' l_k'^(−β)  (eq. 3.4, normalised per sample)
- ``mean`` ω_k = 1/K                                                       (eq. 2.11, the plain average)

and trains the student (``ServerContext.model``, architecture ``model.name``, from its fresh initialisation)
with Adam on the first 80 % of those samples for a fixed number of steps of batch B_S = 50, using one of the
losses of :mod:`algorithms.common.distillation` (``mse_logits`` is the thesis's default). The student's
weights become ``ServerState.weights``, so the platform's ``test_accuracy`` is the student's (FEDED-w*).

Server metrics (``aggregate``'s second return, declared in ``FedED.metrics``):
``ensemble_accuracy`` (the configured scheme) and ``ensemble_<scheme>_accuracy`` for every scheme the client
stage supports (w0, w1, mean; w2 with autoencoders): the accuracy of the weighted ensemble itself on the test
set, ŷ = argmax_c Σ_k ω_k ⊙ softmax(f_k(x)), with w2 weighted by the AEs' losses on the test images (§2.7);
``student_train_loss``, ``student_val_agreement`` (the student's agreement with the teacher's argmax on the
held-out 20 %, logged only, as the code does), ``student_steps``, ``student_lr`` and ``distill_size`` (|D_0|).

The weighting functions (:func:`ensemble_weights` and the four per-scheme functions), the teacher and the
ensemble accuracy are standalone so tests and other methods can call them.

Deviations from the digest and choices (every documented alternative is a switch):

- **w2 is normalised per sample**, computed as softmax_k(−β·log l_k) (the digest's [rec]): the thesis formula
  (3.4) is unnormalised, but the code's MSE path divides z_T by Σ_c z_T^c, which is exactly this, and its CE
  path and the ensemble accuracy use only the argmax, which a positive per-sample scale does not change. So
  all three paths equal the code's; the raw l^(−β) would overflow float32 for l < ~1e-6.5. Losses are clamped
  at the smallest positive float64, so l = 0 cannot produce NaN. β = 0 gives the plain mean.
- **w1** uses the code's denominator Σ_k' N_k'^c + ε with ε = ``w1_epsilon`` = 0.001 by default (the
  reference value; a class no client holds gets weight 0); ``w1_epsilon: 0`` is eq. 3.2 exactly (the weights of
  a held class sum to 1 over clients). The w1 teacher is not renormalised across classes (as the thesis and
  code); ``renormalize_teacher: true`` divides every teacher row by its sum.
- **Student budget** is a step count: ``student_steps``; null = the thesis's MNIST/EMNIST epochs E_S (30 for
  w0/w1/mean, 100 for w2; ``student_epochs`` overrides E_S, e.g. 10/50 for CIFAR-10) times
  ⌈0.8·|D_0| / B_S⌉ steps per epoch. Batches are slices of a seeded permutation (``ServerContext.training_generator``, the training seed),
  reshuffled every pass; a last partial batch is kept (the code's sizes were all divisible by 50).
  ``student_lr`` null = the thesis's per-scheme value (1e-3 for w0/w1/mean, 1e-5 for w2).
- **kl_soft** (never run in the thesis): the ensemble teacher is a probability vector with no logits, so the
  temperature softens its log-probabilities, q_T ∝ z_T^(1/τ) (τ = 1 targets z_T itself); loss τ²·KL(q_T‖q_S).
  Eq. 2.8 applies the temperature softmax to logits. ``temperature`` only applies to ``kl_soft``.
- **Clients with N_k = 0** (possible on tiny datasets) are left out of every ensemble, ``mean`` included.
- **Participation**: the ensemble is over the clients the runtime trained in round 0 (γ = clients_per_round /
  num_clients, γ = 1 in the thesis). Algorithm 2 and the code resample the active clients per distillation
  step when γ < 1; we do not (the one-round stage fixes them).
- **Common initialisation**: every client starts from the weights its model instance had when this algorithm
  instance first saw it. The runtime builds each actor's model from the init seed, so all clients of one
  architecture share θ_init, as in the code; a model reused across virtual clients is reset before each.
- **Student initialisation**: the server model's initial weights (the init seed), kept in
  ``ServerState.extra["student_init"]``; every aggregate restarts from them (never warm-started, as the code).
  When the student has the local architecture it therefore starts at θ_init; the code drew a separate init.
- **Autoencoders** come from ``algorithms.models.AUTOENCODERS`` (the code-faithful nets of §5.4). ``autoencoder:
  auto`` takes ``feded_mnist`` (latent 4) for one-channel inputs and ``feded_cifar`` (latent 64) otherwise;
  ``ae_latent`` replaces the two bottleneck layers to change the latent size. Inputs the AE cannot take (the
  8×8 digits, where the encoder reaches 0×0) are upsampled, nearest-neighbour, by the smallest integer factor
  that fits (digits: ×2 → 16×16) unless ``ae_input_scale`` fixes it; l_k is the MSE on the upsampled image
  (equal to the MSE on the original for a reconstruction that is constant on each upsampled block). The AE's
  initialisation is seeded from the client's training generator after local training, so a client's result
  does not depend on the actor that hosts it. AE batches = the local batch size (code) unless ``ae_batch_size``.
- **Client defaults are the thesis's**: ``FedED.config_defaults`` makes an absent ``clients.local_epochs``,
  ``batch_size``, ``optimizer``, ``lr``, ``momentum`` 20, 64, sgd, 1e-3, 0.9 (§3, §6) instead of the platform's
  global client defaults (1 epoch, batch 32, lr 0.05, no momentum); any of them the config sets wins. EMNIST's
  code used 50 local epochs and CIFAR-10 batch 80: set ``clients.local_epochs`` / ``clients.batch_size``.
- **Input normalisation and the AE's range**: the AEs end in a sigmoid, so their output lies in (0, 1). The thesis
  fed them normalised images (MNIST/EMNIST: (x − 0.1307)/0.3081, pixels in [−0.42, 2.82]), so a reconstruction
  can never match the input and l_k(x) has a floor c(x) (§2.5, §9 items 4–5): the squared distance from each pixel
  to the nearest value in [0, 1], the same for every client since it depends on x alone (an MNIST background
  pixel, −0.42, alone costs ≥ 0.18). β = 6 was tuned in that regime. That is
  ``dataset.normalization: mnist``, the default of ``mnist`` and ``emnist`` here. The embedded ``digits`` default
  to no normalisation (pixels in [0, 1]), which the sigmoid can reach, so l_k can go far lower on well-modelled
  samples. Since w2 = softmax_k(−β·log l_k), only the ratios l_k/l_k' across clients matter, and with
  l_k = c(x) + r_k(x) the common floor pulls every ratio towards 1, so a given β is *softer* with normalised inputs;
  on [0, 1] inputs the spread is wider and the same β acts sharper (closer to "the lowest-loss client takes
  all"). The effective sharpness is β times the spread of log l_k, so β tuned on one input range does not carry
  over to the other. ``--set dataset.normalization=mnist`` gives digits the thesis's regime; the digits default
  is left alone because other methods use it.
- **Local training** runs in proper train mode (the digest's [rec]; the code left models in eval mode after
  the first epoch, which only matters for BatchNorm/dropout models, i.e. the CIFAR ResNet-18).
- **Probabilities** are stored as float32; prediction and scoring batches (1024) do not affect results.
- ``mode: rounds`` with more than one round repeats the one-shot procedure independently each round (clients
  retrain from θ_init with that round's batch order; the student restarts); use ``mode: one_round``.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from algorithms.base import (Algorithm, ClientContext, ClientUpdate, Metric, ServerContext, ServerState, Setting,
                             register)
from algorithms.common import LocalTraining, get_flat_weights, set_flat_weights, train_local
from algorithms.common.distillation import DISTILLATION_LOSSES, distill, distillation_loss
from algorithms.common.evaluation import inference_slices
from algorithms.errors import ConfigError
from algorithms.models import AUTOENCODERS, build_autoencoder
from algorithms.common.params import spec

SCHEMES = ("w0", "w1", "w2", "mean")
#: The thesis's student Adam learning rates (docs/methods/feded.md §3, §6).
THESIS_STUDENT_LR = {"w0": 1e-3, "w1": 1e-3, "w2": 1e-5, "mean": 1e-3}
#: The thesis's student epochs E_S on MNIST/EMNIST (docs/methods/feded.md §6; CIFAR-10: 10 and 50).
THESIS_STUDENT_EPOCHS = {"w0": 30, "w1": 30, "w2": 100, "mean": 30}
#: ε in the w1 denominator Σ_k N_k^c + ε in the reference code (docs/methods/feded.md §2.5 [code]); 0 = eq. 3.2.
REFERENCE_W1_EPSILON = 1e-3
AUTOENCODER_CHOICES = ("auto", *AUTOENCODERS)
AE_SCORE_BATCH = 1024  # autoencoder scores' batch (predictions: inference_batch_size); no effect on results (§3)
MAX_AE_INPUT_SCALE = 16


# ---------------------------------------------------------------------------------------------------------------
# Weighting schemes (§2.5) and the ensemble (§2.4, §2.7)
# ---------------------------------------------------------------------------------------------------------------

def data_size_weights(num_samples: torch.Tensor) -> torch.Tensor:
    """w0 (eq. 3.1): ω_k = N_k / Σ_k' N_k' over the given clients, shape [K, 1, 1]."""
    n = torch.as_tensor(num_samples, dtype=torch.float64)
    total = n.sum()
    if total <= 0:
        raise ValueError("w0 needs at least one client with data")
    return (n / total).view(-1, 1, 1)


def class_weights(label_counts: torch.Tensor, epsilon: float = REFERENCE_W1_EPSILON) -> torch.Tensor:
    """w1 (eq. 3.2): ω_k^c = N_k^c / (Σ_k' N_k'^c + ε), shape [K, 1, C].

    ε defaults to the reference code's 0.001. With ε = 0 (the thesis formula) the weights of a class sum to 1
    over clients where some client holds it. A class that no client holds gets ω = 0 for every client either
    way, so its teacher entry is 0.
    """
    counts = torch.as_tensor(label_counts, dtype=torch.float64)
    denom = counts.sum(dim=0, keepdim=True) + epsilon
    weights = torch.where(denom > 0, counts / denom.clamp_min(torch.finfo(torch.float64).tiny),
                          torch.zeros_like(counts))
    return weights.unsqueeze(1)


def ae_weights(ae_losses: torch.Tensor, beta: float) -> torch.Tensor:
    """w2 (eq. 3.4), normalised per sample: ω_k^j = l_k(x_j)^(−β) / Σ_k' l_k'(x_j)^(−β), shape [K, n, 1].

    Computed as softmax_k(−β·log l_k(x_j)) in float64, which cannot overflow where l^(−β) does.
    """
    losses = torch.as_tensor(ae_losses, dtype=torch.float64)
    log_l = torch.log(losses.clamp_min(torch.finfo(torch.float64).tiny))
    return torch.softmax(-float(beta) * log_l, dim=0).unsqueeze(-1)


def mean_weights(num_clients: int) -> torch.Tensor:
    """The plain average (eq. 2.11): ω_k = 1/K, shape [K, 1, 1]."""
    if num_clients < 1:
        raise ValueError("the mean needs at least one client")
    return torch.full((num_clients, 1, 1), 1.0 / num_clients, dtype=torch.float64)


def ensemble_weights(scheme: str, *, num_samples: Optional[torch.Tensor] = None,
                     label_counts: Optional[torch.Tensor] = None, ae_losses: Optional[torch.Tensor] = None,
                     beta: float = 6.0, w1_epsilon: float = REFERENCE_W1_EPSILON) -> torch.Tensor:
    """The weights of ``scheme`` (w0 | w1 | w2 | mean), broadcastable against probabilities [K, n, C]."""
    if scheme == "w0":
        return data_size_weights(_required(num_samples, "num_samples", scheme))
    if scheme == "w1":
        return class_weights(_required(label_counts, "label_counts", scheme), w1_epsilon)
    if scheme == "w2":
        return ae_weights(_required(ae_losses, "ae_losses", scheme), beta)
    if scheme == "mean":
        for given in (num_samples, label_counts, ae_losses):
            if given is not None:
                return mean_weights(len(given))
        raise ValueError("the mean needs num_samples, label_counts or ae_losses to count the clients")
    raise ValueError(f"unknown weighting scheme {scheme!r}; allowed: {', '.join(SCHEMES)}")


def _required(value, name: str, scheme: str):
    if value is None:
        raise ValueError(f"scheme {scheme} needs {name}")
    return value


def ensemble_teacher(probs: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """z_T = Σ_k ω_k ⊙ Z_k for client probabilities ``probs`` [K, n, C]; returns [n, C] in probs' dtype."""
    return (weights.to(probs.device, torch.float64) * probs.to(torch.float64)).sum(dim=0).to(probs.dtype)


def ensemble_accuracy(probs: torch.Tensor, weights: torch.Tensor, labels: torch.Tensor) -> float:
    """Accuracy of argmax_c Σ_k ω_k ⊙ Z_k against ``labels`` (the ENSEMBLE-w* rows, §2.7)."""
    if len(labels) == 0:
        return 0.0
    predicted = ensemble_teacher(probs, weights).argmax(dim=1)
    return float((predicted == labels.to(predicted.device)).double().mean())


# ---------------------------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FedEDHyperparams:
    scheme: str = spec("w2", doc="Teacher weighting (§2.5, §3.1): w0 = N_k/N (eq. 3.1), w1 = class-wise "
                                 "N_k^c/Σ_k N_k^c (eq. 3.2), w2 = per-sample AE weights l_k(x)^(−β) normalised "
                                 "(eq. 3.4, the thesis's new scheme), mean = plain average (eq. 2.11).",
                       choices=SCHEMES)
    beta: float = spec(6.0, doc="β, sharpness of the w2 weights l^(−β) (§2.5, eq. 3.4); the thesis chose 6 from "
                                "the integers 1–7. 0 = plain mean, → ∞ = the client with the lowest loss.", ge=0)
    w1_epsilon: float = spec(REFERENCE_W1_EPSILON, doc="ε in the w1 denominator Σ_k N_k^c + ε (§2.5): 0.001 "
                                                       "as the reference code; 0 = eq. 3.2 exactly.", ge=0)
    renormalize_teacher: bool = spec(False, doc="Divide each teacher row z_T by Σ_c z_T^c (§2.5, §9 item 4). "
                                                "Only changes w1, whose teacher the thesis leaves unnormalised; "
                                                "w0/w2/mean rows already sum to 1.")
    loss: str = spec("mse_logits", doc="ℒ_S, the student loss (§2.6): mse_logits = MSE of raw student logits "
                                       "to z_T (eq. 2.10 as coded; headline results), ce_hard = CE to argmax "
                                       "z_T (the thesis's 'CE'), kl_soft = τ²·KL with temperature τ (eqs. "
                                       "2.8–2.9, theory only), mse_prob = MSE of softmax(z_S) to z_T.",
                      choices=DISTILLATION_LOSSES)
    temperature: float = spec(1.0, doc="τ, distillation temperature (eq. 2.8) for kl_soft only; never used in "
                                       "the thesis (§2.6, §9 item 3).", gt=0)
    student_lr: Optional[float] = spec(None, doc="η_S, student Adam learning rate (§3, §6); null = the "
                                                 "thesis's per scheme: 1e-3 for w0/w1/mean, 1e-5 for w2.", gt=0)
    student_steps: Optional[int] = spec(None, doc="T, distillation steps (Algorithm 2; §10 'fix a step "
                                                   "budget'); null = student_epochs × ⌈0.8·|D_0|/B_S⌉.", ge=1)
    student_epochs: Optional[int] = spec(None, doc="E_S, student epochs when student_steps is null (§6 "
                                                   "[code]); null = 30 for w0/w1/mean, 100 for w2 "
                                                   "(MNIST/EMNIST; CIFAR-10 used 10 and 50).", ge=1)
    student_batch_size: int = spec(50, doc="B_S, student batch size (§3 [code]: 50).", ge=1)
    public_size: Optional[int] = spec(None, doc="|D_0|, public samples used for distillation: the first "
                                                "|D_0| of the public pool, nested (§4.2); null = the whole "
                                                "pool (the headline sizes).", ge=2)
    student_train_fraction: float = spec(0.8, doc="Share of |D_0| the student trains on; the rest is a "
                                                  "pseudo-labelled validation split, logged only (§2.4, §9 "
                                                  "item 11 [code]: 80/20).", gt=0, le=1)
    train_autoencoders: bool = spec(True, doc="Clients train an AE and send l_k(x) (§2.5 steps 1–2). Needed "
                                              "for w2; on by default so every scheme reuses one cached client "
                                              "stage.")
    autoencoder: str = spec("auto", doc="AE architecture (§5.4, algorithms.models.AUTOENCODERS): auto = "
                                        "feded_mnist for 1-channel inputs, feded_cifar otherwise.",
                            choices=AUTOENCODER_CHOICES)
    ae_latent: Optional[int] = spec(None, doc="AE latent size (§3, §5.4); null = the architecture's: 4 "
                                              "(MNIST/EMNIST), 64 (CIFAR-10).", ge=1)
    ae_epochs: int = spec(30, doc="E_AE, AE training epochs (§3 [code]: 30 MNIST/EMNIST, 50 CIFAR-10).", ge=1)
    ae_lr: float = spec(1e-3, doc="AE Adam learning rate (§3 [code]: 1e-3).", gt=0)
    ae_weight_decay: float = spec(1e-5, doc="AE Adam weight decay (§3 [code]: 1e-5).", ge=0)
    ae_batch_size: Optional[int] = spec(None, doc="AE batch size; null = the local batch size B (§2.4 "
                                                  "[code]).", ge=1)
    ae_input_scale: Optional[int] = spec(None, doc="Integer nearest-neighbour upsampling of the AE's inputs; "
                                                   "null = 1 where the AE takes the native size, else the "
                                                   "smallest factor that fits (digits 8×8: 2). Not in the "
                                                   "thesis (§5.4 has 28×28 and 32×32 inputs only).", ge=1,
                                         le=MAX_AE_INPUT_SCALE)

    def validate(self, path: str) -> None:
        def where(name: str) -> str:
            return f"{path}.{name}" if path else name

        if self.scheme == "w2" and not self.train_autoencoders:
            raise ConfigError(where("train_autoencoders"), "scheme w2 weights clients by their autoencoders' "
                                                           "losses; set it to true or pick w0, w1 or mean")
        if self.loss != "kl_soft" and self.temperature != 1.0:
            raise ConfigError(where("temperature"), f"only applies to loss kl_soft (loss is {self.loss!r}); "
                                                    f"leave it at 1")
        if self.student_steps is not None and self.student_epochs is not None:
            raise ConfigError(where("student_epochs"), "set either student_steps or student_epochs, not both")
        if not self.train_autoencoders:
            for name, default in (("autoencoder", "auto"), ("ae_latent", None), ("ae_batch_size", None),
                                  ("ae_input_scale", None)):
                if getattr(self, name) != default:
                    raise ConfigError(where(name), "only applies when train_autoencoders is true")


# ---------------------------------------------------------------------------------------------------------------
# Client-side helpers
# ---------------------------------------------------------------------------------------------------------------

@torch.no_grad()
def predict_probs(model: nn.Module, x: torch.Tensor, batch_size: int | None = None) -> torch.Tensor:
    """softmax(f(x)) (τ = 1, §1 [code]) in eval mode, float32 on the CPU, [N, C]; in batches of ``batch_size``
    (default: :func:`~algorithms.common.evaluation.inference_batch_size`)."""
    model.eval()
    out = [F.softmax(model(x[rows]).float(), dim=1).cpu() for rows in inference_slices(model, x, batch_size)]
    return torch.cat(out) if out else torch.empty(0, 0)


def _upscale(x: torch.Tensor, scale: int) -> torch.Tensor:
    return x if scale == 1 else F.interpolate(x, scale_factor=scale, mode="nearest")


@torch.no_grad()
def reconstruction_losses(ae: nn.Module, x: torch.Tensor, scale: int = 1,
                          batch_size: int = AE_SCORE_BATCH) -> torch.Tensor:
    """l(x) = mean over C·H·W of (AE(x) − x)² per sample (eq. 3.3), in eval mode, float32 on the CPU, [N]."""
    ae.eval()
    out = [ae.per_sample_loss(_upscale(x[rows], scale)).float().cpu() for rows in inference_slices(ae, x, batch_size)]
    return torch.cat(out) if out else torch.empty(0)


def _with_latent(ae: nn.Module, latent: int) -> nn.Module:
    """Replace the AE's bottleneck Linear(hidden, latent) and Linear(latent, hidden) for a new latent size."""
    enc_out, dec_in = ae.to_latent[-1], ae.from_latent[0]
    ae.to_latent[-1] = nn.Linear(enc_out.in_features, latent)
    ae.from_latent[0] = nn.Linear(latent, dec_in.out_features)
    ae.latent_dim = latent
    return ae


# ---------------------------------------------------------------------------------------------------------------
# The algorithm
# ---------------------------------------------------------------------------------------------------------------

@register
class FedED(Algorithm):
    name = "feded"
    Hyperparams = FedEDHyperparams
    #: The thesis's FedED client training (docs/methods/feded.md §3, §6): SGD lr 1e-3, momentum 0.9, E = 20 local
    #: epochs, batch 64 (MNIST/EMNIST). Applied under the user's config: any clients.* key a config sets wins. Not
    #: dataset-dependent: EMNIST's code used E = 50 and CIFAR-10 batch 80 (set them).
    config_defaults = {"clients": {"local_epochs": 20, "batch_size": 64, "optimizer": "sgd", "lr": 1e-3,
                                   "momentum": 0.9}}
    summable = False
    heterogeneous_models = True
    clients_see_test_inputs = True
    metrics = (
        Metric("ensemble_accuracy", "max", "the teacher: the configured scheme's weighted client ensemble on the test "
                                           "set", headline=True),
        *(Metric(f"ensemble_{scheme}_accuracy", "max", f"the {scheme} ensemble on the test set")
          for scheme in ("w0", "w1", "w2", "mean")),
        Metric("student_train_loss", "min", "distillation loss of the student"),
        Metric("student_val_agreement", "max", "student vs teacher argmax on the held-out 20 % of D_0"),
        Metric("student_steps", "max", "student optimiser steps"), Metric("student_lr", "max", "student lr"),
        Metric("distill_size", "max", "|D_0|, public samples distilled on"),
    )

    def __init__(self, hparams=None):
        super().__init__(hparams)
        self._initial_weights: "weakref.WeakKeyDictionary[nn.Module, torch.Tensor]" = weakref.WeakKeyDictionary()
        self._ae_scale: dict[tuple, int] = {}

    # --- configuration-derived values --------------------------------------------------------------------------
    def client_stage_fields(self) -> dict:
        """Only what the client stage depends on: never β, the scheme, the loss or any student/|D_0| knob."""
        hp = self.hp
        fields = {"procedure": "feded_clients", "version": 1, "train_autoencoders": hp.train_autoencoders}
        if hp.train_autoencoders:
            fields.update(autoencoder=hp.autoencoder, ae_latent=hp.ae_latent, ae_epochs=hp.ae_epochs,
                          ae_lr=hp.ae_lr, ae_weight_decay=hp.ae_weight_decay, ae_batch_size=hp.ae_batch_size,
                          ae_input_scale=hp.ae_input_scale)
        return fields

    def check_setting(self, setting: Setting) -> None:
        """``public_size`` must fit the public pool (where the pool's size is known: the dry run's data plan and the
        driver, once the data is built, pass it; a config fixes it only with ``public.size``)."""
        pool, size = setting.public_size, self.hp.public_size
        if pool is not None and size is not None and size > pool:
            raise ConfigError("algorithm.public_size", f"at most {pool} (the public pool), got {size}")

    def student_lr(self) -> float:
        return self.hp.student_lr if self.hp.student_lr is not None else THESIS_STUDENT_LR[self.hp.scheme]

    def student_steps(self, train_size: int) -> int:
        hp = self.hp
        if hp.student_steps is not None:
            return hp.student_steps
        epochs = hp.student_epochs if hp.student_epochs is not None else THESIS_STUDENT_EPOCHS[hp.scheme]
        return epochs * math.ceil(train_size / hp.student_batch_size)

    # --- client stage ------------------------------------------------------------------------------------------
    def broadcast(self, state: ServerState, sampled_clients: Sequence[int]) -> dict:
        return {"round": state.round}  # clients need no weights: each starts from its own θ_init

    def _reset_to_initial(self, model: nn.Module) -> None:
        initial = self._initial_weights.get(model)
        if initial is None:
            self._initial_weights[model] = get_flat_weights(model)
        else:
            set_flat_weights(model, initial)

    def _autoencoder_name(self, shape: tuple) -> str:
        if self.hp.autoencoder != "auto":
            return self.hp.autoencoder
        return "feded_mnist" if shape[0] == 1 else "feded_cifar"

    def _input_scale(self, name: str, shape: tuple) -> int:
        if self.hp.ae_input_scale is not None:
            return self.hp.ae_input_scale
        key = (name, shape)
        if key not in self._ae_scale:
            for scale in range(1, MAX_AE_INPUT_SCALE + 1):
                try:
                    with torch.random.fork_rng(devices=[]):
                        build_autoencoder(name, (shape[0], shape[1] * scale, shape[2] * scale))
                except ConfigError:
                    continue
                self._ae_scale[key] = scale
                break
            else:
                raise ConfigError("algorithm.autoencoder", f"autoencoder {name!r} takes no integer upsampling "
                                                           f"(up to {MAX_AE_INPUT_SCALE}) of inputs {shape}")
        return self._ae_scale[key]

    def build_autoencoder(self, shape: tuple, seed: int) -> tuple[nn.Module, int]:
        """The client's AE (seeded) and the input upsampling factor it runs at."""
        shape = tuple(int(s) for s in shape)
        if len(shape) != 3:
            raise ConfigError("algorithm.train_autoencoders", f"the autoencoders need image inputs (C, H, W), "
                                                              f"got shape {shape}; use scheme w0, w1 or mean "
                                                              f"with train_autoencoders: false")
        name = self._autoencoder_name(shape)
        scale = self._input_scale(name, shape)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            ae = build_autoencoder(name, (shape[0], shape[1] * scale, shape[2] * scale),
                                   field="algorithm.autoencoder")
            if self.hp.ae_latent is not None:
                ae = _with_latent(ae, self.hp.ae_latent)
        return ae, scale

    def train_autoencoder(self, client: ClientContext) -> tuple[nn.Module, int, float]:
        hp = self.hp
        seed = int(torch.randint(0, 2**62, (1,), generator=client.generator))
        ae, scale = self.build_autoencoder(tuple(client.x.shape[1:]), seed)
        ae = ae.to(client.device)
        cfg = LocalTraining(epochs=hp.ae_epochs, batch_size=hp.ae_batch_size or client.training.batch_size,
                            optimizer="adam", lr=hp.ae_lr, weight_decay=hp.ae_weight_decay)
        x = _upscale(client.x.float(), scale)
        loss = train_local(ae, x, x, cfg, client.generator, loss_fn=F.mse_loss) if len(x) else 0.0
        return ae, scale, loss

    def client_update(self, payload: dict, client: ClientContext) -> ClientUpdate:
        if client.public_x is None:
            raise ValueError("feded needs public data: set public.source (e.g. train_split, docs/methods/feded.md "
                             "§4.2)")
        model = client.model
        self._reset_to_initial(model)
        train_loss = train_local(model, client.x, client.y, client.training, client.generator,
                                 augment_generator=client.augment_generator) \
            if client.num_samples else 0.0
        public_probs = predict_probs(model, client.public_x)
        num_classes = public_probs.shape[1]
        tensors = {"public_probs": public_probs,
                   "label_counts": torch.bincount(client.y.long().cpu(), minlength=num_classes).float()}
        if client.global_test_x is not None:
            tensors["test_probs"] = predict_probs(model, client.global_test_x)
        metrics = {"train_loss": train_loss}
        if self.hp.train_autoencoders:
            ae, scale, ae_loss = self.train_autoencoder(client)
            tensors["public_ae_loss"] = reconstruction_losses(ae, client.public_x, scale)
            if client.global_test_x is not None:
                tensors["test_ae_loss"] = reconstruction_losses(ae, client.global_test_x, scale)
            metrics["ae_loss"] = ae_loss
        return ClientUpdate(weight=float(client.num_samples), tensors=tensors, metrics=metrics)

    # --- server stage ------------------------------------------------------------------------------------------
    def init_server_state(self, ctx: ServerContext) -> ServerState:
        initial = get_flat_weights(ctx.model)  # the student (model.name); clients start from their own θ_init
        return ServerState(weights=initial, extra={"student_init": initial.clone()})

    def scheme_weights(self, scheme: str, updates: Sequence[ClientUpdate], ae_key: Optional[str],
                       size: Optional[int] = None) -> torch.Tensor:
        """The scheme's ensemble weights for ``updates``; ``ae_key`` names the AE losses to use for w2."""
        ae_losses = None
        if scheme == "w2":
            if ae_key is None or any(ae_key not in u.tensors for u in updates):
                raise ValueError("scheme w2 needs the clients' autoencoder losses (train_autoencoders: true)")
            ae_losses = torch.stack([u.tensors[ae_key][:size] for u in updates])
        return ensemble_weights(scheme, num_samples=torch.tensor([u.weight for u in updates]),
                                label_counts=torch.stack([u.tensors["label_counts"] for u in updates]),
                                ae_losses=ae_losses, beta=self.hp.beta, w1_epsilon=self.hp.w1_epsilon)

    def teacher(self, updates: Sequence[ClientUpdate], size: int, device: torch.device) -> torch.Tensor:
        """z_T on the first ``size`` public samples, [size, C]."""
        probs = torch.stack([u.tensors["public_probs"][:size] for u in updates]).to(device)
        z_t = ensemble_teacher(probs, self.scheme_weights(self.hp.scheme, updates, "public_ae_loss", size))
        if self.hp.renormalize_teacher:
            z_t = z_t / z_t.sum(dim=1, keepdim=True).clamp_min(torch.finfo(z_t.dtype).tiny)
        return z_t

    def ensemble_metrics(self, updates: Sequence[ClientUpdate], test_y: Optional[torch.Tensor]) -> dict:
        """ENSEMBLE-w* test accuracies (§2.7) for every scheme the client stage supports."""
        if test_y is None or any("test_probs" not in u.tensors for u in updates):
            return {}
        probs = torch.stack([u.tensors["test_probs"] for u in updates])
        labels = test_y.cpu()
        has_ae = all("test_ae_loss" in u.tensors for u in updates)
        metrics = {}
        for scheme in SCHEMES:
            if scheme == "w2" and not has_ae:
                continue
            metrics[f"ensemble_{scheme}_accuracy"] = ensemble_accuracy(
                probs, self.scheme_weights(scheme, updates, "test_ae_loss"), labels)
        if f"ensemble_{self.hp.scheme}_accuracy" in metrics:
            metrics["ensemble_accuracy"] = metrics[f"ensemble_{self.hp.scheme}_accuracy"]
        return metrics

    def aggregate(self, state: ServerState, updates: Sequence[ClientUpdate],
                  ctx: ServerContext) -> tuple[ServerState, dict]:
        hp = self.hp
        if any(u.num_clients != 1 for u in updates):
            raise ValueError("feded needs one update per client (summable = False), got a pre-reduced one")
        active = [u for u in updates if u.weight > 0]
        if not active:
            return ServerState(weights=state.weights.clone(), optimizer=state.optimizer, extra=state.extra), {}
        if ctx.public_x is None:
            raise ValueError("feded needs public data on the server: set public.source")
        pool = len(ctx.public_x)
        if any(len(u.tensors["public_probs"]) != pool for u in active):
            raise ValueError(f"the clients predicted on {sorted({len(u.tensors['public_probs']) for u in active})} "
                             f"public samples, the server holds {pool}: they must share one public pool")
        size = pool if hp.public_size is None else hp.public_size
        if size > pool:
            raise ConfigError("algorithm.public_size", f"at most {pool} (the public pool), got {size}")
        device = ctx.device
        teacher = self.teacher(active, size, device)
        x = ctx.public_x[:size].to(device)
        n_train = max(1, int(math.floor(hp.student_train_fraction * size + 1e-9)))

        student = ctx.model
        set_flat_weights(student, state.extra.get("student_init", state.weights))
        lr = self.student_lr()
        steps = self.student_steps(n_train)
        optimizer = torch.optim.Adam(student.parameters(), lr=lr)
        loss_fn = distillation_loss(hp.loss, hp.temperature, teacher_kind="probs")
        train_loss = distill(student, x[:n_train], teacher[:n_train], loss_fn, optimizer, steps,
                             hp.student_batch_size, ctx.training_generator)
        metrics = {"student_train_loss": train_loss, "student_steps": float(steps), "student_lr": lr,
                   "distill_size": float(size)}
        if n_train < size:
            with torch.no_grad():
                student.eval()
                held_out = x[n_train:]
                predicted = torch.cat([student(held_out[rows]).argmax(dim=1)
                                       for rows in inference_slices(student, held_out)])
            metrics["student_val_agreement"] = float((predicted == teacher[n_train:].argmax(dim=1)).double().mean())
        metrics.update(self.ensemble_metrics(active, ctx.test_y))
        student.eval()
        return ServerState(weights=get_flat_weights(student), optimizer=state.optimizer, extra=state.extra), metrics


__all__ = ["FedED", "FedEDHyperparams", "SCHEMES", "ae_weights", "class_weights", "data_size_weights",
           "ensemble_accuracy", "ensemble_teacher", "ensemble_weights", "mean_weights", "predict_probs",
           "reconstruction_losses"]
