"""MLflow tracking: one experiment per search space, a parent run per sweep, a nested child run per trial.

Every write happens on the driver (the sweep process) through a Tune callback, so trials on remote nodes
never need access to the store. Runs always end with a status: a sweep that fails marks its runs FAILED
rather than leaving them RUNNING.
"""
from __future__ import annotations

import contextlib
import math
import os
import shlex
import subprocess
import sys
from typing import Any, Optional

from platform.cli import check_writable_dir, results_home, sqlite_path
from platform.config.run_schema import (ARTIFACT_ARRAYS, MAX_ARRAY_ELEMENTS, RESULT_ARRAYS, RESULT_DETAILS,
                                        STATUS_INTERRUPTED, TAG_PARENT_RUN, TAG_STATUS, children_filter, infinity_text,
                                        short_value, round_metrics as _round_metrics)
from platform.errors import UserError

DEFAULT_STORE_FILE = "mlflow.db"


def resolve_tracking_uri(cli_uri: Optional[str] = None) -> str:
    """``--tracking-uri``, else $MLFLOW_TRACKING_URI, else a SQLite store in :func:`results_home`."""
    uri = cli_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        home = results_home()
        os.makedirs(home, exist_ok=True)
        uri = f"sqlite:///{os.path.join(home, DEFAULT_STORE_FILE)}"
    return uri


def given_tracking_uri(cli_uri: Optional[str]) -> tuple[str, str]:
    """(the URI :func:`resolve_tracking_uri` gives, without creating the results home it defaults to; the flag or
    variable it came from), for :func:`check_tracking_uri`: an empty ``--tracking-uri`` stays empty, to be refused."""
    if cli_uri is not None:
        return cli_uri, "--tracking-uri"
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], "MLFLOW_TRACKING_URI"
    return f"sqlite:///{os.path.join(results_home(), DEFAULT_STORE_FILE)}", "--tracking-uri"


