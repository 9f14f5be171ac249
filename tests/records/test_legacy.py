"""Legacy message sets (magic 0 and 1): hand-built vectors, round trips, v2 conversion, damage."""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brook.records import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_TIMESTAMP_TYPE,
    Codec,
    CorruptRecordError,
    LegacyMessage,
    RecordsError,
    TruncatedBatchError,
    UnsupportedCompressionError,
    decode_batch,
    decode_message_set,
    encode_batch,
    encode_message_set,
    magic_of,
    read_header,
    scan_batches,
    to_v2_batches,
)
from brook.records.compression import compress, decompress
from brook.records.legacy import xxh32
from tests.support.examples import examples

SOME = settings(max_examples=examples(40), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
LEGACY_CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]


# ---------------------------------------------------------------- building entries by hand


def _bytes_field(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def _entry_from_body(offset: int, body: bytes) -> bytes:
    """offset, message_size, crc (CRC-32 of `body`, which starts at the magic byte), body."""
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body)) + body


def _entry(offset, magic, attributes, key, value, timestamp=None) -> bytes:
    body = struct.pack(">bB", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    return _entry_from_body(offset, body + _bytes_field(key) + _bytes_field(value))


# ---------------------------------------------------------------- known vectors


def test_hand_built_magic0_message():
    body = b"\x00\x00" + b"\x00\x00\x00\x03key" + b"\x00\x00\x00\x05value"
    entry = struct.pack(">qiI", 42, 4 + len(body), zlib.crc32(body)) + body
    assert len(entry) == 12 + 22  # crc, magic, attributes, 4+3 key, 4+5 value
    expected = LegacyMessage(42, 0, 0, -1, NO_TIMESTAMP_TYPE, b"key", b"value")
    assert decode_message_set(entry) == [expected]
    assert encode_message_set([expected], 0) == entry
    assert magic_of(entry) == 0


def test_hand_built_magic1_messages():
    buf = _entry(7, 1, 0x00, None, b"v", 1_600_000_000_000) + _entry(8, 1, 0x08, b"k", None, 5)
    expected = [
        LegacyMessage(7, 1, 0x00, 1_600_000_000_000, CREATE_TIME, None, b"v"),
        LegacyMessage(8, 1, 0x08, 5, LOG_APPEND_TIME, b"k", None),
    ]
    assert decode_message_set(buf) == expected
    assert encode_message_set(expected, 1) == buf
    assert magic_of(buf, 0) == magic_of(buf, 12 + 23) == 1


def _gzip_wrapper(offset, magic, inner: bytes, attributes=1, timestamp=0) -> bytes:
    return _entry(offset, magic, attributes, None, gzip.compress(inner, mtime=0), timestamp)


def test_hand_built_magic1_wrapper_with_relative_offsets():
    inner = b"".join(_entry(rel, 1, 0, None, b"m%d" % rel, 1000 + rel) for rel in range(3))
    messages = decode_message_set(_gzip_wrapper(107, 1, inner, timestamp=1002))
    assert [m.offset for m in messages] == [105, 106, 107]
    assert [m.timestamp for m in messages] == [1000, 1001, 1002]
    assert [m.value for m in messages] == [b"m0", b"m1", b"m2"]
    assert {m.timestamp_type for m in messages} == {CREATE_TIME}


def test_hand_built_magic1_wrapper_with_gaps_in_relative_offsets():
    # After compaction old brokers kept the relative offsets, gaps and all.
    inner = _entry(0, 1, 0, None, b"a", 1) + _entry(4, 1, 0, None, b"b", 2)
    assert [m.offset for m in decode_message_set(_gzip_wrapper(50, 1, inner))] == [46, 50]


def test_log_append_time_wrapper_stamps_its_timestamp_on_inner_messages():
    inner = _entry(0, 1, 0, None, b"a", 1) + _entry(1, 1, 0, None, b"b", 2)
    messages = decode_message_set(_gzip_wrapper(11, 1, inner, attributes=1 | 0x08, timestamp=999))
    assert [(m.offset, m.timestamp, m.timestamp_type) for m in messages] == [
        (10, 999, LOG_APPEND_TIME),
        (11, 999, LOG_APPEND_TIME),
    ]


def test_hand_built_magic0_wrapper_with_absolute_offsets():
    inner = _entry(300, 0, 0, b"k", b"a") + _entry(301, 0, 0, None, b"b")
    messages = decode_message_set(_gzip_wrapper(301, 0, inner))
    assert messages == [
        LegacyMessage(300, 0, 0, -1, NO_TIMESTAMP_TYPE, b"k", b"a"),
        LegacyMessage(301, 0, 0, -1, NO_TIMESTAMP_TYPE, None, b"b"),
    ]


def test_xxh32_known_values():
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


# ---------------------------------------------------------------- round trips


@st.composite
def legacy_messages(draw, magic: int, compressed: bool):
    """Messages as decode_message_set reports them, so a round trip must give them back."""
    n = draw(st.integers(0, 6))
    offset = draw(st.integers(0, 2**40))
    # A compressed wrapper has one timestamp type; in LogAppendTime one timestamp for all.
    wrapper_type = draw(st.sampled_from([CREATE_TIME, LOG_APPEND_TIME]))
    shared_ts = draw(st.integers(-1, 2**42))
    messages = []
    for i in range(n):
        if i:
            offset += draw(st.integers(1, 1000))
        upper_bits = draw(st.integers(0, 15)) << 4  # unused by Kafka, kept as they are
        if magic == 0:
            ts, ts_type, attributes = -1, NO_TIMESTAMP_TYPE, upper_bits
        else:
            ts_type = (
                wrapper_type
                if compressed
                else draw(st.sampled_from([CREATE_TIME, LOG_APPEND_TIME]))
            )
            same_ts = compressed and ts_type == LOG_APPEND_TIME
            ts = shared_ts if same_ts else draw(st.integers(-1, 2**42))
            attributes = upper_bits | (0x08 if ts_type == LOG_APPEND_TIME else 0)
        key = draw(st.one_of(st.none(), st.binary(max_size=30)))
        value = draw(st.one_of(st.none(), st.binary(max_size=300)))
        messages.append(LegacyMessage(offset, magic, attributes, ts, ts_type, key, value))
    return messages


@st.composite
def _magic_codec_messages(draw):
    magic = draw(st.sampled_from([0, 1]))
    codec = draw(st.sampled_from(LEGACY_CODECS))
    return magic, codec, draw(legacy_messages(magic, codec != Codec.NONE))


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", [0, 1])
@SOME
@given(data=st.data())
def test_round_trip(magic, codec, data):
    messages = data.draw(legacy_messages(magic, codec != Codec.NONE))
    buf = encode_message_set(messages, magic, codec)
    assert decode_message_set(buf) == messages
    assert decode_message_set(bytearray(buf)) == messages
    if messages:
        assert magic_of(buf) == magic


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_wrapper_layout(magic, codec):
    messages = [
        LegacyMessage(
            o,
            magic,
            0,
            10 * o if magic else -1,
            CREATE_TIME if magic else NO_TIMESTAMP_TYPE,
            None,
            b"x%d" % o,
        )
        for o in (20, 21, 25)
    ]
    buf = encode_message_set(messages, magic, codec)
    offset, size, _crc, wrapper_magic, attributes = struct.unpack_from(">qiIbb", buf)
    assert len(buf) == 12 + size, "one wrapper entry"
    assert (offset, wrapper_magic, attributes & 0x07) == (25, magic, int(codec))
    value_pos = 12 + 4 + 2 + (8 if magic else 0) + 4  # after the null key
    (value_len,) = struct.unpack_from(">i", buf, value_pos)
    compressed = buf[value_pos + 4 : value_pos + 4 + value_len]
    if codec == Codec.LZ4:  # a magic-0 frame has the Kafka 0.8 header checksum: fix it
        compressed = compressed[:6] + bytes((xxh32(compressed[4:6]) >> 8 & 0xFF,)) + compressed[7:]
    inner = decompress(codec, compressed)
    inner_offsets = []
    pos = 0
    while pos < len(inner):
        inner_offset, inner_size = struct.unpack_from(">qi", inner, pos)
        inner_offsets.append(inner_offset)
        pos += 12 + inner_size
    # Magic 1 inner offsets are relative to the first message; magic 0 ones absolute.
    assert inner_offsets == ([0, 1, 5] if magic else [20, 21, 25])
    if magic:
        (wrapper_ts,) = struct.unpack_from(">q", buf, 18)
        assert wrapper_ts == 250, "the wrapper carries the largest timestamp"


def test_magic0_lz4_writes_and_reads_kafka_08_header_checksum():
    messages = [LegacyMessage(3, 0, 0, -1, NO_TIMESTAMP_TYPE, b"k", b"v" * 100)]
    buf = encode_message_set(messages, 0, Codec.LZ4)
    frame = buf[12 + 4 + 2 + 4 + 4 :]
    assert frame[:4] == b"\x04\x22\x4d\x18"
    hc_pos = 6  # no content size in the descriptor
    broken = xxh32(frame[:hc_pos]) >> 8 & 0xFF  # over magic + descriptor, as Kafka 0.8 did
    correct = xxh32(frame[4:hc_pos]) >> 8 & 0xFF
    assert broken != correct and frame[hc_pos] == broken
    with pytest.raises(cramjam.DecompressionError):
        cramjam.lz4.decompress(frame)
    assert decode_message_set(buf) == messages


def test_magic0_lz4_with_a_correct_header_checksum_is_read_too():
    inner = _entry(0, 0, 0, None, b"hello")
    buf = _entry(0, 0, 3, None, bytes(cramjam.lz4.compress(inner)))
    assert [m.value for m in decode_message_set(buf)] == [b"hello"]


def test_magic1_lz4_with_the_broken_header_checksum_is_corrupt():
    frame = bytearray(cramjam.lz4.compress(_entry(0, 1, 0, None, b"hello", 1)))
    frame[6] = xxh32(bytes(frame[:6])) >> 8 & 0xFF
    assert frame[6] != xxh32(bytes(frame[4:6])) >> 8 & 0xFF
    with pytest.raises(CorruptRecordError):
        decode_message_set(_entry(0, 1, 3, None, bytes(frame), 1))


def test_encode_rejects_what_legacy_formats_cannot_hold():
    with pytest.raises(ValueError):
        encode_message_set([], 2)
    with pytest.raises(ValueError):
        encode_message_set([LegacyMessage(0, 1)], 1, Codec.ZSTD)


# ---------------------------------------------------------------- conversion to v2


@SOME
@given(sets=st.lists(_magic_codec_messages(), min_size=1, max_size=3))
def test_to_v2_batches_keeps_every_message(sets):
    buf = b"".join(encode_message_set(msgs, magic, codec) for magic, codec, msgs in sets)
    legacy = decode_message_set(buf)
    batches = to_v2_batches(buf)
    records = [r for b in batches for r in decode_batch(b).records]
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (m.offset, m.timestamp, m.key, m.value, ()) for m in legacy
    ]
    # v2 batches are what the log stores: they must scan as a log segment does.
    log = b"".join(batches)
    assert [h.record_count for _, h in scan_batches(log)] == [
        len(decode_batch(b).records) for b in batches
    ]
    for b in batches:
        assert magic_of(b) == 2


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_to_v2_batches_one_batch_per_entry_keeping_codec_and_time_type(codec):
    lat = [LegacyMessage(o, 1, 0x08, 777, LOG_APPEND_TIME, None, b"v") for o in (5, 6)]
    m0 = [LegacyMessage(o, 0, 0, -1, NO_TIMESTAMP_TYPE, b"k", None) for o in (7, 8)]
    buf = encode_message_set(lat, 1, codec) + encode_message_set(m0, 0, codec)
    batches = to_v2_batches(buf)
    assert len(batches) == (2 if codec != Codec.NONE else 4)
    first, last = read_header(batches[0]), read_header(batches[-1])
    assert first.compression == last.compression == codec
    assert first.timestamp_type == LOG_APPEND_TIME and first.max_timestamp == 777
    assert last.timestamp_type == CREATE_TIME and last.max_timestamp == -1
    assert read_header(batches[0]).base_offset == 5 and last.last_offset == 8


