"""Non-IID partitions beyond Hsu et al.: each kind disjoint, seeded, and shaped as its spec defines it.

Specs: docs/methods/fedkp_fedpa.md §7.1-§7.4 (lda, hierarchical_lda, natural, client-sampling skew),
docs/methods/mnfl.md §4 (classes_per_client, unequal_classes, 75/25 splits), docs/methods/fedaux.md §6.1 (dirichlet
with equal sizes).
"""
import numpy as np
import pytest

from platform.config.experiment import PartitionConfig
from platform.preflight import load_experiment
from platform.data.partition import (PARTITIONS, class_counts, dirichlet_equal_partition, hierarchical_lda_partition,
                                     lda_partition, partition_clients)
from platform.data.splits import split_clients, split_fractions
from platform.data.sampling import client_sampling_probabilities, sample_clients_weighted
from platform.data.summary import partition_heatmap, partition_summary
from platform.errors import ConfigError

C = 10
LABELS = np.repeat(np.arange(C), 500)  # 10 classes × 500 samples
FINE = np.repeat(np.arange(100), 50)  # CIFAR-100-like: 100 fine labels × 50
COARSE = FINE // 5  # 20 coarse labels × 5 fine labels
GROUPS = np.random.default_rng(0).integers(0, 30, size=len(LABELS))  # 30 natural groups ("writers")

CASES = {
    "iid": ({}, 20),
    "dirichlet": ({"alpha": 0.5}, 20),
    "dirichlet_equal": ({"kind": "dirichlet", "alpha": 0.5, "equal_sizes": True}, 20),
    "lda": ({"alpha": 0.5}, 20),
    "lda_quirk": ({"kind": "lda", "alpha": 0.5, "lda_quirk_compat": True}, 20),
    "hierarchical_lda": ({"alpha": 0.1}, 50),
    "classes_per_client": ({"classes_per_client": 2}, 20),
    "unequal_classes": ({"alpha": 0.5}, 20),
    "natural": ({}, 20),
}


def _run(case, seed, num_clients=None):
    kw, k = CASES[case]
    kw = {"kind": case, **kw}
    cfg = PartitionConfig(**kw)
    labels = FINE if cfg.kind == "hierarchical_lda" else LABELS
    return labels, partition_clients(labels, cfg, num_clients or k, seed, groups=GROUPS, coarse_labels=COARSE)


def _tv_to_global(labels, parts, num_classes):
    counts = class_counts(labels, parts, num_classes)
    hist = counts / counts.sum(1, keepdims=True)
    glob = np.bincount(labels, minlength=num_classes) / len(labels)
    return 0.5 * np.abs(hist - glob).sum(1)


def test_every_registered_kind_is_covered():
    assert {CASES[c][0].get("kind", c) for c in CASES} == set(PARTITIONS)


@pytest.mark.parametrize("case", list(CASES))
def test_disjoint_and_deterministic_per_seed(case):
    labels, a = _run(case, 1)
    _, b = _run(case, 1)
    flat = np.concatenate(a)
    assert len(flat) == len(np.unique(flat)) and flat.min() >= 0 and flat.max() < len(labels)
    assert all(p.dtype == np.int64 for p in a)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    _, c = _run(case, 2)  # natural: 20 of 30 groups, a seeded choice
    assert not all(len(x) == len(y) and np.array_equal(x, y) for x, y in zip(a, c))


def test_natural_with_all_groups_is_seed_independent_and_one_client_per_group():
    parts = partition_clients(LABELS, PartitionConfig(kind="natural"), 30, 0, groups=GROUPS)
    again = partition_clients(LABELS, PartitionConfig(kind="natural"), 30, 9, groups=GROUPS)
    assert all(np.array_equal(x, y) for x, y in zip(parts, again))
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(LABELS)))
    for g, p in enumerate(parts):
        assert set(GROUPS[p].tolist()) == {g} and len(p) == np.sum(GROUPS == g)


def test_natural_subsamples_groups_whole():
    parts = partition_clients(LABELS, PartitionConfig(kind="natural"), 12, 3, groups=GROUPS)
    owners = [set(GROUPS[p].tolist()) for p in parts]
    assert all(len(o) == 1 for o in owners) and len(set.union(*owners)) == 12
    assert all(len(p) == np.sum(GROUPS == next(iter(o))) for p, o in zip(parts, owners))


