"""Search-space files: ``search_spaces/<name>.yaml`` = a base experiment config, the parameters to sweep,
the search settings and the per-trial resources. Validated completely at load time.

Example::

    description: FedAvg vs FedProx on embedded digits
    base: {dataset: {name: digits}, rounds: 5, ...}        # an experiment config (platform.config.experiment)
    parameters:                                            # dotted config keys -> one distribution each
      algorithm.name: {choice: [fedavg, fedprox]}
      algorithm.mu: {loguniform: [0.001, 1.0], when: {algorithm.name: fedprox}}
      clients.lr: {loguniform: [0.01, 0.3]}
    search: {searcher: tpe, num_samples: 6, metric: val_accuracy, seeds: [0],
             scheduler: {kind: asha, grace_period: 2}}
    resources: {cpu: 1, gpu: 0}

``when`` makes a parameter conditional: it is sampled only in trials whose earlier parameters take the
given value (or one of a list of values).

``search.metric`` may be any metric that every algorithm the space can run declares (``Algorithm.declared_metrics``:
``val_accuracy`` for all); ``search.mode`` defaults to the metric's declared direction. Select on validation:
test metrics are reported, and selecting on one prints a warning.

Multi-objective search: ``search.metric`` may list several distinct metrics, e.g.
``{metric: [val_accuracy, train_loss], mode: [max, null]}`` (``mode`` omitted, or a list of the same length whose
null entries take each metric's declared direction). Optuna's TPE and random samplers then sample for all
objectives at once, the grid searcher runs its grid, and the sweep reports the Pareto front of the finished
trials instead of one best trial. ASHA needs a single metric.

Scenario grids: a top-level ``scenarios:`` block maps dotted config keys to lists of values, e.g.
``{partition.alpha: [10, 1, 0.1, 0.01]}``. Each cell of the cross product of those lists (the first key varies
slowest) is swept as a study of its own: the base config with the cell's values, its own Optuna sampler (seeded by
:func:`cell_sampler_seed` from ``search.sampler_seed`` and the cell index), its own ``search.num_samples`` trials (the
grid searcher: its own full grid), its own ASHA state and its own best trial (or Pareto front), all under the sweep's
one parent run. Scenario keys never enter the sampler, may not also be parameters, and every cell's configurations
are validated as a space without scenarios is. ``--set KEY=VALUE`` on a scenario key pins that dimension to the one
value.

``--set KEY=VALUE`` on a swept parameter pins it too: the parameter leaves the sampler and every trial runs the
value; parameters conditional on it (``when``) stay only where the value satisfies their condition. A space left
with no parameter runs its base config once (searcher grid, one sample).

Reference values: an optional top-level ``reference:`` block holds the paper's numbers for the question, printed next
to ours by ``python -m platform.report`` (see :mod:`platform.config.reference`)::

    reference:
      source: "docs/methods/feded.md §7.1, Table 4.1"
      note: "MNIST, CNN clients; ours is embedded digits"
      values:
        - {label: FedED-w2, arm: {algorithm.beta: 6}, scenario: {partition.alpha: 10.0}, metric: test_accuracy,
           value: 0.9305, std: 0.0058}
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from platform.config.experiment import ExperimentConfig, apply_overrides, build_experiment, error_message, load_yaml
from platform.config.space_files import MAX_NUM_SAMPLES
from platform.config.trials import asha_rungs, grid_points  # noqa: F401 - where the sweep has always found them
from platform.config.trials import check_asha, fit_grace_period, sample_flags
from platform.config.combinations import scalar_text as _scalar
from platform.config.combinations import keys_naming, validate_combinations
from platform.config.presets import Preset
from platform.config.space_files import (SECTIONS, available_search_spaces, find_search_space, read_search_space,
                                         search_space_dirs)
from platform.config.reference import Reference, check_reference_metrics, parse_reference
from platform.errors import ConfigError, UserError
from platform.config.schema import build, spec

DISTRIBUTIONS = ("uniform", "loguniform", "int", "choice", "grid")
SEARCHERS = ("tpe", "random", "grid")


@dataclass(frozen=True)
class Distribution:
    kind: str
    args: tuple
    when: dict = field(default_factory=dict)

    @property
    def candidates(self) -> list:
        """Values that validation tries: the bounds of a range, every option of a choice or grid."""
        return list(self.args)

    def applies(self, params: dict) -> bool:
        for key, wanted in self.when.items():
            allowed = wanted if isinstance(wanted, list) else [wanted]
            if key not in params or params[key] not in allowed:
                return False
        return True


def parse_distribution(key: str, raw: Any) -> Distribution:
    where = f"parameters.{key}"
    if not isinstance(raw, dict):
        raise ConfigError(where, f"must be a mapping with one of {', '.join(DISTRIBUTIONS)}, got {raw!r}")
    kinds = [k for k in raw if k in DISTRIBUTIONS]
    extra = [k for k in raw if k not in DISTRIBUTIONS and k != "when"]
    if len(kinds) != 1 or extra:
        raise ConfigError(where, f"needs exactly one of {', '.join(DISTRIBUTIONS)} (plus optional 'when'), "
                                 f"got keys {', '.join(map(str, raw))}")
    kind = kinds[0]
    args = raw[kind]
    when = raw.get("when") or {}
    if not isinstance(when, dict):
        raise ConfigError(f"{where}.when", f"must map earlier parameters to values, got {when!r}")
    if not isinstance(args, list) or not args:
        raise ConfigError(f"{where}.{kind}", f"must be a non-empty list, got {args!r}")
    if kind in ("uniform", "loguniform", "int"):
        if len(args) != 2 or not all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args):
            raise ConfigError(f"{where}.{kind}", f"must be [low, high] numbers, got {args!r}")
        low, high = args
        if not all(math.isfinite(a) for a in args):
            raise ConfigError(f"{where}.{kind}", f"bounds must be finite numbers, got {args!r}")
        if not low < high:
            raise ConfigError(f"{where}.{kind}", f"low must be < high, got {args!r}")
        if kind == "loguniform" and low <= 0:
            raise ConfigError(f"{where}.{kind}", f"low must be > 0 for a log scale, got {low}")
        if kind == "int" and not all(float(a).is_integer() for a in args):
            raise ConfigError(f"{where}.{kind}", f"bounds must be integers, got {args!r}")
        args = [int(a) for a in args] if kind == "int" else [float(a) for a in args]
    return Distribution(kind, tuple(args), dict(when))


@dataclass(frozen=True)
class SchedulerConfig:
    kind: str = spec("none", doc="none, or asha (early stopping over rounds).", choices=("none", "asha"))
    grace_period: int = spec(1, doc="ASHA: rounds every trial runs before it may be stopped.", ge=1)
    reduction_factor: float = spec(2.0, doc="ASHA: keep 1/reduction_factor of trials at each rung.", gt=1)
    burnin_margin: int = spec(10, doc="ASHA: rounds after a method's burn-in (FedPA, FedKPPA, SGLD) before a "
                                      "trial may be stopped; grace_period must be >= burn-in + margin "
                                      "(docs/methods/fedkp_fedpa.md §13 recommends 100 at full scale).", ge=0)


@dataclass(frozen=True)
class SearchConfig:
    searcher: str = spec("tpe", doc="Optuna TPE, Optuna random sampling, or a full grid.", choices=SEARCHERS)
    num_samples: int = spec(6, doc="Trials (grid: repetitions of the whole grid).", ge=1, le=MAX_NUM_SAMPLES)
    metric: Any = spec("val_accuracy", doc="Reported metric the searcher optimises (last round): one every "
                                           "algorithm of the space declares (val_accuracy for all); or a list of "
                                           "distinct metrics for a multi-objective search (Pareto front).")
    mode: Any = spec(None, doc="max or min; null = the metric's declared direction. With a list of metrics: "
                               "null or a list of the same length (each max, min or null).")
    scheduler: SchedulerConfig = spec(factory=SchedulerConfig)
    seeds: Optional[list[int]] = spec(None, doc="Run every configuration on each seed; report mean and std.")
    max_concurrent_trials: Optional[int] = spec(None, doc="Trials at once; default: as resources allow.", ge=1)
    sampler_seed: int = spec(0, doc="Seed of the Optuna sampler.", ge=0)
    checkpoint_every: int = spec(0, doc="Checkpoint each trial every this many rounds so --resume continues it "
                                        "mid-way; 0 = never (an interrupted trial restarts from round 1).", ge=0)
    max_failures: int = spec(1, doc="Times a failed trial is run again (from its last checkpoint, else from round "
                                    "1) before it counts as failed: a killed trial process or node; 0 = never.",
                             ge=0)
    trials_per_experiment: int = spec(500, doc="Trials per Tune experiment: a study of more runs as consecutive "
                                               "experiments, the searcher's history carried over, so the driver "
                                               "keeps one experiment's trials in memory (Tune keeps every trial of "
                                               "an experiment). ASHA's rungs start afresh in each.", ge=1)

    def validate(self, path: str) -> None:
        _check_metric_and_mode(self.metric, self.mode, path)
        if self.multi_objective and self.scheduler.kind == "asha":
            raise ConfigError(f"{path}.scheduler.kind", f"asha needs one metric, got {len(self.metric)} "
                                                        f"({', '.join(self.metric)}); use kind: none for a "
                                                        f"multi-objective search")
        if self.seeds is not None:
            if not self.seeds:
                raise ConfigError(f"{path}.seeds", "must list at least one seed")
            if any(s < 0 for s in self.seeds) or len(set(self.seeds)) != len(self.seeds):
                raise ConfigError(f"{path}.seeds", f"must be distinct non-negative integers, got {self.seeds}")


    @property
    def multi_objective(self) -> bool:
        """True when the search has several objectives (``metric`` is a list); the sweep reports a Pareto front."""
        return isinstance(self.metric, (list, tuple))

    @property
    def metrics(self) -> list[str]:
        """The objective metrics, in order (one for a single-objective search)."""
        return list(self.metric) if self.multi_objective else [self.metric]

    @property
    def objectives(self) -> list[tuple[str, str]]:
        """``[(metric, mode), ...]``; modes are resolved once the space is loaded (null before)."""
        modes = list(self.mode) if isinstance(self.mode, (list, tuple)) else [self.mode] * len(self.metrics)
        return list(zip(self.metrics, modes))


def _check_metric_and_mode(metric: Any, mode: Any, path: str) -> None:
    """The shape of ``search.metric`` / ``search.mode`` (whether the metrics exist is checked against the
    algorithms later, by :func:`_selection_modes`)."""
    modes = ("max", "min")
    if isinstance(metric, (list, tuple)):
        if not metric or not all(isinstance(m, str) and m for m in metric) or len(set(metric)) != len(metric):
            raise ConfigError(f"{path}.metric", f"must be a metric name or a non-empty list of distinct metric "
                                                f"names, got {list(metric)!r}")
        if mode is None:
            return
        if not isinstance(mode, (list, tuple)) or len(mode) != len(metric) or \
                any(m is not None and m not in modes for m in mode):
            raise ConfigError(f"{path}.mode", f"with {len(metric)} metrics must be null or a list of "
                                              f"{len(metric)} entries, each max, min or null (the metric's "
                                              f"declared direction), got {mode!r}")
        return
    if not isinstance(metric, str) or not metric:
        raise ConfigError(f"{path}.metric", f"must be a metric name or a non-empty list of distinct metric "
                                            f"names, got {metric!r}")
    if mode is not None and mode not in modes:
        raise ConfigError(f"{path}.mode", f"unknown value {mode!r}; allowed: max, min (or null: the metric's "
                                          f"declared direction)")


@dataclass(frozen=True)
class SearchSpace:
    name: str
    path: str
    description: str
    base: dict  # raw base config (validated); trial configs are base + sampled parameters
    parameters: dict[str, Distribution]
    search: SearchConfig
    scenarios: dict = field(default_factory=dict)  # dotted config key -> tuple of values (``scenarios:``)
    reference: Optional[Reference] = None  # the paper's values for the question (``reference:``)
    preset: Optional[Preset] = None  # the ``presets:`` entry laid over the file (``--preset``), if any
    presets: tuple = ()  # the names of the space's presets
    overrides: dict = field(default_factory=dict)  # the --set values it was loaded with
    grid_limit: Optional[int] = None  # grid searcher: --num-samples N runs N points spread over the grid (grid.py)
    notes: tuple = ()  # what the loader adjusted to fit the command line (printed by the commands)
    default_minutes: Optional[float] = None  # ``default_minutes:``: its default setting's minutes on 2 CPUs

    def rerun_command(self, values: dict) -> str:
        """The ``python -m platform.run`` line that runs one configuration of this space alone: the space (by name, or
        by its path where the name would find another file), its preset, every ``--set`` it was loaded with, then
        ``values`` (a cell's, a trial's). Add ``--set seed=S`` for replicate S."""
        import json
        import shlex

        try:
            found = os.path.abspath(find_search_space(self.name))
        except UserError:
            found = None
        parts = ["python", "-m", "platform.run", self.name if found == self.path else self.path]
        if self.preset is not None:
            parts += ["--preset", self.preset.name]
        for key, value in {**self.overrides, **values}.items():
            text = json.dumps(value) if isinstance(value, (list, dict)) else _scalar(value)
            parts += ["--set", f"{key}={text}"]
        return " ".join(shlex.quote(p) for p in parts)

    @property
    def preset_name(self) -> Optional[str]:
        return self.preset.name if self.preset is not None else None

    @property
    def seeds(self) -> list[int]:
        return list(self.search.seeds) if self.search.seeds else [int(self.base.get("seed", 0) or 0)]

    def trial_config(self, params: dict):
        return build_experiment(apply_overrides(self.base, params))

    def trials_per_cell(self) -> list[tuple[str, int]]:
        """(cell label, trials) per scenario cell, in :meth:`cells` order (one unlabelled row without scenarios): the
        search budget of each arm the sweep compares."""
        def trials(space: "SearchSpace") -> int:
            grid = len(grid_points(space)) if space.search.searcher == "grid" else 1
            return space.search.num_samples * grid

        if not self.scenarios:
            return [("", trials(self))]
        return [(cell_label(cell), trials(self.cell_space(i))) for i, cell in enumerate(self.cells())]

    def cells(self) -> list[dict]:
        """The scenario cells: every combination of the ``scenarios`` values, ``{key: value}``, in the order of the
        cross product (the first key varies slowest, each list in file order); ``[{}]`` without scenarios."""
        keys = list(self.scenarios)
        return [dict(zip(keys, values)) for values in itertools.product(*(self.scenarios[k] for k in keys))]

    def cell_space(self, index: int) -> "SearchSpace":
        """Cell ``index`` (0-based, in :meth:`cells` order) as a search space of its own: the base config with the
        cell's values, no scenarios, and the cell's own sampler seed (:func:`cell_sampler_seed`).

        A parameter whose ``when`` names a scenario key is kept (without that condition) in the cells where it holds
        and dropped elsewhere, with the parameters conditional on it. A cell left with no parameter runs its base
        config once (searcher grid, one sample)."""
        cell = self.cells()[index]
        parameters = fix_values(self.parameters, cell)
        search = dataclasses.replace(self.search, sampler_seed=cell_sampler_seed(self.search.sampler_seed, index))
        if not parameters:
            search = dataclasses.replace(search, searcher="grid", num_samples=1)
        return dataclasses.replace(self, base=apply_overrides(self.base, cell), parameters=parameters, search=search,
                                   scenarios={})


def fix_values(parameters: dict[str, Distribution], values: dict, scenarios: dict | None = None
               ) -> dict[str, Distribution]:
    """``parameters`` (in dependency order) with the keys of ``values`` fixed: those keys leave the sampler; a
    parameter conditional on one keeps the rest of its condition where the value satisfies it and is dropped
    elsewhere, with the parameters conditional on it. Conditions on ``scenarios`` keys are left for the cells."""
    scenarios = scenarios or {}
    kept: dict[str, Distribution] = {}
    for key, dist in parameters.items():  # in dependency order: conditions before what they condition
        if key in values:
            continue
        fixed = {k: w for k, w in dist.when.items() if k in values}
        rest = {k: w for k, w in dist.when.items() if k not in values}
        if (not Distribution(dist.kind, dist.args, fixed).applies(values)
                or any(k not in kept and k not in scenarios for k in rest)):
            continue
        kept[key] = dataclasses.replace(dist, when=rest)
    return kept


def cell_label(cell: dict) -> str:
    """``"partition.alpha=0.1, dataset.name=digits"``: how a scenario cell is printed and tagged."""
    return ", ".join(f"{k}={_scalar(v)}" for k, v in cell.items())


def cell_sampler_seed(sampler_seed: int, index: int) -> int:
    """The Optuna sampler seed of scenario cell ``index`` (0-based): numpy's SeedSequence of (``sampler_seed``,
    ``index``), so no two cells of a sweep (and no cell and another sweep's cell with an adjacent seed) draw the
    same stream."""
    import numpy as np

    return int(np.random.SeedSequence([int(sampler_seed), int(index)]).generate_state(1)[0])


#: A check of a whole experiment config from a layer above config (``platform.preflight.check_experiment``)
ConfigCheck = Callable[[ExperimentConfig], None]


def _no_check(config: ExperimentConfig) -> None:
    return None


def load_search_space(name: str, overrides: dict[str, Any] | None = None,
                      num_samples: Optional[int] = None, check: ConfigCheck = _no_check,
                      preset: Optional[str] = None, repeats: Optional[int] = None) -> SearchSpace:
    """Load and fully validate a search space; ``preset`` (``--preset``) lays one of its ``presets:`` over the file
    (:mod:`platform.config.presets`), then ``overrides`` (``--set``) apply to its base config. ``check`` runs on
    every configuration validation tries (the base, each scenario cell, each candidate value), its errors reported
    as this loader reports its own: the sweep passes ``platform.preflight.check_experiment``.

    ``num_samples`` (``--num-samples N``): at most N trials per cell, whatever the searcher (the grid searcher runs N
    of its points spread evenly over the grid, once each); ``repeats`` (``--repeats K``): the grid runs K times, as
    ``search.num_samples`` does in the file."""
    path, raw, presets = read_search_space(name, preset)
    base = dict(raw.get("base") or {})
    if raw.get("resources") is not None:
        if "resources" in base:
            raise ConfigError("resources", "set resources either at top level or in base, not both")
        base["resources"] = raw["resources"]
    own_rounds = base.get("rounds", ExperimentConfig.__dataclass_fields__["rounds"].default)
    base = apply_overrides(base, overrides or {})
    base_config = build_experiment(base)  # validates the base, --set included
    check(base_config)
    params_raw = raw.get("parameters") or {}
    if not isinstance(params_raw, dict):
        raise ConfigError("parameters", "must map dotted config keys to distributions")
    parameters = {key: parse_distribution(key, d) for key, d in params_raw.items()}
    scenarios = parse_scenarios(raw.get("scenarios"), parameters, overrides or {})
    reference = parse_reference(raw.get("reference"), parameters, raw.get("scenarios") or {})
    parameters = _dependency_order(parameters, scenarios)
    pinned = {k: v for k, v in (overrides or {}).items() if k in parameters}  # --set on a swept key: its value
    for key, value in pinned.items():
        dist = parameters[key]
        if dist.kind in ("choice", "grid") and not any(
                value == a and isinstance(value, bool) == isinstance(a, bool) for a in dist.args):
            raise ConfigError(f"--set {key}", f"{value!r} is not one of the values the space sweeps; allowed: "
                                              f"{', '.join(map(repr, dist.args))} (or edit parameters.{key})")
    if pinned:
        parameters = fix_values(parameters, pinned, scenarios)
    search_raw = dict(raw.get("search") or {})
    if isinstance(search_raw.get("metric"), list) and len(search_raw["metric"]) == 1:  # one objective after all
        search_raw["metric"] = search_raw["metric"][0]
        if isinstance(search_raw.get("mode"), list) and len(search_raw["mode"]) == 1:
            search_raw["mode"] = search_raw["mode"][0]
    search = build(SearchConfig, search_raw, "search")
    if pinned and not parameters:
        search = dataclasses.replace(search, searcher="grid", num_samples=1)
    search, grid_limit = sample_flags(search, num_samples, repeats)
    if search.searcher == "grid":
        bad = [k for k, d in parameters.items() if d.kind not in ("choice", "grid")]
        if bad:
            raise ConfigError(f"parameters.{bad[0]}", "the grid searcher needs choice or grid values; "
                                                      "use searcher: tpe or random for ranges")
    own_rounds = [own_rounds, *((raw.get("scenarios") or {}).get("rounds") or [])]
    search, notes = fit_grace_period(search, own_rounds, base_config.rounds, overrides or {})
    space = SearchSpace(os.path.splitext(os.path.basename(path))[0], os.path.abspath(path),
                        str(raw.get("description") or ""), base, parameters, search, scenarios, reference,
                        presets.get(preset) if preset else None, tuple(presets), dict(overrides or {}),
                        grid_limit=grid_limit, notes=notes, default_minutes=raw.get("default_minutes"))
    if scenarios:
        configs = _validate_cells(space, check)
    else:
        if search.scheduler.kind == "asha" and search.scheduler.grace_period > base_config.rounds:
            raise ConfigError("search.scheduler.grace_period", f"must be <= base.rounds ({base_config.rounds}), "
                                                               f"got {search.scheduler.grace_period}")
        configs = _validate_parameter_values(space, check)
    modes = _selection_modes(search, configs)
    check_reference_metrics(reference, configs)
    if search.multi_objective:  # lists, whatever sequence the file gave
        search = dataclasses.replace(search, metric=search.metrics, mode=modes)
    else:
        search = dataclasses.replace(search, mode=modes[0])
    return dataclasses.replace(space, search=search)


def parse_scenarios(raw: Any, parameters: dict, overrides: dict) -> dict[str, tuple]:
    """The ``scenarios:`` block: dotted config key -> a non-empty list of distinct values (their shape only; the
    values are validated cell by cell in :func:`_validate_cells`). A ``--set`` of a scenario key pins it to that
    value."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("scenarios", f"must map dotted config keys to non-empty lists of values, e.g. "
                                       f"{{partition.alpha: [10, 1, 0.1]}}, got {raw!r}")
    scenarios: dict[str, tuple] = {}
    for key, values in raw.items():
        where = f"scenarios.{key}"
        if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
            raise ConfigError(where, "must be a dotted config key, e.g. partition.alpha")
        if key in parameters:
            raise ConfigError(where, f"is also a parameter (parameters.{key}); a key is either swept by the sampler "
                                     f"or a scenario dimension, not both")
        if key == "seed":
            raise ConfigError(where, "seeds are replicates inside each trial: list them in search.seeds, not as "
                                     "scenarios")
        if not isinstance(values, list) or not values:
            raise ConfigError(where, f"must be a non-empty list of values, got {values!r}")
        if any(values[j] == v and isinstance(values[j], bool) == isinstance(v, bool)
               for i, v in enumerate(values) for j in range(i)):  # 10 and 10.0 are one cell; true and 1 are not
            raise ConfigError(where, f"lists a value twice: {values!r}")
        scenarios[key] = tuple(values)
    for key, value in overrides.items():  # --set on a scenario key: that dimension is the one value
        if key in scenarios:
            scenarios[key] = (value,)
    for key in scenarios:
        clash = [k for k in scenarios if k != key and k.startswith(key + ".")]
        clash += [k for k in parameters if k.startswith(key + ".") or key.startswith(k + ".")]
        if clash:
            raise ConfigError(f"scenarios.{key}", f"overlaps {clash[0]}; scenario keys must not contain one "
                                                  f"another or a parameter")
    return scenarios


