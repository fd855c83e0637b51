"""The MLflow store under the machine's faults: a SQLite store locked by another process, and a full disk.

A call that finds a SQLite store locked (SQLite's "database is locked": another process holds its write lock, a
``BEGIN EXCLUSIVE`` of its own or a backup) is tried again with backoff (0.25 s doubling to 4 s between tries) until
:data:`STORE_WAIT_S` seconds, 30 s, have passed since the first try; each try itself waits out SQLite's busy timeout
(MLflow sets 20 s), so a store locked for good is given up on after 30 to 50 s. Then :class:`StoreLocked` ends the
wait with one line naming the store and how long it waited. A failed SQLite write changes nothing (its transaction
is rolled back), so trying it again never writes twice.

A run that cannot be closed through MLflow because the disk under its SQLite store is full (SQLite needs new blocks
for its rollback journal) is closed in place by :func:`close_runs_in_place`: the rows' own pages are rewritten,
with the journal in memory.
"""
from __future__ import annotations

import contextlib
import time
from typing import Callable, Optional

from platform.cli import sqlite_path
from platform.config.run_schema import STATUS_INTERRUPTED, TAG_PARENT_RUN, TAG_STATUS
from platform.errors import EnvironmentFault, store_locked

STORE_WAIT_S = 30.0  # a call finding a SQLite store locked is tried again until this long has passed


class StoreLocked(EnvironmentFault):
    """A SQLite store still locked by another process once :data:`STORE_WAIT_S` seconds have passed."""

    def __init__(self, uri: str, waited: float, wait_s: float = STORE_WAIT_S):
        self.uri, self.waited = uri, waited
        super().__init__(f"the MLflow store {sqlite_path(uri) or uri} is locked by another process, still after "
                         f"{waited:.0f} s of waiting (a sweep tries again for {wait_s:.0f} s; database is locked)")


def wait_out_lock(call: Callable, uri: str, wait_s: float = STORE_WAIT_S):
    """``call()``, tried again with backoff while the SQLite store ``uri`` is locked by another process, until
    ``wait_s`` seconds have passed since the first try (see the module doc); then :class:`StoreLocked`. Any other
    error is raised at once."""
    started = time.monotonic()
    delay = 0.25
    while True:
        try:
            return call()
        except Exception as err:
            if not store_locked(err) or isinstance(err, StoreLocked):
                raise
            waited = time.monotonic() - started
            if waited >= wait_s:
                raise StoreLocked(uri, waited, wait_s) from err
            time.sleep(min(delay, wait_s - waited))
            delay = min(delay * 2, 4.0)


class PatientClient:
    """An ``MlflowClient`` whose every call waits out a locked SQLite store (:func:`wait_out_lock`)."""

    def __init__(self, client, uri: str):
        self._client, self._uri = client, uri

    def __getattr__(self, name: str):
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        def call(*args, **kwargs):
            return wait_out_lock(lambda: attribute(*args, **kwargs), self._uri)

        return call


def close_runs_in_place(uri: str, parent_run_id: str, status: str, status_tag: str) -> Optional[int]:
    """End the run ``parent_run_id`` (MLflow status ``status``, our status tag ``status_tag``) and its children still
    RUNNING (KILLED, interrupted) by rewriting their rows in a ``sqlite:///`` store directly, with SQLite's rollback
    journal in memory: the last resort where MLflow's own writes fail on a full disk. Only rows that exist are
    rewritten (their status, end time and status tag), which needs no new block on the disk. Returns how many runs it
    ended; None for a store that is not SQLite. Raises ``sqlite3.Error`` when even that fails (a store still
    locked)."""
    import sqlite3

    path = sqlite_path(uri)
    if not path:
        return None
    now = int(time.time() * 1000)
    connection = sqlite3.connect(path, timeout=5.0, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode=MEMORY")
        connection.execute("BEGIN IMMEDIATE")
        children = [row[0] for row in connection.execute(
            "SELECT runs.run_uuid FROM runs JOIN tags ON tags.run_uuid = runs.run_uuid "
            "WHERE tags.key = ? AND tags.value = ? AND runs.status = 'RUNNING'", (TAG_PARENT_RUN, parent_run_id))]
        ended = 0
        for run_id, run_status, tag in [*((c, "KILLED", STATUS_INTERRUPTED) for c in children),
                                        (parent_run_id, status, status_tag)]:
            changed = connection.execute("UPDATE runs SET status = ?, end_time = ? WHERE run_uuid = ? AND status = "
                                         "'RUNNING'", (run_status, now, run_id)).rowcount
            if changed:
                connection.execute("UPDATE tags SET value = ? WHERE key = ? AND run_uuid = ?",
                                   (tag, TAG_STATUS, run_id))
                ended += 1
        connection.execute("COMMIT")
        return ended
    except BaseException:
        if connection.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
        raise
    finally:
        connection.close()