# ---- lda (fedkp_fedpa.md §7.1 Alg. 7, §7.2) ----

def test_lda_sizes_and_pool_follow_section_7_2():
    parts = lda_partition(LABELS, 20, 0.5, seed=0)
    assert {len(p) for p in parts} == {250}  # N = C·⌊500/20⌋·20 / 20, all samples used
    unbalanced = np.concatenate([np.full(503, 0), np.full(498, 1), np.full(611, 2)])
    parts = lda_partition(unbalanced, 10, 0.5, seed=0)  # T = ⌊498/10⌋·10 = 490 per class, N = 3·490/10 = 147
    counts = class_counts(unbalanced, parts, 3)
    assert {len(p) for p in parts} == {147} and counts.sum(0).tolist() == [490, 490, 490]
    parts = lda_partition(LABELS, 20, 0.5, seed=0, samples_per_client=100)
    assert {len(p) for p in parts} == {100}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lda_tiny_alpha_gives_single_class_clients(seed):
    """α = 0.01: clients dominated by one label. A class running out mid-client (each class fills exactly two
    clients here) moves the rest of that client to another label, so some clients end with two or three."""
    counts = class_counts(LABELS, lda_partition(LABELS, 20, 0.01, seed), C)
    hist = counts / counts.sum(1, keepdims=True)
    assert np.median((hist > 0.05).sum(1)) <= 2 and np.mean(hist.max(1)) > 0.75
    hist = class_counts(LABELS, lda_partition(LABELS, 20, 0.001, seed), C) / 250
    assert np.mean(hist.max(1) > 0.9) > 0.5 and np.mean(hist.max(1)) > 0.8


@pytest.mark.parametrize("seed", [0, 1])
def test_lda_huge_alpha_matches_the_global_histogram(seed):
    """α = 1000: each client's 250 draws are ≈ uniform (TV ≈ sampling noise, ~0.07). The last client takes the
    pool's leftovers (Alg. 7 sizes the pool to exactly M·N), which carry every earlier client's noise."""
    tv = _tv_to_global(LABELS, lda_partition(LABELS, 20, 1000.0, seed), C)
    assert tv[:-1].max() < 0.16 and np.median(tv) < 0.1 and tv.max() < 0.5, tv
    skewed = _tv_to_global(LABELS, lda_partition(LABELS, 20, 0.01, seed), C)
    assert np.median(skewed) > 0.6


def test_lda_first_client_follows_its_dirichlet_draw():
    """Client 1 draws N labels i.i.d. from p ~ Dir(α) while no class empties: mean counts ≈ N·E[p] = N/C."""
    first = np.stack([class_counts(LABELS, lda_partition(LABELS, 10, 5.0, s)[:1], C)[0] for s in range(40)])
    assert np.all(np.abs(first.mean(0) / 500 - 0.1) < 0.03)


def test_lda_class_exhaustion_is_handled():
    """Classes run out mid-client; every client still gets exactly N and the whole pool is used once."""
    labels = np.repeat(np.arange(4), 30)
    for quirk in (False, True):
        parts = lda_partition(labels, 12, 0.05, seed=5, samples_per_client=10, quirk_compat=quirk)
        assert {len(p) for p in parts} == {10}
        assert sorted(np.concatenate(parts).tolist()) == list(range(120))


def test_lda_renormalises_unless_quirk_compat():
    """§7.1 [code] / §12 A15: after class 0 empties, p over {1, 2} is renormalised (≈ 1/2 each); the authors'
    no-op renormalisation leaves p_1 ≈ 1/3 and hands the missing mass to the last label (p_2 ≈ 2/3)."""
    labels = np.concatenate([np.zeros(10, int), np.ones(495, int), np.full(495, 2)])
    fixed, quirk = [], []
    for seed in range(5):
        for out, flag in ((fixed, False), (quirk, True)):
            first = lda_partition(labels, 2, 1000.0, seed, samples_per_client=500, quirk_compat=flag)[0]
            out.append(np.bincount(labels[first], minlength=3))
    fixed, quirk = np.mean(fixed, 0), np.mean(quirk, 0)
    assert fixed[0] == quirk[0] == 10
    assert abs(fixed[1] - fixed[2]) < 40 and quirk[2] - quirk[1] > 100


