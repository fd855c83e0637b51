"""The run schema, defined once: the MLflow tag keys, parameter prefixes and summary-metric prefixes that
``platform.sweep.command``, ``platform.run`` and the tracking callback write, and tools that read runs rely on.

Metric names themselves are declared by the algorithms (``algorithms.base.STANDARD_METRICS`` and each method's
``metrics``); the runtime adds timing metrics ending in ``_seconds``.
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterable, Optional

# Tags
TAG_STATUS = "status"  # one of the STATUS_* values below
TAG_SEARCH_SPACE = "fedsweep.search_space"
TAG_DESCRIPTION = "fedsweep.description"
TAG_PRESET = "fedsweep.preset"  # on a sweep's parent run: the preset it ran (--preset); absent: the default
TAG_COMMAND = "fedsweep.command"  # the command line as the user would retype it
TAG_TRIAL_ID = "fedsweep.trial_id"
TAG_TRIAL_NUMBER = "fedsweep.trial_number"  # "1", "2", ...: the trial's order of start in its study (cell), the
#                                             last tie-break of platform.results.noise.rank_key
# on a trial's run: its study (scenario cell) and sampled values, hashed; what a trial Tune restores under a new id
# (the driver was killed before Tune saved the old one) has in common with the run the first driver made for it
TAG_TRIAL_KEY = "fedsweep.trial_key"
TAG_SAMPLED = "fedsweep.sampled"  # "key=value, ..." of a trial's sampled parameters
TAG_GIT_COMMIT = "mlflow.source.git.commit"
TAG_PARENT_RUN = "mlflow.parentRunId"


def children_filter(parent_run_id: str) -> str:
    """The MLflow search filter (``search_runs``, the UI's search box) for a sweep's child runs."""
    return f"tags.`{TAG_PARENT_RUN}` = '{parent_run_id}'"
TAG_BEST_PREFIX = "best."  # on a sweep's parent run: best.<parameter> = value of the best trial (a param; a tag
#                             where a resumed sweep's best differs from the one logged before)
TAG_BEST_RUN = "best_trial_run_id"  # on a sweep's parent run: the best trial's child run (single objective)
TAG_STOPPED_EARLY = "stopped_early_at_round"  # on an early-stopped trial's run: the last round it ran
TAG_DRIVER = "fedsweep.driver"  # on a sweep's parent run: "<host>:<pid>" of its driver (python -m platform.sweep --repair)
TAG_SWEEP_DIR = "fedsweep.sweep_dir"  # on a sweep's parent run: its Tune directory, where the driver's lease is
#                                      (--repair leaves a sweep alone while its lease is live)
TAG_NOTE = "mlflow.note.content"  # a run's description (markdown) in the MLflow UI
TAG_OPTUNA_STORAGE = "fedsweep.optuna_storage"  # on a sweep's parent run: the RDB URL of its Optuna studies
TAG_OPTUNA_STUDIES = "fedsweep.optuna_studies"  # on a sweep's parent run: its study names, comma-separated (one per
#                                                 scenario cell: <sweep id>/lam=0.01, ...; see sweep/cells.py)
TAG_OPTUNA_LOST = "fedsweep.optuna_lost"  # on a sweep's parent run: "<study>: <why>" of a study whose storage went
#                                           away mid-sweep (deleted, truncated); its trials are in MLflow only
TAG_STOPPED_BY = "fedsweep.stopped_by"  # on a sweep's parent run: the line that stopped it (a full disk, a store
#                                         locked past its wait, its Ray node lost, an error in the driver)

# Values of TAG_STATUS
STATUS_RUNNING = "running"
STATUS_COMPLETED = "completed"
STATUS_EARLY_STOPPED = "early-stopped"
STATUS_FAILED = "failed"
STATUS_INTERRUPTED = "interrupted"
STATUS_DIVERGED = "diverged"  # ran every round, but a last search metric is NaN, or infinite though measured (see
#                                :func:`diverged`; ε = ∞ is a setting, not a divergence): never chosen as best

# Parameter prefixes on a sweep's parent run
PARAM_BASE = "base."  # the base experiment config
PARAM_SPACE = "space."  # each swept parameter's distribution
PARAM_SEARCH = "search."  # searcher, scheduler, seeds, ...
PARAM_SEEDS = "search.seeds"  # on each trial run: the seeds it ran

# Summary metric prefixes
METRIC_FINAL = "final_"  # a run's last reported value of each metric
METRIC_BEST = "best_"  # the best value of the selection metric
METRIC_BEST_TRIAL = "best_trial_"  # on a sweep's parent run: the best trial's test figures (selected on validation)
METRIC_ROUNDS_COMPLETED = "rounds_completed"
METRIC_RANK = "rank"  # on a trial's run once its study ended: 1 = its best (platform.results.noise.rank); the
#                       MLflow view sorts by it, so it lists the trials in the console's and the report's order
PER_SEED_SEPARATOR = "/seed_"  # a trial's headline metrics per seed: test_accuracy/seed_3 (3 is the seed's value)


def per_seed_key(metric: str, seed: int) -> str:
    return f"{metric}{PER_SEED_SEPARATOR}{seed}"

# Multi-objective sweeps: on the parent run, the Pareto front of the finished trials (last reported values)
METRIC_PARETO_SIZE = "pareto_size"  # number of non-dominated trials
ARTIFACT_PARETO_JSON = "pareto_front.json"  # a JSON list, one object per front trial: trial, run_id, round,
#                                             each objective (and its _std over seeds), params
ARTIFACT_PARETO_CSV = "pareto_front.csv"  # the same table as CSV (params as columns)
ARTIFACT_PARETO_PNG = "pareto_front.png"  # the first two objectives of every finished trial, the front highlighted

# Arrays a method reports (Algorithm.report_arrays, e.g. MNFL's coefficient matrix c), every tracking.arrays_every
# rounds and after the last round: artifacts arrays/<name>/round_<r>.png (heat-map) and arrays/<name>/round_<r>.csv
# (the matrix, one line per row, comma-separated). In a round's metrics (what a trial reports to Tune) they travel
# under RESULT_ARRAYS as {name: nested list of rows}; it is never a metric.
ARTIFACT_ARRAYS = "arrays"
RESULT_ARRAYS = "_arrays"
MAX_ARRAY_ELEMENTS = 1_000_000  # larger arrays are skipped, with one warning per name
# How each client actor trained its clients in a round (clients.batched): one line per actor and architecture,
# "<arch>: batched|sequential, <n> clients (<reason>)". In a round's metrics under RESULT_CLIENT_PATHS (the first
# seed's), never a metric; platform.run --profile prints it. The metric batched_clients counts the batched ones.
RESULT_CLIENT_PATHS = "_client_paths"
# Stage-cache entries found corrupt in a round (moved aside and recomputed, platform.stages.cache), one line each,
# joined by "\n", by whichever process read them (the trial, its client and server actors): in a round's metrics under
# RESULT_CACHE_CORRUPT, never a metric. The sweep prints each on the driver's console, tags the trial's run with
# TAG_CACHE_CORRUPT and counts them in METRIC_CACHE_CORRUPT; platform.run prints them.
RESULT_CACHE_CORRUPT = "_cache_corrupt"
TAG_CACHE_CORRUPT = "fedsweep.cache_corrupt"
METRIC_CACHE_CORRUPT = "cache_corrupt_entries"

# A round's metrics as a trial reports them to Tune: as numbers only what Tune selects, schedules and stops on and what
# the sweep's summary reads (``round``, the search metrics, the test figures, each with its ``_std``); every other
# metric as one JSON string under RESULT_DETAILS. Tune keeps running statistics of every numeric key of every trial
# for the whole sweep (``run_metadata.metric_analysis``); a string costs it nothing. ``round_metrics`` unpacks it.
RESULT_DETAILS = "_details"
REPORTED_TEST_METRICS = ("test_accuracy", "test_loss")  # the test figures reported beside the selection metric


def is_number(value: Any) -> bool:
    """A number as the runs record it: an int or a float, never a flag (``True`` is an int to Python)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def tune_result(metrics: dict, numeric: Iterable[str]) -> dict:
    """``metrics`` with the numbers not named in ``numeric`` (nor their ``_std``) moved into RESULT_DETAILS."""
    wanted = {name for key in numeric for name in (key, f"{key}_std")}
    result = {k: v for k, v in metrics.items() if k in wanted or not is_number(v)}
    result[RESULT_DETAILS] = json.dumps({k: v for k, v in metrics.items() if k not in result})
    return result


def round_metrics(result: dict, skip: Iterable[str] = ()) -> dict[str, float]:
    """Every metric of a reported round as floats, RESULT_DETAILS unpacked, without the keys in ``skip``."""
    merged = {**result, **json.loads(result.get(RESULT_DETAILS) or "{}")}
    skip = set(skip)
    return {k: float(v) for k, v in merged.items() if k not in skip and is_number(v)}

# Scenario grids (a search space's ``scenarios:`` block): one study per cell of the cross product, all under the one
# parent run. On each trial's child run: the cell (label "key=value, ..."), its 1-based number (as printed,
# "cell 2/4") and the seed of the cell's own Optuna sampler. On the parent run: each scenario dimension's values as a
# param, per-cell metrics cell_<nn>/<metric>, and the table of each cell's best trial (or Pareto front).
TAG_SCENARIO = "fedsweep.scenario"  # "partition.alpha=0.1" (keys in the order of the scenarios block)
TAG_SCENARIO_CELL = "fedsweep.scenario_cell"  # "1", "2", ... in the order of the cross product
TAG_SAMPLER_SEED = "fedsweep.sampler_seed"  # the cell's Optuna sampler seed (from search.sampler_seed and the cell)
PARAM_SCENARIO = "scenario."  # on the parent run: scenario.<key> = the list of values
METRIC_CELL_PREFIX = "cell_"  # on the parent run: cell_01/best_val_accuracy, cell_01/best_trial_test_accuracy, ...
ARTIFACT_SCENARIOS_CSV = "scenarios/best_per_cell.csv"  # one row per cell: cell, scenario, each scenario key,
#   sampler_seed, trials_finished, trials_failed, best_trial, best_run_id, round, the selection metric (and _std),
#   test_accuracy / test_loss (and _std), best.<parameter> for each parameter. Multi-objective: pareto_size and
#   best_<objective> per objective instead of one best trial.
ARTIFACT_SCENARIOS_JSON = "scenarios/best_per_cell.json"  # the same rows as a JSON list (values, params as objects;
#   multi-objective rows also hold each cell's front), plus a rerun command per cell
ARTIFACT_SCENARIO_FRONTS_CSV = "scenarios/pareto_fronts.csv"  # multi-objective: every cell's front, one row per
#   (cell, front trial)


# ---- Infinite values, divergence and the std over seeds ----
# MLflow stores an infinite metric as ±1.797e308 (and the UI shows that number). A metric value that is ±∞ (FedAUX's
# privacy_epsilon at ε = ∞, the non-private arm) is therefore logged as a tag of the same name whose value is
# INFINITY ("∞") or "-∞", and left out of the metrics; platform.results.sweep_results reads it back as ±inf.
INFINITY = "∞"


def infinity_text(value: float) -> str:
    """``"∞"`` or ``"-∞"``: how an infinite value is written in tags, tables and the console."""
    return INFINITY if value > 0 else f"-{INFINITY}"


def parse_infinity(text: Any) -> Optional[float]:
    """±inf for a tag value written by :func:`infinity_text`, else None."""
    return {INFINITY: math.inf, f"-{INFINITY}": -math.inf}.get(str(text))


def short_value(value: Any) -> str:
    """A value as names and summaries show it: a float to 4 significant digits (0.1848, not 0.18483120598659894);
    the exact value is in the run's params."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def figure(value: Any, decimals: int = 4) -> str:
    """A reported figure: ``0.8333`` (``decimals`` places), ``∞`` / ``-∞``, ``nan``; anything else as ``str``."""
    if not is_number(value):
        return str(value)
    if math.isinf(value):
        return infinity_text(value)
    return "nan" if math.isnan(value) else f"{value:.{decimals}f}"


def setting_metrics() -> frozenset:
    """The metrics a registered method declares as a setting (``algorithms.base.Metric.setting``: a configured value
    it reports, such as FedAUX's ``privacy_epsilon``, which may be infinite)."""
    import algorithms  # deferred: torch

    return frozenset(m.name for cls in algorithms.ALGORITHMS.values() for m in cls.declared_metrics().values()
                     if m.setting)


def diverged(metrics: dict, names: Iterable[str], settings: Iterable[str] = ()) -> bool:
    """Whether a trial whose last reported metrics are ``metrics`` diverged: one of ``names`` (its search metrics)
    is NaN, or is infinite though it is measured. An infinite setting (one of ``settings``, e.g. privacy_epsilon at
    ε = ∞, the non-private arm) is a value, not a divergence."""
    settings = set(settings)
    for name in names:
        value = metrics.get(name)
        if is_number(value) and (math.isnan(value) or (math.isinf(value) and name not in settings)):
            return True
    return False


def seed_std(values: Iterable[float]) -> float:
    """The population std (ddof 0, as the thesis reports) of one metric over a trial's seeds. Equal values have std
    0, equal infinities included (numpy's std of [inf, inf] is NaN, with a warning); a mix of infinite and other
    values has no std (NaN, without a warning)."""
    import numpy as np  # deferred: start-up time

    array = np.asarray(list(values), dtype=float)
    if array.size and bool(np.all(array == array[0])):
        return 0.0
    if not np.all(np.isfinite(array)):
        return math.nan
    return float(array.std())
