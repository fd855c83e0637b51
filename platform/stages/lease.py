"""A lease: at most one live holder of a directory on a local path or a bucket (``s3://``, ``gs://``), through the
same ``pyarrow.fs`` paths as :mod:`platform.stages.storage`. A sweep's driver holds one in its Tune experiment
directory, so that a second driver of the same sweep is refused instead of running its trials again.

The lease file is JSON: the holder's host, pid, process identity (its start time, from ``/proc``), when it took the
lease, when it last renewed it and a random token. The holder renews it every :data:`RENEW_EVERY` seconds from a
daemon thread and removes it when it lets go (:meth:`Lease.release`; a killed holder leaves it behind, stale).

A lease is **live** when its holder runs on this host (the pid exists, is no zombie and has the same start time: a
driver stopped with SIGSTOP or a suspended machine is not taken over, a recycled pid is not mistaken for it), or, for
a holder on another host, when it was renewed less than :data:`STALE_AFTER` seconds ago. Anything else is **stale**
(the process is gone, the lease is old, or the file does not parse) and is taken over.

Taking a lease:

- on a local (or mounted) directory, under an exclusive ``flock`` of a side file (``<lease>.lock``), so that two
  drivers that find the same stale lease cannot both take it; an absent lease is created with ``os.link`` of a
  complete temporary file (create-exclusive: it fails if the name exists), a stale one replaced by rename. Every
  write is whole (a temporary file, fsync, rename);
- on an object store, which has no create-exclusive write that pyarrow exposes and no lock: the lease is written
  (one PUT, never seen partial), then read back after :data:`SETTLE` seconds. If the token read back is not this
  holder's, another driver wrote after it and this one gives up. Two drivers both win only if one reads the lease
  as absent and writes it more than :data:`SETTLE` seconds later, which a few milliseconds between a read and a
  write make unlikely but not impossible; the renewing thread then finds the other's token and says so on stderr.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import socket
import sys
import threading
import time
from typing import Optional

from platform.reaper import start_time
from platform.stages.storage import filesystem, is_uri, local_lock, read_bytes, synced_temp_file, write_bytes

RENEW_EVERY = 10.0  # seconds between renewals by the holder's thread
STALE_AFTER = 60.0  # a lease of another host not renewed for this long is stale
SETTLE = 2.0  # object store: seconds between writing the lease and reading it back


def _process_identity(pid: int) -> Optional[str]:
    """``pid``'s start time as text (:func:`platform.reaper.start_time`); None when it is gone or a zombie, or
    where there is no ``/proc`` (then :func:`_pid_runs` falls back to a signal 0)."""
    started = start_time(pid)
    return None if started is None else str(started)


def _pid_runs(pid: int, identity: Optional[str]) -> bool:
    """Whether the process ``pid`` with start time ``identity`` runs on this host."""
    if os.path.isdir("/proc"):
        now = _process_identity(pid)
        return now is not None and (identity is None or now == identity)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclasses.dataclass(frozen=True)
class Holder:
    """What a lease file says about the process that holds it."""

    host: str
    pid: int
    identity: Optional[str]
    since: float  # when it took the lease (epoch seconds)
    renewed: float
    token: str

    @property
    def driver(self) -> str:
        return f"{self.host}:{self.pid}"

    def describe(self) -> str:
        """``host:pid since <local time>, renewed N s ago`` for messages."""
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"{self.driver} since {since}, renewed {max(0.0, time.time() - self.renewed):.0f} s ago"

    def stale(self) -> Optional[str]:
        """Why the lease is stale (one short phrase), None when it is live."""
        if self.host == socket.gethostname():
            return None if _pid_runs(self.pid, self.identity) else f"its process {self.pid} is gone"
        age = time.time() - self.renewed
        return f"not renewed for {age:.0f} s" if age > STALE_AFTER else None

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), indent=1).encode()

    @classmethod
    def parse(cls, data: bytes) -> Optional["Holder"]:
        """The holder a lease file names; None when it does not parse (a stale lease)."""
        try:
            raw = json.loads(data)
            return cls(str(raw["host"]), int(raw["pid"]), raw.get("identity"), float(raw["since"]),
                       float(raw["renewed"]), str(raw["token"]))
        except (ValueError, TypeError, KeyError):
            return None


class LeaseHeld(Exception):
    """The lease is live and someone else's (``holder``)."""

    def __init__(self, path: str, holder: Holder):
        super().__init__(f"{path} is held by {holder.describe()}")
        self.path, self.holder = path, holder


