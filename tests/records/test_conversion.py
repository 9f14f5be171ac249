"""Message format conversion: a produced legacy message set into one v2 batch
(`legacy.produced_to_v2`) and stored v2 batches into a legacy message set (`down_convert`):
property tests that what goes in comes out, Kafka's offsets and timestamps, limits, refusals."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.examples import examples

from brook.records import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    Codec,
    CorruptRecordError,
    LegacyMessage,
    Record,
    RecordsError,
    UnsupportedCompressionError,
    decode_batch,
    decode_message_set,
    encode_batch,
    encode_message_set,
)
from brook.records.down_convert import down_convert
from brook.records.errors import InvalidRecordError
from brook.records.legacy import produced_to_v2

SOME = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
LEGACY_CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]
codecs = st.sampled_from(LEGACY_CODECS)
payloads = st.one_of(st.none(), st.binary(max_size=30))
timestamps = st.integers(0, 2**42)


@st.composite
def legacy_messages(draw, magic: int, min_size: int = 1) -> list[LegacyMessage]:
    n = draw(st.integers(min_size, 8))
    return [LegacyMessage(draw(st.integers(0, 1000)), magic,
                          timestamp=draw(timestamps) if magic else -1,
                          key=draw(payloads), value=draw(payloads)) for _ in range(n)]


@st.composite
def stored_batches(draw) -> tuple[bytes, list[Record], list[Codec]]:
    """Consecutive v2 batches as the log holds them, and their records."""
    out, records, used = [], [], []
    offset = draw(st.integers(0, 10**6))
    for _ in range(draw(st.integers(1, 4))):
        codec = draw(codecs)
        batch = [Record(offset + i, draw(timestamps), draw(payloads), draw(payloads))
                 for i in range(draw(st.integers(1, 6)))]
        ts_type = draw(st.sampled_from([CREATE_TIME, LOG_APPEND_TIME]))
        out.append(encode_batch(batch, codec=codec, timestamp_type=ts_type))
        if ts_type == LOG_APPEND_TIME:  # every record of such a batch reads the batch's time
            t = max(r.timestamp for r in batch)
            batch = [Record(r.offset, t, r.key, r.value) for r in batch]
        records += [(r, codec) for r in batch]
        used.append(codec)
        offset += len(batch)
    return b"".join(out), records, used


# ---------------------------------------------------------------- up: Produce v0-v2


@SOME
@given(data=st.data(), magic=st.integers(0, 1), codec=codecs)
def test_produced_message_sets_become_one_batch_of_the_same_messages(data, magic, codec):
    sent = data.draw(legacy_messages(magic))
    if codec == Codec.NONE:
        wire = encode_message_set(sent, magic)
    else:
        sent = [LegacyMessage(i, magic, timestamp=m.timestamp, key=m.key, value=m.value)
                for i, m in enumerate(sent)]  # a wrapper's offsets increase
        wire = encode_message_set(sent, magic, codec)
    batch_bytes, count = produced_to_v2(wire)
    batch = decode_batch(batch_bytes)
    assert count == len(sent) and batch.compression == codec and batch.base_offset == 0
    assert batch.timestamp_type == CREATE_TIME
    assert [(r.offset, r.timestamp, r.key, r.value) for r in batch.records] == \
        [(i, m.timestamp, m.key, m.value) for i, m in enumerate(sent)]
    assert batch.base_timestamp == min(m.timestamp for m in sent)  # the log checks the earliest


def test_produced_wrapper_offsets_are_ignored():
    """kafka-python writes a magic-1 wrapper at offset 0, below its inner relative offsets."""
    sent = [LegacyMessage(i, 1, timestamp=5 + i, value=b"v%d" % i) for i in range(3)]
    wire = bytearray(encode_message_set(sent, 1, Codec.GZIP))
    wire[:8] = bytes(8)  # the wrapper's offset: outside the CRC
    batch = decode_batch(produced_to_v2(bytes(wire))[0])
    assert [(r.offset, r.timestamp, r.value) for r in batch.records] == [(0, 5, b"v0"), (1, 6, b"v1"), (2, 7, b"v2")]


def test_produced_refusals():
    m1 = [LegacyMessage(0, 1, timestamp=5, value=b"a"), LegacyMessage(1, 1, timestamp=6, value=b"b")]
    gz = encode_message_set(m1, 1, Codec.GZIP)
    plain = encode_message_set(m1, 1)
    with pytest.raises(InvalidRecordError):
        produced_to_v2(gz + gz)
    with pytest.raises(InvalidRecordError):
        produced_to_v2(plain + gz)
    with pytest.raises(InvalidRecordError):
        produced_to_v2(encode_message_set([LegacyMessage(0, 0, value=b"x")], 0) + plain)
    with pytest.raises(InvalidRecordError):
        produced_to_v2(b"")
    zstd = bytearray(encode_message_set(m1[:1], 1))
    zstd[17] = 4  # the attributes (after offset, size, crc, magic): codec 4, zstd
    zstd[12:16] = zlib.crc32(zstd[16:]).to_bytes(4, "big")
    with pytest.raises(InvalidRecordError):  # Kafka: no legacy wrapper is in zstd
        produced_to_v2(bytes(zstd))
    with pytest.raises(CorruptRecordError):
        produced_to_v2(plain[:-1])  # Produce takes no partial message, unlike a fetch
    with pytest.raises(CorruptRecordError):
        produced_to_v2(plain[:-1] + bytes((plain[-1] ^ 1,)))


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=200))
def test_produced_garbage_raises_only_records_errors(buf):
    try:
        batch, count = produced_to_v2(buf)
    except RecordsError:
        return
    assert len(decode_batch(batch).records) == count


# ---------------------------------------------------------------- down: Fetch v0-v3


@SOME
@given(stored=stored_batches(), magic=st.integers(0, 1), data=st.data())
def test_down_converted_holds_the_stored_records(stored, magic, data):
    buf, records, _ = stored
    first = records[0][0].offset
    fetch_offset = data.draw(st.integers(first, records[-1][0].offset))
    converted = down_convert(buf, magic, fetch_offset, 1 << 30)
    got = decode_message_set(converted.data)
    # plain batches from the fetch offset on, compressed ones whole
    want = [(r, c) for r, c in records if c != Codec.NONE or r.offset >= fetch_offset]
    assert [(m.offset, m.key, m.value) for m in got] == [(r.offset, r.key, r.value) for r, _ in want]
    assert converted.records == len(got)
    assert {m.magic for m in got} <= {magic}
    if magic == 1:
        assert [m.timestamp for m in got] == [r.timestamp for r, _ in want]
    else:
        assert all(m.timestamp == -1 for m in got)


def entry_lengths(data: bytes) -> list[int]:
    """The length of each top-level entry of a message set (offset, size, then size bytes)."""
    out, pos = [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        out.append(12 + size)
        pos += 12 + size
    return out


@SOME
@given(stored=stored_batches(), magic=st.integers(0, 1), limit=st.integers(0, 400))
def test_down_converted_stops_at_whole_messages_within_the_limit(stored, magic, limit):
    buf, _, _ = stored
    full = down_convert(buf, magic, 0, 1 << 30).data
    cut = down_convert(buf, magic, 0, limit).data
    lengths = entry_lengths(full)
    kept = entry_lengths(cut)
    assert full.startswith(cut) and kept == lengths[:len(kept)]
    if len(cut) > limit:  # over the limit only with the first entry alone
        assert kept == lengths[:1]
    elif len(kept) < len(lengths):  # and it stops only where the next entry would not fit
        assert len(cut) + lengths[len(kept)] > limit


def test_down_convert_drops_control_batches_and_cut_batches():
    data = encode_batch([Record(0, 1, b"k", b"v")])
    marker = encode_batch([Record(1, 2, b"\0\0\0\0", b"\0\0\0\0\0\0")], control=True,
                          transactional=True, producer_id=7, producer_epoch=0)
    more = encode_batch([Record(2, 3, b"k2", b"v2")])
    got = decode_message_set(down_convert(data + marker + more[:-5], 1, 0, 1 << 20).data)
    assert [(m.offset, m.value) for m in got] == [(0, b"v")]


def test_down_convert_keeps_the_codec_and_refuses_zstd():
    recs = [Record(10 + i, 100 + i, None, b"v%d" % i) for i in range(3)]
    for codec in LEGACY_CODECS[1:]:
        out = down_convert(encode_batch(recs, codec=codec), 1, 10, 1 << 20).data
        assert out[17] & 0x07 == codec  # one wrapper message (attributes after offset, size, crc, magic), compressed with the batch's codec
        assert [m.offset for m in decode_message_set(out)] == [10, 11, 12]
    with pytest.raises(UnsupportedCompressionError):
        down_convert(encode_batch(recs, codec=Codec.ZSTD), 0, 10, 1 << 20)


def test_down_convert_of_log_append_time_gives_every_message_the_batch_time():
    batch = encode_batch([Record(0, 5, None, b"a"), Record(1, 6, None, b"b")],
                         timestamp_type=LOG_APPEND_TIME, max_timestamp=999)
    for codec_batch in (batch, encode_batch([Record(0, 5, None, b"a")], codec=Codec.GZIP,
                                            timestamp_type=LOG_APPEND_TIME, max_timestamp=999)):
        got = decode_message_set(down_convert(codec_batch, 1, 0, 1 << 20).data)
        assert {(m.timestamp, m.timestamp_type) for m in got} == {(999, LOG_APPEND_TIME)}


def test_a_stored_gzip_bomb_is_not_down_converted_past_the_limit():
    """A gzip batch that inflates to 64 MiB (written before Produce checked records) costs a
    Fetch v0-v3 at most the limit: InflationLimitError (MESSAGE_TOO_LARGE), no Record objects."""
    import time

    from brook.records.errors import InflationLimitError

    bomb = encode_batch([Record(0, 1_700_000_000_000, b"k", bytes(64 << 20))], codec=Codec.GZIP)
    assert len(bomb) < 100_000
    started = time.perf_counter()
    with pytest.raises(InflationLimitError):
        down_convert(bomb, 1, 0, 1 << 20, limit=8 << 20)
    assert time.perf_counter() - started < 0.5
    small = encode_batch([Record(0, 1_700_000_000_000, b"k", bytes(1 << 20))], codec=Codec.GZIP)
    assert down_convert(small, 1, 0, 1 << 20, limit=8 << 20).records == 1
