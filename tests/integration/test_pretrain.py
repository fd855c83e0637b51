"""SimCLR pre-training of h_0 (platform.runtime.pretrain, docs/methods/fedaux.md §3.2 P1) on real Ray: a Ray Train
TorchTrainer with 2 workers on the embedded default (digits32, public train_split first_half), the stage cache, and the
features reaching every model a federation builds (server and clients) while the heads stay as initialised."""
from __future__ import annotations

import numpy as np
import pytest
import ray
import torch

from platform.stages.cache import StageCache
from platform.preflight import load_experiment
from platform.errors import ConfigError
from platform.config.models import build_model
from platform.runtime.pretrain import (STAGE_NAME, PretrainNotPrepared, latest_checkpoint, prepare_pretrained,
                               pretrain_features)
from platform.runtime.federation import share_dataset
from platform.runtime.trial import run_rounds, start_federations, stop_federations

# Small enough for 2 busy CPUs: 3 epochs, batch 256 (2 steps an epoch on the 719-image pool), half a CPU a worker
# (the ray_local fixture has 2 CPUs).
PRETRAIN = {"method": "simclr", "epochs": 3, "batch_size": 256, "workers": 2, "cpus_per_worker": 0.5,
            "use_gpu": False}
BASE = {"dataset": {"name": "digits32"}, "model": {"name": "cnn"}, "public": {"source": "train_split"},
        "algorithm": {"name": "fedavg"}, "partition": {"kind": "dirichlet", "alpha": 0.5},
        "clients": {"num_clients": 4, "clients_per_round": 2, "batch_size": 32}, "rounds": 1, "seed": 1,
        "resources": {"cpu": 1}, "pretrain": PRETRAIN}


def _config(**sections):
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in BASE.items()}
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return load_experiment(data)


@pytest.fixture(scope="module")
def prepared(ray_local, tmp_path_factory):
    """One pre-training (2 workers) through a fresh stage cache, then the same stage asked for again."""
    cache = StageCache(str(tmp_path_factory.mktemp("cache")))
    config = _config()
    shared = share_dataset(config)
    lines: list[str] = []
    log = lambda *a, **k: lines.append(" ".join(map(str, a)))  # noqa: E731
    first = prepare_pretrained(shared, [config], cache, log=log)
    value, hit = pretrain_features(config, "cnn", shared.public_ref, shared.input_shape, shared.num_classes, cache,
                                   log=log)
    return {"cache": cache, "config": config, "shared": first, "value": value, "second_hit": hit, "lines": lines}


def test_two_worker_stage_gives_features_of_the_architecture_unlike_the_random_init(prepared):
    config, value = prepared["config"], prepared["value"]
    shared = prepared["shared"]
    random_init = build_model("cnn", shared.input_shape, shared.num_classes)  # keys only
    features = value["features"]
    assert set(features) == set(random_init.features.state_dict())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.stream_seed("init"))
        initial = build_model("cnn", shared.input_shape, shared.num_classes).features.state_dict()
    assert all(v.device.type == "cpu" for v in features.values())
    assert any(not torch.equal(features[k], initial[k]) for k in initial)
    record = value["record"]
    assert record["workers"] == 2 and record["epochs"] == 3 and record["public_images"] == 719
    assert record["global_batch"] == 256
    assert any(line.startswith("pretraining cnn on 719 public images, 2 worker(s)") for line in prepared["lines"])
    # Ray Train checkpointed every epoch under the cache root (not the repo or cwd); the last one is the result.
    epoch, _ = latest_checkpoint(f"{prepared['cache'].root}/{STAGE_NAME}/ray_train")
    assert epoch == 3


def test_the_loss_decreases_over_epochs(prepared):
    losses = prepared["value"]["record"]["losses"]
    assert len(losses) == 3 and all(np.isfinite(losses))
    assert losses[-1] < losses[0]


def test_second_request_for_the_same_architecture_data_and_seed_is_a_cache_hit(prepared):
    cache = prepared["cache"]
    assert prepared["second_hit"] is True
    assert cache.count(STAGE_NAME, "computed") == 1
    assert cache.count(STAGE_NAME, "hit") >= 1
    assert any("stage cache hit" in line for line in prepared["lines"])


def test_server_and_client_models_get_the_pretrained_features_and_a_fresh_head(prepared):
    config, shared, features = prepared["config"], prepared["shared"], prepared["value"]["features"]
    federations = start_federations(config, [config.seed], shared)
    try:
        fed = federations[0]

        def model_state(model):
            return ({k: v.cpu() for k, v in model.features.state_dict().items()},
                    {k: v.cpu() for k, v in model.head.state_dict().items()})

        server_features, server_head = ray.get(fed.server.__ray_call__.remote(
            lambda self: model_state(self.ctx.models["cnn"])))
        client_features, client_head = ray.get(fed.pools[0].__ray_call__.remote(
            lambda self: model_state(self.models["cnn"])))
        for got in (server_features, client_features):
            assert set(got) == set(features)
            assert all(torch.equal(got[k], features[k]) for k in features)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.stream_seed("init"))
            built = build_model("cnn", shared.input_shape, shared.num_classes)
        for head in (server_head, client_head):  # the randomly initialised head, not a pre-trained one
            assert all(torch.equal(head[k], built.head.state_dict()[k]) for k in head)
        metrics = list(run_rounds(federations, 1))[-1]
        assert np.isfinite(metrics["test_loss"])
    finally:
        stop_federations(federations)


def test_a_seed_that_was_not_prepared_fails_clearly(prepared):
    """... and leaves nothing holding the cluster: the placement group ``start_federations`` made outside Tune
    is removed (left, it holds 0.99 CPU of the 2 every later test in this process shares; a 2-CPU trial then waited forever)."""
    import time

    import ray

    def live_groups():
        return [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]

    before = len(live_groups())
    config = _config(seed=2)  # another init seed: nothing prepared for it
    with pytest.raises(PretrainNotPrepared, match="no pre-trained features of cnn"):
        start_federations(config, [config.seed], prepared["shared"])
    deadline = time.monotonic() + 10  # removal is asynchronous
    while len(live_groups()) > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(live_groups()) == before, live_groups()


@pytest.mark.parametrize("sections, field", [
    ({"public": {"source": "none"}}, "pretrain.method"),
    ({"dataset": {"name": "synthetic"}, "model": {"name": "mlp"}}, "pretrain.method"),
    ({"pretrain": {"use_gpu": "sometimes"}}, "pretrain.use_gpu"),
])
def test_bad_pretrain_configs_name_the_field(sections, field):
    with pytest.raises(ConfigError) as err:
        _config(**sections)
    assert err.value.field == field if hasattr(err.value, "field") else str(err.value).startswith(field)
    assert str(err.value).startswith(field)
