"""`brook dump-log` on segments written by brook's own Log: the known records come back, and
damage (a CRC, a torn tail, index entries the log disagrees with) is reported with exit code 1.
The offsets decoder reads __consumer_offsets records written with
brook.coordinator.group.schemas."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.consumer_protocol_assignment.v0 import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v0.data import TopicPartition as AssignedPartitions
from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription
from kio.serial import entity_writer
from typer.testing import CliRunner

from brook.cli import app
from brook.cli.dump_log import PROGRESS_MIN_BYTES, show_progress
from brook.cli.output import Format
from brook.clock import FakeClock
from brook.coordinator.group.schemas import (GroupMetadataKey, GroupMetadataValue, MemberMetadata,
                                       OffsetCommitKey, OffsetCommitValue, encode_key,
                                       encode_value)
from brook.records import Codec, Record, encode_batch, read_header
from brook.storage.config import LogConfig
from brook.storage.log import Log
from tests.support.examples import examples

runner = CliRunner()
T0 = 1_700_000_000_000
CONFIG = LogConfig(index_interval_bytes=1)  # an index entry for every batch after the first


def known_log(tmp_path) -> tuple[str, list[tuple[int, str, str]]]:
    """A closed segment of 5 batches of 3 records (one batch gzip'ed); its (offset, key, value)."""
    log = Log(str(tmp_path / "orders-0"), CONFIG, clock=FakeClock(T0))
    expected = []
    for b in range(5):
        records = []
        for i in range(3):
            n = b * 3 + i
            records.append(Record(i, T0 + n * 10, f"key-{n}".encode(), f"value-{n}".encode(),
                                  (("source", b"test"),)))
            expected.append((n, f"key-{n}", f"value-{n}"))
        log.append(encode_batch(records, codec=Codec.GZIP if b == 3 else Codec.NONE))
    log.close()
    return str(tmp_path / "orders-0" / "00000000000000000000.log"), expected


def dump(*args):
    return runner.invoke(app, ["dump-log", *map(str, args)])


def test_dump_shows_the_known_records_and_consistent_indexes(tmp_path):
    path, expected = known_log(tmp_path)
    result = dump(path)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"Dumping {path}", "Log starting offset: 0"]
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert len(batches) == 5
    assert batches[0].startswith("baseOffset: 0 lastOffset: 2 count: 3 ")
    assert all("isvalid: true" in b and "magic: 2" in b for b in batches)
    assert "compresscodec: gzip" in batches[3]
    records = [line for line in lines if line.startswith("| offset:")]
    assert len(records) == 15
    for line, (offset, key, value) in zip(records, expected):
        assert line == (f"| offset: {offset} CreateTime: {T0 + offset * 10} keySize: {len(key)} "
                        f"valueSize: {len(value)} headerKeys: [source] key: {key} payload: {value}")
    assert "Offset index 00000000000000000000.index: 4 entries, consistent with the log" in lines
    assert "Time index 00000000000000000000.timeindex: 4 entries, consistent with the log" in lines
    assert lines[-1] == "Summary: 5 batches, 15 records, offsets 0-14; no problems"


def test_json_lines(tmp_path):
    path, expected = known_log(tmp_path)
    result = dump(path, "--output", "json")
    assert result.exit_code == 0, result.output
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert [d["type"] for d in docs] == ["file"] + ["batch"] * 5 + [
        "offset_index", "time_index", "summary"]
    records = [r for d in docs if d["type"] == "batch" for r in d["records"]]
    assert [(r["offset"], r["key"], r["value"]) for r in records] == expected
    assert records[0]["headers"] == {"source": "test"}
    assert docs[-1] == {"type": "summary", "path": path, "batches": 5, "records": 15,
                        "first_offset": 0, "last_offset": 14, "problems": 0}


def test_batches_only(tmp_path):
    path, _ = known_log(tmp_path)
    result = dump(path, "--no-records")
    assert result.exit_code == 0
    assert not [line for line in result.stdout.splitlines() if line.startswith("|")]