# ---------------------------------------------------------------- magic_of


def test_magic_of_reads_byte_16_of_any_format():
    v2 = encode_batch([])
    assert magic_of(v2) == 2
    assert magic_of(b"\x00" * 5 + v2, 5) == 2
    for short in (b"", b"\x00" * 16, v2[:16]):
        with pytest.raises(TruncatedBatchError):
            magic_of(short)


# ---------------------------------------------------------------- truncation and damage


def _sample_set() -> bytes:
    plain = [LegacyMessage(o, 1, 0, o, CREATE_TIME, b"k", b"value %d" % o) for o in (0, 1)]
    wrapped = [LegacyMessage(o, 1, 0, o, CREATE_TIME, None, b"w" * o) for o in (2, 3, 4)]
    return encode_message_set(plain, 1) + encode_message_set(wrapped, 1, Codec.GZIP)


def _entry_ends(buf: bytes) -> list[int]:
    ends, pos = [], 0
    while pos < len(buf):
        pos += 12 + struct.unpack_from(">i", buf, pos + 8)[0]
        ends.append(pos)
    return ends


def test_every_truncation_drops_only_the_partial_last_entry():
    buf = _sample_set()
    full = decode_message_set(buf)
    ends = _entry_ends(buf)
    assert len(ends) == 3 and len(full) == 5  # two plain entries, then a wrapper of three
    for n in range(len(buf) + 1):
        whole_entries = sum(1 for end in ends if end <= n)
        assert decode_message_set(buf[:n]) == full[: [0, 1, 2, 5][whole_entries]], n


