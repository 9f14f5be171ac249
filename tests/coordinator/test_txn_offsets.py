"""Transactional offset commits in the group coordinator's shard, sans-I/O, on a fake clock
(brook.coordinator.group.pending): a TxnOffsetCommit's offsets are pending, invisible to
OffsetFetch (UNSTABLE_OFFSET_COMMIT when stable offsets are asked for), until the producer's
marker commits them into the committed offsets or drops them.

The property: whatever the interleaving of plain commits, transactional commits of several
producers, their markers, deletions and expiry, (1) the shard answers what a model of Kafka's
OffsetMetadataManager answers (pending offsets by producer; at COMMIT a pending offset wins only
over a committed one written before it in the log), (2) the log the operations wrote, loaded
into a fresh shard through the loader, gives the same state as handling them live, and (3) that
log compacted by the real cleaner once every transaction has ended loads to the same committed
offsets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as E

from brook.broker.offsets_log import read_batches
from brook.clock import FakeClock
from brook.coordinator.common.loader import replay_batches
from brook.coordinator.common.result import CoordinatorRecord, EndTxnMarker, record_pairs
from brook.coordinator.group.batch_writer import encode_records
from brook.coordinator.group.classic_group import GroupState as S
from brook.coordinator.group.commit_runs import CommitRun
from brook.coordinator.group.offsets import (
    CommitPartition,
    CommitTopic,
    FetchedOffset,
    OffsetCommit,
    OffsetsConfig,
    TxnOffsetCommit,
)
from brook.coordinator.group.schemas import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
)
from brook.coordinator.group.shard import CoordinatorShard
from brook.records.batch import read_header
from brook.records.control import end_txn_marker_batch
from brook.storage.cleaner import clean_log
from brook.storage.config import LogConfig
from brook.storage.log import Log
from brook.storage.producer_state import AppendOrigin
from tests.support.examples import examples

MINUTE = 60_000
CONFIG = OffsetsConfig(offsets_retention_minutes=10, offsets_retention_check_interval_ms=MINUTE)


class Coordinator:
    """A shard and the log its writes make, as the runtime runs them on one broker: each
    operation's records appended as one batch (a transactional one for a TxnOffsetCommit, a
    control batch for a marker), then replayed."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.shard = CoordinatorShard(offsets_config=CONFIG)
        self.log: list[bytes] = []
        self.end = 0
        #: every record written, with its offset and producer id (-1: plain; a marker as is)
        self.written: list[tuple[int, int, object]] = []

    @property
    def now(self) -> int:
        return self.clock.milliseconds()

    def write(self, result):
        records = result.records
        if not records:
            return result.response
        producer = result.producer
        pid = -1 if producer is None else producer.producer_id
        if type(records[0]) is EndTxnMarker:
            m = records[0]
            self.log.append(end_txn_marker_batch(m.producer_id, m.producer_epoch,
                                                 m.coordinator_epoch, m.committed, self.now,
                                                 base_offset=self.end))
            self.written.append((self.end, pid, m))
            self.end += 1
        else:
            self.log.append(encode_records(records, self.now, self.end, producer=producer))
            for pair in record_pairs(records):
                self.written.append((self.end, pid, pair))
                self.end += 1
        self.shard.replay_records(records, self.now, None, pid)
        return result.response

    def commit(self, group, topic, partition, offset, metadata=""):
        return self.write(self.shard.commit_offsets(OffsetCommit(group, (CommitTopic(
            topic, (CommitPartition(partition, offset, -1, metadata),)),)), self.now))

    def txn_commit(self, pid, group, topic, partition, offset, **member):
        return self.write(self.shard.commit_transactional_offsets(TxnOffsetCommit(
            f"tid-{pid}", group, pid, 0,
            (CommitTopic(topic, (CommitPartition(partition, offset),)),), **member), self.now))

    def marker(self, pid, committed):
        return self.write(self.shard.complete_transaction(EndTxnMarker(pid, 0, 0, committed),
                                                          self.now))

    def fetch(self, group, topic, partition, stable=False):
        [f] = self.shard.fetch_offsets(group, [(topic, [partition])], stable)
        return f.offset if f.error == E.none else f.error

    def loaded(self) -> CoordinatorShard:
        fresh = CoordinatorShard(offsets_config=CONFIG)
        replay_batches(fresh.batch_replayer(self.now), self.log)
        return fresh


