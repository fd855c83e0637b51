"""The sweep's Tune callback: every trial written to MLflow from the driver, one concise line per event.

A module of its own because its base class imports ``ray.tune`` (about 0.7 s), which ``platform.run`` never needs.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import sys
import traceback
from typing import Any, Optional

from ray import tune

from platform.config.run_schema import (METRIC_BEST, METRIC_CACHE_CORRUPT, METRIC_FINAL, METRIC_ROUNDS_COMPLETED,
                                        PARAM_SEEDS, PER_SEED_SEPARATOR, RESULT_ARRAYS, RESULT_CACHE_CORRUPT,
                                        STATUS_COMPLETED, STATUS_DIVERGED, STATUS_EARLY_STOPPED, STATUS_FAILED,
                                        STATUS_RUNNING, TAG_CACHE_CORRUPT, TAG_OPTUNA_LOST, TAG_SAMPLED,
                                        TAG_SAMPLER_SEED, TAG_SCENARIO, TAG_SCENARIO_CELL, TAG_SEARCH_SPACE,
                                        TAG_STATUS, TAG_STOPPED_EARLY, TAG_TRIAL_ID, TAG_TRIAL_KEY,
                                        TAG_TRIAL_NUMBER, children_filter, diverged, figure, setting_metrics,
                                        short_value)
from platform.errors import EnvironmentFault
from platform.results.tracking import Tracker, log_arrays, log_partition, round_metrics, trial_run_name


class MlflowSweepCallback(tune.Callback):
    """Writes every trial to MLflow from the driver, and prints one concise line per event."""

    def __init__(self, tracker: Tracker, parent_run_id: str, space, total_rounds: int, num_samples: int,
                 quiet: bool = False, shared=None, cell: Optional[dict] = None, study=None):
        self.tracker = tracker
        # a platform.sweep.optuna_store.StudyRecorder: every ended trial goes into the persistent study
        self.study = study
        # A scenario cell's study (``space`` is then the cell's space): {"number": 1-based, "cells": how many,
        # "label": "key=value, ...", "sampler_seed": int}; its child runs are tagged with it.
        self.cell = cell
        self.shared = shared  # the sweep's SharedData: labels for the partition summary
        self.parent_run_id = parent_run_id
        self.space = space
        self.total_rounds = total_rounds
        self.num_samples = num_samples
        self.quiet = quiet
        self.runs: dict[str, str] = {}  # trial_id -> MLflow run id
        self.numbers: dict[str, int] = {}  # trial_id -> 1-based order of start
        self.best: dict[str, Any] = {}  # trial_id -> best metric so far (multi-objective: {metric: best so far})
        self.last: dict[str, dict] = {}  # trial_id -> last reported round metrics
        self.open: set[str] = set()  # trial ids whose MLflow run has not ended
        self.names: dict[str, str] = {}  # trial_id -> MLflow run name (its swept values)
        self.history: dict[str, dict[int, float]] = {}  # trial_id -> {round: search metric} (single objective)
        self.retries: dict[str, int] = {}  # trial_id -> times Tune ran it again after a failure

    # Tune saves/restores callback state with the experiment, so --resume continues the same runs.
    def get_state(self) -> dict:
        return {"runs": self.runs, "numbers": self.numbers, "best": self.best, "last": self.last,
                "open": sorted(self.open), "names": self.names, "history": self.history, "retries": self.retries}

    def set_state(self, state: dict) -> None:
        """Merged into what this callback holds: a long study's later segments (platform/sweep/segments.py) keep
        the runs of the trials that ended in the segments before the one Tune restores."""
        self.runs.update(state["runs"])
        self.numbers.update(state["numbers"])
        self.best.update(state["best"])
        self.last.update(state["last"])
        self.open |= set(state.get("open", ()))
        self.names.update(state.get("names", {}))
        self.history.update(state.get("history", {}))
        self.retries.update(state.get("retries", {}))

    def close_open_runs(self, status: str, mlflow_status: str) -> None:
        """End every child run still open (the sweep was interrupted); --resume reopens them."""
        for trial_id in sorted(self.open):
            self.tracker.set_tag(self.runs[trial_id], TAG_STATUS, status)
            self.tracker.end_run(self.runs[trial_id], mlflow_status)
        self.open.clear()

    def _say(self, text: str) -> None:
        if not self.quiet:
            print(text, flush=True)

    def _label(self, trial) -> str:
        if getattr(self, "cell", None):  # getattr: a callback pickled before cells existed (--resume)
            return (f"[cell {self.cell['number']}/{self.cell['cells']}, trial "
                    f"{self.numbers.get(trial.trial_id, '?')}/{self.num_samples}]")
        return f"[trial {self.numbers.get(trial.trial_id, '?')}/{self.num_samples}]"

    def run_name(self, trial_id: str, params: dict) -> str:
        """The MLflow run name of a trial that has its number: ``#3 fedprox mu=0.01 lr=0.05``; with several
        scenario cells ``#<cell>.<trial> <swept values> [<cell values>]`` (:func:`trial_run_name`), unique in the
        sweep."""
        cell = getattr(self, "cell", None)  # getattr: a callback pickled before cells existed (--resume)
        number = self.numbers[trial_id]
        if cell and cell.get("cells", 1) > 1:
            number = f"{cell['number']}.{number}"
        return trial_run_name(params, self.space.parameters, cell.get("values") if cell else None, number)

    @staticmethod
    def trial_params(trial) -> dict:
        config = trial.config or {}
        return dict(config.get("params", config))

    def trial_key(self, trial) -> str:
        """What stays the same when Tune restores a trial under a new id: its scenario cell and sampled values."""
        import hashlib
        import json

        cell = getattr(self, "cell", None)  # getattr: a callback pickled before cells existed (--resume)
        text = json.dumps([cell["label"] if cell else "", self.trial_params(trial)], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    def _adopt_existing_run(self, trial, trials=()) -> bool:
        """A child run this sweep already made for ``trial`` that the restored state does not know (the driver
        died after creating it, before Tune saved its state): the trial continues it, from its last logged round,
        instead of getting a second run. Found by the trial's id, else (Tune restored the trial under a new id: it
        had not saved the old one) by its key (:meth:`trial_key`) among the runs no other trial holds: neither a
        run of this callback nor one tagged with the id of a trial Tune knows. False when there is none."""
        children = children_filter(self.parent_run_id)
        found = self.tracker.client.search_runs(
            [self.tracker.experiment_id], max_results=1,
            filter_string=f"{children} and tags.`{TAG_TRIAL_ID}` = '{trial.trial_id}'")
        if not found:
            held = set(self.runs.values())
            known = {t.trial_id for t in trials or ()} - {trial.trial_id}
            found = [run for run in self.tracker.client.search_runs(
                [self.tracker.experiment_id], max_results=10000, order_by=["attributes.start_time ASC"],
                filter_string=f"{children} and tags.`{TAG_TRIAL_KEY}` = '{self.trial_key(trial)}'")
                if run.info.run_id not in held and run.data.tags.get(TAG_TRIAL_ID) not in known]
            if not found:
                return False
            self.tracker.set_tag(found[0].info.run_id, TAG_TRIAL_ID, trial.trial_id)  # the id it continues under
        run = found[0]
        self.runs[trial.trial_id], self.names[trial.trial_id] = run.info.run_id, run.info.run_name
        self.numbers[trial.trial_id] = len(self.numbers) + 1
        self.tracker.set_tag(run.info.run_id, TAG_TRIAL_NUMBER, str(self.numbers[trial.trial_id]))  # the ties' order
        return True

    def _catch_up(self, trial_id: str) -> None:
        """Take a reopened run's last logged round from the store: the state Tune restored may predate rounds the
        killed driver had already logged, which the trial (back at its checkpoint) reports again."""
        history = self.tracker.client.get_metric_history(self.runs[trial_id], self.space.search.metrics[0])
        logged = max((m.step for m in history), default=0)
        if logged > self.last.get(trial_id, {}).get("round", 0):
            self.last[trial_id] = {**self.last.get(trial_id, {}), "round": logged}
        if history and not self.space.search.multi_objective:  # the rounds it will not report again count too
            rounds = self.history.setdefault(trial_id, {})
            for metric in history:
                rounds.setdefault(metric.step, metric.value)
            pick = max if self.space.search.mode == "max" else min
            self.best[trial_id] = pick(rounds.values())

    def on_trial_start(self, iteration, trials, trial, **info):
        if trial.trial_id in self.runs or self._adopt_existing_run(trial, trials):  # a resumed trial: reopen its run
            self._catch_up(trial.trial_id)
            self.tracker.client.update_run(self.runs[trial.trial_id], status="RUNNING")
            self.tracker.set_tag(self.runs[trial.trial_id], TAG_STATUS, STATUS_RUNNING)
            self.open.add(trial.trial_id)
            return
        self.numbers[trial.trial_id] = len(self.numbers) + 1
        params = self.trial_params(trial)
        resolved = self.space.trial_config(params)
        tags = {TAG_STATUS: STATUS_RUNNING, TAG_TRIAL_ID: trial.trial_id, TAG_TRIAL_KEY: self.trial_key(trial),
                TAG_SEARCH_SPACE: self.space.name, TAG_TRIAL_NUMBER: str(self.numbers[trial.trial_id]),
                TAG_SAMPLED: ", ".join(f"{k}={short_value(v)}" for k, v in params.items())}
        cell = getattr(self, "cell", None)  # getattr: a callback pickled before cells existed (--resume)
        if cell:
            tags.update({TAG_SCENARIO: cell["label"], TAG_SCENARIO_CELL: str(cell["number"]),
                         TAG_SAMPLER_SEED: str(cell["sampler_seed"])})
        name = self.run_name(trial.trial_id, params)
        run_id = self.tracker.start_run(name=name, tags=tags, parent_run_id=self.parent_run_id)
        # held at once: an interrupt (Ctrl-C, SIGTERM) during the writes below still finds it open and closes it
        self.runs[trial.trial_id] = run_id
        self.names[trial.trial_id] = name
        self.open.add(trial.trial_id)
        # A conditional parameter whose ``when`` does not hold was not drawn: its config value is unused, not
        # logged.
        flat = {k: v for k, v in resolved.flat().items() if k in params or k not in self.space.parameters}
        flat[PARAM_SEEDS] = self.space.seeds
        self.tracker.log_params(run_id, flat)
        if self.shared is not None and self.shared.serves(resolved):
            try:  # the first seed's split; the others differ only by seed
                log_partition(self.tracker, run_id, dataclasses.replace(resolved, seed=self.space.seeds[0]),
                              self.shared.train_labels, self.shared.num_classes, self.shared.train_groups,
                              self.shared.train_coarse_labels)
            except Exception:  # noqa: BLE001 - the trial hits the same error and reports it as its failure
                pass
        self._say(f"{self._label(trial)} start  " + ", ".join(f"{k}={short_value(v)}" for k, v in params.items()))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        run_id = self.runs.get(trial.trial_id)
        if run_id is None:
            return
        step = int(result.get("round", result.get("training_iteration", 0)))
        if result.get(RESULT_CACHE_CORRUPT):
            self._cache_corrupt(trial, run_id, result[RESULT_CACHE_CORRUPT], step)
        if step <= self.last.get(trial.trial_id, {}).get("round", 0):
            return  # a resumed trial recomputing rounds it already logged (deterministic: same values)
        metrics = round_metrics(result)
        self.tracker.log_metrics(run_id, metrics, step=step)
        if result.get(RESULT_ARRAYS):  # the method's arrays, on the rounds due (tracking.arrays_every, the last)
            log_arrays(self.tracker, run_id, result[RESULT_ARRAYS], step)
        self.last[trial.trial_id] = {"round": step, **metrics}
        if self.space.search.multi_objective:
            self._round_objectives(trial, step, metrics)
            return
        metric, mode = self.space.search.metric, self.space.search.mode
        if metric in metrics:
            prev = self.best.get(trial.trial_id)
            value = metrics[metric]
            self.history.setdefault(trial.trial_id, {})[step] = value
            if prev is None or (value > prev if mode == "max" else value < prev):
                self.best[trial.trial_id] = value
            std = f" ± {figure(metrics[metric + '_std'])}" if metric + "_std" in metrics else ""
            self._say(f"{self._label(trial)} round {step}/{self.total_rounds}  {metric} {figure(value)}{std}")

    def _cache_corrupt(self, trial, run_id: str, report: str, step: int) -> None:
        """Stage-cache entries the trial (or its actors) found corrupt, moved aside and recomputed: one line each on
        the console (stderr, also with --quiet), the lines as the run's TAG_CACHE_CORRUPT and their count so far as
        its METRIC_CACHE_CORRUPT; the trial's results are sound (recomputed)."""
        lines = [line for line in report.split("\n") if line.strip()]
        for line in lines:
            print(f"warning: {self._label(trial)} {line}", file=sys.stderr, flush=True)
        counts = self.__dict__.setdefault("corrupt_counts", {})  # setdefault: a callback pickled before this existed
        counts[trial.trial_id] = counts.get(trial.trial_id, 0) + len(lines)
        self.tracker.set_tag(run_id, TAG_CACHE_CORRUPT, "\n".join(lines)[:4000])
        self.tracker.log_metrics(run_id, {METRIC_CACHE_CORRUPT: counts[trial.trial_id]}, step=step)

    def _round_objectives(self, trial, step: int, metrics: dict) -> None:
        """Multi-objective: track each objective's best so far (``best`` holds a dict per trial) and print them
        all."""
        best = self.best.setdefault(trial.trial_id, {})
        shown = []
        for metric, mode in self.space.search.objectives:
            if metric not in metrics:
                continue
            value, prev = metrics[metric], best.get(metric)
            if prev is None or (value > prev if mode == "max" else value < prev):
                best[metric] = value
            std = f" ± {figure(metrics[metric + '_std'])}" if metric + "_std" in metrics else ""
            shown.append(f"{metric} {figure(value)}{std}")
        if shown:
            self._say(f"{self._label(trial)} round {step}/{self.total_rounds}  " + "  ".join(shown))

    def _finish(self, trial, status: str, mlflow_status: str, say: bool = True):
        run_id = self.runs.get(trial.trial_id)
        if run_id is None:
            return
        last = self.last.get(trial.trial_id, {})
        # final_<metric> of the means (and stds); a per-seed metric's last value is its final one already
        summary = {f"{METRIC_FINAL}{k}": v for k, v in last.items() if k != "round" and PER_SEED_SEPARATOR not in k}
        summary[METRIC_ROUNDS_COMPLETED] = last.get("round", 0)
        best = self.best.get(trial.trial_id)
        if isinstance(best, dict):  # multi-objective: the best of each objective over rounds
            summary.update({f"{METRIC_BEST}{m}": v for m, v in best.items()})
        elif best is not None:
            summary[f"{METRIC_BEST}{self.space.search.metric}"] = best
        self.tracker.log_metrics(run_id, summary, step=int(last.get("round", 0)))
        if status == STATUS_EARLY_STOPPED:
            self.tracker.set_tag(run_id, TAG_STOPPED_EARLY, str(last.get("round", 0)))
        self.tracker.set_tag(run_id, TAG_STATUS, status)
        self.tracker.end_run(run_id, mlflow_status)
        self.open.discard(trial.trial_id)
        if getattr(self, "study", None) is not None:  # getattr: a callback pickled before studies existed
            state = {STATUS_COMPLETED: "complete", STATUS_EARLY_STOPPED: "pruned"}.get(status, "fail")
            self.study.record(self.trial_params(trial), last, self.history.get(trial.trial_id, {}), state,
                              {"mlflow_run_id": run_id, "run_name": self.names.get(trial.trial_id, ""),
                               "status": status, "rounds_completed": last.get("round", 0),
                               "seeds": str(self.space.seeds)})
            self._note_lost_study()
        final = "".join(f"  {m} {figure(last[m])}" for m in self.space.search.metrics if m in last)
        if say:
            self._say(f"{self._label(trial)} {status}{final}")
        # An ended trial's round figures are in MLflow and the study now: keep only its run's identity, so the
        # callback (and Tune's saved experiment state) grows by a few ids per trial, not by every metric it
        # reported.
        self.last[trial.trial_id] = {"round": last.get("round", 0)}
        self.history.pop(trial.trial_id, None)
        self.best.pop(trial.trial_id, None)

    def _note_lost_study(self) -> None:
        """A study whose storage went away (:class:`~platform.sweep.optuna_store.StudyRecorder`): on the parent run
        as the tag TAG_OPTUNA_LOST, once."""
        lost = getattr(self.study, "lost", None)
        if lost and not getattr(self, "_lost_noted", False):
            self._lost_noted = True
            self.tracker.set_tag(self.parent_run_id, TAG_OPTUNA_LOST, f"{self.study.study_name}: {lost}"[:5000])

    def on_trial_complete(self, iteration, trials, trial, **info):
        last = self.last.get(trial.trial_id, {})
        rounds = last.get("round", 0)
        status = STATUS_COMPLETED if rounds >= self.total_rounds else STATUS_EARLY_STOPPED
        if diverged(last, self.space.search.metrics, setting_metrics()):  # NaN; ε = ∞ is a value, not a divergence
            status = STATUS_DIVERGED
        self._finish(trial, status, "FINISHED")

    def on_trial_recover(self, iteration, trials, trial, **info):
        """A failed trial Tune runs again (``search.max_failures``): its run stays open and continues."""
        self.retries[trial.trial_id] = self.retries.get(trial.trial_id, 0) + 1
        self._say(f"{self._label(trial)} failed, running it again (retry {self.retries[trial.trial_id]}): "
                  f"{_last_error_line(trial)}")

    def on_trial_error(self, iteration, trials, trial, **info):
        """A trial that failed for good: its run closed FAILED, one line. One that failed for lack of space on its
        disk (its retries too) stops the sweep: the next would fail the same way (platform/sweep/faults.py)."""
        self._finish(trial, STATUS_FAILED, "FAILED", say=False)  # one line for a failed trial: the one below
        line = _last_error_line(trial)
        where = error_log(trial)
        self._say(f"{self._label(trial)} error: {line or 'see its log'}" + (f"  (traceback: {where})" if where else ""))
        if any(text in line for text in NO_ROOM):
            raise EnvironmentFault(f"a trial found its disk full (ENOSPC): {line}")

    def setup(self, **info):
        """Each Tune run: Tune's own records are watched for a write of its state that found no space
        (:class:`_NoRoomSeen`: Tune logs a failed sync of its experiment state and goes on)."""
        _NO_ROOM.seen = None
        for name in ("ray.tune", "ray.train"):
            logging.getLogger(name).addHandler(_NO_ROOM)

    def on_step_end(self, iteration, trials, **info):
        """Tune could not save the sweep's state for lack of space: the sweep stops (a --resume would not find it)."""
        if _NO_ROOM.seen:
            storage = getattr(getattr(trials[0], "storage", None), "experiment_fs_path", None) if trials else None
            raise EnvironmentFault(f"the disk holding the sweep's Tune state{f' ({storage})' if storage else ''} is "
                                   f"full (ENOSPC): Tune could not save it")


