"""RecordBatch v2: round trips, the header fast path, a hand-built vector, and bad bytes."""

from __future__ import annotations

import random
import struct

import pytest
from brook.records.crc import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brook.records import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    Codec,
    CorruptRecordError,
    Record,
    RecordsError,
    TruncatedBatchError,
    decode_batch,
    encode_batch,
    read_header,
    scan_batches,
    set_base_offset,
    verify_crc,
)
from brook.records.compression import compress
from tests.support.examples import examples

SOME = settings(max_examples=examples(40), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

# ---------------------------------------------------------------- strategies

small_bytes = st.one_of(st.none(), st.binary(max_size=40))


def _big_value(args: tuple[int, int, bool]) -> bytes:
    """Large values built from a seed: hypothesis would be slow to draw 100 KiB itself."""
    size, seed, compressible = args
    rng = random.Random(seed)
    if compressible:
        return (rng.randbytes(50) * (size // 50 + 1))[:size]
    return rng.randbytes(size)


big_bytes = st.tuples(st.integers(33_000, 150_000), st.integers(0, 2**32), st.booleans()).map(
    _big_value
)
headers = st.lists(st.tuples(st.text(max_size=8), small_bytes), max_size=3).map(tuple)


@st.composite
def record_lists(draw, values=small_bytes, min_size=0, max_size=6):
    """Records with increasing offsets (with gaps) and timestamps on both sides of the first."""
    n = draw(st.integers(min_size, max_size))
    offset = draw(st.integers(0, 2**40))
    base_ts = draw(st.integers(-1, 2**42))
    records = []
    for i in range(n):
        if i:
            offset += draw(st.integers(1, 5000))
        ts = base_ts + draw(st.integers(-(10**7), 10**7)) if i else base_ts
        records.append(
            Record(
                offset=offset,
                timestamp=ts,
                key=draw(small_bytes),
                value=draw(values),
                headers=draw(headers),
                attributes=draw(st.integers(0, 255)),
            )
        )
    return records


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("codec", list(Codec))
@SOME
@given(records=record_lists())
def test_round_trip_every_codec(codec, records):
    data = encode_batch(records, codec=codec)
    batch = decode_batch(data)
    assert batch.records == records
    assert batch.compression == codec
    header = read_header(data)
    assert header.record_count == len(records)
    assert header.size == len(data)
    if records:
        assert header.base_offset == records[0].offset
        assert header.last_offset == records[-1].offset
        assert header.max_timestamp == max(r.timestamp for r in records)


@pytest.mark.parametrize("codec", list(Codec))
@FEW
@given(records=record_lists(values=big_bytes, min_size=1, max_size=3))
def test_round_trip_large_values(codec, records):
    assert decode_batch(encode_batch(records, codec=codec)).records == records


@SOME
@given(
    records=record_lists(min_size=1),
    codec=st.sampled_from(Codec),
    producer_id=st.integers(-1, 2**63 - 1),
    producer_epoch=st.integers(-1, 2**15 - 1),
    base_sequence=st.integers(-1, 2**31 - 1),
    partition_leader_epoch=INT32,
    transactional=st.booleans(),
    control=st.booleans(),
    timestamp_type=st.sampled_from([CREATE_TIME, LOG_APPEND_TIME]),
    delete_horizon_ms=st.one_of(st.none(), st.integers(0, 2**42)),
)
def test_round_trip_batch_fields(
    records,
    codec,
    producer_id,
    producer_epoch,
    base_sequence,
    partition_leader_epoch,
    transactional,
    control,
    timestamp_type,
    delete_horizon_ms,
):
    data = encode_batch(
        records,
        codec=codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        transactional=transactional,
        control=control,
        timestamp_type=timestamp_type,
        delete_horizon_ms=delete_horizon_ms,
    )
    batch = decode_batch(data)
    header = read_header(data)
    for obj in (batch, header):
        assert obj.producer_id == producer_id
        assert obj.producer_epoch == producer_epoch
        assert obj.base_sequence == base_sequence
        assert obj.partition_leader_epoch == partition_leader_epoch
        assert obj.is_transactional == transactional
        assert obj.is_control == control
        assert obj.timestamp_type == timestamp_type
        assert obj.compression == codec
    assert header.has_delete_horizon == (delete_horizon_ms is not None)
    if delete_horizon_ms is not None:
        assert header.base_timestamp == delete_horizon_ms
    # Record timestamps survive whatever the base timestamp field carries.
    assert batch.records == records
    if base_sequence >= 0:
        assert header.last_sequence == (base_sequence + header.last_offset_delta) & 0x7FFFFFFF


def test_explicit_last_offset_delta_keeps_span_of_compacted_batch():
    records = [Record(10, 5, b"k", b"v")]
    header = read_header(encode_batch(records, base_offset=8, last_offset_delta=4))
    assert (header.base_offset, header.last_offset, header.next_offset) == (8, 12, 13)


# ---------------------------------------------------------------- header fast path


@SOME
@given(
    records=record_lists(),
    partition_leader_epoch=INT32,
    producer_id=INT64,
    producer_epoch=INT16,
    base_sequence=INT32,
)
def test_read_header_fields(
    records, partition_leader_epoch, producer_id, producer_epoch, base_sequence
):
    data = encode_batch(
        records,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )
    h = read_header(data)
    assert h.batch_length == len(data) - 12
    assert h.magic == 2
    assert h.crc == crc32c(data[21:])
    assert h.attributes == 0
    assert h.partition_leader_epoch == partition_leader_epoch
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (
        producer_id,
        producer_epoch,
        base_sequence,
    )
    assert h.record_count == len(records)
    if records:
        assert h.base_timestamp == records[0].timestamp
        assert h.last_offset_delta == records[-1].offset - records[0].offset
    verify_crc(data, 0, h)


@SOME
@given(
    records=record_lists(min_size=1), new_base=st.integers(0, 2**62), codec=st.sampled_from(Codec)
)
def test_set_base_offset_keeps_crc_valid(records, new_base, codec):
    buf = bytearray(b"\x00" * 7 + encode_batch(records, codec=codec))
    set_base_offset(buf, 7, new_base)
    header = read_header(buf, 7)
    assert header.base_offset == new_base
    verify_crc(buf, 7, header)
    shift = new_base - records[0].offset
    assert [r.offset for r in decode_batch(buf, 7).records] == [r.offset + shift for r in records]


@SOME
@given(records=record_lists(min_size=1), codec=st.sampled_from(Codec), data=st.data())
def test_verify_crc_detects_any_flipped_byte(records, codec, data):
    batch = encode_batch(records, codec=codec)
    # Everything from the CRC field on: the CRC itself and the bytes it covers.
    pos = data.draw(st.integers(17, len(batch) - 1), label="pos")
    flip = data.draw(st.integers(1, 255), label="xor")
    damaged = bytearray(batch)
    damaged[pos] ^= flip
    with pytest.raises(CorruptRecordError):
        verify_crc(damaged, 0, read_header(damaged))
    with pytest.raises(CorruptRecordError):
        decode_batch(damaged)


@SOME
@given(batches=st.lists(record_lists(), max_size=5), codec=st.sampled_from(Codec))
def test_scan_batches_yields_every_batch(batches, codec):
    encoded = [encode_batch(recs, codec=codec) for recs in batches]
    buf = b"".join(encoded)
    found = list(scan_batches(buf))
    positions = [sum(len(e) for e in encoded[:i]) for i in range(len(encoded))]
    assert [pos for pos, _ in found] == positions
    assert [h.size for _, h in found] == [len(e) for e in encoded]
    assert [decode_batch(buf, pos).records for pos, _ in found] == batches


def test_scan_batches_yields_whole_batches_before_a_partial_one():
    first = encode_batch([Record(0, 1, b"a", b"b")])
    second = encode_batch([Record(1, 2, b"c", b"d")])
    seen = []
    with pytest.raises(TruncatedBatchError):
        for pos, _ in scan_batches(first + second[:-1]):
            seen.append(pos)
    assert seen == [0]


# ---------------------------------------------------------------- a vector built by hand


def test_crc32c_is_castagnoli():
    assert crc32c(b"123456789") == 0xE3069283  # the published CRC-32C check value


def _hand_built_batch() -> bytes:
    """A v2 batch laid out field by field from the Kafka protocol docs, varints by hand."""
    # Record 0: attributes 0, timestampDelta 0, offsetDelta 0, key "k", a 300-byte value
    # (length 300 -> zigzag 600 -> varint d8 04), no headers. 308 bytes -> zigzag 616 -> e8 04.
    value0 = bytes(range(256)) + bytes(44)
    rec0 = b"\xe8\x04" + b"\x00" + b"\x00" + b"\x00" + b"\x02k" + b"\xd8\x04" + value0 + b"\x00"
    # Record 1: timestampDelta -3 (zigzag 5), offsetDelta 2 (zigzag 4), null key (zigzag -1 = 1),
    # value "world!", one header "h" -> b"\x00\xff". 17 bytes -> zigzag 34 = 0x22.
    rec1 = (
        b"\x22"
        + b"\x00"
        + b"\x05"
        + b"\x04"
        + b"\x01"
        + b"\x0cworld!"
        + b"\x02"
        + b"\x02h"
        + b"\x04\x00\xff"
    )
    records = rec0 + rec1
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            0,  # attributes: no compression, CreateTime, not transactional or control
            2,  # lastOffsetDelta
            1_700_000_000_000,  # baseTimestamp
            1_700_000_000_000,  # maxTimestamp (record 1 is 3 ms older)
            1234,  # producerId
            3,  # producerEpoch
            42,  # baseSequence
            2,  # recordCount
        )
        + records
    )
    batch_length = 4 + 1 + 4 + len(after_crc)  # partitionLeaderEpoch, magic, crc, rest
    return struct.pack(">qiibI", 100, batch_length, 7, 2, crc32c(after_crc)) + after_crc


def test_hand_built_batch_decodes():
    data = _hand_built_batch()
    header = read_header(data)
    assert (header.base_offset, header.batch_length, header.partition_leader_epoch) == (
        100,
        len(data) - 12,
        7,
    )
    assert (header.last_offset, header.record_count, header.size) == (102, 2, len(data))
    verify_crc(data, 0, header)
    batch = decode_batch(data)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1234, 3, 42)
    assert batch.records == [
        Record(100, 1_700_000_000_000, b"k", bytes(range(256)) + bytes(44)),
        Record(102, 1_699_999_999_997, None, b"world!", (("h", b"\x00\xff"),)),
    ]