# --- by hand --------------------------------------------------------------------------------------


def test_pending_offsets_are_invisible_until_committed():
    c = Coordinator()
    c.commit("g", "t", 0, 5)
    assert c.txn_commit(1, "g", "t", 0, 9) == [("t", 0, E.none)]
    assert c.txn_commit(1, "g", "t", 1, 3) == [("t", 1, E.none)]
    assert c.fetch("g", "t", 0) == 5 and c.fetch("g", "t", 1) == -1
    assert c.fetch("g", "t", 0, stable=True) == E.unstable_offset_commit
    assert c.fetch("g", "t", 1, stable=True) == E.unstable_offset_commit
    assert c.fetch("g", "t", 2, stable=True) == -1
    assert c.shard.fetch_offsets("g", None) == [FetchedOffset("t", 0, 5, -1, "")]
    assert c.shard.fetch_offsets("g", None, True) == [
        FetchedOffset("t", 0, -1, -1, "", E.unstable_offset_commit)]
    c.marker(1, committed=True)
    assert (c.fetch("g", "t", 0, True), c.fetch("g", "t", 1, True)) == (9, 3)
    assert c.shard.offsets.get("g", "t", 0) == OffsetCommitValue(9, -1, "", c.now)


def test_an_abort_drops_the_pending_offsets():
    c = Coordinator()
    c.commit("g", "t", 0, 5)
    c.txn_commit(1, "g", "t", 0, 9)
    c.marker(1, committed=False)
    assert c.fetch("g", "t", 0, stable=True) == 5
    c.marker(1, committed=True)  # a marker with nothing pending (a retry) changes nothing
    assert c.fetch("g", "t", 0, stable=True) == 5
    assert not c.shard.offsets.pending


def test_the_later_record_in_the_log_wins_as_in_kafka():
    """A pending offset outdated by a later plain commit, or by another transaction's later
    offset committed first, is not committed by its marker; a later one is."""
    c = Coordinator()
    c.txn_commit(1, "g", "t", 0, 10)
    c.commit("g", "t", 0, 20)  # after the transaction's record: it stays
    c.marker(1, True)
    assert c.fetch("g", "t", 0) == 20
    c.commit("g", "t", 1, 20)
    c.txn_commit(2, "g", "t", 1, 30)  # after the plain commit: it wins
    c.marker(2, True)
    assert c.fetch("g", "t", 1) == 30
    c.txn_commit(3, "g", "t", 2, 1)
    c.txn_commit(4, "g", "t", 2, 2)
    c.marker(4, True)
    c.marker(3, True)  # older than 4's, committed before it: outdated
    assert c.fetch("g", "t", 2) == 2
    c.txn_commit(5, "g", "t", 3, 1)
    c.txn_commit(6, "g", "t", 3, 2)
    c.marker(5, True)
    c.marker(6, True)
    assert c.fetch("g", "t", 3) == 2
    assert c.loaded().offsets.fetch("g") == c.shard.offsets.fetch("g")


def test_deleting_an_offset_deletes_its_pending_ones():
    c = Coordinator()
    c.txn_commit(1, "g", "t", 0, 9)
    c.txn_commit(1, "g", "t", 1, 8)
    error, errors = c.write(c.shard.delete_offsets("g", [("t", [0])], c.now))
    assert (error, errors) == (E.none, [("t", 0, E.none)])
    assert c.fetch("g", "t", 0, stable=True) == -1  # nothing pending there now
    c.marker(1, True)
    assert (c.fetch("g", "t", 0), c.fetch("g", "t", 1)) == (-1, 8)


