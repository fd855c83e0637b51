"""Partitions of a labelled training set over K clients. Each returns one index array per client.

All partitions are seeded, deterministic, and disjoint. ``dirichlet`` and ``iid`` use ``np.random.RandomState``
because the reference code (docs/methods/feded.md §4.2) draws from NumPy's legacy global generator; we keep its
procedure and generator type but give it its own seed (the partition stream), so no other randomness shifts it.

The other partitions claim no bit-exactness with any authors' code, so they use ``np.random.Generator``
(``default_rng(seed)``): its ``dirichlet`` stays exact for tiny α (the legacy one returns NaN when every gamma
draw underflows, which happens at α = 0.001 with ten classes). Where a kind cannot be built for the data
(too many classes per client, no coarse labels, no natural groups, too few samples) it raises one
``ConfigError`` naming the field and what is allowed.

Kinds and their specs:

- ``iid``: uniform split into near-equal shards.
- ``dirichlet``: Hsu et al. label skew, docs/methods/feded.md §4.2; with ``equal_sizes`` FedAUX's Sinkhorn-balanced
  variant with equal client sizes, docs/methods/fedaux.md §6.1.
- ``lda``: per-client Dir(α) label proportions, sampled without replacement, docs/methods/fedkp_fedpa.md §7.1 (Alg. 7)
  with the pool of §7.2.
- ``hierarchical_lda``: coarse/fine (CIFAR-100) LDA of docs/methods/fedkp_fedpa.md §7.4.
- ``classes_per_client``: exactly k classes per client, MNFL Non-IID_1 (docs/methods/mnfl.md §4, §10 #20).
- ``unequal_classes``: every client holds every class in unequal counts, MNFL Non-IID_2 (docs/methods/mnfl.md §4, §10
  #19).
- ``natural``: one client per natural group (LEAF writers), docs/methods/fedkp_fedpa.md §7.3.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from platform.errors import ConfigError, did_you_mean

_MAX_DIRICHLET_REDRAWS = 10_000


def dirichlet_partition(labels: np.ndarray, num_clients: int, alpha: float, seed: int,
                        min_share: float = 0.01) -> list[np.ndarray]:
    """Label-skew split of Hsu et al. (2019), exactly as docs/methods/feded.md §4.2 [code].

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


_SINKHORN_MAX_ITERS = 1000  # docs/methods/fedaux.md §6.1 [code]: "≤1000 iterations"
_SINKHORN_TOL = 1e-10


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    top = np.max(x, axis=axis, keepdims=True)
    return (top + np.log(np.sum(np.exp(x - top), axis=axis, keepdims=True))).squeeze(axis)


def dirichlet_equal_partition(labels: np.ndarray, num_clients: int, alpha: float, seed: int) -> list[np.ndarray]:
    """Dirichlet label skew with equal client sizes, as FedAUX uses it (docs/methods/fedaux.md §6.1 [code]).

    Draw a C×K matrix whose rows are Dir_K(α); Sinkhorn-normalise it alternately (columns, then rows; at most
    1000 iterations) so that every client receives the same number of samples; then split each class's
    shuffled index list at the rounded cumulative row fractions. Every sample is used (no flooring loss); client
    sizes equal N/K up to that rounding (within C samples; §6.1's simulation reports exactly N/K).

    Deviations, both no-ops on balanced data such as CIFAR-10 (§6.1's setting):
    - The scaling runs on the count matrix N^c·P[c,k] with column targets N/K, not on P with equal column sums,
      so client sizes are also equal when classes are unbalanced.
    - It runs in log space and floors Dirichlet entries that underflowed to 0 (tiny α) at the smallest normal
      float, so the scaling is defined for every draw.
    """
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    class_indices = [np.flatnonzero(labels == c) for c in classes]
    class_sizes = np.array([len(ix) for ix in class_indices], dtype=np.float64)
    shares = rng.dirichlet([alpha] * num_clients, size=len(classes))  # C×K, rows ~ Dir_K(α)
    log_a = np.log(np.maximum(shares, np.finfo(np.float64).tiny)) + np.log(class_sizes)[:, None]
    log_rows = np.log(class_sizes)
    log_cols = np.full(num_clients, np.log(class_sizes.sum() / num_clients))
    for _ in range(_SINKHORN_MAX_ITERS):
        log_a += (log_cols - _logsumexp(log_a, axis=0))[None, :]  # columns ...
        log_a += (log_rows - _logsumexp(log_a, axis=1))[:, None]  # ... then rows
        if np.max(np.abs(_logsumexp(log_a, axis=0) - log_cols)) < _SINKHORN_TOL:
            break
    fractions = np.exp(log_a - _logsumexp(log_a, axis=1)[:, None])  # rows sum to 1
    clients: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for row, idx in enumerate(class_indices):
        idx = rng.permutation(idx)
        cuts = np.floor(np.cumsum(fractions[row])[:-1] * len(idx) + 0.5).astype(np.int64)
        for k, piece in enumerate(np.split(idx, np.clip(cuts, 0, len(idx)))):
            clients[k].append(piece)
    return [rng.permutation(np.concatenate(p).astype(np.int64)) for p in clients]