def check_tracking_uri(uri: str, flag: str = "--tracking-uri") -> None:
    """Refuse, before anything is written, a tracking URI the sweep could not write to: a SQLite store that is no
    SQLite database (:func:`check_sqlite_file`) or in a directory that cannot be written, a scheme MLflow has no
    store for, a server that does not answer, an empty URI. One line naming ``flag``."""
    if not uri.strip():
        raise UserError(f"{flag}: is empty; give an MLflow tracking URI (sqlite:///path/mlflow.db, http://host:5000, "
                        f"a directory), or leave the flag out for its default")
    path = sqlite_path(uri)
    if path:
        check_sqlite_file(path, flag, DEFAULT_STORE_FILE)
        check_writable_dir(os.path.dirname(path), flag)
        return
    if uri.startswith("file:") or "://" not in uri:
        check_writable_dir(uri[len("file://"):] if uri.startswith("file://") else uri, flag)
        return
    saved = {k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    os.environ.update({"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "15"})  # no backoff
    try:
        from mlflow.tracking._tracking_service.utils import _get_store

        _get_store(uri).search_experiments(max_results=1)
    except Exception as err:  # noqa: BLE001 - whatever the store says, in one line
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{flag}: cannot use MLflow store {uri!r}: {reason[:300]}") from None
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def check_sqlite_file(path: str, flag: str, example: str) -> None:
    """Refuse a ``sqlite:///`` path that names anything but a SQLite database: a directory, a device
    (``/dev/null``), a FIFO, a text file. A file that does not exist yet, or an empty one, is a new database (SQLite
    writes its header on first use). One line naming ``flag``; ``example``: the file name the line suggests."""
    import stat

    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):  # a new file: its directory is checked on its own
        return
    except OSError as err:
        raise UserError(f"{flag}: cannot read {path} ({err.strerror}); give a SQLite database file, or a new file "
                        f"in a writable directory") from None
    if stat.S_ISDIR(info.st_mode):
        raise UserError(f"{flag}: {path} is a directory; give the database file in it, e.g. "
                        f"sqlite:///{os.path.join(path, example)}")
    if not stat.S_ISREG(info.st_mode):
        kind = ("a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else
                "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode) else
                "a special file")
        raise UserError(f"{flag}: {path} is {kind}, not a SQLite database; give a SQLite database file, or a new "
                        f"file in a writable directory")
    if info.st_size == 0:
        return
    try:
        with open(path, "rb") as fh:
            header = fh.read(len(SQLITE_HEADER))
    except OSError as err:
        raise UserError(f"{flag}: cannot read {path} ({err.strerror}); give a SQLite database file, or a new file "
                        f"in a writable directory") from None
    if header != SQLITE_HEADER:
        raise UserError(f"{flag}: {path} is not a SQLite database (it does not start with SQLite's header); give a "
                        f"SQLite database file, or a new file in a writable directory")


def artifact_location(uri: str, experiment_name: str) -> Optional[str]:
    """Artifacts of a SQLite store live beside it (``mlartifacts/``), not in whatever directory we ran from."""
    if sqlite_path(uri):
        store_dir = os.path.dirname(sqlite_path(uri))
        return "file://" + os.path.join(store_dir, "mlartifacts", experiment_name)
    return None  # a tracking server decides


def ui_command(uri: str) -> str:
    if uri.startswith(("http://", "https://")):
        return f"open {uri}"
    return f"mlflow ui --backend-store-uri {shlex.quote(uri)}"


def git_commit() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def command_line(module: str, argv: Optional[list[str]] = None) -> str:
    """The command as the user would retype it, e.g. ``python -m platform.sweep smoke --set rounds=3``."""
    argv = sys.argv[1:] if argv is None else argv
    return " ".join(["python", "-m", module, *(shlex.quote(a) for a in argv)])


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


@contextlib.contextmanager
def sqlite_store_lock(uri: str):
    """Hold an exclusive lock (``<file>.lock`` beside it) on a ``sqlite:///`` store: the first use of a new store
    creates its schema (alembic), which two processes doing at once corrupts (one fails with "table ... already
    exists"). A no-op for other URIs: a server or an RDB handles its own concurrency."""
    if not sqlite_path(uri):
        yield
        return
    import fcntl

    path = sqlite_path(uri) + ".lock"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _param_value(value: Any) -> str:
    text = "null" if value is None else str(value)
    return text if len(text) <= 6000 else text[:5997] + "..."


class Tracker:
    """Thin wrapper over ``MlflowClient`` for our run layout. Created lazily so it pickles with Tune."""

    def __init__(self, uri: str, experiment_name: str):
        self.uri = uri
        self.experiment_name = experiment_name
        self._experiment_id: Optional[str] = None
        self._mlflow = None

    def __getstate__(self):
        return {"uri": self.uri, "experiment_name": self.experiment_name, "_experiment_id": self._experiment_id,
                "_mlflow": None}

    @property
    def client(self):
        """The store's ``MlflowClient``; on a SQLite store, one whose every call waits out another process's lock
        by trying again for 30 s (:mod:`platform.results.store_faults`)."""
        if self._mlflow is None:
            from platform.results.store_faults import PatientClient, wait_out_lock

            def opened():
                client = _client(self.uri)  # MLflow reads a SQLite store's schema as it opens it
                client.search_experiments(max_results=1)  # a new store's schema, one process at a time
                return client

            with sqlite_store_lock(self.uri):
                client = wait_out_lock(opened, self.uri)
            self._mlflow = PatientClient(client, self.uri) if sqlite_path(self.uri) else client
        return self._mlflow

    @property
    def experiment_id(self) -> str:
        if self._experiment_id is None:
            client = self.client
            with sqlite_store_lock(self.uri):  # two sweeps of a new space: one creates, the other finds it
                found = client.get_experiment_by_name(self.experiment_name)
                self._experiment_id = found.experiment_id if found else client.create_experiment(
                    self.experiment_name, artifact_location=artifact_location(self.uri, self.experiment_name))
        return self._experiment_id

    def start_run(self, name: str, tags: dict[str, str], parent_run_id: Optional[str] = None) -> str:
        tags = dict(tags)
        if parent_run_id:
            tags[TAG_PARENT_RUN] = parent_run_id
        run = self.client.create_run(self.experiment_id, run_name=name, tags=tags)
        return run.info.run_id

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, _param_value(v)) for k, v in sorted(params.items())]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[i:i + 100])

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int = 0) -> None:
        """``metrics`` at ``step``; an infinite value (ε = ∞) as a tag of the same name reading "∞" (MLflow would
        store it as 1.797e308): see :data:`platform.config.run_schema.INFINITY`."""
        from mlflow.entities import Metric, RunTag
        import time

        now = int(time.time() * 1000)
        items, tags = [], []
        for key, value in metrics.items():
            if value is None:
                continue
            if math.isinf(float(value)):
                tags.append(RunTag(key, infinity_text(float(value))))
            else:
                items.append(Metric(key, float(value), now, step))
        if items or tags:
            self.client.log_batch(run_id, metrics=items, tags=tags)

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self.client.set_tag(run_id, key, value)

    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self.client.log_text(run_id, text, artifact_file)


