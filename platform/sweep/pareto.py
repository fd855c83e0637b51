"""The Pareto front of a multi-objective sweep: which finished trials no other trial beats on every objective.

Pure functions (no Ray, no MLflow), used by ``platform.sweep.command`` to report a multi-objective search.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence


def objective_value(row: dict, metric: str) -> Optional[float]:
    """``row[metric]`` as a float, or None when it is missing, not a number, or NaN (such rows are left out)."""
    value = row.get(metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return None if math.isnan(value) else value


def dominates(a: Sequence[float], b: Sequence[float], modes: Sequence[str]) -> bool:
    """True when ``a`` is at least as good as ``b`` on every objective and strictly better on one."""
    better = False
    for x, y, mode in zip(a, b, modes):
        if mode == "min":
            x, y = -x, -y
        if x < y:
            return False
        if x > y:
            better = True
    return better


def pareto_front(rows: list[dict], objectives: list[tuple[str, str]]) -> list[dict]:
    """The rows no other row dominates, in their original order.

    ``objectives`` is ``[(metric, "max" | "min"), ...]``. Rows missing an objective (absent, None, NaN or not a
    number) are left out. Equal points do not dominate each other, so every copy of a non-dominated point is kept;
    with one objective the front is every row with the best value.
    """
    if not objectives:
        raise ValueError("pareto_front needs at least one objective")
    for metric, mode in objectives:
        if mode not in ("max", "min"):
            raise ValueError(f"objective {metric!r}: mode must be 'max' or 'min', got {mode!r}")
    modes = [mode for _, mode in objectives]
    points: list[tuple[dict, list[float]]] = []
    for row in rows:
        values = [objective_value(row, metric) for metric, _ in objectives]
        if all(v is not None for v in values):
            points.append((row, values))  # type: ignore[arg-type]
    return [row for row, values in points if not any(dominates(other, values, modes) for _, other in points)]
