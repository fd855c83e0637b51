"""The one evaluation every method uses: mean cross-entropy and accuracy of a model on (x, y)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, prefix: str = "test_",
             batch_size: int = 1024) -> dict[str, float]:
    """``{prefix}loss`` and ``{prefix}accuracy`` of ``model`` on (x, y), e.g. ``val_loss``/``val_accuracy``."""
    model.eval()
    loss_sum, correct = 0.0, 0
    for start in range(0, len(y), batch_size):
        logits = model(x[start:start + batch_size])
        target = y[start:start + batch_size]
        loss_sum += float(F.cross_entropy(logits, target, reduction="sum"))
        correct += int((logits.argmax(dim=1) == target).sum())
    n = max(len(y), 1)
    return {f"{prefix}loss": loss_sum / n, f"{prefix}accuracy": correct / n}
