"""Batched client training (clients.batched) gives what training the clients one after another gives.

The contract: the same clients, batches, dropout masks and optimiser give the same aggregated model up to float
rounding. Rounding differs (grouped convolutions, batched matrix products), and a ReLU or max-pool whose input
lands within rounding of its kink routes one gradient differently, so a few weights may move by ~1e-5; a real
difference (another batch order, another mask, a missed step) moves every weight by ~1e-2. Hence the tolerances:
the mean |Δ| over all weights within 1e-7, the largest within 1e-3.
"""
import numpy as np
import pytest
import torch
from torch import nn

from algorithms.base import ClientContext, reduce_updates
from algorithms.common.batched_training import (BatchingUnsupported, batching_obstacle, prefers_batched,
                                                train_local_batched)
from algorithms.common.training import LocalTraining
from algorithms.common.weights import get_flat_weights
from algorithms.fedavg import FedAvg
from algorithms.fedprox import FedProx, FedProxHyperparams
from platform.config.models import build_model
from platform.runtime.seeding import derived_seed, generator

SIZES = [7, 18, 3, 14]  # unequal: 2, 5, 1 and 4 steps of B=4 per epoch, last batches of 3, 2, 3 and 2


def _clients(name, shape, training, sizes=None, seed=0):
    sizes = sizes or (SMALL_SIZES if name.startswith("resnet8") else SIZES)
    torch.manual_seed(seed)
    model = build_model(name, shape, 10)
    data = torch.Generator().manual_seed(seed + 1)
    clients = []
    for k, n in enumerate(sizes):
        clients.append(ClientContext(
            client_id=k, x=torch.randn(n, *shape, generator=data), y=torch.randint(0, 10, (n,), generator=data),
            model=model, training=training, generator=generator(7, 0, k), noise_generator=generator(8, 0, k),
            state={}, device=torch.device("cpu"), dropout_generator=generator(7, 0, k, 99),
            augment_generator=generator(7, 0, k, 98)))
    return model, clients

SMALL_SIZES = [6, 3, 7]  # resnet8 has 4.9M parameters (and the narrow one BatchNorm runs): fewer, smaller clients


def _fresh_generators(clients):
    for c in clients:
        c.generator, c.dropout_generator = generator(7, 0, c.client_id), generator(7, 0, c.client_id, 99)
        c.augment_generator = generator(7, 0, c.client_id, 98)
    return clients


def _sequential(algorithm, payload, clients):
    """What the client actor does without batching: seed the global generator per client, client_update."""
    updates = []
    for c in clients:
        torch.default_generator.manual_seed(derived_seed(7, 0, c.client_id, 99))
        updates.append(algorithm.client_update(payload, c))
    return updates


def _assert_close(a: torch.Tensor, b: torch.Tensor):
    diff = (a - b).abs()
    assert float(diff.mean()) < 1e-7 and float(diff.max()) < 1e-3, (float(diff.mean()), float(diff.max()))


