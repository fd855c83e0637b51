"""Links into the MLflow 3 UI that open a sweep's trials ready to compare.

MLflow 3's UI opens an experiment in GenAI mode on an empty traces page, shows no params or metrics in the
runs table and nests child runs under their parent. A *shared view* fixes all of that at once: the UI reads
the experiment tag ``mlflow.sharedViewState.<key>`` named by the URL parameter ``viewStateShareKey`` and
applies its search facets (filter, sort) and table state (columns) -- the UI's own "Share" button writes it
compressed, but plain JSON is accepted too. ``workflowType=machine_learning`` in the URL picks the
machine-learning view. The URL must carry no facet parameter (``searchFilter``, ``orderByKey`` ...): the UI
ignores the shared view when it does.

Two things no link or server setting turns off in MLflow 3.17: the Assistant panel, which the UI opens by itself on
a browser's first visit to a server it reaches as localhost / 127.0.0.1 (it remembers that in the browser's
localStorage, ``mlflow.assistant.fab.autoOpenedOnFirstLoad_v1`` and ``mlflow.assistant.panelOpen_v1``; no URL
parameter, server flag or environment variable is read), and the "You're viewing a shared view" banner over every
shared view (its dismissal is not remembered). So the view is laid out for a window that the panel narrows by a
quarter: the rank and the sort metric come first after the run names (:func:`sweep_view`).

Verified against the MLflow 3.17 UI bundle (``mlflow/server/js/build``) and a real browser
(``tests/integration/test_smoke_sweep.py``).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Optional
from urllib.parse import urlencode

from platform.config.run_schema import METRIC_RANK, children_filter

SHARED_VIEW_TAG_PREFIX = "mlflow.sharedViewState."
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
ML_EXPERIMENT_KIND = "custom_model_development"
MAX_EXPERIMENT_TAG_VALUE = 20000  # mlflow.utils.validation.MAX_EXPERIMENT_TAG_VAL_LENGTH
ML_WORKFLOW = "machine_learning"  # the URL's workflowType; the UI's default (and remembered choice) is "genai"
DEFAULT_UI_PORT = 5000
# px: a trial's name (``#12 bandwidth_scaling=0.1848 [fedkp_cm]``); a full-precision float; a rank (1 to 4 digits)
NAME_WIDTH, VALUE_WIDTH, RANK_WIDTH = 340, 150, 90


def view_key(parent_run_id: str) -> str:
    """The share key of a sweep's view: stable per parent run, so re-publishing (``--resume``) overwrites it."""
    return f"fedsweep-{parent_run_id}"


def column(kind: str, key: str) -> str:
    """The UI's canonical column / sort key: ``params.`clients.lr```, ``metrics.`val_accuracy```, ..."""
    return f"{kind}.`{key}`"


def metric_order(metrics: list[str], sort_metric: str) -> list[str]:
    """The view's metric columns, left to right: ``rank`` (where it is one of ``metrics``), ``sort_metric``, then
    the other ``metrics`` in their order -- what the table is sorted by stays next to the run names."""
    lead = [m for m in (METRIC_RANK, sort_metric) if m in metrics or m == sort_metric]
    return list(dict.fromkeys(lead + list(metrics)))


def sweep_view(parent_run_id: str, params: list[str], metrics: list[str], tags: list[str], sort_metric: str,
               ascending: bool) -> dict:
    """The shared-view state: the sweep's child runs (flat, no parent), sorted by ``sort_metric``, with the run
    name, ``metrics`` (in :func:`metric_order`), ``params`` and ``tags`` as columns, in that order.

    Metrics lead: the UI pins the checkbox, Run Name and Created columns and scrolls the rest, so at 1600 px, with
    the Assistant panel that MLflow 3.17 opens on a first visit taking a quarter of the window, only about 400 px
    of scrolled columns show -- the rank and the sort metric must be the first of them."""
    columns = ([column("attributes", "Run Name")] + [column("metrics", m) for m in metric_order(metrics, sort_metric)]
               + [column("params", p) for p in params] + [column("tags", t) for t in tags])
    widths = {c: VALUE_WIDTH for c in columns}
    widths.update({columns[0]: NAME_WIDTH, column("metrics", METRIC_RANK): RANK_WIDTH})
    return {
        "searchFilter": children_filter(parent_run_id),
        "orderByKey": column("metrics", sort_metric),
        "orderByAsc": ascending,
        "selectedColumns": columns,
        "columnOrder": columns,  # else each group alphabetically: rank after test_accuracy, off-screen
        "columnWidths": {c: widths[c] for c in columns},  # no "0.5694..."
        "runsHiddenMode": "SHOW_ALL",  # every trial in the charts, not the first 10
    }


