"""A full disk under a real broker process: the produce that does not fit gets
KAFKA_STORAGE_ERROR, the broker stays up, nothing acknowledged before is lost, and appends
work again once space is freed. The broker's data lives on a small tmpfs mounted for the test
(skipped where mounting is not allowed)."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from tests.support.broker_harness import BrokerProcess
from tests.support.small_disk import small_tmpfs
from brook.records import Record, encode_batch
from tests.support.kafka_wire import WireClient
from tests.support.wire_requests import create_topic, fetch_request, produce

FS_BYTES = 6 << 20
VALUE = 16 * 1024


@pytest.fixture
def small_fs(tmp_path):
    with small_tmpfs(tmp_path / "small", FS_BYTES) as mount:
        yield mount


def batch(n: int, tag: int) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([Record(i, now, None, bytes([tag % 251]) * VALUE, ()) for i in range(n)])


def read_offsets(client, topic: str) -> list[int]:
    offsets, next_offset = [], 0
    while True:
        part = client.request(fetch_request(topic, {0: next_offset})).responses[0].partitions[0]
        assert part.error_code == ErrorCode.none
        data = bytes(part.records or b"")
        if not data:
            return offsets
        from brook.records.batch import scan_batches
        for _, header in scan_batches(data):
            offsets.extend(range(header.base_offset, header.last_offset + 1))
            next_offset = header.last_offset + 1


def test_a_full_disk_fails_only_the_produce_that_does_not_fit(small_fs):
    ballast = small_fs / "ballast"
    ballast.write_bytes(b"\x00" * (2 << 20))
    topic = f"full-{uuid.uuid4().hex[:6]}"
    with BrokerProcess(small_fs / "broker", overrides={"log.segment.bytes": 1 << 20}) as broker:
        with WireClient(broker.bootstrap) as c:
            create_topic(c, topic, partitions=1)
            acked: list[int] = []
            errors = []
            for tag in range(400):  # 400 x 64 KiB: far more than the disk holds
                resp = produce(c, topic, {0: batch(4, tag)})
                part = resp[0]
                if part.error_code == ErrorCode.none:
                    acked.extend(range(part.base_offset, part.base_offset + 4))
                else:
                    errors.append(part.error_code)
                    if len(errors) >= 3:
                        break
            assert errors and set(errors) == {ErrorCode.kafka_storage_error}, errors
            assert acked, "nothing fitted before the disk was full"
            assert read_offsets(c, topic) == acked  # nothing acknowledged was lost

            ballast.unlink()  # free space: appends work again
            resp = produce(c, topic, {0: batch(4, 999)})
            part = resp[0]
            assert part.error_code == ErrorCode.none
            assert part.base_offset == acked[-1] + 1  # no hole where the failed appends were
            assert read_offsets(c, topic) == acked + list(range(acked[-1] + 1, acked[-1] + 5))
        assert broker.running
        broker.restart()
        with WireClient(broker.bootstrap) as c:
            assert read_offsets(c, topic) == acked + list(range(acked[-1] + 1, acked[-1] + 5))