CASES = {
    "cnn-momentum": ("cnn", (1, 8, 8), LocalTraining(2, 4, momentum=0.9, weight_decay=1e-3, lr=0.05), FedAvg()),
    "cnn-adam": ("cnn", (1, 8, 8), LocalTraining(1, 4, optimizer="adam", lr=1e-3), FedAvg()),
    "leaf_cnn-dropout": ("leaf_cnn", (1, 10, 10), LocalTraining(1, 4, lr=0.05), FedAvg()),
    "resnet8-batchnorm": ("resnet8", (3, 16, 16), LocalTraining(1, 4, momentum=0.5, lr=0.05), FedAvg()),
    "fedprox": ("cnn", (1, 8, 8), LocalTraining(2, 4, lr=0.1), FedProx(FedProxHyperparams(mu=1.0))),
    # clients.augment: the padded-batch path (cnn), the BatchNorm runs path, dropout masks beside the crops
    "cnn-augment": ("cnn", (1, 8, 8), LocalTraining(2, 4, momentum=0.9, lr=0.05, augment="crop_flip",
                                                     augment_padding=2), FedAvg()),
    "batchnorm-augment": ("resnet8_narrow", (3, 8, 8), LocalTraining(1, 4, lr=0.05, augment="crop_flip"), FedAvg()),
    "dropout-augment": ("leaf_cnn", (1, 10, 10), LocalTraining(1, 4, lr=0.05, augment="crop_flip", augment_padding=3),
                        FedProx(FedProxHyperparams(mu=0.5))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_batched_matches_sequential_on_unequal_clients(case):
    name, shape, training, algorithm = CASES[case]
    model, clients = _clients(name, shape, training)
    payload = {"weights": get_flat_weights(model)}
    assert algorithm.batching_obstacle(payload, clients) is None
    sequential = _sequential(algorithm, payload, clients)
    batched = algorithm.client_update_many(payload, _fresh_generators(clients))
    for s, b in zip(sequential, batched):
        assert b.weight == s.weight
        _assert_close(s.tensors["delta"], b.tensors["delta"])
        assert b.metrics["train_loss"] == pytest.approx(s.metrics["train_loss"], rel=1e-5)
    # the aggregated model (what the server steps with), and the clients really trained
    _assert_close(reduce_updates(sequential).tensors["delta"], reduce_updates(batched).tensors["delta"])
    assert float(reduce_updates(batched).tensors["delta"].abs().max()) > 1e-3


def test_batched_bf16_is_sequential_bf16_up_to_bf16_rounding():
    """clients.precision: bf16 autocasts the vmapped forward too: within bf16's rounding of the sequential bf16
    models (measured: mean |Δ| 5e-5, largest 5e-3), and not the fp32 models."""
    import dataclasses

    name, shape, training, algorithm = CASES["cnn-augment"]
    results = {}
    for precision in ("fp32", "bf16"):
        model, clients = _clients(name, shape, dataclasses.replace(training, precision=precision))
        payload = {"weights": get_flat_weights(model)}
        sequential = reduce_updates(_sequential(algorithm, payload, clients)).tensors["delta"]
        batched = reduce_updates(algorithm.client_update_many(payload, _fresh_generators(clients))).tensors["delta"]
        assert torch.isfinite(batched).all()
        results[precision] = batched
        diff = (sequential - batched).abs()
        assert float(diff.mean()) < 1e-3 and float(diff.max()) < 5e-2, (float(diff.mean()), float(diff.max()))
    assert float((results["fp32"] - results["bf16"]).abs().max()) > 1e-5


def test_augmentation_needs_every_clients_stream():
    model, clients = _clients("cnn", (1, 8, 8), LocalTraining(1, 4, augment="crop_flip"), sizes=[4, 4])
    with pytest.raises(ValueError, match="augment"):
        train_local_batched(model, [c.x for c in clients], [c.y for c in clients], clients[0].training,
                            [c.generator for c in clients], augment_generators=[clients[0].augment_generator, None])


def test_each_client_draws_its_own_dropout_masks():
    """Two clients with the same data and batch order but other dropout streams end in other models."""
    torch.manual_seed(0)
    model = build_model("leaf_cnn", (1, 10, 10), 10)
    x, y = torch.randn(8, 1, 10, 10), torch.randint(0, 10, (8,))
    cfg = LocalTraining(1, 4)
    flat, _ = train_local_batched(model, [x, x], [y, y], cfg, [generator(1), generator(1)],
                                  [generator(2), generator(3)])
    assert float((flat[0] - flat[1]).abs().max()) > 1e-4
    same, _ = train_local_batched(model, [x, x], [y, y], cfg, [generator(1), generator(1)],
                                  [generator(2), generator(2)])
    assert torch.equal(same[0], same[1])


def test_batchnorm_running_statistics_are_per_client():
    model, clients = _clients("resnet8_narrow", (3, 8, 8), LocalTraining(1, 4), sizes=[4, 8])
    flat, _ = train_local_batched(model, [c.x for c in clients], [c.y for c in clients], clients[0].training,
                                  [c.generator for c in clients], [c.dropout_generator for c in clients])
    names = [k for k, v in model.state_dict().items() if v.dtype.is_floating_point]
    sizes = [v.numel() for k, v in model.state_dict().items() if v.dtype.is_floating_point]
    offset = sum(sizes[:names.index("features.1.running_mean")])
    stats = flat[:, offset:offset + sizes[names.index("features.1.running_mean")]]
    assert float((stats[0] - stats[1]).abs().max()) > 1e-4  # each client's own batches
    assert float(stats.abs().max()) > 0  # and they moved from the initial zeros


class _NoiseInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 10)

    def forward(self, x):
        return self.linear(x.flatten(1) + torch.rand_like(x.flatten(1)))


def test_unreproducible_randomness_falls_back_with_generators_untouched():
    model = _NoiseInForward()
    g = [generator(1), generator(2)]
    before = [s.get_state() for s in g]
    with pytest.raises(BatchingUnsupported, match="random"):
        train_local_batched(model, [torch.randn(4, 4)] * 2, [torch.zeros(4, dtype=torch.long)] * 2,
                            LocalTraining(1, 2), g, [generator(3), generator(4)])
    assert all(torch.equal(s.get_state(), b) for s, b in zip(g, before))


def test_obstacles_name_the_reason():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Dropout2d(0.5), nn.Flatten(), nn.LazyLinear(10))
    assert "Dropout2d" in batching_obstacle(model, LocalTraining(1, 4))

    class OwnClientUpdate(FedAvg):
        name = "own_update_test"

        def client_update(self, payload, client):  # pragma: no cover - never called
            raise AssertionError

    _, clients = _clients("cnn", (1, 8, 8), LocalTraining(1, 4), sizes=[4, 4])
    assert "overrides client_update" in OwnClientUpdate().batching_obstacle({}, clients)


