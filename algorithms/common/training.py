"""The one local-training loop every method uses, and what it does to each batch.

Data are tensors already in memory; batches are index slices drawn with a seeded generator, so no
DataLoader is built per client and the same seed gives the same batch order on any actor.

Two opt-in settings change a batch's computation, in both loops (:func:`train_local` and
:func:`algorithms.common.batched_training.train_local_batched`), off by default:

- **Augmentation** (``clients.augment: crop_flip``): each batch of images ``[B, C, H, W]`` is randomly cropped
  back to ``H x W`` after zero-padding ``clients.augment_padding`` pixels on every side, then flipped left-right
  with probability 1/2 (torchvision's ``RandomCrop(size, padding=p)`` + ``RandomHorizontalFlip()``, the recipe of
  FedDF / FedAUX / FedED's CIFAR code). The padding value is **0 in normalised space**: our inputs are normalised
  once when the dataset loads, so 0 is the per-channel dataset mean (a mean-colour border), where the reference code
  crops before ``Normalize`` and so pads with black (0 in [0, 1], i.e. -mean/std here). We keep 0: it needs no
  knowledge of the dataset's statistics here, adds no out-of-distribution intensity, and with
  ``normalization: none`` it is exactly the reference's black border. Vectorised: one ``pad``, one gather with
  per-sample row/column offsets, the flip as reversed column indices (``torch.where``), on the batch's device.
  Random numbers come from the client's own **augmentation generator** (``ClientContext.augment_generator``,
  seeded by (training seed, round, client, an augmentation key), so switching augmentation on does not move the
  batch order), drawn on the CPU per batch: ``randint`` of the [B, 2] offsets, then ``rand`` of the B flips. The
  batched loop draws the same per client and batch, so both loops augment a client's batch alike. Every method
  whose local training runs through :func:`train_local` with ``client.training`` is augmented (FedAvg, FedProx,
  FedDF, FedAUX, single-image, pFedDF's fine-tuning, FedPA, FedKP, SGLD, MNFL and its baselines, FedED's
  classifier); distillation (on the server, or MNFL's on clients) and FedED's autoencoder are not.
- **Precision** (``clients.precision: bf16``): the forward pass and the loss run under
  ``torch.autocast(device, torch.bfloat16)``; parameters, gradients and optimiser state stay float32.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

AUGMENTATIONS = ("none", "crop_flip")  # clients.augment
PRECISIONS = ("fp32", "bf16")  # clients.precision


@dataclass(frozen=True)
class LocalTraining:
    epochs: int
    batch_size: int
    optimizer: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0
    augment: str = "none"  # clients.augment: none | crop_flip (see the module's docstring)
    augment_padding: int = 4  # clients.augment_padding: pixels of zero padding before the random crop
    precision: str = "fp32"  # clients.precision: fp32 | bf16 (autocast of forward and loss)

    def __post_init__(self):
        if self.augment not in AUGMENTATIONS:
            raise ValueError(f"unknown augment {self.augment!r}; allowed: {', '.join(AUGMENTATIONS)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; allowed: {', '.join(PRECISIONS)}")
        if self.augment_padding < 0:
            raise ValueError(f"augment_padding must be >= 0, got {self.augment_padding}")

    def autocast(self, device: torch.device):
        """The context a batch's forward and loss run in: bf16 autocast on ``device`` with ``precision: bf16``,
        else nothing."""
        if self.precision == "bf16":
            return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def make_optimizer(self, params) -> torch.optim.Optimizer:
        if self.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.lr, weight_decay=self.weight_decay)
        return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)

    def optimizer_defaults(self) -> dict:
        """The hyperparameters :meth:`make_optimizer`'s optimiser runs with (torch's ``defaults``, every default
        filled in): what the batched loop (:mod:`algorithms.common.batched_training`) steps with, so both loops
        share one definition of the optimiser."""
        return dict(self.make_optimizer([torch.zeros(1, requires_grad=True)]).defaults)


def draw_crop_flip(n: int, padding: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch's crop offsets ``[n, 2]`` (row, column; each in 0..2·padding) and flips ``[n]`` (bool, p = 1/2),
    drawn in this order from ``generator`` (on its device, the CPU for the platform's generators)."""
    offsets = torch.randint(0, 2 * padding + 1, (n, 2), generator=generator, device=generator.device)
    flips = torch.rand(n, generator=generator, device=generator.device) < 0.5
    return offsets, flips


