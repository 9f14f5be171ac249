"""How a connection writes its answers when the client reads slowly: an answer the socket
could not take at once still goes out while a later request's handler waits, and a connection
closed with answers queued sends nothing more and leaves no callback behind.

A broker runs in this process on a socket pair whose sending side has a small buffer, so that
"the socket is full" happens on purpose."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from datetime import timedelta

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

import pytest

from brook.broker import connection
from tests.support import socketpair_broker
from brook.protocol.messages import make
from tests.support.kafka_wire import frame

OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP = 8, 9, 11
PARTITIONS = 100
METADATA = "m" * 4000  # with each offset: an OffsetFetch answer of ~400 KB, far more than the
                       # socket holds
JOIN_DELAY_MS = 3000


def commit_many(group: str):
    cls = load_request_schema(OFFSET_COMMIT, 9)
    mod = __import__(cls.__module__, fromlist=["_"])
    return make(cls, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, topics=(mod.OffsetCommitRequestTopic(
                    name="t", partitions=tuple(mod.OffsetCommitRequestPartition(
                        partition_index=i, committed_offset=i, committed_leader_epoch=-1,
                        committed_metadata=METADATA) for i in range(PARTITIONS))),))


def fetch_all(group: str):
    cls = load_request_schema(OFFSET_FETCH, 7)
    return make(cls, group_id=group, topics=None, require_stable=False)


def join(member_id: str):
    cls = load_request_schema(JOIN_GROUP, 9)
    mod = __import__(cls.__module__, fromlist=["_"])
    return make(cls, group_id="slow-join", session_timeout=timedelta(seconds=30),
                rebalance_timeout=timedelta(seconds=30), member_id=member_id,
                group_instance_id=None, protocol_type="consumer", reason=None,
                protocols=(mod.JoinGroupRequestProtocol(name="range", metadata=b""),))


class Reader:
    """Whole response frames from the client's end of the pair."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    async def frame(self, timeout: float) -> tuple[int, bytes]:
        loop = asyncio.get_running_loop()
        while True:
            if len(self.buf) >= 8:
                size = struct.unpack_from(">i", self.buf)[0]
                if len(self.buf) >= 4 + size:
                    body, self.buf = self.buf[4:4 + size], self.buf[4 + size:]
                    return struct.unpack_from(">i", body)[0], body
            chunk = await asyncio.wait_for(loop.sock_recv(self.sock, 1 << 16), timeout)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk


def decode(api_key: int, version: int, body: bytes):
    cls = load_response_schema(api_key, version)
    header, offset = entity_reader(cls.__header_schema__)(body, 0)
    return entity_reader(cls)(body, offset)[0]


def run_broker(tmp_path, test):
    """``await test(broker, conn, theirs, Reader(theirs))`` on a socket pair with 16 KiB
    buffers. The connection's turns are not cut short (TURN_SECONDS): a turn ended after the
    OffsetFetch on a slow machine would wait there for the socket, before the JoinGroup."""
    patch = pytest.MonkeyPatch()
    patch.setattr(connection, "TURN_SECONDS", 60.0)
    try:
        _run_broker(tmp_path, test)
    finally:
        patch.undo()


def _run_broker(tmp_path, test):
    async def adapted(broker, conn, ours, theirs):
        await test(broker, conn, theirs, Reader(theirs))

    socketpair_broker.run_broker(
        tmp_path, {"group.initial.rebalance.delay.ms": str(JOIN_DELAY_MS)}, adapted,
        buffer_bytes=16 * 1024)


async def _setup(conn, theirs, reader) -> str:
    """Commit the offsets the big answer lists; return a member id for the JoinGroup."""
    conn.broker.create_topic("t", PARTITIONS)
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(theirs, frame(commit_many("big"), 1))
    corr, body = await reader.frame(30)
    assert corr == 1
    answer = decode(OFFSET_COMMIT, 9, body)
    assert all(p.error_code == ErrorCode.none for t in answer.topics for p in t.partitions)
    await loop.sock_sendall(theirs, frame(join(""), 2))  # KIP-394: ask for a member id
    corr, body = await reader.frame(30)
    first = decode(JOIN_GROUP, 9, body)
    assert corr == 2 and first.error_code == ErrorCode.member_id_required
    return first.member_id


