"""What a handler module declares (`Api`: an API key, its versions and its handler) and what a
handler may answer besides a response entity: an encoded `RawResponse`, or a `Deferred` one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable


@dataclass(frozen=True, slots=True)
class RawResponse:
    """A response already encoded as pieces: bytes, and file regions to `sendfile`."""

    pieces: list[Any]
    size: int


class Deferred:
    """A handler's answer that is not ready yet (it waits for its writes to be on disk): the
    connection goes on with the next requests and sends this answer, in its place among the
    others, once the future ``waiting`` is done; ``build(waiting)`` then gives the response (a
    callback, not a task: this is the hot path of durable writes)."""

    __slots__ = ("waiting", "build")

    def __init__(self, waiting: Any, build: Callable[[Any], Any]) -> None:
        self.waiting = waiting
        self.build = build


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    handle: Callable[..., Awaitable[Any]]  # (broker, request, connection) -> response | None
