"""The Pareto front of a multi-objective sweep: which finished trials no other trial beats on every objective, and
its report (printed, and logged to the parent run as a table and a plot).

No Ray or MLflow import: the report logs through the tracker it is handed. Used by :mod:`platform.sweep.study`
(a sweep's front) and :mod:`platform.sweep.cells` (a front per scenario cell).
"""
from __future__ import annotations

import json
import math
import os
import sys
from typing import Optional, Sequence

from platform.config.run_schema import (ARTIFACT_PARETO_CSV, ARTIFACT_PARETO_JSON, ARTIFACT_PARETO_PNG, METRIC_BEST,
                                        INFINITY, METRIC_PARETO_SIZE, METRIC_RANK, figure)


def objective_value(row: dict, metric: str) -> Optional[float]:
    """``row[metric]`` as a float, or None when it is missing, not a number, or NaN (such rows are left out)."""
    value = row.get(metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return None if math.isnan(value) else value


def dominates(a: Sequence[float], b: Sequence[float], modes: Sequence[str]) -> bool:
    """True when ``a`` is at least as good as ``b`` on every objective and strictly better on one."""
    better = False
    for x, y, mode in zip(a, b, modes):
        if mode == "min":
            x, y = -x, -y
        if x < y:
            return False
        if x > y:
            better = True
    return better


def pareto_front(rows: list[dict], objectives: list[tuple[str, str]]) -> list[dict]:
    """The rows no other row dominates, in their original order.

    ``objectives`` is ``[(metric, "max" | "min"), ...]``. Rows missing an objective (absent, None, NaN or not a
    number) are left out. Equal points do not dominate each other, so every copy of a non-dominated point is kept;
    with one objective the front is every row with the best value.
    """
    if not objectives:
        raise ValueError("pareto_front needs at least one objective")
    for metric, mode in objectives:
        if mode not in ("max", "min"):
            raise ValueError(f"objective {metric!r}: mode must be 'max' or 'min', got {mode!r}")
    modes = [mode for _, mode in objectives]
    points: list[tuple[dict, list[float]]] = []
    for row in rows:
        values = [objective_value(row, metric) for metric, _ in objectives]
        if all(v is not None for v in values):
            points.append((row, values))  # type: ignore[arg-type]
    return [row for row, values in points if not any(dominates(other, values, modes) for _, other in points)]


def pareto_order(rows: list[dict], objectives: list[tuple[str, str]]) -> list[list[dict]]:
    """The complete rows best first, as layers: the Pareto front, then the front of what is left, and so on
    (non-dominated sorting). Within a layer, the one order of :mod:`platform.results.noise` on the first objective
    (its mean, then the smaller std over seeds, then the earlier trial, ``row["number"]``), so the console, the
    front's tables and the MLflow view (the ``rank`` metric) list the same rows in the same order."""
    from platform.results.noise import rank

    metric, mode = objectives[0]
    left = [r for r in rows if all(objective_value(r, m) is not None for m, _ in objectives)]
    layers = []
    while left:
        layer = pareto_front(left, objectives)
        chosen = {id(r) for r in layer}
        left = [r for r in left if id(r) not in chosen]
        layers.append(rank(layer, lambda r: objective_value(r, metric), lambda r: r.get(f"{metric}_std"),
                           lambda r: r.get("number"), mode))
    return layers


def log_front_ranks(layers: list[list[dict]], tracker) -> None:
    """Each ranked row's place (1: the first of the front) as the metric ``rank`` on its child run: the MLflow view
    sorts by it (:func:`platform.sweep.outputs.publish`)."""
    place = 0
    for layer in layers:
        for row in layer:
            place += 1
            if row.get("run_id"):
                tracker.log_metrics(row["run_id"], {METRIC_RANK: place})


def json_value(value):
    """JSON has no inf/NaN: write them as strings ("inf", "-inf", "nan")."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return value


def front_rows(grid, space, callback) -> list[dict]:
    """One row per finished trial (no error): its last reported objectives (and their std over seeds), the round,
    its MLflow child run and its sampled parameters. A trial missing an objective still gets a row (it is left off
    the front)."""
    rows = []
    for result in grid:
        if result.error is not None or not result.metrics:
            continue
        trial_id = result.metrics.get("trial_id")
        number = callback.numbers.get(trial_id) if callback is not None else None
        row = {"trial": f"trial-{number:03d}" if number else str(trial_id), "number": number,
               "run_id": callback.runs.get(trial_id) if callback is not None else None,
               "round": result.metrics.get("round")}
        if callback is not None and callback.names.get(trial_id):
            row["name"] = callback.names[trial_id]
        for metric in space.search.metrics:
            row[metric] = result.metrics.get(metric)
            if result.metrics.get(f"{metric}_std") is not None:
                row[f"{metric}_std"] = result.metrics[f"{metric}_std"]
        row["params"] = dict((result.config or {}).get("params", result.config or {}))
        rows.append(row)
    return rows


def _front_csv(front: list[dict]) -> str:
    import csv  # deferred: start-up time
    import io

    params = list(dict.fromkeys(k for row in front for k in row["params"]))
    values = list(dict.fromkeys(k for row in front for k in row
                                if k not in ("trial", "number", "name", "run_id", "round", "params")))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["trial", "name", "run_id", "round", *values, *params])
    for row in front:
        writer.writerow([row["trial"], row.get("name", ""), row["run_id"] or "", row["round"],
                         *(row.get(k, "") for k in values),
                         *(row["params"].get(k, "") for k in params)])
    return out.getvalue()


def front_plot(rows: list[dict], front: list[dict], objectives: list[tuple[str, str]], path: str, title: str) -> None:
    """The first two objectives of every finished trial (grey) with the front highlighted (red, joined)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from platform.results.sweep_artifacts import infinity_position, mark_infinity

    (x_name, x_mode), (y_name, y_mode) = objectives[:2]
    far = {name: infinity_position([objective_value(r, name) for r in rows]) for name in (x_name, y_name)}

    def placed(value, name):  # +∞ (ε = ∞, the non-private end) at the axis's far end
        return far[name] if value == math.inf else value

    def points(which):
        pts = [(placed(objective_value(r, x_name), x_name), placed(objective_value(r, y_name), y_name))
               for r in which]
        return [(x, y) for x, y in pts if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)]

    fig = Figure(figsize=(6.4, 4.8), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    every = points(rows)
    on_front = sorted(points(front))
    if every:
        ax.scatter(*zip(*every), c="0.6", s=30, label=f"finished trials ({len(every)})", zorder=2)
    if on_front:
        ax.plot(*zip(*on_front), "-", c="tab:red", alpha=0.5, zorder=3)
        ax.scatter(*zip(*on_front), c="tab:red", s=60, edgecolors="black", label=f"Pareto front ({len(front)})",
                   zorder=4)
    for axis, name in (("x", x_name), ("y", y_name)):
        if far[name] is not None:
            mark_infinity(ax, axis, far[name], f"{name} = {INFINITY}")
    ax.set_xlabel(f"{x_name} ({'higher' if x_mode == 'max' else 'lower'} is better)")
    ax.set_ylabel(f"{y_name} ({'higher' if y_mode == 'max' else 'lower'} is better)")
    if len(objectives) > 2:
        title += f" (first 2 of {len(objectives)} objectives)"
    hidden = len(front) - len(on_front)
    if hidden:  # -∞: on the front, but no point to draw
        title += f"\n{hidden} front point(s) not drawn: a value of -{INFINITY} (see pareto_front.csv)"
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, format="png")


