"""Content-addressed stage cache: one-shot work computed once per distinct upstream config, shared by trials.

A *stage* is expensive work whose result depends only on some config fields: FedKP's one-round client
training, FedED's client stage, FedAUX's pre-training and scores. Its key is the SHA-256 of the stage name,
the stage's code version (:func:`code_version`: a hash of the source of the modules that compute it, so editing
that code invalidates old entries without anyone remembering to bump a number) and exactly the config fields it
reads (canonical JSON). Entries are written to a
temporary file and renamed into place, so a reader sees a whole entry or none; a per-key file lock makes a
second trial that wants the same entry wait for the first instead of computing it again. Each entry's SHA-256 is
recorded beside it (``<key>.json``, written before the entry) and checked on every read: an entry that does not
match (flipped bytes, truncated, empty) or does not load is reported with its path on stderr, moved aside
(``<key>.pt.corrupt-<time>``) and computed again; it is never used.

The cache root must be visible to every node that runs trials (a shared file system on a cluster);
by default it is ``<results home>/cache``.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import io
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

CACHE_FORMAT = 2  # bump when the on-disk layout changes (2: a checksum per entry)


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # 1.0 and 1 are the same config value
    return value


def stage_key(stage: str, version: str, fields: dict[str, Any]) -> str:
    payload = json.dumps({"stage": stage, "version": version, "format": CACHE_FORMAT, "fields": _canonical(fields)},
                         sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def code_version(*objects: Any) -> str:
    """A short hash of the source of the modules defining ``objects`` (modules, classes or functions).

    Keyed by module name and file content, not path, so every node and every clone of the same commit agrees.
    """
    modules = {}
    for obj in objects:
        module = obj if inspect.ismodule(obj) else inspect.getmodule(obj)
        if module is None or not getattr(module, "__file__", None):
            raise ValueError(f"cannot locate the source of {obj!r}")
        modules[module.__name__] = module.__file__
    digest = hashlib.sha256()
    for name in sorted(modules):
        with open(modules[name], "rb") as fh:
            digest.update(name.encode() + b"\0" + fh.read() + b"\0")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Stage:
    """A cacheable stage: its name, code version, and the config fields (dotted keys) it depends on."""

    name: str
    version: str
    fields: tuple[str, ...]

    def key_fields(self, flat_config: dict[str, Any]) -> dict[str, Any]:
        missing = [f for f in self.fields if f not in flat_config]
        if missing:
            raise KeyError(f"stage {self.name!r} depends on unknown config fields: {', '.join(missing)}")
        return {f: flat_config[f] for f in self.fields}


class StageCache:
    """Get-or-compute over a directory: ``<root>/<stage>/<key>.pt`` plus ``<key>.json`` (what the key means)."""

    def __init__(self, root: str, enabled: bool = True):
        self.root = os.path.abspath(root)
        self.enabled = enabled

    def path(self, stage: Stage, key: str) -> str:
        return os.path.join(self.root, stage.name, f"{key}.pt")

    def get_or_compute(self, stage: Stage, flat_config: dict[str, Any],
                       compute: Callable[[], Any]) -> tuple[Any, bool]:
        """Return ``(value, hit)``; ``hit`` is False when this call computed the value."""
        fields = stage.key_fields(flat_config)
        if not self.enabled:
            value = compute()
            self._record(stage, "computed-uncached", "")
            return value, False
        key = stage_key(stage.name, stage.version, fields)
        path = self.path(stage, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with self._lock(path):
            if os.path.isfile(path):
                loaded = self._load_verified(stage, key, path)
                if loaded is not None:
                    self._record(stage, "hit", key)
                    return loaded[0], True
            value = compute()
            self._write_entry(path, value, {"stage": stage.name, "version": stage.version, "fields": fields})
            self._record(stage, "computed", key)
            return value, False

    def _load_verified(self, stage: Stage, key: str, path: str) -> Optional[tuple[Any]]:
        """The entry at ``path`` as a 1-tuple, or None when it fails its checksum or does not load (then it is
        moved aside, with one warning naming it, and the caller computes it again)."""
        try:
            with open(path[:-3] + ".json") as fh:
                expected = json.load(fh).get("sha256")
            with open(path, "rb") as fh:
                data = fh.read()
            digest = hashlib.sha256(data).hexdigest()
            if digest != expected:
                raise ValueError(f"checksum {digest[:12]} != recorded {str(expected)[:12]} ({len(data)} bytes)")
            return (torch.load(io.BytesIO(data), weights_only=False),)
        except Exception as err:  # noqa: BLE001 - any unreadable entry is recomputed, never used
            aside = f"{path}.corrupt-{time.time():.0f}"
            with contextlib.suppress(OSError):
                os.replace(path, aside)
            print(f"warning: stage cache entry {path} is corrupt ({type(err).__name__}: {err}); moved to {aside} "
                  f"and recomputed", file=sys.stderr, flush=True)
            self._record(stage, "corrupt", key)
            return None

    def count(self, stage_name: str, event: str = "computed") -> int:
        """How many times an event (computed, hit, computed-uncached) happened for a stage, across processes."""
        log = os.path.join(self.root, stage_name, "events.log")
        if not os.path.isfile(log):
            return 0
        with open(log) as fh:
            return sum(1 for line in fh if line.split("\t")[1] == event)

    @staticmethod
    def _write_entry(path: str, value: Any, meta: dict) -> None:
        """Serialise ``value``, write its description with its SHA-256 (``<key>.json``), then rename the entry into
        place: a reader never sees a partial entry, and an entry never lacks its checksum."""
        buffer = io.BytesIO()
        torch.save(value, buffer)
        data = buffer.getvalue()
        _write_atomic(path[:-3] + ".json", json.dumps({**meta, "sha256": hashlib.sha256(data).hexdigest(),
                                                       "bytes": len(data)}, indent=1, default=str).encode())
        _write_atomic(path, data)

    @contextlib.contextmanager
    def _lock(self, path: str):
        with open(path + ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _record(self, stage: Stage, event: str, key: str) -> None:
        directory = os.path.join(self.root, stage.name)
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "events.log"), "a") as fh:
            fh.write(f"{time.time():.3f}\t{event}\t{key}\t{os.getpid()}\n")


def _write_atomic(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def default_cache_root() -> str:
    from platform.tracking import results_home

    return os.environ.get("FEDSWEEP_CACHE") or os.path.join(results_home(), "cache")


def open_cache(root: Optional[str] = None, enabled: bool = True) -> StageCache:
    return StageCache(root or default_cache_root(), enabled)
