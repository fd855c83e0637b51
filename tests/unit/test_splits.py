"""Per-client and server splits (stratified by label), and golden outputs of the LDA sampler (_nested_lda)."""
import numpy as np
import pytest

from platform.config.experiment import PartitionConfig
from platform.data import server_validation_split, split_clients, stratified_split
from platform.data.partition import class_counts, hierarchical_lda_partition, lda_partition, partition_clients
from platform.data.splits import split_fractions
from platform.errors import ConfigError

C = 10
LABELS = np.random.default_rng(0).permutation(np.repeat(np.arange(C), 300))  # 10 classes × 300, shuffled
FRACTIONS = split_fractions(PartitionConfig(val_fraction=0.1, test_fraction=0.2))  # train 0.7, val 0.1, test 0.2


def _parts(kind):
    cfg = {"dirichlet": PartitionConfig(kind="dirichlet", alpha=0.5),
           "classes": PartitionConfig(kind="classes_per_client", classes_per_client=2)}[kind]
    return partition_clients(LABELS, cfg, 10, 0)


# ---- split_clients(..., labels=...) ----

@pytest.mark.parametrize("kind", ["dirichlet", "classes"])
def test_stratified_split_clients_disjoint_cover_sizes_and_per_class(kind):
    parts = _parts(kind)
    splits = split_clients(parts, FRACTIONS, seed=3, labels=LABELS)
    assert len(splits) == len(parts)
    for part, split in zip(parts, splits):
        assert list(split) == ["train", "val", "test"]
        flat = np.concatenate(list(split.values()))
        assert len(flat) == len(np.unique(flat)) and sorted(flat.tolist()) == sorted(part.tolist())
        assert all(v.dtype == np.int64 and np.all(np.diff(v) > 0) for v in split.values())  # sorted ascending
        n, per_class = len(part), np.bincount(LABELS[part], minlength=C)
        for name, frac in FRACTIONS.items():
            assert abs(len(split[name]) - frac * n) <= 1, (name, len(split[name]), frac * n)
            got = np.bincount(LABELS[split[name]], minlength=C)
            assert np.all(np.abs(got - frac * per_class) <= 1), (name, got, frac * per_class)


def test_stratified_split_clients_seeded():
    parts = _parts("dirichlet")
    a = split_clients(parts, FRACTIONS, seed=3, labels=LABELS)
    b = split_clients(parts, FRACTIONS, seed=3, labels=LABELS)
    c = split_clients(parts, FRACTIONS, seed=4, labels=LABELS)
    assert all(np.array_equal(x[k], y[k]) for x, y in zip(a, b) for k in FRACTIONS)
    assert not all(np.array_equal(x["val"], y["val"]) for x, y in zip(a, c))


def test_unstratified_split_clients_unchanged():
    """Without labels: today's shuffle-and-cut, one default_rng(seed) over the clients in order."""
    parts = _parts("dirichlet")
    got = split_clients(parts, (0.7, 0.1, 0.2), seed=5)
    assert all(np.array_equal(x[k], y[k]) for x, y in zip(got, split_clients(parts, (0.7, 0.1, 0.2), 5, labels=None))
               for k in x)
    rng = np.random.default_rng(5)
    for part, split in zip(parts, got):
        idx = rng.permutation(part.astype(np.int64))
        cuts = np.floor(np.array([0.7, 0.8]) * len(idx) + 0.5).astype(np.int64)
        train, val, test = np.split(idx, cuts)
        assert np.array_equal(split["train"], train) and np.array_equal(split["val"], val)
        assert np.array_equal(split["test"], test)


def test_stratified_split_small_and_edge_cases():
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 2])
    rng = np.random.default_rng(0)
    out = stratified_split(np.arange(10), labels, {"train": 0.9, "val": 0.05, "test": 0.05}, rng)
    assert all(len(v) >= 1 for v in out.values())  # min-one: n ≥ number of positive fractions
    assert sorted(np.concatenate(list(out.values())).tolist()) == list(range(10))
    out = stratified_split(np.arange(10), labels, {"train": 1.0, "val": 0.0}, rng)
    assert out["train"].tolist() == list(range(10)) and out["val"].dtype == np.int64 and len(out["val"]) == 0
    out = stratified_split(np.zeros(0, np.int64), labels, {"a": 0.5, "b": 0.5}, rng)
    assert all(len(v) == 0 and v.dtype == np.int64 for v in out.values())
    out = stratified_split(np.array([9, 3, 5, 8]), labels, {"a": 0.5, "b": 0.5}, rng)  # indices are positions
    assert sorted(np.concatenate([out["a"], out["b"]]).tolist()) == [3, 5, 8, 9] and len(out["a"]) == 2
    with pytest.raises(ConfigError) as err:
        stratified_split(np.arange(10), labels, {"a": 0.8, "b": 0.3}, rng)
    assert err.value.field == "partition"
    with pytest.raises(ConfigError):
        split_clients([np.arange(10)], (0.8, 0.3), seed=0, labels=labels)