def test_encode_batch_writes_the_hand_built_bytes():
    data = _hand_built_batch()
    assert (
        encode_batch(
            decode_batch(data).records,
            base_offset=100,
            partition_leader_epoch=7,
            producer_id=1234,
            producer_epoch=3,
            base_sequence=42,
        )
        == data
    )


# ---------------------------------------------------------------- bad bytes


def _assert_only_records_errors(buf: bytes) -> None:
    # verify=False lets damaged bytes through to the decompressors and the record parser.
    unverified = (lambda b: decode_batch(b, verify=False), lambda b: list(scan_batches(b, False)))
    for decode in (read_header, decode_batch, lambda b: list(scan_batches(b)), *unverified):
        try:
            decode(buf)
        except RecordsError:
            pass


def _with_valid_crc(header_fields: tuple, body: bytes) -> bytes:
    """A batch around arbitrary record bytes whose CRC matches, so decoding goes past it."""
    after_crc = struct.pack(">hiqqqhii", *header_fields) + body
    return struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc32c(after_crc)) + after_crc


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_records_errors(buf):
    _assert_only_records_errors(buf)


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(max_size=120))
def test_random_bytes_after_a_plausible_prefix(tail):
    # Random bytes rarely pass the magic check; start them with a believable prefix.
    buf = struct.pack(">qib", 0, len(tail) + 5, -1) + b"\x02" + tail
    _assert_only_records_errors(buf)


