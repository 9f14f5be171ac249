"""brook.records.arrow: the bulk decoder equals the record-by-record one on any batches."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brook.records import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    Codec,
    CorruptRecordError,
    Record,
    RecordsError,
    UnsupportedCompressionError,
    decode_batch,
    encode_batch,
    scan_batches,
)
from brook.records.arrow import arrow_schema, decode
from brook.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET
from brook.records.crc import crc32c
from tests.support.examples import examples

SOME = settings(max_examples=examples(60), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

small_bytes = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(st.text(max_size=8), small_bytes), max_size=3).map(tuple)


@st.composite
def batch_lists(draw, max_batches=4):
    """Batches of increasing offsets, each with its codec and timestamp type."""
    offset = draw(st.integers(0, 2**40))
    out = []
    for _ in range(draw(st.integers(0, max_batches))):
        n = draw(st.integers(1, 8))
        base_ts = draw(st.integers(-1, 2**42))
        records = []
        for i in range(n):
            records.append(Record(
                offset=offset,
                timestamp=base_ts + (draw(st.integers(-(10**7), 10**7)) if i else 0),
                key=draw(small_bytes),
                value=draw(st.one_of(small_bytes, st.binary(min_size=100, max_size=400))),
                headers=draw(st.one_of(st.just(()), headers)),
                attributes=draw(st.integers(0, 255)),
            ))
            offset += draw(st.integers(1, 300))
        out.append(encode_batch(records, codec=draw(st.sampled_from(Codec)),
                                timestamp_type=draw(st.sampled_from([CREATE_TIME, LOG_APPEND_TIME]))))
        offset += draw(st.integers(0, 1000))
    return out


def reference(data: bytes, topic: str, partition: int, start: int, end: int,
              include_headers: bool) -> list[dict]:
    """What the record-by-record decoder says the rows are."""
    rows = []
    for pos, header in scan_batches(data):
        if header.is_control:
            continue
        batch = decode_batch(data, pos)
        for r in batch.records:
            if not start <= r.offset < end:
                continue
            row = {"key": r.key, "value": r.value, "topic": topic, "partition": partition,
                   "offset": r.offset,
                   "timestamp": (header.max_timestamp if header.timestamp_type == LOG_APPEND_TIME
                                 else r.timestamp),
                   "timestampType": header.timestamp_type}
            if include_headers:
                row["headers"] = ([{"key": k, "value": v} for k, v in r.headers]
                                  if r.headers else None)
            rows.append(row)
    return rows


def rows(batch: pa.RecordBatch) -> list[dict]:
    """The decoded rows, timestamps as milliseconds like the reference's."""
    millis = batch.column("timestamp").cast(pa.int64()).to_pylist()
    out = batch.to_pylist()
    for row, ms in zip(out, millis):
        assert ms % 1000 == 0
        row["timestamp"] = ms // 1000
    return out


@SOME
@given(batches=batch_lists(), include_headers=st.booleans(), data=st.data())
def test_equals_the_record_decoder(batches, include_headers, data):
    buf = b"".join(batches)
    offsets = [r.offset for b in batches for r in decode_batch(b).records] or [0]
    start = data.draw(st.integers(min(offsets) - 1, max(offsets) + 1))
    end = data.draw(st.integers(start, max(offsets) + 2))
    decoded = decode(buf, "a-topic", 7, start=start, end=end, include_headers=include_headers)
    assert decoded.batch.schema.equals(arrow_schema(include_headers))
    assert rows(decoded.batch) == reference(buf, "a-topic", 7, start, end, include_headers)
    assert decoded.bytes_used <= len(buf)


@SOME
@given(batches=batch_lists(max_batches=3), cut=st.integers(1, 60))
def test_a_partial_last_batch_is_left_for_the_next_fetch(batches, cut):
    whole = b"".join(batches)
    extra = encode_batch([Record(2**50, 0, b"k", b"v" * 50)])
    decoded = decode(whole + extra[:-cut], "t", 0)
    assert decoded.bytes_used == len(whole)
    assert rows(decoded.batch) == reference(whole, "t", 0, 0, 2**63 - 1, False)
    expected_next = (decode_batch(batches[-1]).last_offset + 1) if batches else None
    assert decoded.next_offset == expected_next


