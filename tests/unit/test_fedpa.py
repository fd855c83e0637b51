"""FedPA (docs/methods/fedkp_fedpa.md §4): the DP delta, IASG samples, burn-in, the server step, the interface."""
import dataclasses

import pytest
import torch

from algorithms.base import aggregate_round

from algorithms import ALGORITHMS, ClientContext, ServerContext, reduce_updates
from algorithms.common import LocalTraining, get_flat_weights, set_flat_weights
from algorithms.fedpa import FedPAHyperparams, IASGSampler, fedpa_delta, fedpa_delta_direct, fedpa_local
from platform.errors import ConfigError
from platform.config.schema import build


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))


def _client(n, seed, cid=0, epochs=2, lr=0.1, batch=8, momentum=0.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    return ClientContext(client_id=cid, x=x, y=y, model=_model(99),
                         training=LocalTraining(epochs, batch, "sgd", lr, momentum),
                         generator=torch.Generator().manual_seed(seed + 100),
                         noise_generator=torch.Generator().manual_seed(seed + 200), state={},
                         device=torch.device("cpu"))


def _ctx(lr=1.0, momentum=0.0):
    return ServerContext.for_model(_model(0), server_lr=lr, server_momentum=momentum, num_classes=3,
                         device=torch.device("cpu"))


def _fedpa(**changes):
    return ALGORITHMS["fedpa"](dataclasses.replace(FedPAHyperparams(), **changes))


# --------------------------------------------------------------------------------------------- the delta

@pytest.mark.parametrize("l", [1, 2, 3, 5, 9])
@pytest.mark.parametrize("rho", [0.0, 0.01, 0.1, 1.0, 5.0])
def test_dp_delta_equals_the_direct_dense_solve(l, rho):
    g = torch.Generator().manual_seed(l * 100 + int(rho * 10))
    d = 7
    samples = torch.randn(l, d, generator=g, dtype=torch.float64)
    x0 = torch.randn(d, generator=g, dtype=torch.float64)
    dp = fedpa_delta(samples, x0, rho)
    direct = fedpa_delta_direct(samples, x0, rho)
    torch.testing.assert_close(dp, direct, rtol=0, atol=1e-10)
    # float32, as clients run it, within 1e-5; a list of vectors works as well as a matrix
    dp32 = fedpa_delta(list(samples.float()), x0.float(), rho)
    torch.testing.assert_close(dp32.double(), direct, rtol=0, atol=1e-5)


def test_direct_solve_is_the_shrinkage_estimator():
    # Σ̂ = ρ_l·I + (1 − ρ_l)·Ŝ with the (l − 1) covariance, written out by hand for l = 2, d = 2
    s = torch.tensor([[1.0, 2.0], [3.0, -2.0]], dtype=torch.float64)
    x0 = torch.tensor([0.5, 0.25], dtype=torch.float64)
    rho = 0.5
    rho_l = 1 / (1 + rho)
    mu = torch.tensor([2.0, 0.0], dtype=torch.float64)
    cov = torch.tensor([[2.0, -4.0], [-4.0, 8.0]], dtype=torch.float64)  # Σ (s − μ)(s − μ)ᵀ / (l − 1)
    sigma = rho_l * torch.eye(2, dtype=torch.float64) + (1 - rho_l) * cov
    expected = torch.linalg.solve(sigma, x0 - mu)
    torch.testing.assert_close(fedpa_delta_direct(s, x0, rho), expected)
    torch.testing.assert_close(fedpa_delta(s, x0, rho), expected)


def test_rho_zero_is_the_iterate_averaged_fedavg_delta():
    g = torch.Generator().manual_seed(0)
    samples = torch.randn(6, 50, generator=g, dtype=torch.float64)
    x0 = torch.randn(50, generator=g, dtype=torch.float64)
    torch.testing.assert_close(fedpa_delta(samples, x0, 0.0), x0 - samples.mean(0), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------------------------- IASG

def _feed(sampler, values, epoch_lengths):
    model = torch.nn.Linear(1, 1, bias=False)
    it = iter(values)
    for length in epoch_lengths:
        for _ in range(length):
            set_flat_weights(model, torch.tensor([float(next(it))]))
            sampler.on_step(model)
        sampler.on_epoch_end(model)
    return [float(s) for s in sampler.samples]


def test_iasg_samples_are_per_epoch_iterate_averages():
    assert _feed(IASGSampler(), [1, 2, 3, 10, 20, 30, 7], [3, 3, 1]) == [2.0, 20.0, 7.0]
    # the original sampler's knobs: skip 2 steps, average 2, discard 1, ...
    values = [100, 100, 1, 3, 100, 5, 7, 100, 9]
    assert _feed(IASGSampler(steps_per_sample=2, burnin_steps=2, discard_steps=1), values, [9]) == [2.0, 6.0]
    # epoch mode with a client burn-in that ends mid-epoch, and a discard after each sample
    assert _feed(IASGSampler(burnin_steps=2, discard_steps=1), [100, 100, 4, 6, 100, 8, 10], [4, 3]) == [5.0, 9.0]
    assert _feed(IASGSampler(burnin_steps=10), [1, 2, 3], [3]) == []


# --------------------------------------------------------------------------------------------- clients

def test_before_the_burnin_the_client_update_is_fedavgs():
    start = get_flat_weights(_model(0))
    fedavg = ALGORITHMS["fedavg"]().client_update({"weights": start}, _client(30, seed=2))
    for weighting, weight in (("uniform", 1.0), ("data_size", 30.0)):
        fedpa = _fedpa(burnin_rounds=3, weighting=weighting)
        for rnd in (0, 2):
            update = fedpa.client_update({"weights": start, "round": rnd}, _client(30, seed=2))
            assert torch.equal(update.tensors["delta"], fedavg.tensors["delta"])
            assert update.weight == weight
        after = fedpa.client_update({"weights": start, "round": 3}, _client(30, seed=2))
        assert not torch.allclose(after.tensors["delta"], fedavg.tensors["delta"])


def test_after_the_burnin_rho_zero_is_fedavg_with_iterate_averaging():
    # one optimiser step per epoch (batch ≥ N): the IASG sample of epoch e is the e-th iterate, which is FedAvg's
    # model after e epochs with the same batch generator
    start = get_flat_weights(_model(0))
    fedavg_deltas = []
    for epochs in (1, 2, 3):
        update = ALGORITHMS["fedavg"]().client_update({"weights": start}, _client(20, seed=4, epochs=epochs, batch=32))
        fedavg_deltas.append(update.tensors["delta"])
    payload = {"weights": start, "round": 0}
    one_epoch = _fedpa(burnin_rounds=0, rho=0.1).client_update(payload, _client(20, seed=4, epochs=1, batch=32))
    assert torch.equal(one_epoch.tensors["delta"], fedavg_deltas[0])  # l = 1: Δ = x0 − s_1 for any ρ
    three = _fedpa(burnin_rounds=0, rho=0.0).client_update(payload, _client(20, seed=4, epochs=3, batch=32))
    torch.testing.assert_close(three.tensors["delta"], torch.stack(fedavg_deltas).mean(0), rtol=0, atol=1e-6)
    assert three.metrics["fedpa_samples"] == 3.0
    shrunk = _fedpa(burnin_rounds=0, rho=1.0).client_update(payload, _client(20, seed=4, epochs=3, batch=32))
    assert not torch.allclose(shrunk.tensors["delta"], three.tensors["delta"])


def test_client_delta_is_minus_the_dp_delta_of_its_iasg_samples():
    start = get_flat_weights(_model(0))
    hp = FedPAHyperparams(rho=0.3, burnin_rounds=0)
    client = _client(40, seed=5, epochs=4, momentum=0.9)
    sampler = IASGSampler()
    set_flat_weights(client.model, start)
    from algorithms.common import train_local
    train_local(client.model, client.x, client.y, client.training, client.generator, on_step=sampler.on_step,
                on_epoch_end=sampler.on_epoch_end)
    assert len(sampler.samples) == 4
    expected = fedpa_delta_direct(torch.stack(sampler.samples).double(), start.double(), 0.3)
    update = ALGORITHMS["fedpa"](hp).client_update({"weights": start, "round": 5}, _client(40, seed=5, epochs=4,
                                                                                             momentum=0.9))
    torch.testing.assert_close(-update.tensors["delta"].double(), expected, rtol=0, atol=1e-5)


def test_nonfinite_fallback(monkeypatch):
    import algorithms.fedpa as fedpa_module

    start = get_flat_weights(_model(0))
    monkeypatch.setattr(fedpa_module, "fedpa_delta", lambda samples, x0, rho: torch.full_like(x0, float("nan")))
    payload = {"weights": start, "round": 0}
    raw, _, metrics = fedpa_local(FedPAHyperparams(burnin_rounds=0), payload, _client(20, seed=6))
    assert torch.isnan(raw).all() and metrics["fedpa_nonfinite"] == 1.0
    fixed, _, metrics = fedpa_local(FedPAHyperparams(burnin_rounds=0, nonfinite_fallback=True), payload,
                                    _client(20, seed=6))
    sampler = IASGSampler()
    client = _client(20, seed=6)
    set_flat_weights(client.model, start)
    from algorithms.common import train_local
    train_local(client.model, client.x, client.y, client.training, client.generator, on_step=sampler.on_step,
                on_epoch_end=sampler.on_epoch_end)
    torch.testing.assert_close(fixed, start - torch.stack(sampler.samples).mean(0))
    assert metrics["fedpa_nonfinite"] == 1.0


def test_config_validation():
    assert build(FedPAHyperparams, {"rho": 0.01, "burnin_rounds": 400}, "algorithm").rho == 0.01
    for params in ({"rho": -1}, {"burnin_rounds": -1}, {"weighting": "size"}, {"steps_per_sample": -2}):
        with pytest.raises(ConfigError):
            build(FedPAHyperparams, params, "algorithm")
    assert all(ALGORITHMS["fedpa"].hyperparameter_docs().values())
    # the stage cache must never hand FedPA clients FedAvg's results (different procedure and weights)
    local_sgd = ALGORITHMS["fedavg"]().client_stage_fields()
    assert _fedpa().client_stage_fields() != local_sgd
    assert _fedpa(rho=0.2).client_stage_fields() != _fedpa().client_stage_fields()
    assert _fedpa(weighting="data_size").client_stage_fields() != _fedpa().client_stage_fields()


# --------------------------------------------------------------------------------------------- the interface

@pytest.mark.parametrize("weighting", ["uniform", "data_size"])
def test_end_to_end_through_the_interface(weighting):
    algo = _fedpa(burnin_rounds=1, rho=0.1, weighting=weighting)
    assert algo.summable
    ctx = _ctx(lr=0.5, momentum=0.9)
    state = algo.init_server_state(ctx)
    sizes = [12, 25, 0, 18]
    for rnd in range(3):
        payload = algo.broadcast(state, [0, 1, 2, 3])
        assert payload["round"] == rnd
        updates = [algo.client_update(payload, _client(n, seed=10 * rnd + i, cid=i)) for i, n in enumerate(sizes)]
        partials = [reduce_updates(updates[:2]), reduce_updates(updates[2:])]  # as two actors would pre-reduce
        weights = [0.0 if n == 0 else (1.0 if weighting == "uniform" else float(n)) for n in sizes]
        mean_delta = sum(w * u.tensors["delta"] for w, u in zip(weights, updates)) / sum(weights)
        velocity = state.optimizer.get("velocity")
        velocity = mean_delta if velocity is None else 0.9 * velocity + mean_delta
        new = aggregate_round(algo, state, partials, ctx)[0]
        torch.testing.assert_close(new.weights, state.weights + 0.5 * velocity, rtol=0, atol=1e-6)
        assert new.round == rnd + 1
        if rnd >= 1:
            assert "fedpa_samples" in updates[0].metrics
        state = new
