"""Scenario cells: one study per cell of the space's ``scenarios:`` cross product, under the one parent run.

Layout in Tune's storage: <storage>/<space>-<time>/ holds STATE_FILE (the parent run, the cells' labels and the
summary row of every cell that finished) and one Tune experiment per cell, cell-001/, cell-002/, ... The cells run
one after another, each with its own searcher (sampler seeded from search.sampler_seed and the cell index),
scheduler and callback. --resume skips the cells that finished, restores the one that was interrupted (or that
finished with failed trials: those run again) and starts the rest.

The summary is one line per cell and the table ``scenarios/best_per_cell.csv`` / ``.json`` on the parent run.
"""
from __future__ import annotations

import json
import math
import os
import sys

from platform.config.run_schema import (ARTIFACT_SCENARIO_FRONTS_CSV, ARTIFACT_SCENARIOS_CSV, ARTIFACT_SCENARIOS_JSON,
                                        METRIC_BEST, METRIC_BEST_TRIAL, METRIC_CELL_PREFIX, METRIC_PARETO_SIZE,
                                        STATUS_INTERRUPTED, TAG_BEST_PREFIX, short_value)
from platform.sweep.pareto import front_rows, json_value, log_front_ranks, objective_value, pareto_order
from platform.sweep.state import join_storage, read_state, resume_command, write_state
from platform.sweep.study import (REPORTED, count_expected_trials, fit_study, lead_of, log_ranks, pin_public_image,
                                  rank_results, ranked_results, refused_by_config, sweep_trainable)


def _cell_dir_name(index: int) -> str:
    return f"cell-{index + 1:03d}"


def study_names(experiment: str, cells: list[dict]) -> list[str]:
    """The Optuna study of each scenario cell: the sweep id and the cell's values, ``<sweep id>/lam=0.01`` (a key by
    its last part where that is unambiguous, several keys separated by spaces), so that optuna-dashboard says which
    cell a study is. No commas (the parent run's tag lists the studies comma-separated); unique, as the cells are;
    stable, as --resume recomputes the same cells (and reads the names from the sweep's state, see run_cells)."""
    from platform.config.search_space import cell_label

    keys = list(cells[0]) if cells else []
    short = {k: k.rsplit(".", 1)[-1] for k in keys}
    if len(set(short.values())) < len(keys):
        short = {k: k for k in keys}
    names = []
    for index, cell in enumerate(cells):
        label = " ".join(cell_label({short[k]: v}) for k, v in cell.items()).replace(",", ";")
        name = f"{experiment}/{label}"
        names.append(name if len(name) <= 250 else f"{experiment}/{_cell_dir_name(index)}")
    return names


def _same_data(shared, config) -> bool:
    """Whether ``shared`` holds ``config``'s dataset, public pool and validation split (pre-training aside:
    :func:`platform.runtime.pretrain.prepare_pretrained` adds what a cell needs)."""
    return (shared.dataset == config.dataset and shared.public == config.public
            and shared.val_fraction == config.server.val_fraction and shared.val_source == config.server.val_source)


def first_state(experiment: str, space) -> dict:
    """What a new sweep's STATE_FILE holds beyond the parent run (platform.sweep.state.start_state): with scenarios,
    its cells, the cells done (none yet) and each cell's study name; nothing without."""
    from platform.config.search_space import cell_label

    if not space.scenarios:
        return {}
    cells = space.cells()
    return {"scenarios": [cell_label(c) for c in cells], "cells_done": {}, "studies": study_names(experiment, cells)}