def test_deleting_a_group_or_a_topic_deletes_its_pending_offsets():
    c = Coordinator()
    c.commit("g", "t", 0, 1)
    c.txn_commit(1, "g", "t", 0, 2)
    c.txn_commit(1, "g", "t", 1, 3)
    c.txn_commit(1, "h", "u", 0, 4)
    assert c.write(c.shard.delete_group("g", c.now)) == E.none
    tombstones = [r.key for r in c.shard.delete_group("g", c.now).records]
    assert tombstones == []  # nothing left of g
    assert c.write(c.shard.delete_topics(["u"], c.now)) == 1
    c.marker(1, True)
    assert c.shard.offsets.fetch("g") == [] and c.shard.offsets.fetch("h") == []
    assert "g" not in c.shard.groups


def test_a_pending_offset_does_not_expire_and_its_group_is_kept():
    """Kafka's rules: an offset with a pending transactional offset is not expired, and a group
    whose transaction is open is not removed, until the transaction ends."""
    c = Coordinator()
    c.commit("g", "t", 0, 1)
    c.commit("g", "t", 1, 1)
    c.txn_commit(1, "g", "t", 0, 2)
    c.txn_commit(2, "pending-only", "t", 0, 7)  # a group that has only a pending offset
    c.write(c.shard.poll(c.now)[1])  # schedules the first expiry check
    c.clock.advance(20 * MINUTE)
    for result in c.shard.poll(c.now):
        c.write(result)
    assert c.fetch("g", "t", 0) == 1 and c.fetch("g", "t", 1) == -1
    assert {"g", "pending-only"} <= set(c.shard.groups)
    c.marker(1, True)
    c.marker(2, False)
    c.clock.advance(20 * MINUTE)
    for result in c.shard.poll(c.now):
        c.write(result)
    assert c.fetch("g", "t", 0) == -1
    assert "g" not in c.shard.groups and "pending-only" not in c.shard.groups


def test_a_marker_commits_for_good_even_when_writes_before_it_are_rolled_back():
    """In a cluster the runtime rolls back a write that could not be replicated, with every
    later one. A marker's offsets are not rolled back (its transaction was decided; a marker
    that failed is written again and finds nothing pending): the offsets it committed stay, and
    the values the rollback writes back leave them alone."""
    shard = CoordinatorShard()
    records = [CoordinatorRecord(OffsetCommitKey("g", "t", 0), OffsetCommitValue(5))]
    shard.replay_records([CommitRun("g", "t", [(0, 1, -1, 0), (1, 1, -1, 0)])], 0)
    shard.replay_records([CommitRun("g", "t", [(1, 2, -1, 0)])], 0, end=10)  # waiting
    shard.replay_records(records, 0, end=11, producer_id=7)
    shard.replay_records([EndTxnMarker(7, 0, 0, True)], 0, end=12)
    restore = shard.roll_back(10)
    assert [r.key.partition for r in restore] == [1]
    shard.replay_records(restore, 0)
    assert [(f.partition, f.offset) for f in shard.fetch_offsets("g", None)] == [(0, 5), (1, 1)]


def test_transactional_commits_are_fenced_by_the_group_as_kafka_fences_them():
    """KIP-447 (Kafka's ClassicGroup.validateOffsetCommit for a transactional commit): the
    generation, member id and instance id fence a zombie as for OffsetCommit, but a commit
    without them (a producer older than KIP-447) is taken whatever the group's state, and a
    rebalance does not hold it back."""
    c = Coordinator()
    members = tuple(MemberMetadata(m, instance, "client", "/h", 30_000, 10_000, b"", b"")
                    for m, instance in (("m1", "static-1"), ("m2", None)))
    c.shard.replay(GroupMetadataKey("g"),
                   GroupMetadataValue("consumer", 3, "range", "m1", c.now, members), c.now)

    def txn(**member):
        [(_, _, error)] = c.txn_commit(1, "g", "t", 0, 1, **member)
        return error

    assert txn(generation=3, member_id="m1", group_instance_id="static-1") == E.none
    assert txn(generation=2, member_id="m1", group_instance_id="static-1") == E.illegal_generation
    assert txn(generation=3, member_id="zombie") == E.unknown_member_id
    assert txn(generation=3, member_id="m2", group_instance_id="static-1") == E.fenced_instance_id
    assert txn() == E.none
    assert c.commit("g", "t", 0, 1) == [("t", 0, E.unknown_member_id)]  # the plain one's rule
    group = c.shard.groups["g"]
    group.transition_to(S.PREPARING_REBALANCE, c.now)
    group.transition_to(S.COMPLETING_REBALANCE, c.now)
    assert txn(generation=3, member_id="m2") == E.none
    [(_, _, plain)] = c.write(c.shard.commit_offsets(OffsetCommit(
        "g", (CommitTopic("t", (CommitPartition(0, 1),)),), 3, "m2"), c.now))
    assert plain == E.rebalance_in_progress
    [(_, _, error)] = c.txn_commit(1, "nobody", "t", 0, 1, generation=3, member_id="m")
    assert error == E.illegal_generation  # (OffsetCommit v9: GROUP_ID_NOT_FOUND)
    group.transition_to(S.DEAD, c.now)
    assert txn() == E.coordinator_not_available


