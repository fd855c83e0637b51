"""Splits of index sets into disjoint named subsets (train / val / test): each client's own split
(:func:`split_clients`, :func:`split_fractions`), the server's validation split of the training pool
(:func:`server_validation_split`), both stratified by label through :func:`stratified_split` and its exact
rounding of the class × subset table (largest remainder, max flow). Seeded and deterministic.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from platform.data.partition import partition_clients
from platform.errors import ConfigError


def _split_spec(fractions) -> tuple[list[str], list[float]]:
    """Names and fractions of a split: a mapping name → fraction, or 2 (train, test) / 3 (train, val, test)
    fractions; all ≥ 0 and summing to 1, else one ConfigError naming ``partition``."""
    if isinstance(fractions, dict):
        names, values = list(fractions), [float(v) for v in fractions.values()]
    else:
        values = [float(v) for v in fractions]
        names = {2: ["train", "test"], 3: ["train", "val", "test"]}.get(len(values))
        if names is None:
            raise ConfigError("partition", f"split fractions: give 2 (train, test), 3 (train, val, test) or a "
                                           f"mapping name → fraction, got {fractions!r}")
    if any(not v >= 0 for v in values) or abs(sum(values) - 1.0) > 1e-9:
        raise ConfigError("partition", f"split fractions must be >= 0 and sum to 1, got {fractions!r}")
    return names, values


def _snap(x: np.ndarray) -> np.ndarray:
    """Real targets with float noise removed: values within 1e-12 (relative) of an integer become that integer."""
    near = np.round(x)
    return np.where(np.abs(x - near) <= 1e-12 * np.maximum(1.0, np.abs(x)), near, x)


def _subset_sizes(n: int, f: np.ndarray) -> tuple[np.ndarray, bool]:
    """Target subset sizes: the largest-remainder apportionment of n by fractions f (ties to the earlier subset);
    then, when n is at least the number of positive fractions, each positive-fraction subset left at 0 gets 1,
    taken from the subset furthest above its quota f·n (ties: the larger, then the earlier one).
    Returns (sizes, whether that min-one rule changed anything)."""
    quota = _snap(f * n)
    sizes = np.floor(quota).astype(np.int64)
    rem = quota - sizes
    sizes[np.lexsort((np.arange(len(f)), f == 0, -rem))[: n - int(sizes.sum())]] += 1
    raised = False
    if n >= int(np.count_nonzero(f > 0)):
        for s in np.flatnonzero((f > 0) & (sizes == 0)):
            donors = np.flatnonzero(sizes >= 2)
            d = donors[np.lexsort((donors, -sizes[donors], quota[donors] - sizes[donors]))[0]]
            sizes[d] -= 1
            sizes[s] += 1
            raised = True
    assert int(sizes.sum()) == n
    return sizes, raised


def _augment(extra: np.ndarray, allowed: np.ndarray, row_left: np.ndarray, col_slack: np.ndarray) -> None:
    """Max flow on the bipartite class → subset graph, in place: place the classes' ``row_left`` units, each on an
    allowed subset the class has no unit on yet (``extra[c, s]`` ∈ {0, 1}), at most ``col_slack[s]`` more units
    per subset, along augmenting paths (classes shift their unit from one subset to the next, breadth first).
    On return no further unit can be placed. ``row_left`` and ``col_slack`` are decremented."""
    for c in range(len(row_left)):
        while row_left[c] > 0:
            parent: dict[int, Optional[tuple[int, int]]] = {
                int(s): None for s in np.flatnonzero(allowed[c] & (extra[c] == 0))}
            frontier, end = list(parent), None
            while frontier and end is None:
                nxt = []
                for s in frontier:
                    if col_slack[s] > 0:
                        end = s
                        break
                    movable = (extra[:, s] == 1)[:, None] & allowed & (extra == 0)  # class could move s -> t
                    for t in np.flatnonzero(movable.any(axis=0)):
                        if int(t) not in parent:
                            parent[int(t)] = (s, int(np.argmax(movable[:, t])))
                            nxt.append(int(t))
                frontier = nxt
            if end is None:
                break  # no augmenting path from this class
            col_slack[end] -= 1
            t = end
            while parent[t] is not None:
                s, mover = parent[t]
                extra[mover, t], extra[mover, s] = 1, 0
                t = s
            extra[c, t] = 1
            row_left[c] -= 1


def _round_table(base: np.ndarray, allowed: np.ndarray, priority: np.ndarray, counts: np.ndarray, lo: np.ndarray,
                 pref: np.ndarray, hi: np.ndarray) -> Optional[np.ndarray]:
    """An integer class × subset table T = base + E, E ∈ {0, 1} and 0 where not ``allowed`` (so each entry is the
    floor or the ceiling of its real target), with row c summing to counts[c] and column s to a value in
    [lo[s], hi[s]], equal to ``pref`` if any such table allows it; None if no such table exists.

    Exact (max flow, raising the column capacities lo → pref → hi in stages); within a stage units go first to
    the entries of highest ``priority`` (the fractional parts: largest remainder), ties to the earlier class,
    then subset, and augmenting paths place the rest."""
    row_left = counts - base.sum(axis=1)
    col_base = base.sum(axis=0)
    if np.any(row_left < 0) or np.any(row_left > allowed.sum(axis=1)) or np.any(col_base > hi):
        return None
    extra = np.zeros_like(base)
    ranked = [divmod(int(i), base.shape[1]) for i in np.lexsort((np.arange(base.size), -priority.ravel()))
              if allowed.flat[int(i)]]
    for stage, cap in enumerate((lo, pref, hi)):
        col_slack = np.maximum(cap - col_base - extra.sum(axis=0), 0)
        for c, s in ranked:
            if row_left[c] > 0 and col_slack[s] > 0 and not extra[c, s]:
                extra[c, s] = 1
                row_left[c] -= 1
                col_slack[s] -= 1
        _augment(extra, allowed, row_left, col_slack)
        if stage == 0 and np.any(col_base + extra.sum(axis=0) < lo):
            return None  # even the lower bounds cannot all be met
        if not row_left.any():
            return base + extra
    return None


def stratified_split(indices: np.ndarray, labels: np.ndarray, fractions: dict[str, float],
                     rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Split ``indices`` (positions into ``labels``) into disjoint named subsets by ``fractions``, stratified by
    ``labels[indices]``.

    ``fractions``: name → fraction, ≥ 0 and summing to 1 (or 2 / 3 fractions as in :func:`split_clients`);
    otherwise ConfigError("partition", ...). With n = len(indices), n_c the count of class c among them and
    f_s a subset's fraction, it guarantees:

    - Disjoint subsets whose union is exactly ``indices``; each int64 and sorted ascending (the result depends
      only on membership). ``rng`` draws one permutation per class, in sorted class order: deterministic for a
      given rng state.
    - Sizes: targets are the largest-remainder apportionment of n, each ⌊f_s·n⌋ or ⌈f_s·n⌉ (ties to the
      earlier subset). Min-one rule: when n ≥ the number of positive fractions, every subset with f_s > 0 gets
      at least one sample; a subset whose target is 0 takes one from the subset furthest above its quota. That
      only happens on tiny clients (some f_s·n < 1) and can push a donor more than 1 below f_s·n.
    - Per class: without the min-one rule, each class count is ⌊f_s·n_c⌋ or ⌈f_s·n_c⌉ (always achievable) and
      the subset sizes equal the largest-remainder targets whenever such a table reaches them (always with two
      subsets), otherwise other values in ⌊f_s·n⌋..⌈f_s·n⌉. With the min-one rule the sizes are exactly the
      targets, with class counts ⌊f_s·n_c⌋ or ⌈f_s·n_c⌉ if possible, else ⌊n_c·size_s/n⌋ or ⌈n_c·size_s/n⌉.
      Extra units (ceilings) go to the largest fractional parts first.

    Within each class the shuffled indices are cut at the cumulative class counts of the table.
    """
    names, values = _split_spec(fractions)
    f = np.asarray(values, dtype=np.float64)
    f = f / f.sum()
    indices = np.asarray(indices, dtype=np.int64)
    n = len(indices)
    if n == 0:
        return {name: np.zeros(0, np.int64) for name in names}
    classes, inverse, n_c = np.unique(np.asarray(labels)[indices], return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    sizes, raised = _subset_sizes(n, f)
    real = _snap(n_c[:, None] * f[None, :])
    base = np.floor(real).astype(np.int64)
    quota = _snap(f * n)
    lo, hi = (sizes, sizes) if raised else (np.floor(quota).astype(np.int64), np.ceil(quota).astype(np.int64))
    table = _round_table(base, real > base, real - base, n_c, lo, sizes, hi)
    if table is None:  # proportional to the targets: integer margins, so such a rounding always exists
        num = n_c[:, None] * sizes[None, :]
        table = _round_table(num // n, num % n > 0, (num % n) / n, n_c, sizes, sizes, sizes)
        assert table is not None, "stratified_split: a proportional rounding always exists"
    order = np.argsort(inverse, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(n_c)])
    pieces: list[list[np.ndarray]] = [[] for _ in names]
    for c in range(len(classes)):
        idx = rng.permutation(indices[order[bounds[c]:bounds[c + 1]]])
        for s, piece in enumerate(np.split(idx, np.cumsum(table[c])[:-1])):
            pieces[s].append(piece)
    return {name: np.sort(np.concatenate(p)).astype(np.int64) for name, p in zip(names, pieces)}


def split_clients(parts: list[np.ndarray], fractions, seed: int,
                  labels: Optional[np.ndarray] = None) -> list[dict[str, np.ndarray]]:
    """Split every client's indices into disjoint named subsets, e.g. MNFL's 75/25 train/test (docs/methods/mnfl.md
    §4).

    ``fractions``: a mapping name → fraction, or a sequence of 2 (train, test) or 3 (train, val, test)
    fractions; they must be ≥ 0 and sum to 1. One ``np.random.default_rng(seed)`` serves all clients in order.

    Without ``labels``: each client's indices are shuffled (seeded) and cut at the rounded cumulative fractions,
    so every index lands in exactly one subset and sizes are within one of fraction·n; subsets keep the shuffled
    order. With ``labels`` (indexed by the clients' indices): each client is split by :func:`stratified_split`
    (stratified by label, sizes by largest remainder, subsets sorted ascending).
    """
    names, values = _split_spec(fractions)
    rng = np.random.default_rng(seed)
    if labels is not None:
        spec = dict(zip(names, values))
        return [stratified_split(np.asarray(idx, dtype=np.int64), labels, spec, rng) for idx in parts]
    cumulative = np.cumsum(values)[:-1]
    out = []
    for idx in parts:
        idx = rng.permutation(np.asarray(idx, dtype=np.int64))
        cuts = np.floor(cumulative * len(idx) + 0.5).astype(np.int64)
        out.append(dict(zip(names, np.split(idx, np.clip(cuts, 0, len(idx))))))
    return out


def server_validation_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train_indices, val_indices) of the server's whole training pool, stratified by label and seeded.

    The validation split is carved out of the training pool (``labels`` are the training labels) and never
    out of the test set, which stays held out for the final evaluation. ``fraction`` = 0 gives
    (arange(n), an empty int64 array) exactly; otherwise :func:`stratified_split` with
    {"train": 1 − fraction, "val": fraction} and ``np.random.default_rng(seed)`` (each class's validation count
    is ⌊fraction·n_c⌋ or ⌈fraction·n_c⌉, the total ⌊fraction·n⌋ or ⌈fraction·n⌉, and at least one sample when
    n ≥ 2). Both arrays are sorted. Requires 0 ≤ fraction < 1, else ConfigError("server.val_fraction", ...).
    """
    try:
        fraction = float(fraction)
    except (TypeError, ValueError):
        raise ConfigError("server.val_fraction", f"must be a number in [0, 1), got {fraction!r}") from None
    if not 0.0 <= fraction < 1.0:
        raise ConfigError("server.val_fraction", f"must be in [0, 1) so the server keeps training data; "
                                                 f"got {fraction!r}")
    labels = np.asarray(labels)
    n = len(labels)
    if fraction == 0.0:
        return np.arange(n, dtype=np.int64), np.zeros(0, dtype=np.int64)
    parts = stratified_split(np.arange(n, dtype=np.int64), labels, {"train": 1.0 - fraction, "val": fraction},
                             np.random.default_rng(seed))
    return parts["train"], parts["val"]


def server_validation_from(server_cfg, train_labels: np.ndarray, test_labels: np.ndarray,
                           seed: int) -> Optional[tuple[str, np.ndarray, np.ndarray]]:
    """The server's validation split as ``server`` asks for it: ``(split, keep, held)``, the split it is carved from
    ("train" or "test", ``server.val_source``) and :func:`server_validation_split`'s indices of that split; None
    when ``server.val_fraction`` is 0. The run's shared data and the dry run's data plan both take it here."""
    if server_cfg.val_fraction <= 0:
        return None
    source = server_cfg.val_source
    keep, held = server_validation_split(test_labels if source == "test" else train_labels, server_cfg.val_fraction,
                                         seed)
    return source, keep, held


def split_fractions(cfg) -> dict[str, float]:
    """The per-client split a PartitionConfig asks for (docs/methods/mnfl.md §4: 75/25 train/test).

    train = 1 − val_fraction − test_fraction; pass the result to :func:`split_clients`.
    """
    return {"train": 1.0 - cfg.val_fraction - cfg.test_fraction, "val": cfg.val_fraction, "test": cfg.test_fraction}


def client_index_splits(labels: np.ndarray, cfg, num_clients: int, partition_seed: int, split_seed: int,
                        groups: Optional[np.ndarray] = None, coarse_labels: Optional[np.ndarray] = None
                        ) -> tuple[list, Optional[list], Optional[list]]:
    """Every client's training indices (the partition of ``labels``) and, with ``cfg.val_fraction`` or
    ``test_fraction`` > 0, its own validation and test indices (None where the fraction is 0): each client's data
    split by :func:`split_clients`, stratified by label, seeded by ``split_seed``. The run
    (``platform.runtime.federation.client_splits``) and the dry run's data plan both call this."""
    parts = partition_clients(labels, cfg, num_clients, partition_seed, groups, coarse_labels)
    if cfg.val_fraction == 0 and cfg.test_fraction == 0:
        return parts, None, None
    split = split_clients(parts, split_fractions(cfg), split_seed, labels=labels)
    return ([s["train"] for s in split], [s["val"] for s in split] if cfg.val_fraction > 0 else None,
            [s["test"] for s in split] if cfg.test_fraction > 0 else None)
