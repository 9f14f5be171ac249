"""The __consumer_offsets key/value formats and the group partitioner, checked byte for byte
against Apache Kafka's: vectors built field by field from Kafka's JSON schemas, vectors written
by Kafka's own generated message classes, the defaults Kafka's readers give missing fields,
round trips of every version, tombstones, unknown record types, and a fuzz test that nothing but
CorruptOffsetsRecordError escapes the decoders."""


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.examples import examples

from brook.coordinator.group.consumer_schemas import decode_key as any_key
from brook.coordinator.group.consumer_schemas import decode_value as any_value
from brook.coordinator.group.partitioner import java_abs, java_string_hash, partition_for
from brook.coordinator.group.schemas import (
    CorruptOffsetsRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# --------------------------------------------------------------------------------------------
# The partitioner


@pytest.mark.parametrize(
    "group, partition",
    [("testgroup", 27), ("my-group", 12), ("polygenelubricants", 0)],
)
def test_partition_for_known_vectors(group, partition):
    assert partition_for(group, 50) == partition


def test_polygenelubricants_hashes_to_integer_min_value():
    assert java_string_hash("polygenelubricants") == INT32_MIN
    assert java_abs(INT32_MIN) == 0


def test_java_abs_is_the_true_absolute_value_otherwise():
    # Utils.abs is Math.abs except at MIN_VALUE; masking the sign bit would give 2**31 - 5 here.
    assert java_abs(-5) == 5
    assert java_abs(INT32_MAX) == INT32_MAX
    assert java_abs(0) == 0


# Computed once with OpenJDK 17: a ten-line Java program printing, for each id, s.hashCode() and
# (h == Integer.MIN_VALUE ? 0 : Math.abs(h)) % n for n = 50, 7 and 1000 (ids written with \u
# escapes in the Java source, so no source-encoding question arises).
JAVA_VECTORS = [
    # (id, String.hashCode(), % 50, % 7, % 1000)
    ("", 0, 0, 0, 0),
    ("a", 97, 47, 6, 97),
    ("console-consumer-12345", 158455506, 6, 6, 506),
    ("gr\u00fcppe", -1233264812, 12, 3, 812),
    ("\u6d88\u8d39\u8005\u7ec4", 871131088, 38, 2, 88),
    ("\u0433\u0440\u0443\u043f\u043f\u0430", 1749938458, 8, 2, 458),
    ("\U0001f600group", -1231696132, 32, 2, 132),  # non-BMP: two surrogates
    ("\U0001d518\U0001d52b\U0001d526", -2106254422, 22, 6, 422),
    ("caf\u00e9-\U0001f40d-\u20ac", -1138890309, 9, 4, 309),
    ("lone-\ud800", -1097077395, 45, 1, 395),  # a lone surrogate is one code unit
    ("\uffff\uffff", 2097120, 20, 4, 120),
    ("\U0001f600", 1772899, 49, 2, 899),
]


@pytest.mark.parametrize("group, java_hash, p50, p7, p1000", JAVA_VECTORS)
def test_partition_for_matches_java(group, java_hash, p50, p7, p1000):
    assert java_string_hash(group) == java_hash
    assert partition_for(group, 50) == p50
    assert partition_for(group, 7) == p7
    assert partition_for(group, 1000) == p1000
    assert partition_for(group, 1) == 0


def test_non_bmp_characters_hash_as_two_utf16_code_units():
    # Hashing code points instead would give U+1F600 itself: 128512.
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00 != 0x1F600


@given(st.text())
def test_partition_for_is_in_range(group):
    for n in (1, 3, 50, 1000):
        assert 0 <= partition_for(group, n) < n


def test_partition_for_needs_partitions():
    with pytest.raises(ValueError):
        partition_for("g", 0)


# --------------------------------------------------------------------------------------------
# Building bytes field by field, as the JSON schemas describe them


from tests.support.schema_bytes import (  # noqa: E402
    byts,
    compact_bytes,
    compact_nullable_string,
    compact_string,
    i16,
    i32,
    i64,
    nullable_string,
    string,
    uvarint,
)

NO_TAGS = b"\x00"

GROUP = "gr\u00fcppe"
OC_KEY = OffsetCommitKey(GROUP, "orders", 7)
GM_KEY = GroupMetadataKey(GROUP)
OC_VALUE = OffsetCommitValue(1234567890123, 5, "meta\u2713", 1700000000000)
OC_VALUE_EXPIRY = OffsetCommitValue(42, -1, "", 1700000000000, 1700000600000)
MEMBERS = (
    MemberMetadata("m-1", "inst-1", "c1", "/10.0.0.1", 300000, 45000, b"\x00\x01\x02", b"\x03\x04"),
    MemberMetadata("m-2", None, "c2", "/10.0.0.2", 60000, 10000, b"", b"\xff"),
)
GM_VALUE = GroupMetadataValue("consumer", 3, "range", "m-1", 1700000000123, MEMBERS)
GM_EMPTY = GroupMetadataValue("", 0, None, None, 1700000000999, ())


def offset_commit_key_bytes(version, k):
    return i16(version) + string(k.group) + string(k.topic) + i32(k.partition)


def offset_commit_value_bytes(version, v):
    if version == 0 or version == 2:  # offset, metadata, (commit) timestamp
        return i16(version) + i64(v.offset) + string(v.metadata) + i64(v.commit_timestamp)
    if version == 1:  # + expire timestamp
        return (
            i16(1)
            + i64(v.offset)
            + string(v.metadata)
            + i64(v.commit_timestamp)
            + i64(v.expire_timestamp)
        )
    if version == 3:  # + leader epoch after the offset
        return (
            i16(3)
            + i64(v.offset)
            + i32(v.leader_epoch)
            + string(v.metadata)
            + i64(v.commit_timestamp)
        )
    assert version == 4  # flexible
    return (
        i16(4)
        + i64(v.offset)
        + i32(v.leader_epoch)
        + compact_string(v.metadata)
        + i64(v.commit_timestamp)
        + NO_TAGS
    )


def group_metadata_value_bytes(version, v):
    if version == 4:
        out = (
            i16(4)
            + compact_string(v.protocol_type)
            + i32(v.generation)
            + compact_nullable_string(v.protocol)
            + compact_nullable_string(v.leader)
            + i64(v.current_state_timestamp)
            + uvarint(len(v.members) + 1)
        )
        for m in v.members:
            out += (
                compact_string(m.member_id)
                + compact_nullable_string(m.group_instance_id)
                + compact_string(m.client_id)
                + compact_string(m.client_host)
                + i32(m.rebalance_timeout)
                + i32(m.session_timeout)
                + compact_bytes(m.subscription)
                + compact_bytes(m.assignment)
                + NO_TAGS
            )
        return out + NO_TAGS
    out = (
        i16(version)
        + string(v.protocol_type)
        + i32(v.generation)
        + nullable_string(v.protocol)
        + nullable_string(v.leader)
    )
    if version >= 2:
        out += i64(v.current_state_timestamp)
    out += i32(len(v.members))
    for m in v.members:
        out += string(m.member_id)
        if version >= 3:
            out += nullable_string(m.group_instance_id)
        out += string(m.client_id) + string(m.client_host)
        if version >= 1:
            out += i32(m.rebalance_timeout)
        out += i32(m.session_timeout) + byts(m.subscription) + byts(m.assignment)
    return out


# Written by Apache Kafka's own classes: the message generator run over Kafka's JSON schemas
# (group-coordinator/src/main/resources/common/message), the generated OffsetCommitKey,
# OffsetCommitValue, GroupMetadataKey and GroupMetadataValue filled with the values above and
# serialized with MessageUtil.toVersionPrefixedBytes(version, message), once, on OpenJDK 17.
KAFKA_BYTES = {
    ("key", 0): "000000076772c3bc70706500066f726465727300000007",
    ("key", 1): "000100076772c3bc70706500066f726465727300000007",
    ("group key", 2): "000200076772c3bc707065",
    ("offset", 0): "00000000011f71fb04cb00076d657461e29c930000018bcfe56800",
    ("offset", 1): "00010000011f71fb04cb00076d657461e29c930000018bcfe56800ffffffffffffffff",
    ("offset", 2): "00020000011f71fb04cb00076d657461e29c930000018bcfe56800",
    ("offset", 3): "00030000011f71fb04cb0000000500076d657461e29c930000018bcfe56800",
    ("offset", 4): "00040000011f71fb04cb00000005086d657461e29c930000018bcfe5680000",
    ("offset expiry", 1): "0001000000000000002a00000000018bcfe568000000018bcfee8fc0",
    ("group", 0): "00000008636f6e73756d657200000003000572616e676500036d2d310000000200036d2d3100"
    "02633100092f31302e302e302e310000afc80000000300010200000002030400036d2d32000263"
    "3200092f31302e302e302e32000027100000000000000001ff",
    ("group", 1): "00010008636f6e73756d657200000003000572616e676500036d2d310000000200036d2d3100"
    "02633100092f31302e302e302e31000493e00000afc80000000300010200000002030400036d2d"
    "320002633200092f31302e302e302e320000ea60000027100000000000000001ff",
    ("group", 2): "00020008636f6e73756d657200000003000572616e676500036d2d310000018bcfe5687b0000"
    "000200036d2d310002633100092f31302e302e302e31000493e00000afc8000000030001020000"
    "0002030400036d2d320002633200092f31302e302e302e320000ea60000027100000000000000001ff",
    ("group", 3): "00030008636f6e73756d657200000003000572616e676500036d2d310000018bcfe5687b0000"
    "000200036d2d310006696e73742d310002633100092f31302e302e302e31000493e00000afc800"
    "00000300010200000002030400036d2d32ffff0002633200092f31302e302e302e320000ea6000"
    "0027100000000000000001ff",
    ("group", 4): "000409636f6e73756d6572000000030672616e6765046d2d310000018bcfe5687b03046d2d31"
    "07696e73742d310363310a2f31302e302e302e31000493e00000afc80400010203030400046d2d"
    "32000363320a2f31302e302e302e320000ea60000027100102ff0000",
    ("empty group", 3): "0003000000000000ffffffff0000018bcfe56be700000000",
    ("empty group", 4): "0004010000000000000000018bcfe56be70100",
}


def kafka_bytes(kind, version):
    return bytes.fromhex(KAFKA_BYTES[(kind, version)])


def test_the_hand_built_vectors_are_kafkas():
    for version in (0, 1):
        assert offset_commit_key_bytes(version, OC_KEY) == kafka_bytes("key", version)
    assert i16(2) + string(GROUP) == kafka_bytes("group key", 2)
    for version in range(5):
        assert offset_commit_value_bytes(version, OC_VALUE) == kafka_bytes("offset", version)
        assert group_metadata_value_bytes(version, GM_VALUE) == kafka_bytes("group", version)
    assert offset_commit_value_bytes(1, OC_VALUE_EXPIRY) == kafka_bytes("offset expiry", 1)
    for version in (3, 4):
        assert group_metadata_value_bytes(version, GM_EMPTY) == kafka_bytes("empty group", version)


# --------------------------------------------------------------------------------------------
# What brook writes: exactly what Kafka writes today


def test_offset_commit_key_is_written_as_version_1():
    assert encode_key(OC_KEY) == kafka_bytes("key", 1)
    assert encode_key(OC_KEY).hex() == (
        "0001"  # record type (key version) 1
        "0007" + GROUP.encode().hex()  # group
        + "0006" + b"orders".hex()  # topic
        + "00000007"  # partition
    )


def test_group_metadata_key_is_written_as_version_2():
    assert encode_key(GM_KEY) == kafka_bytes("group key", 2)


def test_offset_commit_value_is_written_as_version_3():
    assert encode_value(OC_VALUE) == kafka_bytes("offset", 3)


def test_offset_commit_value_with_expire_timestamp_is_written_as_version_1():
    assert encode_value(OC_VALUE_EXPIRY) == kafka_bytes("offset expiry", 1)
    # Version 1 has no leader epoch: Kafka drops it, and so does brook.
    with_epoch = OffsetCommitValue(42, 9, "", 1700000000000, 1700000600000)
    assert encode_value(with_epoch) == kafka_bytes("offset expiry", 1)
    assert decode_value(OC_KEY, encode_value(with_epoch)) == OC_VALUE_EXPIRY


def test_group_metadata_value_is_written_as_version_3():
    assert encode_value(GM_VALUE) == kafka_bytes("group", 3)
    assert encode_value(GM_EMPTY) == kafka_bytes("empty group", 3)


def test_a_tombstone_is_a_null_value():
    assert encode_value(None) is None
    assert decode_value(OC_KEY, None) is None
    assert decode_value(GM_KEY, None) is None


@pytest.mark.parametrize("version", range(5))
def test_every_version_is_written_as_kafka_writes_it(version):
    assert encode_value(OC_VALUE, version) == kafka_bytes("offset", version)
    assert encode_value(GM_VALUE, version) == kafka_bytes("group", version)


def test_key_version_0_can_be_written():
    assert encode_key(OC_KEY, 0) == kafka_bytes("key", 0)


def test_default_values():
    assert OffsetCommitValue(7) == OffsetCommitValue(7, -1, "", -1, -1)


# --------------------------------------------------------------------------------------------
# What brook reads, with the defaults Kafka's readers give fields a version lacks


@pytest.mark.parametrize("version", (0, 1))
def test_offset_commit_key_versions_0_and_1_read_alike(version):
    assert decode_key(kafka_bytes("key", version)) == OC_KEY


def test_group_metadata_key_reads():
    assert decode_key(kafka_bytes("group key", 2)) == GM_KEY


@pytest.mark.parametrize(
    "version, expected",
    [
        (0, OffsetCommitValue(1234567890123, -1, "meta\u2713", 1700000000000, -1)),
        (1, OffsetCommitValue(1234567890123, -1, "meta\u2713", 1700000000000, -1)),
        (2, OffsetCommitValue(1234567890123, -1, "meta\u2713", 1700000000000, -1)),
        (3, OC_VALUE),
        (4, OC_VALUE),
    ],
)
def test_offset_commit_value_versions(version, expected):
    assert decode_value(OC_KEY, kafka_bytes("offset", version)) == expected


def test_offset_commit_value_version_1_keeps_its_expire_timestamp():
    assert decode_value(OC_KEY, kafka_bytes("offset expiry", 1)) == OC_VALUE_EXPIRY


def _members(version):
    out = []
    for m in MEMBERS:
        out.append(
            MemberMetadata(
                m.member_id,
                m.group_instance_id if version >= 3 else None,
                m.client_id,
                m.client_host,
                # Version 0 has no rebalance timeout: Kafka's readers use the session timeout.
                m.rebalance_timeout if version >= 1 else m.session_timeout,
                m.session_timeout,
                m.subscription,
                m.assignment,
            )
        )
    return tuple(out)


@pytest.mark.parametrize("version", range(5))
def test_group_metadata_value_versions(version):
    expected = GroupMetadataValue(
        "consumer",
        3,
        "range",
        "m-1",
        1700000000123 if version >= 2 else -1,
        _members(version),
    )
    assert decode_value(GM_KEY, kafka_bytes("group", version)) == expected


@pytest.mark.parametrize("version", (3, 4))
def test_empty_group_metadata(version):
    assert decode_value(GM_KEY, kafka_bytes("empty group", version)) == GM_EMPTY


def test_decoded_members_are_a_tuple_of_bytes_fields():
    value = decode_value(GM_KEY, kafka_bytes("group", 3))
    assert isinstance(value.members, tuple)
    assert all(type(m.subscription) is bytes and type(m.assignment) is bytes for m in value.members)


def test_memoryview_and_bytearray_input():
    data = kafka_bytes("offset", 3)
    assert decode_value(OC_KEY, memoryview(data)) == OC_VALUE
    assert decode_value(OC_KEY, bytearray(data)) == OC_VALUE
    assert decode_key(memoryview(kafka_bytes("key", 1))) == OC_KEY


def test_decoded_records_are_frozen_and_hashable():
    key = decode_key(kafka_bytes("key", 1))
    value = decode_value(key, kafka_bytes("offset", 3))
    assert {key: value}[OC_KEY] == OC_VALUE
    assert hash(value) == hash(OC_VALUE)
    with pytest.raises(AttributeError):
        value.offset = 1


# Flexible versions: unknown tagged fields are skipped, in the value and in each member.


def test_unknown_tagged_fields_are_skipped():
    two_tags = uvarint(2) + uvarint(0) + uvarint(3) + b"abc" + uvarint(200) + uvarint(1) + b"z"
    data = offset_commit_value_bytes(4, OC_VALUE)[:-1] + two_tags
    assert decode_value(OC_KEY, data) == OC_VALUE

    member_tag = uvarint(1) + uvarint(7) + uvarint(2) + b"\x01\x02"
    m = MEMBERS[0]
    data = (
        i16(4)
        + compact_string("consumer")
        + i32(3)
        + compact_nullable_string("range")
        + compact_nullable_string("m-1")
        + i64(1700000000123)
        + uvarint(2)
        + compact_string(m.member_id)
        + compact_nullable_string(m.group_instance_id)
        + compact_string(m.client_id)
        + compact_string(m.client_host)
        + i32(m.rebalance_timeout)
        + i32(m.session_timeout)
        + compact_bytes(m.subscription)
        + compact_bytes(m.assignment)
        + member_tag
        + two_tags
    )
    assert decode_value(GM_KEY, data) == GroupMetadataValue(
        "consumer", 3, "range", "m-1", 1700000000123, (m,)
    )


@pytest.mark.parametrize("version", (5, 6, 0x7FFF))
def test_versions_past_4_read_with_the_layout_of_4(version):
    # KIP-915: newer values only add tagged fields, so Kafka reads them as the newest it knows.
    tag = uvarint(1) + uvarint(0) + uvarint(1) + b"\x2a"
    data = i16(version) + offset_commit_value_bytes(4, OC_VALUE)[2:-1] + tag
    assert decode_value(OC_KEY, data) == OC_VALUE
    data = i16(version) + kafka_bytes("group", 4)[2:]
    assert decode_value(GM_KEY, data) == decode_value(GM_KEY, kafka_bytes("group", 4))


def test_bytes_after_the_last_field_are_ignored_as_kafka_does():
    assert decode_key(kafka_bytes("key", 1) + b"\x00junk") == OC_KEY
    assert decode_key(kafka_bytes("group key", 2) + b"\x01") == GM_KEY
    for version in range(5):
        assert decode_value(OC_KEY, kafka_bytes("offset", version) + b"\xff") is not None
        assert decode_value(GM_KEY, kafka_bytes("group", version) + b"\x00\x00") is not None


def test_any_negative_length_of_a_nullable_string_is_null():
    data = i16(3) + string("consumer") + i32(1) + i16(-2) + i16(-32768) + i64(-1) + i32(0)
    assert decode_value(GM_KEY, data) == GroupMetadataValue("consumer", 1, None, None, -1, ())


# --------------------------------------------------------------------------------------------
# Record types this coordinator does not read


@pytest.mark.parametrize("version", [3, 4, 5, 8, 15, 16, 100, 0x7FFF, -1, -32768])
def test_other_record_types_are_unknown_keys(version):
    assert decode_key(i16(version) + b"whatever follows") == UnknownKey(version)
    assert decode_key(i16(version)) == UnknownKey(version)


def test_an_unknown_key_has_no_value_to_decode():
    with pytest.raises(TypeError):
        decode_value(UnknownKey(5), b"\x00\x00")


# --------------------------------------------------------------------------------------------
# Corrupt bytes


def _corrupt(fn, *args):
    with pytest.raises(CorruptOffsetsRecordError):
        fn(*args)


VALUE_VECTORS = [(kind, version) for kind, version in KAFKA_BYTES if "key" not in kind]


@pytest.mark.parametrize("kind, version", VALUE_VECTORS)
def test_values_truncated_at_every_byte_are_corrupt(kind, version):
    data = kafka_bytes(kind, version)
    key = OC_KEY if kind.startswith("offset") else GM_KEY
    for n in range(len(data)):
        _corrupt(decode_value, key, data[:n])


@pytest.mark.parametrize("kind, version", [("key", 0), ("key", 1), ("group key", 2)])
def test_keys_truncated_at_every_byte_are_corrupt(kind, version):
    data = kafka_bytes(kind, version)
    for n in range(len(data)):
        _corrupt(decode_key, data[:n])


def test_a_missing_key_is_corrupt():
    _corrupt(decode_key, None)


def test_negative_value_versions_are_corrupt():
    _corrupt(decode_value, OC_KEY, i16(-1) + kafka_bytes("offset", 0)[2:])
    _corrupt(decode_value, GM_KEY, i16(-3) + kafka_bytes("group", 0)[2:])


def test_null_where_no_null_is_allowed_is_corrupt():
    _corrupt(decode_key, i16(1) + i16(-1) + string("t") + i32(0))  # group
    _corrupt(decode_key, i16(1) + string("g") + i16(-1) + i32(0))  # topic
    _corrupt(decode_key, i16(2) + i16(-1))
    _corrupt(decode_value, OC_KEY, i16(3) + i64(1) + i32(-1) + i16(-1) + i64(0))  # metadata
    _corrupt(decode_value, OC_KEY, i16(4) + i64(1) + i32(-1) + b"\x00" + i64(0) + NO_TAGS)
    _corrupt(decode_value, GM_KEY, i16(3) + i16(-1) + i32(0) + i16(-1) * 2 + i64(0) + i32(0))
    _corrupt(decode_value, GM_KEY, i16(3) + string("") + i32(0) + i16(-1) * 2 + i64(0) + i32(-1))
    member_v0 = string("m") + string("c") + string("h") + i32(1000)
    head_v0 = i16(0) + string("consumer") + i32(1) + string("range") + string("m") + i32(1)
    _corrupt(decode_value, GM_KEY, head_v0 + member_v0 + i32(-1) + byts(b""))  # subscription
    _corrupt(decode_value, GM_KEY, head_v0 + member_v0 + byts(b"") + i32(-1))  # assignment
    assert decode_value(GM_KEY, head_v0 + member_v0 + byts(b"") + byts(b"")) is not None


def test_impossible_member_counts_are_corrupt():
    head = i16(3) + string("consumer") + i32(1) + string("range") + string("m") + i64(0)
    _corrupt(decode_value, GM_KEY, head + i32(INT32_MAX))
    flex = (
        i16(4)
        + compact_string("consumer")
        + i32(1)
        + compact_string("range")
        + compact_string("m")
        + i64(0)
    )
    _corrupt(decode_value, GM_KEY, flex + uvarint(1000))
    _corrupt(decode_value, GM_KEY, flex + uvarint(0))  # a null array


def test_bad_varints_are_corrupt():
    head = i16(4) + i64(1) + i32(-1)
    _corrupt(decode_value, OC_KEY, head + b"\x80\x80\x80\x80\x80\x01")  # six bytes
    _corrupt(decode_value, OC_KEY, head + b"\x80\x80")  # runs past the end
    # A compact string longer than Kafka's strings may be.
    _corrupt(decode_value, OC_KEY, head + uvarint(0x8000 + 1) + b"x" * 0x8000 + i64(0) + NO_TAGS)
    # A tagged field longer than what is left, and one of negative size as a Java int.
    value = offset_commit_value_bytes(4, OC_VALUE)[:-1]
    _corrupt(decode_value, OC_KEY, value + uvarint(1) + uvarint(0) + uvarint(5) + b"ab")
    _corrupt(decode_value, OC_KEY, value + uvarint(1) + uvarint(0) + b"\xff\xff\xff\xff\x0f")


def test_invalid_utf8_is_corrupt():
    _corrupt(decode_key, i16(1) + i16(2) + b"\xc3\x28" + string("t") + i32(0))
    _corrupt(decode_key, i16(2) + i16(1) + b"\xff")
    _corrupt(decode_value, OC_KEY, i16(3) + i64(1) + i32(-1) + i16(1) + b"\x80" + i64(0))
    # An encoded surrogate (CESU-8) is not UTF-8 either.
    _corrupt(decode_key, i16(2) + i16(3) + b"\xed\xa0\x80")


# --------------------------------------------------------------------------------------------
# Encoding errors


def test_encoding_refuses_what_does_not_fit():
    with pytest.raises(ValueError):
        encode_key(OffsetCommitKey("g" * 0x8000, "t", 0))
    with pytest.raises(ValueError):
        encode_key(OffsetCommitKey("g", "t", 2**31))
    with pytest.raises(ValueError):
        encode_value(OffsetCommitValue(2**63))
    with pytest.raises(ValueError):
        encode_value(OC_VALUE, 5)
    with pytest.raises(ValueError):
        encode_key(GM_KEY, 1)
    with pytest.raises(TypeError):
        encode_key(UnknownKey(3))
    with pytest.raises(TypeError):
        encode_value("not a value")
    with pytest.raises(TypeError):
        encode_key(OffsetCommitKey(b"g", "t", 0))


def test_a_string_of_32767_utf8_bytes_is_the_longest():
    key = OffsetCommitKey("\u00e9" * 16383 + "x", "t", 0)
    assert decode_key(encode_key(key)) == key
    with pytest.raises(ValueError):
        encode_key(OffsetCommitKey("\u00e9" * 16384, "t", 0))


# --------------------------------------------------------------------------------------------
# Round trips of every version

texts = st.text(max_size=40)
int32s = st.integers(INT32_MIN, INT32_MAX)
int64s = st.integers(INT64_MIN, INT64_MAX)
blobs = st.binary(max_size=64)

offset_commit_keys = st.builds(OffsetCommitKey, texts, texts, int32s)
offset_commit_values = st.builds(OffsetCommitValue, int64s, int32s, texts, int64s, int64s)
members = st.builds(
    MemberMetadata, texts, st.none() | texts, texts, texts, int32s, int32s, blobs, blobs
)
group_metadata_values = st.builds(
    GroupMetadataValue,
    texts,
    int32s,
    st.none() | texts,
    st.none() | texts,
    int64s,
    st.lists(members, max_size=4).map(tuple),
)


def offset_commit_value_as_read(v, version):
    """What a version keeps of a value, with the reader's defaults for the rest."""
    return OffsetCommitValue(
        v.offset,
        v.leader_epoch if version >= 3 else -1,
        v.metadata,
        v.commit_timestamp,
        v.expire_timestamp if version == 1 else -1,
    )


def group_metadata_value_as_read(v, version):
    return GroupMetadataValue(
        v.protocol_type,
        v.generation,
        v.protocol,
        v.leader,
        v.current_state_timestamp if version >= 2 else -1,
        tuple(
            MemberMetadata(
                m.member_id,
                m.group_instance_id if version >= 3 else None,
                m.client_id,
                m.client_host,
                m.rebalance_timeout if version >= 1 else m.session_timeout,
                m.session_timeout,
                m.subscription,
                m.assignment,
            )
            for m in v.members
        ),
    )


@given(offset_commit_keys, st.sampled_from([None, 0, 1]))
def test_offset_commit_key_round_trip(key, version):
    data = encode_key(key, version)
    assert data == offset_commit_key_bytes(1 if version is None else version, key)
    assert decode_key(data) == key


@given(texts)
def test_group_metadata_key_round_trip(group):
    key = GroupMetadataKey(group)
    assert encode_key(key) == i16(2) + string(group)
    assert decode_key(encode_key(key)) == key


@given(offset_commit_values, st.integers(0, 4))
def test_offset_commit_value_round_trip(value, version):
    data = encode_value(value, version)
    assert data == offset_commit_value_bytes(version, value)
    assert decode_value(OC_KEY, data) == offset_commit_value_as_read(value, version)


@given(offset_commit_values)
def test_offset_commit_value_round_trip_as_written(value):
    version = 1 if value.expire_timestamp != -1 else 3
    assert decode_value(OC_KEY, encode_value(value)) == offset_commit_value_as_read(value, version)


@given(group_metadata_values, st.integers(0, 4))
def test_group_metadata_value_round_trip(value, version):
    data = encode_value(value, version)
    assert data == group_metadata_value_bytes(version, value)
    assert decode_value(GM_KEY, data) == group_metadata_value_as_read(value, version)


@given(group_metadata_values)
def test_group_metadata_value_round_trip_as_written(value):
    assert decode_value(GM_KEY, encode_value(value)) == value


# --------------------------------------------------------------------------------------------
# Fuzz: nothing but CorruptOffsetsRecordError on bad bytes


def _decode_or_corrupt(key, data):
    try:
        return decode_value(key, data)
    except CorruptOffsetsRecordError:
        return None


@settings(max_examples=examples(500))
@given(st.binary(max_size=80))
def test_fuzz_random_bytes(data):
    try:
        key = decode_key(data)
    except CorruptOffsetsRecordError:
        key = None
    assert key is None or isinstance(key, (OffsetCommitKey, GroupMetadataKey, UnknownKey))
    for version in range(6):
        _decode_or_corrupt(OC_KEY, i16(version) + data)
        _decode_or_corrupt(GM_KEY, i16(version) + data)
    _decode_or_corrupt(OC_KEY, data)
    _decode_or_corrupt(GM_KEY, data)


@st.composite
def mutated(draw, vectors):
    data = bytearray(draw(vectors))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["cut", "set", "insert", "append"]))
        if op == "cut" and data:
            del data[draw(st.integers(0, len(data) - 1)) :]
        elif op == "set" and data:
            data[draw(st.integers(0, len(data) - 1))] = draw(
                st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xC3, 0xFE, 0xFF])
            )
        elif op == "insert":
            data.insert(draw(st.integers(0, len(data))), draw(st.integers(0, 255)))
        elif op == "append":
            data += draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


