import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brook.clock import FakeClock
from brook.records import Codec, CorruptRecordError, RecordsError, Record, decode_batch, encode_batch
from brook.storage.config import LogConfig
from brook.storage.errors import InvalidRecordError, OffsetOutOfRangeError, RecordTooLargeError
from brook.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log

from tests.support.storage_helpers import make_batch, read_all

SMALL = LogConfig(segment_bytes=3000, index_interval_bytes=200)


def open_log(path, config=SMALL, clock=None, **kw):
    return Log(str(path / "topic-0"), config, clock=clock or FakeClock(), **kw)


batches_strategy = st.lists(
    st.tuples(
        st.integers(1, 8),  # records in the batch
        st.integers(0, 250),  # value size
        st.sampled_from(list(Codec)),
    ),
    min_size=1,
    max_size=30,
)


@given(batches=batches_strategy, max_bytes=st.integers(1, 3000), reopen=st.sampled_from([None, True, False]))
def test_append_then_read_returns_everything_in_order(tmp_path_factory, batches, max_bytes, reopen):
    path = tmp_path_factory.mktemp("log")
    clock = FakeClock()
    lg = open_log(path, clock=clock)
    expected = []
    for i, (n, size, codec) in enumerate(batches):
        data = make_batch(n, clock.milliseconds(), size=size, codec=codec, start=len(expected))
        info = lg.append(data)
        assert info.first_offset == len(expected)
        assert info.last_offset == len(expected) + n - 1
        for rec in decode_batch(data).records:
            expected.append((len(expected), rec.timestamp, rec.key, rec.value, rec.headers))
        clock.advance(3)
    if reopen is not None:
        lg.close()
        lg = open_log(path, clock=clock, had_clean_shutdown=reopen)
    assert lg.log_end_offset == len(expected)
    assert read_all(lg, max_bytes=max_bytes) == expected
    # reading from any offset starts at the batch holding it
    for start in range(0, len(expected), 7):
        assert read_all(lg, start=start, max_bytes=max_bytes)[0] == expected[start]
    lg.close()


def test_segments_roll_on_size_and_are_named_by_base_offset(tmp_path):
    lg = open_log(tmp_path)
    for _ in range(20):
        lg.append(make_batch(3, 1000, size=100))
    assert len(lg.segments) == 3
    names = sorted(os.listdir(tmp_path / "topic-0"))
    for seg in lg.segments[:-1]:
        assert seg.size <= SMALL.segment_bytes
        assert f"{seg.base_offset:020d}.log" in names
    lg.close()
    names = set(os.listdir(tmp_path / "topic-0"))
    for seg in lg.segments:
        assert f"{seg.base_offset:020d}.index" in names
        assert f"{seg.base_offset:020d}.timeindex" in names


def test_roll_on_segment_ms(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, LogConfig(segment_ms=1000), clock)
    lg.append(make_batch(1, clock.milliseconds()))
    clock.advance(999)
    lg.append(make_batch(1, clock.milliseconds()))
    assert len(lg.segments) == 1
    clock.advance(2)
    lg.append(make_batch(1, clock.milliseconds()))
    assert [s.base_offset for s in lg.segments] == [0, 2]


def test_roll_on_full_index(tmp_path):
    lg = open_log(tmp_path, LogConfig(segment_index_bytes=16, index_interval_bytes=1))
    for _ in range(6):
        lg.append(make_batch(1, 1000))
    assert all(len(s.index) <= 2 for s in lg.segments)
    assert len(lg.segments) >= 2
    assert [r[0] for r in read_all(lg)] == list(range(6))