def _effective(p: np.ndarray, quirk: bool) -> np.ndarray:
    """Category probabilities of a (possibly shrunken) proportion vector.

    Properly renormalised by default. ``quirk`` reproduces the authors' no-op ``_renormalize``
    (docs/methods/fedkp_fedpa.md §7.1 [code], §12 A15): the vector is left unnormalised and ``np.random.multinomial``
    hands the missing mass to the last remaining entry.
    """
    if quirk:
        q = p.copy()
        q[-1] = max(0.0, 1.0 - float(q[:-1].sum()))
        return q
    total = p.sum()
    if total <= 0:  # every remaining entry underflowed to 0: the limit of renormalising is uniform
        return np.full(len(p), 1.0 / len(p))
    return p / total


def _lda_pool(labels: np.ndarray, num_clients: int, samples_per_client: Optional[int],
              rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """The sample pool of size exactly M·N that Alg. 7 draws from (docs/methods/fedkp_fedpa.md §7.1, §7.2).

    Default (``samples_per_client`` unset): §7.2's rule, which also gives §7.4's "all 50,000, 100 per client"
    on CIFAR-100: trim every class to T = ⌊min_c N^c / M⌋·M samples (a seeded random subset; the digest does
    not say which images were kept), so N = C·T/M per client. With ``samples_per_client`` = N the pool is a
    seeded uniform subset of M·N samples (our choice; docs/methods/fedkp_fedpa.md always uses the balanced trim).
    """
    if samples_per_client is None:
        classes, sizes = np.unique(labels, return_counts=True)
        per_class = (int(sizes.min()) // num_clients) * num_clients
        if per_class == 0:
            raise ConfigError("partition.samples_per_client",
                              "the class-balanced pool (docs/methods/fedkp_fedpa.md §7.2) is empty: the rarest class "
                              "has "
                              f"{int(sizes.min())} samples, fewer than the {num_clients} clients; set "
                              f"partition.samples_per_client (1..{len(labels) // num_clients})")
        pool = np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:per_class] for c in classes])
        return pool.astype(np.int64), len(classes) * per_class // num_clients
    if samples_per_client * num_clients > len(labels):
        raise ConfigError("partition.samples_per_client",
                          f"{samples_per_client} per client × {num_clients} clients exceeds the {len(labels)} "
                          f"training samples; allowed: 1..{len(labels) // num_clients}")
    return np.sort(rng.permutation(len(labels))[: samples_per_client * num_clients]).astype(np.int64), \
        samples_per_client


