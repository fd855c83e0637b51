"""What stops a sweep from outside its trials, and how it closes what it opened.

A full disk (ENOSPC anywhere: Tune's state, the MLflow store, the stage cache, the Optuna storage), a store locked by
another process past its wait (tried again for 30 s, :mod:`platform.results.store_faults`), the loss of the driver's
own Ray node (its raylet killed), any other exception in the driver: the sweep cannot go on. It closes every run it
opened (the open trials' runs interrupted; the parent failed, or interrupted when its node was lost), prints one line
saying why with the file that keeps the traceback, then the line that continues it, and exits 1. From the fault on,
what Ray and the libraries write to stdout and stderr goes to that file, not the console (:func:`quiet_console`).

Where MLflow cannot close the runs (the disk still full) a SQLite store's runs are closed in place
(:func:`~platform.results.store_faults.close_runs_in_place`); where even that fails (the store still locked) a second
line says so and names the ``--repair`` that closes them once the store is back: the parent stays RUNNING under a
driver that has exited, which is what ``--repair`` looks for.

The node: Ray notices a lost raylet seconds later and then ends the driver's process from C++ (exit 1, no Python
code run, every run left RUNNING), so a thread polls the raylet's process (:func:`watch_ray_node`) and interrupts the
main thread at once (SIGUSR2, raising :class:`NodeLost`) to close the runs before that.
"""
from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import tempfile
import threading
import time
from typing import Callable, Optional

from platform.cli import sqlite_path
from platform.config.run_schema import TAG_STOPPED_BY
from platform.errors import EnvironmentFault, disk_full, error_line, exception_chain
from platform.reaper import start_time

POLL_S = 0.2  # how often the watch looks at the raylet's process
LOG_NAME = "driver.log"  # in the sweep's Tune directory: the traceback of what stopped it, and Ray's lines after


class NodeLost(KeyboardInterrupt):
    """The driver's own Ray node is gone (its raylet died), raised in the main thread by :func:`watch_ray_node`. An
    interrupt, so that every place that closes runs on Ctrl-C closes them, and Tune, which cleans up through Ray
    after an ``Exception``, leaves the dead node alone."""

    def __init__(self, line: str):
        super().__init__(line)
        self.line = line


_WATCH: dict = {"stop": None, "lost": None, "previous": None, "printer": None}


def watch_ray_node(log_dirs=()) -> Optional[int]:
    """Watch the raylet of the Ray node this driver is connected to (a local instance's, or this machine's node of a
    cluster), from a daemon thread (a pidfd, else every :data:`POLL_S` s); when it dies, quiet the console into a log
    in the first of ``log_dirs`` that takes it (:func:`quiet_console`: Ray's dump of the dead raylet's log goes
    there) and send SIGUSR2 to the main thread, whose handler raises :class:`NodeLost`. Ray turns an interrupt raised
    inside its calls into a plain KeyboardInterrupt, and Tune may end its run quietly on one: :func:`node_lost` says
    what happened. Returns the raylet's pid; None (nothing watched) off the main thread or where the raylet is not a
    process of this machine."""
    if threading.current_thread() is not threading.main_thread():
        return None
    unwatch_ray_node()
    pid = _raylet_pid()
    started = start_time(pid) if pid else None
    if started is None:
        return None
    stop = threading.Event()
    _WATCH.update(stop=stop, lost=None, previous=signal.signal(signal.SIGUSR2, _on_node_lost))
    main = threading.main_thread().ident
    try:  # readable the moment the process ends (Linux 5.3): ahead of Ray's own dump of the raylet's log
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):
        handle = None

    def ended() -> bool:
        if handle is None:
            return stop.wait(POLL_S) is False and start_time(pid) != started
        return bool(select.select([handle], [], [], POLL_S)[0])

    def watch() -> None:
        try:
            while not stop.is_set():
                if ended() and not stop.is_set():
                    _WATCH["lost"] = f"this sweep's Ray node was lost: its raylet (pid {pid}) died"
                    quiet_console(log_dirs)
                    signal.pthread_kill(main, signal.SIGUSR2)
                    return
        finally:
            if handle is not None:
                os.close(handle)

    threading.Thread(target=watch, name="watch-ray-node", daemon=True).start()
    _route_ray_messages(lambda: start_time(pid) != started, log_dirs)
    return pid