value_vectors = st.sampled_from(
    [bytes.fromhex(h) for (kind, _), h in KAFKA_BYTES.items() if "key" not in kind]
)
key_vectors = st.sampled_from(
    [bytes.fromhex(h) for (kind, _), h in KAFKA_BYTES.items() if "key" in kind]
)


@settings(max_examples=examples(1000))
@given(mutated(value_vectors), mutated(key_vectors))
def test_fuzz_mutated_records(value, key):
    for k in (OC_KEY, GM_KEY):
        result = _decode_or_corrupt(k, value)
        assert result is None or isinstance(result, (OffsetCommitValue, GroupMetadataValue))
    try:
        decode_key(key)
    except CorruptOffsetsRecordError:
        pass


# --------------------------------------------------------------------------------------------
# Whole batches: RecordsDecoder's runs of plain commits against record-by-record decoding

from brook.coordinator.group.commit_runs import CommitRun  # noqa: E402
from brook.coordinator.group.batch_decoder import DecodedRecord, RecordsDecoder  # noqa: E402
from brook.records import Record as BatchRecord  # noqa: E402
from brook.records import encode_batch  # noqa: E402
from brook.records.batch import HEADER_SIZE, decode_records, read_header  # noqa: E402
from brook.records.errors import RecordsError  # noqa: E402


