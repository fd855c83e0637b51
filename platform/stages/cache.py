"""Content-addressed stage cache: one-shot work computed once per distinct upstream config, shared by trials.

A *stage* is expensive work whose result depends only on some config fields: FedKP's one-round client
training, FedED's client stage, FedAUX's pre-training and scores. Its key is the SHA-256 of the stage name,
the stage's code version (:func:`code_version`: a hash of the source of the modules that compute it, so editing
that code invalidates old entries without anyone remembering to bump a number) and exactly the config fields it
reads (canonical JSON).

The root is a local (or mounted) directory or an object store (``s3://bucket/prefix``, ``gs://bucket/prefix``,
through ``pyarrow.fs``, see :mod:`platform.stages.storage`). One protocol serves both, because it needs neither rename nor
locks to be safe (format 3):

- the **blob** ``<stage>/<key>.<sha256[:16]>.pt`` (the serialised value) is written first. Its name carries the hash
  of its bytes, so it is write-once: two writers of the same name write the same bytes, and writers of different
  values (a non-deterministic stage) write different names;
- the **manifest** ``<stage>/<key>.json`` (what the key means, the blob's name, its full SHA-256 and size) is written
  last. It is the commit point: an entry exists when its manifest does, and a manifest only ever names a blob that
  was complete before the manifest was written. Each is written whole or not at all (a local temporary file renamed
  into place; one PUT on an object store, which never shows a partial object). Two writers of the same key each
  write a complete manifest naming a complete blob: whichever lands last wins, both are valid, nothing interleaves.
  (No conditional put is needed; pyarrow exposes none.)
- every read checks the blob against the manifest's SHA-256: a blob that does not match (flipped bytes, truncated,
  empty), is missing or does not load, or a manifest that does not parse, is reported with its path on stderr,
  moved aside (``<name>.corrupt-<time>``; a copy and a delete on an object store) and computed again; it is never
  used.

On local disk a per-key file lock also makes a second trial that wants the same entry wait for the first instead of
computing it again. Object stores have no locks: two trials on different nodes that miss the same key at the same
moment both compute it (the work is duplicated, the entry is not corrupted). Per-stage events (computed, hit,
corrupt) are appended to ``<stage>/events.log`` locally and written as one small object each under
``<stage>/events/`` on an object store (which cannot append).

The cache root must be visible to every node that runs trials (a bucket, or a shared file system on a cluster);
by default it is ``$FEDSWEEP_CACHE``, else ``<results home>/cache``.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import json
import os
import secrets
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from platform.cli import results_home
from platform.stages.storage import filesystem, is_uri, local_lock, normalise, write_bytes

CACHE_FORMAT = 3  # bump when the layout changes (2: a checksum per entry; 3: content-named value, manifest last)


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


class _LocalStore:
    """The cache's storage on a local (or mounted) directory: atomic writes by rename, per-key file locks, and an
    appended event log per stage."""

    remote = False

    def __init__(self, root: str):
        self.root = os.path.abspath(root)

    def join(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def read(self, path: str) -> bytes:
        with open(path, "rb") as fh:
            return fh.read()

    def write(self, path: str, data: bytes) -> None:
        write_bytes(path, data)  # a temporary file renamed into place: whole or not at all

    def exists(self, path: str) -> bool:
        return os.path.isfile(path)

    def move_aside(self, path: str, aside: str) -> None:
        with contextlib.suppress(OSError):
            os.replace(path, aside)

    def lock(self, path: str):
        return local_lock(path)

    def record(self, stage_name: str, line: str) -> None:
        directory = self.join(stage_name)
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "events.log"), "a") as fh:
            fh.write(line)

    def events(self, stage_name: str) -> list[str]:
        log = self.join(stage_name, "events.log")
        if not os.path.isfile(log):
            return []
        with open(log) as fh:
            return fh.readlines()


class _ObjectStore:
    """The cache's storage on an object store (``s3://``, ``gs://``) through a pyarrow filesystem: every object is
    written by one PUT (whole or not at all), there is no lock, and each event is an object of its own."""

    remote = True

    def __init__(self, uri: str):
        self.root = normalise(uri)
        self.fs, self.base = filesystem(self.root)

    def join(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def _inner(self, path: str) -> str:
        return self.base + path[len(self.root):]

    def read(self, path: str) -> bytes:
        with self.fs.open_input_stream(self._inner(path)) as fh:
            return fh.read()

    def write(self, path: str, data: bytes) -> None:
        with self.fs.open_output_stream(self._inner(path)) as fh:
            fh.write(data)

    def exists(self, path: str) -> bool:
        import pyarrow.fs as pafs

        return self.fs.get_file_info(self._inner(path)).type == pafs.FileType.File

    def move_aside(self, path: str, aside: str) -> None:
        with contextlib.suppress(OSError, FileNotFoundError):
            self.fs.move(self._inner(path), self._inner(aside))  # a copy, then a delete of the original

    @contextlib.contextmanager
    def lock(self, path: str):
        yield  # no locks on an object store: concurrent misses compute twice, the protocol keeps the entry whole

    def record(self, stage_name: str, line: str) -> None:
        name = f"{time.time_ns()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.write(self.join(stage_name, "events", name), line.encode())

    def events(self, stage_name: str) -> list[str]:
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self._inner(self.join(stage_name, "events")), allow_not_found=True)
        lines = []
        for info in self.fs.get_file_info(selector):
            with self.fs.open_input_stream(info.path) as fh:
                lines.append(fh.read().decode())
        return lines


class StageCache:
    """Get-or-compute over a directory or a bucket prefix: ``<root>/<stage>/<key>.json`` (the manifest, written
    last) naming ``<root>/<stage>/<key>.<sha256[:16]>.pt`` (the value); see the module doc for why that is safe."""

    def __init__(self, root: str, enabled: bool = True):
        self.store = _ObjectStore(root) if is_uri(root) else _LocalStore(root)
        self.root = self.store.root
        self.enabled = enabled

    @property
    def remote(self) -> bool:
        return self.store.remote

    def manifest_path(self, stage: Stage, key: str) -> str:
        return self.store.join(stage.name, f"{key}.json")

    def path(self, stage: Stage, key: str) -> Optional[str]:
        """The value's path (a URI on an object store) of the entry ``key``, from its manifest; None when there is
        no entry."""
        try:
            return self.store.join(stage.name, json.loads(self.store.read(self.manifest_path(stage, key)))["blob"])
        except (OSError, FileNotFoundError, ValueError, KeyError):
            return None

    def get_or_compute(self, stage: Stage, flat_config: dict[str, Any],
                       compute: Callable[[], Any]) -> tuple[Any, bool]:
        """Return ``(value, hit)``; ``hit`` is False when this call computed the value."""
        fields = stage.key_fields(flat_config)
        if not self.enabled:
            value = compute()
            self._record(stage, "computed-uncached", "")
            return value, False
        key = stage_key(stage.name, stage.version, fields)
        manifest = self.manifest_path(stage, key)
        with self.store.lock(manifest):
            if self.store.exists(manifest):
                loaded = self._load_verified(stage, key, manifest)
                if loaded is not None:
                    self._record(stage, "hit", key)
                    return loaded[0], True
            value = compute()
            self._write_entry(stage, key, value, {"stage": stage.name, "version": stage.version, "fields": fields})
            self._record(stage, "computed", key)
            return value, False

    def _load_verified(self, stage: Stage, key: str, manifest: str) -> Optional[tuple[Any]]:
        """The entry as a 1-tuple, or None when its manifest does not parse, its value is missing, fails its
        checksum or does not load (then manifest and value are moved aside, with one warning naming the value, and
        the caller computes it again)."""
        path = manifest
        try:
            meta = json.loads(self.store.read(manifest))
            path = self.store.join(stage.name, meta["blob"])
            expected = meta["sha256"]
            data = self.store.read(path)
            digest = hashlib.sha256(data).hexdigest()
            if digest != expected:
                raise ValueError(f"checksum {digest[:12]} != recorded {str(expected)[:12]} ({len(data)} bytes, "
                                 f"{meta.get('bytes')} recorded)")
            return (torch.load(io.BytesIO(data), weights_only=False),)
        except Exception as err:  # noqa: BLE001 - any unreadable entry is recomputed, never used
            stamp = f".corrupt-{time.time():.0f}"
            self.store.move_aside(manifest, manifest + stamp)  # first: no reader takes the entry from here on
            if path != manifest:
                self.store.move_aside(path, path + stamp)
            print(f"warning: stage cache entry {path} is corrupt ({type(err).__name__}: {err}); moved to "
                  f"{path + stamp} and recomputed", file=sys.stderr, flush=True)
            _CORRUPT.append(f"stage cache entry {path} was corrupt ({type(err).__name__}: {str(err)[:200]}); moved "
                            f"to {path + stamp} and recomputed")
            self._record(stage, "corrupt", key)
            return None

    def count(self, stage_name: str, event: str = "computed") -> int:
        """How many times an event (computed, hit, corrupt, computed-uncached) happened for a stage, across
        processes and nodes."""
        return sum(1 for line in self.store.events(stage_name) if line.split("\t")[1] == event)

    def _write_entry(self, stage: Stage, key: str, value: Any, meta: dict) -> None:
        """Serialise ``value``, write it under its content-addressed name, then its manifest (the commit point)."""
        buffer = io.BytesIO()
        torch.save(value, buffer)
        data = buffer.getvalue()
        digest = hashlib.sha256(data).hexdigest()
        blob = f"{key}.{digest[:16]}.pt"
        self.store.write(self.store.join(stage.name, blob), data)
        self.store.write(self.manifest_path(stage, key), json.dumps(
            {**meta, "blob": blob, "sha256": digest, "bytes": len(data)}, indent=1, default=str).encode())

    def _record(self, stage: Stage, event: str, key: str) -> None:
        self.store.record(stage.name, f"{time.time():.3f}\t{event}\t{key}\t{socket.gethostname()}:{os.getpid()}\n")

    def scratch_dir(self, *parts: str) -> str:
        """A local directory for a stage's own resumable work (Ray Train's checkpoints during pre-training): under
        the root on local disk; under the results home when the cache is on an object store."""
        if not self.remote:
            return os.path.join(self.root, *parts)
        return os.path.join(results_home(), "cache-scratch", *parts)


# This process's corrupt entries not yet handed on: a trial or an actor reads them with its round's metrics, so the
# report reaches the driver's console and MLflow, not only this (Ray worker) process's stderr, which no one sees.
_CORRUPT: list[str] = []


def take_corrupt_reports() -> list[str]:
    """The corrupt-entry lines this process found since the last call (each once), oldest first."""
    reports = list(_CORRUPT)
    del _CORRUPT[: len(reports)]
    return reports


def default_cache_root() -> str:
    return os.environ.get("FEDSWEEP_CACHE") or os.path.join(results_home(), "cache")


def open_cache(root: Optional[str] = None, enabled: bool = True) -> StageCache:
    return StageCache(root or default_cache_root(), enabled)