def _route_ray_messages(node_gone: Callable[[], bool], log_dirs) -> None:
    """Ray's messages to the driver (its dump of a dead raylet's log among them) go to the log of
    :func:`quiet_console` once ``node_gone()``: checked as each is printed, so none reaches the console first,
    whichever thread the scheduler runs first. Undone by :func:`unwatch_ray_node`; left alone where Ray prints
    otherwise."""
    try:
        from ray._private import worker
    except ImportError:
        return
    original = getattr(worker, "print_to_stdstream", None)
    if original is None:
        return

    def print_to_stdstream(*args, **kwargs):
        if node_gone():
            quiet_console(log_dirs)
        return original(*args, **kwargs)

    worker.print_to_stdstream = print_to_stdstream
    _WATCH["printer"] = (worker, original)


def unwatch_ray_node() -> None:
    """Stop the watch (a sweep closing up: a node that dies while it closes interrupts nothing)."""
    if _WATCH["stop"] is not None:
        _WATCH["stop"].set()
        with contextlib.suppress(ValueError, TypeError):  # not the main thread; a handler Python did not set
            signal.signal(signal.SIGUSR2, _WATCH["previous"] or signal.SIG_DFL)
    if _WATCH.get("printer"):
        module, original = _WATCH["printer"]
        module.print_to_stdstream = original
    _WATCH.update(stop=None, previous=None, lost=None, printer=None)


def node_lost() -> Optional[str]:
    """The line of this driver's Ray node lost, once :func:`watch_ray_node` has seen its raylet die; else None."""
    return _WATCH["lost"]


def _on_node_lost(signum, frame):
    if _WATCH["lost"] and _WATCH["stop"] is not None and not _WATCH["stop"].is_set():
        _WATCH["stop"].set()
        raise NodeLost(_WATCH["lost"])


def _raylet_pid() -> Optional[int]:
    """The pid of the raylet this driver's Ray talks to: the process a local instance started, else the process of
    this machine whose command line names the node's raylet socket; None when there is none."""
    try:
        from ray._private import worker

        node = getattr(worker, "_global_node", None)
    except ImportError:
        return None
    started = (getattr(node, "all_processes", None) or {}).get("raylet")
    if started:
        return getattr(getattr(started[0], "process", None), "pid", None)
    socket_name = getattr(node, "raylet_socket_name", None)
    if not socket_name or not os.path.isdir("/proc"):
        return None
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"raylet") and f"--raylet_socket_name={socket_name}".encode() in argv:
            return int(entry)
    return None


# ---- the console, once the sweep is stopping ----

_CONSOLE: dict = {"stream": None, "log": None, "fd": None, "stderr": None}


def quiet_console(directories=()) -> Optional[str]:
    """Send what is written to stdout and stderr from here on (Ray's C++ logging and its messages to the driver, the
    libraries' tracebacks) to a log file, keeping the console for :func:`say`: the file ``driver.log`` in the first of
    ``directories`` that takes it, else in the system's temporary directory (a full disk refuses the first). Only in
    a command's own process (stderr is the process's); returns the log's path (None when no file could be made)."""
    if _CONSOLE["log"]:
        return _CONSOLE["log"]
    local = [d for d in directories if d and "://" not in d]  # a bucket holds no log file
    for directory in (*local, tempfile.gettempdir()):
        path = os.path.join(directory, LOG_NAME if directory in local else f"fedsweep-{os.getpid()}-{LOG_NAME}")
        try:
            os.makedirs(directory, exist_ok=True)
            log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.write(log, f"---- {time.strftime('%Y-%m-%d %H:%M:%S')} the sweep is stopping ----\n".encode())
        except OSError:
            continue
        break
    else:
        return None
    _CONSOLE["log"] = path
    if sys.stderr is sys.__stderr__ and sys.stdout is sys.__stdout__:  # a command's process, not a test's capture
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
            sys.stderr.flush()
            _CONSOLE["fd"] = (os.dup(1), os.dup(2))
            _CONSOLE["stream"] = open(_CONSOLE["fd"][1], "w", buffering=1, closefd=False)
            os.dup2(log, 1)  # Ray prints its messages to the driver (the raylet's death) on stdout
            os.dup2(log, 2)
    os.close(log)
    return path