@SOME
@given(data=st.data())
def test_any_flipped_byte_under_the_crc_is_corrupt(data):
    buf = _sample_set()
    ends = _entry_ends(buf)
    # Any byte from an entry's CRC field to its end.
    entry = data.draw(st.integers(0, len(ends) - 1))
    start = ends[entry - 1] if entry else 0
    pos = data.draw(st.integers(start + 12, ends[entry] - 1))
    damaged = bytearray(buf)
    damaged[pos] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptRecordError):
        decode_message_set(damaged)


@pytest.mark.parametrize("size", [-1, -(2**31), 0, 13])
def test_impossible_message_sizes_are_corrupt(size):
    with pytest.raises(CorruptRecordError):
        decode_message_set(struct.pack(">qi", 0, size) + b"\x00" * 40)


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("magic 1 too small for its timestamp", b"\x01\x00" + b"\x00" * 12),
        ("magic 2 is not a legacy message", b"\x02\x00" + b"\xff" * 20),
        ("key longer than the message", b"\x00\x00" + struct.pack(">i", 100) + b"\x00" * 8),
        ("key length below -1", b"\x00\x00" + struct.pack(">i", -2) + struct.pack(">i", -1)),
        ("bytes after the value", b"\x00\x00" + struct.pack(">ii", -1, -1) + b"extra"),
        ("magic 1 value length cut off", b"\x01\x00" + struct.pack(">qi", 0, 0) + b"\x00\x00"),
        ("magic 0 value length cut off", b"\x00\x00" + struct.pack(">i", 2) + b"ab" + b"\x00\x00"),
    ],
)
def test_inconsistent_messages_are_corrupt(name, body):
    with pytest.raises(CorruptRecordError):
        decode_message_set(_entry_from_body(0, body))