def close_orphan_runs(tracker: "Tracker", parent_run_id: str, started_since_ms: Optional[int] = None):
    """End, as interrupted (KILLED), every child run of ``parent_run_id`` still RUNNING once the sweep's own runs are
    closed: runs of trials whose driver was killed (kill -9) before Tune saved them, which no trial continues.
    Returns how many; with ``started_since_ms`` (when this driver started), ``(by an earlier driver, by this one)``:
    a run created since then is this driver's own (a trial it was starting when it was interrupted)."""
    orphans = tracker.client.search_runs(
        [tracker.experiment_id], max_results=10000,
        filter_string=f"{children_filter(parent_run_id)} and attributes.status = 'RUNNING'")
    for run in orphans:
        tracker.set_tag(run.info.run_id, TAG_STATUS, STATUS_INTERRUPTED)
        tracker.end_run(run.info.run_id, "KILLED")
    if started_since_ms is None:
        return len(orphans)
    own = sum(1 for run in orphans if (run.info.start_time or 0) >= started_since_ms)
    return len(orphans) - own, own


def log_partition(tracker: "Tracker", run_id: str, config, labels, num_classes: int, groups=None,
                  coarse_labels=None) -> str:
    """Log the client × class count matrix (text) and its heat-map (PNG) as artifacts; return the text."""
    import tempfile

    from platform.data.partition import class_counts, partition_clients  # deferred: start-up time (plots, data)
    from platform.data.summary import partition_heatmap, partition_summary

    parts = partition_clients(labels, config.partition, config.clients.num_clients, config.stream_seed("partition"),
                              groups, coarse_labels)
    text = partition_summary(labels, parts, num_classes)
    tracker.log_text(run_id, text, "partition/counts.txt")
    with tempfile.TemporaryDirectory() as directory:
        path = partition_heatmap(class_counts(labels, parts, num_classes), os.path.join(directory, "heatmap.png"),
                                 f"{config.partition.kind} partition, {config.clients.num_clients} clients")
        tracker.client.log_artifact(run_id, path, "partition")
    return text


def log_patch_samples(tracker: "Tracker", run_id: str, shared) -> Optional[str]:
    """Log the first 64 crops of a source-image pool (``public.source: image``) as an 8×8 PNG grid, artifact
    ``public/patches.png``; nothing for other public sources. ``shared``: the run's
    :class:`~platform.runtime.federation.SharedData`. Returns the artifact path, or None."""
    import tempfile

    from platform.data.patch_pool_source import patch_grid_png

    samples = getattr(shared, "public_samples", None)
    public = getattr(shared, "public", None)
    if samples is None or public is None or public.source != "image" or len(samples) == 0:
        return None
    with tempfile.TemporaryDirectory() as directory:
        path = patch_grid_png(samples, os.path.join(directory, "patches.png"))
        tracker.client.log_artifact(run_id, path, "public")
    return "public/patches.png"


def log_driver_cache_corrupt(tracker: "Tracker", run_id: str) -> int:
    """Stage-cache entries this (driver) process found corrupt since the last call, while it prepared the data and
    pre-trained models every trial shares (moved aside and recomputed, :mod:`platform.stages.cache`; each already
    one warning line on the console): their lines as ``run_id``'s TAG_CACHE_CORRUPT and their running count as its
    METRIC_CACHE_CORRUPT, as a trial's own are logged on its run. Returns how many were new."""
    from platform.config.run_schema import METRIC_CACHE_CORRUPT, TAG_CACHE_CORRUPT
    from platform.stages.cache import take_corrupt_reports

    lines = take_corrupt_reports()
    if not lines:
        return 0
    run = tracker.client.get_run(run_id)  # a resumed sweep's parent: add to what its first driver logged
    count = int(run.data.metrics.get(METRIC_CACHE_CORRUPT, 0)) + len(lines)
    earlier = run.data.tags.get(TAG_CACHE_CORRUPT)
    tracker.set_tag(run_id, TAG_CACHE_CORRUPT, "\n".join([earlier, *lines] if earlier else lines)[:4000])
    tracker.log_metrics(run_id, {METRIC_CACHE_CORRUPT: count}, step=count)
    return len(lines)


def array_heatmap(array, path: str, title: str) -> str:
    """Write a 2-D array as a heat-map PNG (rows down, columns across, a colour bar) at ``path``; return the path."""
    from platform.data.summary import heatmap_png

    return heatmap_png(array, path, title)


def array_csv(array, path: str) -> str:
    """Write a 2-D array as CSV at ``path`` (one line per row, comma-separated, float64 round-trip precision, no
    header: ``numpy.loadtxt(path, delimiter=",", ndmin=2)`` reads it back); return the path."""
    import numpy as np

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    np.savetxt(path, np.asarray(array, dtype=np.float64), delimiter=",", fmt="%.17g")
    return path


