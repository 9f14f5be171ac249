"""The broker's MarkerWriter (brook.broker.marker_channel) without sockets: partitions grouped by
leader, those of this broker written in process when the partition side gives its entry point,
the others sent over the wire, a partition without a leader answered NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kio.schema.errors import ErrorCode as E

from brook.broker.marker_channel import ChannelMarkerWriter
from brook.coordinator.transaction.markers import MarkerRequest


class Cache:
    def __init__(self, leaders):
        self.leaders = leaders

    def partition(self, topic, partition):
        leader = self.leaders.get((topic, partition))
        return None if leader is None else SimpleNamespace(leader=leader)

    def endpoint(self, broker_id, listener):
        return ("127.0.0.1", 9000 + broker_id)


def _broker(leaders):
    return SimpleNamespace(broker_id=1, cluster=None, config=SimpleNamespace(request_timeout_ms=1000),
                           replicas=SimpleNamespace(cache=Cache(leaders), listener="PLAINTEXT"))


def test_partitions_led_here_are_written_in_process_and_the_others_sent():
    written, sent = [], []

    async def local(request, tps):
        written.append((request.commit, sorted(tps)))
        return {tp: E.none for tp in tps}

    writer = ChannelMarkerWriter(_broker({("a", 0): 1, ("a", 1): 2, ("b", 0): 1, ("c", 0): -1}),
                                 local=local)

    async def send(broker_id, address, request, tps):
        sent.append((broker_id, address, sorted(tps)))
        return {tp: E.not_enough_replicas for tp in tps}

    writer._send = send
    request = MarkerRequest(7, 0, True, 3, frozenset({("a", 0), ("a", 1), ("b", 0), ("c", 0)}))
    answers = asyncio.run(writer.write_markers(request))
    assert written == [(True, [("a", 0), ("b", 0)])]
    assert sent == [(2, ("127.0.0.1", 9002), [("a", 1)])]
    assert answers == {("a", 0): E.none, ("b", 0): E.none, ("a", 1): E.not_enough_replicas,
                       ("c", 0): E.not_leader_or_follower}


def test_a_failing_local_writer_answers_not_leader_for_its_partitions():
    async def local(request, tps):
        raise RuntimeError("log closed")

    writer = ChannelMarkerWriter(_broker({("a", 0): 1}), local=local)
    answers = asyncio.run(writer.write_markers(MarkerRequest(7, 0, False, 0, frozenset({("a", 0)}))))
    assert answers == {("a", 0): E.not_leader_or_follower}


def test_the_request_sent_is_write_txn_markers_v1():
    from kio.serial import entity_reader, entity_writer

    writer = ChannelMarkerWriter(_broker({("a", 0): 2, ("a", 1): 2, ("b", 3): 2}))
    bodies = []

    class Channel:
        async def request(self, body):
            bodies.append(body)
            raise __import__("brook.cluster.channel", fromlist=["x"]).ChannelError("unreachable")

    writer.leaders.channel = lambda broker_id, address: Channel()
    request = MarkerRequest(7, 4, True, 3, frozenset({("a", 0), ("a", 1), ("b", 3)}))
    answers = asyncio.run(writer.write_markers(request))
    assert set(answers.values()) == {E.not_leader_or_follower}  # unreachable: tried again
    [body] = bodies
    assert (type(body).__api_key__, type(body).__version__) == (27, 1)
    import io
    buf = io.BytesIO()
    entity_writer(type(body))(buf, body)
    back, _ = entity_reader(type(body))(buf.getvalue(), 0)
    [marker] = back.markers
    assert (marker.producer_id, marker.producer_epoch, marker.transaction_result,
            marker.coordinator_epoch) == (7, 4, True, 3)
    assert {(t.name, tuple(t.partition_indexes)) for t in marker.topics} == {("a", (0, 1)), ("b", (3,))}