def test_empty_input_and_empty_values():
    assert decode(b"", "t", 0).batch.num_rows == 0
    assert decode(b"", "t", 0).next_offset is None
    data = encode_batch([Record(5, 10, b"", b""), Record(6, 11, None, b"")], codec=Codec.ZSTD)
    got = decode(data, "t", 0).batch
    assert got.column("key").to_pylist() == [b"", None]
    assert got.column("value").to_pylist() == [b"", b""]
    assert got.column("offset").to_pylist() == [5, 6]


@SOME
@given(batches=batch_lists(max_batches=2).filter(bool), data=st.data())
def test_a_flipped_byte_under_the_crc_fails(batches, data):
    buf = bytearray(b"".join(batches))
    first = len(batches[0])
    at = data.draw(st.integers(CRC_OFFSET, first - 1))
    buf[at] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptRecordError):
        decode(bytes(buf), "t", 0)


def _recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c(bytes(batch[ATTRIBUTES_OFFSET:])))
    return bytes(batch)


@SOME
@given(batches=batch_lists(max_batches=1).filter(bool), data=st.data())
def test_damaged_records_under_a_good_crc_fail_like_the_record_decoder(batches, data):
    """Records damaged by the producer (the CRC is right): the bulk decoder never returns rows
    the record decoder refuses, and returns the same rows when it accepts them."""
    _damaged_decodes_like_the_record_decoder(batches[0], data, 3, include_headers=True)


def _damaged_decodes_like_the_record_decoder(batch: bytes, data, most: int,
                                             include_headers: bool) -> None:
    """Up to ``most`` bytes of an uncompressed batch's records changed, its CRC made right
    again: the bulk decoder refuses what the record decoder refuses, else gives its rows."""
    batch = bytearray(batch)
    if batch[ATTRIBUTES_OFFSET + 1] & 0x07:  # damage the records, not the compressed bytes
        return
    for _ in range(data.draw(st.integers(1, most))):
        at = data.draw(st.integers(61, len(batch) - 1))
        batch[at] = data.draw(st.integers(0, 255))
    buf = _recrc(batch)
    try:
        expected = reference(buf, "t", 0, 0, 2**63 - 1, include_headers)
    except RecordsError:
        with pytest.raises(RecordsError):
            decode(buf, "t", 0, include_headers=include_headers)
        return
    assert rows(decode(buf, "t", 0, include_headers=include_headers).batch) == expected


@pytest.mark.parametrize("codec_bits", [5, 6, 7])
def test_an_unknown_codec_fails_clearly(codec_bits):
    batch = bytearray(encode_batch([Record(0, 0, None, b"x")]))
    batch[ATTRIBUTES_OFFSET + 1] |= codec_bits
    with pytest.raises(UnsupportedCompressionError, match="codec"):
        decode(_recrc(batch), "t", 0)


