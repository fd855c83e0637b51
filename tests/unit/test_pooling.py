"""algorithms.models.pooling.MaxPool2d gives exactly nn.MaxPool2d's outputs and gradients, through its fast path."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from algorithms.models import build_model
from algorithms.models.pooling import FAST_MIN_ELEMENTS, MaxPool2d
from benchmarks.cpu_kernels import with_plain_pools

POOLS = [dict(kernel_size=2), dict(kernel_size=4, stride=4), dict(kernel_size=3, stride=2, padding=1),
         dict(kernel_size=2, ceil_mode=True), dict(kernel_size=3, stride=1, dilation=2)]


def _input(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    # ties everywhere: ReLU zeros, and values rounded to a coarse grid
    return torch.where(x > 0, torch.round(x * 2) / 2, torch.zeros(()))


@pytest.mark.parametrize("kwargs", POOLS)
@pytest.mark.parametrize("shape", [(10, 64, 28, 28), (67, 16, 9, 7)])
def test_outputs_and_gradients_are_bit_identical(kwargs, shape):
    assert torch.Size(shape).numel() >= FAST_MIN_ELEMENTS
    fast, plain = MaxPool2d(**kwargs), nn.MaxPool2d(**kwargs)
    x = _input(shape).requires_grad_()
    x_plain = x.detach().clone().requires_grad_()
    y, y_plain = fast(x), plain(x_plain)
    assert "MaxPool2dChannelsLast" in y.grad_fn.name()  # the fast path ran, not the fallback
    assert y.is_contiguous() and torch.equal(y, y_plain)
    upstream = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    y.backward(upstream)
    y_plain.backward(upstream)
    assert x.grad.is_contiguous() and torch.equal(x.grad, x_plain.grad)
    with torch.no_grad():
        assert torch.equal(fast(x), y_plain)


def test_small_inputs_and_return_indices_use_the_plain_kernel():
    small = _input((2, 4, 8, 8)).requires_grad_()
    assert small.numel() < FAST_MIN_ELEMENTS
    assert "MaxPool2dChannelsLast" not in MaxPool2d(2)(small).grad_fn.name()
    large = _input((10, 64, 28, 28))
    out, indices = MaxPool2d(2, return_indices=True)(large)
    expected, expected_indices = F.max_pool2d(large, 2, return_indices=True)
    assert torch.equal(out, expected) and torch.equal(indices, expected_indices)


def test_a_training_step_of_leaf_cnn_is_bit_identical_to_nn_maxpool():
    torch.manual_seed(0)
    model = build_model("leaf_cnn", (3, 32, 32), 10)
    assert any(isinstance(m, MaxPool2d) for m in model.modules())
    twin = with_plain_pools(model)
    x, y = torch.randn(10, 3, 32, 32), torch.randint(0, 10, (10,))
    for net in (model, twin):
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        for _ in range(3):
            opt.zero_grad()
            torch.manual_seed(5)  # the same dropout masks
            F.cross_entropy(net(x), y).backward()
            opt.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a, b)


def test_per_client_gradients_under_vmap_are_bit_identical():
    """As the batched clients train (algorithms.common.batched_training): vmap over stacked parameters."""
    torch.manual_seed(0)
    model = build_model("fedkp_mnist_cnn", (1, 28, 28), 10)
    twin = with_plain_pools(model)
    clients = 3
    params = {k: v.detach() + 0.01 * torch.randn(clients, *v.shape) for k, v in model.named_parameters()}
    x, y = torch.randn(clients, 32, 1, 28, 28), torch.randint(0, 10, (clients, 32))

    def per_client(net):
        return vmap(grad(lambda p, xb, yb: F.cross_entropy(functional_call(net, p, (xb,)), yb)))(params, x, y)

    fast, plain = per_client(model), per_client(twin)
    assert all(torch.equal(fast[k], plain[k]) for k in fast)
