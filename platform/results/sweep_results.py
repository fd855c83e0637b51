"""A sweep's results read back from the MLflow store (no Ray).

:func:`load_sweep` reads one sweep (the parent run of one ``python -m platform.sweep`` invocation and its child trial
runs, the layout of ``platform.config.run_schema``) into a :class:`SweepResults`: the swept parameters and their
distributions (from the parent's ``space.*`` params), the scenario dimensions, the search metric(s) and mode(s), the
seeds, and per trial its status, scenario cell, swept values (only those logged: an inactive conditional parameter is
absent) and latest metric values. Per-round histories are not loaded (one query per run and metric): plots that need
them read a few runs with :func:`metric_history`. The tables and plots made from it are
:mod:`platform.results.sweep_artifacts`'s.
"""
from __future__ import annotations

import ast
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Optional

from platform.cli import sqlite_path
from platform.errors import UserError
from platform.config.run_schema import (METRIC_ROUNDS_COMPLETED, PARAM_SCENARIO, PARAM_SEARCH, PARAM_SEEDS, PARAM_SPACE,
                                 PER_SEED_SEPARATOR, STATUS_RUNNING, TAG_COMMAND, TAG_DESCRIPTION, TAG_PARENT_RUN,
                                 TAG_PRESET, TAG_SCENARIO, TAG_SCENARIO_CELL, TAG_SEARCH_SPACE, TAG_STATUS,
                                 TAG_STOPPED_EARLY, TAG_TRIAL_NUMBER, children_filter, is_number, parse_infinity, seed_std)

RANGE_KINDS = ("uniform", "loguniform", "int")
RUN_ID_PATTERN = re.compile(r"^[0-9a-f]{32}$")


# ---------------------------------------------------------------------------------------------------------------------
# What a sweep is made of

@dataclass(frozen=True)
class SweptParameter:
    """A swept parameter (or a scenario dimension, ``kind`` "scenario") as the parent run recorded it."""
    key: str
    kind: str  # choice | grid | uniform | loguniform | int | scenario
    values: tuple  # the candidates of choice / grid / scenario, or (low, high) of a range
    when: tuple = ()  # ((key, value or list of values), ...): conditional on earlier parameters

    @property
    def numeric(self) -> bool:
        """A range, or a choice/grid/scenario whose every candidate is a number: plotted against its value."""
        return self.kind in RANGE_KINDS or (bool(self.values) and all(is_number(v) for v in self.values))

    @property
    def categorical(self) -> bool:
        """A choice/grid/scenario with a non-numeric candidate (a name, a flag, null): an arm of the ablation."""
        return not self.numeric

    @property
    def boolean(self) -> bool:
        return bool(self.values) and all(isinstance(v, bool) for v in self.values)

    def typed(self, text: str) -> Any:
        """A logged value (MLflow params are strings) as this parameter's column value: float (int for ``int``),
        bool for a flag, else the candidate's text (:func:`value_text`)."""
        value = parse_literal(text)
        if self.kind == "int" and is_number(value):
            return int(value)
        if self.numeric:
            return float(value) if is_number(value) else None
        candidate = next((c for c in self.values if same_value(c, value)), value)
        if self.boolean:
            return candidate if isinstance(candidate, bool) else None
        return value_text(candidate)

    def arrow_type(self):
        import pyarrow as pa

        if self.kind == "int":
            return pa.int64()
        if self.numeric:
            return pa.float64()
        return pa.bool_() if self.boolean else pa.string()

    def x_scale(self) -> tuple[str, dict]:
        """The sensitivity plot's x-axis: log for a log-uniform range, and for a numeric grid/choice spanning two
        decades or more (symlog where it holds 0); linear otherwise."""
        if self.kind == "loguniform":
            return "log", {}
        if self.kind in ("choice", "grid", "scenario") and self.numeric:
            finite = [float(v) for v in self.values if math.isfinite(float(v))]
            positive = [v for v in finite if v > 0]
            if len(positive) >= 2 and max(positive) / min(positive) >= 100 and all(v >= 0 for v in finite):
                return ("log", {}) if len(positive) == len(finite) else ("symlog", {"linthresh": min(positive)})
        return "linear", {}