def batch_body(pairs, timestamps=None, base_offset=0):
    """The records section of a batch of (key, value) byte pairs."""
    timestamps = timestamps or [1_700_000_000_000] * len(pairs)
    batch = encode_batch(
        [BatchRecord(base_offset + i, ts, k, v)
         for i, ((k, v), ts) in enumerate(zip(pairs, timestamps))],
        base_offset=base_offset,
    )
    return batch[HEADER_SIZE:], read_header(batch).record_count


def general(body, count):
    """Record by record: brook.records' framing, then decode_key and decode_value (those of
    every record type, consumer groups' too)."""
    out = []
    for record in decode_records(body, count, 0, 0):
        key = any_key(record.key)
        out.append((key, None if isinstance(key, UnknownKey) else any_value(key, record.value)))
    return out


def fast(body, count, decoder=None):
    """RecordsDecoder's answer, runs spelled out as the records they stand for."""
    out = []
    for item in (decoder or RecordsDecoder()).decode(body, count):
        if type(item) is CommitRun:
            out += [
                (OffsetCommitKey(item.group, item.topic, p), OffsetCommitValue(o, e, "", c))
                for p, o, e, c in item.rows
            ]
        else:
            assert type(item) is DecodedRecord
            out.append((item.key, item.value))
    return out


