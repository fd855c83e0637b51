"""A sweep's resume and repair state: the STATE_FILE in its Tune experiment directory (the MLflow parent run, the
store, the invocation ``--resume`` restores, the status, the scenario cells that finished), finding the sweep that
``--resume`` continues and the line that continues it, what ``--resume`` checks before Ray starts (the space file
hashes as it did when the sweep started, every state file reads), the lease that keeps one driver per sweep
(:mod:`platform.stages.lease`), and ``--repair`` of sweeps whose driver died.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from typing import Optional

from platform.cli import results_home
from platform.errors import UserError
from platform.config.run_schema import (STATUS_COMPLETED, STATUS_INTERRUPTED, STATUS_RUNNING, TAG_DRIVER,
                                        TAG_PARENT_RUN, TAG_SEARCH_SPACE, TAG_STATUS, TAG_SWEEP_DIR)
from platform.sweep.pareto import json_value


STATE_FILE = "fedsweep_sweep.json"  # in the Tune experiment directory: links it to its MLflow parent run


def sweep_experiment_name(space_name: str) -> str:
    """A new sweep's Tune experiment (and Optuna study) name: ``<space>-<time>-<6 hex>``; the random part keeps two
    sweeps started in the same second apart."""
    import secrets  # deferred: start-up time

    return f"{space_name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def latest_unfinished(storage: str, name: str) -> Optional[str]:
    """The newest sweep of space ``name`` under ``storage`` (a path or a URI) that did not complete (None if there is
    none)."""
    from platform.stages import storage as st

    candidates = sorted(d for d in st.listdir(storage) if d.startswith(f"{name}-")
                        and st.isfile(st.join(storage, d, STATE_FILE)) and _unfinished(st.join(storage, d)))
    return st.join(storage, candidates[-1]) if candidates else None


def _unfinished(directory: str) -> bool:
    """Whether the sweep in ``directory`` did not complete; one whose state does not read counts (``--resume`` then
    says so rather than passing it over for an older sweep)."""
    try:
        return read_state(directory).get("status") != STATUS_COMPLETED
    except (OSError, ValueError, AttributeError):
        return True


# What a sweep's invocation stores (in its STATE_FILE) for --resume to restore: the flags that change the experiment.
INVOCATION_FLAGS = {"name": "the search space", "overrides": "--set", "num_samples": "--num-samples",
                    "repeats": "--repeats", "tracking_uri": "--tracking-uri", "cache_dir": "--cache-dir",
                    "no_cache": "--no-cache", "optuna_storage": "--optuna-storage", "preset": "--preset",
                    "stand_in": "--stand-in"}


def invocation_of(args) -> dict:
    """The flags that define a sweep, as given (the space by absolute path when it was a YAML file)."""
    stored = {key: getattr(args, key) for key in INVOCATION_FLAGS}
    if stored["name"] and os.path.isfile(stored["name"]):
        stored["name"] = os.path.abspath(stored["name"])
    from platform.results.tracking import git_commit

    return {**stored, "git_commit": git_commit(), "space_sha256": space_file_sha256(stored["name"])}


def space_file_sha256(name: Optional[str]) -> Optional[str]:
    """The sha256 of the bytes of the space file ``name`` resolves to (a YAML path or a space's name, presets and
    all); None when there is none."""
    import hashlib

    from platform.config.space_files import find_search_space

    try:
        with open(find_search_space(name), "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except (UserError, OSError, TypeError):
        return None


def default_storage() -> str:
    """Tune's storage when --storage-path is not given: ``$FEDSWEEP_STORAGE`` (the clusters set a bucket), else
    ``<results home>/ray_results``."""
    from platform.stages.storage import normalise

    return normalise(os.environ.get("FEDSWEEP_STORAGE") or os.path.join(results_home(), "ray_results"))


def join_storage(directory: str, *names: str) -> str:
    """``directory``/``names`` for a path or an ``s3://`` / ``gs://`` URI (Tune's storage may be either)."""
    from platform.stages.storage import join

    return join(directory, *names)


