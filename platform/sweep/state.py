"""A sweep's resume and repair state: the STATE_FILE in its Tune experiment directory (the MLflow parent run, the
store, the invocation ``--resume`` restores, the status, the scenario cells that finished), finding the sweep that
``--resume`` continues and the line that continues it, and ``--repair`` of sweeps whose driver died.
"""
from __future__ import annotations

import json
import os
import time
from typing import Optional

from platform.cli import results_home
from platform.errors import UserError
from platform.config.run_schema import (STATUS_COMPLETED, STATUS_INTERRUPTED, STATUS_RUNNING, TAG_DRIVER,
                                        TAG_PARENT_RUN, TAG_SEARCH_SPACE, TAG_STATUS)
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
                        and st.isfile(st.join(storage, d, STATE_FILE))
                        and read_state(st.join(storage, d)).get("status") != STATUS_COMPLETED)
    return st.join(storage, candidates[-1]) if candidates else None


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

    return {**stored, "git_commit": git_commit()}


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
        os.makedirs(directory)
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


def resume_command(experiment: str, storage: str) -> str:
    """The line that continues this sweep, from any directory: its id (the stored invocation supplies the rest) and
    its storage, always (the default storage is under the results home, which is the current directory unless
    FEDSWEEP_HOME says otherwise)."""
    import shlex

    return f"python -m platform.sweep --resume {experiment} --storage-path {shlex.quote(storage)}"


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
