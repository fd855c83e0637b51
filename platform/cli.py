"""What the command-line entry points share: error reporting, Ray connection, quiet logging."""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
import warnings
from typing import Callable, Optional

from platform.errors import UserError


def main_wrapper(fn: Optional[Callable[[list[str] | None], int]] = None, *, interrupted: str = "interrupted"):
    """Turn a :class:`UserError` into one line on stderr and exit code 2 (no traceback), and an interrupt (Ctrl-C,
    SIGTERM) into exit code 130 with the line ``interrupted``, unless the command has said what the interrupt left
    already (it marks the exception ``announced``). Use as ``@main_wrapper`` or ``@main_wrapper(interrupted=...)``."""
    if fn is None:
        return functools.partial(main_wrapper, interrupted=interrupted)

    @functools.wraps(fn)
    def wrapped(argv=None) -> int:
        try:
            return fn(argv)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            return err.exit_code
        except KeyboardInterrupt as err:
            if not getattr(err, "announced", False):
                print(interrupted, file=sys.stderr)
            return 130

    return wrapped


def in_ray_job() -> bool:
    """True when running as a ``ray job submit`` driver, whose working directory Ray deletes later."""
    return "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ


def results_home() -> str:
    """Where results land by default: $FEDSWEEP_HOME; under a Ray job ~/fedsweep; else the working directory."""
    if os.environ.get("FEDSWEEP_HOME"):
        return os.path.abspath(os.path.expanduser(os.environ["FEDSWEEP_HOME"]))
    if in_ray_job():
        return os.path.join(os.path.expanduser("~"), "fedsweep")
    return os.getcwd()