def runs(body, count):
    return [len(list(i.rows)) for i in RecordsDecoder().decode(body, count) if type(i) is CommitRun]


def plain(group, topic, partition, offset, epoch=5, commit=1_700_000_000_000):
    return (
        encode_key(OffsetCommitKey(group, topic, partition)),
        encode_value(OffsetCommitValue(offset, epoch, "", commit)),
    )


def test_a_commit_batch_is_one_run_per_topic():
    pairs = [plain("group", "orders", p, 1000 + p) for p in range(20)]
    pairs += [plain("group", "payments-topic", p, 2000 + p) for p in range(5)]
    body, count = batch_body(pairs)
    assert runs(body, count) == [20, 5]
    assert fast(body, count) == general(body, count)


def test_offset_deltas_of_two_and_three_bytes_start_new_runs():
    # Offset deltas 0-63 are one-byte varints, 64-8191 two bytes, from 8192 three.
    pairs = [plain("g", "t", p, p) for p in range(8300)]
    body, count = batch_body(pairs)
    assert runs(body, count) == [64, 8192 - 64, 8300 - 8192]
    assert fast(body, count) == general(body, count)


def test_everything_else_is_decoded_record_by_record():
    key = encode_key(OffsetCommitKey("g", "t", 0))
    pairs = [
        plain("g", "t", 0, 1),
        (key, encode_value(OffsetCommitValue(2, 5, "meta", 7))),  # metadata
        (key, encode_value(OffsetCommitValue(3, -1, "", 7, 99))),  # expire timestamp: v1
        (key, encode_value(OffsetCommitValue(4, 5, "", 7), 4)),  # another version
        (key, None),  # tombstone
        (key + b"\x00", encode_value(OffsetCommitValue(5, 5, "", 7))),  # bytes after the key
        (key, encode_value(OffsetCommitValue(6, 5, "", 7)) + b"\x00"),  # after the value
        (encode_key(OffsetCommitKey("g", "t", 1), 0), encode_value(OffsetCommitValue(7, 5, "", 7))),
        (encode_key(GroupMetadataKey("g")),
         encode_value(GroupMetadataValue("", 0, None, None, 1, ()))),
        (encode_key(GroupMetadataKey("g")), None),
        (b"\x00\x63\x00\x01g", b"\x00\x00"),  # unknown record type
        plain("g", "t", 2, 8),
    ]
    body, count = batch_body(pairs)
    decoded = fast(body, count)
    assert decoded == general(body, count)
    assert runs(body, count) == [1, 1, 1]  # the plain commits, including key version 0
    assert decoded[10] == (UnknownKey(99), None)