def test_a_bad_crc_is_reported_and_fails(tmp_path):
    path, _ = known_log(tmp_path)
    data = bytearray(open(path, "rb").read())
    at = data.index(b"value-4")  # in the second batch
    data[at + 5] = ord("X")
    open(path, "wb").write(bytes(data))
    result = dump(path)
    assert result.exit_code == 1
    batches = [line for line in result.stdout.splitlines() if line.startswith("baseOffset:")]
    assert [b.endswith("isvalid: false") for b in batches] == [False, True, False, False, False]
    assert "key: key-4 payload: valueX4" in result.stdout  # the records still decode
    assert "1 problem(s)" in result.stdout
    assert result.stderr == "brook: 1 problem(s) found in 1 file(s)\n"


def test_a_damaged_compressed_batch_is_reported(tmp_path):
    path, _ = known_log(tmp_path)
    data = bytearray(open(path, "rb").read())
    pos = 0
    for _ in range(3):  # the fourth batch is the gzip'ed one
        pos += read_header(data, pos).size
    end = pos + read_header(data, pos).size
    data[pos + 61:end] = bytes(end - pos - 61)  # its compressed records, zeroed
    open(path, "wb").write(bytes(data))
    result = dump(path)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    batch = next(i for i, line in enumerate(lines) if line.startswith("baseOffset: 9 "))
    assert "compresscodec: gzip" in lines[batch] and lines[batch].endswith("isvalid: false")
    assert lines[batch + 1].startswith("  records cannot be decoded: cannot decompress GZIP data")
    assert lines[batch + 2].startswith("baseOffset: 12 ")  # the scan goes on
    assert lines[-1].endswith("; 2 problem(s)")


def test_a_legacy_message_set_is_reported_not_decoded(tmp_path):
    from brook.records import LegacyMessage, encode_message_set

    path = tmp_path / "old-0" / "00000000000000000000.log"
    path.parent.mkdir()
    data = encode_message_set([LegacyMessage(0, 1, timestamp=T0, key=b"k", value=b"v")], 1)
    path.write_bytes(data)
    result = dump(path)
    assert result.exit_code == 1
    assert (f"Found {len(data)} invalid bytes at position 0 of {path.name}: "
            "unsupported record batch magic 1") in result.stdout


def test_a_torn_tail_is_reported(tmp_path):
    path, _ = known_log(tmp_path)
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-10])
    result = dump(path)
    assert result.exit_code == 1
    batches = [line for line in result.stdout.splitlines() if line.startswith("baseOffset:")]
    assert len(batches) == 4
    last_batch_start = int(batches[-1].split(" position: ")[1].split()[0])
    last_size = int(batches[-1].split(" size: ")[1].split()[0])
    assert (f"Found {len(data) - 10 - last_batch_start - last_size} invalid bytes at position "
            f"{last_batch_start + last_size}") in result.stdout
    # the last batch's index entries now point past the log
    assert "position" in result.stdout and "past the end of the log" in result.stdout


def test_index_entries_the_log_disagrees_with(tmp_path):
    path, _ = known_log(tmp_path)
    index = path.replace(".log", ".index")
    data = bytearray(open(index, "rb").read())
    rel, pos = struct.unpack_from(">ii", data, 8)  # the second entry
    struct.pack_into(">ii", data, 8, rel, pos + 1)
    open(index, "wb").write(bytes(data))
    timeindex = path.replace(".log", ".timeindex")
    data = bytearray(open(timeindex, "rb").read())
    ts, rel2 = struct.unpack_from(">qi", data, 0)
    struct.pack_into(">qi", data, 0, ts - 5, rel2)
    open(timeindex, "wb").write(bytes(data))
    result = dump(path)
    assert result.exit_code == 1
    assert (f"entry 1 (offset {rel}): position {pos + 1} is not where a batch starts"
            in result.stdout)
    assert (f"entry 0: timestamp {ts - 5} differs from the max timestamp {ts} of the batch "
            f"ending at offset {rel2}") in result.stdout
    assert "2 problem(s)" in result.stdout


def test_an_index_file_is_listed_and_checked(tmp_path):
    path, _ = known_log(tmp_path)
    result = dump(path.replace(".log", ".index"))
    assert result.exit_code == 0, result.output
    entries = [line for line in result.stdout.splitlines() if line.startswith("offset:")]
    first_batch_size = read_header(open(path, "rb").read()).size
    # brook indexes a batch's base offset (Kafka its last offset)
    assert entries[0] == f"offset: 3 position: {first_batch_size}"
    assert len(entries) == 4
    result = dump(path.replace(".log", ".timeindex"))
    assert result.exit_code == 0, result.output
    assert [line for line in result.stdout.splitlines() if line.startswith("timestamp:")][0] == \
        f"timestamp: {T0 + 50} offset: 5"