def test_auto_rule():
    cnn = build_model("cnn", (1, 8, 8), 10)
    cpu = torch.device("cpu")
    assert prefers_batched(cnn, 32, 5, cpu)[0]
    wanted, reason = prefers_batched(cnn, 32, 1, cpu)
    assert not wanted and "one client" in reason
    assert not prefers_batched(build_model("leaf_cnn", (3, 32, 32), 10), 10, 25, cpu)[0]  # compute-bound
    assert prefers_batched(cnn, 32, 5, torch.device("cuda"))[0]


# --- the client actor (no Ray) ---------------------------------------------------------------------------------

def _pool(batched, model="cnn", per_round=4, algorithm=None, **clients):
    from platform.preflight import load_experiment
    from platform.data import load_dataset
    from platform.runtime.actors import ClientPool

    config = load_experiment({"algorithm": algorithm or {"name": "fedavg"}, "model": {"name": model},
                              "clients": {"num_clients": 4, "clients_per_round": per_round, "batched": batched,
                                          "batch_size": 16, **clients}})
    train, _ = load_dataset(config.dataset)
    shards = {0: np.arange(0, 40), 1: np.arange(40, 105), 2: np.arange(105, 115), 3: np.arange(115, 200)}
    pool = ClientPool(config, (train.x, train.y), shards, train.input_shape, train.num_classes)
    return pool, {"weights": get_flat_weights(pool.models[model])}


@pytest.mark.parametrize("algorithm", [{"name": "fedavg"}, {"name": "fedprox", "mu": 0.5}])
def test_client_pool_batched_equals_sequential(algorithm):
    pool, payload = _pool("off", algorithm=algorithm)
    off = pool.train(payload, [0, 1, 2, 3], 3)
    pool, payload = _pool("on", algorithm=algorithm)
    on = pool.train(payload, [0, 1, 2, 3], 3)
    assert off.batched_clients == 0 and off.paths == ["cnn: sequential, 4 clients (clients.batched = off)"]
    assert on.batched_clients == 4 and on.paths[0].startswith("cnn: batched, 4 clients")
    assert len(on.updates) == len(off.updates) == 1  # pre-reduced either way
    _assert_close(on.updates[0].tensors["delta"], off.updates[0].tensors["delta"])
    assert on.updates[0].metrics["train_loss"] == pytest.approx(off.updates[0].metrics["train_loss"], rel=1e-5)


def test_client_pool_augments_alike_batched_and_sequential_on_its_own_stream():
    """clients.augment through the client actor: each (round, client) gets an augmentation generator of its own
    (AUGMENT_KEY under the training seed; the batch order's generator is the one it was), batched equals
    sequential, and augmenting changes the update."""
    from platform.runtime.actors import AUGMENT_KEY

    plain, payload = _pool("off")
    pool, _ = _pool("off", augment="crop_flip")
    assert pool.training.augment == "crop_flip" and pool.training.augment_padding == 4
    client = pool.client(1, 3, {})
    assert torch.equal(client.generator.get_state(), plain.client(1, 3, {}).generator.get_state())
    assert torch.equal(client.augment_generator.get_state(),
                       generator(pool.training_seed, 3, 1, AUGMENT_KEY).get_state())
    off = pool.train(payload, [0, 1, 2, 3], 3)
    on = _pool("on", augment="crop_flip")[0].train(payload, [0, 1, 2, 3], 3)
    assert on.batched_clients == 4
    _assert_close(on.updates[0].tensors["delta"], off.updates[0].tensors["delta"])
    unaugmented = plain.train(payload, [0, 1, 2, 3], 3).updates[0].tensors["delta"]
    assert float((unaugmented - off.updates[0].tensors["delta"]).abs().max()) > 1e-3