def read_holder(path: str) -> tuple[bool, Optional[Holder]]:
    """``(exists, holder)`` of the lease file ``path``; ``holder`` is None when it is absent or does not parse."""
    try:
        data = read_bytes(path)
    except (FileNotFoundError, OSError):
        return False, None
    return True, Holder.parse(data)


def live_holder(path: str) -> Optional[Holder]:
    """The holder of the lease ``path`` when it is live, else None (absent, unreadable or stale)."""
    _, holder = read_holder(path)
    return holder if holder is not None and holder.stale() is None else None


class Lease:
    """A lease this process holds; take one with :meth:`acquire`, let it go with :meth:`release`."""

    def __init__(self, path: str, holder: Holder, taken_from: Optional[tuple[Holder, str]]):
        self.path, self.holder = path, holder
        self.taken_from = taken_from  # (the stale holder, why it was stale) when this lease took it over
        self.lost: Optional[Holder] = None  # another holder found by a renewal (object stores only)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, name="fedsweep-lease", daemon=True)

    @classmethod
    def acquire(cls, path: str) -> "Lease":
        """Take the lease ``path``, or raise :class:`LeaseHeld` naming its live holder. A stale lease is taken over
        (``taken_from`` says whose it was and why)."""
        now = time.time()
        mine = Holder(socket.gethostname(), os.getpid(), _process_identity(os.getpid()), now, now,
                      secrets.token_hex(8))
        with _exclusive(path):
            exists, found = read_holder(path)
            taken = None
            if exists:
                reason = found.stale() if found is not None else "the lease file does not parse"
                if reason is None:
                    raise LeaseHeld(path, found)
                taken = (found, reason)
            _write(path, mine.to_json(), create=not exists)
        lease = cls(path, mine, taken)
        if is_uri(path):  # no create-exclusive write: whoever wrote last holds it
            try:
                time.sleep(SETTLE)
                _, back = read_holder(path)
            except BaseException:  # interrupted while it settles: not left behind as a live-looking lease
                lease.release()
                raise
            if back is None or back.token != mine.token:
                raise LeaseHeld(path, back or mine)  # removed meanwhile: another driver is starting or leaving
        lease._thread.start()
        return lease

    def _renew_loop(self) -> None:
        while not self._stop.wait(RENEW_EVERY):
            try:
                with _exclusive(self.path):
                    _, found = read_holder(self.path)
                    if found is not None and found.token != self.holder.token:
                        self.lost = found
                        print(f"warning: the lease {self.path} is now held by {found.describe()}; two drivers may "
                              f"be running this sweep", file=sys.stderr, flush=True)
                        return
                    self.holder = dataclasses.replace(self.holder, renewed=time.time())
                    _write(self.path, self.holder.to_json(), create=False)
            except OSError:  # a full disk or an unreachable bucket: tried again next time
                continue

    def release(self) -> None:
        """Stop renewing and remove the lease file, if it is still this holder's. Safe to call twice."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=RENEW_EVERY)
        with contextlib.suppress(OSError):
            with _exclusive(self.path):
                _, found = read_holder(self.path)
                if found is not None and found.token == self.holder.token:
                    fs, inner = filesystem(self.path)
                    fs.delete_file(inner)


@contextlib.contextmanager
def _exclusive(path: str):
    """An exclusive ``flock`` of ``<path>.lock`` on a local directory (creating the directory); nothing on an
    object store, which has no locks."""
    if is_uri(path):
        yield
        return
    with local_lock(path):
        yield


def _write(path: str, data: bytes, create: bool) -> None:
    """``data`` to ``path``, whole: on a local directory ``create`` links a complete temporary file into place
    (``FileExistsError`` if the name exists), else renames it over the old file; on an object store one PUT."""
    if is_uri(path) or not create:
        write_bytes(path, data)
        return
    tmp = synced_temp_file(path, data)
    try:
        try:
            os.link(tmp, path)
        except OSError as err:
            if isinstance(err, FileExistsError):
                raise
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)  # no hard links here (some mounts)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