def read_state(directory: str) -> dict:
    """A sweep's STATE_FILE, read through the storage's filesystem (so ``--resume`` finds it from any directory or
    machine when the storage is a bucket)."""
    from platform.stages.storage import read_json

    return read_json(join_storage(directory, STATE_FILE))


def start_state(directory: str, parent_run_id: str, tracking_uri: str, space, invocation: dict, **extra) -> dict:
    """Create a new sweep's Tune directory (a name of its own, see sweep_experiment_name: never another sweep's) and its
    STATE_FILE: the parent run, the store, the space, the status and the invocation ``--resume`` restores."""
    from platform.stages.storage import is_uri

    if not is_uri(directory):
        os.makedirs(directory, exist_ok=True)  # the driver's lease (claim_sweep) may be in it already
    state = {"parent_run_id": parent_run_id, "tracking_uri": tracking_uri, "search_space": space.path,
             "status": STATUS_RUNNING, "invocation": invocation, **extra}
    write_state(directory, state)
    return state


def write_state(directory: str, state: dict) -> None:
    """Written whole or not at all: a temporary file renamed into place on disk, one PUT on an object store."""
    from platform.stages.storage import write_bytes

    write_bytes(join_storage(directory, STATE_FILE), json.dumps(json_value(state), indent=1).encode())


def record_status(directory: str, status: str) -> None:
    """The sweep's status in its STATE_FILE (``--resume`` skips completed sweeps); nothing if it never started."""
    from platform.stages.storage import isfile

    if isfile(join_storage(directory, STATE_FILE)):
        write_state(directory, {**read_state(directory), "status": status})


def check_resumable(resume_dir: str, space) -> None:
    """--resume needs the interrupted run to have the same scenario cells as the space has now (one line if not)."""
    from platform.config.search_space import cell_label

    recorded = read_state(resume_dir).get("scenarios")
    current = [cell_label(c) for c in space.cells()] if space.scenarios else None
    if recorded != current:
        def describe(cells):
            return f"scenario cells {'; '.join(cells)}" if cells else "no scenarios"
        raise UserError(f"--resume: the latest run of sweep {space.name!r} ({resume_dir}) has {describe(recorded)}, "
                        f"the space now has {describe(current)}; start a new sweep (without --resume)")


def check_space_unchanged(resume_dir: str, stored: dict) -> None:
    """--resume runs the sweep that was started: the space file must hash as it did then (``space_sha256`` in the
    stored invocation; an invocation stored without one is not checked). One line naming the file otherwise."""
    kept = stored.get("space_sha256")
    if not kept:
        return
    from platform.config.space_files import find_search_space

    now = space_file_sha256(stored.get("name"))
    if now == kept:
        return
    try:
        path = os.path.abspath(find_search_space(stored.get("name")))
    except UserError:
        path = stored.get("name")
    raise UserError(f"--resume: {path} changed since sweep {os.path.basename(resume_dir)} started (sha256 "
                    f"{kept[:12]} then, {(now or 'none')[:12]} now); put the file back as it was (sha256 "
                    f"{kept[:12]}), or start a new sweep: {new_sweep_command(stored)}")


def new_sweep_command(stored: dict) -> str:
    """The command that starts a new sweep with the stored invocation's space and experiment flags."""
    import shlex

    parts = ["python -m platform.sweep", shlex.quote(str(stored.get("name")))]
    if stored.get("preset"):
        parts.append(f"--preset {shlex.quote(stored['preset'])}")
    parts += [f"--set {shlex.quote(item)}" for item in stored.get("overrides") or []]
    parts += [f"{flag} {stored[key]}" for key, flag in (("num_samples", "--num-samples"), ("repeats", "--repeats"))
              if stored.get(key) is not None]
    return " ".join(parts + (["--stand-in"] if stored.get("stand_in") else []))