def test_auto_trains_one_client_per_actor_sequentially():
    pool, payload = _pool("auto")
    single = pool.train(payload, [2], 0)
    assert single.batched_clients == 0
    assert single.paths == ["cnn: sequential, 1 clients (auto: one client in the group: nothing to batch)"]
    several = pool.train(payload, [0, 1, 3], 0)
    assert several.batched_clients == 3 and "auto: parameters x batch size" in several.paths[0]


def test_fallback_is_reported_when_the_method_cannot_batch():
    pool, payload = _pool("on", algorithm={"name": "fedpa"})
    result = pool.train(payload, [0, 1], 0)
    assert result.batched_clients == 0
    assert "sequential, 2 clients (fell back: fedpa overrides client_update)" in result.paths[0]
    pool, payload = _pool("auto", algorithm={"name": "fedpa"})  # the default: no warning, no data gathered twice
    assert pool.train(payload, [0, 1], 0).paths == ["cnn: sequential, 2 clients (auto: fedpa overrides client_update)"]


def test_config_switch():
    from algorithms.errors import ConfigError
    from platform.preflight import load_experiment

    assert load_experiment({}).clients.batched == "auto"
    assert load_experiment({"clients": {"batched": True}}).clients.batched == "on"  # YAML's bare `on`
    assert load_experiment({"clients": {"batched": False}}).clients.batched == "off"
    with pytest.raises(ConfigError, match="clients.batched"):
        load_experiment({"clients": {"batched": "sometimes"}})


def test_profile_names_the_path():
    from platform.run import profile_table
    from platform.config.run_schema import RESULT_CLIENT_PATHS

    rounds = [{"round": r, "seconds": 0.1, RESULT_CLIENT_PATHS: "cnn: batched, 5 clients (auto: ...); "
                                                               "cnn: sequential, 1 clients (auto: one client)"}
              for r in (1, 2)]
    table = profile_table(rounds)
    assert "rounds 1-2: cnn: batched, 5 clients (auto: ...)" in table
    assert "rounds 1-2: cnn: sequential, 1 clients (auto: one client)" in table


@pytest.mark.parametrize("stride,padding,dilation,bias", [(1, 0, 1, True), (2, 1, 1, False), (1, 2, 2, True),
                                                          ((2, 1), (1, 0), 1, True)])
def test_a_convolution_as_unfold_and_product_is_the_convolution_also_under_vmap(stride, padding, dilation, bias):
    from torch.func import functional_call, vmap

    from algorithms.common.batched_training import _ConvolutionsAsProducts

    torch.manual_seed(0)
    conv = nn.Conv2d(3, 5, 3, stride=stride, padding=padding, dilation=dilation, bias=bias)
    weights = {"weight": torch.randn(4, *conv.weight.shape)}
    if bias:
        weights["bias"] = torch.randn(4, 5)
    x = torch.randn(4, 2, 3, 9, 8)  # 4 clients x 2 samples
    expected = torch.stack([functional_call(conv, {k: v[i] for k, v in weights.items()}, (x[i],)) for i in range(4)])
    with _ConvolutionsAsProducts(conv):
        assert conv.forward is not nn.Conv2d.forward.__get__(conv)  # the patch is in place
        got = vmap(lambda w, xi: functional_call(conv, w, (xi,)))(weights, x)
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=1e-5)
    assert "forward" not in vars(conv)  # restored


def test_batched_training_with_convolutions_as_products_stays_within_the_tolerance(monkeypatch):
    """The products (``round_throughput --batched-convolutions products``) keep the cnn and the dropout CNN within
    the tolerance."""
    from algorithms.common import batched_training

    monkeypatch.setattr(batched_training, "CONVOLUTIONS_AS_PRODUCTS_ON", frozenset({"cpu"}))
    for case in ("cnn-momentum", "leaf_cnn-dropout"):
        name, shape, training, algorithm = CASES[case]
        model, clients = _clients(name, shape, training)
        payload = {"weights": get_flat_weights(model)}
        sequential = _sequential(algorithm, payload, clients)
        batched = algorithm.client_update_many(payload, _fresh_generators(clients))
        for s, b in zip(sequential, batched):
            _assert_close(s.tensors["delta"], b.tensors["delta"])