NO_ROOM = ("No space left on device", "database or disk is full")  # what a write that found no space says


class _NoRoomSeen(logging.Handler):
    """Notes the first of Tune's records whose message or traceback says a write found no space (ENOSPC)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen: Optional[str] = None

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "".join(traceback.format_exception(*record.exc_info))
        if self.seen is None and any(words in text for words in NO_ROOM):
            self.seen = text


_NO_ROOM = _NoRoomSeen()  # one for the process: a callback pickles with Tune's state, a handler does not


def _last_error_line(trial) -> str:
    """The last line of a trial's error file (the exception), or ""."""
    if not trial.error_file or not os.path.isfile(trial.error_file):
        return ""
    with open(trial.error_file) as fh:
        lines = [ln for ln in fh.read().strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def error_log(trial) -> str:
    """Where a failed trial's full traceback stays: its error file in Tune's storage (Tune writes it in the driver's
    staging directory, ``trial.error_file``, and syncs it there), as a path or an s3:// / gs:// URI."""
    if not trial.error_file:
        return ""
    name = os.path.basename(trial.error_file)
    try:
        fs_path = trial.storage.trial_fs_path
        kind = trial.storage.storage_filesystem.type_name
    except AttributeError:  # another Ray: the staging copy
        return trial.error_file
    if kind == "local":
        return os.path.join(fs_path, name)
    scheme = {"gcs": "gs"}.get(kind, kind)
    return f"{scheme}://{fs_path.strip('/')}/{name}"
