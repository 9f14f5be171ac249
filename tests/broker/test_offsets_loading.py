"""Loading __consumer_offsets in a real broker process, over the wire: a million offset
commits (overwritten, deleted by DeleteGroups and OffsetDelete, expired) reload exactly; a log
compacted by the broker's cleaner reloads to the same answers; offsets committed with a
retention time expire into tombstones that stay gone; an Empty group whose offsets expired is
gone too; a record that cannot be read is skipped, and its partition served.

``OffsetsWire`` (tests/support/offsets_wire.py) speaks the offset and group APIs on a
``WireClient``, committing many partitions per request and pipelining the requests."""

from __future__ import annotations

import datetime
import re
import struct
import subprocess
import sys
import time
import urllib.request

from kio.schema.errors import ErrorCode

from brook.broker.offsets_log import read_batches
from brook.coordinator.group.partitioner import partition_for
from brook.coordinator.group.schemas import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_key,
    decode_value,
    encode_key,
)
from brook.protocol.messages import make
from brook.records import Record as BatchRecord
from brook.records import decode_batch, encode_batch
from brook.records.batch import read_header
from brook.storage.config import LogConfig
from brook.storage.log import Log
from brook.storage.producer_state import AppendOrigin
from tests.support.broker_harness import free_port
from tests.support.kafka_wire import WireClient, request_class
from tests.support.offsets_wire import Offsets, OffsetsWire, payload_module, wait_until

def load_line(broker) -> str:
    """The broker's last "loaded ... records" line (its stderr, appended to across restarts)."""
    lines = [line for line in broker.stderr_path.read_text().splitlines()
             if re.search(r"loaded \d+ record\(s\) from \d+ of \d+ partition", line)]
    assert lines, broker.stderr_tail()
    return lines[-1]


# --- a million offset commits ------------------------------------------------------------------

MILLION_TOPICS = [f"load-topic-{t}" for t in range(4)]
MILLION_PARTITIONS = 50
MILLION_GROUPS = [f"load-group-{g:04d}" for g in range(1000)]
ROUNDS = 5  # 1,000 groups x 4 topics x 50 partitions x 5 rounds = 1,000,000 commit records
EXPIRES, DELETED_EARLY, DELETED, PART_DELETED, TOPIC_DELETED_EARLY, WITH_METADATA = range(6)
SHORT_RETENTION_MS = 1500


def kind(group_index: int) -> int | None:
    """Every 100 groups, one of each kind (the rest commit plainly)."""
    return group_index % 100 if group_index % 100 < 6 else None


def million_round(wire: OffsetsWire, round_: int, expected: Offsets):
    """The OffsetCommit requests of one round (noted in ``expected`` as they are made)."""
    for i, group in enumerate(MILLION_GROUPS):
        expiring = round_ == ROUNDS - 1 and kind(i) == EXPIRES
        epoch = -1 if expiring else round_  # v4 has no leader epoch
        offsets = {
            topic: [(p, round_ * 10_000_000 + i * 1000 + t * 100 + p, epoch,
                     f"r{round_}-{p}" if kind(i) == WITH_METADATA else "")
                    for p in range(MILLION_PARTITIONS)]
            for t, topic in enumerate(MILLION_TOPICS)}
        for topic, partitions in offsets.items():
            for p, o, e, meta in partitions:
                expected[group][(topic, p)] = (o, e, meta)
        yield wire.commit_request(group, offsets, version=4 if expiring else 9,
                                  retention_ms=SHORT_RETENTION_MS if expiring else -1)