# The files --resume reads in a sweep's directory tree: this platform's JSON, and Tune's state (the newest of each
# pattern in a directory, as Tune picks it; the searcher's and callbacks' are pickles whatever the suffix).
_JSON_STATE = ("experiment_state-*.json", "segments.json", STATE_FILE)
_PICKLED_STATE = ("searcher-state-*.pkl", "search_gen_state-*.json", "callback-states-*.pkl", "tuner.pkl")


def unreadable_state(resume_dir: str) -> Optional[str]:
    """The first state file under ``resume_dir`` that --resume cannot read (truncated, empty, not JSON or not a
    pickle), as ``<path> (<why>)``; None when all read. Pickles are walked opcode by opcode (``pickletools``): a
    truncated one is found without importing what it names."""
    import fnmatch
    import pickletools

    import pyarrow.fs as pafs

    from platform.stages.storage import filesystem, read_bytes

    fs, inner = filesystem(resume_dir)
    newest: dict[tuple[str, str], str] = {}
    for info in fs.get_file_info(pafs.FileSelector(inner, recursive=True, allow_not_found=True)):
        if info.type != pafs.FileType.File:
            continue
        for pattern in (*_JSON_STATE, *_PICKLED_STATE):
            key = (os.path.dirname(info.path), pattern)
            if fnmatch.fnmatch(info.base_name, pattern) and info.base_name > os.path.basename(newest.get(key, "")):
                newest[key] = info.path
    for (_, pattern), path in sorted(newest.items()):
        shown = join_storage(resume_dir, os.path.relpath(path, inner)) if path != inner else resume_dir
        try:
            data = read_bytes(shown)
            if not data:
                raise ValueError("empty")
            if pattern in _JSON_STATE:
                json.loads(data)
            else:
                for _ in pickletools.genops(data):
                    pass
        except Exception as err:  # noqa: BLE001 - whatever the reader trips on: the file is unusable
            return f"{shown} ({str(err).splitlines()[0][:100] if str(err) else type(err).__name__})"
    return None


def check_state_readable(resume_dir: str) -> None:
    """Refuse, in one line and before Ray starts, a sweep whose state --resume would trip over (a driver that died
    mid-write, a full disk), where Tune's restore of an unreadable searcher pickle hangs without a word."""
    bad = unreadable_state(resume_dir)
    if bad is None:
        return
    try:
        state = read_state(resume_dir)
        stored = state.get("invocation") or {}
    except (OSError, ValueError, AttributeError):
        state, stored = {}, {}
    uri = f" --tracking-uri {state['tracking_uri']}" if state.get("tracking_uri") else ""
    name = os.path.basename(resume_dir)
    space = re.sub(r"-\d{8}-\d{6}-[0-9a-f]{6}$", "", name)  # sweep_experiment_name's form
    start = new_sweep_command(stored if stored.get("name") else {"name": space})
    raise UserError(f"--resume: sweep {name} cannot be continued: its state {bad} is "
                    f"truncated or unreadable; close its runs with python -m platform.sweep --repair{uri}, then start "
                    f"a new sweep: {start}")


def resume_command(experiment: str, storage: str) -> str:
    """The line that continues this sweep, from any directory: its id (the stored invocation supplies the rest) and
    its storage, always (the default storage is under the results home, which is the current directory unless
    FEDSWEEP_HOME says otherwise)."""
    import shlex

    return f"python -m platform.sweep --resume {experiment} --storage-path {shlex.quote(storage)}"


LEASE_FILE = "fedsweep_driver.lease"  # in the Tune experiment directory: the live driver (platform/stages/lease.py)
_LEASES: list = []  # the leases this process holds, let go by releasing_leases