def sqlite_path(uri: str) -> Optional[str]:
    """The absolute file path of a ``sqlite:///`` store (MLflow or Optuna), None for any other URI."""
    return os.path.abspath(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def check_writable_dir(path: str, flag: str) -> None:
    """Refuse, before anything is written, a directory that cannot be created or written: the nearest existing
    ancestor must be a directory in which a file can really be created (one is written and removed). One line naming
    ``flag``.

    Not ``os.access``: for root it says yes to procfs and sysfs (``/proc``, ``/sys``), to a read-only mount and to a
    full disk, where the first real write then fails deep inside a sweep."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        raise UserError(f"{flag}: {path} is not a directory ({probe} is a file)")
    reason = probe_write(probe)
    if reason:
        raise UserError(f"{flag}: {path} is not writable (cannot create a file in {probe}: {reason}); give a "
                        f"directory this user can write")


def probe_write(directory: str) -> Optional[str]:
    """Create and remove a small file in ``directory``; None when that worked, else why not (one short line)."""
    import tempfile

    try:
        handle, name = tempfile.mkstemp(prefix=".fedsweep-probe-", dir=directory)
    except OSError as err:
        return err.strerror or type(err).__name__
    try:
        with os.fdopen(handle, "wb") as fh:
            fh.write(b"fedsweep write probe\n")
            fh.flush()
    except OSError as err:
        return err.strerror or type(err).__name__
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)
    return None


def check_given(value: Optional[str], flag: str, allowed: str) -> None:
    """Refuse a flag given an empty (or blank) value, which would otherwise fall back silently to its default. One
    line naming ``flag`` and ``allowed``, what it takes."""
    if value is not None and not value.strip():
        raise UserError(f"{flag}: is empty; give {allowed}, or leave the flag out for its default")


def quiet_libraries() -> None:
    """Keep the console to our own lines: Ray, Tune and MLflow log warnings only."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "0")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    # a line Ray forwards from a worker or the raylet comes without colour codes: among the sweep's own lines, and
    # in a log file, "\x1b[33m(raylet)\x1b[0m" is noise
    os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    for name in ("ray", "ray.tune", "ray.train", "mlflow", "alembic", "optuna"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # a failed write to a SQLite store (locked, a full disk): MLflow logs its whole traceback, then raises it to the
    # command, which waits out a lock and reports the rest in one line
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    # ray.init's notice that a new local instance uses token authentication (Ray's default): not a warning about
    # anything the user did, and a command that refuses its input while Ray starts prints one line only.
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    # Tune's TensorBoard logger warns "NaN or Inf found in input tensor." for every infinite result: ε = ∞ (the
    # non-private arm of a DP sweep) is a value, and a NaN is reported by the sweep itself (status diverged).
    logging.getLogger("tensorboardX.x2num").setLevel(logging.ERROR)
    # --resume: Tune replays a restored trial's results to the Optuna searcher, which already stored those steps and
    # says so once a step ("The reported value is ignored because this `step=1` is already reported."); the value
    # it keeps is the same one, so the line says nothing to the user
    warnings.filterwarnings("ignore", message=r"The reported value is ignored because this `step=\d+` is already "
                                              r"reported", category=UserWarning)


def leave_ray_job_working_dir(home: str) -> None:
    """Under ``ray job submit --working-dir``, move to the stable results home.

    The job's working directory is a temporary copy that Ray may delete while the job still runs (it
    can vanish once the trial actors release it, breaking ``os.getcwd()``), and the packages are loaded
    from it. Everything the sweep reads from it (the search-space file) is loaded before this call, and so
    is every module of the two packages: one imported later, where it is first needed, would be gone.
    """

    if in_ray_job():
        _import_every_module()
        os.makedirs(home, exist_ok=True)
        os.chdir(home)


def _import_every_module() -> None:
    """Import every module of ``platform`` and ``algorithms`` now (the entry points' ``__main__`` excepted)."""
    import importlib
    import pkgutil

    for name in ("platform", "algorithms"):
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            if info.name.rsplit(".", 1)[-1] != "__main__" and "._boot" not in info.name:
                importlib.import_module(info.name)


def add_plan_arguments(parser, what: str) -> None:
    """``--preset``, ``--stand-in``, ``--dry-run``, ``--estimate`` and ``--gpus``, the same on ``platform.sweep`` and
    ``platform.run``; ``what`` is what the command runs ("the sweep", "the run")."""
    parser.add_argument("--preset", metavar="NAME",
                        help="a search space's preset (its presets: block), e.g. paper: the document's own setting "
                             "(docs/reference/paper_settings.md); default: the space's embedded setting")
    parser.add_argument("--stand-in", action="store_true",
                        help="replace every dataset read from files with generated data of the real one's shapes, "
                             "classes and sizes (to try, test or cost a setting whose files are absent)")
    parser.add_argument("--dry-run", action="store_true",
                        help="load and check the config (preset and --set applied), print it resolved (a sweep: with "
                             "its cells, trials, seeds, rounds and resources per trial), and exit without starting Ray")
    parser.add_argument("--estimate", action="store_true",
                        help=f"run the first rounds of one trial on the cluster it joins (--address; else a local "
                             f"one), with the trial's own resources and stand-in data where the files are absent; "
                             f"print where it ran, each round's seconds, peak memory and the data's sizes, and predict "
                             f"{what}'s wall time (with a search space: its whole sweep) on the device it measured: "
                             f"GPU-hours only when measured on a GPU; writes nothing (its stage cache is temporary "
                             f"unless --cache-dir); then exit")
    parser.add_argument("--gpus", type=int, metavar="N",
                        help="--estimate: the GPUs to predict for (default: the cluster's, at least 1)")


def add_ray_arguments(parser) -> None:
    """``--address`` and ``--ray-dashboard``, the same on every command that runs on Ray."""
    parser.add_argument("--address", help=f"Ray cluster address (default: RAY_ADDRESS, else the cluster a `ray start` "
                                          f"on this machine runs, else a new local instance; 'local': always a new "
                                          f"one); one where no cluster answers is refused within {PROBE_TIMEOUT_S} s "
                                          f"(a TCP probe), or {JOIN_TIMEOUT_S} s more where something else answers")
    parser.add_argument("--ray-dashboard", action="store_true",
                        help="start Ray's dashboard (http://127.0.0.1:8265) with a local instance; off by default: it "
                             "costs seconds of start-up and a dozen processes (a cluster keeps its own)")


def _joining(address: str | None) -> bool:
    """True if ``connect_ray`` would join an existing cluster rather than start a new local instance."""
    return address != "local" and bool(address or os.environ.get("RAY_ADDRESS") or _running_local_cluster())


# What every worker process of a local instance imports before it accepts work (Ray's ``preload_python_modules``):
# the actors' module, with torch and every method. Ray pre-starts a worker per CPU when the driver connects, so the
# workers that become the first actors import torch while the driver still imports and checks its config, instead
# of after it has created them.
WORKER_PRELOAD = ("platform.runtime.actors",)


# How long a worker of a local instance may stay idle before Ray may stop it (Ray's default: 1 s). Ray stops idle
# workers beyond one per free CPU; the placement group a run or trial reserves takes its CPUs, so once it exists a
# worker Ray pre-started (and that has imported torch, see WORKER_PRELOAD) and that has waited 1 s for the command to
# load its data was stopped before the actors asked for it, and an actor waited for a fresh process instead (about 2 s
# of torch import; in 1 run of 2 to 3 on 2 cores, depending on when Ray's 200 ms check fell).
IDLE_WORKER_KEEP_MS = 30_000


def ray_init_options(dashboard: bool) -> dict:
    return dict(address="local", include_dashboard=dashboard, log_to_driver=False, configure_logging=True,
                logging_level=logging.WARNING,
                _system_config={"preload_python_modules": list(WORKER_PRELOAD),
                                # the workers start (and import torch) when the raylet is up, not only once the
                                # driver has connected: about 0.8 s earlier; the same number (one per CPU)
                                "enable_worker_prestart": True,
                                "idle_worker_killing_time_threshold_ms": IDLE_WORKER_KEEP_MS})


def _start_local_ray(dashboard: bool) -> None:
    """``ray.init`` of a new local instance; without the dashboard, also without the three Ray processes a local
    run never uses (:func:`lean_head`)."""
    import ray

    with contextlib.nullcontext() if dashboard else lean_head():
        ray.init(**ray_init_options(dashboard))


@contextlib.contextmanager
def lean_head():
    """Start a local head node without Ray's API server, autoscaler monitor and log monitor.

    Its dashboard agent also gets a free port for its HTTP server instead of Ray's fixed 52365: on a machine where
    another Ray instance runs, the agent retried that port for 3.4 s (6 tries with backoff), and the raylet, which
    waits for its agent, registered that much later.

    Ray starts all three on a local ``ray.init`` even without the dashboard, and has no option to leave them out:
    the API server (the dashboard head, here serving only usage statistics) is waited for by ``ray.init`` (it imports
    aiohttp, opentelemetry and pydantic, as does ``ray.init``'s own check of the dashboard's dependencies: about
    2 s of CPU on the critical path on 2 cores), the monitor only reports a single node's load for ``ray status``,
    and the log monitor forwards worker output to drivers, which ours turn off (``log_to_driver=False``). Node's
    two methods are patched while the node starts; with another Ray (no such methods) nothing is changed."""
    try:
        from ray._private import node as ray_node

        original_init, original_api = ray_node.Node.__init__, ray_node.Node.start_api_server
    except (ImportError, AttributeError):
        yield
        return

    def __init__(self, ray_params, head=False, *args, **kwargs):
        if head and hasattr(ray_params, "no_monitor") and hasattr(ray_params, "include_log_monitor"):
            ray_params.no_monitor = True
            if ray_params.include_log_monitor is None:
                ray_params.include_log_monitor = False
        if head and getattr(ray_params, "dashboard_agent_listen_port", None) == _RAY_AGENT_PORT:
            ray_params.dashboard_agent_listen_port = _free_port()
        original_init(self, ray_params, head, *args, **kwargs)

    def start_api_server(self, *args, **kwargs):
        self._webui_url = None  # as when Ray's API server fails to start

    ray_node.Node.__init__, ray_node.Node.start_api_server = __init__, start_api_server
    try:
        yield
    finally:
        ray_node.Node.__init__, ray_node.Node.start_api_server = original_init, original_api


_RAY_AGENT_PORT = 52365  # ray_constants.DEFAULT_DASHBOARD_AGENT_LISTEN_PORT


def _free_port() -> int:
    """A TCP port free on this host now (the kernel's choice)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


class EarlyRay:
    """A new local Ray instance starting in a background thread while the command imports torch and checks its
    input (Ray's start, about 4 s on 2 cores, is mostly waiting for its processes: it overlaps the driver's imports).

    The thread stays alive, blocked, for the life of the process: Ray starts its GCS and raylet with
    ``PR_SET_PDEATHSIG``, which fires when the *thread* that started them ends, not the process. The reaper
    (``platform/reaper.py``) starts before ``ray.init``, so a command that refuses its input and exits while Ray is
    still starting (:func:`exit_command`) leaves nothing running."""

    def __init__(self, dashboard: bool):
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._start, args=(dashboard,), name="start-ray", daemon=True)
        self.thread.start()

    def _start(self, dashboard: bool) -> None:
        try:
            _start_reaper()
            import ray

            logging.getLogger("ray._private.worker").addFilter(_NotMainThreadWarning())
            _start_local_ray(dashboard)
            tell_reaper()
        except BaseException as err:  # noqa: BLE001 - raised in the main thread by wait()
            self.error = err
        finally:
            self.done.set()
        threading.Event().wait()  # never returns: see the class docstring

    def wait(self) -> None:
        self.done.wait()
        if self.error is not None:
            raise self.error


class _NotMainThreadWarning(logging.Filter):
    """Drops ray.init's warning that it set no SIGTERM handler off the main thread (start_ray_early sets one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


_EARLY: list[EarlyRay] = []


def start_ray_early(address: str | None = None, dashboard: bool = False) -> EarlyRay | None:
    """Start the new local Ray instance that :func:`connect_ray` would start, now, in the background (see
    :class:`EarlyRay`); None when the command joins a cluster (``ray job submit``, RAY_ADDRESS, a local ``ray start``:
    there everything must be imported before the driver connects, see platform.sweep.command) or Ray is already up.

    Only for a command's own process (``main`` called with ``argv=None``): a bad input found while Ray starts ends the
    process at once through :func:`exit_command`, and the reaper stops what Ray had started."""
    if _EARLY:
        return _EARLY[0]
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        return None
    if _joining(address):
        return None
    import signal

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)  # what ray.init sets on the main thread
    _EARLY.append(EarlyRay(dashboard))
    return _EARLY[0]


def _exit_on_sigterm(signum, frame):
    sys.exit(signum)


def connect_ray(address: str | None = None, dashboard: bool = False) -> str:
    """Join the cluster we run in (``ray job submit``, RAY_ADDRESS, or a local ``ray start``), else start one (with
    Ray's dashboard only if ``dashboard``), or wait for the one :func:`start_ray_early` is starting."""
    import ray

    if _EARLY:
        _EARLY[0].wait()
        return "local"
    if ray.is_initialized():
        return "existing"
    if _joining(address):
        _join_cluster(address)
        return "connected"
    _start_reaper()
    _start_local_ray(dashboard)  # a new instance: never a cluster address a dead `ray start` left behind
    tell_reaper()
    return "local"


PROBE_TIMEOUT_S = 5  # the TCP connect to a cluster's address (check_address)
JOIN_TIMEOUT_S = 30  # ray.init joining a cluster whose address answered the probe (_join_cluster)


def _address_source(address: str | None) -> tuple[str, str | None]:
    return ("--address", address) if address else ("RAY_ADDRESS", os.environ.get("RAY_ADDRESS"))


def check_address(address: str | None) -> None:
    """Refuse, before Ray or torch loads, a cluster address nothing answers at: a plain TCP connect to its port (the
    GCS of host:port, the client server of ray://host:port), given up after :data:`PROBE_TIMEOUT_S` s, which Ctrl-C
    stops at once. None, ``local`` and ``auto`` are Ray's to resolve. One line naming the flag (or RAY_ADDRESS)."""
    import socket

    flag, target = _address_source(address)
    if not target or target in ("local", "auto"):
        return
    host, _, port = (target[len("ray://"):] if target.startswith("ray://") else target).rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [::1]:6379
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"{flag}: {target!r} is not a cluster address; allowed: host:port of the head node (port "
                        f"6379 by default), ray://host:port, 'auto' or 'local'")
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as err:
        reason = f"no answer in {PROBE_TIMEOUT_S:g} s" if isinstance(err, socket.timeout) else err.strerror or repr(err)
        raise UserError(f"{flag}: no Ray cluster at {target} (tried a TCP connect to {host}:{port}: {reason}); give "
                        f"the address of a running cluster's head (host:6379), or 'local' for a new instance") from None


