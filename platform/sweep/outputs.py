"""What a sweep leaves for people to read, beside its child runs: the parent run's markdown description (the
question, the search space, the answer with a link to the best trial), the MLflow UI view a printed deep link opens,
the persistent Optuna study's plots, and the sweep-level tables and plots of :mod:`platform.results.sweep_artifacts`.

:func:`publish` runs when a sweep ends, finished or not (a partial sweep shows what it has); nothing here may fail
the sweep: a part that cannot be written is skipped with one warning on stderr.
"""
from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Optional

from platform.config.run_schema import (METRIC_RANK, TAG_BEST_PREFIX, TAG_BEST_RUN, TAG_NOTE, TAG_OPTUNA_STUDIES,
                                        TAG_SCENARIO, TAG_STATUS, TAG_STOPPED_EARLY, figure,
                                        short_value)

ARTIFACT_OPTUNA = "optuna"  # on the parent run: optuna/[cell-NNN/]optuna_plots.html and one PNG per plot


@dataclass
class SweepAnswer:
    """What the sweep found, for the description: one best trial, one line per scenario cell, or a Pareto front."""
    status: str = "running"  # the parent's status tag
    best: Optional[dict] = None  # {"run_id", "name", "metric": value, "<metric>_std", "round", "params", test figures}
    cells: list[dict] = field(default_factory=list)  # scenario grids: the rows of scenarios/best_per_cell
    front: list[dict] = field(default_factory=list)  # multi-objective: the front's rows
    studies: list[str] = field(default_factory=list)  # Optuna study names (one, or one per cell)


def space_markdown(space) -> str:
    """The question and the search space as markdown."""
    search = space.search
    lines = [f"## {space.name}", "", (space.description or "").strip() or "(no description)", "",
             "**Search space**", ""]
    for key, dist in space.parameters.items():
        when = f" when {', '.join(f'{k} = {v}' for k, v in dist.when.items())}" if dist.when else ""
        lines.append(f"- `{key}`: {dist.kind} {list(dist.args)}{when}")
    if not space.parameters:
        lines.append("- (nothing swept: the base config)")
    for key, values in space.scenarios.items():
        lines.append(f"- scenario `{key}`: {list(values)} (a grid of studies, one per cell)")
    objectives = ", ".join(f"`{m}` ({d})" for m, d in search.objectives)
    lines += ["", f"Searcher {search.searcher}, {search.num_samples} sample(s), scheduler {search.scheduler.kind}, "
                  f"seeds {list(space.seeds)}, selecting on {objectives}."]
    return "\n".join(lines)


def _lead_cell(row: dict) -> str:
    """A cell's lead over its runner-up in the description's table: ``0.0021 ± 0.0034, p 0.56, within noise``."""
    if row.get("lead") is None:
        return ""
    if row.get("lead_se") is None:
        return f"{row['lead']:.4f} (one seed)"
    p = f", p {row['lead_p']:.2g}" if row.get("lead_p") is not None else ""
    return f"{row['lead']:.4f} ± {row['lead_se']:.4f}{p}" + (", within noise" if row.get("within_noise") else "")


