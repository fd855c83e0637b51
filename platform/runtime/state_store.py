"""Per-client state kept between federated rounds, bounded in memory and spilled to disk.

Methods such as MNFL keep state per client across rounds: a personalised model's flat weights, an
optimiser's state dict. The parameter-server actor owns one :class:`ClientStateStore` per federation; it
hands client actors the states of the clients they train and commits the new states they send back. With
many clients (say 1,000 personalised models) the states must not all sit in the actor's memory, so the
store holds at most ``max_bytes`` of state in memory and spills the rest to a directory on local disk.

Spill policy: entries are kept in a :class:`collections.OrderedDict` in least-recently-used order; a
``put`` or a ``get`` makes an entry the most recently used. After every insertion, while the in-memory
total exceeds ``max_bytes``, the least recently used in-memory entry is written to ``<client>.pt`` in the
spill directory and dropped from memory. An entry larger than ``max_bytes`` on its own goes straight to
disk (and is read from there on every ``get``). A ``get`` of a spilled entry loads it, deletes its file
and puts it back in memory as the most recently used (which may spill others).

Writes are atomic: the state is ``torch.save``-d to a temporary file in the spill directory, then
``os.replace``-d onto ``<client>.pt``, so the directory never holds a half-written entry. If the write
fails, the temporary file is removed, the entry stays where it was (in memory) and the error propagates.

The spill directory is either given or private: a fresh directory under
``<tempdir>/fedsweep-client-state`` named ``<pid>-<8 hex>``, created lazily on the first spill. A killed
actor cannot delete its own directory, so whenever a private directory is created, sibling directories
whose leading pid no longer names a live process are deleted. (A pid reused by an unrelated process keeps
its stale directory until that process exits; pids are only meaningful within one pid namespace, so the
temp directory should not be shared between containers.)

Memory accounting (:func:`state_bytes`) counts tensor and array payloads plus a flat 64 bytes per other
leaf; it is an estimate of the payload, not of Python object overhead.
"""
from __future__ import annotations

import collections
import os
import re
import shutil
import tempfile
import uuid
from typing import Any, Iterable, Mapping, Optional

import numpy as np
import torch

__all__ = ["ClientStateStore", "state_bytes", "SPILL_ROOT_NAME"]

SPILL_ROOT_NAME = "fedsweep-client-state"
_LEAF_BYTES = 64
_PRIVATE_DIR_RE = re.compile(r"^(\d+)-")


def state_bytes(state: Any) -> int:
    """Bytes a state accounts for: tensor and ndarray payloads, recursively, plus 64 per other leaf."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, np.ndarray):
        return int(state.nbytes)
    if isinstance(state, Mapping):
        return sum(state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    return _LEAF_BYTES


def _to_cpu(value: Any) -> Any:
    """Detach tensors and move them to CPU, recursively; arrays and scalars are kept as they are.

    A tensor that is a view over a larger storage is cloned, since ``torch.save`` would otherwise write
    (and memory would otherwise hold) the whole storage, not just the bytes the store accounts for.
    """
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if not t.is_sparse and t.untyped_storage().nbytes() > t.numel() * t.element_size():
            t = t.clone()
        return t
    if isinstance(value, dict):
        items = [(k, _to_cpu(v)) for k, v in value.items()]
        try:
            return type(value)(items)
        except TypeError:  # e.g. defaultdict: its constructor takes a factory first
            return dict(items)
    if isinstance(value, tuple):
        converted = [_to_cpu(v) for v in value]
        if hasattr(value, "_fields"):  # namedtuple
            return type(value)(*converted)
        return tuple(converted)
    if isinstance(value, list):
        return [_to_cpu(v) for v in value]
    return value


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return True  # never signal process groups; treat as alive (keep the directory)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # exists but belongs to someone else, or unknown: keep
    return True


def _sweep_stale(root: str) -> None:
    """Delete directories in ``root`` named ``<pid>-...`` whose pid is not a live process. Errors ignored."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        match = _PRIVATE_DIR_RE.match(entry.name)
        if not match:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if not _pid_alive(int(match.group(1))):
                shutil.rmtree(entry.path, ignore_errors=True)
        except Exception:  # noqa: BLE001 - sweeping is best effort
            continue


