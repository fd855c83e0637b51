"""``MaxPool2d``: ``nn.MaxPool2d`` with the same results, computed faster on a CPU.

PyTorch's CPU max-pooling kernel for the default (NCHW) layout vectorises along the output's width, which is 2 to 16
here, so most vector lanes idle; the channels-last kernel vectorises along the channels. Measured on this project's
machines (torch 2.14, 1 thread, AMD EPYC; ``python -m benchmarks.cpu_kernels``): 10×64×28×28 takes 2.8 ms NCHW and
0.3 ms channels-last, the copy into that layout included; 360×16×8×8 2.1 ms and 0.33 ms.

So on a CPU, for inputs of at least :data:`FAST_MIN_ELEMENTS` elements, the forward pass pools a channels-last copy
and returns the result (and the argmax indices) in the default layout. The backward pass is the NCHW kernel's own,
which is fast, on tensors in the default layout, so the layers around it see exactly the layouts they saw before.
A maximum involves no rounding and both kernels scan a window in the same order (the first maximum wins), so the
output, the indices and every gradient are bit-identical to ``nn.MaxPool2d``'s (tests/unit/test_pooling.py, also
under ``torch.func.vmap`` as the batched clients use it). Elsewhere (a GPU, small inputs, ``return_indices``) it is
``nn.MaxPool2d``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.utils import _pair

# Below this many input elements the plain kernel is as fast as the copies and the autograd function's overhead
# (measured: a 32×16×8×8 training batch is 6 % slower through the channels-last path, 10×64×28×28 is 10–25 % faster
# for a whole training step).
FAST_MIN_ELEMENTS = 65_536


def _channels_last(x: torch.Tensor) -> torch.Tensor:
    # the explicit permutes (not .contiguous(memory_format=...)) also work on torch.func's batched tensors
    return x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)


class _MaxPool2dChannelsLast(torch.autograd.Function):
    """Forward on a channels-last copy, backward with the default-layout kernel and the same indices."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, kernel_size, stride, padding, dilation, ceil_mode):
        out, indices = F.max_pool2d(_channels_last(x), kernel_size, stride, padding, dilation, ceil_mode,
                                    return_indices=True)
        return out.contiguous(), indices.contiguous()

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, *ctx.pool_args = inputs
        ctx.save_for_backward(x, output[1])
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx, grad_out, _grad_indices):
        x, indices = ctx.saved_tensors
        grad_x = torch.ops.aten.max_pool2d_with_indices_backward(grad_out, x, *ctx.pool_args, indices)
        return grad_x, None, None, None, None, None


class MaxPool2d(nn.MaxPool2d):
    """``nn.MaxPool2d`` (same arguments, state and results), faster on a CPU; see the module docstring."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.dim() != 4 or self.return_indices or x.numel() < FAST_MIN_ELEMENTS:
            return super().forward(x)
        args = (_pair(self.kernel_size), _pair(self.stride), _pair(self.padding), _pair(self.dilation), self.ceil_mode)
        if not (torch.is_grad_enabled() and x.requires_grad):
            return F.max_pool2d(_channels_last(x), *args).contiguous()
        return _MaxPool2dChannelsLast.apply(x, *args)[0]