def publish_sweep_view(client, experiment_id: str, parent_run_id: str, params: list[str], metrics: list[str],
                       tags: list[str], sort_metric: str, ascending: bool) -> str:
    """Store the sweep's view on its experiment (``client``: an ``MlflowClient``) and return its share key.

    Also marks the experiment as a machine-learning one (``mlflow.experimentKind``) unless it already has a
    kind, for UIs that open an experiment by its kind (3.17's follows ``workflowType`` instead). Raises
    ``ValueError`` if the view does not fit MLflow's experiment-tag limit (it takes thousands of swept names)."""
    key = view_key(parent_run_id)
    value = json.dumps(sweep_view(parent_run_id, params, metrics, tags, sort_metric, ascending),
                       separators=(",", ":"))
    if len(value) > MAX_EXPERIMENT_TAG_VALUE:
        raise ValueError(f"the MLflow view of sweep {parent_run_id} is {len(value)} characters, over MLflow's "
                         f"{MAX_EXPERIMENT_TAG_VALUE}-character experiment-tag limit")
    if EXPERIMENT_KIND_TAG not in client.get_experiment(experiment_id).tags:
        set_experiment_tag(client, experiment_id, EXPERIMENT_KIND_TAG, ML_EXPERIMENT_KIND, keep_existing=True)
    set_experiment_tag(client, experiment_id, SHARED_VIEW_TAG_PREFIX + key, value)
    return key


def set_experiment_tag(client, experiment_id: str, key: str, value: str, keep_existing: bool = False,
                       attempts: int = 5) -> None:
    """``client.set_experiment_tag``, safe when another process sets the same tag at the same moment (two sweeps of
    one space ending together): MLflow's SQL store reads the tag, then inserts it, and the slower of two inserts
    fails ("UNIQUE constraint failed: experiment_tags"). Then the tag is read again: with ``keep_existing`` the
    other's value stands; else the write is tried again, which now updates the row."""
    for attempt in range(attempts):
        try:
            client.set_experiment_tag(experiment_id, key, value)
            return
        except Exception as err:  # noqa: BLE001 - MlflowException or the driver's IntegrityError, by its message
            if "unique" not in str(err).lower() or attempt == attempts - 1:
                raise
        if keep_existing and key in client.get_experiment(experiment_id).tags:
            return


def deep_link(ui_url: str, experiment_id: str, key: str) -> str:
    """The URL that opens the shared view ``key`` of an experiment in the machine-learning runs table."""
    query = urlencode({"viewStateShareKey": key, "workflowType": ML_WORKFLOW})
    return f"{ui_url.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def ui_url(tracking_uri: str, port: int = DEFAULT_UI_PORT) -> str:
    """Where the UI of a store is: the tracking server itself for http(s) URIs, else a local ``mlflow ui``."""
    if tracking_uri.startswith(("http://", "https://")):
        return tracking_uri.rstrip("/")
    return f"http://127.0.0.1:{port}"


def run_link(experiment_id: str, run_id: str) -> str:
    """A link to a run relative to the UI's page, for markdown in run descriptions (``mlflow.note.content``):
    the UI renders it as a link that stays on the same server. It names the machine-learning view, which the
    UI otherwise forgets on such a link and shows the run in GenAI mode."""
    return f"#/experiments/{experiment_id}/runs/{run_id}?workflowType={ML_WORKFLOW}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(tracking_uri: str, port: int, log_path: str, cwd: Optional[str] = None) -> subprocess.Popen:
    """Start ``mlflow server`` (the UI and REST API) on ``tracking_uri`` at 127.0.0.1:``port``, in a process group
    of its own, writing its output to ``log_path``; returns at once (see :func:`wait_for_server`)."""
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri,
               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True)


def wait_for_server(url: str, process: subprocess.Popen, log_path: str, timeout: float = 120,
                    health_path: str = "/health") -> None:
    """Block until the server at ``url`` answers HTTP on ``health_path``; raises ``RuntimeError`` (with its log)
    if it exits or stays silent for ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}{health_path}", timeout=2):
                return
        except OSError:
            time.sleep(0.25)
    with open(log_path, errors="replace") as log:
        tail = log.read()[-3000:]
    state = f"exited with code {process.returncode}" if process.poll() is not None else f"silent for {timeout:.0f} s"
    raise RuntimeError(f"the server at {url} {state}:\n{tail}")


def stop_server(process: subprocess.Popen) -> None:
    """Stop a server from :func:`start_server` and its workers (its whole process group)."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