def run_cells(args, space, storage, tracker, parent_run_id, sweep_dir, cache, experiment,
               answer) -> str:
    """Run every scenario cell's study in turn (skipping, on --resume, the cells that finished), then report one
    best trial (or Pareto front) per cell. ``sweep_dir``: the sweep's directory, its STATE_FILE written (by the
    command, with :func:`first_state`, or by the run --resume continues). Returns the parent run's status."""
    from platform.sweep.optuna_store import StudyRecorder  # deferred: start-up time
    from platform.config.search_space import cell_label
    from platform.config.trials import grid_subset_note
    from platform.runtime.pretrain import prepare_pretrained, sweep_pretrain_configs
    from platform.runtime.federation import share_dataset
    from platform.sweep.callback import MlflowSweepCallback
    from platform.sweep.faults import NodeLost, node_lost
    from platform.results.tracking import log_driver_cache_corrupt, log_patch_samples

    cells = space.cells()
    state = read_state(sweep_dir)
    # a sweep from before the studies were named by their cells: the names it started with
    studies = state.get("studies") or [f"{experiment}/{_cell_dir_name(i)}" for i in range(len(cells))]
    done = state.setdefault("cells_done", {})
    log = (lambda *a, **k: None) if args.quiet else print
    rows: list[dict] = answer.cells
    answer.studies = list(studies)
    shared = None
    patches_logged = False
    for index, cell in enumerate(cells):
        number, label = index + 1, cell_label(cell)
        if str(number) in done:
            rows.append(done[str(number)])
            log(f"\ncell {number}/{len(cells)}: {label}: finished in the interrupted run, skipped", flush=True)
            continue
        cell_space = space.cell_space(index)
        config = cell_space.trial_config({})
        cell_space = pin_public_image(cell_space, config)
        expected = count_expected_trials(cell_space)
        if shared is None or not _same_data(shared, config):
            shared = None  # let the previous cell's data go before loading the next
            shared = share_dataset(config, cache=cache)
            patches_logged = patches_logged or bool(log_patch_samples(tracker, parent_run_id, shared))
        shared = prepare_pretrained(shared, sweep_pretrain_configs(cell_space), cache, log=log)
        log_driver_cache_corrupt(tracker, parent_run_id)  # found while preparing: on the parent run
        info = {"number": number, "cells": len(cells), "label": label, "values": dict(cell),
                "sampler_seed": cell_space.search.sampler_seed}
        callback = MlflowSweepCallback(tracker, parent_run_id, cell_space, config.rounds, expected, quiet=args.quiet,
                                       shared=shared, cell=info,
                                       study=StudyRecorder(args.optuna_url, answer.studies[index],
                                                           cell_space.search.objectives, cell_space.parameters))
        trainable = sweep_trainable(cell_space, config, shared, args)
        log(f"\ncell {number}/{len(cells)}: {label}: {expected} trial(s), searcher {cell_space.search.searcher}, "
            f"sampler seed {cell_space.search.sampler_seed}", flush=True)
        if grid_subset_note(cell_space):
            log(f"  grid: {grid_subset_note(cell_space)}", flush=True)
        try:
            grid, callback = fit_study(trainable, cell_space, config, sweep_dir, _cell_dir_name(index), callback,
                                        log=log)
        except KeyboardInterrupt:
            callback.close_open_runs(STATUS_INTERRUPTED, "KILLED")
            raise
        if grid is None:
            callback.close_open_runs(STATUS_INTERRUPTED, "KILLED")
            if node_lost():  # not an interrupt: the command says what stopped the sweep
                raise NodeLost(node_lost())
            print(f"\ninterrupted in scenario cell {number}/{len(cells)} ({label}); continue with: "
                  f"{resume_command(os.path.basename(sweep_dir), storage)}", file=sys.stderr)
            return "KILLED"
        row = _cell_row(grid, cell_space, cell, info, callback)
        rows.append(row)
        if row["trials_failed"] == 0 and row["trials_finished"] > 0:  # else --resume runs its failed trials again
            done[str(number)] = row
            write_state(sweep_dir, state)
    return _report_cells(rows, space, tracker, parent_run_id, sweep_dir)