def report_pareto(grid, space, tracker, parent_run_id, callback, answer) -> str:
    """Multi-objective: print the Pareto front of the finished trials (last reported values) and log it to the
    parent run as ``pareto_front.json``, ``pareto_front.csv``, ``pareto_front.png`` and metric ``pareto_size``."""
    import tempfile

    objectives = space.search.objectives
    rows = front_rows(grid, space, callback)
    failed = sum(1 for r in grid if r.error is not None)
    complete = [r for r in rows if all(objective_value(r, m) is not None for m, _ in objectives)]
    if not complete:
        print(f"no trial finished with {', '.join(space.search.metrics)} ({failed} failed); see the child runs in "
              f"MLflow", file=sys.stderr)
        return "FAILED"
    layers = pareto_order(complete, objectives)
    front = layers[0]
    answer.front = front
    log_front_ranks(layers, tracker)
    best = {f"{METRIC_BEST}{m}": (max if d == "max" else min)(objective_value(r, m) for r in complete)
            for m, d in objectives}
    tracker.log_metrics(parent_run_id, {METRIC_PARETO_SIZE: len(front), **best, "trials_completed": len(complete),
                                        "trials_failed": failed})
    tracker.log_text(parent_run_id, json.dumps(json_value(front), indent=2), ARTIFACT_PARETO_JSON)
    tracker.log_text(parent_run_id, _front_csv(front), ARTIFACT_PARETO_CSV)
    try:
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, ARTIFACT_PARETO_PNG)
            front_plot(complete, front, objectives, path, f"{space.name}: Pareto front")
            tracker.client.log_artifact(parent_run_id, path)
    except Exception as err:  # noqa: BLE001 - the table is the result; a plot failure must not fail the sweep
        print(f"warning: could not plot the Pareto front: {err}", file=sys.stderr)
    names = ", ".join(f"{m} ({d})" for m, d in objectives)
    print(f"\nPareto front of {len(complete)} trial(s) ({failed} failed): {len(front)} non-dominated on {names}, "
          f"by {objectives[0][0]} (the MLflow view's order)")
    for row in front:
        values = "  ".join(f"{m} {figure(row[m])}" for m, _ in objectives)
        params = ", ".join(f"{k}={v}" for k, v in row["params"].items()) or "(the base config)"
        print(f"  {values}  | {params}")
    print(f"front table: {ARTIFACT_PARETO_JSON}, {ARTIFACT_PARETO_CSV} and {ARTIFACT_PARETO_PNG} on the parent run "
          f"{parent_run_id}")
    print(f"tune storage: {grid.experiment_path}")
    return "FINISHED"
