"""Client-sampling skew 𝒬 (docs/methods/fedkp_fedpa.md §7.3): skewed per-round client selection.

EMNIST-62 keeps each writer's data distribution 𝒫_i fixed and makes the federation heterogeneous through *which*
clients take part: client probabilities π ~ Dir(α·1_K) are drawn once, and every round draws ``per_round``
distinct clients from Categorical(π) without replacement. α → ∞ is uniform sampling. §12 A9: on MNIST the
authors' code also applies it, with the LDA α; we keep it a separate knob (``partition.sampling_alpha``).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from platform.errors import ConfigError


def client_sampling_probabilities(num_clients: int, alpha: Optional[float], seed: int) -> np.ndarray:
    """π ~ Dir(α·1_K), drawn once per experiment (§7.3). ``alpha`` None or ∞ gives the uniform vector.

    Deviation: seeded with ``np.random.default_rng(seed)`` rather than the authors' global
    ``np.random.seed(1234)``; the Generator's Dirichlet stays exact for tiny α, where the legacy one can
    return NaN.
    """
    if num_clients < 1:
        raise ConfigError("clients.num_clients", f"must be >= 1, got {num_clients}")
    if alpha is None or np.isinf(alpha):
        return np.full(num_clients, 1.0 / num_clients)
    if not alpha > 0:
        raise ConfigError("partition.sampling_alpha", f"must be > 0 (or null for uniform sampling), got {alpha!r}")
    pi = np.random.default_rng(seed).dirichlet([float(alpha)] * num_clients)
    return pi / pi.sum()


def sample_clients_weighted(probabilities: np.ndarray, per_round: int, seed: int, round_index: int) -> np.ndarray:
    """The clients of round ``round_index``: ``per_round`` distinct draws from Categorical(π) (§7.3), sorted.

    Successive sampling without replacement (draw one, remove it, renormalise, repeat), as
    ``np.random.choice(K, n, replace=False, p=π)`` in the authors' code, implemented with exponential keys
    (Efraimidis & Spirakis): client i gets key E_i/π_i (compared in log space) with E_i ~ Exp(1) and the smallest
    keys win, which has the same distribution. Deviations:
    - Seeded per (seed, round) like ``platform.runtime.seeding.sample_clients``, not one sequential stream from
      ``np.random.seed(0)``, so a round's clients do not depend on earlier calls (resumable, order-free).
    - Clients with π_i = 0 (Dirichlet underflow at tiny α) come last, in uniformly random order, instead of
      the authors' ``ValueError`` when fewer than ``per_round`` probabilities are non-zero.
    """
    p = np.asarray(probabilities, dtype=np.float64)
    if p.ndim != 1 or len(p) == 0 or np.any(~np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
        raise ValueError("probabilities must be a non-empty 1-D array of finite non-negative numbers with a "
                         "positive sum")
    if not 1 <= per_round <= len(p):
        raise ConfigError("clients.clients_per_round", f"must be in 1..{len(p)} (the number of clients), "
                                                       f"got {per_round}")
    rng = np.random.default_rng([int(seed), int(round_index)])
    exp = rng.exponential(size=len(p))
    tiebreak = rng.random(len(p))
    with np.errstate(divide="ignore"):
        keys = np.log(exp) - np.log(p)  # log(E_i/π_i): no overflow for tiny π_i; +inf where π_i = 0
    chosen = np.lexsort((tiebreak, keys))[:per_round]
    return np.sort(chosen).astype(np.int64)
