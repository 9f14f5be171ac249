"""The one exception commands raise for an error the user should read."""

from __future__ import annotations


class CliError(Exception):
    """Reported as one line on stderr (no traceback unless `--debug`); the process exits with
    `code`: 1 when the operation failed, 2 for invalid arguments (as usage errors do)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
