"""The report's winners, named as the sweep's console names them: the trials ranked by
:func:`platform.results.noise.rank_key` (the selection metric's mean over seeds, then the smaller std, then the earlier
trial) within each study (scenario cell), the best's lead over the runner-up with its standard error and Welch's p
(:func:`platform.results.noise.lead_over`, the console's own wording), and one sentence per swept parameter: how far
the metric moves over it, in units of the seeds' std (:func:`platform.results.noise.range_in_stds`).

Everything reads the report's trial frame (:func:`platform.results.sweep_artifacts.trial_frame`): one row per trial
with ``<metric>_mean``, ``<metric>_std``, ``trial_number``, ``status`` and ``cell``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from platform.config.run_schema import STATUS_DIVERGED, STATUS_FAILED, figure, is_number
from platform.results.noise import Lead, lead_over, per_seed_values, range_in_stds, rank, typical_std
from platform.results.sweep_results import Objective, SweepResults, value_text

NOT_RANKED = (STATUS_FAILED, STATUS_DIVERGED)  # never a best, as in the sweep's console


def _finite(value: Any) -> Optional[float]:
    """``value`` as a float where it is a finite number, else None (a pandas NaN included)."""
    return float(value) if is_number(value) and math.isfinite(float(value)) else None


def _mean(row: dict, metric: str) -> Optional[float]:
    """A trial's mean of ``metric``: a number, not NaN (+-inf kept: ε = ∞ can be a metric's value)."""
    value = row.get(f"{metric}_mean")
    return float(value) if is_number(value) and value == value else None


def ranked_rows(rows: Sequence[dict], objective: Objective) -> list[dict]:
    """The rows that can be a best (not failed or diverged, a mean of the metric) best first, in the one order of
    :func:`platform.results.noise.rank`."""
    metric = objective.metric
    candidates = [r for r in rows if r.get("status") not in NOT_RANKED and _mean(r, metric) is not None]
    return rank(candidates, lambda r: _mean(r, metric), lambda r: _finite(r.get(f"{metric}_std")),
                lambda r: None if _finite(r.get("trial_number")) is None else int(r["trial_number"]), objective.mode)


def best_row(rows: Sequence[dict], objective: Objective) -> Optional[dict]:
    """The best of ``rows`` (:func:`ranked_rows`); None when none can be."""
    ranked = ranked_rows(rows, objective)
    return ranked[0] if ranked else None


def cell_rows(frame) -> dict:
    """The frame's rows per study: {cell label (None without scenario cells): rows}, in the frame's cell order."""
    cells: dict = {}
    for row in frame.to_dict("records"):
        cells.setdefault(row["cell"], []).append(row)
    return cells


@dataclass(frozen=True)
class Winner:
    """One study's best trial (a scenario cell's, or the sweep's) and its lead over the runner-up."""
    cell: Optional[str]
    ranked: list  # the study's rows, best first
    lead: Optional[Lead]  # None: a single trial reported

    @property
    def best(self) -> dict:
        return self.ranked[0]


def winners(results: SweepResults, frame, objective: Objective) -> list[Winner]:
    """Each study's winner (per scenario cell, in cell order; one without cells), as the console names it: a cell
    where no trial reported the metric yet has none."""
    trials = {t.run_id: t for t in results.trials}
    out = []
    for cell, rows in cell_rows(frame).items():
        ranked = ranked_rows(rows, objective)
        if not ranked:
            continue
        lead = None
        if len(ranked) > 1:
            best, runner_up = (per_seed_values(trials[r["run_id"]].metrics, objective.metric) for r in ranked[:2])
            lead = lead_over(best, runner_up, objective.mode)
        out.append(Winner(cell, ranked, lead))
    return out


def trial_name(row: dict) -> str:
    """``fedprox lr=0.05 (`0123abcd`)``: a trial as the report names it."""
    return f"{row['run_name']} (`{row['run_id'][:8]}`)"


def _figure_over_seeds(row: dict, metric: str) -> str:
    std = _finite(row.get(f"{metric}_std"))
    return figure(row[f"{metric}_mean"]) + (f" ± {figure(std)}" if std is not None else "")


