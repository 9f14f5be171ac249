"""Log.append holds a producer's records to Kafka's rules (brook.records.validate), on both
of its paths, and writes nothing of a refused batch."""

from __future__ import annotations

import struct

import pytest

from brook.clock import FakeClock
from brook.records import Codec, Record, encode_batch, read_header
from brook.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE
from brook.records.crc import crc32c
from brook.records.errors import InflationLimitError
from brook.storage.config import LogConfig
from brook.storage.errors import InvalidRecordError, InvalidTimestampError
from brook.storage.log import Log
from brook.storage.producer_state import AppendOrigin
from tests.records.test_compression import zstd_rle_bomb


def _log(tmp_path, **config) -> tuple[Log, FakeClock]:
    clock = FakeClock()
    return Log(str(tmp_path / "t-0"), LogConfig(**config), clock=clock), clock


def _records(n: int, now: int, key=b"k") -> list[Record]:
    return [Record(i, now, key, b"value %d" % i) for i in range(n)]


def _with_body(batch: bytes, body: bytes) -> bytes:
    """`batch`'s header over another body, with its length and CRC made right."""
    out = bytearray(batch[:HEADER_SIZE] + body)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def _refused(lg: Log, data: bytes, error=InvalidRecordError):
    end = lg.log_end_offset
    with pytest.raises(error) as refused:
        lg.append(data)
    assert lg.log_end_offset == end and lg.active_segment.size == 0
    return refused.value


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.ZSTD])
def test_garbage_records_behind_a_valid_header_and_crc_are_refused(tmp_path, codec):
    lg, clock = _log(tmp_path)
    good = encode_batch(_records(50, clock.milliseconds()), codec=codec)
    from brook.records.compression import compress

    garbage = compress(codec, b"\x85" * 2000) if codec else b"\x85" * 2000
    error = _refused(lg, _with_body(good, garbage))
    assert error.record_errors == ()
    lg.append(good)  # the log takes the next good batch at offset 0
    assert lg.log_end_offset == 50


def test_a_record_count_that_lies_does_not_move_the_log_end(tmp_path):
    lg, clock = _log(tmp_path)
    data = bytearray(encode_batch(_records(5, clock.milliseconds())))
    struct.pack_into(">i", data, 23, 2**31 - 2)  # last offset delta
    struct.pack_into(">i", data, 57, 2**31 - 1)  # record count
    struct.pack_into(">I", data, CRC_OFFSET, crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]))
    _refused(lg, bytes(data))
    assert lg.log_end_offset == 0


def test_a_compacted_log_names_the_keyless_records(tmp_path):
    lg, clock = _log(tmp_path, cleanup_policy="compact")
    records = _records(100, clock.milliseconds())
    for r in records[::10]:
        r.key = None
    error = _refused(lg, encode_batch(records))
    assert [i for i, _ in error.record_errors] == list(range(0, 100, 10))


def test_a_record_timestamp_past_after_max_ms_is_refused_although_the_header_hides_it(tmp_path):
    lg, clock = _log(tmp_path)
    now = clock.milliseconds()
    records = _records(3, now)
    records[1].timestamp = now + 2 * 3_600_000
    lying = encode_batch(records, max_timestamp=now)  # the header says all is now
    error = _refused(lg, lying, InvalidTimestampError)
    assert [i for i, _ in error.record_errors] == [1]


def test_a_header_max_timestamp_below_the_records_is_rewritten(tmp_path):
    lg, clock = _log(tmp_path)
    now = clock.milliseconds()
    records = [Record(i, now + i * 10, b"k", b"v") for i in range(3)]
    info = lg.append(encode_batch(records, max_timestamp=now))
    assert info.max_timestamp == now + 20
    stored = lg.read(0, 1 << 20).read()
    assert read_header(stored).max_timestamp == now + 20
    assert lg.read(0, 1 << 20).batches()[0].max_timestamp == now + 20  # the CRC was redone
    assert lg.active_segment.max_timestamp_so_far == now + 20


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.ZSTD])
def test_checked_ahead_of_append_gives_the_same_log(tmp_path, codec):
    lg, clock = _log(tmp_path)
    batch = encode_batch(_records(300, clock.milliseconds()), codec=codec)
    checked = lg.check_records(batch)
    assert checked == clock.milliseconds()
    assert lg.append(batch, checked=checked).last_offset == 299
    assert lg.check_records(batch[:-1]) is None  # the header's fault: append answers it


def test_a_zstd_bomb_is_refused_without_being_inflated(tmp_path):
    lg, clock = _log(tmp_path)
    good = encode_batch(_records(1, clock.milliseconds()), codec=Codec.ZSTD)
    error = _refused(lg, _with_body(good, zstd_rle_bomb(8192)), InflationLimitError)
    assert "1073741824 bytes" in str(error)


def test_the_broker_s_own_appends_are_not_walked(tmp_path):
    """Coordinator appends (the broker's own records) keep the header-only path."""
    lg, clock = _log(tmp_path, cleanup_policy="compact")
    records = _records(3, clock.milliseconds(), key=None)
    lg.append(encode_batch(records), origin=AppendOrigin.COORDINATOR)
    assert lg.log_end_offset == 3
