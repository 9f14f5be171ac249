"""Small helpers shared by the handlers."""

from __future__ import annotations

from datetime import timedelta

from kio.schema.errors import ErrorCode

NO_THROTTLE = timedelta(0)


class InvalidRequest(Exception):
    """A request Kafka refuses as invalid (its InvalidRequestException) that has no answer in
    its version: the connection is closed with one warning line."""


class CloseConnection(Exception):
    """Close the connection after this request: with `answer` (a response entity) sent first,
    or with no answer at all."""

    def __init__(self, reason: str = "", answer=None) -> None:
        super().__init__(reason)
        self.answer = answer


INT32_MIN = -(2**31)  # "authorized operations not requested"


def ms(value) -> int:
    """kio gives Kafka's millisecond durations as timedeltas."""
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def message(code: ErrorCode, detail: str | None = None) -> str | None:
    return detail if code != ErrorCode.none else None