# ---- hierarchical LDA (fedkp_fedpa.md §7.4) ----

def test_hierarchical_lda_uses_everything_with_equal_sizes():
    parts = hierarchical_lda_partition(FINE, COARSE, 50, 0.1, 10.0, seed=0)
    assert {len(p) for p in parts} == {100}
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(FINE)))


def test_hierarchical_lda_small_alpha_gives_few_coarse_many_fine():
    """Small α: "domain-specific" clients, many fine labels within few coarse labels (§7.4)."""
    parts = hierarchical_lda_partition(FINE, COARSE, 50, 0.01, 10.0, seed=1)[:25]  # early clients, before leftovers
    n_coarse = np.array([len(np.unique(COARSE[p])) for p in parts])
    n_fine = np.array([len(np.unique(FINE[p])) for p in parts])
    assert np.median(n_coarse) <= 2 and np.mean(n_fine / n_coarse) > 3.0
    wide = hierarchical_lda_partition(FINE, COARSE, 50, 100.0, 10.0, seed=1)[:25]
    assert np.mean([len(np.unique(COARSE[p])) for p in wide]) > 15


def test_hierarchical_lda_fine_draw_stays_inside_the_coarse_label():
    """β → 0 within each coarse label: a client's fine labels ≈ one per coarse label it holds."""
    parts = hierarchical_lda_partition(FINE, COARSE, 50, 1.0, 0.001, seed=2)[:10]
    per_coarse = [len(np.unique(FINE[p])) / len(np.unique(COARSE[p])) for p in parts]
    assert np.mean(per_coarse) < 1.5


def test_hierarchical_lda_needs_coarse_labels_to_be_a_function():
    bad = COARSE.copy()
    bad[0] = 7  # fine label 0 now under two coarse labels
    with pytest.raises(ConfigError) as err:
        hierarchical_lda_partition(FINE, bad, 10, 0.1, 10.0, seed=0)
    assert err.value.field == "partition.kind"


# ---- dirichlet with equal sizes (fedaux.md §6.1) ----

@pytest.mark.parametrize("alpha,k,dominant", [(0.01, 20, (0.95, 1.0)), (1.0, 10, (0.2, 0.36)),
                                               (100.0, 20, (0.1, 0.14))])
def test_dirichlet_equal_sizes_and_skew(alpha, k, dominant):
    labels = np.repeat(np.arange(C), 1000)
    parts = dirichlet_equal_partition(labels, k, alpha, seed=0)
    sizes = np.array([len(p) for p in parts])
    assert sizes.sum() == len(labels) and sizes.max() - sizes.min() <= 2 * C
    counts = class_counts(labels, parts, C)
    share = np.median(counts.max(1) / counts.sum(1))  # spec table: 0.999 / 0.28 / 0.11
    assert dominant[0] <= share <= dominant[1], share


# ---- classes_per_client, unequal_classes (mnfl.md §4) ----

@pytest.mark.parametrize("k,clients", [(1, 10), (2, 20), (3, 7), (10, 5)])
def test_classes_per_client_gives_exactly_k(k, clients):
    parts = partition_clients(LABELS, PartitionConfig(kind="classes_per_client", classes_per_client=k), clients, 0)
    counts = class_counts(LABELS, parts, C)
    assert np.all((counts > 0).sum(1) == k)
    holders = (counts > 0).sum(0)
    assert holders.max() - holders.min() <= 1  # balanced class use


def test_classes_per_client_mcmahan_layout_for_20_clients():
    parts = partition_clients(LABELS, PartitionConfig(kind="classes_per_client", classes_per_client=2), 20, 0)
    counts = class_counts(LABELS, parts, C)
    assert np.all((counts > 0).sum(0) == 4) and set(counts[counts > 0].tolist()) == {125}


def test_unequal_classes_every_client_every_class_unequal_counts():
    parts = partition_clients(LABELS, PartitionConfig(kind="unequal_classes", alpha=0.5), 20, 0)
    counts = class_counts(LABELS, parts, C)
    assert counts.min() >= 5 and counts.sum() == len(LABELS)
    assert np.all(counts.std(0) > 5)  # counts differ between clients for every class