def test_metadata_too_large_and_unknown_partitions():
    c = Coordinator()
    assert c.txn_commit(1, "g", "t", 0, 1) == [("t", 0, E.none)]
    result = c.shard.commit_transactional_offsets(TxnOffsetCommit(
        "tid", "g", 1, 0, (CommitTopic("t", (CommitPartition(0, 1, -1, "x" * 4097),
                                             CommitPartition(1, 1, -1, "ok"),
                                             CommitPartition(9, 1))),)),
        c.now, lambda topic: 2)
    assert result.response == [("t", 9, E.unknown_topic_or_partition),
                               ("t", 0, E.offset_metadata_too_large), ("t", 1, E.none)]
    assert [r.key.partition for r in result.records] == [1]
    assert result.producer[:2] == (1, 0)


# --- the property ---------------------------------------------------------------------------------

GROUPS = ("g1", "g2")
TOPICS = ("t", "u")
PARTITIONS = (0, 1)
PRODUCERS = (100, 200, 300)

keys = st.tuples(st.sampled_from(GROUPS), st.sampled_from(TOPICS), st.sampled_from(PARTITIONS))
offsets = st.integers(0, 1000)
producers = st.sampled_from(PRODUCERS)
OPERATIONS = {
    "commit": st.tuples(keys, offsets),
    "txn": st.tuples(producers, keys, offsets),
    "marker": st.tuples(producers, st.booleans()),
    "delete": st.tuples(keys),
    "delete_group": st.tuples(st.sampled_from(GROUPS)),
    "delete_topic": st.tuples(st.sampled_from(TOPICS)),
    "expire": st.tuples(st.integers(0, 12 * MINUTE)),
}
#: mostly commits, transactional commits and markers
KINDS = ["commit"] * 4 + ["txn"] * 6 + ["marker"] * 4 + [
    "delete", "delete_group", "delete_topic", "expire"]
operation = st.sampled_from(KINDS).flatmap(
    lambda kind: OPERATIONS[kind].map(lambda args: (kind, *args)))
operations = st.lists(operation, min_size=10, max_size=60)


class Model:
    """Kafka's OffsetMetadataManager, with record offsets: committed (value, record offset) by
    key, pending ones by producer; at COMMIT a pending offset replaces the committed one unless
    that one has a larger record offset."""

    def __init__(self) -> None:
        self.committed: dict = {}
        self.pending: dict[int, dict] = {}

    def apply(self, offset: int, pid: int, record) -> None:
        if type(record) is EndTxnMarker:
            ended = self.pending.pop(record.producer_id, {})
            if record.committed:
                for key, (value, at) in ended.items():
                    if key not in self.committed or at > self.committed[key][1]:
                        self.committed[key] = (value, at)
            return
        key, value = record
        if type(key) is not OffsetCommitKey:
            return
        k = (key.group, key.topic, key.partition)
        if value is None:
            self.committed.pop(k, None)
            for offsets in self.pending.values():
                offsets.pop(k, None)
        elif pid >= 0:
            self.pending.setdefault(pid, {})[k] = (value, offset)
        else:
            self.committed[k] = (value, offset)

    def pending_keys(self) -> set:
        return {k for offsets in self.pending.values() for k in offsets}