def _cell_row(grid, cell_space, cell: dict, info: dict, callback) -> dict:
    """One cell's summary: its values, trial counts and best trial (single objective: selection metric, test
    figures, parameters) or Pareto front (multi-objective)."""
    search = cell_space.search
    failed = sum(1 for r in grid if r.error is not None)
    row = {"cell": info["number"], "scenario": info["label"], "values": dict(cell),
           "sampler_seed": info["sampler_seed"], "trials_failed": failed}
    refused = refused_by_config(grid)
    if refused:
        row["refused"] = refused  # every trial of the cell failed on this bad input
    if search.multi_objective:
        complete = [r for r in front_rows(grid, cell_space, callback)
                    if all(objective_value(r, m) is not None for m, _ in search.objectives)]
        layers = pareto_order(complete, search.objectives)
        log_front_ranks(layers, callback.tracker)
        front = layers[0] if layers else []
        row.update({"trials_finished": len(complete), "pareto_size": len(front), "front": front,
                    **{f"{METRIC_BEST}{m}": (max if d == "max" else min)(objective_value(r, m) for r in complete)
                       for m, d in search.objectives if complete},
                    "rerun": cell_space.rerun_command(cell)})
        return row
    metric, mode = search.metric, search.mode
    finished, row["trials_diverged"] = ranked_results(grid, metric)
    row["trials_finished"] = len(finished)
    if not finished:
        return row
    ranked = rank_results(finished, metric, mode, callback)
    log_ranks(ranked, callback)
    best = ranked[0]
    lead = lead_of(ranked, metric, mode)
    if lead is not None:
        row.update(lead.as_dict())
        row["lead_text"] = lead.text()
    trial_id = best.metrics.get("trial_id")
    number = callback.numbers.get(trial_id)
    params = dict((best.config or {}).get("params", best.config or {}))
    row.update({"best_trial": f"trial-{number:03d}" if number else str(trial_id),
                "best_run_id": callback.runs.get(trial_id), "best_name": callback.names.get(trial_id),
                "round": best.metrics.get("round")})
    for key in (metric, *(k for k in REPORTED if k != metric)):
        for name in (key, f"{key}_std"):
            if best.metrics.get(name) is not None:
                row[name] = best.metrics[name]
    row["params"] = params
    row["rerun"] = cell_space.rerun_command({**cell, **params})
    return row


def cells_csv(rows: list[dict], space) -> str:
    import csv
    import io

    keys = list(space.scenarios)
    head = ["cell", "scenario", *keys, "sampler_seed", "trials_finished", "trials_failed"]
    if space.search.multi_objective:
        values = ["pareto_size", *(f"{METRIC_BEST}{m}" for m in space.search.metrics)]
        params = []
    else:
        metric = space.search.metric
        values = ["best_trial", "best_run_id", "round"]
        for key in (metric, *(k for k in REPORTED if k != metric)):
            values += [key, f"{key}_std"]
        values += ["lead", "lead_se", "lead_p", "within_noise"]  # over the cell's runner-up (platform.results.noise)
        params = list(dict.fromkeys(k for row in rows for k in row.get("params", {})))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*head, *values, *(f"{TAG_BEST_PREFIX}{k}" for k in params)])
    for row in rows:
        cell = [row["cell"], row["scenario"], *(row["values"].get(k, "") for k in keys), row["sampler_seed"],
                row["trials_finished"], row["trials_failed"]]
        writer.writerow([*cell, *(_csv_value(row.get(k)) for k in values),
                         *(_csv_value(row.get("params", {}).get(k)) for k in params)])
    return out.getvalue()


def _csv_value(value):
    return "" if value is None else value


def _fronts_csv(rows: list[dict], space) -> str:
    """Multi-objective: every cell's front, one line per (cell, front trial)."""
    import csv
    import io

    points = [{**point, "cell": row["cell"], "scenario": row["scenario"]} for row in rows for point in
              row.get("front") or []]
    values = [k for m in space.search.metrics for k in (m, f"{m}_std")]
    params = list(dict.fromkeys(k for p in points for k in p.get("params", {})))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["cell", "scenario", "trial", "run_id", "round", *values, *params])
    for p in points:
        writer.writerow([p["cell"], p["scenario"], p["trial"], p.get("run_id") or "", p.get("round"),
                         *(_csv_value(p.get(k)) for k in values), *(_csv_value(p["params"].get(k)) for k in params)])
    return out.getvalue()