def test_a_million_offset_commits_reload_exactly(broker_factory):
    """1,000 groups commit 200 partitions (4 topics) per request, five rounds, each round new
    offsets, leader epochs (and for some groups metadata): a million commit records through the
    wire. Among them, groups deleted (DeleteGroups) and recommitted, deleted for good, offsets
    deleted (OffsetDelete) for good and recommitted, and a last round committed with a
    retention time (OffsetCommit v4) left to expire. After a restart OffsetFetch gives exactly
    the last value of every key and nothing of what was deleted or expired."""
    broker = broker_factory({"offsets.retention.check.interval.ms": 500})
    expected: Offsets = {g: {} for g in MILLION_GROUPS}
    started = time.monotonic()
    with OffsetsWire(broker.bootstrap, timeout=120) as wire:
        wire.create_topics(**{topic: MILLION_PARTITIONS for topic in MILLION_TOPICS})
        for round_ in range(ROUNDS):
            wire.commit_all(million_round(wire, round_, expected))
            if round_ == 1:
                early = [g for i, g in enumerate(MILLION_GROUPS) if kind(i) == DELETED_EARLY]
                assert set(wire.delete_groups(early).values()) == {ErrorCode.none}
                for group in early:
                    expected[group] = {}
                for i, group in enumerate(MILLION_GROUPS):
                    if kind(i) == TOPIC_DELETED_EARLY:
                        wire.delete_offsets(group, MILLION_TOPICS[1], list(range(50)))
                        for p in range(50):
                            del expected[group][(MILLION_TOPICS[1], p)]
        gone = [g for i, g in enumerate(MILLION_GROUPS) if kind(i) == DELETED]
        assert set(wire.delete_groups(gone).values()) == {ErrorCode.none}
        for group in gone:
            expected[group] = {}
        for i, group in enumerate(MILLION_GROUPS):
            if kind(i) == PART_DELETED:
                wire.delete_offsets(group, MILLION_TOPICS[0], list(range(25)))
                for p in range(25):
                    del expected[group][(MILLION_TOPICS[0], p)]
        built = time.monotonic() - started
        expired = [g for i, g in enumerate(MILLION_GROUPS) if kind(i) == EXPIRES]
        deadline = time.monotonic() + 30
        while wire.fetch_groups(expired)[0] != {g: {} for g in expired}:
            assert time.monotonic() < deadline, "offsets committed with a retention never expired"
            time.sleep(0.2)
        for group in expired:
            expected[group] = {}
        before, errors = wire.fetch_groups(MILLION_GROUPS)
        assert not errors
        assert before == expected
        listed = wire.list_groups()
    # Deleted and expired groups are gone; the others are simple groups, Empty.
    assert set(listed) == {g for g in MILLION_GROUPS if expected[g]}
    assert sum(len(v) for v in expected.values()) == 200 * 1000 - 200 * 20 - 25 * 10

    broker.restart()
    started_load = time.monotonic()
    with OffsetsWire(broker.bootstrap, timeout=120) as wire:
        after = wire.wait_loaded(MILLION_GROUPS)
        loaded_in = time.monotonic() - started_load
        assert after == expected
        assert wire.list_groups() == listed
        # Partitions named one by one: the deleted and expired ones answer -1.
        for group in (gone[0], expired[0]):
            rows = wire.fetch_partitions(group, MILLION_TOPICS[0], [0, 1, 49])
            assert [(p, o, e) for p, o, e, _, _ in rows] == [(0, -1, -1), (1, -1, -1), (49, -1, -1)]
        part = next(g for i, g in enumerate(MILLION_GROUPS) if kind(i) == PART_DELETED)
        rows = wire.fetch_partitions(part, MILLION_TOPICS[0], [0, 24, 25, 49])
        assert [o for _, o, _, _, _ in rows] == [-1, -1] + [
            expected[part][(MILLION_TOPICS[0], p)][0] for p in (25, 49)]
    line = load_line(broker)
    records = int(re.search(r"loaded (\d+) record", line).group(1))
    assert records >= 1_000_000
    print(f"\nbuilt in {built:.1f} s; after the restart every group "
          f"answered in {loaded_in:.1f} s; the broker: {line.split(': ', 1)[1]}")