@dataclass(frozen=True)
class Objective:
    """What a best is chosen on; choose it with :func:`platform.results.report_ranking.best_row` (the one order)."""
    metric: str
    mode: str  # max | min


@dataclass(frozen=True)
class Trial:
    """One child run: what it swept and the latest value of every metric it logged."""
    run_id: str
    run_name: str
    status: str  # the status tag: running, completed, early-stopped, failed, interrupted
    start_time: int
    cell: Optional[str]  # the scenario cell's label, e.g. "partition.alpha=0.1"; None without scenarios
    cell_number: Optional[int]
    params: dict  # swept key -> typed value, only the parameters the trial logged
    scenario: dict  # scenario key -> typed value
    seeds: tuple  # the seeds it ran
    metrics: dict  # metric key -> latest value
    rounds_completed: Optional[int]
    number: Optional[int] = None  # its order of start in its study (cell), 1-based: the last tie-break of a ranking

    def per_seed(self, metric: str) -> dict[int, float]:
        """``{seed: latest value}`` of ``<metric>/seed_<seed>``; empty where the trial logged none."""
        prefix = metric + PER_SEED_SEPARATOR
        out = {}
        for key, value in self.metrics.items():
            if key.startswith(prefix) and key[len(prefix):].lstrip("-").isdigit():
                out[int(key[len(prefix):])] = value
        return dict(sorted(out.items()))

    def per_seed_metrics(self) -> list[str]:
        return list(dict.fromkeys(k.split(PER_SEED_SEPARATOR)[0] for k in self.metrics if PER_SEED_SEPARATOR in k))

    def summary(self, metric: str) -> tuple[Optional[float], Optional[float]]:
        """(mean, population std) over the trial's seeds: from its per-seed values where it logged them (std None
        with one seed), else its logged mean and ``<metric>_std``."""
        import numpy as np

        values = list(self.per_seed(metric).values())
        if values:
            array = np.asarray(values, dtype=float)
            with np.errstate(invalid="ignore", over="ignore"):
                mean = float(array.mean())
            return mean, (seed_std(values) if len(values) > 1 else None)
        return self.metrics.get(metric), self.metrics.get(f"{metric}_std")


@dataclass(frozen=True)
class SweepResults:
    tracking_uri: str
    experiment_id: str
    space: str  # the search space's name (= the MLflow experiment's)
    parent_run_id: str
    parent_name: str
    status: str  # the parent's status tag
    mlflow_status: str
    description: str
    parameters: dict  # key -> SweptParameter
    scenarios: dict  # key -> SweptParameter (kind "scenario")
    objectives: tuple  # Objective, ... (several for a multi-objective search)
    searcher: str
    num_samples: Optional[int]
    seeds: tuple
    algorithms: tuple  # the algorithm names the sweep can run (base, swept, scenario)
    trials: tuple  # Trial, ... in (cell, start) order
    preset: Optional[str] = None  # the preset the sweep ran (--preset); None: the space's default
    command: str = ""  # the command line that started it (tag fedsweep.command)

    @property
    def overrides(self) -> list[str]:
        """What the command changed beyond the preset: each ``--set KEY=VALUE`` as ``KEY=VALUE``, in order, then
        ``--num-samples N`` and ``--stand-in`` as given."""
        import shlex

        try:
            words = shlex.split(self.command)
        except ValueError:
            words = self.command.split()
        out, other = [], []
        for i, word in enumerate(words):
            value = words[i + 1] if i + 1 < len(words) else None
            if word == "--set" and value is not None:
                out.append(value)
            elif word.startswith("--set="):
                out.append(word[len("--set="):])
            elif word == "--num-samples" and value is not None:
                other.append(f"--num-samples {value}")
            elif word.startswith("--num-samples="):
                other.append(f"--num-samples {word.split('=', 1)[1]}")
            elif word == "--stand-in":
                other.append(word)
        return out + other

    @property
    def running(self) -> bool:
        return self.status == STATUS_RUNNING or self.mlflow_status == "RUNNING"

    @property
    def objective(self) -> Objective:
        """The selection objective (the first one of a multi-objective search)."""
        return self.objectives[0]

    @property
    def short_id(self) -> str:
        return self.parent_run_id[:8]


