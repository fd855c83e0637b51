"""The dry run's data plan (platform/preflight/data_plan.py): the sizes it prints are the ones the run builds, and a
partition the data cannot satisfy fails the dry run with the run's own line, before anything starts."""
from types import SimpleNamespace

import numpy as np
import pytest

from platform.config.experiment import build_experiment
from platform.errors import ConfigError
from platform.preflight.data_plan import data_plan
from platform.runtime.federation import client_splits, load_shared_data


def _built_sizes(config):
    """The sizes the run builds: its shared data, then every client's splits (what a trial does, without Ray)."""
    data = load_shared_data(config)
    shared = SimpleNamespace(train_labels=data.train.y, train_groups=data.train.groups,
                             train_coarse_labels=data.train.coarse_y)
    splits = client_splits(config, shared)

    def sizes(shards):
        return () if shards is None else tuple(len(shards[k]) for k in range(config.clients.num_clients))

    return (len(data.train), len(data.test), 0 if data.val is None else len(data.val[1]),
            0 if data.public_x is None else len(data.public_x), sizes(splits.train), sizes(splits.val),
            sizes(splits.test))


CONFIGS = {
    "digits, a public pool carved at random, client splits": {
        "dataset": {"name": "digits"}, "partition": {"kind": "dirichlet", "alpha": 0.3, "val_fraction": 0.1,
                                                     "test_fraction": 0.2},
        "public": {"source": "train_split", "fraction": 0.2, "split": "random", "size": 200},
        "clients": {"num_clients": 7, "clients_per_round": 7}, "algorithm": {"name": "fedavg"}},
    "stand-in MNIST, the balanced trim": {
        "dataset": {"name": "mnist"}, "stand_in": True, "stand_in_fraction": 0.05,
        "partition": {"kind": "lda", "alpha": 0.1},
        "clients": {"num_clients": 10, "clients_per_round": 5}, "algorithm": {"name": "fedavg"}},
    "stand-in MNIST, the server's validation split from the test split": {
        "dataset": {"name": "mnist"}, "stand_in": True, "stand_in_fraction": 0.05, "server": {"val_source": "test"},
        "partition": {"kind": "lda", "alpha": 1.0}, "clients": {"num_clients": 10, "clients_per_round": 5},
        "algorithm": {"name": "fedavg"}},
    "stand-in CIFAR-100, hierarchical": {
        "dataset": {"name": "cifar100"}, "stand_in": True, "stand_in_fraction": 0.04,
        "partition": {"kind": "hierarchical_lda", "alpha": 0.1, "beta": 10.0, "samples_per_client": 30},
        "clients": {"num_clients": 50, "clients_per_round": 5}, "algorithm": {"name": "fedavg"}},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_plan_gives_the_sizes_the_run_builds(name):
    config = build_experiment(CONFIGS[name])
    plan = data_plan(config)
    pool, held_out_test, server_val, public, train, val, test = _built_sizes(config)
    assert (plan.pool, plan.test, plan.server_val, plan.public) == (pool, held_out_test, server_val, public)
    assert (plan.client_train, plan.client_val, plan.client_test) == (train, val, test)
    carved = plan.server_val if config.server.val_source == "train" else 0
    assert plan.pool + carved + (plan.public if config.public.source == "train_split" else 0) <= plan.train


def test_the_plan_prints_the_spread_of_client_sizes():
    lines = data_plan(build_experiment(CONFIGS["digits, a public pool carved at random, client splits"])).lines()
    assert lines[0].startswith("data sizes (the embedded data): digits train 1,438, test 359; public (train_split) "
                               "200; server validation split")
    assert lines[1].startswith("per client (7 clients), training samples: min ") and " / median " in lines[1]
    assert lines[2].startswith("  own validation split: ") and lines[3].startswith("  own test split: ")


def test_a_partition_the_data_cannot_hold_fails_the_plan_with_the_runs_line():
    config = build_experiment({"dataset": {"name": "cifar100"}, "stand_in": True,
                               "partition": {"kind": "hierarchical_lda", "alpha": 0.1, "beta": 10.0,
                                             "samples_per_client": 100},
                               "clients": {"num_clients": 500, "clients_per_round": 20},
                               "algorithm": {"name": "fedavg"}})
    with pytest.raises(ConfigError) as err:
        data_plan(config)
    assert err.value.field == "partition.samples_per_client"
    assert str(err.value) == ("partition.samples_per_client: 100 per client × 500 clients exceeds the 45000 training "
                              "samples; allowed: 1..90")  # 50,000 less the server's 10 % validation split


def test_a_validation_split_from_the_test_split_leaves_the_clients_the_whole_training_set():
    config = build_experiment({"dataset": {"name": "cifar100"}, "stand_in": True, "server": {"val_source": "test"},
                               "partition": {"kind": "hierarchical_lda", "alpha": 0.1, "beta": 10.0,
                                             "samples_per_client": 100},
                               "clients": {"num_clients": 500, "clients_per_round": 20},
                               "algorithm": {"name": "fedavg"}})
    plan = data_plan(config)
    assert plan.client_train == (100,) * 500 and plan.pool == 50_000
    assert (plan.server_val, plan.test) == (1_000, 9_000)  # 10 % of the test split, the rest held out for test_*
    assert "server validation split 1,000 (from the test split)" in plan.lines()[0]


def test_a_public_pool_larger_than_its_dataset_fails_the_plan():
    config = build_experiment({"dataset": {"name": "cifar10"}, "stand_in": True, "stand_in_fraction": 0.01,
                               "public": {"source": "dataset", "dataset": "stl10", "dataset_split": "train",
                                          "size": 60},
                               "clients": {"num_clients": 4, "clients_per_round": 4}, "algorithm": {"name": "feddf"}})
    with pytest.raises(ConfigError) as err:
        data_plan(config)
    assert err.value.field == "public.size" and "stl10 train holds 50 images" in str(err.value)


def test_an_algorithm_that_needs_more_public_samples_than_the_pool_holds_fails_the_plan():
    """FedED's public_size against the pool the data plan computes (the run found it only after training)."""
    def feded(public_size):
        return build_experiment({"dataset": {"name": "emnist", "split": "letters"}, "stand_in": True,
                                 "stand_in_fraction": 0.01,
                                 "public": {"source": "train_split", "fraction": 0.5, "split": "first_half"},
                                 "clients": {"num_clients": 10, "clients_per_round": 10},
                                 "algorithm": {"name": "feded", "public_size": public_size}})

    with pytest.raises(ConfigError) as err:
        data_plan(feded(60000))
    assert str(err.value) == "algorithm.public_size: at most 624 (the public pool), got 60000"
    assert data_plan(feded(624)).public == 624


def test_stand_in_labels_are_the_generated_splits_labels():
    from platform.data.stand_in import generate_labels, generate_split

    for name, split, variant in [("mnist", "train", None), ("cifar100", "test", None), ("emnist", "train", "letters")]:
        _, y, classes, coarse = generate_split(name, split, variant, 0.02)
        labels, classes_again, coarse_again = generate_labels(name, split, variant, 0.02)
        assert np.array_equal(labels, y) and classes == classes_again
        assert (coarse is None and coarse_again is None) or np.array_equal(coarse, coarse_again)
