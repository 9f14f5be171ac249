"""Client quotas applied to requests (KIP-219): the handlers' side of brook.broker.quotas.client_quotas.

A Produce's bytes count against `producer_byte_rate`, a consumer's Fetch answer against
`consumer_byte_rate`, and the time a handler runs on the event loop against
`request_percentage`. A client over a quota is answered at once with `throttle_time_ms`,
then its connection reads nothing more from it for that long (Connection.muted_until);
newer clients also wait by themselves. A consumer's Fetch over its quota is answered empty
(its bytes taken back), as Kafka answers it, so the consumer fetches the same offsets again
once its wait is over.

Nothing here runs while no quota is set: the callers check `broker.quotas.active` first.
"""

from __future__ import annotations

import dataclasses
import struct
from datetime import timedelta
from time import perf_counter
from functools import cache
from types import coroutine

from ...protocol.messages import API_VERSIONS_KEY, response_class
from ..handlers.api import RawResponse

from .client_quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE

_I32 = struct.Struct(">i")
#: APIs whose time is not the client's to pay for (Kafka's exempt requests): what brokers send
#: each other, and authentication.
_EXEMPT = frozenset({4, 5, 6, 7, 17, 36, 56})


def user_of(connection) -> str:
    """The quota user: the principal's name ("alice" of "User:alice"; ANONYMOUS without SASL)."""
    principal = connection.principal if connection is not None else "User:ANONYMOUS"
    return principal.partition(":")[2] or principal


def now_ms(broker) -> int:
    return broker.timeout_clock.milliseconds()  # steps of the system clock move no rate


def mute(connection, throttle_ms: int) -> None:
    """The connection reads nothing more from its client for `throttle_ms`."""
    if throttle_ms > 0 and connection is not None:
        until = connection.loop.time() + throttle_ms / 1000
        if until > connection.muted_until:
            connection.muted_until = until


def _metric(broker, key: str, throttle_ms: int) -> None:
    """Counted for the metrics: throttled answers and their waits, by quota."""
    if throttle_ms > 0:
        counts = broker.quotas.throttled
        count, total = counts.get(key, (0, 0))
        counts[key] = (count + 1, total + throttle_ms)


# ---------------------------------------------------------------- byte rates

def produce_throttle(broker, request, connection) -> int:
    """Record a Produce request's bytes; the throttle time (ms) it earns, the connection muted
    for it."""
    quotas = broker.quotas
    if not quotas.enforced(PRODUCER_BYTE_RATE):
        return 0
    throttle = quotas.record(PRODUCER_BYTE_RATE, user_of(connection), request.client_id or "",
                             request.size, now_ms(broker))
    mute(connection, throttle)
    _metric(broker, PRODUCER_BYTE_RATE, throttle)
    return throttle


def fetch_throttle(broker, request, connection, size: int, answered_empty: bool = True) -> int:
    """Record a consumer's Fetch answer of `size` bytes; the throttle time (ms). Throttled,
    the caller answers empty (`answered_empty`) and the bytes are taken back (Kafka's
    unrecord)."""
    quotas = broker.quotas
    if not quotas.enforced(CONSUMER_BYTE_RATE):
        return 0
    user, client_id, now = user_of(connection), request.client_id or "", now_ms(broker)
    throttle = quotas.record(CONSUMER_BYTE_RATE, user, client_id, size, now)
    if throttle > 0:
        if answered_empty:
            quotas.unrecord(CONSUMER_BYTE_RATE, user, client_id, size, now)
        mute(connection, throttle)
        _metric(broker, CONSUMER_BYTE_RATE, throttle)
    return throttle


def fetch_with_throttle(pieces: list, version: int, throttle_ms: int) -> list:
    """An encoded Fetch answer's pieces with `throttle_time_ms` set."""
    return _patched(pieces, 1, version, throttle_ms)