# ---------------------------------------------------------------------------------------------------------------------
# Values as MLflow logged them

_LITERAL_NAMES = {"inf": math.inf, "nan": math.nan, "None": None, "null": None, "True": True, "False": False,
                  "true": True, "false": False}


def parse_literal(text: str) -> Any:
    """A logged value back as Python: numbers (``inf`` and ``nan`` too), flags, null, lists and dicts of them;
    anything else stays the text (``"fedprox"``)."""
    if not isinstance(text, str):
        return text

    def value(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name) and node.id in _LITERAL_NAMES:
            return _LITERAL_NAMES[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = value(node.operand)
            if is_number(operand):
                return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, (ast.List, ast.Tuple)):
            return [value(e) for e in node.elts]
        if isinstance(node, ast.Dict):
            return {value(k): value(v) for k, v in zip(node.keys, node.values)}
        raise ValueError(text)

    try:
        return value(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError):
        return text


def same_value(a: Any, b: Any) -> bool:
    """Whether two parameter values are the same: numbers by value (1 and 1.0, inf and inf), flags only as flags."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if is_number(a) and is_number(b):
        return a == b or math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return a == b


def value_text(value: Any) -> str:
    """How a value is shown in tables and plots: ``null``, ``true``/``false``, numbers to 4 significant digits."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


_SPACE_PARAM = re.compile(r"^(?P<kind>[a-z]+)(?P<args>\[.*\])(?: when (?P<when>\{.*\}))?$", re.S)


def parse_space_param(key: str, text: str) -> Optional[SweptParameter]:
    """A parent's ``space.<key>`` param, e.g. ``loguniform[0.001, 1.0] when {'algorithm.name': 'fedprox'}``."""
    match = _SPACE_PARAM.match(text.strip())
    if not match:
        return None
    args = parse_literal(match["args"])
    when = parse_literal(match["when"]) if match["when"] else {}
    if not isinstance(args, list) or not isinstance(when, dict):
        return None
    return SweptParameter(key, match["kind"], tuple(args), tuple(when.items()))


# ---------------------------------------------------------------------------------------------------------------------
# Reading a sweep