def test_offset_out_of_range_and_end_of_log(tmp_path):
    lg = open_log(tmp_path)
    lg.append(make_batch(5, 1000))
    assert lg.read(5, 1000).regions == ()
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(6, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(-1, 1000)
    lg.increase_log_start_offset(3)
    with pytest.raises(OffsetOutOfRangeError) as exc:
        lg.read(2, 1000)
    assert (exc.value.log_start_offset, exc.value.log_end_offset) == (3, 5)


def test_first_batch_is_whole_even_over_max_bytes(tmp_path):
    lg = open_log(tmp_path, LogConfig())
    lg.append(make_batch(4, 1000, size=500))
    lg.append(make_batch(4, 1000, size=500))
    info = lg.read(0, 10)
    batches = info.batches()
    assert len(batches) == 1 and len(batches[0].records) == 4
    assert lg.read(0, 10, min_one_message=False).batches() == []  # a partial batch, as Kafka sends


def test_read_bounded_by_max_offset(tmp_path):
    lg = open_log(tmp_path)
    for _ in range(5):
        lg.append(make_batch(2, 1000))
    info = lg.read(0, 1 << 20, max_offset=6)
    assert [r.offset for b in info.batches() for r in b.records] == list(range(6))
    assert lg.read(6, 1 << 20, max_offset=6).regions == ()


def test_regions_are_file_slices_for_sendfile(tmp_path):
    lg = open_log(tmp_path, LogConfig())
    data = make_batch(3, 1000)
    lg.append(data)
    (region,) = lg.read(0, 1 << 20).regions
    assert region.position == 0 and region.length == len(data)
    with open(lg.active_segment.log_path, "rb") as f:
        assert f.read() == region.read()
    out_path = tmp_path / "sent"
    with open(out_path, "wb") as out:
        assert os.sendfile(out.fileno(), region.fd, region.position, region.length) == len(data)
    assert out_path.read_bytes()[8:] == data[8:]  # base offset rewritten, the rest as sent


def test_offsets_are_assigned_and_crc_stays_valid(tmp_path):
    lg = open_log(tmp_path)
    lg.append(make_batch(3, 1000))
    lg.append(make_batch(2, 1000))  # its own base offset says 0
    batches = lg.read(3, 1 << 20).batches()  # decode verifies the CRC
    assert batches[0].base_offset == 3 and [r.offset for r in batches[0].records] == [3, 4]


def test_log_append_time(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"), clock)
    clock.advance(5000)
    info = lg.append(make_batch(3, 42))
    assert info.log_append_time == clock.milliseconds()
    (batch,) = lg.read(0, 1 << 20).batches()
    assert batch.timestamp_type == 1 and batch.max_timestamp == clock.milliseconds()


def test_bad_batches_are_refused_and_nothing_is_written(tmp_path):
    lg = open_log(tmp_path, LogConfig(max_message_bytes=500))
    good = make_batch(2, 1000)
    lg.append(good)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        lg.append(bytes(bad_crc))
    with pytest.raises(RecordTooLargeError):
        lg.append(make_batch(2, 1000, size=600))
    with pytest.raises(RecordsError):
        lg.append(good + b"\x00\x01")  # trailing garbage after a valid batch
    lying = encode_batch([Record(0, 1, b"k", b"v")], last_offset_delta=5)
    with pytest.raises(InvalidRecordError):
        lg.append(lying)
    # a multi-batch append with a bad second batch writes neither
    with pytest.raises(CorruptRecordError):
        lg.append(good + bytes(bad_crc))
    assert lg.log_end_offset == 2 and lg.active_segment.size == len(good)


def test_fetch_offset_by_timestamp(tmp_path):
    lg = open_log(tmp_path)
    for i in range(10):  # timestamps 1000, 1001 | 1010, 1011 | ...
        lg.append(encode_batch([Record(0, 1000 + 10 * i, b"a", b"x"), Record(1, 1001 + 10 * i, b"b", b"y")]))
    lg.increase_log_start_offset(2)
    assert lg.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP) == (2, -1)
    assert lg.fetch_offset_by_timestamp(LATEST_TIMESTAMP) == (20, -1)
    assert lg.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (19, 1091)
    assert lg.fetch_offset_by_timestamp(1041) == (9, 1041)
    assert lg.fetch_offset_by_timestamp(1042) == (10, 1050)
    assert lg.fetch_offset_by_timestamp(0) == (2, 1010)  # nothing below the log start
    assert lg.fetch_offset_by_timestamp(5000) is None


def test_flush_messages_policy_advances_recovery_point(tmp_path):
    lg = open_log(tmp_path, LogConfig(flush_messages=5))
    lg.append(make_batch(3, 1000))
    assert lg.recovery_point == 0
    lg.append(make_batch(3, 1000))
    assert lg.recovery_point == 6 and lg.unflushed_messages == 0


def test_flush_ms_policy(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, LogConfig(flush_ms=1000), clock)
    lg.append(make_batch(3, 1000))
    assert not lg.flush_if_due(clock.milliseconds() + 999)
    assert lg.flush_if_due(clock.milliseconds() + 1000)
    assert lg.recovery_point == 3


def test_batches_without_timestamps_add_no_time_index_entries(tmp_path):
    # As Kafka: an empty time index takes no entry without a timestamp (once one was written
    # with offset -1, which does not fit the file's relative offsets far from offset 0).
    base = 3_000_000_000
    lg = open_log(tmp_path, LogConfig(index_interval_bytes=0), log_start_offset=base)
    for _ in range(3):
        lg.append(encode_batch([Record(0, -1, None, b"v"), Record(1, -1, None, b"w")]))
    seg = lg.active_segment
    assert len(seg.index) == 2 and len(seg.time_index) == 0
    assert seg.time_index.last_entry == (-1, base)
    lg.append(make_batch(2, 5000))  # the first timestamp is indexed
    assert seg.time_index.last_entry == (5000 + 1, base + 7)
    lg.close()
    lg = open_log(tmp_path, LogConfig(index_interval_bytes=0), log_start_offset=base, had_clean_shutdown=True)
    assert lg.active_segment.load_indexes()  # the files written at close are sane
    assert lg.fetch_offset_by_timestamp(5001) == (base + 7, 5001)
    lg.close()


def test_max_timestamp_is_the_offset_of_the_record_that_has_it(tmp_path):
    """Since Kafka 3.8 (KAFKA-16310) ListOffsets MAX_TIMESTAMP answers the record's own offset,
    not the last offset of its batch: the first record with the largest timestamp."""
    from brook.records.compression import Codec

    lg = open_log(tmp_path)
    lg.append(encode_batch([Record(0, 1000, b"a", b"x"), Record(1, 1001, b"b", b"y")]))
    lg.append(encode_batch([Record(0, 5000, None, b"p"), Record(1, 9000, None, b"q"),
                            Record(2, 7000, None, b"r"), Record(3, 9000, None, b"s")],
                           codec=Codec.LZ4))
    lg.append(encode_batch([Record(0, 8000, None, b"t")]))
    assert lg.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (3, 9000)


def test_max_timestamp_with_log_append_time_is_the_first_offset_of_the_batch(tmp_path):
    clock = FakeClock(1_700_000_000_000)
    lg = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"), clock=clock)
    lg.append(encode_batch([Record(0, 1000, b"a", b"x")]))
    clock.advance(5)
    lg.append(encode_batch([Record(0, 1000, b"a", b"x"), Record(1, 1000, b"b", b"y")]))
    assert lg.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (1, 1_700_000_000_005)