def test_v2_batch_is_not_a_legacy_message_set():
    with pytest.raises(CorruptRecordError):
        decode_message_set(encode_batch([]))


@pytest.mark.parametrize(
    ("name", "entry", "error"),
    [
        ("null wrapper value", _entry(0, 1, 1, None, None, 0), CorruptRecordError),
        ("no inner messages", _entry(0, 1, 1, None, gzip.compress(b"", mtime=0), 0), CorruptRecordError),
        ("not gzip at all", _entry(0, 1, 1, None, b"plain bytes", 0), CorruptRecordError),
        (
            "zstd before v2",
            _entry(0, 1, 4, None, bytes(cramjam.zstd.compress(b"x")), 0),
            UnsupportedCompressionError,
        ),
        ("unknown codec", _entry(0, 0, 6, None, b"x"), UnsupportedCompressionError),
        (
            "nested compression",
            _gzip_wrapper(0, 1, _gzip_wrapper(0, 1, _entry(0, 1, 0, None, b"x", 0))),
            CorruptRecordError,
        ),
        (
            "inner magic differs",
            _gzip_wrapper(0, 1, _entry(0, 0, 0, None, b"x")),
            CorruptRecordError,
        ),
        (
            "inner entry cut short",
            _gzip_wrapper(0, 0, _entry(0, 0, 0, None, b"x")[:-1]),
            CorruptRecordError,
        ),
        (
            "inner header cut short",
            _gzip_wrapper(0, 0, _entry(0, 0, 0, None, b"x") + b"\x00" * 5),
            CorruptRecordError,
        ),
        (
            "wrapper offset below the relative offsets",
            _gzip_wrapper(2, 1, _entry(0, 1, 0, None, b"x", 0) + _entry(5, 1, 0, None, b"y", 0)),
            CorruptRecordError,
        ),
    ],
)
def test_bad_wrappers(name, entry, error):
    with pytest.raises(error):
        decode_message_set(entry)
    with pytest.raises(error):
        to_v2_batches(entry)


