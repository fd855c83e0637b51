"""Federated SGLD (docs/methods/fedkp_fedpa.md §5.4): seeded noise, its scale, the server step, the chain average."""
import dataclasses
import math

import pytest
import torch

from algorithms.base import aggregate_round

from algorithms import ALGORITHMS, ClientContext, ClientUpdate, ServerContext, reduce_updates
from algorithms.common import LocalTraining, get_flat_weights
from algorithms.sgld import SGLD, SGLDHyperparams, langevin_std
from platform.errors import ConfigError
from platform.config.schema import build


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))


def _client(n, seed, noise_seed, cid=0, lr=0.05):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    return ClientContext(client_id=cid, x=x, y=y, model=_model(99), training=LocalTraining(2, 8, "sgd", lr),
                         generator=torch.Generator().manual_seed(seed + 100),
                         noise_generator=torch.Generator().manual_seed(noise_seed), state={},
                         device=torch.device("cpu"))


def _ctx(lr=1.0, momentum=0.0):
    return ServerContext.for_model(_model(0), server_lr=lr, server_momentum=momentum, num_classes=3,
                         device=torch.device("cpu"))


def _sgld(**changes):
    return ALGORITHMS["sgld"](dataclasses.replace(SGLDHyperparams(), **changes))


def test_same_noise_seed_same_update_different_seed_different_noise():
    start = get_flat_weights(_model(0))
    algo = _sgld()
    a = algo.client_update({"weights": start}, _client(30, seed=1, noise_seed=7))
    b = algo.client_update({"weights": start}, _client(30, seed=1, noise_seed=7))
    c = algo.client_update({"weights": start}, _client(30, seed=1, noise_seed=8))
    for key in a.tensors:
        assert torch.equal(a.tensors[key], b.tensors[key])
    assert torch.equal(a.tensors["delta"], c.tensors["delta"])  # training does not touch the noise stream
    assert not torch.allclose(a.tensors["noise"], c.tensors["noise"])
    # the delta is FedAvg's
    fedavg = ALGORITHMS["fedavg"]().client_update({"weights": start}, _client(30, seed=1, noise_seed=7))
    assert torch.equal(a.tensors["delta"], fedavg.tensors["delta"])


def test_noise_scale_as_the_thesis_defines_it():
    assert langevin_std(0.01) == pytest.approx(0.02)  # code: std = 2·η_c
    assert langevin_std(0.01, "thesis") == pytest.approx(math.sqrt(0.02))  # Eq. 2.16: variance 2η
    assert langevin_std(0.01, "thesis", noise_std=0.3) == 0.3
    start = get_flat_weights(_model(0))
    for changes, sigma in (({}, 2 * 0.05), ({"noise_rule": "thesis"}, math.sqrt(0.1)),
                           ({"noise_std": 0.004}, 0.004)):
        update = _sgld(**changes).client_update({"weights": start}, _client(30, seed=1, noise_seed=7, lr=0.05))
        eps = torch.randn(start.shape, generator=torch.Generator().manual_seed(7))
        torch.testing.assert_close(update.tensors["noise"], sigma * eps, rtol=1e-6, atol=0)


def test_server_combines_client_noise_into_one_draw_of_std_sigma():
    # three clients with weights 5, 20, 41: ξ = z̄·√(W/q) has std σ exactly, whatever the weights
    sigma, d = 0.02, 200_000
    g = torch.Generator().manual_seed(0)
    weights = [5.0, 20.0, 41.0]
    updates = [ClientUpdate(weight=w, tensors={"delta": torch.zeros(d), "noise": sigma * torch.randn(d, generator=g),
                                               "noise_weight": torch.tensor([w], dtype=torch.float64)})
               for w in weights]
    mean = reduce_updates(updates)
    xi = SGLD.combined_noise(mean)
    total, q = sum(weights), sum(w * w for w in weights) / sum(weights)
    expected = sum(w * u.tensors["noise"] for w, u in zip(weights, updates)) / total * math.sqrt(total / q)
    torch.testing.assert_close(xi, expected, rtol=1e-5, atol=1e-7)
    assert float(xi.std()) == pytest.approx(sigma, rel=0.01)
    # pre-reduced partials give the same ξ
    nested = reduce_updates([reduce_updates(updates[:2]), updates[2]])
    torch.testing.assert_close(SGLD.combined_noise(nested), xi, rtol=1e-5, atol=1e-7)
    # one client: ξ is its own noise
    single = reduce_updates(updates[:1])
    torch.testing.assert_close(SGLD.combined_noise(single), updates[0].tensors["noise"])


@pytest.mark.parametrize("weighting", ["data_size", "uniform"])
def test_end_to_end_step_and_chain_average(weighting):
    algo = _sgld(burnin_rounds=1, weighting=weighting)
    ctx = _ctx(lr=0.5)
    state = algo.init_server_state(ctx)
    sizes = [10, 30, 0, 22]
    chain = []
    for rnd in range(3):
        payload = algo.broadcast(state, [0, 1, 2, 3])
        updates = [algo.client_update(payload, _client(n, seed=10 * rnd + i, noise_seed=1000 * rnd + i, cid=i))
                   for i, n in enumerate(sizes)]
        assert updates[2].weight == 0
        w = [0.0 if n == 0 else (float(n) if weighting == "data_size" else 1.0) for n in sizes]
        total = sum(w)
        delta = sum(wi * u.tensors["delta"] for wi, u in zip(w, updates)) / total
        noise = sum(wi * u.tensors["noise"] for wi, u in zip(w, updates)) / total
        xi = noise * math.sqrt(total / (sum(wi * wi for wi in w) / total))
        new = aggregate_round(algo, state, [reduce_updates(updates[:2]), reduce_updates(updates[2:])], ctx)[0]
        torch.testing.assert_close(new.weights, state.weights + 0.5 * (delta + xi), rtol=0, atol=1e-6)
        chain.append(new.weights)
        if rnd == 0:  # burn-in: the evaluated model is the chain state
            assert torch.equal(algo.evaluation_weights(new), new.weights)
        else:  # then the running uniform average of the chain states of rounds ≥ B
            torch.testing.assert_close(algo.evaluation_weights(new), torch.stack(chain[1:]).mean(0), rtol=0,
                                       atol=1e-7)
        state = new
    assert state.extra["chain_count"] == 2
    plain = _sgld(burnin_rounds=1, evaluate="chain_state")
    assert torch.equal(plain.evaluation_weights(state), state.weights)


def test_config_validation():
    hp = SGLDHyperparams()
    assert (hp.noise_rule, hp.noise_std, hp.weighting, hp.evaluate, hp.burnin_rounds) == \
        ("code", None, "data_size", "chain_average", 25)
    assert build(SGLDHyperparams, {"noise_std": 0.01}, "algorithm").noise_std == 0.01
    assert build(SGLDHyperparams, {"noise_std": None}, "algorithm").noise_std is None
    for params in ({"noise_std": -1}, {"noise_rule": "paper"}, {"burnin_rounds": -3}):
        with pytest.raises(ConfigError):
            build(SGLDHyperparams, params, "algorithm")
    assert all(ALGORITHMS["sgld"].hyperparameter_docs().values())
    local_sgd = ALGORITHMS["fedavg"]().client_stage_fields()
    assert _sgld().client_stage_fields() != local_sgd  # its clients also send noise
    assert _sgld(noise_rule="thesis").client_stage_fields() != _sgld().client_stage_fields()
    assert _sgld(burnin_rounds=3).client_stage_fields() == _sgld().client_stage_fields()  # server-only option
