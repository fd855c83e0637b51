"""A small typed loader: plain dicts (from YAML) into frozen dataclasses, with one-line errors.

Why not pydantic: the errors we want are single lines that name the dotted field and what is allowed
(``partition.alpha: must be > 0, got -1``), and the schemas are small. Constraints live next to each
field in its ``metadata`` (``ge``, ``gt``, ``le``, ``choices``), so a schema reads as documentation.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal, Union

from algorithms.common.params import spec  # noqa: F401  (re-exported: platform.config.schema.spec)
from platform.errors import ConfigError, did_you_mean


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _convert(value: Any, tp: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise ConfigError(path, "must be set (null is not allowed)")
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, path)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError("", errors[0] if errors else f"{path}: invalid value {value!r}")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(path, f"unknown value {value!r}{did_you_mean(value, allowed)}; allowed: "
                                    f"{', '.join(map(str, allowed))}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(path, f"must be a list, got {value!r}")
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        items = [_convert(v, item_tp, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(path, f"must be a mapping, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(path, f"must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(path, f"must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(path, f"must be a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(path, f"must be a string, got {value!r}")
        return value
    raise ConfigError(path, f"unsupported type {_type_name(tp)}")  # pragma: no cover - schema bug


def _check_rules(value: Any, rules: dict, path: str) -> None:
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):  # NaN never; inf where a field allows it (allow_inf)
        if math.isnan(value) or not rules.get("allow_inf"):
            allowed = " (or .inf)" if rules.get("allow_inf") else ""
            raise ConfigError(path, f"must be a finite number{allowed}, got {value!r}")
    if "choices" in rules and value not in rules["choices"]:
        raise ConfigError(path, f"unknown value {value!r}{did_you_mean(value, rules['choices'])}; allowed: "
                                f"{', '.join(map(str, rules['choices']))}")
    if "gt" in rules and not value > rules["gt"]:
        raise ConfigError(path, f"must be > {rules['gt']}, got {value!r}")
    if "ge" in rules and not value >= rules["ge"]:
        raise ConfigError(path, f"must be >= {rules['ge']}, got {value!r}")
    if "lt" in rules and not value < rules["lt"]:
        raise ConfigError(path, f"must be < {rules['lt']}, got {value!r}")
    if "le" in rules and not value <= rules["le"]:
        raise ConfigError(path, f"must be <= {rules['le']}, got {value!r}")


def build(cls: type, data: Any, path: str = ""):
    """Build dataclass ``cls`` from ``data``, rejecting unknown keys and values out of range.

    After the fields are checked, ``cls.validate(self, path)`` runs if defined, for cross-field rules.
    """
    if data is None:
        data = {}
    if dataclasses.is_dataclass(data) and isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise ConfigError(path, f"must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = f"{path}.{unknown[0]}" if path else str(unknown[0])
        raise ConfigError(where, f"unknown key{did_you_mean(unknown[0], fields)}; allowed in {path or 'the config'}: "
                                 f"{', '.join(fields)}")
    kwargs = {}
    for name, field in fields.items():
        sub = f"{path}.{name}" if path else name
        if name in data:
            value = _convert(data[name], hints[name], sub)
        elif field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            value = field.default_factory()  # type: ignore[misc]
            if dataclasses.is_dataclass(value):
                value = build(type(value), {}, sub)
        else:
            raise ConfigError(sub, "is required")
        _check_rules(value, field.metadata, sub)
        kwargs[name] = value
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if validate is not None:
        validate(path)
    return obj


def to_dict(obj: Any) -> Any:
    """The plain-dict form of a config (inverse of :func:`build`)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}} -> {"a.b": 1}``: the dotted keys used by ``--set``, MLflow params and sweeps."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out
