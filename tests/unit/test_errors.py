"""User-facing errors render what they quote on one line, in one place (``algorithms.errors``): control characters
escaped as ``repr`` writes them, long values cut with an ellipsis, the line capped; whatever raised it."""
import pickle

import pytest

from algorithms.errors import MAX_MESSAGE, MAX_QUOTED, MAX_RUN, one_line
from platform.errors import ConfigError, UserError

ODD = {"newline": "a\nb", "carriage return": "a\r\nb", "tab": "a\tb", "NUL": "a\x00b", "escape": "a\x1bb",
       "line separator": "a\u2028b", "next line": "a\x85b", "vertical tab": "a\x0bb", "form feed": "a\x0cb"}


@pytest.mark.parametrize("name", sorted(ODD))
def test_a_key_with_a_control_character_is_escaped_in_the_field(name):
    key = "partition." + ODD[name]
    err = ConfigError(key, "unknown key; allowed in partition: kind, alpha")
    text = str(err)
    assert text.isprintable() and len(text.splitlines()) == 1, text
    assert text == f"{key!r}"[1:-1] + ": unknown key; allowed in partition: kind, alpha"  # escaped as repr does
    assert err.field == key  # the culprit is kept as given, for code that reads it


@pytest.mark.parametrize("name", sorted(ODD))
def test_a_value_with_a_control_character_is_escaped_in_a_user_error(name):
    text = str(UserError(f"--storage-path: {ODD[name]} is not a directory"))
    assert text.isprintable() and "\\" in text and text.endswith(" is not a directory")


def test_a_10_kb_quoted_value_is_cut_inside_its_quotes():
    value = "q" * 10_000
    text = str(ConfigError("algorithm.name", f"unknown algorithm {value!r}; allowed: fedavg, fedprox"))
    assert text.startswith("algorithm.name: unknown algorithm 'qqq") and text.endswith("...'; allowed: fedavg, fedprox")
    quoted = text[text.index("'"): text.rindex("'") + 1]
    assert len(quoted) == MAX_QUOTED


def test_a_10_kb_unquoted_value_and_a_10_kb_key_are_cut():
    text = str(ConfigError("k" * 10_000, "unknown key; allowed: a, b"))
    assert text.startswith("kkk") and text.endswith("...: unknown key; allowed: a, b")
    assert len(text) == MAX_RUN + len(" unknown key; allowed: a, b")  # the key cut, then its colon
    text = str(UserError("bad " + "v " * 10_000))  # long, but no run to cut: the line is capped
    assert len(text) == MAX_MESSAGE and text.endswith("...")


def test_a_10_kb_value_with_newlines_and_nuls_renders_short():
    value = "a\n" * 3000 + "\x00"
    text = str(ConfigError("dataset.root", f"data root {value!r} does not exist"))
    assert text.isprintable() and len(text) < 120 and text.endswith("...' does not exist")


def test_plain_messages_are_unchanged_and_rendering_is_idempotent():
    plain = ("partition.alpha: must be > 0", "model.architectures: cnn 3.333, mlp 6.667 clients isn't whole",
             "public.source: the public inputs (dataset mnist) have shape (1, 28, 28) per sample")
    for message in plain:
        assert one_line(message) == message
    for odd in list(ODD.values()) + ["x" * 10_000, repr("y\n" * 5000), "z " * 5000]:
        once = one_line(odd)
        assert one_line(once) == once


def test_the_rendered_error_survives_pickling_as_ray_sends_it():
    err = ConfigError("partition.\n", "unknown key " + repr("v" * 500))
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ConfigError and str(back) == str(err) and back.field == "partition.\n"


def test_an_error_re_raised_with_context_names_its_escaped_field_once():
    """``error_message`` drops the ``field: `` prefix also when the field is shown escaped (a key with a newline)."""
    from platform.config.experiment import error_message

    err = ConfigError("partition.x\ny", "unknown key")
    again = ConfigError(err.field, f"in scenario cell 1: {error_message(err)}")
    assert str(again) == "partition.x\\ny: in scenario cell 1: unknown key"