def crop_flip(x: torch.Tensor, offsets: torch.Tensor, flips: torch.Tensor, padding: int) -> torch.Tensor:
    """Images ``x`` [N, C, H, W] zero-padded by ``padding``, cropped back to H x W at ``offsets`` [N, 2] and
    flipped left-right where ``flips`` [N]: one gather, no loop over images."""
    if x.dim() != 4:
        raise ValueError(f"clients.augment crops and flips images [N, C, H, W]; got inputs of shape "
                         f"{tuple(x.shape)}")
    n, channels, height, width = x.shape
    device = x.device
    offsets, flips = offsets.to(device), flips.to(device)
    padded = F.pad(x, (padding, padding, padding, padding)) if padding else x
    rows = offsets[:, :1] + torch.arange(height, device=device)  # [N, H]
    cols = offsets[:, 1:] + torch.arange(width, device=device)  # [N, W]
    cols = torch.where(flips[:, None], cols.flip(1), cols)  # a flipped crop reads its columns backwards
    return padded[torch.arange(n, device=device)[:, None, None, None],
                  torch.arange(channels, device=device)[None, :, None, None],
                  rows[:, None, :, None], cols[:, None, None, :]]


def augment_draws(cfg: LocalTraining, n: int, generator: Optional[torch.Generator]) -> Optional[tuple]:
    """The random draws of ``cfg.augment`` for one batch of ``n`` samples (None without augmentation)."""
    if cfg.augment == "none":
        return None
    if generator is None:
        raise ValueError("clients.augment is on but no augmentation generator was given: pass "
                         "augment_generator=client.augment_generator to train_local (augment_generators to "
                         "train_local_batched)")
    return draw_crop_flip(n, cfg.augment_padding, generator)


def augment(cfg: LocalTraining, x: torch.Tensor, draws: Optional[Sequence[torch.Tensor]]) -> torch.Tensor:
    """Batch ``x`` after ``cfg.augment`` with ``draws`` (:func:`augment_draws`)."""
    if draws is None:
        return x
    return crop_flip(x, draws[0], draws[1], cfg.augment_padding)


def epoch_batches(n: int, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """One epoch's batches of a client with ``n`` samples: slices of ``torch.randperm(n, generator=generator)``,
    ``batch_size`` each, the last one smaller. Both loops (:func:`train_local` and the batched one) draw their
    batch order here, one call per epoch, so the same generator gives the same batches."""
    order = torch.randperm(n, generator=generator)
    return [order[start:start + batch_size] for start in range(0, n, batch_size)]


def train_local(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: LocalTraining, generator: torch.Generator,
                extra_loss: Optional[Callable[[nn.Module], torch.Tensor]] = None,
                loss_fn: Callable = F.cross_entropy,
                on_step: Optional[Callable[[nn.Module], None]] = None,
                on_epoch_end: Optional[Callable[[nn.Module], None]] = None,
                optimizer_state: Optional[dict] = None,
                augment_generator: Optional[torch.Generator] = None) -> float:
    """Train ``model`` in place for ``cfg.epochs`` epochs; return the mean training loss over all batches.

    A fresh optimiser is made on every call (the reference code resets momentum every round). A persistent
    client passes its ``optimizer_state`` dict: a non-empty one is loaded first (momentum buffers, Adam moments),
    and the dict is replaced in place by the optimiser's state after training.
    ``extra_loss(model)`` is added to each batch's loss, e.g. FedProx's proximal term.
    ``on_step(model)`` runs after every optimiser step and ``on_epoch_end(model)`` after every epoch, e.g. to
    collect FedPA's iterate-averaged posterior samples; neither may change the model.
    ``augment_generator`` draws ``cfg.augment``'s crops and flips (required when it is on; see the module's
    docstring); ``cfg.precision`` sets the autocast of forward and loss.

    :func:`algorithms.common.batched_training.train_local_batched` trains several clients at once with the same
    batch order (:func:`epoch_batches`) and optimiser (:meth:`LocalTraining.optimizer_defaults`); it is this loop
    up to float rounding (``clients.batched``).
    """
    model.train()
    optimizer = cfg.make_optimizer(model.parameters())
    if optimizer_state:
        optimizer.load_state_dict(optimizer_state)
    n = len(y)
    total, batches = 0.0, 0
    for _ in range(cfg.epochs):
        for idx in epoch_batches(n, cfg.batch_size, generator):
            optimizer.zero_grad(set_to_none=True)
            xb = augment(cfg, x[idx], augment_draws(cfg, len(idx), augment_generator))
            with cfg.autocast(xb.device):
                loss = loss_fn(model(xb), y[idx])
                if extra_loss is not None:
                    loss = loss + extra_loss(model)
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
            batches += 1
            if on_step is not None:
                on_step(model)
        if on_epoch_end is not None:
            on_epoch_end(model)
    if optimizer_state is not None:
        optimizer_state.clear()
        optimizer_state.update(optimizer.state_dict())
    return total / max(batches, 1)