@cache
def _throttle_offset(api_key: int, version: int) -> int | None:
    """Where an encoded answer's frame holds throttle_time_ms, when it is the body's first field
    (as in most answers): after the size, the correlation id and, flexible, the header's tags."""
    cls = response_class(api_key, version)
    first = dataclasses.fields(cls)[0].name if dataclasses.is_dataclass(cls) else None
    if first != "throttle_time":
        return None
    return 9 if cls.__flexible__ and api_key != API_VERSIONS_KEY else 8


def _patched(pieces: list, api_key: int, version: int, throttle_ms: int) -> list:
    offset = _throttle_offset(api_key, version)
    if offset is None or throttle_ms <= 0 or not isinstance(pieces[0], bytes) or len(pieces[0]) < offset + 4:
        return pieces
    head = bytearray(pieces[0])
    _I32.pack_into(head, offset, throttle_ms)
    return [bytes(head), *pieces[1:]]


def release(pieces: list) -> None:
    """Let go of the file regions of an answer that will not be sent."""
    for piece in pieces:
        done = getattr(piece, "release", None)
        if done is not None:
            done()


# ---------------------------------------------------------------- request time

class _Timed:
    """Runs a handler's coroutine, adding up the time of its steps on the event loop only (a
    long-polling Fetch or a parked JoinGroup waits for free, as in Kafka, where only the
    request thread's time counts)."""

    __slots__ = ("coro", "seconds")

    def __init__(self, coro) -> None:
        self.coro = coro
        self.seconds = 0.0

    @coroutine
    def run(self):
        coro, send, error = self.coro, None, None
        while True:
            start = perf_counter()
            try:
                awaited = coro.send(send) if error is None else coro.throw(error)
            except StopIteration as done:
                self.seconds += perf_counter() - start
                return done.value
            self.seconds += perf_counter() - start
            try:
                send, error = (yield awaited), None
            except BaseException as exc:  # a cancellation goes on into the handler
                send, error = None, exc


def install(broker) -> None:
    """While a request_percentage quota is set, every handler (but the exempt ones) is timed;
    otherwise the handlers are the plain ones, and nothing is timed."""
    plain = {key: getattr(api.handle, "plain", api) for key, api in broker.apis.items()}
    if broker.quotas.enforced(REQUEST_PERCENTAGE):
        broker.apis = {key: api if key in _EXEMPT else dataclasses.replace(api, handle=_timed(api))
                       for key, api in plain.items()}
    else:
        broker.apis = plain


def _timed(api):
    async def handle(broker, request, connection):
        return await timed_handle(api, broker, request, connection)

    handle.plain = api
    return handle


async def timed_handle(api, broker, request, connection):
    """A request's handler timed: its time counts against request_percentage (100 is the whole
    event loop), and an answer that has a throttle time gets the wait it earned."""
    timed = _Timed(api.handle(broker, request, connection))
    response = await timed.run()
    throttle = broker.quotas.record(REQUEST_PERCENTAGE, user_of(connection), request.client_id or "",
                                    timed.seconds * 100, now_ms(broker))
    if throttle > 0:
        mute(connection, throttle)
        _metric(broker, REQUEST_PERCENTAGE, throttle)
        response = _with_throttle(response, request, throttle)
    return response


def _with_throttle(response, request, throttle_ms: int):
    """The answer with the larger of its own throttle time and `throttle_ms` (one encoded by
    its handler gets it in its bytes; a deferred one keeps its own, the connection is muted
    all the same)."""
    if isinstance(response, RawResponse):
        pieces = _patched(response.pieces, request.api_key, request.api_version, throttle_ms)
        return RawResponse(pieces, response.size) if pieces is not response.pieces else response
    current = getattr(response, "throttle_time", None)
    if isinstance(current, timedelta) and current < timedelta(milliseconds=throttle_ms):
        return dataclasses.replace(response, throttle_time=timedelta(milliseconds=throttle_ms))
    return response
