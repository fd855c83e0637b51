"""The :class:`Classifier` contract and the model registry machinery.

Every classifier is a feature extractor followed by a head, kept separate because distillation and scoring
methods need the features: FedAUX scores clients on h(x) with f = g∘h (docs/methods/fedaux.md §6.2), the single-image
method clusters the penultimate embeddings (docs/methods/single_image.md §3.1).

Registry entries are :class:`ModelBuilder` objects. Calling one builds the model and then checks, with one
dummy forward pass, that the model really takes the requested input shape. A bad shape then gives a
:class:`~algorithms.errors.ConfigError` that names ``model.name`` and the shape, not a torch error from deep
inside a layer at the first training step.
"""
from __future__ import annotations

import operator
from typing import Callable, Sequence

import torch
from torch import nn

from algorithms.errors import ConfigError, did_you_mean

MODEL_FIELD = "model.name"


class Classifier(nn.Module):
    """``forward(x) = head(features(x))``; outputs raw logits.

    ``features(x)`` returns a flat ``[N, feature_dim]`` tensor (after global pooling where the model has it).
    ``head`` is the final linear layer, possibly preceded by dropout (which is the identity in eval mode).
    """

    def __init__(self, features: nn.Module, head: nn.Module, feature_dim: int | None = None):
        super().__init__()
        self.features = features
        self.head = head
        if feature_dim is None:
            feature_dim = _first_linear(head).in_features
        self.feature_dim = int(feature_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _first_linear(module: nn.Module) -> nn.Linear:
    for m in module.modules():
        if isinstance(m, nn.Linear):
            return m
    raise TypeError("cannot infer feature_dim: the head has no nn.Linear; pass feature_dim explicitly")


def allowed(names: Sequence[str]) -> str:
    return ", ".join(names)


def unknown_name_error(field: str, kind: str, name: object, names: Sequence[str]) -> ConfigError:
    return ConfigError(field, f"unknown {kind} {name!r}{did_you_mean(name, names)}; allowed: {allowed(names)}")


def normalise_shape(name: str, input_shape: Sequence[int], field: str = MODEL_FIELD,
                    image: bool = True, kind: str = "model") -> tuple[int, ...]:
    """``input_shape`` as a tuple of positive ints; ``image`` models need exactly (C, H, W)."""
    try:
        shape = tuple(operator.index(s) for s in input_shape)
    except TypeError:
        raise ConfigError(field, f"{kind} {name!r}: input shape must be a sequence of ints, "
                                 f"got {input_shape!r}") from None
    if not shape or any(s < 1 for s in shape):
        raise ConfigError(field, f"{kind} {name!r} cannot take input shape {shape}: every dimension must be >= 1")
    if image and len(shape) != 3:
        raise ConfigError(field, f"{kind} {name!r} cannot take input shape {shape}: it needs an image shape (C, H, W)")
    return shape


def _stride_of(module: nn.Module) -> int:
    stride = getattr(module, "stride", 1)
    if stride is None:  # MaxPool2d/AvgPool2d default stride = kernel_size, already resolved; keep it safe
        stride = getattr(module, "kernel_size", 1)
    if isinstance(stride, (tuple, list)):
        return max(int(s) for s in stride)
    return int(stride)


class _Degenerate(Exception):
    pass


def check_input_shape(model: nn.Module, name: str, shape: tuple[int, ...], field: str = MODEL_FIELD,
                      run: Callable[[nn.Module, torch.Tensor], object] | None = None, kind: str = "model"):
    """One dummy forward pass (batch 1, eval mode, no grad, RNG untouched) to prove ``model`` takes ``shape``.

    Beyond torch's own errors (a kernel larger than its input, a negative size) it rejects a downsampling layer
    (stride > 1) that receives a map with a side of 1: the input has been downsampled more times than it has
    pixels for, e.g. a 1×8×8 image through the ImageNet-stem ResNet-18. The pass runs in eval mode so
    BatchNorm running statistics stay untouched, and under ``fork_rng`` so that building a model consumes
    exactly the random numbers its constructors draw. Returns what ``run(model, x)`` returns (default
    ``model(x)``).
    """
    hooks = []

    def pre_hook(module, args):
        x = args[0]
        if x.dim() >= 4 and (x.shape[-1] < 2 or x.shape[-2] < 2):
            raise _Degenerate(f"{type(module).__name__} with stride {_stride_of(module)} receives a "
                              f"{x.shape[-2]}x{x.shape[-1]} map (the image is too small for its downsamplings)")

    for m in model.modules():
        # ConvTranspose2d is not an nn.Conv2d subclass: upsampling layers are (rightly) not checked.
        if isinstance(m, (nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d)) and _stride_of(m) > 1:
            hooks.append(m.register_forward_pre_hook(pre_hook))
    was_training = model.training
    model.eval()
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            x = torch.zeros(1, *shape)
            return run(model, x) if run is not None else model(x)
    except _Degenerate as e:
        raise ConfigError(field, f"{kind} {name!r} cannot take input shape {shape}: {e}") from None
    except (RuntimeError, ValueError) as e:
        raise ConfigError(field, f"{kind} {name!r} cannot take input shape {shape}: {_first_line(e)}") from None
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)


