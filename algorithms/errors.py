"""Errors for bad input: one clear line that names the field and what is allowed, then exit code 2.

Defined here, below both packages, so algorithms (which never import ``platform``) and the platform raise the
same classes; ``platform.errors`` re-exports them and the CLIs turn them into ``error: <message>`` and exit 2.

A message is rendered on one line here, in one place, whatever names and values it quotes (a YAML key may hold a
newline, a value may be 10 kB long): :func:`one_line` escapes control and line-separator characters the way
``repr`` does, cuts a long quoted value or an unbroken run of characters with an ellipsis, and caps the whole line.
"""
import re

#: a quoted value ('...' or "...", as ``repr`` writes it) longer than this is cut to it, ellipsis included
MAX_QUOTED = 80
#: an unbroken run of non-space characters (an unquoted value, a path) longer than this is cut to it
MAX_RUN = 160
#: the whole message is never longer than this
MAX_MESSAGE = 2000
ELLIPSIS = "..."

# a quote that opens or closes a value stands next to no letter or digit (the apostrophe of "isn't" is no quote)
_QUOTED = re.compile(r"(?<!\w)(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")(?!\w)", re.DOTALL)
_RUN = re.compile(r"\S{%d,}" % (MAX_RUN + 1))


def _escape(text: str) -> str:
    """``text`` with every character that is not printable as ``repr`` writes it (``\\n``, ``\\t``, ``\\x00``)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def _cut(text: str, limit: int, closing: str = "") -> str:
    if len(text) <= limit:
        return text
    return text[: limit - len(ELLIPSIS) - len(closing)] + ELLIPSIS + closing


def one_line(text: str) -> str:
    """``text`` as one printable line: control characters escaped, long values cut with an ellipsis.

    Idempotent (a rendered line renders to itself), so an error re-raised or sent between processes keeps its
    text. Quoted values are cut inside their quotes, keeping the closing quote; other long runs (a 10 kB
    unquoted value) are cut where they stand; the whole line is capped at :data:`MAX_MESSAGE` characters.
    """
    text = _escape(text)
    text = _QUOTED.sub(lambda m: _cut(m.group(0), MAX_QUOTED, m.group(0)[0]), text)
    text = _RUN.sub(lambda m: _cut(m.group(0), MAX_RUN), text)
    return _cut(text, MAX_MESSAGE)


class UserError(Exception):
    """A problem with what the user asked for (config, name, value, missing data).

    The CLIs print ``error: <message>`` on one line to stderr and exit with code 2. The message names the
    offending field and what is allowed, so no traceback is needed; it is rendered with :func:`one_line`, so a
    key or value that holds a newline, a tab, a NUL or 10 kB of text still gives one short line.
    """

    exit_code = 2

    def __init__(self, message: str = "", *args):
        super().__init__(one_line(message), *args)


class ConfigError(UserError, ValueError):
    """An invalid experiment config or search-space file. ``field`` is the dotted path of the culprit, as given
    (its rendering on one line is the message's: ``str(err)``)."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        # the field is cut on its own, so a 10 kB key keeps its colon and the message after it
        shown = _cut(_escape(field), MAX_RUN - 1)
        super().__init__(f"{shown}: {message}" if field else message)

    def __reduce__(self):  # pickles whole (Ray sends a trial's error to the driver): field and message both
        return type(self), (self.field, self.message)


def did_you_mean(name, choices) -> str:
    """``" (did you mean 'fedkp_bandwidth'?)"`` for the choice closest to a mistyped ``name``; "" when none is close
    (difflib's ratio under 0.75), so an error line names a near miss without guessing wildly."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""