def run(c: Coordinator, op) -> None:
    kind = op[0]
    if kind == "commit":
        c.commit(*op[1], op[2])
    elif kind == "txn":
        c.txn_commit(op[1], *op[2], op[3])
    elif kind == "marker":
        c.marker(op[1], op[2])
    elif kind == "delete":
        group, topic, partition = op[1]
        c.write(c.shard.delete_offsets(group, [(topic, [partition])], c.now))
    elif kind == "delete_group":
        c.write(c.shard.delete_group(op[1], c.now))
    elif kind == "delete_topic":
        c.write(c.shard.delete_topics([op[1]], c.now))
    else:
        c.clock.advance(op[1])
        for result in c.shard.poll(c.now):
            c.write(result)


def state(shard: CoordinatorShard) -> tuple:
    """What a load must give back: the committed offsets, the pending ones by producer (with
    whether they are outdated), the groups."""
    offsets = shard.offsets
    committed = {(g, t, p): v for g in offsets.cache.groups()
                 for t, p, v in offsets.group_offsets(g)}
    return committed, offsets.pending.state(), {g: str(s.state) for g, s in shard.groups.items()}


@settings(max_examples=examples(200))
@given(operations)
def test_live_handling_follows_kafka_and_a_load_gives_the_same_state(ops):
    c = Coordinator()
    model = Model()
    seen = 0
    for op in ops:
        pending_before = model.pending_keys()
        open_groups = {k[0] for k in pending_before}
        run(c, op)
        for offset, pid, record in c.written[seen:]:
            if op[0] == "expire" and type(record) is tuple:  # expiry spares what is pending
                key, value = record
                assert value is None
                if type(key) is OffsetCommitKey:
                    assert (key.group, key.topic, key.partition) not in pending_before
                else:
                    assert type(key) is GroupMetadataKey and key.group not in open_groups
            model.apply(offset, pid, record)
        seen = len(c.written)
        committed = {k: v for k, (v, _) in model.committed.items()}
        assert state(c.shard)[0] == committed
        pending = model.pending_keys()
        for group in GROUPS:
            asked = [(t, PARTITIONS) for t in TOPICS]
            for f in c.shard.fetch_offsets(group, asked, True):
                k = (group, f.topic, f.partition)
                if k in pending:
                    assert (f.offset, f.error) == (-1, E.unstable_offset_commit)
                else:
                    assert f.error == E.none
                    assert f.offset == (committed[k].offset if k in committed else -1)
            for stable in (False, True):  # every offset of the group: those asked for by name
                named = c.shard.fetch_offsets(group, asked, stable)
                assert set(c.shard.fetch_offsets(group, None, stable)) == {
                    f for f in named
                    if (group, f.topic, f.partition) in committed}
        assert {pid: set(offsets) for pid, (_, offsets) in state(c.shard)[1].items()} == {
            pid: set(offsets) for pid, offsets in model.pending.items()}
    assert state(c.loaded()) == state(c.shard)


# --- compaction -----------------------------------------------------------------------------------

COMPACTED = LogConfig(segment_bytes=2048, index_interval_bytes=100, cleanup_policy="compact",
                      delete_retention_ms=1000, min_cleanable_dirty_ratio=0.0)


def _record_count(lg) -> int:
    total = 0
    for data in read_batches(lg):
        pos = 0
        while pos < len(data):
            total += read_header(data, pos).record_count
            pos += read_header(data, pos).size
    return total