def _validate_cells(space: SearchSpace, check: ConfigCheck) -> list:
    """Every scenario cell's configurations pass validation as a space without scenarios does (the base with the
    cell's values, every parameter value, the ASHA rules); returns every configuration tried, over all cells."""
    configs = []
    grace = space.search.scheduler.grace_period
    for index, cell in enumerate(space.cells()):
        label = cell_label(cell)
        try:
            cell_space = space.cell_space(index)
            cell_base = cell_space.trial_config({})
            check(cell_base)
        except ConfigError as err:
            keys = keys_naming(cell, err.field)
            key = keys[0] if keys else (next(iter(cell)) if len(cell) == 1 else None)
            if key is not None:
                raise ConfigError(f"scenarios.{key}", f"value {cell[key]!r} is invalid"
                                                      f"{'' if len(cell) == 1 else f' in cell {label}'}: {err}") from None
            raise ConfigError("scenarios", f"cell {label} is invalid: {err}") from None
        if space.search.scheduler.kind == "asha" and grace > cell_base.rounds:
            raise ConfigError("search.scheduler.grace_period", f"must be <= rounds ({cell_base.rounds} in scenario "
                                                               f"cell {label}), got {grace}")
        try:
            configs += _validate_parameter_values(cell_space, check)
        except ConfigError as err:
            raise ConfigError(err.field, f"in scenario cell {label}: {error_message(err)}") from None
    return configs