def restore_console() -> None:
    """Undo :func:`quiet_console`: stdout and stderr are the console again."""
    if _CONSOLE["fd"] is not None:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
            sys.stderr.flush()
            for target, saved in enumerate(_CONSOLE["fd"], start=1):
                os.dup2(saved, target)
                os.close(saved)
    _CONSOLE.update(stream=None, log=None, fd=None)


def say(line: str) -> None:
    """One line on the console's stderr (after :func:`quiet_console`, the console itself); a closed terminal (the
    hang-up of SIGHUP) takes nothing and raises nothing."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=_CONSOLE["stream"] or sys.stderr, flush=True)


def _append(path: Optional[str], text: str) -> None:
    if path:
        with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as fh:
            fh.write(text)


# ---- what stopped the sweep ----

class Stop:
    """What stopped a sweep: its line and the log that keeps the traceback."""

    def __init__(self, line: str, log: Optional[str]):
        self.line, self.log = line, log


def stopping(err: BaseException, directories, tracking_uri: str, optuna_url: Optional[str] = None) -> Stop:
    """The sweep cannot go on after ``err``: its one line (:func:`fault_line`; a full disk found among
    ``directories`` and the stores when the error names no file), the console quieted (:func:`quiet_console`) and
    the traceback appended to the log."""
    import traceback

    log = quiet_console(directories)
    _append(log, "".join(traceback.format_exception(type(err), err, err.__traceback__)))
    return Stop(fault_line(err, tracking_uri, optuna_url, places=directories), log)


def fault_line(err: BaseException, tracking_uri: str, optuna_url: Optional[str] = None, places=()) -> str:
    """``err`` in one line: the node lost, the line of an :class:`EnvironmentFault` in its chain (a store locked past
    its wait), a full disk naming the file it could not write (the MLflow store or the Optuna storage for SQLite's
    "database or disk is full"; else the first of ``places`` and the stores whose disk has no room left), else
    :func:`platform.errors.error_line`."""
    if isinstance(err, NodeLost) or node_lost():  # what Ray raises once its node is gone says less
        return node_lost() or err.line
    if any(isinstance(item, EnvironmentFault) for item in exception_chain(err)):
        return error_line(err)
    full = disk_full(err)
    if full is None:
        return error_line(err)
    stores = [sqlite_path(tracking_uri), sqlite_path(optuna_url or "")]
    if not full:
        modules = {type(item).__module__.split(".")[0] for item in exception_chain(err)}
        full = (stores[0] if "mlflow" in modules else stores[1] if "optuna" in modules else None) or \
            _no_room([*places, *stores])
    elif ".tmp-" in os.path.basename(full):  # a file written whole through a temporary one: its directory
        full = os.path.dirname(full)
    return f"the disk holding {full or 'a file the sweep writes'} is full (ENOSPC: no space left on device)"


def _no_room(places) -> str:
    """The first of ``places`` (local paths; a missing one stands for its nearest existing ancestor) on a disk with
    less than 64 KiB left; "" when none is."""
    for place in places:
        probe = place
        while probe and "://" not in probe and not os.path.exists(probe) and os.path.dirname(probe) != probe:
            probe = os.path.dirname(probe)
        try:
            info = os.statvfs(probe)
        except (OSError, TypeError, ValueError):
            continue
        if info.f_bavail * info.f_frsize < 64 * 1024:
            return place
    return ""


# ---- closing ----

def close_sweep(tracker, parent_run_id: str, status: str, status_tag: str, *, stop: Optional[Stop],
                started_ms: int, record: Callable[[], None], publish: Callable[[], None]) -> Optional[str]:
    """Close what the sweep opened, whatever stopped it: ``record`` its status in its state file, end every child run
    still RUNNING (interrupted), tag the parent with ``status_tag`` (and ``stop``'s line) and end it with ``status``
    (an MLflow status), then ``publish`` its closing lines and artifacts when nothing stopped it. A run MLflow cannot
    end (a full disk) is ended in place; returns why the runs are still open when even that failed, else None."""
    from platform.config.run_schema import TAG_STATUS
    from platform.results.tracking import close_orphan_runs

    try:
        record()
    except Exception as err:  # noqa: BLE001 - the state keeps "running": --resume finds the sweep all the same
        if stop is None:
            say(f"warning: the sweep's state file was not updated ({fault_line(err, tracker.uri)})")
    try:
        earlier, own = close_orphan_runs(tracker, parent_run_id, started_since_ms=started_ms)
        if earlier:
            say(f"closed {earlier} run(s) left RUNNING by an earlier driver that was killed")
        if own and stop is None:  # this driver's own: created as it was interrupted, before the callback held them
            say(f"closed {own} trial run(s) this sweep was starting when it stopped, as interrupted")
        tracker.set_tag(parent_run_id, TAG_STATUS, status_tag)
        if stop is not None:
            tracker.set_tag(parent_run_id, TAG_STOPPED_BY, stop.line[:5000])
        tracker.end_run(parent_run_id, status)
    except Exception as err:  # noqa: BLE001 - a full disk, a store locked past its wait: closed in place
        unclosed = _close_in_place(tracker.uri, parent_run_id, status, status_tag, err)
        if unclosed:
            return unclosed
    if stop is None:
        with contextlib.suppress(Exception):  # a resumed sweep: what stopped its last driver is over
            if TAG_STOPPED_BY in tracker.client.get_run(parent_run_id).data.tags:
                tracker.client.delete_tag(parent_run_id, TAG_STOPPED_BY)
        with contextlib.suppress(OSError):  # a console gone with its terminal (SIGHUP): the runs are closed already
            publish()
    return None


def _close_in_place(uri: str, parent_run_id: str, status: str, status_tag: str, err: BaseException) -> Optional[str]:
    """:func:`close_runs_in_place` after MLflow failed with ``err``; None when it closed them, else why not."""
    import sqlite3

    from platform.results.store_faults import close_runs_in_place

    why = fault_line(err, uri)
    try:
        if close_runs_in_place(uri, parent_run_id, status, status_tag) is not None:
            return None
    except sqlite3.Error as again:
        why = f"{why}; then {again}"
    return why


def abandon_run(tracker, run_id: str) -> None:
    """End ``run_id`` FAILED (in place where MLflow cannot): a parent run whose creation was cut short."""
    from platform.config.run_schema import STATUS_FAILED, TAG_STATUS

    try:
        tracker.set_tag(run_id, TAG_STATUS, STATUS_FAILED)
        tracker.end_run(run_id, "FAILED")
    except Exception as err:  # noqa: BLE001 - what raised first is what the command reports
        _close_in_place(tracker.uri, run_id, "FAILED", STATUS_FAILED, err)


def report_stop(stop: Stop, unclosed: Optional[str], resume: Optional[str], tracking_uri: str) -> int:
    """The lines of a sweep that stopped: why (and where the traceback is), that its runs could not be closed and the
    ``--repair`` that closes them (when so), the line that continues it; then the console is the console again.
    Returns the exit code, 1."""
    say(f"error: {stop.line}" + (f" (traceback: {stop.log})" if stop.log else ""))
    if unclosed:
        say(repair_line(unclosed, tracking_uri))
    say(f"continue with: {resume}" if resume else "nothing to continue: run the command again")
    restore_console()
    return 1


def repair_line(unclosed: str, tracking_uri: str) -> str:
    """The line of runs left RUNNING because closing them failed (``unclosed``: why), naming the ``--repair`` that
    closes them once the store works again."""
    import shlex

    return (f"error: the sweep's runs are still RUNNING: closing them failed too ({unclosed}); once the store is "
            f"back, close them with: python -m platform.sweep --repair --tracking-uri {shlex.quote(tracking_uri)}")