# --- reading __consumer_offsets ------------------------------------------------------------------

def fetch_log(bootstrap: str, partition: int) -> tuple[list[tuple[int, bytes, bytes | None]], int]:
    """Every record of a partition of __consumer_offsets, (offset, key, value), read with Fetch
    requests from offset 0 (what compaction left), and the high watermark: how many records
    were ever written."""
    cls = request_class(1, 4)
    m = payload_module(cls)
    out: list[tuple[int, bytes, bytes | None]] = []
    offset = 0
    with WireClient(bootstrap) as client:
        while True:
            answer = client.request(make(
                cls, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0,
                max_bytes=50 * 1024 * 1024, isolation_level=0, topics=(m.FetchTopic(
                    topic="__consumer_offsets", partitions=(m.FetchPartition(
                        partition=partition, fetch_offset=offset,
                        partition_max_bytes=50 * 1024 * 1024),)),)))
            [data] = answer.responses[0].partitions
            assert data.error_code == ErrorCode.none, data.error_code
            records = data.records or b""
            pos = 0
            while pos + 61 <= len(records) and pos + read_header(records, pos).size <= len(records):
                batch = decode_batch(records, pos)
                pos += read_header(records, pos).size
                out += [(r.offset, r.key, r.value) for r in batch.records if r.offset >= offset]
                offset = batch.last_offset + 1
            if offset >= data.high_watermark or not pos:
                return out, data.high_watermark


def read_offsets_log(broker, partition: int) -> list[tuple[object, object | None]]:
    """(key, value) of every record of a partition of a stopped broker's __consumer_offsets,
    through the storage API."""
    assert not broker.running
    lg = Log(str(broker.log_dir / f"__consumer_offsets-{partition}"), LogConfig(),
             had_clean_shutdown=True)
    try:
        records = []
        for data in read_batches(lg):
            pos = 0
            while pos < len(data):
                for r in decode_batch(data, pos).records:
                    key = decode_key(r.key)
                    records.append((key, decode_value(key, r.value)))
                pos += read_header(data, pos).size
        return records
    finally:
        lg.close()


def last_values(records) -> dict:
    """The last value of every key (None: a tombstone)."""
    return dict(records)