def _join_cluster(address: str | None) -> None:
    """``ray.init`` of the cluster at ``address`` (None: RAY_ADDRESS) once :func:`check_address` passed, in a daemon
    thread: Ray retries an address that accepts connections but is no cluster without end, in C++ that holds Ctrl-C
    back; here the wait ends after :data:`JOIN_TIMEOUT_S` s (one line naming the flag) or at Ctrl-C."""
    check_address(address)  # before Ray is imported
    import signal

    import ray

    done, failure = threading.Event(), []

    def join() -> None:
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=True, logging_level=logging.WARNING)
        except BaseException as err:  # noqa: BLE001 - raised in the main thread below
            failure.append(err)
        finally:
            done.set()

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)  # what ray.init sets when it runs on the main thread
    logging.getLogger("ray._private.worker").addFilter(_NotMainThreadWarning())
    threading.Thread(target=join, name="join-ray", daemon=True).start()
    flag, target = _address_source(address)
    if not done.wait(JOIN_TIMEOUT_S):
        raise UserError(f"{flag}: no Ray cluster answered at {target} within {JOIN_TIMEOUT_S:g} s (its port accepts "
                        f"connections); give the address of a running cluster's head, or 'local' for a new instance")
    if failure and isinstance(failure[0], ConnectionError):  # something answers there, but no Ray cluster
        reason = (str(failure[0]).strip().splitlines() or [type(failure[0]).__name__])[0][:200]
        raise UserError(f"{flag}: no Ray cluster at {target} ({reason}); give the address of a running cluster's "
                        f"head, or 'local' for a new instance")
    if failure:
        raise failure[0]