class ClientStateStore:
    """Per-client state (``dict`` per client id) held in memory up to ``max_bytes``, the rest on disk.

    ``max_bytes`` (>= 0) bounds :attr:`memory_bytes`; 0 keeps everything on disk. ``spill_dir`` is the
    directory for spilled entries; None uses a private directory created lazily on the first spill (see
    the module docstring). :meth:`clear` / :meth:`close` delete the spill directory either way.

    States are stored by reference after tensors are detached and moved to CPU; :meth:`get` returns the
    stored object, so callers should treat it as read-only and ``put`` a new state to change it.

    The store is not thread-safe and is not meant to be pickled: it lives inside one actor (the parameter
    server) and is checkpointed through :meth:`snapshot` / :meth:`restore`.

    Counters: :attr:`spills` (entries written to disk) and :attr:`loads` (entries read from disk, by
    :meth:`get` or :meth:`snapshot`).
    """

    def __init__(self, max_bytes: int, spill_dir: Optional[str] = None):
        max_bytes = int(max_bytes)
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._given_dir = None if spill_dir is None else os.path.abspath(spill_dir)
        self._private_dir: Optional[str] = None
        self._dir_ready = False
        self._mem: "collections.OrderedDict[int, tuple[dict, int]]" = collections.OrderedDict()
        self._memory_bytes = 0
        self._disk: set[int] = set()
        self.spills = 0
        self.loads = 0

    # ------------------------------------------------------------------ queries

    @property
    def memory_bytes(self) -> int:
        """Sum of :func:`state_bytes` over the entries held in memory."""
        return self._memory_bytes

    @property
    def spill_dir(self) -> Optional[str]:
        """The spill directory: the given one, or the private one once chosen (None before the first spill)."""
        return self._given_dir if self._given_dir is not None else self._private_dir

    def __contains__(self, client: object) -> bool:
        try:
            key = int(client)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return key in self._mem or key in self._disk

    def __len__(self) -> int:
        return len(self._mem) + len(self._disk)

    def clients(self) -> list[int]:
        """Every client that has state, sorted."""
        return sorted(set(self._mem) | self._disk)

    # ------------------------------------------------------------------ writes

    def put(self, client: int, state: dict) -> None:
        """Store ``state`` for ``client`` (an empty dict deletes the entry); may spill LRU entries to disk."""
        key = int(client)
        if not isinstance(state, dict):
            raise TypeError(f"a client state must be a dict, got {type(state).__name__}")
        if not state:
            self.delete(key)
            return
        state = _to_cpu(state)
        nbytes = state_bytes(state)
        if nbytes > self.max_bytes:
            # Too big to keep in memory at all: write it (replacing any older file), then forget any
            # in-memory copy. If the write fails, the previous state is left untouched.
            self._write(key, state)
            self._disk.add(key)
            self._drop_mem(key)
            return
        self._drop_mem(key)
        self._remove_file(key)
        self._mem[key] = (state, nbytes)
        self._memory_bytes += nbytes
        self._enforce_bound()

    def put_many(self, states: Mapping[int, dict]) -> None:
        for client, state in states.items():
            self.put(client, state)

    def delete(self, client: int) -> None:
        """Forget ``client``'s state (no error if it has none)."""
        key = int(client)
        self._drop_mem(key)
        self._remove_file(key)

    # ------------------------------------------------------------------ reads

    def get(self, client: int) -> dict:
        """``client``'s state, or ``{}``; a spilled entry is loaded back into memory as most recently used."""
        key = int(client)
        if key in self._mem:
            self._mem.move_to_end(key)
            return self._mem[key][0]
        if key not in self._disk:
            return {}
        state = self._read(key)
        nbytes = state_bytes(state)
        if nbytes > self.max_bytes:
            return state  # stays on disk; it would be spilled again at once
        self._remove_file(key)
        self._mem[key] = (state, nbytes)
        self._memory_bytes += nbytes
        self._enforce_bound()
        return state

    def get_many(self, clients: Iterable[int]) -> dict[int, dict]:
        """``{client: state}`` for those of ``clients`` that have state."""
        out: dict[int, dict] = {}
        for client in clients:
            state = self.get(client)
            if state:
                out[int(client)] = state
        return out

    # ------------------------------------------------------------------ checkpointing

    def snapshot(self) -> dict[int, dict]:
        """Every client's state, sorted by client, for a checkpoint; spilled ones are read from disk
        without changing what is held in memory or on disk."""
        out: dict[int, dict] = {}
        for key in self.clients():
            out[key] = self._mem[key][0] if key in self._mem else self._read(key)
        return out

    def restore(self, states: Mapping[int, dict]) -> None:
        """Replace the whole content with ``states`` (as from :meth:`snapshot`)."""
        self.clear()
        self.put_many(states)

    def clear(self) -> None:
        """Forget every state and delete the spill directory."""
        self._mem.clear()
        self._memory_bytes = 0
        self._disk.clear()
        directory = self.spill_dir
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
        self._dir_ready = False

    close = clear

    def __del__(self):
        try:
            self.clear()
        except Exception:  # noqa: BLE001 - interpreter shutdown, half-initialised object, ...
            pass

    def __repr__(self) -> str:
        return (f"ClientStateStore(clients={len(self)}, in_memory={len(self._mem)}, "
                f"memory_bytes={self._memory_bytes}, max_bytes={self.max_bytes}, spill_dir={self.spill_dir!r})")

    # ------------------------------------------------------------------ internals

    def _drop_mem(self, key: int) -> None:
        entry = self._mem.pop(key, None)
        if entry is not None:
            self._memory_bytes -= entry[1]

    def _remove_file(self, key: int) -> None:
        if key in self._disk:
            try:
                os.remove(self._path(key))
            except FileNotFoundError:
                pass
            self._disk.discard(key)

    def _enforce_bound(self) -> None:
        while self._memory_bytes > self.max_bytes and self._mem:
            key, (state, nbytes) = next(iter(self._mem.items()))
            self._write(key, state)  # on failure the entry stays in memory and the error propagates
            self._disk.add(key)
            del self._mem[key]
            self._memory_bytes -= nbytes

    def _path(self, key: int) -> str:
        directory = self.spill_dir
        assert directory is not None
        return os.path.join(directory, f"{key}.pt")

    def _ensure_dir(self) -> str:
        if self._given_dir is not None:
            if not self._dir_ready:
                os.makedirs(self._given_dir, exist_ok=True)
                self._dir_ready = True
            return self._given_dir
        if not self._dir_ready or self._private_dir is None or not os.path.isdir(self._private_dir):
            root = os.path.join(tempfile.gettempdir(), SPILL_ROOT_NAME)
            os.makedirs(root, exist_ok=True)
            _sweep_stale(root)
            if self._private_dir is None:
                self._private_dir = os.path.join(root, f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
            os.makedirs(self._private_dir, mode=0o700, exist_ok=True)
            self._dir_ready = True
        return self._private_dir

    def _write(self, key: int, state: dict) -> None:
        directory = self._ensure_dir()
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{key}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(state, f)
            os.replace(tmp, os.path.join(directory, f"{key}.pt"))
        except BaseException:
            try:
                os.remove(tmp)
            except OSError:
                pass
            raise
        self.spills += 1

    def _read(self, key: int) -> dict:
        state = torch.load(self._path(key), weights_only=False)
        self.loads += 1
        return state
