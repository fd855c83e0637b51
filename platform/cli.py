"""What the command-line entry points share: error reporting, Ray connection, quiet logging."""
from __future__ import annotations

import functools
import logging
import os
import sys
from typing import Callable, Optional

from platform.errors import UserError


def main_wrapper(fn: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Turn a :class:`UserError` into one line on stderr and exit code 2 (no traceback)."""

    @functools.wraps(fn)
    def wrapped(argv=None) -> int:
        try:
            return fn(argv)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            return err.exit_code
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130

    return wrapped


def sqlite_path(uri: str) -> Optional[str]:
    """The absolute file path of a ``sqlite:///`` store (MLflow or Optuna), None for any other URI."""
    return os.path.abspath(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def check_writable_dir(path: str, flag: str) -> None:
    """Refuse, before anything is written, a directory that cannot be created or written: the nearest existing
    ancestor must be a writable directory. One line naming ``flag``."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        raise UserError(f"{flag}: {path} is not a directory ({probe} is a file)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"{flag}: {path} is not writable (no write permission on {probe})")


def quiet_libraries() -> None:
    """Keep the console to our own lines: Ray, Tune and MLflow log warnings only."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "0")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    for name in ("ray", "ray.tune", "ray.train", "mlflow", "alembic", "optuna"):
        logging.getLogger(name).setLevel(logging.WARNING)


def leave_ray_job_working_dir(home: str) -> None:
    """Under ``ray job submit --working-dir``, move to the stable results home.

    The job's working directory is a temporary copy that Ray may delete while the job still runs (we saw
    it vanish once the trial actors released it, breaking ``os.getcwd()``). Everything the sweep reads
    from it (the search-space file) is loaded before this call.
    """
    from platform.tracking import in_ray_job

    if in_ray_job():
        os.makedirs(home, exist_ok=True)
        os.chdir(home)


def add_ray_arguments(parser) -> None:
    """``--address`` and ``--ray-dashboard``, the same on every command that runs on Ray."""
    parser.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, else the cluster a `ray start` "
                                          "on this machine runs, else a new local instance; 'local': always a new one)")
    parser.add_argument("--ray-dashboard", action="store_true",
                        help="start Ray's dashboard (http://127.0.0.1:8265) with a local instance; off by default: it "
                             "costs seconds of start-up and a dozen processes (a cluster keeps its own)")


def connect_ray(address: str | None = None, dashboard: bool = False) -> str:
    """Join the cluster we run in (``ray job submit``, RAY_ADDRESS, or a local ``ray start``), else start one (with
    Ray's dashboard only if ``dashboard``)."""
    import ray

    if ray.is_initialized():
        return "existing"
    joining = address != "local" and bool(address or os.environ.get("RAY_ADDRESS") or _running_local_cluster())
    options = {} if joining else {"include_dashboard": dashboard}
    if not joining:
        address = "local"  # a new instance: never a cluster address a dead `ray start` left behind
    ray.init(address=address, log_to_driver=False, configure_logging=True, logging_level=logging.WARNING, **options)
    if joining:
        return "connected"
    reap_local_ray_on_exit()
    return "local"


def _running_local_cluster() -> bool:
    """True if `ray start` on this machine left its address (Ray's ``ray_current_cluster`` file) and something
    answers there. ``ray.init()`` would otherwise try that address even after the cluster died, and hang."""
    import socket
    import tempfile

    root = os.environ.get("RAY_TMPDIR") or ("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir())
    try:
        with open(os.path.join(root, "ray", "ray_current_cluster")) as fh:
            host, _, port = fh.read().strip().rpartition(":")
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, read from /proc (Linux; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def reap_local_ray_on_exit() -> None:
    """Start the watcher (``platform/_reaper.py``) that stops the local Ray cluster this process just started once
    this process has exited, even by kill -9: without it Ray's agents linger 60 s (see that module)."""
    import subprocess

    from platform import _reaper

    processes = [f"{pid}:{start}" for pid in _descendants(os.getpid())
                 if (start := _reaper.start_time(pid)) is not None]
    if not processes:
        return
    read_end, write_end = os.pipe()  # not inheritable: only this process holds the write end
    try:
        subprocess.Popen([sys.executable, "-S", _reaper.__file__, *processes], stdin=read_end,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(read_end)
    _REAPER_PIPE.append(write_end)  # kept open for the life of this process


_REAPER_PIPE: list[int] = []
