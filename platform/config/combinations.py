"""Values valid one by one can be invalid together: the load-time check of a search space's parameter values in
combination (:func:`validate_combinations`, called by :func:`platform.config.search_space.load_search_space` after
each value alone has passed). ``space`` is a :class:`~platform.config.search_space.SearchSpace`; ``check`` the
loader's extra check (the sweep's preflight)."""
from __future__ import annotations

from typing import Any, Callable, Optional

from platform.errors import ConfigError


def scalar_text(value: Any) -> str:
    """A value as a config file or ``--set`` spells it: ``true``, ``false``, ``null``, else ``str``."""
    if isinstance(value, bool) or value is None:
        return "true" if value is True else "false" if value is False else "null"
    return str(value)


def keys_naming(keys, field: str) -> list:
    """The config keys among ``keys`` that a ConfigError on ``field`` is about: the field itself, a key above it
    (``algorithm`` for ``algorithm.mu``) or below it."""
    return [k for k in keys if field == k or field.startswith(k + ".") or k.startswith(field + ".")]


#: At most this many combinations of the parameters' candidate values are validated together at load time
#: (:func:`validate_combinations`; about 11 ms each); a larger space is checked value by value only.
COMBINATIONS_CHECKED = 64


def combinations(parameters: dict) -> list[dict]:
    """Every combination of the parameters' candidate values (``Distribution.candidates``: a range's bounds,
    every option of a choice or grid), a parameter left out where its ``when`` does not hold; [] when there are
    more than :data:`COMBINATIONS_CHECKED`."""
    combos: list[dict] = [{}]
    for key, dist in parameters.items():  # in dependency order: conditions before what they condition
        grown = []
        for combo in combos:
            grown += [{**combo, key: value} for value in dist.candidates] if dist.applies(combo) else [combo]
            if len(grown) > COMBINATIONS_CHECKED:
                return []
        combos = grown
    return combos


def validate_combinations(space, check: Callable) -> list:
    """Values valid one by one can be invalid together (``clients.num_clients: [4, 10]`` with
    ``clients.clients_per_round: [4, 8]``): every combination of candidate values (up to
    :data:`COMBINATIONS_CHECKED`) passes validation, or one line names the smallest set of them that fails, before
    anything is started or written. Returns the configurations tried."""
    if len(space.parameters) < 2:
        return []
    configs = []
    for combo in combinations(space.parameters):
        config, error = _validated(space, check, combo)
        if error is None:
            configs.append(config)
            continue
        # the smallest failing set: drop each value the same failure does not need (a dropped key takes the base's
        # value, which may be no candidate: only a failure on the same field counts)
        for key in list(combo):
            smaller = {k: v for k, v in combo.items() if k != key}
            if len(smaller) < 2 or not all(space.parameters[k].applies(smaller) for k in smaller):
                continue
            _, again = _validated(space, check, smaller)
            if again is not None and again.field == error.field:
                combo, error = smaller, again
        named = keys_naming(combo, error.field)
        first = named[0] if named else next(iter(combo))
        together = ", ".join(f"{k}={scalar_text(v)}" for k, v in combo.items() if k != first)
        raise ConfigError(f"parameters.{first}", f"value {combo[first]!r} is invalid together with {together}: "
                                                 f"{error}")
    return configs


def _validated(space, check: Callable, params: dict) -> tuple[Optional[object], Optional[ConfigError]]:
    """``params`` on the space's base: (its config, None) when it passes validation, else (None, the error)."""
    try:
        config = space.trial_config(params)
        check(config)
    except ConfigError as err:
        return None, err
    return config, None
