"""Model zoo. Every classifier is a :class:`Classifier`: a feature extractor and a head, kept separate because
distillation and scoring methods (FedAUX, the single-image method) need the features.

- :data:`MODELS`: ``name -> builder(input_shape, num_classes) -> Classifier``; :func:`build_model` looks one up.
  Models adapt to the input shape (channels and spatial size) and the number of classes they are built for,
  and building one checks that it takes that shape (a :class:`~algorithms.errors.ConfigError` otherwise).
- :data:`AUTOENCODERS` / :func:`build_autoencoder`: FedED-w2's reconstruction models (not classifiers).
- :func:`assign_architectures`: client → model name for model-heterogeneous runs.

Modules: ``cnn`` (MLP and small CNNs, LeNet, AlexNet), ``resnet`` (ResNets, WRN), ``mobile`` (MobileNetV2,
ShuffleNetV2), ``autoencoder``, ``heterogeneous``; ``base`` holds the contract and the registry.
"""
from __future__ import annotations

from typing import Sequence

from algorithms.models.base import MODEL_FIELD, MODELS, Classifier, ModelBuilder, register, unknown_name_error
from algorithms.models import cnn as _cnn  # noqa: F401  (registers; "cnn" and "mlp" stay first in MODELS)
from algorithms.models import resnet as _resnet  # noqa: F401
from algorithms.models import mobile as _mobile  # noqa: F401
from algorithms.models.autoencoder import AUTOENCODERS, ConvAutoencoder, build_autoencoder
from algorithms.models.heterogeneous import architecture_shares, assign_architectures

__all__ = [
    "AUTOENCODERS", "Classifier", "ConvAutoencoder", "MODELS", "ModelBuilder", "architecture_shares",
    "assign_architectures",
    "build_autoencoder", "build_model", "register",
]


def build_model(name: str, input_shape: Sequence[int], num_classes: int) -> Classifier:
    """``MODELS[name](input_shape, num_classes)``; an unknown name or a shape the model cannot take raises
    :class:`~algorithms.errors.ConfigError` on ``model.name``."""
    if not isinstance(name, str) or name not in MODELS:
        raise unknown_name_error(MODEL_FIELD, "model", name, list(MODELS))
    return MODELS[name](input_shape, num_classes)