def _consumer_protocol(cls, value) -> bytes:
    buf = io.BytesIO()
    buf.write(struct.pack(">h", 0))
    entity_writer(cls)(buf, value)
    return buf.getvalue()


def segment_of(log: Log, records: list[tuple[bytes | None, bytes | None]]):
    """The first segment of `log` holding one batch of (key, value) records, closed."""
    log.append(encode_batch([Record(i, T0, k, v) for i, (k, v) in enumerate(records)]))
    log.close()
    return Path(log.directory) / "00000000000000000000.log"


def decoded_lines(path, *flags) -> list[str]:
    """What dump-log prints of each record after its sizes and headers."""
    result = dump(path, *flags)
    assert result.exit_code == 0, result.output
    return [line.split(" headerKeys: [] ", 1)[1] for line in result.stdout.splitlines()
            if line.startswith("| offset:")]


def test_offsets_decoder(tmp_path):
    log = Log(str(tmp_path / "__consumer_offsets-3"), CONFIG, clock=FakeClock(T0))
    subscription = _consumer_protocol(ConsumerProtocolSubscription,
                                      ConsumerProtocolSubscription(topics=("orders",)))
    assignment = _consumer_protocol(ConsumerProtocolAssignment, ConsumerProtocolAssignment(
        assigned_partitions=(AssignedPartitions(topic="orders", partitions=(0, 1)),)))
    member = MemberMetadata("m-1", None, "client-a", "/10.0.0.7", 300_000, 45_000,
                            subscription, assignment)
    records = [
        (encode_key(GroupMetadataKey("billing")),
         encode_value(GroupMetadataValue("consumer", 1, "range", "m-1", T0, (member,)))),
        (encode_key(OffsetCommitKey("billing", "orders", 1)),
         encode_value(OffsetCommitValue(42, 0, "hi", T0 + 1))),
        (encode_key(OffsetCommitKey("billing", "orders", 1)), None),
        (encode_key(GroupMetadataKey("billing")), None),
        (struct.pack(">h", 10) + b"future", b"\x00\x00"),
        (struct.pack(">h", 1) + b"\x00", b""),
    ]
    path = segment_of(log, records)
    lines = decoded_lines(path, "--offsets-decoder")
    assert lines == [
        "group_metadata group=billing protocol_type=consumer generation=1 protocol=range "
        f"leader=m-1 current_state_timestamp={T0} members=[m-1 client_id=client-a "
        "host=/10.0.0.7 session_timeout=45000 rebalance_timeout=300000 subscription=orders "
        "assignment=orders(0,1)]",
        "offset_commit group=billing topic=orders partition=1 offset=42 leader_epoch=0 "
        f"metadata='hi' commit_timestamp={T0 + 1} expire_timestamp=-1",
        "offset_commit group=billing topic=orders partition=1 tombstone",
        "group_metadata group=billing tombstone",
        "unknown record type 10",
        "corrupt (skipped when the coordinator loads): bad __consumer_offsets key: unpack_from requires a buffer of at least 4 bytes "
        "for unpacking 2 bytes at offset 2 (actual buffer size is 3)",
    ]
    docs = [json.loads(line) for line in dump(path, "--offsets-decoder", "--output",
                                              "json").stdout.splitlines()]
    decoded = [r["decoded"] for d in docs if d["type"] == "batch" for r in d["records"]]
    assert decoded[1] == {"type": "offset_commit", "group": "billing", "topic": "orders",
                          "partition": 1, "offset": 42, "leader_epoch": 0, "metadata": "hi",
                          "commit_timestamp": T0 + 1, "expire_timestamp": -1}
    assert decoded[0]["members"][0]["assignment"] == {"orders": [0, 1]}


