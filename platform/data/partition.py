"""Partitions of a labelled training set over K clients. Each returns one index array per client.

All partitions are seeded, deterministic, and disjoint. They use ``np.random.RandomState`` because the
reference code (spec/feded.md §4.2) draws from NumPy's legacy global generator; we keep its procedure
and generator type but give it its own seed (the partition stream), so no other randomness shifts it.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from platform.errors import ConfigError

_MAX_DIRICHLET_REDRAWS = 10_000


def dirichlet_partition(labels: np.ndarray, num_clients: int, alpha: float, seed: int,
                        min_share: float = 0.01) -> list[np.ndarray]:
    """Label-skew split of Hsu et al. (2019), exactly as spec/feded.md §4.2 [code].

    Draw P ~ Dir_K(α) per class (shape C×K), redrawn until every client's summed share over classes
    exceeds ``min_share``. For class c, client k takes floor(P[c,k]·N^c) of the *remaining* class-c
    indices after a fresh shuffle; samples lost to flooring are discarded. Each client's indices are
    shuffled once at the end.
    """
    rng = np.random.RandomState(seed)
    classes = np.unique(labels)
    for _ in range(_MAX_DIRICHLET_REDRAWS):
        shares = rng.dirichlet([alpha] * num_clients, size=len(classes))
        if np.all(shares.sum(axis=0) > min_share):
            break
    else:
        raise ConfigError("partition.min_share", f"no Dirichlet draw gave every client a share > {min_share} "
                                                 f"after {_MAX_DIRICHLET_REDRAWS} tries; lower it or raise alpha")
    clients: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for row, c in enumerate(classes):
        remaining = np.flatnonzero(labels == c)
        class_size = len(remaining)
        for k in range(num_clients):
            rng.shuffle(remaining)
            take = int(np.floor(shares[row, k] * class_size))
            clients[k].append(remaining[:take])
            remaining = remaining[take:]
    out = []
    for parts in clients:
        idx = np.concatenate(parts).astype(np.int64)
        rng.shuffle(idx)
        out.append(idx)
    return out


def iid_partition(labels: np.ndarray, num_clients: int, seed: int) -> list[np.ndarray]:
    """A uniform random split into K near-equal shards."""
    rng = np.random.RandomState(seed)
    order = rng.permutation(len(labels)).astype(np.int64)
    return [np.asarray(s) for s in np.array_split(order, num_clients)]


# Each entry: (labels, cfg: PartitionConfig, num_clients, seed, groups, coarse_labels) -> one index array per client.
# ``groups`` (natural client id per sample) and ``coarse_labels`` (e.g. CIFAR-100 superclasses) are None
# when the dataset has none.
PARTITIONS: dict[str, Callable] = {
    "dirichlet": lambda labels, cfg, num_clients, seed, groups, coarse: dirichlet_partition(
        labels, num_clients, cfg.alpha, seed, cfg.min_share),
    "iid": lambda labels, cfg, num_clients, seed, groups, coarse: iid_partition(labels, num_clients, seed),
}


def partition_clients(labels: np.ndarray, cfg, num_clients: int, seed: int, groups: Optional[np.ndarray] = None,
                      coarse_labels: Optional[np.ndarray] = None) -> list[np.ndarray]:
    if num_clients > len(labels):
        raise ConfigError("clients.num_clients", f"{num_clients} clients but only {len(labels)} training samples")
    return PARTITIONS[cfg.kind](labels, cfg, num_clients, seed, groups, coarse_labels)


def class_counts(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
    """The client × class count matrix N_k^c."""
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])