def _report_cells(rows: list[dict], space, tracker, parent_run_id, sweep_dir) -> str:
    """Print one line per cell (its best configuration, selection metric and test figures; multi-objective: its
    front), log per-cell metrics and the table ``scenarios/best_per_cell.csv`` / ``.json`` on the parent run."""
    search = space.search
    finished = sum(r["trials_finished"] for r in rows)
    failed = sum(r["trials_failed"] for r in rows)
    metrics = {"trials_completed": finished, "trials_failed": failed, "scenario_cells": len(rows)}
    for row in rows:
        prefix = f"{METRIC_CELL_PREFIX}{row['cell']:02d}/"
        metrics[f"{prefix}trials_completed"] = row["trials_finished"]
        if search.multi_objective:
            metrics[f"{prefix}{METRIC_PARETO_SIZE}"] = row.get("pareto_size", 0)
            metrics.update({f"{prefix}{METRIC_BEST}{m}": row.get(f"{METRIC_BEST}{m}") for m in search.metrics})
        else:
            metrics[f"{prefix}{METRIC_BEST}{search.metric}"] = row.get(search.metric)
            metrics.update({f"{prefix}{METRIC_BEST_TRIAL}{k}": row.get(k) for k in REPORTED if k != search.metric})
    tracker.log_metrics(parent_run_id, {k: v for k, v in metrics.items()
                                        if v is not None and not (isinstance(v, float) and math.isnan(v))})
    tracker.log_text(parent_run_id, json.dumps(json_value(rows), indent=2), ARTIFACT_SCENARIOS_JSON)
    tracker.log_text(parent_run_id, cells_csv(rows, space), ARTIFACT_SCENARIOS_CSV)
    if search.multi_objective:
        tracker.log_text(parent_run_id, _fronts_csv(rows, space), ARTIFACT_SCENARIO_FRONTS_CSV)
    objectives = ", ".join(f"{m} ({d})" for m, d in search.objectives)
    what = f"Pareto front of {objectives}" if search.multi_objective else f"best trial on {objectives}"
    print(f"\n{what} per scenario cell ({len(rows)} cells, {finished} trial(s) finished, {failed} failed):")
    for row in rows:
        head = f"  cell {row['cell']}/{len(rows)} {row['scenario']}:"
        counts = f"{row['trials_finished']} finished, {row['trials_failed']} failed"
        if search.multi_objective:
            if not row.get("front"):
                print(f"{head} no trial finished ({counts})")
                continue
            print(f"{head} {row['pareto_size']} non-dominated of {counts}")
            for point in row["front"]:
                values = "  ".join(f"{m} {_figure(point[m])}" for m in search.metrics)
                params = ", ".join(f"{k}={v}" for k, v in point["params"].items()) or "(the cell's base config)"
                print(f"      {values}  | {params}")
            continue
        if search.metric not in row:
            print(f"{head} no trial finished ({counts})")
            continue
        metric = search.metric
        std = f" ± {_figure(row[metric + '_std'])}" if row.get(metric + "_std") is not None else ""
        reported = "".join(f", {k} {_figure(row[k])}" + (f" ± {_figure(row[k + '_std'])}"
                                                         if row.get(k + "_std") is not None else "")
                           for k in REPORTED if k != metric and row.get(k) is not None)
        params = ", ".join(f"{k}={short_value(v)}" for k, v in row["params"].items()) or "(the cell's base config)"
        print(f"{head} {metric} {_figure(row[metric])}{std} at round {row.get('round')}{reported} ({counts}) | {params}")
        if row.get("lead_text"):
            print(f"{' ' * len(head)} {row['lead_text']}")
    print(f"table: {ARTIFACT_SCENARIOS_CSV} and {ARTIFACT_SCENARIOS_JSON} on the parent run {parent_run_id}")
    print(f"tune storage: {sweep_dir}")
    missing = [r for r in rows if r["trials_finished"] == 0]
    if missing:
        print(f"no trial finished in scenario cell(s) {', '.join(str(r['cell']) for r in missing)}; see the child runs "
              f"in MLflow", file=sys.stderr)
        return "FAILED"
    return "FINISHED"


def _figure(value) -> str:
    """A reported figure to 4 decimals (a summary read back from the state file may hold "inf" or "nan")."""
    from platform.config.run_schema import INFINITY, figure

    return figure(value) if not isinstance(value, str) else {"inf": INFINITY, "-inf": f"-{INFINITY}"}.get(value, value)
