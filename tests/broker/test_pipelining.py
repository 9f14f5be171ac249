"""Pipelined requests on one connection: the answers to the requests one read brings in go
out together, in order, and no answer waits for a later request whose handler has to wait."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from datetime import timedelta

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from brook.broker import connection
from tests.support.broker_harness import BrokerProcess
from brook.protocol.messages import make
from tests.support.kafka_wire import WireClient, frame
from tests.support.commit_frames import answers, commit
from tests.support.socketpair_broker import run_broker

OFFSET_COMMIT, JOIN_GROUP, API_VERSIONS = 8, 11, 18


class CountingSocket(socket.socket):
    """A socket that counts the calls that send on it."""

    sends = 0

    def send(self, *args):
        self.sends += 1
        return super().send(*args)

    def sendmsg(self, *args):
        self.sends += 1
        return super().sendmsg(*args)


def test_the_answers_to_one_read_of_pipelined_commits_go_out_in_order_in_one_send(
        tmp_path, monkeypatch):
    # One turn for the whole read: a slow machine would otherwise end the turn (and send what
    # is ready) partway through the eight commits.
    monkeypatch.setattr(connection, "TURN_SECONDS", 60.0)

    async def test(broker, conn, ours, theirs):
        broker.create_topic("t", 1)
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(theirs, frame(commit("g", 1), 1))  # the offsets topic
        first = await loop.sock_recv(theirs, 1 << 16)
        assert [c for c, _ in answers(first)] == [1]
        ours.sends = 0
        await loop.sock_sendall(theirs, b"".join(frame(commit("g", 10 + i), 2 + i)
                                                 for i in range(8)))
        data = b""
        while len(answers(data) if data else []) < 8:
            data += await asyncio.wait_for(loop.sock_recv(theirs, 1 << 16), 10)
        got = answers(data)
        assert [c for c, _ in got] == list(range(2, 10))
        assert all(p.error_code == ErrorCode.none
                   for _, a in got for t in a.topics for p in t.partitions)
        assert ours.sends == 1
        assert broker.coordinator.context_for("g").shard.offsets.get("g", "t", 0).offset == 17

    run_broker(tmp_path, {}, test, socket_class=CountingSocket)


def test_an_answer_sent_whole_does_not_take_the_deferred_answer_behind_it_along(tmp_path):
    """An ApiVersions answer (ready at once) and a durable OffsetCommit (its answer deferred to
    the fsync) in one read: the first send takes the whole ApiVersions answer, and the
    commit's place behind it stays queued until its answer comes. Counting the empty place
    as sent once lost that answer, and the connection died of the next send."""
    versions = make(load_request_schema(API_VERSIONS, 3), client_software_name="t",
                    client_software_version="1")

    async def test(broker, conn, ours, theirs):
        broker.create_topic("t", 1)
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(theirs, frame(commit("g", 1), 1))  # the offsets topic
        assert [c for c, _ in answers(await loop.sock_recv(theirs, 1 << 16))] == [1]
        for round_ in range(3):
            await loop.sock_sendall(theirs, frame(versions, 10 + round_)
                                    + frame(commit("g", 2 + round_), 20 + round_))
            data = b""
            while True:
                data += await asyncio.wait_for(loop.sock_recv(theirs, 1 << 16), 10)
                size = struct.unpack_from(">i", data)[0]
                if len(data) > 4 + size and len(answers(data[4 + size:])) == 1:
                    break
            assert struct.unpack_from(">i", data, 4)[0] == 10 + round_
            [(corr, answer)] = answers(data[4 + size:])
            assert corr == 20 + round_
            assert answer.topics[0].partitions[0].error_code == ErrorCode.none
        assert not conn.closed

    run_broker(tmp_path, {"log.flush.before.ack": "true"}, test)


def test_an_answer_does_not_wait_for_a_later_request_whose_handler_waits(tmp_path):
    """A JoinGroup of a new group waits group.initial.rebalance.delay.ms; the ApiVersions
    answer before it on the same connection goes out at once."""
    join_cls = load_request_schema(JOIN_GROUP, 9)
    join_mod = __import__(join_cls.__module__, fromlist=["_"])

    def join(member_id: str):
        return make(join_cls, group_id="slow-join", session_timeout=timedelta(seconds=30),
                    rebalance_timeout=timedelta(seconds=30), member_id=member_id,
                    group_instance_id=None,
                    protocol_type="consumer", reason=None, protocols=(
                        join_mod.JoinGroupRequestProtocol(name="range", metadata=b""),))

    with BrokerProcess(tmp_path / "broker",
                       overrides={"group.initial.rebalance.delay.ms": 3000}) as broker:
        with WireClient(broker.bootstrap, timeout=30) as wire:
            deadline = time.monotonic() + 30
            while True:  # the first JoinGroup asks for a member id (KIP-394)
                first = wire.request(join(""))
                if first.error_code == ErrorCode.member_id_required:
                    break
                assert first.error_code == ErrorCode.coordinator_load_in_progress
                assert time.monotonic() < deadline
                time.sleep(0.1)
            versions = make(load_request_schema(API_VERSIONS, 3), client_software_name="test",
                            client_software_version="1")
            start = time.monotonic()
            wire.send_raw(wire.encode(versions) + wire.encode(join(first.member_id)))
            answer = wire.recv(API_VERSIONS, 3, wire.correlation_id - 1)
            answered = time.monotonic() - start
            assert answer.error_code == ErrorCode.none
            joined = wire.recv(JOIN_GROUP, 9, wire.correlation_id)
            assert joined.error_code == ErrorCode.none
            assert time.monotonic() - start >= 2.5  # the join did wait
            assert answered < 1.5