def claim_sweep(directory: str):
    """Take the lease of the sweep in ``directory`` for this driver: one driver per sweep. A live driver's lease
    refuses this one in one line naming it; a stale lease (its driver gone, or not renewed for a minute) is taken
    over with one line saying so. Let go by :func:`releasing_leases` on every exit path."""
    from platform.stages.lease import Lease, LeaseHeld

    sweep = os.path.basename(directory.rstrip("/"))
    try:
        lease = Lease.acquire(join_storage(directory, LEASE_FILE))
    except LeaseHeld as held:
        raise UserError(f"--resume: sweep {sweep} is being run by driver {held.holder.describe()}; one driver runs a "
                        f"sweep at a time: wait for it to end, or stop it (Ctrl-C, or kill -INT {held.holder.pid} on "
                        f"{held.holder.host}) and --resume then") from None
    _LEASES.append(lease)
    if lease.taken_from:
        holder, why = lease.taken_from
        print(f"note: sweep {sweep}: took over the lease of driver {holder.driver} (since "
              f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(holder.since))}): {why}",
              file=sys.stderr, flush=True)
    return lease


def releasing_leases(fn):
    """``fn`` with every sweep lease it took let go when it returns or raises (a kill -9 leaves the lease, stale)."""
    import functools

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        held = len(_LEASES)
        try:
            return fn(*args, **kwargs)
        finally:
            while len(_LEASES) > held:
                _LEASES.pop().release()

    return wrapped


def live_driver(directory: Optional[str]) -> Optional[str]:
    """``host:pid since ...`` of the live driver holding the lease of the sweep in ``directory``, else None."""
    if not directory:
        return None
    from platform.stages.lease import live_holder

    try:
        holder = live_holder(join_storage(directory, LEASE_FILE))
    except OSError:
        return None
    return holder.describe() if holder else None


def driver_id() -> str:
    """This driver process as ``<host>:<pid>``, tagged on the parent run so that ``--repair`` can tell a live sweep
    from one whose driver died."""
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def _driver_alive(driver: str) -> Optional[bool]:
    """Whether the driver ``<host>:<pid>`` runs; None when it ran on another machine (this one cannot tell)."""
    import socket

    host, _, pid = driver.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def repair_sweep(args) -> int:
    """``--repair``: every sweep whose parent is RUNNING but whose driver (on this machine) is gone gets its parent
    and open child runs closed as interrupted. Sweeps driven from other machines are listed, not touched."""
    from platform.results.tracking import Tracker, check_tracking_uri, close_orphan_runs, resolve_tracking_uri

    uri = resolve_tracking_uri(args.tracking_uri)
    check_tracking_uri(uri)
    client = Tracker(uri, "").client
    experiments = [e.experiment_id for e in client.search_experiments()]
    parents = [r for r in (client.search_runs(experiments, "attributes.status = 'RUNNING'", max_results=10000)
                           if experiments else [])
               if TAG_PARENT_RUN not in r.data.tags and TAG_SEARCH_SPACE in r.data.tags]
    closed = 0
    for parent in parents:
        driver = parent.data.tags.get(TAG_DRIVER, "")
        alive = _driver_alive(driver) if driver else False
        name = f"{parent.data.tags[TAG_SEARCH_SPACE]} {parent.info.run_name} ({parent.info.run_id})"
        leased = live_driver(parent.data.tags.get(TAG_SWEEP_DIR))
        if leased:  # a driver holds the sweep's lease (it may not have tagged the parent yet)
            print(f"running: {name}, driver {leased} (its lease is live)")
            continue
        if alive:
            print(f"running: {name}, driver {driver}")
            continue
        if alive is None:
            print(f"not touched: {name}: its driver {driver} ran on another machine; run --repair there")
            continue
        tracker = Tracker(uri, parent.data.tags[TAG_SEARCH_SPACE])
        children = close_orphan_runs(tracker, parent.info.run_id)
        tracker.set_tag(parent.info.run_id, TAG_STATUS, STATUS_INTERRUPTED)
        tracker.end_run(parent.info.run_id, "KILLED")
        closed += 1
        print(f"closed: {name} and {children} trial run(s), as interrupted (its driver {driver or '?'} is gone)")
    print(f"repaired {closed} sweep(s) in {uri}")
    return 0
