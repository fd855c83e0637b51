"""the six named sweeps' embedded defaults have validation splits large enough that one image moves the
selection metric by less than 2 points (server-side: the server's split; MNFL: the mean over clients of each
client's own split, so one image moves it by 1 / (number of clients × the client's split))."""
import numpy as np
import pytest

from platform.config.search_space import load_search_space

SERVER_VALIDATED = ("feded_beta", "fedkp_bandwidth", "fedpa_shrinkage_burnin", "fedaux_dp", "single_image_pruning")


@pytest.mark.parametrize("name", SERVER_VALIDATED)
def test_one_validation_image_moves_the_score_less_than_two_points(name):
    from platform.runtime.federation import load_shared_data

    config = load_search_space(name).trial_config({})
    assert config.server.val_fraction > 0
    data = load_shared_data(config)
    size = len(data.val[1])
    assert 1 / size < 0.02, f"{name}: the server's validation split holds {size} images"


def test_mnfl_client_validation_splits_move_the_mean_less_than_two_points():
    from platform.data.datasets import load_dataset
    from platform.data.partition import partition_clients
    from platform.data.public import take_public
    from platform.data.splits import split_clients, split_fractions

    config = load_search_space("mnfl_rho").trial_config({})
    assert config.server.val_fraction == 0  # personalised: each client's own split is the metric
    train, _ = load_dataset(config.dataset)
    local = take_public(train, config.public, config.split_seed(), config.dataset).local
    for seed in (0, 1, 2):
        parts = partition_clients(local.y, config.partition, config.clients.num_clients, seed)
        splits = split_clients(parts, split_fractions(config.partition), seed, labels=local.y)
        val = np.array([len(s["val"]) for s in splits])
        # the metric is the mean of per-client accuracies: one image of client k moves it by 1 / (N · v_k)
        step = 1 / (len(val) * val.min())
        assert step < 0.02, f"seed {seed}: client validation splits {val.tolist()}"
        assert val.min() >= 10
