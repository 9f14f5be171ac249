"""``OffsetsWire``: the offset and group APIs spoken on a ``WireClient`` (kio entities, a real
socket), committing many partitions per request and pipelining the requests; and
``wait_until``, which polls a condition."""

from __future__ import annotations

import datetime
import queue
import threading
import time
from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from brook.protocol.messages import make
from tests.support.kafka_wire import WireClient, request_class
from tests.support.wire_requests import create_topic


OFFSET_COMMIT, OFFSET_FETCH, DELETE_GROUPS, OFFSET_DELETE = 8, 9, 42, 47
JOIN_GROUP, SYNC_GROUP, LEAVE_GROUP, DESCRIBE_GROUPS, LIST_GROUPS = 11, 14, 13, 15, 16

#: group -> {(topic, partition): (offset, leader epoch, metadata)}
Offsets = dict[str, dict[tuple[str, int], tuple[int, int, str]]]


def payload_module(cls):
    """The kio module of an entity class (its nested entities live there)."""
    return __import__(cls.__module__, fromlist=["x"])


class OffsetsWire:
    def __init__(self, bootstrap: str, timeout: float = 60.0) -> None:
        self.client = WireClient(bootstrap, timeout=timeout)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> OffsetsWire:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def create_topics(self, **partitions: int) -> None:
        """Topics for the offsets to be committed to (the broker refuses commits for
        partitions it does not have, as Kafka does)."""

        for topic, count in partitions.items():
            assert create_topic(self.client, topic, count).error_code == ErrorCode.none

    # --- OffsetCommit ------------------------------------------------------------------------

    def commit_request(self, group: str, offsets: dict[str, list[tuple[int, int, int, str]]],
                       version: int = 9, retention_ms: int = -1, generation: int = -1,
                       member_id: str = ""):
        """An OffsetCommit of ``{topic: [(partition, offset, leader epoch, metadata)]}``."""
        cls = request_class(OFFSET_COMMIT, version)
        m = payload_module(cls)
        topics = tuple(
            m.OffsetCommitRequestTopic(name=topic, partitions=tuple(
                make(m.OffsetCommitRequestPartition, partition_index=p, committed_offset=o,
                     committed_leader_epoch=e, committed_metadata=meta)
                for p, o, e, meta in partitions))
            for topic, partitions in offsets.items())
        return make(cls, group_id=group, generation_id_or_member_epoch=generation,
                    member_id=member_id, group_instance_id=None, topics=topics,
                    retention_time=datetime.timedelta(milliseconds=retention_ms))

    def commit(self, *args, **kwargs) -> None:
        self.commit_all([self.commit_request(*args, **kwargs)])

    def commit_all(self, requests: Iterable) -> int:
        """Send the requests back to back on the one connection: a thread encodes and writes
        them (consuming ``requests`` as it goes) while this one reads the answers, in order;
        every partition must be accepted. Returns how many requests there were."""
        client = self.client
        versions: queue.Queue = queue.Queue()
        errors: list[BaseException] = []

        def send() -> None:
            try:
                for request in requests:
                    frame = client.encode(request)
                    versions.put(type(request).__version__)
                    client.send_raw(frame)
            except BaseException as exc:  # noqa: BLE001 - reported by the reader below
                errors.append(exc)
            finally:
                versions.put(None)

        writer = threading.Thread(target=send, daemon=True)
        writer.start()
        count = 0
        try:
            while (version := versions.get()) is not None:
                answer = client.recv(OFFSET_COMMIT, version)
                bad = [(t.name, p.partition_index, p.error_code) for t in answer.topics
                       for p in t.partitions if p.error_code != ErrorCode.none]
                assert not bad, bad[:5]
                count += 1
        finally:
            writer.join()
        assert not errors, errors
        return count

    # --- OffsetFetch -------------------------------------------------------------------------

    def fetch_groups(self, groups: list[str], per_request: int = 50) -> tuple[Offsets, dict]:
        """Every committed offset of each group (OffsetFetch v8, all partitions), and the
        groups answered with an error."""
        cls = request_class(OFFSET_FETCH, 8)
        m = payload_module(cls)
        out: Offsets = {}
        errors: dict[str, ErrorCode] = {}
        for i in range(0, len(groups), per_request):
            answer = self.client.request(make(cls, require_stable=False, groups=tuple(
                m.OffsetFetchRequestGroup(group_id=g, topics=None)
                for g in groups[i:i + per_request])))
            for g in answer.groups:
                if g.error_code != ErrorCode.none:
                    errors[g.group_id] = g.error_code
                    continue
                out[g.group_id] = {
                    (t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch,
                                                  p.metadata)
                    for t in g.topics for p in t.partitions}
        return out, errors

    def fetch_partitions(self, group: str, topic: str, partitions: list[int]):
        """[(partition, offset, leader epoch, metadata, error)] of the named partitions."""
        cls = request_class(OFFSET_FETCH, 8)
        m = payload_module(cls)
        answer = self.client.request(make(cls, require_stable=False, groups=(
            m.OffsetFetchRequestGroup(group_id=group, topics=(
                m.OffsetFetchRequestTopics(name=topic, partition_indexes=tuple(partitions)),)),)))
        [g] = answer.groups
        assert g.error_code == ErrorCode.none, g.error_code
        return [(p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata,
                 p.error_code) for t in g.topics for p in t.partitions]

    def wait_loaded(self, groups: list[str], timeout: float = 60.0) -> Offsets:
        """OffsetFetch until no group answers COORDINATOR_LOAD_IN_PROGRESS; the offsets then."""
        deadline = time.monotonic() + timeout
        while True:
            offsets, errors = self.fetch_groups(groups)
            if not errors:
                return offsets
            assert set(errors.values()) == {ErrorCode.coordinator_load_in_progress}, errors
            assert time.monotonic() < deadline, f"still loading: {len(errors)} group(s)"
            time.sleep(0.05)

    # --- deleting ----------------------------------------------------------------------------

    def delete_groups(self, groups: list[str]) -> dict[str, ErrorCode]:
        answer = self.client.request(make(request_class(DELETE_GROUPS, 2),
                                          groups_names=tuple(groups)))
        return {r.group_id: r.error_code for r in answer.results}

    def delete_offsets(self, group: str, topic: str, partitions: list[int]) -> None:
        cls = request_class(OFFSET_DELETE, 0)
        m = payload_module(cls)
        answer = self.client.request(make(cls, group_id=group, topics=(
            m.OffsetDeleteRequestTopic(name=topic, partitions=tuple(
                m.OffsetDeleteRequestPartition(partition_index=p) for p in partitions)),)))
        assert answer.error_code == ErrorCode.none, answer.error_code
        assert {p.error_code for t in answer.topics for p in t.partitions} == {ErrorCode.none}

    # --- groups ------------------------------------------------------------------------------

    def list_groups(self) -> dict[str, tuple[str, str]]:
        """group -> (state, protocol type)."""
        answer = self.client.request(make(request_class(LIST_GROUPS, 4), states_filter=()))
        assert answer.error_code == ErrorCode.none
        return {g.group_id: (g.group_state, g.protocol_type) for g in answer.groups}

    def describe_groups(self, groups: list[str]) -> dict:
        """group -> (error, state, protocol type, protocol, members (id, assignment))."""
        answer = self.client.request(make(request_class(DESCRIBE_GROUPS, 5), groups=tuple(groups),
                                          include_authorized_operations=False))
        return {g.group_id: (g.error_code, g.group_state, g.protocol_type, g.protocol_data,
                             tuple((m.member_id, m.member_assignment) for m in g.members))
                for g in answer.groups}

    def join_and_sync(self, group: str, subscription: bytes, assignment: bytes,
                      session_timeout_ms: int = 30_000) -> tuple[str, int]:
        """One member joins (KIP-394: twice) and syncs as leader; (member id, generation)."""
        join_cls = request_class(JOIN_GROUP, 9)
        jm = payload_module(join_cls)

        def join(member_id: str):
            return self.client.request(make(
                join_cls, group_id=group, session_timeout=datetime.timedelta(
                    milliseconds=session_timeout_ms),
                rebalance_timeout=datetime.timedelta(milliseconds=session_timeout_ms),
                member_id=member_id, group_instance_id=None, protocol_type="consumer",
                protocols=(jm.JoinGroupRequestProtocol(name="range", metadata=subscription),),
                reason=None))

        for _ in range(5):
            first = join("")
            assert first.error_code == ErrorCode.member_id_required, first.error_code
            joined = join(first.member_id)
            # As in Kafka, an expiry check between the two joins may remove the Empty group the
            # first made (it has no offsets); clients then join again from the start.
            if joined.error_code != ErrorCode.unknown_member_id:
                break
        assert joined.error_code == ErrorCode.none, joined.error_code
        sync_cls = request_class(SYNC_GROUP, 5)
        sm = payload_module(sync_cls)
        synced = self.client.request(make(
            sync_cls, group_id=group, generation_id=joined.generation_id,
            member_id=joined.member_id, group_instance_id=None, protocol_type="consumer",
            protocol_name="range", assignments=(sm.SyncGroupRequestAssignment(
                member_id=joined.member_id, assignment=assignment),)))
        assert synced.error_code == ErrorCode.none, synced.error_code
        return joined.member_id, joined.generation_id

    def leave(self, group: str, member_id: str) -> None:
        cls = request_class(LEAVE_GROUP, 4)
        m = payload_module(cls)
        answer = self.client.request(make(cls, group_id=group, members=(
            m.MemberIdentity(member_id=member_id, group_instance_id=None),)))
        assert answer.error_code == ErrorCode.none, answer.error_code


def wait_until(predicate, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.1)