def description(space, experiment_id: str, answer: SweepAnswer) -> str:
    """The parent run's description: the answer so far first (the UI folds long descriptions after a few lines),
    then :func:`space_markdown`."""
    from platform.results.mlflow_ui import run_link

    parts = [f"**Status:** {answer.status}", ""]
    metric = space.search.metrics[0]
    if answer.best:
        best = answer.best
        std = f" ± {best[metric + '_std']:.4f}" if best.get(metric + "_std") is not None else ""
        tests = "".join(f", {k} {best[k]:.4f}" + (f" ± {best[k + '_std']:.4f}" if best.get(k + "_std") is not None
                                                   else "")
                        for k in ("test_accuracy", "test_loss") if k != metric and best.get(k) is not None)
        parts += [f"**Best trial:** [{best['name']}]({run_link(experiment_id, best['run_id'])}) with {metric} "
                  f"{best[metric]:.4f}{std} at round {best.get('round')}{tests} (selected on {metric})"
                  + (f"; {best['lead_text']}." if best.get("lead_text") else "."), ""]
        parts += [f"- `{k}` = {short_value(v)}" for k, v in best.get("params", {}).items()]  # 4 significant digits
    if answer.cells:
        parts += ["**Best per scenario cell**", "", f"| cell | scenario | best trial | {metric} | test_accuracy | "
                  f"lead over the runner-up |", "|---|---|---|---|---|---|"]
        for row in answer.cells:
            if row.get("front") is not None:
                link = f"Pareto front of {row.get('pareto_size', 0)} (see scenarios/pareto_fronts.csv)"
            elif row.get("best_run_id"):
                link = f"[{row.get('best_name') or row.get('best_trial')}]({run_link(experiment_id, row['best_run_id'])})"
            else:
                link = "none finished"
            parts.append(f"| {row['cell']} | {row['scenario']} | {link} | {_pm(row, metric)} | "
                         f"{_pm(row, 'test_accuracy')} | {_lead_cell(row)} |")
    if answer.front:
        names = space.search.metrics
        parts += [f"**Pareto front** ({len(answer.front)} trial(s))", "", "| trial | " + " | ".join(names) + " |",
                  "|---|" + "---|" * len(names)]
        for row in answer.front:
            name = row.get("name") or row["trial"]
            link = f"[{name}]({run_link(experiment_id, row['run_id'])})" if row.get("run_id") else name
            parts.append(f"| {link} | " + " | ".join(_pm(row, m) for m in names) + " |")
    parts += ["", space_markdown(space)]
    from platform.sweep.optuna_store import lost_studies

    lost = lost_studies()
    kept = [s for s in answer.studies if s not in lost]
    if kept:
        parts += ["", "Optuna studies: " + ", ".join(f"`{s}`" for s in kept)
                  + " (plots under `optuna/`; open them with optuna-dashboard)."]
    parts += [f"Optuna study `{s}` lost mid-sweep: {lost[s]}; its trials are in the child runs only."
              for s in answer.studies if s in lost]
    return "\n".join(parts)


def _pm(row: dict, key: str) -> str:
    value = row.get(key)
    if not isinstance(value, (int, float)):
        return "n/a"
    std = row.get(key + "_std")
    return figure(value) + (f" ± {figure(std)}" if isinstance(std, (int, float)) else "")


def log_best(tracker, parent_run_id: str, best: dict) -> None:
    """The best trial on the parent run: its params as ``best.<key>`` params (tags where a resumed sweep found a
    different best than the one logged before: MLflow params cannot change) and the tag ``best_trial_run_id``."""
    from mlflow.exceptions import MlflowException

    # 4 significant digits, as the UI's columns and the rerun command show them (the exact value: the best run's)
    params = {f"{TAG_BEST_PREFIX}{k}": short_value(v) for k, v in best.get("params", {}).items()}
    try:
        tracker.log_params(parent_run_id, params)
    except MlflowException:
        for key, value in params.items():
            tracker.set_tag(parent_run_id, key, str(value))
    tracker.set_tag(parent_run_id, TAG_BEST_RUN, best["run_id"])
    if best.get("lead_text"):  # how far ahead of the runner-up, and whether the seeds can tell them apart
        tracker.set_tag(parent_run_id, "best.lead", best["lead_text"])
        tracker.set_tag(parent_run_id, "best.within_noise", str(bool(best.get("within_noise"))).lower())