def _selection_modes(search: SearchConfig, configs: list) -> list[str]:
    """Check every objective of ``search.metric`` against the algorithms the space can run; return their modes."""
    multi = search.multi_objective
    return [_selection_mode(metric, mode, configs, f" (objective {i + 1} of {len(search.metrics)})" if multi else "")
            for i, (metric, mode) in enumerate(search.objectives)]


def _selection_mode(name: str, mode: Optional[str], configs: list, where: str = "") -> str:
    """Check metric ``name`` is declared by every algorithm the space can run; return its mode (``mode``, if given,
    must agree with the declared direction)."""
    from algorithms import resolve_algorithm
    from algorithms.base import describe_metrics

    names = list(dict.fromkeys(c.algorithm.name for c in configs))
    declared = {n: resolve_algorithm(n).declared_metrics() for n in names}
    common = {k: m for k, m in declared[names[0]].items() if all(k in d for d in declared.values())}
    if name not in common:
        missing = [n for n in names if name not in declared[n]]
        raise ConfigError("search.metric", f"unknown metric {name!r}{where} for {', '.join(missing)}; known: "
                                           f"{describe_metrics(common)}")
    metric = common[name]
    if mode is not None and mode != metric.mode:
        raise ConfigError("search.mode", f"{metric.name}{where} is better when "
                                         f"{'higher' if metric.mode == 'max' else 'lower'} (mode {metric.mode}), "
                                         f"got {mode}")
    if metric.name.startswith("val_"):
        for c in configs:
            global_model = resolve_algorithm(c.algorithm.name).evaluates_clients is False
            if global_model and c.server.val_fraction == 0:
                raise ConfigError("search.metric", f"{metric.name} is measured on the server's validation split: set "
                                                   f"base.server.val_fraction > 0 (it is 0)")
    return metric.mode


