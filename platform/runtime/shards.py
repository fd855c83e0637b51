"""Which samples each virtual client holds: its training indices, and its validation and test indices when the
partition asks for them, in a compact layout the client actors share through the object store."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np


class ClientShards:
    """Every client's sample indices as two arrays, whatever the number of clients (CSR layout): client
    ``clients[i]`` (``i`` itself when ``clients`` is None) owns ``indices[offsets[i]:offsets[i + 1]]``.

    One object per federation, put in the object store once and read zero-copy by every client actor, so an
    idle virtual client costs its indices (8 bytes a sample) and no Python object of its own.
    """

    def __init__(self, indices: np.ndarray, offsets: np.ndarray, clients: Optional[np.ndarray] = None):
        self.indices, self.offsets, self.clients = indices, offsets, clients

    @classmethod
    def from_parts(cls, parts: Sequence[np.ndarray], clients: Optional[Sequence[int]] = None) -> "ClientShards":
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(p) for p in parts])
        indices = (np.concatenate([np.asarray(p, dtype=np.int64) for p in parts]) if len(parts)
                   else np.zeros(0, dtype=np.int64))
        return cls(indices, offsets, None if clients is None else np.asarray(clients, dtype=np.int64))

    @classmethod
    def from_mapping(cls, shards: Mapping[int, np.ndarray]) -> "ClientShards":
        keys = sorted(int(k) for k in shards)
        return cls.from_parts([shards[k] for k in keys], keys)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _position(self, k: int) -> int:
        if self.clients is None:
            if not 0 <= k < len(self):
                raise KeyError(k)
            return k
        i = int(np.searchsorted(self.clients, k))
        if i >= len(self.clients) or self.clients[i] != k:
            raise KeyError(k)
        return i

    def bounds(self, k: int) -> tuple[int, int]:
        i = self._position(int(k))
        return int(self.offsets[i]), int(self.offsets[i + 1])

    def __getitem__(self, k: int) -> np.ndarray:
        start, end = self.bounds(k)
        return self.indices[start:end]

    def keys(self) -> np.ndarray:
        return np.arange(len(self), dtype=np.int64) if self.clients is None else self.clients


@dataclass
class ClientSplits:
    """Every client's training indices, and its validation and test indices when the partition asks for them
    (``partition.val_fraction`` / ``test_fraction``), as :class:`ClientShards` (None when the split is empty)."""

    train: ClientShards
    val: Optional[ClientShards] = None
    test: Optional[ClientShards] = None


__all__ = ["ClientShards", "ClientSplits"]