@settings(max_examples=examples(60))
@given(operations)
def test_a_compacted_log_loads_to_the_same_offsets(tmp_path_factory, ops):
    """The batches written through a real log (the partition's producer state checks the
    transactional batches and markers as a coordinator's appends) and compacted by the real
    cleaner once every transaction ended: the committed offsets and groups load as before. This
    is why a pending offset loses to a later plain commit at COMMIT, as in Kafka: compaction
    keeps only the later record."""
    c = Coordinator()
    for op in ops:
        run(c, op)
    for pid in PRODUCERS:
        c.marker(pid, False)
    lg = Log(str(tmp_path_factory.mktemp("offsets") / "__consumer_offsets-0"), COMPACTED)
    try:
        for batch in c.log:
            lg.append(batch, origin=AppendOrigin.COORDINATOR)
        lg.roll()
        whole = state(c.loaded())
        assert whole[0] == state(c.shard)[0]

        def load() -> tuple:
            fresh = CoordinatorShard(offsets_config=CONFIG)
            replay_batches(fresh.batch_replayer(c.now), list(read_batches(lg)))
            return state(fresh)[0], state(fresh)[1]

        before = _record_count(lg)
        checkpoint = clean_log(lg, None, c.now).new_first_dirty_offset
        assert _record_count(lg) <= before
        assert load() == (whole[0], {})
        lg.roll()
        clean_log(lg, checkpoint, c.now + 2000)
        assert load() == (whole[0], {})
    finally:
        lg.close()


# --- through the runtime --------------------------------------------------------------------------


def test_through_the_runtime_a_transactional_batch_then_a_marker_and_a_reload():
    """The batches the runtime appends: the TxnOffsetCommit's records as one transactional batch
    of the producer (its id and epoch, no sequence), the marker as its control batch on the
    partition it is submitted to; a runtime loading that log serves the same offsets, and a
    marker that comes after the reload commits what was pending."""
    import asyncio

    from brook.coordinator.common.runtime import CoordinatorRuntime
    from brook.coordinator.group.partitioner import OFFSETS_TOPIC, partition_for
    from brook.records import decode_batch
    from brook.records.control import read_marker
    from tests.coordinator.test_runtime import MemoryLog

    def txn_op(pid, offset):
        request = TxnOffsetCommit("tid", "g", pid, 3, (CommitTopic("t", (
            CommitPartition(0, offset, 2, "meta"),)),))
        return lambda shard, now: shard.commit_transactional_offsets(request, now)

    def marker_op(pid, committed):
        return lambda shard, now: shard.complete_transaction(EndTxnMarker(pid, 3, 5, committed),
                                                             now)

    async def fetched(rt, stable=True):
        got = await rt.read("g", lambda shard, now: shard.fetch_offsets("g", [("t", [0])], stable))
        return [(f.offset, f.error) for f in got]

    async def started(log):
        rt = CoordinatorRuntime(1, log, FakeClock(), CoordinatorShard, topic=OFFSETS_TOPIC,
                                partitioner=partition_for)
        rt.start()
        await rt.wait_loaded()
        return rt

    async def main():
        log = MemoryLog()
        rt = await started(log)
        try:
            assert await rt.run("g", txn_op(7, 40)) == [("t", 0, E.none)]
            [batch] = log.partitions[0]
            header = read_header(batch)
            assert (header.is_transactional, header.is_control, header.producer_id,
                    header.producer_epoch, header.base_sequence) == (True, False, 7, 3, -1)
            [record] = decode_batch(batch).records
            assert record.key == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x00"  # OffsetCommitKey
            assert await fetched(rt) == [(-1, E.unstable_offset_commit)]
            assert await rt.run("g", txn_op(8, 50)) == [("t", 0, E.none)]
        finally:
            await rt.stop()
        rt = await started(log)  # reloaded: both pending
        try:
            assert await fetched(rt) == [(-1, E.unstable_offset_commit)]
            assert await rt.answer(rt.submit_at(0, marker_op(8, False))) == E.none
            assert await fetched(rt) == [(-1, E.unstable_offset_commit)]  # 7's still pending
            assert await rt.answer(rt.submit_at(0, marker_op(7, True))) == E.none
            assert await fetched(rt) == [(40, E.none)]
            marker = log.partitions[0][-1]
            assert read_header(marker).is_control and read_header(marker).producer_id == 7
            assert read_marker(marker) == (1, 5)  # COMMIT, coordinator epoch 5
        finally:
            await rt.stop()
        rt = await started(log)
        try:
            assert await fetched(rt) == [(40, E.none)]
        finally:
            await rt.stop()

    asyncio.run(main())
