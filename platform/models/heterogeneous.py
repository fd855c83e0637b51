"""Client → architecture assignment for model-heterogeneous runs (MNFL, FedAUX "mixed", single-image hetero).

MNFL's reference uses contiguous blocks: with 20 clients and [LeNet, AlexNet, ResNet-18, ShuffleNetV2],
clients 0–4 are LeNet, 5–9 AlexNet, 10–14 ResNet-18 and 15–19 ShuffleNetV2 (spec/mnfl.md §4, §10 item 25).
When the clients do not split evenly, the **last** blocks get one client more: the single-image paper's 20
clients over [ResNet-8, WRN-16-4, ResNet-20] are 6/7/7 (spec/single_image.md §4.6). Which data partition a
client gets is the partitioner's business; MNFL §10 item 25 recommends a seeded random one, so architecture
and data distribution stay uncorrelated.
"""
from __future__ import annotations

import operator
from typing import Sequence

from platform.errors import ConfigError
from platform.models.base import MODELS, allowed

ARCHITECTURES_FIELD = "model.architectures"


def assign_architectures(spec: Sequence[str] | str, num_clients: int,
                         field: str = ARCHITECTURES_FIELD) -> list[str]:
    """The model name of each client ``0 .. num_clients - 1``, in contiguous blocks, one block per entry of
    ``spec`` (in order). Block sizes differ by at most one; the later blocks take the remainder.

    A name may appear more than once in ``spec`` to give it more blocks. Raises :class:`ConfigError` (``field``)
    for an empty spec, a name not in :data:`MODELS`, or fewer clients than blocks (an architecture with no
    client is almost certainly a config mistake).
    """
    names = [spec] if isinstance(spec, str) else list(spec)
    if not names:
        raise ConfigError(field, f"give at least one architecture; allowed: {allowed(MODELS)}")
    for name in names:
        if not isinstance(name, str) or name not in MODELS:
            raise ConfigError(field, f"unknown model {name!r}; allowed: {allowed(MODELS)}")
    try:
        if isinstance(num_clients, bool):
            raise TypeError
        n = operator.index(num_clients)
    except TypeError:
        raise ConfigError(field, f"num_clients must be an int, got {num_clients!r}") from None
    k = len(names)
    if n < k:
        raise ConfigError(field, f"{k} architecture blocks need at least {k} clients, got {n}")
    base, extra = divmod(n, k)
    sizes = [base + (1 if i >= k - extra else 0) for i in range(k)]
    return [name for name, size in zip(names, sizes) for _ in range(size)]
