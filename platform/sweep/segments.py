"""A long study runs as consecutive Tune experiments ("segments") of at most ``search.trials_per_experiment`` trials.

Why: Tune keeps every trial of an experiment in the driver for the experiment's whole life (its ``Trial`` object,
last result, per-metric statistics and cached JSON state: 50-100 KiB per trial, ``docs/benchmarks/driver_memory.md``)
and writes all of them at each experiment checkpoint. A segment's trials are let go when it ends; what the sweep keeps
of each ended trial is a :class:`TrialOutcome` (its last selection and test figures, its parameters and its error, well
under 1 KiB). So the driver's memory is bounded by one segment's trials, not the study's.

What carries over from one segment to the next:

- the searcher's history: the next segment's Optuna study starts with every finished trial so far
  (:func:`warm_start_study`, ``optuna.trial.create_trial``), and its sampler is seeded from (sampler seed, segment)
  (:func:`segment_sampler_seed`) so it never repeats an earlier segment's draws;
- the sweep callback (the same object: trial numbers, MLflow runs), recorded after each segment for ``--resume``.

What does not: ASHA's rungs (a scheduler's state is per Tune experiment), so an ASHA study of more trials than one
segment compares a trial only with the trials of its own segment; a grid is split by points, each point keeping all
its ``num_samples`` repetitions in one segment.

Layout: segment 1 is the study's own Tune experiment (as before segments existed), segment k >= 2 is
``<study>/segment-00k``, and ``<study>/segments.json`` records each ended segment (its outcomes, whether a trial
failed) and the callback's state, so that ``--resume`` skips the segments that ended cleanly and restores the rest.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Optional

from platform.config.run_schema import diverged, is_number, setting_metrics

RECORD_FILE = "segments.json"


@dataclasses.dataclass(frozen=True)
class Segment:
    """One Tune experiment of a study: ``num_samples`` trials (grid: repetitions of ``grid_points``)."""
    index: int  # 0-based
    num_samples: int
    grid_points: Optional[tuple] = None

    @property
    def number(self) -> int:
        return self.index + 1

    @property
    def trials(self) -> int:
        return self.num_samples * (len(self.grid_points) if self.grid_points is not None else 1)

    @property
    def dir_name(self) -> str:
        return f"segment-{self.number:03d}"


def plan(space) -> list[Segment]:
    """The segments of ``space``'s study (one when it has at most ``search.trials_per_experiment`` trials)."""
    from platform.config.search_space import grid_points

    search = space.search
    size = search.trials_per_experiment
    if search.searcher == "grid":
        points = grid_points(space)
        per = max(1, size // search.num_samples)
        return [Segment(i, search.num_samples, tuple(points[start:start + per]))
                for i, start in enumerate(range(0, len(points), per))]
    return [Segment(i, min(size, search.num_samples - start))
            for i, start in enumerate(range(0, search.num_samples, size))]


def segment_sampler_seed(sampler_seed: Optional[int], index: int) -> Optional[int]:
    """The sampler seed of segment ``index``: the study's own for the first (a one-segment study samples exactly as
    before), else one drawn from numpy's SeedSequence of the study's seed spawned by the index."""
    if sampler_seed is None or index == 0:
        return sampler_seed
    import numpy as np

    return int(np.random.SeedSequence(int(sampler_seed), spawn_key=(int(index),)).generate_state(1)[0])


@dataclasses.dataclass
class TrialOutcome:
    """What the report needs of one ended trial once its Tune experiment is gone; it reads like Tune's ``Result``
    (``metrics``, ``config``, ``error``)."""
    metrics: dict
    config: dict
    error: Optional[str] = None
    config_error: Optional[str] = None  # the error was a ConfigError (bad input): its ``field: message``

    def to_json(self) -> dict:
        return {"metrics": self.metrics, "config": self.config, "error": self.error,
                "config_error": self.config_error}

    @classmethod
    def from_json(cls, data: dict) -> "TrialOutcome":
        return cls(dict(data["metrics"]), dict(data["config"]), data.get("error"), data.get("config_error"))


def outcome(result, kept: Iterable[str]) -> TrialOutcome:
    """A Tune ``Result`` reduced to the metrics named in ``kept`` (with their ``_std`` and their values per seed,
    ``<metric>/seed_<s>``, which the best's lead over the runner-up needs), ``round`` and ``trial_id``."""
    import json

    from platform.config.run_schema import PER_SEED_SEPARATOR, RESULT_DETAILS
    from platform.errors import ConfigError

    kept = set(kept)
    names = {"round", "trial_id", *kept, *(f"{k}_std" for k in kept)}
    reported = dict(result.metrics or {})
    details = reported.get(RESULT_DETAILS)
    per_seed = {k: v for k, v in (json.loads(details) if isinstance(details, str) else {}).items()
                if PER_SEED_SEPARATOR in k and k.split(PER_SEED_SEPARATOR)[0] in kept}
    metrics = {**{k: v for k, v in reported.items() if k in names}, **per_seed}
    error = result.error
    # Ray hands a trial's exception back as RayTaskError(ConfigError): an instance of both, the original as ``cause``
    refused = str(getattr(error, "cause", error)) if isinstance(error, ConfigError) else None
    return TrialOutcome(metrics, dict(result.config or {}), None if error is None else str(error), refused)


class StudyResults(list):
    """Every ended trial of a study (its :class:`TrialOutcome` list) and where the study lives."""

    def __init__(self, experiment_path: str, outcomes: Iterable[TrialOutcome] = ()):
        super().__init__(outcomes)
        self.experiment_path = experiment_path


def distributions(parameters: dict) -> dict:
    """The Optuna distribution of each sampled parameter, as ``platform.sweep.study.DefineByRun`` suggests it."""
    import optuna

    made = {}
    for key, dist in parameters.items():
        if dist.kind == "uniform":
            made[key] = optuna.distributions.FloatDistribution(*dist.args)
        elif dist.kind == "loguniform":
            made[key] = optuna.distributions.FloatDistribution(*dist.args, log=True)
        elif dist.kind == "int":
            made[key] = optuna.distributions.IntDistribution(*dist.args)
        else:
            made[key] = optuna.distributions.CategoricalDistribution(list(dist.args))
    return made


def warm_start_study(space, outcomes: list[TrialOutcome], study_name: str):
    """An in-memory Optuna storage holding study ``study_name`` with every finished trial of ``outcomes`` (its
    parameters and last objective values) as a complete trial; failed and diverged trials are left out, as Tune's
    searcher leaves them out of its own study. Returns (storage, trials added)."""
    import optuna

    search = space.search
    storage = optuna.storages.InMemoryStorage()
    directions = ["maximize" if mode == "max" else "minimize" for _, mode in search.objectives]
    study = optuna.create_study(storage=storage, study_name=study_name, directions=directions)
    known = distributions(space.parameters)
    settings = setting_metrics()
    trials = []
    for item in outcomes:
        values = [item.metrics.get(metric) for metric in search.metrics]
        if (item.error is not None or not all(is_number(v) for v in values)
                or diverged(item.metrics, search.metrics, settings)):  # ε = ∞ is kept: a value, not a divergence
            continue
        params = {k: v for k, v in item.config.items() if k in known}
        trials.append(optuna.trial.create_trial(params=params, distributions={k: known[k] for k in params},
                                                values=values))
    study.add_trials(trials)
    return storage, len(trials)


# ---- the record of ended segments (<study>/segments.json) ----

def read_record(study_dir: str) -> dict:
    """The study's record: ``{"segments": {number: {"outcomes": [...], "failed": n}}, "callback": state}``; empty
    when no segment has ended."""
    from platform.stages.storage import isfile, join, read_bytes

    path = join(study_dir, RECORD_FILE)
    if not isfile(path):
        return {}
    return json.loads(read_bytes(path))  # NaN and infinities round-trip (Python's JSON dialect)


def record_segment(study_dir: str, record: dict, segment: Segment, outcomes: list[TrialOutcome],
                   callback_state: dict[str, Any]) -> dict:
    """``record`` with ``segment``'s outcomes and the callback's state, written whole (temporary file renamed into
    place; one PUT on an object store)."""
    from platform.stages.storage import join, write_bytes

    failed = sum(1 for o in outcomes if o.error is not None)
    record = {**record, "segments": {**record.get("segments", {}), str(segment.number): {
        "outcomes": [o.to_json() for o in outcomes], "failed": failed}}, "callback": callback_state}
    write_bytes(join(study_dir, RECORD_FILE), json.dumps(record).encode())
    return record


def ended_cleanly(record: dict, segment: Segment) -> Optional[list[TrialOutcome]]:
    """``segment``'s outcomes when it ended with no failed trial (``--resume`` skips it), else None (it is run, or
    restored so that its failed trials run again)."""
    entry = record.get("segments", {}).get(str(segment.number))
    if entry is None or entry.get("failed"):
        return None
    return [TrialOutcome.from_json(o) for o in entry["outcomes"]]
