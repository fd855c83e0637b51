"""Client → architecture assignment for model-heterogeneous runs (MNFL, FedAUX "mixed", single-image hetero).

MNFL's reference uses contiguous blocks: with 20 clients and [LeNet, AlexNet, ResNet-18, ShuffleNetV2],
clients 0–4 are LeNet, 5–9 AlexNet, 10–14 ResNet-18 and 15–19 ShuffleNetV2 (docs/methods/mnfl.md §4,
§10 item 25). When the clients do not split evenly, the **last** blocks get one client more: the single-image paper's
20 clients over [ResNet-8, WRN-16-4, ResNet-20] are 6/7/7 (docs/methods/single_image.md §4.6). Which data partition a
client gets is the partitioner's business; MNFL §10 item 25 recommends a seeded random one, so architecture
and data distribution stay uncorrelated.
"""
from __future__ import annotations

import operator
from typing import Sequence

import numpy as np

from algorithms.errors import ConfigError
from algorithms.models.base import MODELS, allowed

ARCHITECTURES_FIELD = "model.architectures"


def architecture_shares(spec: Sequence, field: str = ARCHITECTURES_FIELD) -> list[tuple[str, float]]:
    """``model.architectures`` as ``[(name, share), ...]``: a name means share 1; ``{name, share}`` gives one.

    Raises :class:`ConfigError` (``field``) for an empty list, an unknown model, a share that is not > 0 or an
    entry of another form."""
    names = [spec] if isinstance(spec, str) else list(spec)
    if not names:
        raise ConfigError(field, f"give at least one architecture; allowed: {allowed(MODELS)}")
    out = []
    for i, entry in enumerate(names):
        if isinstance(entry, dict):
            unknown = sorted(set(entry) - {"name", "share"})
            if unknown or "name" not in entry:
                raise ConfigError(f"{field}[{i}]", f"a mapping needs name and optionally share (> 0), got keys "
                                                   f"{', '.join(map(str, entry))}")
            name, share = entry["name"], entry.get("share", 1.0)
        else:
            name, share = entry, 1.0
        if not isinstance(name, str) or name not in MODELS:
            raise ConfigError(field, f"unknown model {name!r}; allowed: {allowed(MODELS)}")
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not share > 0:
            raise ConfigError(f"{field}[{i}].share", f"must be a number > 0, got {share!r}")
        out.append((name, float(share)))
    return out


def assign_architectures(spec: Sequence | str, num_clients: int, seed: int | None = None,
                         field: str = ARCHITECTURES_FIELD) -> list[str]:
    """The model name of each client ``0 .. num_clients - 1``.

    Block sizes follow the shares (largest remainder; ties go to the later blocks, so equal shares give blocks
    that differ by at most one with the later ones larger, as the single-image paper's 6/7/7). With ``seed`` None
    the blocks are contiguous client ids (the MNFL reference code); with a seed the clients are first permuted
    by it, so architecture and client id (and with it, for some partitions, the data) are uncorrelated.

    A name may appear more than once to give it more blocks. Raises :class:`ConfigError` (``field``) for an
    invalid entry (see :func:`architecture_shares`) or fewer clients than blocks (an architecture with no client
    is almost certainly a config mistake).
    """
    entries = architecture_shares(spec, field)
    try:
        if isinstance(num_clients, bool):
            raise TypeError
        n = operator.index(num_clients)
    except TypeError:
        raise ConfigError(field, f"num_clients must be an int, got {num_clients!r}") from None
    k = len(entries)
    if n < k:
        raise ConfigError(field, f"{k} architecture blocks need at least {k} clients, got {n}")
    shares = np.array([share for _, share in entries], dtype=float)
    exact = shares / shares.sum() * n
    sizes = np.floor(exact + 1e-9).astype(int)
    remainder = exact - sizes
    for i in sorted(range(k), key=lambda j: (-round(remainder[j], 9), -j))[: n - int(sizes.sum())]:
        sizes[i] += 1
    if (sizes == 0).any():
        empty = entries[int(np.flatnonzero(sizes == 0)[0])][0]
        raise ConfigError(field, f"architecture {empty!r} gets no client of {n} with these shares")
    blocks = [name for (name, _), size in zip(entries, sizes) for _ in range(int(size))]
    if seed is None:
        return blocks
    order = np.random.default_rng(seed).permutation(n)
    assigned = [""] * n
    for position, client in enumerate(order):
        assigned[int(client)] = blocks[position]
    return assigned