def _positive_int(name: str, value) -> int:
    """``value`` as an int >= 1; NumPy integers are fine (dataset metadata often carries them), bools are not."""
    try:
        if isinstance(value, bool):
            raise TypeError
        n = operator.index(value)
    except TypeError:
        n = 0
    if n < 1:
        raise ConfigError(MODEL_FIELD, f"model {name!r}: num_classes must be an int >= 1, got {value!r}")
    return n


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class ModelBuilder:
    """A registry entry: ``MODELS[name](input_shape, num_classes) -> Classifier``, shape-checked."""

    def __init__(self, name: str, fn: Callable[[tuple[int, ...], int], Classifier], image: bool = True):
        self.name = name
        self.fn = fn
        self.image = image
        self.__doc__ = fn.__doc__

    def __call__(self, input_shape: Sequence[int], num_classes: int) -> Classifier:
        shape = normalise_shape(self.name, input_shape, image=self.image)
        num_classes = _positive_int(self.name, num_classes)
        try:
            model = self.fn(shape, num_classes)
        except ConfigError:
            raise
        except (RuntimeError, ValueError) as e:  # e.g. a flattened size of 0 while sizing the head
            raise ConfigError(MODEL_FIELD,
                              f"model {self.name!r} cannot take input shape {shape}: {_first_line(e)}") from None

        def run(m, x):
            f = m.features(x)
            return f, m.head(f)

        feats, logits = check_input_shape(model, self.name, shape, run=run)
        # Shape mismatches here are bugs in a builder, not user errors.
        assert tuple(logits.shape) == (1, num_classes), (self.name, tuple(logits.shape))
        assert feats.dim() == 2 and feats.shape[1] == model.feature_dim, \
            (self.name, tuple(feats.shape), model.feature_dim)
        return model

    def __repr__(self) -> str:
        return f"ModelBuilder({self.name!r})"


MODELS: dict[str, ModelBuilder] = {}


def register(name: str, image: bool = True):
    """Decorator: add ``fn(input_shape, num_classes) -> Classifier`` to :data:`MODELS` under ``name``."""

    def wrap(fn):
        if name in MODELS:
            raise KeyError(f"model {name!r} registered twice")
        MODELS[name] = ModelBuilder(name, fn, image=image)
        return fn

    return wrap


def flat_dim(features: nn.Module, input_shape: tuple[int, ...]) -> int:
    """Size of ``features``' flat output for one input of ``input_shape`` (no grad, RNG untouched)."""
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        return int(features(torch.zeros(1, *input_shape)).shape[1])