def write_array_artifacts(name: str, array, round_index: int, directory: str) -> list[str]:
    """``<directory>/<name>/round_<r>.csv`` and ``.png`` for one array (2-D, at most ``MAX_ARRAY_ELEMENTS``); the
    paths written. A plot that fails is left out with a warning on stderr: the CSV is the record."""
    import numpy as np

    array = np.asarray(array, dtype=np.float64)
    if array.ndim != 2 or array.size == 0 or array.size > MAX_ARRAY_ELEMENTS:
        raise ValueError(f"array {name!r} must be 2-D with 1 to {MAX_ARRAY_ELEMENTS} elements, got shape "
                         f"{array.shape}")
    stem = os.path.join(directory, name, f"round_{int(round_index)}")
    written = [array_csv(array, stem + ".csv")]
    try:
        written.append(array_heatmap(array, stem + ".png", f"{name}, round {int(round_index)}"))
    except Exception as err:  # noqa: BLE001 - the CSV holds the data; a plot failure must not fail the run
        print(f"warning: could not plot array {name!r} of round {round_index}: {err}", file=sys.stderr, flush=True)
    return written


def log_arrays(tracker: "Tracker", run_id: str, arrays: dict, round_index: int) -> list[str]:
    """Log each of a method's arrays ({name: 2-D array or nested lists}, see :meth:`Algorithm.report_arrays`) on
    the run as ``arrays/<name>/round_<r>.png`` (heat-map) and ``.csv``; returns the artifact paths. An array that
    cannot be written is skipped with a warning on stderr (tracking must not fail a run or a sweep)."""
    import tempfile

    logged = []
    with tempfile.TemporaryDirectory() as directory:
        for name, array in (arrays or {}).items():
            try:
                paths = write_array_artifacts(name, array, round_index, directory)
                for path in paths:
                    tracker.client.log_artifact(run_id, path, f"{ARTIFACT_ARRAYS}/{name}")
            except Exception as err:  # noqa: BLE001
                print(f"warning: array {name!r} of round {round_index} not logged: {err}", file=sys.stderr,
                      flush=True)
                continue
            logged += [f"{ARTIFACT_ARRAYS}/{name}/{os.path.basename(p)}" for p in paths]
    return logged


_TUNE_KEYS = {"training_iteration", "time_total_s", "episodes_total", "timesteps_total", "node_ip", "hostname",
              "pid", "time_this_iter_s", "timestamp", "date", "time_since_restore", "timesteps_since_restore",
              "iterations_since_restore", "config", "checkpoint_dir_name", "done", "trial_id", "experiment_tag",
              "should_checkpoint", "round", RESULT_ARRAYS, RESULT_DETAILS}


def round_metrics(result: dict) -> dict[str, float]:
    """What a trial reported for a round (means over seeds, ``*_std`` with several), without Tune's own keys."""
    return _round_metrics(result, skip=_TUNE_KEYS)


def _dependency_order(parameters: dict, params: dict) -> list[str]:
    """The drawn keys in the space's order, each conditional parameter right after the parameters its ``when``
    names (``fedprox mu=0.01 lr=0.05``, not ``fedprox lr=0.05 mu=0.01``)."""
    order: list[str] = []
    for key, dist in parameters.items():
        if key not in params:
            continue
        after = [order.index(k) for k in getattr(dist, "when", {}) if k in order]
        order.insert(max(after) + 1 if after else len(order), key)
    return order


def trial_run_name(params: dict, parameters: dict, cell: Optional[dict] = None, number: Any = None) -> str:
    """A trial's run name, e.g. ``#3 fedprox mu=0.01 lr=0.05``: its number (``number``, its order of start;
    ``<cell>.<trial>`` across scenario cells, e.g. ``#2.3``) first, so that the names of a sweep's trials differ in
    their first characters -- the MLflow runs table shows only the start of a long name -- then its swept values,
    then a scenario cell's values in brackets, e.g. ``#2.3 bandwidth_scaling=0.1848 [fedkp_cm]``. A float is
    rounded to 4 significant digits (the run's params keep the exact value); a categorical string value (a
    ``choice`` or ``grid`` parameter's, a cell's) stands alone; every other value is ``<last key part>=<value>``
    (the full key where two keys share a last part). ``parameters``: the space's swept parameters (their
    order)."""
    cell = cell or {}
    keys = [*cell, *_dependency_order(parameters, params), *(k for k in params if k not in parameters)]
    leaves = [k.rsplit(".", 1)[-1] for k in keys]

    def label(key: str, value: Any, categorical: bool) -> str:
        if isinstance(value, str) and categorical:
            return value
        leaf = key.rsplit(".", 1)[-1]
        return f"{leaf if leaves.count(leaf) == 1 else key}={short_value(value)}"

    swept = " ".join(label(k, params[k], getattr(parameters.get(k), "kind", None) in ("choice", "grid"))
                     for k in keys if k in params and k not in cell)
    parts = [f"#{number}" if number is not None else "", swept or "base config",
             f"[{' '.join(label(k, v, True) for k, v in cell.items())}]" if cell else ""]
    return " ".join(p for p in parts if p)