@pytest.mark.parametrize(
    ("name", "entry"),
    [
        (
            "offsets go back",
            _gzip_wrapper(10, 0, _entry(10, 0, 0, None, b"a") + _entry(3, 0, 0, None, b"b")),
        ),
        (
            "offsets repeat",
            _gzip_wrapper(1, 1, _entry(1, 1, 0, None, b"a", 0) + _entry(1, 1, 0, None, b"b", 0)),
        ),
        (
            "offsets span more than int32",
            _gzip_wrapper(2**40, 0, _entry(0, 0, 0, None, b"a") + _entry(2**40, 0, 0, None, b"b")),
        ),
        (
            "timestamps span more than int64",
            _gzip_wrapper(
                1, 1, _entry(0, 1, 0, None, b"a", -(2**63)) + _entry(1, 1, 0, None, b"b", 2**63 - 1)
            ),
        ),
    ],
)
def test_wrappers_a_v2_batch_cannot_hold(name, entry):
    assert len(decode_message_set(entry)) == 2  # readable as they are ...
    with pytest.raises(CorruptRecordError):  # ... but not as one v2 batch
        to_v2_batches(entry)


# ---------------------------------------------------------------- fuzzing


def _assert_only_records_errors(buf: bytes) -> None:
    """Decoding fails with a records error or works; converted batches must then be valid."""
    try:
        magic_of(buf)
    except RecordsError:
        pass
    try:
        messages = decode_message_set(buf)
    except RecordsError:
        messages = None
    try:
        batches = to_v2_batches(buf)
    except RecordsError:
        return
    assert messages is not None
    records = [r for b in batches for r in decode_batch(b).records]
    assert [(r.offset, r.key, r.value) for r in records] == [
        (m.offset, m.key, m.value) for m in messages
    ]


record_ish_bytes = st.lists(
    st.one_of(
        st.sampled_from(
            [b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x00\x00\x00\x01", b"\x00", b"\x7f"]
        ),
        st.binary(max_size=4),
    ),
    max_size=12,
).map(b"".join)


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_records_errors(buf):
    _assert_only_records_errors(buf)


@settings(max_examples=examples(300), deadline=None)
@given(
    offset=st.integers(-(2**63), 2**63 - 1),
    magic=st.integers(0, 3),
    attributes=st.integers(0, 255),
    rest=record_ish_bytes,
)
def test_random_messages_under_a_valid_crc(offset, magic, attributes, rest):
    _assert_only_records_errors(_entry_from_body(offset, bytes((magic, attributes)) + rest))


# Small offsets and timestamps mostly, and now and then ones as far apart as int64 allows.
_anywhere = st.one_of(st.integers(-3, 3), st.integers(-(2**63), 2**63 - 1))


@st.composite
def inner_sets(draw, magic: int) -> bytes:
    """Inner message sets: mostly well-formed messages of the wrapper's magic, some junk."""
    parts = []
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.integers(0, 7)) == 0:
            parts.append(draw(record_ish_bytes))
            continue
        inner_magic = draw(st.sampled_from([magic] * 7 + [1 - magic]))
        attributes = draw(st.sampled_from([0, 0, 0, 0, 0x08, 0x11, 0x04]))
        key, value = draw(st.one_of(st.none(), st.binary(max_size=8))), draw(st.binary(max_size=8))
        parts.append(_entry(draw(_anywhere), inner_magic, attributes, key, value, draw(_anywhere)))
    return b"".join(parts)


@settings(max_examples=examples(200), deadline=None)
@given(
    magic=st.integers(0, 1),
    codec=st.sampled_from(LEGACY_CODECS[1:]),
    offset=_anywhere,
    data=st.data(),
)
def test_random_inner_sets_under_a_valid_wrapper(magic, codec, offset, data):
    value = compress(codec, data.draw(inner_sets(magic)))
    _assert_only_records_errors(_entry(offset, magic, int(codec), None, value, 0))


@SOME
@given(data=st.data())
def test_random_flips_raise_only_records_errors(data):
    magic, codec, messages = data.draw(_magic_codec_messages())
    buf = bytearray(encode_message_set(messages, magic, codec) or _sample_set())
    for _ in range(data.draw(st.integers(1, 4))):
        buf[data.draw(st.integers(0, len(buf) - 1))] ^= data.draw(st.integers(1, 255))
    _assert_only_records_errors(bytes(buf))