def test_legacy_magic_fails_clearly():
    batch = bytearray(encode_batch([Record(0, 0, None, b"x")]))
    batch[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        decode(bytes(batch), "t", 0)


# ---------------------------------------------------------------- transactions


def _data(pid: int, offsets: list[int]) -> bytes:
    return encode_batch([Record(o, 1000 + o, None, b"v%d" % o) for o in offsets],
                        producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)


def _marker(pid: int, offset: int, commit: bool) -> bytes:
    return encode_batch([Record(offset, 2000, struct.pack(">hh", 0, int(commit)),
                                b"\x00\x00\x00\x00\x00\x00")],
                        producer_id=pid, producer_epoch=0, transactional=True, control=True)


def test_read_committed_drops_aborted_transactions_and_markers():
    log = b"".join([
        _data(1, [0, 1]),            # producer 1, aborted below
        _data(2, [2, 3]),            # producer 2, committed
        _marker(1, 4, commit=False),
        _data(1, [5]),               # producer 1 again: a new transaction, committed
        _marker(2, 6, commit=True),
        _marker(1, 7, commit=True),
        encode_batch([Record(8, 0, None, b"plain")]),
    ])
    committed = decode(log, "t", 0, aborted=[(1, 0)]).batch
    assert committed.column("offset").to_pylist() == [2, 3, 5, 8]
    uncommitted = decode(log, "t", 0).batch
    assert uncommitted.column("offset").to_pylist() == [0, 1, 2, 3, 5, 8]
    assert decode(log, "t", 0, aborted=[(1, 0)]).next_offset == 9
    # an aborted transaction that began before the fetch's first batch
    assert decode(log[len(_data(1, [0, 1])) + len(_data(2, [2, 3])):], "t", 0,
                  aborted=[(1, 0)]).batch.column("offset").to_pylist() == [5, 8]


def test_a_batch_past_the_end_ends_the_range_across_a_gap():
    """A compacted log's gap can reach past a range's end: the fetch from inside the gap
    returns the next batch, which starts at or after the end; the range is then read."""
    past = encode_batch([Record(40, 0, b"k", b"v"), Record(41, 0, b"k", b"w")])
    decoded = decode(past, "t", 0, start=12, end=40)
    assert decoded.batch.num_rows == 0
    assert decoded.next_offset == 40
    before = encode_batch([Record(10, 0, b"k", b"u")])
    decoded = decode(before + past, "t", 0, start=10, end=30)
    assert decoded.batch.column("offset").to_pylist() == [10]
    assert decoded.next_offset == 30


def test_only_control_batches_give_no_rows_but_move_on():
    decoded = decode(_marker(1, 41, commit=True), "t", 0)
    assert decoded.batch.num_rows == 0
    assert decoded.next_offset == 42


@pytest.mark.parametrize("codec", list(Codec))
def test_large_records_with_long_length_varints(codec):
    sizes = [0, 127, 8191, 8192, 20_000, 150_000, 3]
    records = [Record(i, 1000 + i, b"k" * (i * 50), bytes([i]) * size)
               for i, size in enumerate(sizes)]
    buf = encode_batch(records, codec=codec)
    assert rows(decode(buf, "t", 0).batch) == reference(buf, "t", 0, 0, 2**63 - 1, False)


@st.composite
def run_batches(draw):
    """One batch of many records coming in runs of one size (the decoder steps over a run in
    one go) broken by records of other sizes, at offset and timestamp deltas whose varints
    widen inside the batch."""
    base = draw(st.integers(0, 2**40))
    ts = draw(st.integers(0, 2**42))
    records = []
    for _ in range(draw(st.integers(1, 6))):
        size = draw(st.sampled_from([0, 1, 10, 63, 64, 100, 200, 5000, 9000]))
        key = draw(st.one_of(st.none(), st.binary(min_size=3, max_size=3)))
        for _ in range(draw(st.integers(1, 120))):
            i = len(records)
            records.append(Record(base + i, ts + i * draw(st.sampled_from([0, 1, 3])), key,
                                  None if size == 0 else bytes([i % 251]) * size))
    return encode_batch(records, codec=draw(st.sampled_from([Codec.NONE, Codec.LZ4])))


@SOME
@given(batch=run_batches(), data=st.data())
def test_runs_of_records_of_one_size_equal_the_record_decoder(batch, data):
    offsets = [r.offset for r in decode_batch(batch).records]
    start = data.draw(st.integers(offsets[0], offsets[-1] + 1))
    buf = batch + batch_after(batch)
    decoded = decode(buf, "t", 3, start=start)
    assert rows(decoded.batch) == reference(buf, "t", 3, start, 2**63 - 1, False)


def batch_after(batch: bytes) -> bytes:
    last = decode_batch(batch).last_offset
    return encode_batch([Record(last + 1 + i, 0, None, b"x" * 20) for i in range(40)])


@SOME
@given(batch=run_batches(), data=st.data())
def test_damaged_runs_under_a_good_crc_fail_like_the_record_decoder(batch, data):
    _damaged_decodes_like_the_record_decoder(batch, data, 2, include_headers=False)
