"""FedAvg and FedProx through the algorithm interface, without Ray."""
import dataclasses

import pytest
import torch

from algorithms.base import aggregate_round

from algorithms import ALGORITHMS, ClientContext, ClientUpdate, ServerContext, reduce_updates
from algorithms.common import LocalTraining, get_flat_weights, set_flat_weights
from algorithms.common.server_optimizer import server_step
from platform.config.models import build_model


def _model(seed=0):
    torch.manual_seed(seed)
    return build_model("cnn", (1, 8, 8), 10)


def _client(model, n, seed, lr=0.1, epochs=2, cid=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    return ClientContext(client_id=cid, x=x, y=y, model=model, training=LocalTraining(epochs, 8, "sgd", lr),
                         generator=torch.Generator().manual_seed(seed + 100),
                         noise_generator=torch.Generator().manual_seed(seed + 200), state={}, device=torch.device("cpu"))


def _server_ctx(model, lr=1.0, momentum=0.0):
    return ServerContext.for_model(model, server_lr=lr, server_momentum=momentum, num_classes=10, device=torch.device("cpu"))


def test_fedavg_aggregate_is_the_nk_weighted_mean_of_client_models():
    algo = ALGORITHMS["fedavg"]()
    model = _model()
    ctx = _server_ctx(model)
    state = algo.init_server_state(ctx)
    payload = algo.broadcast(state, [0, 1, 2])
    sizes = [5, 20, 41]
    client_models, updates = [], []
    for i, n in enumerate(sizes):
        update = algo.client_update(payload, _client(_model(), n, seed=i, cid=i))
        client_models.append(state.weights + update.tensors["delta"])
        updates.append(update)
    # pre-reduce two of them, as a client actor hosting both would
    partials = [reduce_updates(updates[:2]), updates[2]]
    new_state = aggregate_round(algo, state, partials, ctx)[0]
    expected = sum(n * w for n, w in zip(sizes, client_models)) / sum(sizes)
    assert torch.allclose(new_state.weights, expected, atol=1e-6)
    assert new_state.round == 1
    assert not torch.allclose(new_state.weights, state.weights)


def test_reduce_updates_weights_metrics_and_is_associative():
    ups = [ClientUpdate(w, {"d": torch.tensor([float(i)])}, {"train_loss": float(i)}) for i, w in enumerate([1, 3, 6])]
    flat = reduce_updates(ups)
    nested = reduce_updates([reduce_updates(ups[:2]), ups[2]])
    assert flat.weight == 10 and flat.num_clients == 3 and nested.num_clients == 3
    assert torch.allclose(flat.tensors["d"], torch.tensor([(0 * 1 + 1 * 3 + 2 * 6) / 10]))
    assert torch.allclose(flat.tensors["d"], nested.tensors["d"])
    assert flat.metrics["train_loss"] == pytest.approx(1.5)


def test_server_lr_and_momentum():
    w = torch.zeros(3)
    d = torch.ones(3)
    w1, s1 = server_step(w, d, {}, lr=0.5, momentum=0.9)
    w2, s2 = server_step(w1, d, s1, lr=0.5, momentum=0.9)
    assert torch.allclose(w1, torch.full((3,), 0.5))
    assert torch.allclose(w2, w1 + 0.5 * (0.9 * d + d))


def test_fedprox_stays_closer_to_the_global_model():
    start = get_flat_weights(_model(0))
    distances = {}
    for mu in (0.0, 1.0):
        algo = ALGORITHMS["fedprox"](ALGORITHMS["fedprox"].Hyperparams(mu=mu))
        update = algo.client_update({"weights": start}, _client(_model(5), 64, seed=3, lr=0.2, epochs=5))
        distances[mu] = float(update.tensors["delta"].norm())
    assert distances[1.0] < 0.9 * distances[0.0], distances


def test_fedprox_with_mu_zero_equals_fedavg():
    start = get_flat_weights(_model(0))
    a = ALGORITHMS["fedavg"]().client_update({"weights": start}, _client(_model(1), 30, seed=2))
    b = ALGORITHMS["fedprox"](ALGORITHMS["fedprox"].Hyperparams(mu=0.0)).client_update(
        {"weights": start}, _client(_model(1), 30, seed=2))
    assert torch.equal(a.tensors["delta"], b.tensors["delta"])


def test_flat_weights_roundtrip_includes_float_buffers():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    flat = get_flat_weights(model)
    assert flat.numel() == 3 * 4 + 4 + 4 + 4 + 4 + 4  # weight, bias, bn weight/bias, running mean/var
    other = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    set_flat_weights(other, flat + 1)
    assert torch.allclose(get_flat_weights(other), flat + 1)


# --- local training: clients.augment and clients.precision (algorithms/common/training.py) ------------------------

def test_crop_flip_is_zero_pad_then_crop_then_flip_per_image():
    from algorithms.common.training import crop_flip, draw_crop_flip

    x = torch.randn(6, 3, 5, 7)
    offsets, flips = draw_crop_flip(6, 2, torch.Generator().manual_seed(0))
    assert offsets.shape == (6, 2) and int(offsets.min()) >= 0 and int(offsets.max()) <= 4 and flips.dtype == torch.bool
    flips[:2] = torch.tensor([True, False])  # both kinds present
    got = crop_flip(x, offsets, flips, 2)
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))  # zeros: 0 of the normalised inputs
    for i in range(6):  # the reference: torchvision's RandomCrop(padding=2) then RandomHorizontalFlip, one image each
        r, c = offsets[i].tolist()
        want = padded[i, :, r:r + 5, c:c + 7]
        assert torch.equal(got[i], want.flip(-1) if flips[i] else want)
    assert torch.equal(crop_flip(x, torch.full((6, 2), 2), torch.zeros(6, dtype=torch.bool), 2), x)  # centred, unflipped
    with pytest.raises(ValueError, match="images"):
        crop_flip(torch.randn(4, 60), offsets[:4], flips[:4], 2)