def test_changing_timestamps_or_groups_end_runs():
    pairs = [plain("g", "t", p, p) for p in range(6)] + [plain("h", "t", p, p) for p in range(6)]
    timestamps = [0, 0, 0, 100, 100, 100] + [200] * 6  # delta 100: a two-byte varint
    body, count = batch_body(pairs, timestamps)
    assert runs(body, count) == [3, 3, 6]
    assert fast(body, count) == general(body, count)


def test_one_decoder_reads_many_batches():
    decoder = RecordsDecoder()
    for round_ in range(3):
        pairs = [plain(f"g{g}", "t", p, round_ * 100 + p) for g in range(3) for p in range(4)]
        body, count = batch_body(pairs, base_offset=round_ * 12)
        assert fast(body, count, decoder) == general(body, count)


groups_ = st.sampled_from(["g", "group-1", "\u00e9\u00e9", "x" * 70])
topics_ = st.sampled_from(["t", "orders", "a-longer-topic-name"])
plain_commits = st.builds(
    lambda g, t, p, o, e, c: plain(g, t, p, o, e, c),
    groups_, topics_, int32s, int64s, int32s, int64s,
)
other_records = st.one_of(
    st.tuples(st.builds(OffsetCommitKey, groups_, topics_, int32s), offset_commit_values,
              st.integers(0, 4)).map(lambda r: (encode_key(r[0]), encode_value(r[1], r[2]))),
    st.builds(OffsetCommitKey, groups_, topics_, int32s).map(lambda k: (encode_key(k), None)),
    st.tuples(groups_, group_metadata_values).map(
        lambda r: (encode_key(GroupMetadataKey(r[0])), encode_value(r[1]))),
    st.tuples(st.integers(9, 20), blobs).map(lambda r: (i16(r[0]) + r[1], b"\x00\x01")),
    st.tuples(plain_commits, blobs).map(lambda r: (r[0][0] + r[1], r[0][1])),
    st.tuples(plain_commits, blobs).map(lambda r: (r[0][0], r[0][1] + r[1])),
)