def run_command(main: Callable[[list[str] | None], int]) -> None:
    """``if __name__ == "__main__"`` of a command: run ``main()`` (arguments from sys.argv) and end the process through
    :func:`exit_command`, also after an unexpected exception: one line saying what it was
    (:func:`platform.errors.error_line`) and where its traceback is kept (:func:`keep_traceback`), exit code 1."""
    try:
        code = main()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
    except BaseException as err:  # noqa: BLE001 - one line, the traceback in a file, then the same fast exit
        from platform.errors import error_line

        where = keep_traceback(err, main.__module__.removeprefix("platform.").split(".")[0])  # "sweep", "run"
        with contextlib.suppress(OSError, ValueError):  # a closed terminal (SIGHUP) takes no line
            print(f"error: {error_line(err)}" + (f" (traceback: {where})" if where else ""), file=sys.stderr)
        code = 1
    exit_command(code)


def keep_traceback(err: BaseException, name: str, directories=()) -> Optional[str]:
    """Write ``err``'s traceback to ``<dir>/<name>-<time>-<pid>.log`` in the first of ``directories``, then
    ``<results home>/logs``, then the system's temporary directory, that takes it (a full disk refuses the first
    ones); the file's path, None when none did."""
    import tempfile
    import time
    import traceback

    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    file_name = f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    for directory in (*directories, os.path.join(results_home(), "logs"), tempfile.gettempdir()):
        path = os.path.join(directory, file_name)
        try:
            os.makedirs(directory, exist_ok=True)
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(text)
            return path
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(path)
    return None