def mlflow_client(tracking_uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def check_store(tracking_uri: str, option: str = "--tracking-uri") -> None:
    """A SQLite store must exist (reading a missing one would create an empty one)."""
    path = sqlite_path(tracking_uri)
    if path:
        if not os.path.isfile(path):
            raise UserError(f"{option}: no MLflow store at {path}; run a sweep first or name the store that holds it")


def resolve_parent(client, tracking_uri: str, ref: str, option: str = "sweep", preset: Optional[str] = None):
    """The parent run ``ref`` names: a parent run id, or a search-space name (or its YAML path): the newest sweep of
    that experiment (with ``preset``: the newest sweep run with that preset). Raises UserError naming ``option``."""
    from mlflow.exceptions import MlflowException

    if RUN_ID_PATTERN.match(ref):
        try:
            run = client.get_run(ref)
        except MlflowException:
            raise UserError(f"{option}: no run {ref} in {tracking_uri}") from None
        parent = run.data.tags.get(TAG_PARENT_RUN)
        if parent:
            raise UserError(f"{option}: run {ref} is a trial of sweep {parent}; pass that parent run id")
        if TAG_SEARCH_SPACE not in run.data.tags:
            raise UserError(f"{option}: run {ref} is not a sweep's parent run (no {TAG_SEARCH_SPACE} tag)")
        return run
    name = os.path.splitext(os.path.basename(ref))[0] if ref.endswith((".yaml", ".yml")) else ref
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        known = sorted(e.name for e in client.search_experiments() if e.name != "Default")
        raise UserError(f"{option}: no sweep of search space {name!r} in {tracking_uri} (no such MLflow experiment); "
                        f"experiments there: {', '.join(known) or 'none'}")
    token = None
    while True:
        page = client.search_runs([experiment.experiment_id], filter_string=f"tags.`{TAG_SEARCH_SPACE}` = '{name}'",
                                  order_by=["attributes.start_time DESC"], max_results=200, page_token=token)
        for run in page:
            if TAG_PARENT_RUN not in run.data.tags and (preset is None or run.data.tags.get(TAG_PRESET) == preset):
                return run
        token = page.token
        if not token:
            which = f" with --preset {preset}" if preset else ""
            raise UserError(f"{option}: experiment {name!r} in {tracking_uri} holds no sweep{which} (no parent run)")


def _child_runs(client, experiment_id: str, parent_run_id: str) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string=children_filter(parent_run_id),
                                  max_results=1000, page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            return runs


def _objectives(params: dict) -> tuple:
    metric = parse_literal(params.get(f"{PARAM_SEARCH}metric", "val_accuracy"))
    mode = parse_literal(params.get(f"{PARAM_SEARCH}mode", "None"))
    metrics = [str(m) for m in metric] if isinstance(metric, list) else [str(metric)]
    modes = mode if isinstance(mode, list) else [mode] * len(metrics)
    return tuple(Objective(m, d if d in ("max", "min") else ("min" if "loss" in m else "max"))
                 for m, d in zip(metrics, modes))


def _seeds(text: Optional[str]) -> tuple:
    value = parse_literal(text) if text is not None else None
    if isinstance(value, list):
        return tuple(int(v) for v in value if is_number(v))
    return (int(value),) if is_number(value) else ()


def _algorithms(params: dict, parameters: dict, scenarios: dict) -> tuple:
    names = [params.get("base.algorithm.name")]
    for dimension in (parameters.get("algorithm.name"), scenarios.get("algorithm.name")):
        names += list(dimension.values) if dimension else []
    return tuple(dict.fromkeys(str(n) for n in names if n))


def trial_row(run, parameters: dict, scenarios: dict, default_seeds: tuple) -> Trial:
    tags, params, metrics = run.data.tags, run.data.params, dict(run.data.metrics)
    # an infinite value (ε = ∞) is logged as a tag reading "∞" (Tracker.log_metrics): read back as one
    metrics.update({k: parse_infinity(v) for k, v in tags.items() if k not in metrics and parse_infinity(v)})
    cell_number = tags.get(TAG_SCENARIO_CELL)
    rounds = metrics.get(METRIC_ROUNDS_COMPLETED)
    if rounds is None and str(tags.get(TAG_STOPPED_EARLY, "")).isdigit():
        rounds = int(tags[TAG_STOPPED_EARLY])
    seeds = _seeds(params.get(PARAM_SEEDS)) or default_seeds
    trial = Trial(
        run_id=run.info.run_id, run_name=run.info.run_name or run.info.run_id[:8],
        status=tags.get(TAG_STATUS, str(run.info.status).lower()), start_time=int(run.info.start_time or 0),
        cell=tags.get(TAG_SCENARIO), cell_number=int(cell_number) if str(cell_number).isdigit() else None,
        params={k: p.typed(params[k]) for k, p in parameters.items() if k in params},
        scenario={k: s.typed(params[k]) for k, s in scenarios.items() if k in params},
        seeds=seeds, metrics=metrics, rounds_completed=int(rounds) if rounds is not None else None,
        number=int(tags[TAG_TRIAL_NUMBER]) if str(tags.get(TAG_TRIAL_NUMBER)).isdigit() else None)
    logged = {s for m in trial.per_seed_metrics() for s in trial.per_seed(m)}
    if logged - set(seeds):
        trial = _replace(trial, seeds=tuple(sorted(set(seeds) | logged)))
    return trial


def _numbered(trials: list) -> list:
    """``trials`` (in cell, start order) with their number; a sweep from before runs were tagged with it: the order
    of start in the cell, as the sweep's driver numbered them."""
    if all(t.number is not None for t in trials):
        return trials
    starts: dict = {}
    numbered = []
    for trial in trials:
        starts[trial.cell_number] = starts.get(trial.cell_number, 0) + 1
        numbered.append(_replace(trial, number=starts[trial.cell_number]))
    return numbered


def _replace(trial: Trial, **changes) -> Trial:
    import dataclasses

    return dataclasses.replace(trial, **changes)


def load_sweep(tracking_uri: str, ref: str, option: str = "sweep", preset: Optional[str] = None) -> SweepResults:
    """Read the sweep ``ref`` names (a parent run id, or a search-space name: its newest sweep, with ``preset`` its
    newest sweep of that preset) from the store at ``tracking_uri``. Bad references raise :class:`UserError` naming
    ``option``."""
    check_store(tracking_uri)
    client = mlflow_client(tracking_uri)
    parent = resolve_parent(client, tracking_uri, ref, option, preset)
    params, tags = parent.data.params, parent.data.tags
    parameters = {}
    for name, text in params.items():
        if name.startswith(PARAM_SPACE):
            parsed = parse_space_param(name[len(PARAM_SPACE):], text)
            if parsed is not None:
                parameters[parsed.key] = parsed
    scenarios = {}
    for name, text in params.items():
        values = parse_literal(text) if name.startswith(PARAM_SCENARIO) else None
        if isinstance(values, list):
            key = name[len(PARAM_SCENARIO):]
            scenarios[key] = SweptParameter(key, "scenario", tuple(values))
    seeds = _seeds(params.get(PARAM_SEEDS))
    children = _child_runs(client, parent.info.experiment_id, parent.info.run_id)
    trials = _numbered(sorted((trial_row(run, parameters, scenarios, seeds) for run in children),
                              key=lambda t: (t.cell_number or 0, t.start_time, t.run_id)))
    num_samples = parse_literal(params.get(f"{PARAM_SEARCH}num_samples", "None"))
    return SweepResults(
        tracking_uri=tracking_uri, experiment_id=parent.info.experiment_id,
        space=tags.get(TAG_SEARCH_SPACE, ""), preset=tags.get(TAG_PRESET), parent_run_id=parent.info.run_id,
        parent_name=parent.info.run_name or "", status=tags.get(TAG_STATUS, str(parent.info.status).lower()),
        mlflow_status=str(parent.info.status), description=tags.get(TAG_DESCRIPTION, ""),
        parameters=parameters, scenarios=scenarios, objectives=_objectives(params),
        searcher=params.get(f"{PARAM_SEARCH}searcher", ""),
        num_samples=int(num_samples) if is_number(num_samples) else None, seeds=seeds,
        algorithms=_algorithms(params, parameters, scenarios), trials=tuple(trials),
        command=tags.get(TAG_COMMAND, ""))


def metric_history(results: SweepResults, run_id: str, metric: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric of one run, in round order (one store query)."""
    history = sorted(mlflow_client(results.tracking_uri).get_metric_history(run_id, metric),
                     key=lambda m: (m.step, m.timestamp))
    by_step = {m.step: m.value for m in history}  # a resumed trial may log a round twice: the last one counts
    return list(by_step), list(by_step.values())