def test_unequal_classes_min_per_class_too_large():
    with pytest.raises(ConfigError) as err:
        partition_clients(LABELS, PartitionConfig(kind="unequal_classes", min_per_class=30), 20, 0)
    assert err.value.field == "partition.min_per_class" and "0..25" in str(err.value)


# ---- per-client splits (mnfl.md §4: 75/25) ----

def test_split_clients_fractions_disjoint_seeded():
    parts = partition_clients(LABELS, PartitionConfig(kind="dirichlet"), 10, 0)
    splits = split_clients(parts, (0.75, 0.25), seed=3)
    assert splits == [] or set(splits[0]) == {"train", "test"}
    for part, split in zip(parts, splits):
        assert sorted(np.concatenate(list(split.values())).tolist()) == sorted(part.tolist())
        assert abs(len(split["train"]) - 0.75 * len(part)) <= 1
    again = split_clients(parts, (0.75, 0.25), seed=3)
    other = split_clients(parts, (0.75, 0.25), seed=4)
    assert all(np.array_equal(a["test"], b["test"]) for a, b in zip(splits, again))
    assert not all(np.array_equal(a["test"], b["test"]) for a, b in zip(splits, other))
    three = split_clients(parts, split_fractions(PartitionConfig(val_fraction=0.1, test_fraction=0.2)), seed=0)
    assert set(three[0]) == {"train", "val", "test"}
    assert abs(len(three[0]["val"]) - 0.1 * len(parts[0])) <= 1


def test_split_clients_rejects_bad_fractions():
    with pytest.raises(ConfigError):
        split_clients([np.arange(10)], (0.8, 0.3), seed=0)


# ---- client-sampling skew (fedkp_fedpa.md §7.3) ----

def test_sampling_probabilities():
    pi = client_sampling_probabilities(100, 0.1, seed=0)
    assert pi.shape == (100,) and np.all(pi >= 0) and abs(pi.sum() - 1) < 1e-12
    assert np.array_equal(pi, client_sampling_probabilities(100, 0.1, seed=0))
    assert not np.array_equal(pi, client_sampling_probabilities(100, 0.1, seed=1))
    assert np.allclose(client_sampling_probabilities(7, None, 0), 1 / 7)
    assert np.allclose(client_sampling_probabilities(7, float("inf"), 0), 1 / 7)
    flat = client_sampling_probabilities(100, 1e4, seed=0)
    assert flat.max() < 0.02 and pi.max() > 0.1  # large α → uniform, small α → concentrated


def test_weighted_sampler_seeded_without_replacement_and_weighted():
    pi = client_sampling_probabilities(50, 0.5, seed=0)
    a = sample_clients_weighted(pi, 10, seed=7, round_index=3)
    assert len(a) == 10 and len(np.unique(a)) == 10 and a.min() >= 0 and a.max() < 50
    assert np.array_equal(a, sample_clients_weighted(pi, 10, seed=7, round_index=3))
    assert not np.array_equal(a, sample_clients_weighted(pi, 10, seed=7, round_index=4))
    hits = np.zeros(50)
    for r in range(2000):
        hits[sample_clients_weighted(pi, 5, seed=1, round_index=r)] += 1
    order = np.argsort(pi)
    assert hits[order[-5:]].mean() > 5 * max(hits[order[:10]].mean(), 1.0)
    # one draw (no replacement effect): the selection frequency matches π
    ones = np.bincount([sample_clients_weighted(pi, 1, seed=2, round_index=r)[0] for r in range(4000)], minlength=50)
    assert 0.5 * np.abs(ones / 4000 - pi).sum() < 0.06


def test_weighted_sampler_edge_cases():
    p = np.array([0.0, 0.5, 0.5, 0.0])
    assert sample_clients_weighted(p, 4, 0, 0).tolist() == [0, 1, 2, 3]
    assert set(sample_clients_weighted(p, 2, 0, 0).tolist()) == {1, 2}
    with pytest.raises(ConfigError) as err:
        sample_clients_weighted(p, 5, 0, 0)
    assert err.value.field == "clients.clients_per_round"
    with pytest.raises(ValueError):
        sample_clients_weighted(np.array([-1.0, 2.0]), 1, 0, 0)


