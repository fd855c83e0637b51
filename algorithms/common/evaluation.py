"""The one evaluation every method uses: mean cross-entropy and accuracy of a model on (x, y); and the batch size
no-grad inference uses."""
from __future__ import annotations

import weakref
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

# On a CPU an inference batch is as large as keeps the model's largest activation within INFERENCE_CACHE_BYTES: a
# batch that spills out of the caches runs its element-wise layers (ReLU, pooling, layout copies) memory-bound.
# Measured (1 thread; python -m benchmarks.cpu_kernels): leaf_cnn on 1,000 3×32×32 images 1.28 s at batch 1,024,
# 0.52 s at 32; resnet8 on 360 images 2.79 s and 1.74 s; the 6k-parameter cnn on 8×8 digits is fastest at 256-1,024.
INFERENCE_CACHE_BYTES = 6 * 2 ** 20
MAX_INFERENCE_BATCH, MIN_INFERENCE_BATCH = 1024, 16
_inference_batches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def inference_batch_size(model: nn.Module, x: torch.Tensor) -> int:
    """The batch size for no-grad inference of ``model`` on ``x``'s samples. Where the model runs on a CPU: the most
    samples whose largest activation fits INFERENCE_CACHE_BYTES, within [MIN_INFERENCE_BATCH, MAX_INFERENCE_BATCH],
    measured once per model and sample shape with a one-sample forward pass in eval mode; elsewhere
    MAX_INFERENCE_BATCH. ``x`` may still be on another device than the model. Results depend on it only through
    float rounding (sums in another order, at most ~1e-7 relative)."""
    parameter = next(model.parameters(), None)
    device = parameter.device if parameter is not None else x.device
    if device.type != "cpu" or len(x) == 0:
        return MAX_INFERENCE_BATCH
    known = _inference_batches.setdefault(model, {})
    key = (tuple(x.shape[1:]), x.dtype)
    if key not in known:
        known[key] = _cache_fitting_batch(model, x[:1].to(device))
    return known[key]


def inference_slices(model: nn.Module, x: torch.Tensor, batch_size: int | None = None) -> Iterator[slice]:
    """The row slices of ``x`` that no-grad inference of ``model`` runs one at a time: ``batch_size`` rows each
    (default: :func:`inference_batch_size`), the last one shorter."""
    step = batch_size or inference_batch_size(model, x)
    return (slice(start, start + step) for start in range(0, len(x), step))


def _cache_fitting_batch(model: nn.Module, sample: torch.Tensor) -> int:
    largest = sample.numel() * sample.element_size()

    def record(module, args, output):
        nonlocal largest
        if isinstance(output, torch.Tensor):
            largest = max(largest, output.numel() * output.element_size())

    hooks = [m.register_forward_hook(record) for m in model.modules()]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(sample)
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    return int(min(MAX_INFERENCE_BATCH, max(MIN_INFERENCE_BATCH, INFERENCE_CACHE_BYTES // largest)))


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, prefix: str = "test_",
             batch_size: int | None = None) -> dict[str, float]:
    """``{prefix}loss`` and ``{prefix}accuracy`` of ``model`` on (x, y), e.g. ``val_loss``/``val_accuracy``, in
    batches of ``batch_size`` (default: :func:`inference_batch_size`)."""
    model.eval()
    loss_sum, correct = 0.0, 0
    for rows in inference_slices(model, x, batch_size):
        logits = model(x[rows])
        target = y[rows]
        loss_sum += float(F.cross_entropy(logits, target, reduction="sum"))
        correct += int((logits.argmax(dim=1) == target).sum())
    n = max(len(y), 1)
    return {f"{prefix}loss": loss_sum / n, f"{prefix}accuracy": correct / n}