def test_transaction_log_decoder(tmp_path):
    from brook.coordinator.transaction import schemas as txn

    log = Log(str(tmp_path / "__transaction_state-1"), CONFIG, clock=FakeClock(T0))
    key = txn.encode_key(txn.TransactionLogKey("app"))
    records = [
        (key, txn.encode_value(txn.TransactionLogValue(7, 0, 60_000, 0, None, T0, -1))),
        (key, txn.encode_value(txn.TransactionLogValue(
            7, 0, 60_000, 1, (("orders", (0, 2)), ("audit", (1,))), T0 + 1, T0 + 1), version=0)),
        (key, txn.encode_value(txn.TransactionLogValue(
            7, 32767, 60_000, 3, (("orders", (0,)),), T0 + 2, T0 + 1, next_producer_id=8))),
        (key, None),
        (struct.pack(">h", 4) + b"later", b"\x00\x01"),
        (key, b"\x00\x01\x00"),
    ]
    path = segment_of(log, records)
    lines = decoded_lines(path, "--transaction-log-decoder")
    head = "transaction_metadata transactional_id=app producer_id=7"
    assert lines == [
        f"{head} producer_epoch=0 state=Empty partitions=null timeout_ms=60000 "
        f"last_update_timestamp={T0} start_timestamp=-1",
        f"{head} producer_epoch=0 state=Ongoing partitions=[orders-0,orders-2,audit-1] "
        f"timeout_ms=60000 last_update_timestamp={T0 + 1} start_timestamp={T0 + 1}",
        f"{head} producer_epoch=32767 state=PrepareAbort partitions=[orders-0] timeout_ms=60000 "
        f"last_update_timestamp={T0 + 2} start_timestamp={T0 + 1} next_producer_id=8",
        "transaction_metadata transactional_id=app tombstone",
        "unknown record type 4",
        lines[5],
    ]
    assert lines[5].startswith("corrupt (skipped when the coordinator loads): ")
    docs = [json.loads(line) for line in dump(path, "--transaction-log-decoder", "--output",
                                              "json").stdout.splitlines()]
    decoded = [r["decoded"] for d in docs if d["type"] == "batch" for r in d["records"]]
    assert decoded[1] == {
        "type": "transaction_metadata", "transactional_id": "app", "producer_id": 7,
        "producer_epoch": 0, "state": "Ongoing", "timeout_ms": 60_000,
        "partitions": [{"topic": "orders", "partitions": [0, 2]},
                       {"topic": "audit", "partitions": [1]}],
        "last_update_timestamp": T0 + 1, "start_timestamp": T0 + 1, "previous_producer_id": -1,
        "next_producer_id": -1, "client_transaction_version": 0}
    result = dump(path, "--transaction-log-decoder", "--offsets-decoder")
    assert result.exit_code == 2 and "give one" in result.output


def test_bad_paths(tmp_path):
    result = dump(tmp_path / "nothing.log")
    assert result.exit_code == 1 and "no such file" in result.stderr
    log_path, _ = known_log(tmp_path)
    directory = tmp_path / "orders-0"
    result = dump(directory)
    assert result.exit_code == 2
    assert result.stderr == (
        f"brook: {directory}: is a directory; give files in it, e.g. {log_path} (it has "
        "00000000000000000000.index, 00000000000000000000.log, 00000000000000000000.timeindex)\n")
    (tmp_path / "empty").mkdir()
    result = dump(tmp_path / "empty")
    assert result.exit_code == 2 and result.stderr == (
        f"brook: {tmp_path / 'empty'}: is a directory, with no .log, .index, .timeindex or "
        ".txnindex file in it\n")
    other = tmp_path / "notes.txt"
    other.write_text("x")
    result = dump(other)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"brook: {other}: not a .log, .index, .timeindex or .txnindex file"


def test_empty_segment(tmp_path):
    path = tmp_path / "t-0" / "00000000000000000042.log"
    path.parent.mkdir()
    path.write_bytes(b"")
    result = dump(path)
    assert result.exit_code == 0
    assert "Log starting offset: 42" in result.stdout
    assert "Summary: 0 batches, 0 records; no problems" in result.stdout


@pytest.mark.parametrize("size, fmt, tty, shown", [
    (PROGRESS_MIN_BYTES, Format.table, True, True),
    (PROGRESS_MIN_BYTES - 1, Format.table, True, False),
    (PROGRESS_MIN_BYTES, Format.json, True, False),
    (PROGRESS_MIN_BYTES, Format.table, False, False),
])
def test_progress_bar_only_for_large_segments_on_a_terminal(size, fmt, tty, shown):
    assert show_progress(size, fmt, tty) is shown


