"""Property test of the config loader: any input either loads or fails with a UserError whose message is one line
naming a field, never another exception (a traceback for the user). Inputs mutate the default config's own keys
(so most reach deep validation) and add unknown ones, with values of every kind: NaN, infinities, huge and negative
numbers, strings, lists, mappings, None; keys and values with newlines, tabs, NULs and long text.

Deterministic in the default run (tests/conftest.py's "ci" Hypothesis profile: the same 300 examples every time);
``pytest -m fuzz --hypothesis-profile=fuzz`` draws fresh ones, 5,000 of them."""
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from platform.config.experiment import build_experiment
from platform.errors import UserError

DEFAULT = build_experiment({}).flat()
KEYS = sorted(DEFAULT) + ["algorithm.name", "clients.speed", "partition", "dataset.name.x", "nope"]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -1.0,
                                                                            1e300, 1e-300]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["a\nb", "\t", "\x00", "x\r\n", "\u2028", "y" * 10_000]),
    st.sampled_from(["fedavg", "fedprox", "feded", "mnfl", "fedaux", "fedkp", "cnn", "digits", "dirichlet", "iid"]))
ODD_KEYS = st.one_of(st.text(max_size=6), st.sampled_from(["\n", "x\ny", "\t", "\x00", "k" * 10_000]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(ODD_KEYS, inner, max_size=3)),
                      max_leaves=5)


def nest(flat: dict) -> dict:
    """``{"a.b": 1}`` -> ``{"a": {"b": 1}}``; a key that would sit under a scalar is dropped."""
    out: dict = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        else:
            node[leaf] = value
    return out


@pytest.mark.fuzz
@given(st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=4))
def test_any_config_loads_or_fails_with_one_line(changes):
    try:
        build_experiment(nest(changes))
    except UserError as err:
        message = str(err)
        assert message and message.isprintable() and len(message) <= 2000, message