@pytest.mark.parametrize("codec", list(Codec))
def test_every_truncation_is_reported_as_truncated(codec):
    data = encode_batch(
        [Record(5, 10, b"key", b"value" * 20, (("h", b"x"),)), Record(9, 7, None, b"v")],
        codec=codec,
    )
    for n in range(len(data)):
        prefix = data[:n]
        for decode in (read_header, decode_batch, lambda b: list(scan_batches(b))):
            if n == 0 and decode is not read_header:
                continue  # an empty buffer is an empty log to scan_batches
            with pytest.raises(TruncatedBatchError):
                decode(prefix)
    assert list(scan_batches(b"")) == []


@SOME
@given(records=record_lists(), codec=st.sampled_from(Codec), data=st.data())
def test_random_flips_raise_only_records_errors(records, codec, data):
    buf = bytearray(encode_batch(records, codec=codec))
    for _ in range(data.draw(st.integers(1, 4), label="flips")):
        pos = data.draw(st.integers(0, len(buf) - 1), label="pos")
        buf[pos] ^= data.draw(st.integers(1, 255), label="xor")
    _assert_only_records_errors(bytes(buf))


# Record bytes are mostly small varints; random bytes alone rarely look like records.
record_ish_bytes = st.lists(
    st.one_of(
        st.sampled_from([b"\x00", b"\x01", b"\x02", b"\x04", b"\x7f", b"\x80", b"\xff"]),
        st.binary(max_size=4),
    ),
    max_size=30,
).map(b"".join)