def exit_command(code: int) -> None:
    """End a command's process with ``code``. With a local Ray instance this process started, leave it to the reaper
    (told every live descendant first) instead of ``ray.shutdown`` and the interpreter's teardown: seconds at every
    exit. Whatever must outlive the process (MLflow runs closed, files written) is done before this is called."""
    if not _REAPER:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    logging.shutdown()
    tell_reaper()
    os._exit(code)


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


def descendant_processes(pid: int) -> list[int]:
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


_REAPER: dict = {}  # the reaper of the local instance this process started: "pipe" (write end), "pid"


def _start_reaper() -> None:
    """Start the watcher (``platform/reaper.py``) that stops the local Ray cluster this process starts once this
    process has exited, even by kill -9: without it Ray's agents linger 60 s (see that module). It stops the
    processes :func:`tell_reaper` lists."""
    if _REAPER:
        return
    import subprocess

    from platform import reaper

    read_end, write_end = os.pipe()  # not inheritable: only this process holds the write end
    try:
        process = subprocess.Popen([sys.executable, "-S", reaper.__file__], stdin=read_end,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(read_end)
    _REAPER.update(pipe=write_end, pid=process.pid)  # the write end stays open for the life of this process


def tell_reaper() -> None:
    """Hand every live descendant of this process (Ray's processes, actor workers included) to the reaper."""
    if not _REAPER:
        return
    from platform import reaper

    lines = "".join(f"{pid}:{start}\n" for pid in descendant_processes(os.getpid())
                    if pid != _REAPER["pid"] and (start := reaper.start_time(pid)) is not None)
    try:
        os.write(_REAPER["pipe"], lines.encode("ascii"))
    except OSError:
        pass
