"""A model's state as one flat float vector: what the server broadcasts and clients send back.

The vector holds every floating-point entry of ``state_dict()`` (parameters and float buffers such as
BatchNorm running statistics), in ``state_dict`` order. Integer buffers (``num_batches_tracked``) stay
with each model. Averaging the whole float state matches the reference FedAvg code (docs/methods/feded.md §2.2).
"""
from __future__ import annotations

import torch
from torch import nn


def _float_entries(model: nn.Module):
    return [(k, v) for k, v in model.state_dict(keep_vars=True).items() if v.dtype.is_floating_point]


def get_flat_weights(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([v.detach().reshape(-1) for _, v in _float_entries(model)]).to("cpu", torch.float32)


def set_flat_weights(model: nn.Module, flat: torch.Tensor) -> None:
    """Copy ``flat`` into the model in place (no new modules or tensors are allocated)."""
    offset = 0
    with torch.no_grad():
        for _, v in _float_entries(model):
            n = v.numel()
            v.copy_(flat[offset:offset + n].view_as(v))
            offset += n
    if offset != flat.numel():
        raise ValueError(f"flat weights have {flat.numel()} values, the model holds {offset}")


def parameter_mask(model: nn.Module) -> torch.Tensor:
    """Boolean mask over the flat vector: True where the entry is a trainable parameter (not a buffer)."""
    names = {n for n, _ in model.named_parameters()}
    return torch.cat([torch.full((v.numel(),), k in names, dtype=torch.bool) for k, v in _float_entries(model)])
