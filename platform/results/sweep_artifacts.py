"""The tables and plots written from a sweep that :func:`platform.results.sweep_results.load_sweep` read back.

:func:`trials_table` turns it into one row per trial × seed (per-seed values from ``<metric>/seed_<s>``, see
:data:`platform.config.run_schema.PER_SEED_SEPARATOR`), plus each trial's mean and population std over its seeds of
the summary metrics. Trials that logged no per-seed metrics (sweeps from before they existed) get one row with the
mean over seeds and a null seed. :func:`log_sweep_artifacts` logs the table (``trials/trials.csv``,
``trials/trials.parquet``) and one sensitivity plot per swept parameter (``sensitivity/<parameter>.png``) to the parent
run; ``python -m platform.report`` builds its report from the same table.
"""
from __future__ import annotations

import math
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from platform.config.run_schema import INFINITY, is_number

from platform.results.sweep_results import (Objective, SweepResults, SweptParameter, Trial, load_sweep, metric_history,
                                            mlflow_client, value_text)

TEST_METRIC = "test_accuracy"  # reported beside the selection metric, never selected on
HEADLINE_METRICS = ("val_accuracy", "test_accuracy", "val_loss", "test_loss")
ARTIFACT_TRIALS_CSV = "trials/trials.csv"
ARTIFACT_TRIALS_PARQUET = "trials/trials.parquet"
ARTIFACT_SENSITIVITY = "sensitivity"  # sensitivity/<parameter>.png


# ---------------------------------------------------------------------------------------------------------------------
# The trials table

def table_metrics(results: SweepResults) -> list[str]:
    """The per-seed metric columns: every metric a trial logged per seed, else (older stores) the search metrics and
    the headline metrics the trials logged; search metrics first, then the headline ones, then the rest."""
    logged = {m for t in results.trials for m in t.per_seed_metrics()}
    means = {m for t in results.trials for m in (*(o.metric for o in results.objectives), *HEADLINE_METRICS)
             if m in t.metrics}
    names = logged | means
    order = [*(o.metric for o in results.objectives), *HEADLINE_METRICS, *sorted(names)]
    return [m for m in dict.fromkeys(order) if m in names]


def summary_metrics(results: SweepResults, extra: Sequence[str] = ()) -> list[str]:
    """The metrics with trial-level ``<metric>_mean`` / ``<metric>_std`` columns: the search metric(s),
    test_accuracy and ``extra``."""
    return list(dict.fromkeys([*(o.metric for o in results.objectives), TEST_METRIC, *extra]))


def trials_table(results: SweepResults, extra_metrics: Sequence[str] = ()):
    """One row per trial × seed (a trial without per-seed metrics: one row, seed null, its means): run_id, run_name,
    trial_number (its order of start in its study), status, cell, each scenario key, each swept parameter (null where
    inactive), seed, rounds_completed, n_seeds, each per-seed metric's latest value for that seed, and each summary
    metric's trial mean and population std over seeds (``<metric>_mean``, ``<metric>_std``; std null with one seed).
    A ``pyarrow.Table`` with typed columns."""
    import pyarrow as pa  # deferred: start-up time

    metrics = table_metrics(results)
    summaries = summary_metrics(results, extra_metrics)
    dimensions = [*results.scenarios.values(), *(p for k, p in results.parameters.items()
                                                 if k not in results.scenarios)]
    fields = [pa.field("run_id", pa.string()), pa.field("run_name", pa.string()), pa.field("trial_number", pa.int64()),
              pa.field("status", pa.string()),
              pa.field("cell", pa.string()), *(pa.field(d.key, d.arrow_type()) for d in dimensions),
              pa.field("seed", pa.int64()), pa.field("rounds_completed", pa.int64()), pa.field("n_seeds", pa.int64()),
              *(pa.field(m, pa.float64()) for m in metrics),
              *(pa.field(f"{m}_{stat}", pa.float64()) for m in summaries for stat in ("mean", "std"))]
    columns: dict[str, list] = {f.name: [] for f in fields}
    for trial in results.trials:
        per_seed = {m: trial.per_seed(m) for m in metrics}
        seeds: list = sorted({s for values in per_seed.values() for s in values}) or [None]
        stats = {m: trial.summary(m) for m in summaries}
        values = {**trial.scenario, **trial.params}
        for seed in seeds:
            row = {"run_id": trial.run_id, "run_name": trial.run_name, "trial_number": trial.number,
                   "status": trial.status, "cell": trial.cell,
                   **{d.key: values.get(d.key) for d in dimensions}, "seed": seed,
                   "rounds_completed": trial.rounds_completed, "n_seeds": len(trial.seeds) or None}
            for m in metrics:
                row[m] = trial.metrics.get(m) if seed is None else per_seed[m].get(seed)
            for m, (mean, std) in stats.items():
                row[f"{m}_mean"], row[f"{m}_std"] = mean, std
            for name in columns:
                columns[name].append(row.get(name))
    schema = pa.schema(fields)
    return pa.table({f.name: pa.array(columns[f.name], type=f.type) for f in fields}, schema=schema)


