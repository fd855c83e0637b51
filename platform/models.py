"""Model registry. Every model is a :class:`Classifier`: a feature extractor and a head, kept separate
because distillation and scoring methods (FedAUX, the single-image method) need the features.

Models adapt to the input shape and number of classes they are built for.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn


class Classifier(nn.Module):
    """``forward(x) = head(features(x))``; outputs raw logits."""

    def __init__(self, features: nn.Module, head: nn.Module):
        super().__init__()
        self.features = features
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _mlp(input_shape: tuple[int, ...], num_classes: int, hidden: int = 64) -> Classifier:
    dim = 1
    for s in input_shape:
        dim *= s
    return Classifier(nn.Sequential(nn.Flatten(), nn.Linear(dim, hidden), nn.ReLU()), nn.Linear(hidden, num_classes))


def _small_cnn(input_shape: tuple[int, ...], num_classes: int) -> Classifier:
    """Two 3×3 conv blocks (16, 32 channels) with 2×2 max-pooling, then a linear head. Sized for 8×8 digits."""
    channels, height, width = input_shape
    features = nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
    )
    with torch.no_grad():
        dim = features(torch.zeros(1, channels, height, width)).shape[1]
    return Classifier(features, nn.Linear(dim, num_classes))


MODELS: dict[str, Callable[[tuple[int, ...], int], Classifier]] = {
    "cnn": _small_cnn,
    "mlp": _mlp,
}


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int) -> Classifier:
    return MODELS[name](tuple(input_shape), num_classes)
