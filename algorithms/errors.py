"""Errors for bad input: one clear line that names the field and what is allowed, then exit code 2.

Defined here, below both packages, so algorithms (which never import ``platform``) and the platform raise the
same classes; ``platform.errors`` re-exports them and the CLIs turn them into ``error: <message>`` and exit 2.
"""


class UserError(Exception):
    """A problem with what the user asked for (config, name, value, missing data).

    The CLIs print ``error: <message>`` on one line to stderr and exit with code 2. The message names the
    offending field and what is allowed, so no traceback is needed.
    """

    exit_code = 2


class ConfigError(UserError, ValueError):
    """An invalid experiment config or search-space file. ``field`` is the dotted path of the culprit."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)

    def __reduce__(self):  # pickles whole (Ray sends a trial's error to the driver): field and message both
        return type(self), (self.field, self.message)
