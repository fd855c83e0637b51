"""Is the best really better? The best trial's lead over the runner-up, with its standard error over seeds and a
Welch t-test (scipy), and the one order every place that names a best uses (the console summary, the parent run's
description and tags, ``best_per_cell``, the report, the MLflow view).

The order: the selection metric's mean over seeds (in the search's direction), then the smaller std over seeds, then
the earlier trial (the lower trial number). Ties therefore break the same way everywhere.

The lead is ``mean(best) - mean(runner-up)`` in the direction of the search (positive), its standard error
``sqrt(s_b²/n_b + s_r²/n_r)`` with the seeds' sample variances (ddof 1), and the two-sided Welch t-test p-value of
the per-seed values. The lead is **within noise** when it is not larger than its standard error, or when either trial
has a single seed (no spread to compare with).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from platform.config.run_schema import PER_SEED_SEPARATOR


def per_seed_values(metrics: dict, metric: str) -> list[float]:
    """The values of ``metric`` per seed in a trial's metrics (``<metric>/seed_<s>``), in seed order; the mean alone
    (one value) where the trial logged none per seed."""
    prefix = f"{metric}{PER_SEED_SEPARATOR}"
    found = sorted((int(k[len(prefix):]), float(v)) for k, v in metrics.items()
                   if k.startswith(prefix) and k[len(prefix):].isdigit() and isinstance(v, (int, float)))
    if found:
        return [v for _, v in found]
    value = metrics.get(metric)
    return [float(value)] if isinstance(value, (int, float)) else []


def rank_key(mean: float, std: Optional[float], number: Optional[int], mode: str) -> tuple:
    """Sort key of one trial: better mean first, then the smaller std, then the earlier trial."""
    signed = -mean if mode == "max" else mean
    return (signed, std if std is not None and math.isfinite(std) else 0.0,
            number if number is not None else math.inf)


def rank(items: Sequence, mean: Callable, std: Callable, number: Callable, mode: str) -> list:
    """``items`` best first by :func:`rank_key` (``mean``, ``std``, ``number``: how to read each item)."""
    return sorted(items, key=lambda item: rank_key(mean(item), std(item), number(item), mode))


@dataclass(frozen=True)
class Lead:
    lead: float  # mean(best) - mean(runner-up), in the search's direction (>= 0)
    se: Optional[float]  # its standard error over seeds (None: a single seed)
    p: Optional[float]  # two-sided Welch t-test p-value of the per-seed values (None: not computable)
    seeds: int  # seeds of the best trial

    @property
    def within_noise(self) -> bool:
        """The difference is not larger than its standard error, either way (a claim's "lead" may be negative)."""
        return self.se is None or not abs(self.lead) > self.se

    def text(self) -> str:
        """``lead over the runner-up 0.0021 ± 0.0034 (SE, 3 seeds), Welch p = 0.56: within noise``."""
        if self.se is None:
            return (f"lead over the runner-up {self.lead:.4f} (one seed: no spread to compare it with): "
                    f"within noise as far as is known")
        p = f", Welch p = {self.p:.2g}" if self.p is not None else ""
        verdict = "within noise" if self.within_noise else "beyond one standard error"
        return f"lead over the runner-up {self.lead:.4f} ± {self.se:.4f} (SE, {self.seeds} seeds){p}: {verdict}"

    def as_dict(self) -> dict:
        return {"lead": self.lead, "lead_se": self.se, "lead_p": self.p, "within_noise": self.within_noise}


def lead_over(best: Sequence[float], runner_up: Sequence[float], mode: str) -> Optional[Lead]:
    """The best's lead over the runner-up from their per-seed values (None without a runner-up)."""
    if not best or not runner_up:
        return None
    mean_b, mean_r = sum(best) / len(best), sum(runner_up) / len(runner_up)
    lead = (mean_b - mean_r) if mode == "max" else (mean_r - mean_b)
    if len(best) < 2 or len(runner_up) < 2:
        return Lead(lead, None, None, len(best))
    var_b, var_r = _variance(best), _variance(runner_up)
    se = math.sqrt(var_b / len(best) + var_r / len(runner_up))
    p = None
    if se > 0:
        from scipy import stats

        p = float(stats.ttest_ind(best, runner_up, equal_var=False).pvalue)
    elif lead == 0:
        p = 1.0
    return Lead(lead, se, p, len(best))


def _variance(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def typical_std(stds: Sequence[Optional[float]]) -> Optional[float]:
    """The seeds' typical std over trials: the root mean square of the trials' finite stds; None without one."""
    finite = [s for s in stds if s is not None and math.isfinite(s)]
    return math.sqrt(sum(s * s for s in finite) / len(finite)) if finite else None


def range_in_stds(values: Sequence[float], stds: Sequence[float]) -> Optional[float]:
    """How far the metric moves over a swept parameter, in units of the seeds' typical std (:func:`typical_std`);
    None where the seeds give no spread."""
    typical = typical_std(stds)
    if not values or not typical:
        return None
    return (max(values) - min(values)) / typical