def _class_queues(labels: np.ndarray, pool: np.ndarray, num_labels: int,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each label's pool images in a seeded random order, one flat array: label y's queue is
    ``flat[offsets[y]:offsets[y + 1]]`` and ``sizes[y]`` its length. Popping "a uniformly random remaining image"
    of y is taking the next image of its queue."""
    pool_labels = labels[pool]
    queues = [rng.permutation(pool[pool_labels == y]) for y in range(num_labels)]
    sizes = np.array([len(q) for q in queues], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    flat = np.concatenate(queues).astype(np.int64) if queues else np.zeros(0, np.int64)
    return flat, offsets, sizes


def _client_distribution(groups: list[np.ndarray], remaining: np.ndarray, alpha_top: Optional[float],
                         alpha_inner: float, rng: np.random.Generator) -> tuple[list[int], np.ndarray, dict]:
    """One client's proportions over what is left: θ_top ~ Dir(alpha_top) over the groups with labels left
    (``np.ones(1)`` for plain LDA, ``alpha_top`` None) and θ_g ~ Dir(alpha_inner) over each such group's labels
    left. Returns (ids of those groups, θ_top, {group id: [its live labels, θ_g]})."""
    live = [g[remaining[g] > 0] for g in groups]
    top_ids = [i for i, g in enumerate(live) if len(g)]
    top_p = rng.dirichlet([alpha_top] * len(top_ids)) if alpha_top is not None else np.ones(1)
    inner = {i: [live[i], rng.dirichlet([alpha_inner] * len(live[i]))] for i in top_ids}
    return top_ids, top_p, inner


def _draw_until_a_class_empties(top_ids: list[int], top_p: np.ndarray, inner: dict, quirk: bool, need: int,
                                remaining: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, bool]:
    """``need`` i.i.d. draws of g ~ Cat(θ_top), y ~ Cat(θ_g) in one batch, kept up to and including the first draw
    that empties a class (the only event that changes the distribution). Returns the candidate labels, the
    accepted draws (positions into the candidates, in draw order) and whether a class was emptied."""
    top_eff = _effective(top_p, quirk)
    cand = np.concatenate([inner[i][0] for i in top_ids])
    prob = np.concatenate([w * _effective(inner[i][1], quirk) for w, i in zip(top_eff, top_ids)])
    cdf = np.cumsum(prob)
    cdf /= cdf[-1]
    draws = np.minimum(np.searchsorted(cdf, rng.random(need), side="right"), len(cand) - 1)
    # first draw that empties a class: the (remaining)-th occurrence of that class in the batch
    order = np.argsort(draws, kind="stable")
    starts = np.searchsorted(draws[order], np.arange(len(cand)))
    rank = np.arange(need) - starts[draws[order]]
    hits = order[rank == remaining[cand][draws[order]] - 1]
    stop = int(hits.min()) + 1 if len(hits) else need
    return cand, draws[:stop], bool(len(hits))


def _pop_images(cand: np.ndarray, accepted: np.ndarray, flat_queue: np.ndarray, offsets: np.ndarray,
                taken: np.ndarray, remaining: np.ndarray) -> np.ndarray:
    """The next queued images of each drawn class, in draw order; advances ``taken``/``remaining`` in place."""
    stop = len(accepted)
    order = np.argsort(accepted, kind="stable")
    starts = np.searchsorted(accepted[order], np.arange(len(cand)))
    rank = np.arange(stop) - starts[accepted[order]]
    ys = cand[accepted[order]]
    got = np.empty(stop, dtype=np.int64)
    got[order] = flat_queue[offsets[ys] + taken[ys] + rank]
    counts = np.bincount(accepted, minlength=len(cand))
    taken[cand] += counts
    remaining[cand] -= counts
    return got


def _drop_class(top_ids: list[int], top_p: np.ndarray, inner: dict, emptied: int) -> np.ndarray:
    """Remove the emptied label from its group's θ_g, and the group from ``top_ids``/θ_top once it has no labels
    left (the vectors are not renormalised here: :func:`_effective` does that, or not, per draw). Mutates
    ``top_ids`` and ``inner``; returns θ_top."""
    for pos, i in enumerate(top_ids):
        keep = inner[i][0] != emptied
        if not keep.all():
            inner[i] = [inner[i][0][keep], inner[i][1][keep]]
            if not len(inner[i][0]):
                top_ids.pop(pos)
                top_p = np.delete(top_p, pos)
            break
    return top_p


def _nested_lda(labels: np.ndarray, pool: np.ndarray, per_client: int, num_clients: int,
                groups: list[np.ndarray], alpha_top: Optional[float], alpha_inner: float, quirk: bool,
                rng: np.random.Generator) -> list[np.ndarray]:
    """Alg. 7 and its hierarchical form, sampled without replacement from ``pool``.

    ``groups`` lists the label ids of each top-level group (one group holding every label for plain LDA, the
    fine labels of each coarse label for §7.4). Per client: θ_top ~ Dir(alpha_top) over groups with labels
    left (skipped for plain LDA), θ_g ~ Dir(alpha_inner) over each group's labels left. Each of the client's
    N samples draws g ~ Cat(θ_top), y ~ Cat(θ_g), then pops a uniformly random remaining image of class y.
    When class y empties it is dropped from θ_g (and g from θ_top once g is empty) and the vectors are
    renormalised (or not, with ``quirk``).

    The per-sample loop is vectorised exactly: a batch of i.i.d. draws is accepted up to and including the
    first draw that empties a class (the only event that changes the distribution); the rest is redrawn.
    Popping "a uniformly random remaining image" is taking the next image of a per-class random permutation.

    Steps: :func:`_class_queues` (once), then per client :func:`_client_distribution` and, until the client
    has N samples, :func:`_draw_until_a_class_empties`, :func:`_pop_images` and :func:`_drop_class`.
    """
    num_labels = int(max(int(g.max()) for g in groups)) + 1
    flat_queue, offsets, remaining = _class_queues(labels, pool, num_labels, rng)
    taken = np.zeros(num_labels, dtype=np.int64)
    out: list[np.ndarray] = []
    for _ in range(num_clients):
        top_ids, top_p, inner = _client_distribution(groups, remaining, alpha_top, alpha_inner, rng)
        picked: list[np.ndarray] = []
        need = per_client
        while need > 0:
            cand, accepted, emptied = _draw_until_a_class_empties(top_ids, top_p, inner, quirk, need, remaining, rng)
            picked.append(_pop_images(cand, accepted, flat_queue, offsets, taken, remaining))
            need -= len(accepted)
            if emptied and need > 0:  # drop the emptied class, and its group if that is now empty
                top_p = _drop_class(top_ids, top_p, inner, int(cand[accepted[-1]]))
        out.append(np.concatenate(picked))
    return out


def lda_partition(labels: np.ndarray, num_clients: int, alpha: float, seed: int,
                  samples_per_client: Optional[int] = None, quirk_compat: bool = False) -> list[np.ndarray]:
    """LDA label skew, docs/methods/fedkp_fedpa.md §7.1 (Alg. 7), with the pool of §7.2.

    For m = 1..M: p ~ Dir(α·1) over the labels that still have samples; N times draw y ~ Cat(p) and pop a
    uniformly random remaining image of class y; when class y runs out, drop it from p and renormalise.
    Every client gets exactly N samples; the pool holds exactly M·N, so late clients take what is left.
    ``quirk_compat`` keeps the authors' unnormalised vector (missing mass to the last label, §12 A15).
    """
    rng = np.random.default_rng(seed)
    pool, per_client = _lda_pool(labels, num_clients, samples_per_client, rng)
    return _nested_lda(labels, pool, per_client, num_clients, [np.unique(labels[pool])], None, alpha, quirk_compat,
                       rng)


def fine_to_coarse(labels: np.ndarray, coarse_labels: np.ndarray) -> dict[int, int]:
    """The coarse label of each fine label; raises ConfigError when the coarse labels are not a function."""
    if coarse_labels is None:
        raise ConfigError("partition.kind", "hierarchical_lda needs a dataset with coarse labels (e.g. CIFAR-100 "
                                            "superclasses); this dataset has none; allowed here: "
                                            + ", ".join(k for k in PARTITIONS if k != "hierarchical_lda"))
    coarse_labels = np.asarray(coarse_labels)
    if len(coarse_labels) != len(labels):
        raise ConfigError("partition.kind", f"hierarchical_lda: {len(coarse_labels)} coarse labels for "
                                            f"{len(labels)} samples")
    pairs = np.unique(np.stack([labels, coarse_labels], axis=1), axis=0)
    fines, counts = np.unique(pairs[:, 0], return_counts=True)
    if np.any(counts > 1):
        raise ConfigError("partition.kind", f"hierarchical_lda: fine label {int(fines[counts > 1][0])} appears "
                                            f"under several coarse labels; the coarse labels must be a function "
                                            f"of the fine labels")
    return {int(f): int(c) for f, c in pairs}


def hierarchical_lda_partition(labels: np.ndarray, coarse_labels: np.ndarray, num_clients: int, alpha: float,
                               beta: float, seed: int, samples_per_client: Optional[int] = None,
                               quirk_compat: bool = False) -> list[np.ndarray]:
    """Hierarchical LDA over coarse/fine labels (Reddi et al.), docs/methods/fedkp_fedpa.md §7.4.

    Per client: θ_r ~ Dir(α) over the coarse labels with samples left; for each of them θ_c ~ Dir(β) over its
    fine labels with samples left. Each of the N samples draws c ~ Cat(θ_r), f ~ Cat(θ_c) and pops a random
    remaining image of class f. An emptied fine label leaves θ_c; a coarse label with no fine labels left
    leaves θ_r; both are renormalised (``quirk_compat``: left unnormalised as in the authors' code). The pool
    and N follow §7.2's rule (all 50,000 CIFAR-100 images, 100 per client, for M = 500).
    """
    mapping = fine_to_coarse(labels, coarse_labels)
    rng = np.random.default_rng(seed)
    pool, per_client = _lda_pool(labels, num_clients, samples_per_client, rng)
    present = set(np.unique(labels[pool]).tolist())
    coarse_ids = sorted(set(mapping.values()))
    groups = [np.array(sorted(f for f, c in mapping.items() if c == g and f in present), dtype=np.int64)
              for g in coarse_ids]
    groups = [g for g in groups if len(g)]
    return _nested_lda(labels, pool, per_client, num_clients, groups, alpha, beta, quirk_compat, rng)


def classes_per_client_partition(labels: np.ndarray, num_clients: int, k: int, seed: int) -> list[np.ndarray]:
    """Exactly k distinct classes per client: MNFL's Non-IID_1 (docs/methods/mnfl.md §4, k = 2; §10 #20).

    §10 #20 recommends McMahan-style shards, "each client 2 shards with distinct labels". McMahan's
    sort-and-cut shards can straddle two classes or give a client two shards of one class, so we cut shards
    within classes: the K·k (client, class) slots walk cyclically through a seeded class permutation (k
    consecutive slots are distinct because k ≤ C; every class is used by ⌊K·k/C⌋ or ⌈K·k/C⌉ clients), a seeded
    client permutation decides who gets which k-tuple, and each class's shuffled samples are split into equal
    shards, one per client holding it. With 10 balanced classes and 20 clients this is exactly McMahan's 2K equal
    shards, each class shared by 4 clients. Classes left unused when K·k < C are dropped.
    """
    classes = np.unique(labels)
    if k > len(classes):
        raise ConfigError("partition.classes_per_client",
                          f"{k} classes per client is impossible: the dataset has {len(classes)} classes; "
                          f"allowed: 1..{len(classes)}")
    rng = np.random.default_rng(seed)
    class_order = rng.permutation(len(classes))
    slots = class_order[np.arange(num_clients * k) % len(classes)].reshape(num_clients, k)
    slots = slots[rng.permutation(num_clients)]
    clients: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for ci, c in enumerate(classes):
        holders = np.flatnonzero((slots == ci).any(axis=1))
        if not len(holders):
            continue
        idx = rng.permutation(np.flatnonzero(labels == c))
        if len(holders) > len(idx):
            raise ConfigError("clients.num_clients",
                              f"class {c} has {len(idx)} samples but {len(holders)} clients must hold it "
                              f"(classes_per_client={k}); use at most {len(classes) * len(idx) // k} clients "
                              f"or fewer classes per client")
        for client, shard in zip(holders, np.array_split(idx, len(holders))):
            clients[client].append(shard)
    return [rng.permutation(np.concatenate(p).astype(np.int64)) for p in clients]


def unequal_classes_partition(labels: np.ndarray, num_clients: int, alpha: float, seed: int,
                              min_per_class: int = 5) -> list[np.ndarray]:
    """Every class on every client, in counts that differ between clients: MNFL's Non-IID_2 (docs/methods/mnfl.md §4).

    The paper's generator (Appendix B) is missing; this follows the digest's resolution (§10 #19): per class,
    give each client ``min_per_class`` samples (5), then split the rest of the class over clients by
    p ~ Dir_K(α) (α = 0.5 recommended), cutting at the rounded cumulative shares. All samples are used (the
    digest's #23 pools and splits everything); client sizes vary.
    """
    rng = np.random.default_rng(seed)
    clients: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        reserved = num_clients * min_per_class
        if reserved > len(idx):
            raise ConfigError("partition.min_per_class",
                              f"class {c} has {len(idx)} samples, fewer than {min_per_class} for each of "
                              f"{num_clients} clients; allowed: 0..{len(idx) // num_clients}")
        base, rest = idx[:reserved].reshape(num_clients, min_per_class), idx[reserved:]
        shares = rng.dirichlet([alpha] * num_clients)
        cuts = np.floor(np.cumsum(shares)[:-1] * len(rest) + 0.5).astype(np.int64)
        for k, piece in enumerate(np.split(rest, np.clip(cuts, 0, len(rest)))):
            clients[k].append(base[k])
            clients[k].append(piece)
    return [rng.permutation(np.concatenate(p).astype(np.int64)) for p in clients]


def natural_partition(groups: Optional[np.ndarray], num_clients: int, seed: int) -> list[np.ndarray]:
    """One client per natural group (LEAF writers: EMNIST-62 / FEMNIST, docs/methods/fedkp_fedpa.md §7.3).

    K = number of groups: client i is the i-th group in sorted group-id order (seed-independent). K < groups:
    a seeded uniform sample of K groups without replacement (§8.3 / A10 run all ≈3,550 writers; subsampling is
    our addition for cheaper runs), kept in sorted group-id order. K > groups is an error. Indices stay in
    dataset order.
    """
    if groups is None:
        raise ConfigError("partition.kind", "natural needs a dataset with natural groups (e.g. LEAF writers); this "
                                            "dataset has none; allowed here: "
                                            + ", ".join(k for k in PARTITIONS if k != "natural"))
    groups = np.asarray(groups)
    ids, inverse = np.unique(groups, return_inverse=True)
    if num_clients > len(ids):
        raise ConfigError("clients.num_clients", f"natural partition has one client per group: at most "
                                                 f"{len(ids)} clients (the dataset's groups), got {num_clients}")
    chosen = np.arange(len(ids))
    if num_clients < len(ids):
        chosen = np.sort(np.random.default_rng(seed).choice(len(ids), size=num_clients, replace=False))
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(ids) + 1))
    return [order[bounds[g]:bounds[g + 1]].astype(np.int64) for g in chosen]


# Each entry: (labels, cfg: PartitionConfig, num_clients, seed, groups, coarse_labels) -> one index array per client.
# ``groups`` (natural client id per sample) and ``coarse_labels`` (e.g. CIFAR-100 superclasses) are None
# when the dataset has none.
PARTITIONS: dict[str, Callable] = {
    "dirichlet": lambda labels, cfg, num_clients, seed, groups, coarse: (
        dirichlet_equal_partition(labels, num_clients, cfg.alpha, seed) if getattr(cfg, "equal_sizes", False)
        else dirichlet_partition(labels, num_clients, cfg.alpha, seed, cfg.min_share)),
    "iid": lambda labels, cfg, num_clients, seed, groups, coarse: iid_partition(labels, num_clients, seed),
    "lda": lambda labels, cfg, num_clients, seed, groups, coarse: lda_partition(
        labels, num_clients, cfg.alpha, seed, cfg.samples_per_client, cfg.lda_quirk_compat),
    "hierarchical_lda": lambda labels, cfg, num_clients, seed, groups, coarse: hierarchical_lda_partition(
        labels, coarse, num_clients, cfg.alpha, cfg.beta, seed, cfg.samples_per_client, cfg.lda_quirk_compat),
    "classes_per_client": lambda labels, cfg, num_clients, seed, groups, coarse: classes_per_client_partition(
        labels, num_clients, _required_k(cfg), seed),
    "unequal_classes": lambda labels, cfg, num_clients, seed, groups, coarse: unequal_classes_partition(
        labels, num_clients, cfg.alpha, seed, cfg.min_per_class),
    "natural": lambda labels, cfg, num_clients, seed, groups, coarse: natural_partition(groups, num_clients, seed),
}


def _required_k(cfg) -> int:
    if cfg.classes_per_client is None:
        raise ConfigError("partition.classes_per_client", "required when partition.kind=classes_per_client: "
                                                          "an integer k >= 1, at most the number of classes")
    return cfg.classes_per_client


def partition_clients(labels: np.ndarray, cfg, num_clients: int, seed: int, groups: Optional[np.ndarray] = None,
                      coarse_labels: Optional[np.ndarray] = None) -> list[np.ndarray]:
    if cfg.kind not in PARTITIONS:
        raise ConfigError("partition.kind", f"unknown partition {cfg.kind!r}{did_you_mean(cfg.kind, PARTITIONS)}; "
                                            f"allowed: {', '.join(PARTITIONS)}")
    if num_clients > len(labels):
        raise ConfigError("clients.num_clients", f"{num_clients} clients but only {len(labels)} training samples")
    return PARTITIONS[cfg.kind](labels, cfg, num_clients, seed, groups, coarse_labels)


def class_counts(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
    """The client × class count matrix N_k^c."""
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])