# ---- summary ----

def test_partition_summary_and_heatmap(tmp_path):
    labels, parts = _run("classes_per_client", 0)
    text = partition_summary(labels, parts, C)
    counts = class_counts(labels, parts, C)
    lines = text.splitlines()
    assert "20 clients" in lines[0] and lines[1].split() == ["client", *[f"c{c}" for c in range(C)], "total"]
    assert [int(v) for v in lines[2].split()[1:]] == [*counts[0].tolist(), int(counts[0].sum())]
    assert lines[-1].split() == ["all", *map(str, counts.sum(0).tolist()), str(int(counts.sum()))]
    long = partition_summary(labels, partition_clients(labels, PartitionConfig(kind="iid"), 50, 0), C, max_rows=8)
    assert len(long.splitlines()) == 2 + 8 + 2 and "42 more clients not shown" in long
    path = partition_heatmap(counts, str(tmp_path / "sub" / "heat.png"), "classes_per_client k=2")
    with open(path, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


# ---- bad input: one ConfigError naming the field and what is allowed ----

def test_unknown_partition():
    with pytest.raises(ConfigError) as err:
        load_experiment({"partition": {"kind": "pathological"}})
    assert err.value.field == "partition.kind" and "lda" in str(err.value) and "natural" in str(err.value)


def test_more_classes_per_client_than_classes():
    with pytest.raises(ConfigError) as err:
        partition_clients(LABELS, PartitionConfig(kind="classes_per_client", classes_per_client=11), 10, 0)
    assert err.value.field == "partition.classes_per_client" and "10 classes" in str(err.value)
    assert "1..10" in str(err.value)


@pytest.mark.parametrize("kind,what", [("hierarchical_lda", "coarse labels"), ("natural", "natural groups")])
def test_missing_coarse_labels_or_groups(kind, what):
    with pytest.raises(ConfigError) as err:
        partition_clients(LABELS, PartitionConfig(kind=kind), 10, 0)
    msg = str(err.value)
    assert err.value.field == "partition.kind" and what in msg and "allowed here: " in msg
    assert "dirichlet" in msg and kind not in msg.split("allowed here: ")[1]


def test_natural_more_clients_than_groups():
    with pytest.raises(ConfigError) as err:
        partition_clients(LABELS, PartitionConfig(kind="natural"), 31, 0, groups=GROUPS)
    assert err.value.field == "clients.num_clients" and "30" in str(err.value)


def test_lda_pool_too_small():
    with pytest.raises(ConfigError) as err:
        partition_clients(LABELS, PartitionConfig(kind="lda", samples_per_client=300), 20, 0)
    assert err.value.field == "partition.samples_per_client" and "1..250" in str(err.value)


@pytest.mark.parametrize("partition,field", [
    ({"kind": "classes_per_client"}, "partition.classes_per_client"),
    ({"kind": "dirichlet", "classes_per_client": 2}, "partition.classes_per_client"),
    ({"kind": "lda", "equal_sizes": True}, "partition.equal_sizes"),
    ({"kind": "dirichlet", "samples_per_client": 10}, "partition.samples_per_client"),
    ({"kind": "iid", "lda_quirk_compat": True}, "partition.lda_quirk_compat"),
    ({"val_fraction": 0.5, "test_fraction": 0.5}, "partition.test_fraction"),
    ({"classes_per_client": 0, "kind": "classes_per_client"}, "partition.classes_per_client"),
    ({"beta": 0}, "partition.beta"),
    ({"sampling_alpha": -1}, "partition.sampling_alpha"),
])
def test_config_cross_field_rules(partition, field):
    with pytest.raises(ConfigError) as err:
        load_experiment({"partition": partition})
    assert err.value.field == field


def test_config_accepts_the_new_kinds():
    cfg = load_experiment({"partition": {"kind": "classes_per_client", "classes_per_client": 2, "test_fraction": 0.25,
                                         "sampling_alpha": 0.1}})
    assert cfg.partition.classes_per_client == 2 and split_fractions(cfg.partition)["train"] == 0.75
    flat = cfg.flat()
    assert flat["partition.beta"] == 10.0 and flat["partition.equal_sizes"] is False