def table_frame(table):
    """The table as a pandas DataFrame, a missing cell as None (pandas would make it NaN)."""
    frame = table.to_pandas()
    frame["cell"] = frame["cell"].astype(object).where(frame["cell"].notna(), None)
    return frame


def trial_frame(table):
    """The table's trial-level view: one row per trial (its first seed's row), as a pandas DataFrame in table order."""
    return table_frame(table).drop_duplicates("run_id").reset_index(drop=True)


def write_table_files(table, directory: str) -> list[str]:
    """``<directory>/trials.csv`` and ``trials.parquet``; the paths."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    csv_path, parquet_path = os.path.join(directory, "trials.csv"), os.path.join(directory, "trials.parquet")
    pacsv.write_csv(table, csv_path)
    pq.write_table(table, parquet_path)
    return [csv_path, parquet_path]


# ---------------------------------------------------------------------------------------------------------------------
# Plots (matplotlib's Agg canvas: no display, no global backend change)

def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def infinity_position(values: Iterable, scale: str = "linear") -> Optional[float]:
    """Where +∞ (ε = ∞, the non-private end) is drawn on an axis holding ``values``: past the largest finite value by
    a fifth of the finite range (on a log axis, by a fifth of the decades, at least half a decade); None when no
    value is +∞."""
    numbers = [float(v) for v in values if is_number(v) and not math.isnan(float(v))]
    if math.inf not in numbers:
        return None
    finite = [v for v in numbers if math.isfinite(v)]
    if not finite:
        return 1.0
    low, high = min(finite), max(finite)
    if scale != "linear" and high > 0:
        positive = [v for v in finite if v > 0]
        decades = math.log10(high / min(positive)) if positive else 1.0
        return high * 10 ** max(0.5, decades / 5)
    return high + ((high - low) / 5 or abs(high) / 2 or 1.0)


def mark_infinity(ax, axis: str, position: float, label: str) -> None:
    """A dotted line at ``position`` on ``axis`` ("x" or "y") labelled ``label`` (e.g. "privacy_epsilon = ∞"): the
    points drawn there are infinite values, put at the axis's far end."""
    if axis == "x":
        ax.axvline(position, linestyle=":", color="0.4", linewidth=1, zorder=1)
        ax.annotate(label, xy=(position, 1), xycoords=("data", "axes fraction"), xytext=(-3, -4),
                    textcoords="offset points", rotation=90, ha="right", va="top", fontsize=8, color="0.3")
    else:
        ax.axhline(position, linestyle=":", color="0.4", linewidth=1, zorder=1)
        ax.annotate(label, xy=(0, position), xycoords=("axes fraction", "data"), xytext=(4, 3),
                    textcoords="offset points", ha="left", va="bottom", fontsize=8, color="0.3")


def _colours(count: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(max(count, 1))]


@dataclass(frozen=True)
class SensitivitySeries:
    """What one scenario cell (None without scenarios) contributes to a sensitivity plot."""
    cell: Optional[str]
    seed_points: tuple  # ((x, value), ...): every trial × seed that logged per-seed values
    trial_means: tuple  # ((x, mean over seeds), ...): every trial, in x order (categorical: the values' order)
    stopped_early: tuple = ()  # ((x, mean over seeds), ...): the trials that ended at fewer rounds than the cell's most


