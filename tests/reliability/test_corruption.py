"""Corrupt data on disk, found by a real broker process: damage in the active segment is
truncated by recovery; damage in an older segment answers an error for that partition only;
lost or truncated index files are rebuilt. The broker keeps serving everything else."""

from __future__ import annotations

import os
import struct
import time
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.support.broker_harness import BrokerProcess
from tests.support.kafka_wire import WireClient
from tests.support.wire_requests import create_topic, fetch_request, produce

from brook.records import Record, encode_batch
from brook.records.batch import read_header
from brook.records.errors import RecordsError

SEGMENT_BYTES = 4096


def batch_of(n: int, start: int) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([Record(i, now, None, f"value-{start + i:06d}".encode() * 8, ())
                         for i in range(n)])


def fill(client, topic: str, partitions: int, batches: int) -> None:
    for b in range(batches):
        produce(client, topic, {p: batch_of(5, b * 5) for p in range(partitions)})


def fetched(client, topic: str, partition: int, offset: int):
    """(error code, [offsets]) of one Fetch of one partition."""
    resp = client.request(fetch_request(topic, {partition: offset}, partition_max_bytes=1 << 16))
    part = resp.responses[0].partitions[0]
    data = bytes(part.records or b"")
    offsets, pos = [], 0
    while pos + 61 <= len(data):  # whole batches; a fetch may end inside one
        try:
            header = read_header(data, pos)
        except RecordsError:  # sent as stored, as Kafka does: the client's CRC check finds it
            break
        if pos + header.size > len(data):
            break
        offsets += range(header.base_offset, header.base_offset + header.last_offset_delta + 1)
        pos += header.size
    return part.error_code, offsets


def segments(log_dir: Path, topic: str, partition: int) -> list[Path]:
    return sorted((log_dir / f"{topic}-{partition}").glob("*.log"))


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess(tmp_path / "broker", overrides={"log.segment.bytes": SEGMENT_BYTES}) as b:
        yield b


def test_damaged_older_segment_answers_corrupt_message_for_that_partition_only(broker):
    topic = f"damaged-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.bootstrap) as c:
        create_topic(c, topic, partitions=2)
        fill(c, topic, 2, 40)
    broker.stop()
    damaged = segments(broker.log_dir, topic, 0)[1]  # an older segment, not the active one
    first_offset = int(damaged.name[:20])
    with open(damaged, "r+b") as f:  # the second batch's length field becomes nonsense
        head = f.read(12)
        _, length = struct.unpack(">qi", head)
        f.seek(12 + length + 8)
        f.write(struct.pack(">i", 3))
    broker.start()  # a clean shutdown: older segments are not scanned on load
    with WireClient(broker.bootstrap) as c:
        code, offsets = fetched(c, topic, 0, first_offset)  # the first batch is still fine
        assert code == ErrorCode.none and offsets[0] == first_offset
        code, _ = fetched(c, topic, 0, offsets[-1] + 1)  # the damaged batch
        assert code in (ErrorCode.corrupt_message, ErrorCode.kafka_storage_error)
        code, offsets = fetched(c, topic, 1, first_offset)  # the other partition is fine
        assert code == ErrorCode.none and offsets
        code, offsets = fetched(c, topic, 0, 0)  # so is the partition before the damage
        assert code == ErrorCode.none and offsets[0] == 0
        produce(c, topic, {0: batch_of(1, 0)})  # and appends to the damaged partition work
    assert broker.running
    assert "damaged" in broker.stderr_path.read_text() or "corrupt" in \
        broker.stderr_path.read_text().lower()


@pytest.mark.parametrize("damage", ["flip", "torn", "garbage"])
def test_damaged_active_segment_is_truncated_at_the_first_invalid_batch(broker, damage):
    topic = f"tail-{damage}-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.bootstrap) as c:
        create_topic(c, topic, partitions=1)
        fill(c, topic, 1, 3)  # three batches of 5 in the active segment
    broker.kill()  # no clean-shutdown marker: the active segment is scanned on start
    active = segments(broker.log_dir, topic, 0)[-1]
    size = active.stat().st_size
    with open(active, "r+b") as f:
        if damage == "flip":  # a byte inside the last batch's records: its CRC fails
            f.seek(size - 10)
            byte = f.read(1)
            f.seek(size - 10)
            f.write(bytes([byte[0] ^ 0xFF]))
        elif damage == "torn":
            f.truncate(size - 7)
        else:
            f.seek(size)
            f.write(os.urandom(100))
    broker.start()
    with WireClient(broker.bootstrap) as c:
        code, offsets = fetched(c, topic, 0, 0)
        assert code == ErrorCode.none
        expected = list(range(10)) if damage != "garbage" else list(range(15))
        assert offsets == expected
        produce(c, topic, {0: batch_of(2, 0)})
        code, offsets = fetched(c, topic, 0, 0)
        assert offsets == expected + [expected[-1] + 1, expected[-1] + 2]


@pytest.mark.parametrize("damage", ["deleted", "truncated", "garbage"])
def test_lost_or_damaged_index_files_are_rebuilt(broker, damage):
    topic = f"index-{damage}-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.bootstrap) as c:
        create_topic(c, topic, partitions=1)
        fill(c, topic, 1, 40)
        before = [fetched(c, topic, 0, o) for o in range(0, 200, 7)]
    broker.stop()
    for log_file in segments(broker.log_dir, topic, 0)[:-1]:
        for suffix in (".index", ".timeindex"):
            index = log_file.with_suffix(suffix)
            if damage == "deleted":
                index.unlink()
            elif damage == "truncated":
                with open(index, "r+b") as f:
                    f.truncate(max(0, index.stat().st_size - 5))
            else:
                with open(index, "r+b") as f:
                    f.write(os.urandom(16))
    broker.start()
    with WireClient(broker.bootstrap) as c:
        after = [fetched(c, topic, 0, o) for o in range(0, 200, 7)]
        assert after == before
