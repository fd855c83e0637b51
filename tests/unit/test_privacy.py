"""Unit tests for algorithms/common/privacy.py: σ, clipping, seeded noise, the postprocessor chain."""
from __future__ import annotations

import math

import pytest
import torch

from algorithms.common.privacy import (GaussianMechanism, GaussianNoise, NormClip, Postprocessor,
                                       apply_postprocessors, clip_by_norm, gaussian_sigma, joint_norm)


def _gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _update() -> dict[str, torch.Tensor]:
    base = torch.Generator().manual_seed(123)
    return {"w": torch.randn(4, 5, generator=base), "b": torch.randn(5, generator=base),
            "a": torch.randn(2, 3, 2, generator=base)}


@pytest.mark.parametrize("epsilon,delta,sens", [(1.0, 1e-5, 1.0), (0.5, 1e-3, 2.0), (8.0, 1e-6, 0.1),
                                                (3.0, 0.5, 7.5)])
def test_sigma_closed_form(epsilon, delta, sens):
    expected = sens * math.sqrt(2 * math.log(1.25 / delta)) / epsilon
    assert gaussian_sigma(epsilon, delta, sens) == pytest.approx(expected, rel=1e-12)
    assert GaussianMechanism(epsilon, delta, sens).sigma == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("epsilon,delta,lam,n", [(1.0, 1e-5, 0.01, 1000), (0.1, 1e-3, 1e-3, 50000)])
def test_sigma_fedaux_form(epsilon, delta, lam, n):
    sigma = gaussian_sigma(epsilon, delta, 2.0 / (lam * n))
    assert sigma == pytest.approx(math.sqrt(8 * math.log(1.25 / delta) / (epsilon ** 2 * lam ** 2 * n ** 2)),
                                  rel=1e-12)


def test_sigma_scales_linearly():
    assert gaussian_sigma(2.0, 1e-5, 1.0) == pytest.approx(gaussian_sigma(1.0, 1e-5, 1.0) / 2)
    assert gaussian_sigma(1.0, 1e-5, 3.0) == pytest.approx(3 * gaussian_sigma(1.0, 1e-5, 1.0))


def test_infinite_epsilon_is_non_private_and_draws_nothing():
    assert gaussian_sigma(math.inf, 1e-5, 1.0) == 0.0
    mech = GaussianMechanism(math.inf, 1e-5, 1.0)
    assert mech.sigma == 0.0
    x = _update()
    g = _gen(0)
    state = g.get_state().clone()
    out = mech.privatize(x, g)
    assert torch.equal(g.get_state(), state)
    assert out.keys() == x.keys()
    for k in x:
        assert torch.equal(out[k], x[k])
        assert out[k].data_ptr() != x[k].data_ptr()  # a copy, not the input
    assert mech.metrics() == {"privacy_epsilon": math.inf, "privacy_delta": 1e-5, "privacy_sigma": 0.0}


@pytest.mark.parametrize("kwargs,name", [
    ({"epsilon": 0.0}, "epsilon"), ({"epsilon": -1.0}, "epsilon"), ({"epsilon": math.nan}, "epsilon"),
    ({"delta": 0.0}, "delta"), ({"delta": 1.0}, "delta"), ({"delta": 1.5}, "delta"),
    ({"sensitivity": -1.0}, "sensitivity"), ({"sensitivity": math.inf}, "sensitivity"),
])
def test_invalid_arguments_raise_naming_the_argument(kwargs, name):
    args = {"epsilon": 1.0, "delta": 1e-5, "sensitivity": 1.0, **kwargs}
    with pytest.raises(ValueError) as info:
        gaussian_sigma(**args)
    assert str(info.value).startswith(name + ":")
    with pytest.raises(ValueError) as info:
        GaussianMechanism(**args)
    assert str(info.value).startswith(name + ":")


@pytest.mark.parametrize("max_norm", [0.0, -1.0, math.nan])
def test_invalid_max_norm(max_norm):
    with pytest.raises(ValueError, match=r"^max_norm:"):
        clip_by_norm({"a": torch.ones(3)}, max_norm)
    with pytest.raises(ValueError, match=r"^max_norm:"):
        NormClip(max_norm)


def test_clip_by_norm_scales_down_jointly():
    x = {"a": torch.tensor([6.0, 0.0]), "b": torch.tensor([[0.0, 8.0]])}  # joint norm 10
    before = {k: v.clone() for k, v in x.items()}
    clipped, norm = clip_by_norm(x, 1.0)
    assert norm == pytest.approx(10.0)
    assert joint_norm(clipped) == pytest.approx(1.0, abs=1e-6)
    flat_in = torch.cat([x[k].flatten() for k in sorted(x)])
    flat_out = torch.cat([clipped[k].flatten() for k in sorted(x)])
    assert torch.allclose(flat_out, flat_in / 10.0)  # same direction
    for k in x:
        assert torch.equal(x[k], before[k])  # inputs unmodified