def answers(wire: OffsetsWire, groups: list[str]) -> tuple:
    """What clients can see of the groups: their offsets, ListGroups, DescribeGroups."""
    offsets, errors = wire.fetch_groups(groups)
    assert not errors, errors
    listed = {g: v for g, v in wire.list_groups().items() if g in groups}
    return offsets, listed, wire.describe_groups(groups)


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocol subscription, version 0."""
    body = b"".join(struct.pack(">h", len(t)) + t.encode() for t in topics)
    return struct.pack(">hi", 0, len(topics)) + body + struct.pack(">i", -1)


# --- compaction ------------------------------------------------------------------------------

COMPACTING = {
    "offsets.topic.num.partitions": 1,
    "offsets.topic.segment.bytes": 16 * 1024,  # segments roll, so the cleaner has some to clean
    "log.cleaner.backoff.ms": 100,
    "log.cleaner.min.cleanable.ratio": 0.01,
    "log.cleaner.delete.retention.ms": 1000,
    "offsets.retention.check.interval.ms": 200,
}


def test_a_log_compacted_by_the_broker_reloads_to_the_same_answers(broker_factory):
    broker = broker_factory(COMPACTING)
    groups = [f"compact-{g}" for g in range(8)] + ["members", "left", "expiring", "dropped"]
    with OffsetsWire(broker.bootstrap) as wire:
        wire.create_topics(orders=20, audit=3)
        # A Stable consumer group and one whose member left (Empty, protocol type consumer).
        member, generation = wire.join_and_sync("members", subscription("orders"), b"assigned",
                                                session_timeout_ms=120_000)
        left, left_generation = wire.join_and_sync("left", subscription("orders"), b"gone")
        for round_ in range(20):  # every key overwritten twenty times
            wire.commit_all(
                wire.commit_request(group, {"orders": [(p, round_ * 100 + p, round_, "")
                                                       for p in range(20)],
                                            "audit": [(p, round_, -1, f"r{round_}")
                                                      for p in range(3)]})
                for group in groups[:8] + ["dropped"])
            wire.commit("members", {"orders": [(0, round_, 1, "")]}, generation=generation,
                        member_id=member)
        wire.commit("left", {"orders": [(0, 5, 1, "")]}, generation=left_generation,
                    member_id=left)
        wire.leave("left", left)
        wire.commit("expiring", {"orders": [(0, 1, -1, "")]}, version=4, retention_ms=500)
        wire.delete_offsets("compact-1", "orders", list(range(10)))
        wire.delete_offsets("compact-2", "audit", [0, 1, 2])
        assert wire.delete_groups(["dropped"]) == {"dropped": ErrorCode.none}
        wait_until(lambda: "expiring" not in wire.list_groups(), what="the expiring group")
        time.sleep(0.5)  # a few more expiry checks: nothing else may change
        before = answers(wire, groups)
    assert set(before[1]) == set(groups) - {"expiring", "dropped"}
    assert before[2]["members"][1] == "Stable" and before[2]["left"][1] == "Empty"

    # The cleaner runs by itself (it already did while the commits went in); tombstones go once
    # delete.retention.ms has passed and a later pass (new writes make the log dirty) cleans.
    tombstoned = {OffsetCommitKey("compact-1", "orders", p) for p in range(10)}
    tombstoned |= {OffsetCommitKey("compact-2", "audit", p) for p in range(3)}
    tombstoned |= {OffsetCommitKey("dropped", "orders", p) for p in range(20)}
    tombstoned |= {OffsetCommitKey("expiring", "orders", 0), GroupMetadataKey("expiring"),
                   GroupMetadataKey("dropped")}

    def stored_keys():
        return {decode_key(k) for _, k, _ in fetch_log(broker.bootstrap, 0)[0]}

    assert tombstoned <= stored_keys()
    # A pass stamps the tombstones with their delete horizon, a pass after it drops them: keep
    # the log dirty with commits of another group meanwhile.
    deadline = time.monotonic() + 60
    with OffsetsWire(broker.bootstrap) as wire:
        round_ = 0
        while tombstoned & stored_keys():
            assert time.monotonic() < deadline, "the tombstones stayed past delete.retention.ms"
            wire.commit_all(wire.commit_request("filler", {"orders": [(p, round_, 0, "")
                                                                      for p in range(20)]})
                            for _ in range(20))
            round_ += 1
            time.sleep(0.3)
    compacted, written = fetch_log(broker.bootstrap, 0)
    assert len(compacted) < written // 10
    print(f"\n__consumer_offsets-0: {written} records written, {len(compacted)} left after "
          "compaction")
    with OffsetsWire(broker.bootstrap) as wire:
        assert answers(wire, groups) == before

    broker.restart()
    with OffsetsWire(broker.bootstrap) as wire:
        wire.wait_loaded(groups)
        assert answers(wire, groups) == before


# --- expiry ------------------------------------------------------------------------------------

EXPIRING = {"offsets.topic.num.partitions": 1, "offsets.retention.check.interval.ms": 200}
#: Long enough to see the offsets before they expire on a busy machine.
RETENTION_MS = 4000


def test_a_commit_with_a_retention_time_expires_into_tombstones(broker_factory):
    """OffsetCommit v2-v4 carry retention_time_ms; Kafka keeps such offsets until the commit
    time plus that retention. Expired, they answer -1, their tombstones are in the log, the
    simple groups they made are gone with them, and a restart brings none of it back."""
    broker = broker_factory(EXPIRING)
    short = {version: f"short-v{version}" for version in (2, 3, 4)}
    with OffsetsWire(broker.bootstrap) as wire:
        wire.create_topics(t=2)
        for version, group in short.items():
            wire.commit(group, {"t": [(0, 10, -1, "m"), (1, 11, -1, "")]}, version=version,
                        retention_ms=RETENTION_MS)
        wire.commit("long", {"t": [(0, 20, -1, "")]}, version=2, retention_ms=3_600_000)
        wire.commit("plain", {"t": [(0, 30, 2, "")]})
        for group in short.values():
            assert [r[:2] for r in wire.fetch_partitions(group, "t", [0, 1])] == [(0, 10), (1, 11)]
        wait_until(lambda: wire.fetch_groups(list(short.values()))[0]
                   == {g: {} for g in short.values()}, what="the offsets to expire")
        for group in short.values():
            assert [r[1] for r in wire.fetch_partitions(group, "t", [0, 1])] == [-1, -1]
        assert wire.fetch_partitions("long", "t", [0])[0][1] == 20
        assert wire.fetch_partitions("plain", "t", [0])[0][1:3] == (30, 2)
        wait_until(lambda: set(wire.list_groups()) == {"long", "plain"}, what="the groups to go")
    broker.stop()
    stored = last_values(read_offsets_log(broker, 0))
    for group in short.values():
        assert stored[OffsetCommitKey(group, "t", 0)] is None
        assert stored[OffsetCommitKey(group, "t", 1)] is None
        assert stored[GroupMetadataKey(group)] is None
    assert stored[OffsetCommitKey("long", "t", 0)].expire_timestamp > 0
    broker.start()
    with OffsetsWire(broker.bootstrap) as wire:
        wire.wait_loaded([*short.values(), "long", "plain"])
        for group in short.values():
            assert [r[1] for r in wire.fetch_partitions(group, "t", [0, 1])] == [-1, -1]
        assert wire.fetch_partitions("long", "t", [0])[0][1] == 20
        assert set(wire.list_groups()) == {"long", "plain"}


def test_100000_expired_offsets_of_one_partition_all_expire(broker_factory):
    # 100,000 offsets (100 groups x 1,000 partitions) in one partition of the offsets topic
    # expire in one pass; their tombstones (about 4 MB) are more than one batch may hold under
    # the default message.max.bytes (1 MB, and so the offsets topic's max.message.bytes): they
    # are written in several batches. Before, the one batch was refused and nothing ever
    # expired. The commits take a few seconds; the first check, 10 s after the start, finds
    # them all past their 2 s retention.
    broker = broker_factory({"offsets.topic.num.partitions": 1,
                             "offsets.retention.check.interval.ms": 10_000})
    groups = [f"crowd-{i}" for i in range(100)]
    with OffsetsWire(broker.bootstrap) as wire:
        wire.create_topics(many=1000)
        wire.commit_all(wire.commit_request(group, {"many": [(p, p + 1, -1, "") for p in range(1000)]},
                                            version=2, retention_ms=2000)
                        for group in groups)
        wait_until(lambda: wire.fetch_groups(groups)[0] == {g: {} for g in groups}, 60,
                   what="100,000 offsets to expire")
    assert "appending" not in broker.stderr_tail(200)
    broker.restart()  # their tombstones are in the log: they stay gone
    with OffsetsWire(broker.bootstrap) as wire:
        wire.wait_loaded(groups)
        assert wire.fetch_groups(groups)[0] == {g: {} for g in groups}


def test_an_empty_group_whose_offsets_expired_is_dead_and_its_metadata_tombstoned(
        broker_factory):
    broker = broker_factory(EXPIRING)
    with OffsetsWire(broker.bootstrap) as wire:
        wire.create_topics(t=2)
        member, generation = wire.join_and_sync("consumers", subscription("t"), b"a")
        wire.commit("consumers", {"t": [(0, 5, -1, ""), (1, 6, -1, "")]}, version=4,
                    retention_ms=RETENTION_MS, generation=generation, member_id=member)
        wire.leave("consumers", member)
        assert wire.list_groups()["consumers"] == ("Empty", "consumer")
        wait_until(lambda: "consumers" not in wire.list_groups(), what="the group to die")
        assert wire.fetch_groups(["consumers"])[0] == {"consumers": {}}
        assert wire.describe_groups(["consumers"])["consumers"][1] == "Dead"
    broker.stop()
    stored = read_offsets_log(broker, 0)
    assert stored[-3:] == [(OffsetCommitKey("consumers", "t", 0), None),
                           (OffsetCommitKey("consumers", "t", 1), None),
                           (GroupMetadataKey("consumers"), None)]
    broker.start()
    with OffsetsWire(broker.bootstrap) as wire:
        wire.wait_loaded(["consumers"])
        assert "consumers" not in wire.list_groups()
        assert wire.fetch_groups(["consumers"])[0] == {"consumers": {}}


# --- a record that cannot be read ----------------------------------------------------------------

def test_a_record_that_cannot_be_read_is_skipped_and_its_groups_served_after_restarts(
        broker_factory):
    """One bad record never makes a partition unloadable: at every restart it is skipped and
    logged with its offset, the metric counts it, dump-log shows it, and the partition's groups
    are served (the bad record's own commit is what is lost)."""
    metrics_port = free_port()
    broker = broker_factory({"offsets.topic.num.partitions": 3, "metrics.port": metrics_port})
    groups = {partition_for(g, 3): g for g in (f"group-{i}" for i in range(20))}
    bad, good = groups[0], groups[1]
    with OffsetsWire(broker.bootstrap) as wire:
        wire.create_topics(t=2)
        wire.commit(bad, {"t": [(0, 1, -1, "")]})
        wire.commit(good, {"t": [(0, 2, -1, "")]})
    broker.stop()
    lg = Log(str(broker.log_dir / "__consumer_offsets-0"), LogConfig(), had_clean_shutdown=True)
    try:  # an offset commit whose value stops after its version
        at = lg.log_end_offset
        lg.append(encode_batch([BatchRecord(0, 0, encode_key(OffsetCommitKey(bad, "t", 1)),
                                            b"\x00\x03")]), origin=AppendOrigin.COORDINATOR)
        lg.flush()
    finally:
        lg.close()
    expected = {good: {("t", 0): (2, -1, "")}, bad: {("t", 0): (1, -1, "")}}
    for round_ in range(2):  # the same at every restart
        broker.start()
        with OffsetsWire(broker.bootstrap) as wire:
            wait_until(lambda: wire.fetch_groups([good, bad])[1] == {}, what="loading")
            assert wire.fetch_groups([good, bad])[0] == expected
            wire.commit(bad, {"t": [(1, 5 + round_, -1, "")]})
            expected[bad][("t", 1)] = (5 + round_, -1, "")
            assert wire.fetch_groups([bad])[0] == {bad: expected[bad]}
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        assert 'brook_coordinator_partition_records_skipped{partition="0"} 1.0' in metrics
        broker.stop()
    errors = [line for line in broker.stderr_path.read_text().splitlines() if " ERROR " in line]
    skipped = [line for line in errors if "__consumer_offsets-0: skipped 1 record(s) at offset "
               f"{at} that cannot be read" in line and "bad OffsetCommitValue" in line]
    assert len(skipped) == 2, errors
    segment = next((broker.log_dir / "__consumer_offsets-0").glob("*.log"))
    dumped = subprocess.run([sys.executable, "-m", "brook", "dump-log", str(segment),
                             "--offsets-decoder"], capture_output=True, text=True, check=True)
    [line] = [line for line in dumped.stdout.splitlines() if f"| offset: {at} " in line]
    assert "corrupt (skipped when the coordinator loads): bad OffsetCommitValue" in line
