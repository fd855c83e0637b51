"""User-facing errors: one clear line, exit code 2, nothing written anywhere."""


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
        super().__init__(f"{field}: {message}" if field else message)