def test_an_answer_the_socket_could_not_take_at_once_does_not_wait_for_a_parked_join(tmp_path):
    """The OffsetFetch answer is larger than the socket's buffer; the JoinGroup after it on the
    same connection waits group.initial.rebalance.delay.ms. The client, slow to start reading,
    gets the whole OffsetFetch answer as soon as it reads, not when the join completes."""

    async def test(broker, conn, theirs, reader):
        member = await _setup(conn, theirs, reader)
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        await loop.sock_sendall(theirs, frame(fetch_all("big"), 3) + frame(join(member), 4))
        await asyncio.sleep(0.3)  # not reading: the broker finds the socket full
        corr, body = await reader.frame(30)
        fetched = time.monotonic() - start
        assert corr == 3
        answer = decode(OFFSET_FETCH, 7, body)
        assert answer.error_code == ErrorCode.none
        assert sum(len(t.partitions) for t in answer.topics) == PARTITIONS
        assert fetched < 1.5, f"the OffsetFetch answer waited {fetched:.1f} s for the join"
        corr, body = await reader.frame(30)
        assert corr == 4 and decode(JOIN_GROUP, 9, body).error_code == ErrorCode.none
        assert time.monotonic() - start >= (JOIN_DELAY_MS / 1000) * 0.8  # the join did wait

    run_broker(tmp_path, test)


def test_a_connection_closed_with_answers_queued_sends_nothing_more(tmp_path):
    """Closed while its JoinGroup is parked and part of the OffsetFetch answer before it is
    still queued: the task ends, no writer callback is left on the descriptor, no exception
    escapes, and the client sees the connection end."""

    async def test(broker, conn, theirs, reader):
        member = await _setup(conn, theirs, reader)
        loop = asyncio.get_running_loop()
        errors = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        await loop.sock_sendall(theirs, frame(fetch_all("big"), 3) + frame(join(member), 4))
        for _ in range(100):  # the join parked, the socket full, an answer queued (a busy machine
            if conn.busy:    # takes longer than 0.3 s to get there)
                break
            await asyncio.sleep(0.05)
        assert conn.busy
        fd = conn.fd
        conn.close()
        await asyncio.gather(conn.task, return_exceptions=True)
        assert conn.closed and conn.task.done()
        assert not conn._out
        received = 0
        while True:  # what was handed to the socket before the close, then the end
            chunk = await asyncio.wait_for(loop.sock_recv(theirs, 1 << 16), 5)
            if not chunk:
                break
            received += len(chunk)
        assert len(reader.buf) + received < 400_000  # the rest of the answer was dropped
        assert not loop.remove_writer(fd)  # nothing left watching the (closed) descriptor
        await asyncio.sleep(0.1)
        assert errors == []

    run_broker(tmp_path, test)


def test_a_request_is_timed_until_its_answer_has_gone_to_the_socket(tmp_path):
    """brook_request_total_time_seconds is Kafka's TotalTimeMs: it includes the time the answer
    waits for room in the socket. The client reads the big OffsetFetch answer 0.3 s late."""
    from brook.broker.metrics import BrokerMetrics

    async def test(broker, conn, theirs, reader):
        broker.metrics = BrokerMetrics(broker)
        try:
            await _setup(conn, theirs, reader)
            stats = broker.metrics.requests[OFFSET_FETCH]
            loop = asyncio.get_running_loop()
            await loop.sock_sendall(theirs, frame(fetch_all("big"), 3))
            await asyncio.sleep(0.3)  # not reading: the answer waits in the broker
            assert stats.count == 0  # not answered yet: most of it is still queued
            corr, _ = await reader.frame(30)
            assert corr == 3
            for _ in range(100):
                if stats.count:
                    break
                await asyncio.sleep(0.01)
            assert stats.count == 1
            assert stats.time_sum >= 0.25
            assert broker.metrics.requests[OFFSET_COMMIT].count == 1
        finally:
            broker.metrics = None

    run_broker(tmp_path, test)


def test_a_client_that_pipelines_without_reading_makes_the_broker_hold_a_bounded_amount(tmp_path):
    """Thirty OffsetFetch requests sent at once, each answered with ~400 KB, and the client
    reads nothing for a while: the connection stops taking requests once it holds more than
    MAX_QUEUED_BYTES of answers the socket has not taken (it would otherwise hold all thirty,
    ~12 MB). Once the client reads, every answer arrives, whole and in order."""
    from brook.broker.connection import MAX_QUEUED_BYTES

    requests = 30

    async def test(broker, conn, theirs, reader):
        await _setup(conn, theirs, reader)
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(theirs, b"".join(frame(fetch_all("big"), 10 + i)
                                                 for i in range(requests)))
        await asyncio.sleep(1.0)  # not reading
        held = sum(len(piece) for piece in conn._out)
        assert 0 < held <= MAX_QUEUED_BYTES + 500_000, held  # the bound and one answer past it
        assert held == conn._out_bytes
        for i in range(requests):
            corr, body = await reader.frame(30)
            assert corr == 10 + i
            answer = decode(OFFSET_FETCH, 7, body)
            assert sum(len(t.partitions) for t in answer.topics) == PARTITIONS
        assert conn._out_bytes == 0 and not conn._out

    run_broker(tmp_path, test)
