"""Convolutional autoencoders for FedED-w2 (docs/methods/feded.md §5.4, Tables A.4/A.5).

Each client trains one on its local data; the server weights client k's teacher on a public sample x by the
reconstruction loss l_k(x) its autoencoder gives, so :meth:`ConvAutoencoder.per_sample_loss` is the quantity the
algorithm needs. These are not classifiers and live in their own registry, :data:`AUTOENCODERS`.

We follow the thesis **code**, not its tables, as §9 item 6 recommends for fidelity:
- encoder: Conv(w0, 3×3, s2, p1) + ReLU → Conv(w1, 3×3, s2, p1) + BN + ReLU → Conv(w2, 3×3, s2, p0) + ReLU
  (BN only after the second conv, before its ReLU);
- bottleneck: Linear(flat, 128) + ReLU → Linear(128, latent) → Linear(latent, 128) + ReLU →
  Linear(128, flat) + ReLU;
- decoder: ConvT(w1) + BN + ReLU → ConvT(w0) + BN + ReLU → ConvT(C) → **sigmoid** (the tables say ReLU).

The sigmoid output lives in [0, 1] while the classifiers' inputs are usually normalised; the thesis tuned
β = 6 in that regime (§9 item 5), so we keep it and leave input scaling to the caller.

Geometry: MNIST's decoder mirrors the encoder exactly (3 → 7 → 14 → 28). The CIFAR code uses padding 0 in all
three transposed convs (3 → 7 → 15 → 32, output_padding 1 on the last); we reproduce that whenever it lands on
the input size and otherwise mirror the encoder, so both nets take any input the encoder can reduce to ≥ 1×1.
The parameter count does not depend on the geometry.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

from algorithms.errors import ConfigError
from algorithms.models.base import check_input_shape, normalise_shape, unknown_name_error

AUTOENCODER_FIELD = "autoencoder.name"

_ENC_PADDING = (1, 1, 0)


def _conv_out(n: int, padding: int) -> int:
    return (n + 2 * padding - 3) // 2 + 1


def _convt_out(n: int, padding: int, output_padding: int) -> int:
    return (n - 1) * 2 - 2 * padding + 3 + output_padding


def _decoder_geometry(size: int, code_quirk: bool) -> list[tuple[int, int]]:
    """(padding, output_padding) of the three transposed convs along one spatial axis of length ``size``."""
    sizes = [size]
    for p in _ENC_PADDING:
        sizes.append(_conv_out(sizes[-1], p))
    if code_quirk:  # docs/methods/feded.md §5.4, CIFAR [code]: all paddings 0, output_padding only on the last layer
        n = sizes[-1]
        for _ in range(2):
            n = _convt_out(n, 0, 0)
        last_op = size - _convt_out(n, 0, 0)
        if last_op in (0, 1):
            return [(0, 0), (0, 0), (0, last_op)]
    geometry = []  # mirror: each ConvT undoes its conv, output_padding restores the size the conv floored away
    for n_in, n_out, p in zip(sizes[-1:0:-1], sizes[-2::-1], _ENC_PADDING[::-1]):
        geometry.append((p, n_out - _convt_out(n_in, p, 0)))
    return geometry


class ConvAutoencoder(nn.Module):
    """FedED's convolutional autoencoder (module docstring). ``forward(x)`` returns the reconstruction."""

    def __init__(self, input_shape: Sequence[int], widths: tuple[int, int, int], latent_dim: int,
                 hidden: int = 128, cifar_code_decoder: bool = False):
        super().__init__()
        channels, height, width = input_shape
        w0, w1, w2 = widths
        self.input_shape = (channels, height, width)
        self.latent_dim = latent_dim
        self.encoder = nn.Sequential(
            nn.Conv2d(channels, w0, 3, stride=2, padding=_ENC_PADDING[0]), nn.ReLU(inplace=True),
            nn.Conv2d(w0, w1, 3, stride=2, padding=_ENC_PADDING[1]), nn.BatchNorm2d(w1), nn.ReLU(inplace=True),
            nn.Conv2d(w1, w2, 3, stride=2, padding=_ENC_PADDING[2]), nn.ReLU(inplace=True),
            nn.Flatten(),
        )
        eh, ew = height, width
        for p in _ENC_PADDING:
            eh, ew = _conv_out(eh, p), _conv_out(ew, p)
        if eh < 1 or ew < 1:
            raise ValueError(f"the encoder reduces {height}x{width} to {eh}x{ew}")
        flat = w2 * eh * ew
        self.to_latent = nn.Sequential(nn.Linear(flat, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, latent_dim))
        self.from_latent = nn.Sequential(
            nn.Linear(latent_dim, hidden), nn.ReLU(inplace=True),
            nn.Linear(hidden, flat), nn.ReLU(inplace=True),
            nn.Unflatten(1, (w2, eh, ew)),
        )
        gh = _decoder_geometry(height, cifar_code_decoder)
        gw = _decoder_geometry(width, cifar_code_decoder)
        (p0h, o0h), (p1h, o1h), (p2h, o2h) = gh
        (p0w, o0w), (p1w, o1w), (p2w, o2w) = gw
        self.decoder = nn.Sequential(
            nn.ConvTranspose2d(w2, w1, 3, stride=2, padding=(p0h, p0w), output_padding=(o0h, o0w)),
            nn.BatchNorm2d(w1), nn.ReLU(inplace=True),
            nn.ConvTranspose2d(w1, w0, 3, stride=2, padding=(p1h, p1w), output_padding=(o1h, o1w)),
            nn.BatchNorm2d(w0), nn.ReLU(inplace=True),
            nn.ConvTranspose2d(w0, channels, 3, stride=2, padding=(p2h, p2w), output_padding=(o2h, o2w)),
            nn.Sigmoid(),
        )

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The ``[N, latent_dim]`` code."""
        return self.to_latent(self.encoder(x))

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.from_latent(z))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))

    def per_sample_loss(self, x: torch.Tensor) -> torch.Tensor:
        """Reconstruction MSE per sample, shape ``[N]`` (mean over C, H, W): FedED-w2's l_k(x).

        Differentiable; wrap in ``torch.no_grad()`` (and call ``eval()``) when only scoring.
        """
        return (self(x) - x).pow(2).flatten(1).mean(dim=1)


def _feded_mnist(input_shape) -> ConvAutoencoder:
    """FedED MNIST/EMNIST AE (Table A.4 as coded): widths 8/16/32, latent 4; 87,125 params on 1×28×28
    (docs/methods/feded.md §5.4: ≈87.1k)."""
    return ConvAutoencoder(input_shape, (8, 16, 32), latent_dim=4)


def _feded_cifar(input_shape) -> ConvAutoencoder:
    """FedED CIFAR-10 AE (Table A.5 as coded): widths 32/64/128, latent 64, the code's 3 → 7 → 15 → 32 decoder;
    499,459 params on 3×32×32 (docs/methods/feded.md §5.4: ≈499.5k)."""
    return ConvAutoencoder(input_shape, (32, 64, 128), latent_dim=64, cifar_code_decoder=True)


AUTOENCODERS: dict[str, Callable[[tuple[int, ...]], ConvAutoencoder]] = {
    "feded_mnist": _feded_mnist,
    "feded_cifar": _feded_cifar,
}


def build_autoencoder(name: str, input_shape: Sequence[int], field: str = AUTOENCODER_FIELD) -> ConvAutoencoder:
    """Build ``AUTOENCODERS[name]`` for ``input_shape`` (C, H, W); a shape it cannot take gives a ConfigError
    naming ``field`` and the shape. The reconstruction is checked to have the input's shape."""
    if name not in AUTOENCODERS:
        raise unknown_name_error(field, "autoencoder", name, list(AUTOENCODERS))
    shape = normalise_shape(name, input_shape, field=field, kind="autoencoder")
    try:
        model = AUTOENCODERS[name](shape)
    except ValueError as e:
        raise ConfigError(field, f"autoencoder {name!r} cannot take input shape {shape}: {e}") from None
    out = check_input_shape(model, name, shape, field=field, kind="autoencoder")
    if tuple(out.shape[1:]) != shape:  # a bug in the geometry, not a user error
        raise AssertionError(f"autoencoder {name!r}: reconstruction {tuple(out.shape[1:])} for input {shape}")
    return model