def test_clip_by_norm_never_scales_up():
    x = {"a": torch.tensor([0.3, 0.0]), "b": torch.tensor([0.0, 0.4])}  # joint norm 0.5
    before = {k: v.clone() for k, v in x.items()}
    clipped, norm = clip_by_norm(x, 1.0)
    assert norm == pytest.approx(0.5)
    for k in x:
        assert torch.equal(clipped[k], x[k])
        assert torch.equal(x[k], before[k])
    clipped[k].add_(1.0)  # the output is a new tensor
    assert torch.equal(x[k], before[k])


def test_privatize_uses_only_the_given_generator():
    mech = GaussianMechanism(1.0, 1e-5, 1.0)
    x = _update()
    torch.manual_seed(999)
    global_state = torch.get_rng_state().clone()
    out1 = mech.privatize(x, _gen(7))
    assert torch.equal(torch.get_rng_state(), global_state)
    torch.manual_seed(12345)  # changing the global RNG must not matter
    out2 = mech.privatize(x, _gen(7))
    out3 = mech.privatize(x, _gen(8))
    for k in x:
        assert torch.equal(out1[k], out2[k])
        assert not torch.allclose(out1[k], out3[k])
        assert not torch.allclose(out1[k], x[k])


def test_privatize_advances_generator_and_keeps_inputs():
    mech = GaussianMechanism(1.0, 1e-5, 1.0)
    x = _update()
    before = {k: v.clone() for k, v in x.items()}
    g = _gen(3)
    state = g.get_state().clone()
    mech.privatize(x, g)
    assert not torch.equal(g.get_state(), state)
    for k in x:
        assert torch.equal(x[k], before[k])


def test_privatize_draw_order_is_key_order_independent():
    mech = GaussianMechanism(1.0, 1e-5, 1.0)
    x = _update()
    reordered = {k: x[k] for k in reversed(list(x))}
    a = mech.privatize(x, _gen(5))
    b = mech.privatize(reordered, _gen(5))
    for k in x:
        assert torch.equal(a[k], b[k])


def test_sweep_over_epsilon_only_rescales_noise():
    x = _update()
    m1 = GaussianMechanism(0.5, 1e-5, 1.0)
    m2 = GaussianMechanism(4.0, 1e-5, 1.0)
    assert m1.sigma != m2.sigma
    o1 = m1.privatize(x, _gen(11))
    o2 = m2.privatize(x, _gen(11))
    for k in x:
        z1 = (o1[k] - x[k]) / m1.sigma
        z2 = (o2[k] - x[k]) / m2.sigma
        assert torch.allclose(z1, z2, atol=1e-5, rtol=0)


def test_noise_std_matches_sigma():
    mech = GaussianMechanism(2.0, 1e-5, 0.7)
    x = {"big": torch.zeros(100_000), "small": torch.zeros(10, 10)}
    out = mech.privatize(x, _gen(2024))
    noise = torch.cat([out[k].flatten() for k in x]).double()
    assert noise.std().item() == pytest.approx(mech.sigma, rel=0.02)
    assert abs(noise.mean().item()) < 0.02 * mech.sigma


def test_chain_equals_clip_then_noise_by_hand():
    x = {k: v * 10 for k, v in _update().items()}
    mech = GaussianMechanism(1.0, 1e-5, sensitivity=1.0)
    chain = [NormClip(1.0), GaussianNoise(mech)]
    assert all(isinstance(step, Postprocessor) for step in chain)
    out, metrics = apply_postprocessors(chain, x, _gen(42))

    clipped, norm = clip_by_norm(x, 1.0)
    expected = mech.privatize(clipped, _gen(42))
    assert out.keys() == x.keys()
    for k in x:
        assert torch.equal(out[k], expected[k])

    assert set(metrics) == {"update_norm", "clipped", "privacy_epsilon", "privacy_delta", "privacy_sigma"}
    assert metrics["update_norm"] == pytest.approx(norm)
    assert norm > 1.0 and metrics["clipped"] == 1.0
    assert metrics["privacy_epsilon"] == 1.0 and metrics["privacy_delta"] == 1e-5
    assert metrics["privacy_sigma"] == pytest.approx(mech.sigma)


def test_norm_clip_reports_not_clipped():
    x = {"a": torch.tensor([0.3, 0.4])}
    out, metrics = NormClip(1.0).apply(x, _gen(0))
    assert metrics == {"update_norm": pytest.approx(0.5), "clipped": 0.0}
    assert torch.equal(out["a"], x["a"])