def sensitivity_series(table, parameter: SweptParameter, metric: str) -> list[SensitivitySeries]:
    """The points of ``metric`` against ``parameter``, per scenario cell in table order: trials where the parameter is
    inactive, or its value is NaN or -∞, or that reported no ``metric``, are left out (+∞, e.g. ε = ∞, is kept:
    :func:`sensitivity_png` draws it at the far end). Raises ValueError when no point is left."""
    import numpy as np

    frame = table_frame(table)
    frame = frame[frame[parameter.key].notna() & frame[f"{metric}_mean"].notna()]
    if parameter.numeric:
        values = frame[parameter.key].astype(float)
        frame = frame[np.isfinite(values) | (values == np.inf)]
    if frame.empty:
        raise ValueError(f"no trial has both {parameter.key} and {metric}")
    order = {v: i for i, v in enumerate(parameter.values if parameter.boolean else
                                        [value_text(v) for v in parameter.values])}
    series = []
    for cell in dict.fromkeys(frame["cell"].tolist()):
        rows = frame[frame["cell"].map(lambda c: c == cell)]
        seeds = rows[rows["seed"].notna() & rows[metric].notna()]
        means = rows.drop_duplicates("run_id")
        rank = means[parameter.key].astype(float) if parameter.numeric else means[parameter.key].map(order)
        means = means.assign(_rank=rank).sort_values("_rank", kind="stable")
        rounds = means["rounds_completed"].astype(float) if "rounds_completed" in means else None
        stopped = means[rounds < rounds.max()] if rounds is not None and rounds.notna().any() else means.iloc[0:0]
        series.append(SensitivitySeries(cell, tuple(zip(seeds[parameter.key].tolist(), seeds[metric].tolist())),
                                        tuple(zip(means[parameter.key].tolist(), means[f"{metric}_mean"].tolist())),
                                        tuple(zip(stopped[parameter.key].tolist(),
                                                  stopped[f"{metric}_mean"].tolist()))))
    return series