@st.composite
def commit_batches(draw):
    """Batches as the coordinator writes them (runs of plain commits of a group and topic),
    with other records and other timestamps mixed in."""
    pairs = []
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            group, topic = draw(groups_), draw(topics_)
            for _ in range(draw(st.integers(1, 80))):
                pairs.append(plain(group, topic, draw(st.integers(0, 100)), draw(int64s),
                                   draw(int32s), draw(st.sampled_from([7, 8, -1]))))
        else:
            pairs.append(draw(st.one_of(plain_commits, other_records)))
    timestamps = [draw(st.sampled_from([0, 1, 100, 10**6])) if draw(st.integers(0, 9)) == 0
                  else 0 for _ in pairs]
    return pairs, timestamps


@given(commit_batches())
def test_runs_read_what_record_by_record_decoding_reads(batch):
    pairs, timestamps = batch
    body, count = batch_body(pairs, timestamps)
    assert fast(body, count) == general(body, count)


@settings(max_examples=examples(300))
@given(commit_batches(), st.data())
def test_damaged_batches_read_the_same_or_fail_with_corrupt_offsets_record_error(batch, data):
    pairs, timestamps = batch
    body, count = batch_body(pairs, timestamps)
    if not body:
        return
    damaged = bytearray(body)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    damaged = bytes(damaged[: data.draw(st.integers(0, len(damaged)))] if data.draw(
        st.booleans()) else damaged)
    try:
        expected = general(damaged, count)
    except (RecordsError, CorruptOffsetsRecordError):
        expected = None
    try:
        got = fast(damaged, count)
    except CorruptOffsetsRecordError:
        got = None
    assert got == expected