def test_dump_of_a_brokers_segments_after_it_stopped(broker_factory):
    """The installed executable on what a real broker wrote: the produced records, consistent
    indexes, and a group's commit in __consumer_offsets."""
    import subprocess
    import sys
    from pathlib import Path

    from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from brook.coordinator.group.partitioner import partition_for

    broker = broker_factory({"log.index.interval.bytes": 1, "offsets.topic.num.partitions": 3})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("known", 1, 1)])["known"].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(6):
        producer.produce("known", key=b"key-%d" % i, value=b"value-%d" % i,
                         timestamp=T0 + i)
        producer.flush(10)  # one batch per record
    tps = [TopicPartition("known", 0, 4)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("dumper", tps)])[
        "dumper"].result(10)
    assert broker.stop() == 0

    brook = str(Path(sys.executable).with_name("brook"))
    segment = broker.log_dir / "known-0" / "00000000000000000000.log"
    result = subprocess.run([brook, "dump-log", str(segment)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    records = [line for line in result.stdout.splitlines() if line.startswith("| offset:")]
    assert [line.split(" headerKeys: [] ")[1] for line in records] == [
        f"key: key-{i} payload: value-{i}" for i in range(6)]
    assert "Offset index 00000000000000000000.index: 5 entries, consistent with the log" \
        in result.stdout
    assert "Time index 00000000000000000000.timeindex: 5 entries, consistent with the log" \
        in result.stdout

    offsets = broker.log_dir / f"__consumer_offsets-{partition_for('dumper', 3)}"
    result = subprocess.run([brook, "dump-log", "--offsets-decoder",
                             str(offsets / "00000000000000000000.log")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "offset_commit group=dumper topic=known partition=0 offset=4 " in result.stdout


def test_transaction_log_of_a_brokers_transaction(broker_factory):
    """The installed executable on the __transaction_state segment a broker wrote for
    confluent-kafka's transaction: its states from Empty to CompleteCommit."""
    import subprocess
    import sys

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from brook.coordinator.common.partitioner import partition_for

    broker = broker_factory({"transaction.state.log.num.partitions": 3})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("paid", 2, 1)])["paid"].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "payer",
                         "transaction.timeout.ms": 30_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("paid", b"one", partition=0)
    producer.produce("paid", b"two", partition=1)
    producer.commit_transaction(30)
    assert broker.stop() == 0

    segment = (broker.log_dir / f"__transaction_state-{partition_for('payer', 3)}"
               / "00000000000000000000.log")
    result = subprocess.run([str(Path(sys.executable).with_name("brook")), "dump-log",
                             "--transaction-log-decoder", str(segment)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    decoded = [line.split(" headerKeys: [] ", 1)[1] for line in result.stdout.splitlines()
               if line.startswith("| offset:")]
    assert [d.split(" state=")[1].split()[0] for d in decoded] == [
        "Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]
    assert all(d.startswith("transaction_metadata transactional_id=payer producer_id=")
               for d in decoded)
    assert " partitions=[paid-0,paid-1] timeout_ms=30000 " in decoded[2]
    assert " partitions=[] " in decoded[3]


@settings(max_examples=examples(30))
@given(st.lists(st.integers(1, 5), min_size=1, max_size=6), st.data())
def test_scan_finds_every_batch_and_stops_at_any_tear(sizes, data):
    """segment_reader on batches laid end to end: all found with their positions; cut anywhere
    inside the last batch, the earlier ones are found and the rest is reported as invalid."""
    from brook.cli.segment_reader import InvalidBytes, scan_log

    blobs, offset = [], 0
    for n in sizes:
        blobs.append(encode_batch([Record(offset + i, T0 + i, b"k", b"v" * i) for i in range(n)]))
        offset += n
    buf = b"".join(blobs)
    found = list(scan_log(buf))
    assert [b.position for b in found] == [sum(map(len, blobs[:i])) for i in range(len(blobs))]
    assert all(b.crc_valid and len(b.records) == n for b, n in zip(found, sizes))
    cut = data.draw(st.integers(len(buf) - len(blobs[-1]) + 1, len(buf) - 1))
    torn = list(scan_log(buf[:cut]))
    assert len(torn) == len(blobs)
    assert isinstance(torn[-1], InvalidBytes)
    assert torn[-1].position == len(buf) - len(blobs[-1])
    assert torn[-1].size == cut - torn[-1].position


def transactional_log(tmp_path) -> str:
    """A segment with an aborted and a committed transaction:
    p0 | 9: a0 | 8: b0 | ABORT 9 | COMMIT 8."""
    log = Log(str(tmp_path / "txn-0"), CONFIG, clock=FakeClock(T0))
    log.append(encode_batch([Record(0, T0, b"p", b"p0")]))
    for pid, value in ((9, b"a0"), (8, b"b0")):
        log.append(encode_batch([Record(0, T0, b"k", value)], producer_id=pid, producer_epoch=0,
                                base_sequence=0, transactional=True))
    log.append_as_marker(9, 0, 4, committed=False)
    log.append_as_marker(8, 0, 5, committed=True)
    log.close()
    return str(tmp_path / "txn-0" / "00000000000000000000.log")


def test_markers_are_decoded_and_the_txnindex_checked(tmp_path):
    path = transactional_log(tmp_path)
    result = dump(path)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    markers = [line for line in lines if "endTxnMarker" in line]
    assert len(markers) == 2
    assert markers[0].startswith("| offset: 3 CreateTime: ") and markers[0].endswith(
        "keySize: 4 valueSize: 6 headerKeys: [] endTxnMarker: ABORT coordinatorEpoch: 4")
    assert markers[1].endswith("endTxnMarker: COMMIT coordinatorEpoch: 5")
    assert "isTransactional: true isControl: true" in lines[lines.index(markers[0]) - 1]
    assert "Transaction index 00000000000000000000.txnindex: 1 aborted transactions, consistent " \
           "with the log" in lines
    result = dump(path.replace(".log", ".txnindex"))
    assert result.exit_code == 0, result.output
    assert "version: 0 producerId: 9 firstOffset: 1 lastOffset: 3 lastStableOffset: 2" in result.stdout
    result = runner.invoke(app, ["dump-log", "--output", "json", path])
    batches = [json.loads(line) for line in result.stdout.splitlines()]
    assert [b["end_txn_marker"] for b in batches if "end_txn_marker" in b] == [
        {"type": "ABORT", "coordinator_epoch": 4}, {"type": "COMMIT", "coordinator_epoch": 5}]


def test_a_txnindex_the_log_disagrees_with(tmp_path):
    path = transactional_log(tmp_path)
    index = path.replace(".log", ".txnindex")
    data = open(index, "rb").read()
    with open(index, "wb") as f:  # the same entry, naming the COMMIT marker's offset and producer 7
        f.write(data[:2] + struct.pack(">qqqq", 7, 1, 4, 5) + b"\x00")
    result = dump(index)
    assert result.exit_code == 1
    assert "size 35 is not a multiple of 34" in result.stdout
    assert "entry 0: no ABORT marker at offset 4 in the log" in result.stdout


def test_offsets_decoder_shows_consumer_group_records(tmp_path):
    import uuid

    from brook.coordinator.group import consumer_schemas as cs

    topic = uuid.UUID(int=1)
    log = Log(str(tmp_path / "__consumer_offsets-2"), CONFIG, clock=FakeClock(T0))
    records = [
        (cs.encode_key(cs.ConsumerGroupMetadataKey("g")),
         cs.encode_value(cs.ConsumerGroupMetadataValue(3))),
        (cs.encode_key(cs.ConsumerGroupCurrentMemberAssignmentKey("g", "m")),
         cs.encode_value(cs.ConsumerGroupCurrentMemberAssignmentValue(
             3, 2, 0, ((topic, (0, 1)),), ()))),
        (cs.encode_key(cs.ConsumerGroupMemberMetadataKey("g", "m")), None),
    ]
    lines = decoded_lines(segment_of(log, records), "--offsets-decoder")
    assert lines == [
        "consumer_group_metadata group=g epoch=3",
        "consumer_group_current_member_assignment group=g member_id=m member_epoch=3 "
        "previous_member_epoch=2 state=0 assigned_partitions=[['00000000-0000-0000-0000-"
        "000000000001', [0, 1]]] partitions_pending_revocation=[]",
        "consumer_group_member_metadata group=g member_id=m tombstone",
    ]