# ---- server_validation_split ----

def test_server_validation_split_stratified_disjoint_seeded():
    labels = np.concatenate([np.full(503, 0), np.full(41, 1), np.full(256, 2), np.full(7, 3)])
    labels = np.random.default_rng(1).permutation(labels)
    train, val = server_validation_split(labels, 0.1, seed=0)
    assert train.dtype == val.dtype == np.int64
    assert len(np.intersect1d(train, val)) == 0
    assert np.array_equal(np.sort(np.concatenate([train, val])), np.arange(len(labels)))
    assert abs(len(val) - 0.1 * len(labels)) <= 1
    counts = np.bincount(labels, minlength=4)
    assert np.all(np.abs(np.bincount(labels[val], minlength=4) - 0.1 * counts) <= 1)
    again, other = server_validation_split(labels, 0.1, seed=0), server_validation_split(labels, 0.1, seed=1)
    assert np.array_equal(again[1], val) and not np.array_equal(other[1], val)


def test_server_validation_split_zero_is_identity():
    train, val = server_validation_split(np.array([3, 1, 2, 1]), 0.0, seed=7)
    assert np.array_equal(train, np.arange(4)) and train.dtype == np.int64
    assert val.dtype == np.int64 and val.shape == (0,)


@pytest.mark.parametrize("fraction", [1.0, -0.1, 1.5, float("nan")])
def test_server_validation_split_rejects_bad_fraction(fraction):
    with pytest.raises(ConfigError) as err:
        server_validation_split(np.arange(10) % 2, fraction, seed=0)
    assert err.value.field == "server.val_fraction"


# ---- golden outputs of _nested_lda (recorded before it was split into helpers) ----

def test_lda_golden_small():
    labels = np.repeat(np.arange(4), 8)
    plain = lda_partition(labels, 4, 0.3, seed=7, samples_per_client=6)
    quirk = lda_partition(labels, 4, 0.3, seed=7, samples_per_client=6, quirk_compat=True)
    assert [p.tolist() for p in plain] == [[0, 1, 3, 29, 6, 4], [23, 18, 17, 16, 19, 22], [20, 7, 13, 8, 15, 12],
                                           [10, 14, 25, 26, 24, 30]]
    assert [p.tolist() for p in quirk] == [[0, 1, 3, 29, 6, 4], [23, 18, 17, 16, 19, 22], [20, 7, 25, 26, 24, 13],
                                           [8, 15, 12, 10, 14, 30]]


def test_lda_golden_classes_empty():
    """Every class empties (the whole balanced pool is used): heads and class counts per client."""
    labels = np.repeat(np.arange(10), 50)
    parts = lda_partition(labels, 10, 0.1, seed=0)
    assert [p[:5].tolist() for p in parts] == [
        [375, 386, 398, 351, 352], [172, 197, 190, 188, 184], [476, 464, 54, 479, 473], [336, 89, 103, 35, 326],
        [340, 328, 332, 39, 327], [121, 130, 149, 138, 80], [77, 373, 70, 87, 71], [468, 491, 452, 242, 224],
        [436, 407, 426, 427, 403], [24, 9, 43, 33, 2]]
    assert class_counts(labels, parts, 10).tolist() == [
        [0, 0, 0, 1, 0, 0, 0, 47, 2, 0], [0, 0, 0, 48, 0, 0, 2, 0, 0, 0], [0, 9, 0, 0, 0, 0, 0, 0, 0, 41],
        [1, 11, 8, 0, 0, 0, 28, 2, 0, 0], [8, 5, 2, 1, 4, 4, 20, 0, 0, 6], [0, 16, 34, 0, 0, 0, 0, 0, 0, 0],
        [30, 9, 0, 0, 9, 0, 0, 1, 1, 0], [4, 0, 6, 0, 37, 0, 0, 0, 0, 3], [0, 0, 0, 0, 0, 3, 0, 0, 47, 0],
        [7, 0, 0, 0, 0, 43, 0, 0, 0, 0]]


def test_hierarchical_lda_golden():
    fine = np.repeat(np.arange(6), 4)
    parts = hierarchical_lda_partition(fine, fine // 3, 4, 0.1, 0.5, seed=3)
    assert [p.tolist() for p in parts] == [[15, 13, 16, 12, 14, 20], [1, 3, 10, 11, 2, 8], [4, 5, 9, 6, 7, 0],
                                           [18, 19, 17, 21, 22, 23]]
    fine = np.repeat(np.arange(20), 25)
    parts = hierarchical_lda_partition(fine, fine // 10, 5, 0.5, 0.2, seed=1, samples_per_client=60)
    assert [p[:5].tolist() for p in parts] == [[392, 259, 300, 370, 9], [326, 347, 499, 497, 321],
                                               [142, 27, 88, 82, 40], [437, 433, 436, 439, 448],
                                               [54, 52, 65, 51, 180]]
    assert [int(p.sum()) for p in parts] == [8989, 22904, 9995, 22237, 9129]