def _train_once(training, augment_seed=None, batch_seed=5):
    from algorithms.common.training import train_local

    model = _model()
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(20, 1, 8, 8, generator=g), torch.randint(0, 10, (20,), generator=g)
    batches = torch.Generator().manual_seed(batch_seed)
    augment = None if augment_seed is None else torch.Generator().manual_seed(augment_seed)
    loss = train_local(model, x, y, training, batches, augment_generator=augment)
    return get_flat_weights(model), loss, batches.get_state()


def test_augmentation_draws_its_own_stream_and_keeps_the_batch_order():
    plain = LocalTraining(2, 4, lr=0.1)
    augmented = dataclasses.replace(plain, augment="crop_flip", augment_padding=2)
    w0, _, order0 = _train_once(plain)
    w1, _, order1 = _train_once(augmented, augment_seed=11)
    w2, _, _ = _train_once(augmented, augment_seed=11)
    w3, _, _ = _train_once(augmented, augment_seed=12)
    assert torch.equal(order0, order1)  # the batch-order generator drew exactly what it draws without augmentation
    assert torch.equal(w1, w2)  # seeded: the same augmentation stream, the same model
    assert float((w1 - w0).abs().max()) > 1e-3 and float((w1 - w3).abs().max()) > 1e-3
    with pytest.raises(ValueError, match="augment_generator"):
        _train_once(augmented)  # augmentation on, no stream given: refused, never silently off


def test_bf16_trains_close_to_but_not_as_fp32_with_fp32_weights():
    from algorithms.common.training import train_local

    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(32, 1, 8, 8, generator=g), torch.randint(0, 4, (32,), generator=g)
    start = get_flat_weights(_model())
    results, final_losses = {}, {}
    for precision in ("fp32", "bf16"):
        model = _model()
        cfg = LocalTraining(1, 8, lr=0.1, precision=precision)
        losses = [train_local(model, x, y, cfg, torch.Generator().manual_seed(epoch)) for epoch in range(8)]
        assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < 0.7 * losses[0]  # it learns
        assert all(p.dtype == torch.float32 for p in model.parameters())  # weights stay float32
        results[precision], final_losses[precision] = get_flat_weights(model), losses[-1]
    diff = (results["fp32"] - results["bf16"]).abs()
    moved = (results["fp32"] - start).abs()
    assert float(diff.max()) > 0  # bf16 arithmetic really ran
    assert float(diff.mean()) < 0.25 * float(moved.mean())  # and lands near fp32 (measured: 0.07 of how far it went)
    assert final_losses["bf16"] == pytest.approx(final_losses["fp32"], rel=0.05)