def test_a_damaged_offset_delta_inside_a_run_is_corrupt():
    # Record 3's offset delta made the first byte of a longer varint: its fields shift, and
    # its length no longer matches them.
    body, count = batch_body([plain("g", "t", p, p) for p in range(6)])
    stride = len(body) // 6
    delta_at = 3 * stride + 3  # one-byte length, attributes, timestamp delta
    damaged = body[:delta_at] + b"\x86" + body[delta_at + 1 :]
    with pytest.raises(RecordsError):
        general(damaged, count)
    with pytest.raises(CorruptOffsetsRecordError, match="record 3 of the batch"):
        fast(damaged, count)


def _fast_or_none(body, count):
    try:
        return fast(body, count)
    except CorruptOffsetsRecordError:
        return None


def _general_or_none(body, count):
    try:
        return general(body, count)
    except (RecordsError, CorruptOffsetsRecordError):
        return None


@pytest.mark.parametrize("group", ["g", "a-group-id-long-enough-for-a-two-byte-key-length-" * 2])
def test_any_byte_of_a_run_changed_reads_as_record_by_record_decoding_reads_it(group):
    body, count = batch_body([plain(group, "t", p, p, 3, 99) for p in range(4)])
    for at in range(len(body)):
        for byte in (0x00, 0x01, 0x30, 0x7F, 0x80, 0xFF, body[at] ^ 0x01):
            damaged = body[:at] + bytes((byte,)) + body[at + 1 :]
            assert _fast_or_none(damaged, count) == _general_or_none(damaged, count), (at, byte)


# --------------------------------------------------------------------------------------------
# Writing: encode_commit_batch writes what encode_batch writes

from brook.coordinator.common.result import CoordinatorRecord  # noqa: E402
from brook.coordinator.group.batch_writer import encode_commit_batch  # noqa: E402


