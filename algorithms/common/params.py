"""Typed hyperparameters: a dataclass field with its documentation and validation rules in one place.

Each method's ``Hyperparams`` is a frozen dataclass whose fields are made with :func:`spec`; the platform's
loader (``platform.config.schema.build``) reads the rules (``ge``, ``gt``, ``le``, ``lt``, ``choices``) and the
``doc`` string, so a schema reads as documentation and a bad value fails at load time naming its field.
"""
from __future__ import annotations

import dataclasses
from typing import Any


def spec(default: Any = dataclasses.MISSING, *, doc: str = "", factory: Any = dataclasses.MISSING, **rules: Any):
    """A dataclass field with a docstring and validation rules (ge, gt, le, lt, choices; a float must be finite
    unless ``allow_inf=True``, and is never NaN)."""
    metadata = {"doc": doc, **rules}
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)
