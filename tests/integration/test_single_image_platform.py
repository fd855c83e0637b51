"""The single-image method on the platform (real Ray actors, a real stage cache): the crop pool built once and
shared, per-round selection metrics, reproducibility, heterogeneous server models, checkpoint/restore."""
import math

import numpy as np
import pytest
import ray

from platform.stages.cache import open_cache
from platform.config.experiment import build_experiment
from platform.runtime.federation import share_dataset
from platform.runtime.trial import run_rounds, start_federations, stop_federations

ROUNDS = 3
POOL, S, E = 400, 40, 0.5


def _config(**changes):
    data = {"dataset": {"name": "digits"}, "public": {"source": "image", "image": "china", "size": POOL},
            "algorithm": {"name": "single_image", "num_distill": S, "entropy_rate": E, "kmeans_k": 5,
                          "distill_steps": 10, "distill_batch_size": 32, "val_checkpoint_every": 5,
                          "fedavg_init_every": 2},
            "clients": {"num_clients": 6, "clients_per_round": 4, "batch_size": 16, "lr": 0.05, "momentum": 0.9},
            "rounds": ROUNDS, "resources": {"cpu": 1}}
    for key, value in changes.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return build_experiment(data)


def _run(config, cache=None) -> list[dict]:
    feds = start_federations(config, [config.seed], cache=cache)
    try:
        return list(run_rounds(feds, config.rounds))
    finally:
        stop_federations(feds)


@pytest.mark.slow  # the fast tier keeps one test of the path (docs/how-to/testing.md)
def test_pool_is_built_once_and_rounds_report_the_selection(ray_local, tmp_path):
    cache = open_cache(str(tmp_path / "cache"))
    config = _config()
    first = _run(config, cache)
    assert cache.count("patch_pool", "computed") == 1
    second = _run(config, cache)
    assert cache.count("patch_pool", "computed") == 1 and cache.count("patch_pool", "hit") >= 1
    keys = [k for k in first[0] if not k.endswith("seconds")]
    assert [[m[k] for k in keys] for m in first] == [[m[k] for k in keys] for m in second]  # reproducible
    for m in first:
        # both stages: s_K = s / (1 - e) = 80 of the 400 crops, then per-class pruning of half of them
        assert m["selection_pool"] == POOL and m["selection_kmeans_target"] == S / (1 - E)
        assert m["selection_after_kmeans"] == S / (1 - E) and S <= m["selection_after_entropy"] <= S + 10
        assert m["distill_size"] == m["selection_after_entropy"]
        assert sum(v for k, v in m.items() if k.startswith("selected_class_count.")) == m["distill_size"]
        assert math.isfinite(m["distill_loss"]) and 0 <= m["distill_val_accuracy"] <= 1
    assert [m["fedavg_init"] for m in first] == [1.0, 1.0, 0.0]  # rounds 1 and 2 (P = 2), not 3


def test_the_pool_every_actor_sees_is_the_cached_one(ray_local, tmp_path):
    cache = open_cache(str(tmp_path / "cache"))
    config = _config()
    a = ray.get(share_dataset(config, cache=cache).public_ref)
    b = ray.get(share_dataset(config, cache=cache).public_ref)
    assert a.shape == (POOL, 1, 8, 8) and a.dtype == np.float32 and np.array_equal(a, b)
    other = ray.get(share_dataset(_config(public={"seed": 12345}), cache=cache).public_ref)
    assert not np.array_equal(a, other)


def test_heterogeneous_server_models_each_distilled(ray_local):
    metrics = _run(_config(model={"name": "cnn", "architectures": ["cnn", "mlp"]}))
    for m in metrics:
        assert {"test_accuracy.cnn", "test_accuracy.mlp", "val_accuracy.cnn", "val_accuracy.mlp"} <= set(m)
        assert m["distill_steps"] == 10


@pytest.mark.slow
def test_checkpoint_restore_continues_with_the_same_selection(ray_local, tmp_path):
    config = _config(rounds=4)
    feds = start_federations(config, [config.seed])
    list(run_rounds(feds, 2))
    path = str(tmp_path / "ckpt.pt")
    feds[0].save(path)
    continued = list(run_rounds(feds, 4, first_round=2))
    stop_federations(feds)
    fresh = start_federations(config, [config.seed])
    fresh[0].load(path)
    resumed = list(run_rounds(fresh, 4, first_round=2))
    stop_federations(fresh)
    keys = [k for k in continued[0] if not k.endswith("seconds")]
    assert [[m[k] for k in keys] for m in resumed] == [[m[k] for k in keys] for m in continued]
