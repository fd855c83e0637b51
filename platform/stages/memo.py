"""The platform's backing of ``ClientContext.memo`` / ``ServerContext.memo``: one-shot work of a method cached
across trials in the stage cache (:mod:`platform.stages.cache`).

A memo entry's key is the method's own ``key`` (the hyperparameters the result depends on, e.g. FedAUX's λ),
plus everything the context's data depend on: dataset, partition, public data, models, pre-training, the
partition and initialisation seeds, the server's validation split and, on a client, the client id. Its code
version is the source of the method's modules, so editing the method invalidates its entries. A sweep over ε
therefore re-solves nothing: only λ (or the data) changes the key.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Optional

from algorithms.base import compute_now
from platform.stages.cache import Stage, code_version

_DATA_SECTIONS = ("dataset.", "partition.", "public.", "model.", "pretrain.")


def memo_fields(config, client_id: Optional[int]) -> dict[str, Any]:
    """The config values a context's data depend on (the upstream part of every memo key)."""
    fields = {k: v for k, v in config.flat().items() if k.startswith(_DATA_SECTIONS)}
    fields.update({"seed": config.seed, "seeds.partition": config.stream_seed("partition"),
                   "seeds.split": config.split_seed(),
                   "seeds.init": config.seeds.init,
                   "server.val_fraction": config.server.val_fraction, "server.val_source": config.server.val_source,
                   "context": "server" if client_id is None else f"client {int(client_id)}"})
    return fields


class Memos:
    """Makes the ``memo`` of each context of one actor. The code version (a hash of the method's source files) and
    the config's upstream fields are computed once here, not per client and round: ``for_context`` is cheap."""

    def __init__(self, cache, config, algorithm_cls):
        self.cache = cache
        if cache is None:
            return

        self.version = code_version(*[cls for cls in algorithm_cls.__mro__
                                      if cls.__module__.startswith("algorithms.") or cls is algorithm_cls])
        self.upstream = memo_fields(config, None)
        self.prefix = re.sub(r"[^A-Za-z0-9_.-]+", "_", getattr(algorithm_cls, "name", algorithm_cls.__name__))

    def for_context(self, client_id: Optional[int] = None) -> Callable:
        """``memo(name, key, compute)`` for the server (``client_id`` None) or one client; plain computation
        without a cache."""
        if self.cache is None:
            return compute_now

        upstream = {**self.upstream, "context": "server" if client_id is None else f"client {int(client_id)}"}

        def memo(name: str, key: dict, compute: Callable[[], Any]) -> Any:
            flat = {**upstream, **{f"key.{k}": v for k, v in key.items()}}
            stage = Stage(f"{self.prefix}.{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}", self.version, tuple(sorted(flat)))
            value, _ = self.cache.get_or_compute(stage, flat, compute)
            return value

        return memo


__all__ = ["Memos", "memo_fields"]