def _dependency_order(parameters: dict[str, Distribution], scenarios: dict | None = None) -> dict[str, Distribution]:
    """Order parameters so each comes after those its ``when`` refers to (file order otherwise kept). ``when`` may
    also name a scenario key (fixed in each cell, see :meth:`SearchSpace.cell_space`)."""
    scenarios = scenarios or {}
    for key, dist in parameters.items():
        for cond in dist.when:
            if cond not in parameters and cond not in scenarios:
                raise ConfigError(f"parameters.{key}.when", f"refers to {cond!r}, which is not a parameter"
                                                            f"{' or a scenario key' if scenarios else ''}; "
                                                            f"parameters: {', '.join(parameters)}")
    ordered: dict[str, Distribution] = {}
    while len(ordered) < len(parameters):
        ready = [k for k, d in parameters.items()
                 if k not in ordered and all(c in ordered or c in scenarios for c in d.when)]
        if not ready:
            cycle = [k for k in parameters if k not in ordered]
            raise ConfigError(f"parameters.{cycle[0]}.when", f"conditions form a cycle among {', '.join(cycle)}")
        ordered.update((k, parameters[k]) for k in ready)
    return ordered


def _validate_parameter_values(space: SearchSpace, check: ConfigCheck) -> list:
    """Every parameter must be a config key, and every value it can take must pass config validation; returns
    the configurations tried (the base and one per candidate value).

    Also enforces the ASHA rules on every configuration tried (:func:`platform.config.trials.check_asha`).
    """
    configs = [space.trial_config({})]
    for key, dist in space.parameters.items():
        context = {}
        for cond, wanted in dist.when.items():
            context[cond] = wanted[0] if isinstance(wanted, list) else wanted
        for value in dist.candidates:
            try:
                configs.append(space.trial_config({**context, key: value}))
                check(configs[-1])
            except ConfigError as err:
                raise ConfigError(f"parameters.{key}", f"value {value!r} is invalid: {err}") from None
    configs += validate_combinations(space, check)
    if space.search.scheduler.kind == "asha":
        check_asha(configs, space.search.scheduler)
    return configs


def load_reference(name: str, preset: Optional[str] = None) -> Optional[Reference]:
    """The ``reference:`` block of search space ``name`` (with ``preset`` laid over it; validated as at load time,
    without building its configs); None where the space has none. Raises UserError when the space is not found."""
    _, raw, _ = read_search_space(name, preset)
    if raw.get("reference") is None:
        return None
    params_raw = raw.get("parameters") or {}
    parameters = ({key: parse_distribution(key, d) for key, d in params_raw.items()}
                  if isinstance(params_raw, dict) else {})
    return parse_reference(raw.get("reference"), parameters, raw.get("scenarios") or {})