def sensitivity_png(results: SweepResults, table, parameter: SweptParameter, path: str,
                    objective: Optional[Objective] = None) -> str:
    """The search metric against one swept parameter (:func:`sensitivity_series`): per-seed values (small,
    translucent), each trial's mean over seeds (larger; hollow where the trial stopped early, so its value is an
    earlier round's than the others'), one colour per scenario cell, a numeric parameter's means
    joined in x order (log x for a log-uniform one); a categorical parameter gets a box of its trial means per value,
    the per-seed values as a strip. Raises ValueError when there is nothing to plot."""
    import numpy as np

    objective = objective or results.objective
    metric = objective.metric
    series = sensitivity_series(table, parameter, metric)
    cells = [s.cell for s in series]
    colours = _colours(len(series))
    fig = _figure(6.4, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    if parameter.numeric:
        scale, kwargs = parameter.x_scale()
        far = infinity_position([x for one in series for x, _ in one.trial_means], scale)

        def placed(points):  # +∞ at the axis's far end
            return [(far if x == math.inf else x, y) for x, y in points]

        for one, colour in zip(series, colours):
            if one.seed_points:
                ax.scatter(*zip(*placed(one.seed_points)), s=12, alpha=0.35, color=colour, linewidths=0)
            label = one.cell if one.cell is not None else "trial mean over seeds"
            if one.cell is not None:
                ax.plot(*zip(*placed(one.trial_means)), "-", color=colour, zorder=2)
            full = [p for p in one.trial_means if p not in one.stopped_early]
            xs, ys = zip(*placed(full)) if full else ((), ())
            ax.scatter(xs, ys, s=45, color=colour, zorder=3, label=label)
            if one.stopped_early:  # hollow: their value is from an earlier round than the others'
                ax.scatter(*zip(*placed(one.stopped_early)), s=45, color="white", edgecolors=colour, linewidths=1.5,
                           zorder=4)
        ax.set_xscale(scale, **kwargs)
        if far is not None:
            mark_infinity(ax, "x", far, f"{parameter.key} = {INFINITY}")
    else:
        rng = np.random.default_rng(0)  # the strip's jitter: the same picture every time
        values = list(parameter.values if parameter.boolean else [value_text(v) for v in parameter.values])
        present = [v for v in values if any(x == v for one in series for x, _ in one.trial_means)]
        width = 0.8 / len(series)
        for j, (one, colour) in enumerate(zip(series, colours)):
            offset = (j - (len(series) - 1) / 2) * width
            for i, value in enumerate(present):
                means = [y for x, y in one.trial_means if x == value]
                seeds = [y for x, y in one.seed_points if x == value]
                if not means:
                    continue
                ax.boxplot([means], positions=[i + offset], widths=width * 0.8, showfliers=False,
                           medianprops={"color": colour}, boxprops={"color": colour}, whiskerprops={"color": colour},
                           capprops={"color": colour})
                ax.scatter(i + offset + rng.uniform(-width / 4, width / 4, len(seeds)), seeds, s=12, alpha=0.35,
                           color=colour, linewidths=0)
                stopped = [y for x, y in one.stopped_early if x == value]
                full = [y for x, y in one.trial_means if x == value and (x, y) not in one.stopped_early]
                ax.scatter(np.full(len(full), i + offset), full, s=40, color=colour, zorder=3)
                if stopped:  # hollow: their value is from an earlier round than the others'
                    ax.scatter(np.full(len(stopped), i + offset), stopped, s=40, color="white", edgecolors=colour,
                               linewidths=1.5, zorder=4)
            ax.scatter([], [], s=40, color=colour, label=one.cell if one.cell is not None else "trial mean over seeds")
        ax.set_xticks(range(len(present)), [value_text(v) for v in present])
        ax.set_xlim(-0.6, len(present) - 0.4)
    ax.set_xlabel(parameter.key + (" (log scale)" if parameter.x_scale()[0] != "linear" else ""))
    ax.set_ylabel(f"{metric} ({objective.mode})")
    if any(one.stopped_early for one in series):
        ax.scatter([], [], s=40, color="white", edgecolors="0.3", linewidths=1.5,
                   label="stopped early: an earlier round's value")
    ax.set_title(f"{results.space}: {metric} vs {parameter.key}\nsmall: per seed; large: trial mean over seeds",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, title="scenario cell" if cells != [None] else None, title_fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, format="png")
    return path


def sensitivity_plots(results: SweepResults, table, directory: str, objective: Optional[Objective] = None
                      ) -> list[str]:
    """``<directory>/<parameter>.png`` for every swept parameter; a plot that cannot be drawn is skipped with one
    warning on stderr. The paths written."""
    written = []
    for parameter in results.parameters.values():
        try:
            written.append(sensitivity_png(results, table, parameter, os.path.join(directory, f"{parameter.key}.png"),
                                           objective))
        except Exception as err:  # noqa: BLE001 - the table is the record; a plot must not fail its caller
            warn(f"no sensitivity plot of {parameter.key}: {err}")
    return written


def learning_curves_png(results: SweepResults, trials: Sequence[tuple[str, Trial]], metrics: Sequence[str],
                        path: str) -> str:
    """One panel per metric, one line per (label, trial): the mean over seeds per round, with a ±std band where the
    trial logged ``<metric>_std``. Reads the histories from the store."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    fig = _figure(5.0 * len(metrics), 3.8)
    colours = _colours(len(trials))
    for index, metric in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), index + 1)
        for (label, trial), colour in zip(trials, colours):
            steps, values = metric_history(results, trial.run_id, metric)
            if not steps:
                continue
            cell = f" [{trial.cell}]" if trial.cell and trial.cell not in trial.run_name else ""
            ax.plot(steps, values, "o-", markersize=3, color=colour, label=f"{label}: {trial.run_name}{cell}")
            std_steps, stds = metric_history(results, trial.run_id, f"{metric}_std")
            by_step = dict(zip(std_steps, stds))
            band = [(s, v, by_step[s]) for s, v in zip(steps, values) if s in by_step]
            if band:
                s, v, d = (np.asarray(x, dtype=float) for x in zip(*band))
                ax.fill_between(s, v - d, v + d, color=colour, alpha=0.2, linewidth=0)
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(metric)
        ax.set_title(f"{metric} (mean ± std over seeds)", fontsize=10)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, format="png")
    return path


def warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------------------
# The sweep-level artifacts

def log_sweep_artifacts(tracking_uri: str, parent_run_id: str) -> list[str]:
    """Log the trials table (``trials/trials.csv``, ``trials/trials.parquet``) and the sensitivity plots
    (``sensitivity/<parameter>.png``) to the sweep's parent run; the artifact paths logged. Called at the end of every
    sweep, finished or not: it logs what exists and never raises (a failure is one warning on stderr)."""
    logged: list[str] = []
    try:
        results = load_sweep(tracking_uri, parent_run_id)
        table = trials_table(results)
        client = mlflow_client(tracking_uri)
        with tempfile.TemporaryDirectory() as directory:
            for path in write_table_files(table, os.path.join(directory, "trials")):
                client.log_artifact(parent_run_id, path, os.path.dirname(ARTIFACT_TRIALS_CSV))
                logged.append(f"{os.path.dirname(ARTIFACT_TRIALS_CSV)}/{os.path.basename(path)}")
            for path in sensitivity_plots(results, table, os.path.join(directory, ARTIFACT_SENSITIVITY)):
                client.log_artifact(parent_run_id, path, ARTIFACT_SENSITIVITY)
                logged.append(f"{ARTIFACT_SENSITIVITY}/{os.path.basename(path)}")
    except Exception as err:  # noqa: BLE001 - the sweep's own outcome must not depend on its summary artifacts
        warn(f"sweep tables of run {parent_run_id} not (all) logged: {err}")
    return logged