@settings(max_examples=examples(300), deadline=None)
@given(
    count=st.integers(0, 5),
    attributes=st.one_of(st.sampled_from([0, 0x08, 0x10, 0x30]), INT16),
    body=record_ish_bytes,
)
def test_random_records_under_a_valid_crc(count, attributes, body):
    buf = _with_valid_crc((attributes, max(count - 1, 0), 0, 0, -1, -1, -1, count), body)
    _assert_only_records_errors(buf)


@SOME
@given(count=st.integers(1, 5), codec=st.sampled_from(Codec), body=record_ish_bytes)
def test_random_compressed_records_under_a_valid_crc(count, codec, body):
    buf = _with_valid_crc((int(codec), count - 1, 0, 0, -1, -1, -1, count), compress(codec, body))
    _assert_only_records_errors(buf)


def test_empty_record_at_end_of_batch_is_corrupt():
    # A record length of 0 leaves no room for its attributes byte.
    with pytest.raises(CorruptRecordError):
        decode_batch(_with_valid_crc((0, 0, 0, 0, -1, -1, -1, 1), b"\x00"))


def test_record_overrunning_a_complete_batch_is_corrupt_not_truncated():
    # The batch is whole and its CRC is right; a record that claims more bytes than the
    # batch has is damage, not a batch that will be complete once more bytes arrive.
    with pytest.raises(CorruptRecordError):
        decode_batch(_with_valid_crc((0, 0, 0, 0, -1, -1, -1, 1), b"\x40\x00\x00"))
    with pytest.raises(CorruptRecordError):
        decode_batch(_with_valid_crc((0, 1, 0, 0, -1, -1, -1, 2), b""))


def test_unknown_codec_in_attributes_is_corrupt():
    for codec_bits in (5, 6, 7):
        with pytest.raises(CorruptRecordError):
            decode_batch(_with_valid_crc((codec_bits, 0, 0, 0, -1, -1, -1, 0), b""))


def test_wrong_magic_and_impossible_length_are_corrupt():
    data = bytearray(encode_batch([Record(0, 0, None, b"x")]))
    data[16] = 1
    with pytest.raises(CorruptRecordError):
        read_header(data)
    with pytest.raises(CorruptRecordError):
        read_header(data[:20])  # the magic is known before the header is complete
    data = bytearray(encode_batch([Record(0, 0, None, b"x")]))
    struct.pack_into(">i", data, 8, 10)
    with pytest.raises(CorruptRecordError):
        read_header(data)
    struct.pack_into(">i", data, 8, -5)
    with pytest.raises(CorruptRecordError):
        read_header(data)
