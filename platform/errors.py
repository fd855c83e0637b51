"""User-facing errors: one clear line, exit code 2, nothing written anywhere (defined in ``algorithms.errors``)."""
from algorithms.errors import ConfigError, UserError

__all__ = ["ConfigError", "UserError"]
