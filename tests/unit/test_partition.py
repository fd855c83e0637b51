"""Partition properties: disjoint, deterministic per seed, sizes exactly as docs/methods/feded.md §4.2 defines."""
import numpy as np
import pytest

from platform.data import load_dataset
from platform.data.partition import class_counts, dirichlet_partition, iid_partition
from platform.config.experiment import DatasetConfig


@pytest.fixture(scope="module")
def labels():
    train, test = load_dataset(DatasetConfig())
    return train.y


def test_digits_split_is_fixed_and_held_out():
    (train_a, test_a), (train_b, test_b) = load_dataset(DatasetConfig()), load_dataset(DatasetConfig())
    assert len(train_a) + len(test_a) == 1797
    assert np.array_equal(test_a.y, test_b.y) and np.array_equal(test_a.x, test_b.x)
    assert 0.19 < len(test_a) / 1797 < 0.21
    assert train_a.x.shape[1:] == (1, 8, 8) and train_a.x.dtype == np.float32 and train_a.x.max() <= 1.0


@pytest.mark.parametrize("alpha", [0.01, 0.5, 100.0])
def test_dirichlet_disjoint_and_deterministic(labels, alpha):
    a = dirichlet_partition(labels, 10, alpha, seed=1)
    b = dirichlet_partition(labels, 10, alpha, seed=1)
    c = dirichlet_partition(labels, 10, alpha, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(len(x) == len(y) and np.array_equal(x, y) for x, y in zip(a, c))
    flat = np.concatenate(a)
    assert len(flat) == len(np.unique(flat)) and flat.max() < len(labels)


def test_dirichlet_sizes_follow_the_flooring_procedure(labels):
    """Client k holds exactly floor(P[c,k]·N^c) samples of class c, P redrawn until column sums > min_share."""
    alpha, seed, k = 0.5, 4, 10
    parts = dirichlet_partition(labels, k, alpha, seed)
    rng = np.random.RandomState(seed)
    while True:
        shares = rng.dirichlet([alpha] * k, size=10)
        if np.all(shares.sum(axis=0) > 0.01):
            break
    class_sizes = np.bincount(labels, minlength=10)
    expected = np.floor(shares * class_sizes[:, None]).astype(int).T  # K×C
    assert np.array_equal(class_counts(labels, parts, 10), expected)
    assert sum(map(len, parts)) <= len(labels)


def _histograms(labels, alpha, seed=0):
    counts = class_counts(labels, dirichlet_partition(labels, 10, alpha, seed=seed), 10)
    counts = counts[counts.sum(1) > 0]
    return counts / counts.sum(1, keepdims=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tiny_alpha_gives_one_or_two_classes_per_client(labels, seed):
    hist = _histograms(labels, 0.01, seed)
    classes_held = (hist > 0.05).sum(1)  # docs/methods/feded.md §4.2: 1-2 classes with > 5 % share at α = 0.01
    assert np.mean(classes_held) <= 2.0 and np.median(classes_held) <= 2
    assert np.mean(hist.max(1)) > 0.7


def test_huge_alpha_matches_the_global_histogram(labels):
    hist = _histograms(labels, 1000.0)
    global_hist = np.bincount(labels, minlength=10) / len(labels)
    total_variation = 0.5 * np.abs(hist - global_hist).sum(1)
    assert total_variation.max() < 0.1, total_variation


def test_iid_is_a_partition(labels):
    parts = iid_partition(labels, 7, seed=0)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(labels)))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_the_config_knows_every_partitioner_and_no_other():
    """``partition.kind`` is validated against config's own list (config never imports data); it names exactly the
    partitioners data has, in the same order."""
    from platform.config.experiment import PARTITION_KINDS
    from platform.data.partition import PARTITIONS

    assert tuple(PARTITIONS) == PARTITION_KINDS