def publish(tracker, parent_run_id: str, space, answer: SweepAnswer, optuna_url: Optional[str],
            quiet: bool = False) -> Optional[str]:
    """Everything a finished (or interrupted) sweep leaves on its parent run, then the lines that open it; returns
    the deep link (None if the view could not be stored)."""
    if answer.studies:
        _safely("study names", lambda: tracker.set_tag(parent_run_id, TAG_OPTUNA_STUDIES, ",".join(answer.studies)))
    _safely("description", lambda: tracker.set_tag(parent_run_id, TAG_NOTE,
                                                   description(space, tracker.experiment_id, answer)))
    link = _safely("MLflow view", lambda: _publish_view(tracker, parent_run_id, space, ranked(answer)))
    _safely("sweep tables and plots", lambda: _log_results(tracker, parent_run_id))
    from platform.sweep.optuna_store import lost_studies

    studies = [s for s in answer.studies if s not in lost_studies()]  # a study whose storage went away: none
    if optuna_url:
        for index, study in enumerate(answer.studies):  # per cell under optuna/cell-NNN/
            if study not in studies:
                continue
            folder = f"cell-{index + 1:03d}" if space.scenarios else ""
            _safely(f"Optuna plots of {study}", lambda s=study, f=folder: _log_study_plots(
                tracker, parent_run_id, space, optuna_url, s, answer, f))
    from platform.results.tracking import ui_command

    print(f"results: {ui_command(tracker.uri)}", flush=True)
    if link:
        print(f"open: {link}", flush=True)
    if optuna_url and studies:
        from platform.sweep.optuna_store import dashboard_command

        print(f"optuna: {dashboard_command(optuna_url)}  (studies {', '.join(studies)})", flush=True)
    return link


def _safely(what: str, work):
    try:
        return work()
    except Exception as err:  # noqa: BLE001 - the sweep's results stand without this extra; say what is missing
        print(f"warning: {what} not written: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        return None


def ranked(answer: SweepAnswer) -> bool:
    """Whether the sweep ranked its trials (logged ``rank`` on their runs): a best was named, a Pareto front, or a
    cell's best or front."""
    return (answer.best is not None or bool(answer.front)
            or any(row.get("best_run_id") or row.get("front") for row in answer.cells))


def _publish_view(tracker, parent_run_id: str, space, by_rank: bool) -> str:
    """The sweep's MLflow view; ``by_rank``: sorted by the trials' ``rank`` (the console's and the report's order;
    with scenario cells each cell's best comes first), else by the selection metric."""
    from platform.results.mlflow_ui import deep_link, publish_sweep_view, ui_url

    search = space.search
    metrics = [METRIC_RANK] if by_rank else []
    for metric in (*search.metrics, "test_accuracy"):
        metrics += [metric, f"{metric}_std"] if len(space.seeds) > 1 else [metric]
    tags = [TAG_STATUS, TAG_STOPPED_EARLY] + ([TAG_SCENARIO] if space.scenarios else [])
    key = publish_sweep_view(tracker.client, tracker.experiment_id, parent_run_id,
                             params=[*space.scenarios, *space.parameters], metrics=list(dict.fromkeys(metrics)),
                             tags=tags, sort_metric=METRIC_RANK if by_rank else search.metrics[0],
                             ascending=by_rank or search.objectives[0][1] == "min")
    return deep_link(ui_url(tracker.uri), tracker.experiment_id, key)


def _log_results(tracker, parent_run_id: str) -> None:
    try:
        from platform.results.sweep_artifacts import log_sweep_artifacts
    except ImportError:
        return
    log_sweep_artifacts(tracker.uri, parent_run_id)


def _log_study_plots(tracker, parent_run_id: str, space, url: str, study_name: str, answer: SweepAnswer,
                     folder: str = "") -> None:
    from platform.sweep.optuna_store import load_study, write_study_plots

    try:
        study = load_study(url, study_name)
    except KeyError:  # no trial ended: the study was never created
        return
    with tempfile.TemporaryDirectory() as directory:
        files = write_study_plots(study, directory, f"{space.name}: Optuna study {study_name}",
                                  list(space.search.metrics))
        for path in files:
            tracker.client.log_artifact(parent_run_id, path, os.path.join(ARTIFACT_OPTUNA, folder).rstrip("/"))