def winner_sentence(winner: Winner, objective: Objective) -> str:
    """``Best: **fedprox lr=0.05** (`0123abcd`), `val_accuracy` 0.8123 ± 0.0100; runner-up fedavg lr=0.1 (`4567ef01`),
    0.8100 ± 0.0120; lead over the runner-up 0.0023 ± 0.0110 (SE, 2 seeds), Welch p = 0.85: within noise.``"""
    metric = objective.metric
    where = f"Cell `{winner.cell}`: best" if winner.cell is not None else "Best"
    text = f"{where}: **{trial_name(winner.best)}**, `{metric}` {_figure_over_seeds(winner.best, metric)}"
    if winner.lead is None:
        return text + " (the only trial that reported it: no runner-up to compare with)."
    runner_up = winner.ranked[1]
    return (f"{text}; runner-up {trial_name(runner_up)}, {_figure_over_seeds(runner_up, metric)}; "
            f"{winner.lead.text()}.")


def _value_key(value: Any) -> Any:
    return value_text(value) if not is_number(value) or isinstance(value, bool) else float(value)


def spread_sentence(rows: Sequence[dict], key: str, objective: Objective, others_vary: bool,
                    cell: Optional[str] = None) -> str:
    """One swept parameter's effect: the range of the metric's mean over its values (the trials' means averaged per
    value: a range parameter has a value per trial), which value gives the highest and which the lowest (so the
    direction is said), then that range in units of the seeds' std (the root mean
    square of the trials' std over seeds). Rows where the parameter is inactive, or without a finite mean, are left
    out; with one seed the std is unknown and said so."""
    metric = objective.metric
    where = f" in cell `{cell}`" if cell is not None else ""
    subject = f"`{metric}` ranges over `{key}`{where}"
    active = [r for r in ranked_rows(rows, objective) if r.get(key) is not None and r.get(key) == r.get(key)
              and math.isfinite(_mean(r, metric))]
    by_value: dict = {}
    for row in active:
        by_value.setdefault(_value_key(row[key]), []).append(_mean(row, metric))
    if len(by_value) < 2:
        return f"`{metric}` cannot range over `{key}`{where}: " + (
            "no trial reported it with the parameter active." if not by_value else
            f"one value ({value_text(next(iter(by_value)))}) reported.")
    means = [sum(v) / len(v) for v in by_value.values()]
    spread = max(means) - min(means)
    stds = [_finite(r.get(f"{metric}_std")) for r in active]
    values = list(by_value)
    high, low = means.index(max(means)), means.index(min(means))
    context = (f"{len(by_value)} values over {len(active)} trials" if len(by_value) < len(active)
               else f"{len(active)} trials") + (", the other swept parameters varying too" if others_vary else "")
    context += (f"; highest {figure(means[high])} at {value_text(values[high])}, lowest {figure(means[low])} at "
                f"{value_text(values[low])}")
    typical = typical_std(stds)
    if typical is None:
        one_seed = all((_finite(r.get("n_seeds")) or 0) <= 1 for r in active)
        return (f"{subject} by {figure(spread)} ({context}); the seeds' std is unknown"
                f"{' (one seed)' if one_seed else ''}, so how that compares with noise cannot be said.")
    if typical == 0:
        return f"{subject} by {figure(spread)} ({context}); the seeds gave no spread (std 0), so no ratio to it."
    ratio = range_in_stds(means, stds)
    verdict = ": no more than the seeds' own spread" if ratio <= 1 else ""
    return (f"{subject} by {figure(spread)}, i.e. {ratio:.1f} seeds' std{verdict} (std: the root mean square of the "
            f"trials' std over seeds, {figure(typical)}; {context}).")


def spread_sentences(results: SweepResults, frame, objective: Objective) -> list[str]:
    """One :func:`spread_sentence` per swept parameter (per scenario cell and parameter with cells)."""
    keys = [k for k in results.parameters if k not in results.scenarios]
    return [spread_sentence(rows, key, objective, len(keys) > 1, cell)
            for cell, rows in cell_rows(frame).items() for key in keys]
