"""Reference values: the optional top-level ``reference:`` block of a search space (:mod:`platform.config.search_space`)
holds the paper's numbers for the question, printed next to ours by ``python -m platform.report``.

:func:`parse_reference` checks the block's shape against the space's swept parameters (``parameters``, key ->
:class:`platform.config.search_space.Distribution`) and scenario keys; :func:`check_reference_metrics` checks its
metrics against the algorithms the space can run. :func:`platform.config.search_space.load_reference` reads the block
of a named space.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from platform.config.run_schema import is_number
from platform.errors import ConfigError


@dataclass(frozen=True)
class ReferenceValue:
    """One number of the paper: ``metric`` (in the platform's unit: accuracies are fractions) for the trials whose
    swept values match ``arm`` in scenario cell ``scenario`` (both may be empty: every trial)."""
    metric: str
    value: float
    std: Optional[float] = None
    arm: dict = field(default_factory=dict)  # swept parameter -> value
    scenario: dict = field(default_factory=dict)  # scenario key -> value
    label: str = ""  # the paper's row, e.g. "FedED-w2"


@dataclass(frozen=True)
class Reference:
    source: str  # where the numbers come from, e.g. "docs/methods/feded.md §7.1, Table 4.1"
    note: str  # how the paper's setting differs from ours (dataset, model, scale)
    values: tuple  # ReferenceValue, ...


_REFERENCE_KEYS = ("source", "note", "values")
_REFERENCE_VALUE_KEYS = ("label", "arm", "scenario", "metric", "value", "std")


def parse_reference(raw: Any, parameters: dict, scenarios: dict) -> Optional[Reference]:
    """The ``reference:`` block: ``source`` (required), ``note``, and ``values``, a non-empty list of
    ``{label?, arm?: {swept parameter: value}, scenario?: {scenario key: value}, metric, value, std?}``: the paper's
    ``value`` (± ``std``) of ``metric`` for the trials with those swept values in that scenario cell. Accuracies are
    fractions in [0, 1] like the platform's. Errors name the field, e.g. ``reference.values[1].metric``."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError("reference", f"must be a mapping with source, note and values, got {raw!r}")
    for key in raw:
        if key not in _REFERENCE_KEYS:
            raise ConfigError(f"reference.{key}", f"unknown key; allowed: {', '.join(_REFERENCE_KEYS)}")
    source, note, values = raw.get("source"), raw.get("note", ""), raw.get("values")
    if not isinstance(source, str) or not source.strip():
        raise ConfigError("reference.source", f"must name where the numbers come from (file, section, table), "
                                              f"got {source!r}")
    if not isinstance(note, str):
        raise ConfigError("reference.note", f"must be text, got {note!r}")
    if not isinstance(values, list) or not values:
        raise ConfigError("reference.values", f"must be a non-empty list of {{metric, value, ...}}, got {values!r}")

    def check_number(where: str, number: Any, metric: str, low: Optional[float] = None) -> float:
        if not is_number(number) or not math.isfinite(number):
            raise ConfigError(where, f"must be a finite number, got {number!r}")
        if low is not None and number < low:
            raise ConfigError(where, f"must be >= {low:g}, got {number!r}")
        if "accuracy" in metric and not 0 <= number <= 1:
            raise ConfigError(where, f"{metric} is a fraction in [0, 1] as the platform logs it, got {number!r} "
                                     f"(write {number / 100:.4g} for {number}%)")
        return float(number)

    def check_values(where: str, given: Any, allowed: dict, what: str) -> dict:
        """Keys must be the space's; a value need not be one the space runs now (a trimmed copy keeps its
        reference: that row then finds no trial), but it must be a scalar, and a number for a range."""
        if not isinstance(given, dict):
            raise ConfigError(where, f"must map {what}s to values, got {given!r}")
        for key, value in given.items():
            if key not in allowed:
                raise ConfigError(f"{where}.{key}", f"not a {what}; {what}s: {', '.join(map(str, allowed)) or 'none'}")
            numeric = getattr(allowed[key], "kind", None) in ("uniform", "loguniform", "int")
            if isinstance(value, (list, dict)) or (numeric and not is_number(value)):
                raise ConfigError(f"{where}.{key}", f"must be {'a number' if numeric else 'one value'}, got {value!r}")
        return dict(given)

    parsed = []
    for i, entry in enumerate(values):
        where = f"reference.values[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(where, f"must be a mapping with metric and value, got {entry!r}")
        for key in entry:
            if key not in _REFERENCE_VALUE_KEYS:
                raise ConfigError(f"{where}.{key}", f"unknown key; allowed: {', '.join(_REFERENCE_VALUE_KEYS)}")
        metric = entry.get("metric")
        if not isinstance(metric, str) or not metric:
            raise ConfigError(f"{where}.metric", f"must name a metric, e.g. test_accuracy, got {metric!r}")
        label = entry.get("label", "")
        if not isinstance(label, str):
            raise ConfigError(f"{where}.label", f"must be text, got {label!r}")
        std = entry.get("std")
        parsed.append(ReferenceValue(
            metric=metric, value=check_number(f"{where}.value", entry.get("value"), metric),
            std=None if std is None else check_number(f"{where}.std", std, metric, low=0.0),
            arm=check_values(f"{where}.arm", entry.get("arm") or {}, parameters, "swept parameter"),
            scenario=check_values(f"{where}.scenario", entry.get("scenario") or {}, scenarios or {}, "scenario key"),
            label=label))
    return Reference(source.strip(), note.strip(), tuple(parsed))


def check_reference_metrics(reference: Optional[Reference], configs: list) -> None:
    """Every reference metric is one some algorithm of the space declares (a typo would match nothing)."""
    if reference is None:
        return
    from algorithms import resolve_algorithm  # deferred: start-up time (torch)
    from algorithms.base import describe_metrics

    declared: dict = {}
    for name in dict.fromkeys(c.algorithm.name for c in configs):
        declared.update(resolve_algorithm(name).declared_metrics())
    for i, value in enumerate(reference.values):
        if value.metric not in declared:
            raise ConfigError(f"reference.values[{i}].metric", f"unknown metric {value.metric!r}; known: "
                                                               f"{describe_metrics(declared)}")