def batch_as_encode_batch_writes(records, timestamp):
    return encode_batch([
        BatchRecord(i, timestamp, encode_key(r.key),
                    None if r.value is None else encode_value(r.value))
        for i, r in enumerate(records)], base_offset=0)


plain_values = st.builds(OffsetCommitValue, int64s, int32s, st.just(""), int64s)


@given(st.lists(st.tuples(groups_, topics_, int32s, plain_values), min_size=1, max_size=150),
       int64s)
def test_a_batch_of_plain_commits_is_written_as_encode_batch_writes_it(commits, timestamp):
    records = [CoordinatorRecord(OffsetCommitKey(g, t, p), v) for g, t, p, v in commits]
    assert encode_commit_batch(records, timestamp) == batch_as_encode_batch_writes(
        records, timestamp)


def test_a_batch_of_more_than_8192_commits_is_written_as_encode_batch_writes_it():
    records = [CoordinatorRecord(OffsetCommitKey("g", "t", p), OffsetCommitValue(p, 1, "", 2))
               for p in range(8300)]
    assert encode_commit_batch(records, 5) == batch_as_encode_batch_writes(records, 5)


@pytest.mark.parametrize("odd", [
    CoordinatorRecord(OffsetCommitKey("g", "t", 0), OffsetCommitValue(1, 2, "meta", 3)),
    CoordinatorRecord(OffsetCommitKey("g", "t", 0), OffsetCommitValue(1, -1, "", 3, 4)),
    CoordinatorRecord(OffsetCommitKey("g", "t", 0), None),
    CoordinatorRecord(GroupMetadataKey("g"), GroupMetadataValue("", 0, None, None, 1, ())),
    CoordinatorRecord(OffsetCommitKey("g", "t", 0), OffsetCommitValue(2**63, 2, "", 3)),
    CoordinatorRecord(OffsetCommitKey("g" * 40000, "t", 0), OffsetCommitValue(1, 2, "", 3)),
])
def test_other_batches_are_left_to_encode_batch(odd):
    plain_one = CoordinatorRecord(OffsetCommitKey("g", "t", 1), OffsetCommitValue(1, 2, "", 3))
    assert encode_commit_batch([plain_one, odd], 0) is None
    assert encode_commit_batch([], 0) is None


# An offset commit's records come as CommitRuns (rows of numbers) as well as Records.

from brook.coordinator.common.result import record_pairs  # noqa: E402

rows_ = st.lists(st.tuples(int32s, int64s, int32s, int64s), min_size=1, max_size=90)


@given(st.lists(st.one_of(
    st.builds(CommitRun, groups_, topics_, rows_),
    st.builds(lambda g, t, p, v: CoordinatorRecord(OffsetCommitKey(g, t, p), v),
              groups_, topics_, int32s, plain_values),
), min_size=1, max_size=5), int64s)
def test_runs_and_records_are_written_as_encode_batch_writes_their_records(items, timestamp):
    records = [CoordinatorRecord(key, value) for key, value in record_pairs(items)]
    assert encode_commit_batch(items, timestamp) == batch_as_encode_batch_writes(
        records, timestamp)


def test_a_run_stands_for_its_records():
    run = CommitRun("g", "t", [(3, 10, 2, 5), (0, 11, -1, 6)])
    assert run.records() == [
        (OffsetCommitKey("g", "t", 3), OffsetCommitValue(10, 2, "", 5)),
        (OffsetCommitKey("g", "t", 0), OffsetCommitValue(11, -1, "", 6)),
    ]
    tombstone = CoordinatorRecord(OffsetCommitKey("g", "t", 1), None)
    assert list(record_pairs([tombstone, run])) == [(tombstone.key, None), *run.records()]


def test_a_run_with_a_value_out_of_range_is_left_to_encode_batch():
    plain = CommitRun("g", "t", [(0, 1, 2, 3)])
    assert encode_commit_batch([plain, CommitRun("g", "t", [(1, 2**63, 2, 3)])], 0) is None
    assert encode_commit_batch([CommitRun("g", "t", [])], 0) is None


def test_runs_past_the_one_byte_offset_deltas_are_written_as_encode_batch_writes_them():
    items = [CommitRun("g", "t", [(p, p * 7, 1, 2) for p in range(60)]),
             CoordinatorRecord(OffsetCommitKey("g", "u", 0), OffsetCommitValue(1, 2, "", 3)),
             CommitRun("g", "u", [(p, p, -1, 2) for p in range(1, 200)])]
    records = [CoordinatorRecord(key, value) for key, value in record_pairs(items)]
    assert encode_commit_batch(items, 9) == batch_as_encode_batch_writes(records, 9)


def test_records_past_max_message_bytes_are_written_as_several_batches_within_it():
    # The tombstones of 20,000 expired offsets do not fit in one batch of 100 KB: they are
    # written as several, each within the limit, holding every record in order.
    from brook.coordinator.common.result import CoordinatorRecord
    from brook.coordinator.group.batch_writer import encode_records
    from brook.coordinator.group.schemas import OffsetCommitKey, decode_key
    from brook.records import scan_batches
    from brook.records.batch import decode_batch

    tombstones = [CoordinatorRecord(OffsetCommitKey("g", f"topic-{i % 7}", i), None)
                  for i in range(20_000)]
    one = encode_records(tombstones, 1_000)
    assert len(one) > 100_000
    data = encode_records(tombstones, 1_000, max_batch_bytes=100_000)
    batches = list(scan_batches(data))
    assert len(batches) > 1 and all(h.size <= 100_000 for _, h in batches)
    keys = [decode_key(r.key) for pos, _ in batches for r in decode_batch(data, pos).records]
    assert keys == [t.key for t in tombstones]
    assert all(r.value is None for pos, _ in batches for r in decode_batch(data, pos).records)
    # within the limit: one batch, as before
    assert encode_records(tombstones[:10], 1_000, max_batch_bytes=100_000) == encode_records(tombstones[:10], 1_000)
