"""The KIP-848 consumer group records of __consumer_offsets (record types 3-8), checked byte for
byte against vectors built field by field from Kafka's JSON schemas (ConsumerGroup*Key.json,
ConsumerGroup*Value.json), round trips of every type, tombstones, unknown tagged fields, the
classic records still read through the same entry points, and a fuzz test that nothing but
CorruptOffsetsRecordError escapes the decoders."""

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.examples import examples

from brook.coordinator.group.consumer_schemas import (
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicMetadata,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from brook.coordinator.group.schemas import (
    CorruptOffsetsRecordError,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
)

T1 = uuid.UUID("00000000-0000-0001-0000-000000000002")
T2 = uuid.UUID("abcdef01-2345-6789-abcd-ef0123456789")


# Field by field, as Kafka's generated writers lay them out: classic keys (int16 strings),
# flexible values (uvarint length + 1, a tagged-field count after every struct).
def h(n):
    return struct.pack(">h", n)


def i(n):
    return struct.pack(">i", n)


def s16(v):
    return h(len(v.encode())) + v.encode()


def cs(v):  # compact string
    return bytes([len(v.encode()) + 1]) + v.encode()


def carr(items):  # compact array of already-encoded items (fewer than 127)
    return bytes([len(items) + 1]) + b"".join(items)


NULL = b"\x00"
TAGS = b"\x00"

KEY_VECTORS = [
    (ConsumerGroupMetadataKey("g"), h(3) + s16("g")),
    (ConsumerGroupPartitionMetadataKey("g"), h(4) + s16("g")),
    (ConsumerGroupMemberMetadataKey("g", "m1"), h(5) + s16("g") + s16("m1")),
    (ConsumerGroupTargetAssignmentMetadataKey("grp"), h(6) + s16("grp")),
    (ConsumerGroupTargetAssignmentMemberKey("g", "m1"), h(7) + s16("g") + s16("m1")),
    (ConsumerGroupCurrentMemberAssignmentKey("g", "m1"), h(8) + s16("g") + s16("m1")),
]


@pytest.mark.parametrize("key, data", KEY_VECTORS)
def test_keys_match_kafkas_layout(key, data):
    assert encode_key(key) == data
    assert decode_key(data) == key


def tp(topic_id, *partitions):
    return topic_id.bytes + carr([i(p) for p in partitions]) + TAGS


VALUE_VECTORS = [
    (ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(42), h(0) + i(42) + TAGS),
    (ConsumerGroupTargetAssignmentMetadataKey("g"), ConsumerGroupTargetAssignmentMetadataValue(7),
     h(0) + i(7) + TAGS),
    (ConsumerGroupPartitionMetadataKey("g"),
     ConsumerGroupPartitionMetadataValue((TopicMetadata(T1, "orders", 12),
                                          TopicMetadata(T2, "x", 1, ((0, ("r1", "r2")),)))),
     h(0) + carr([T1.bytes + cs("orders") + i(12) + carr([]) + TAGS,
                  T2.bytes + cs("x") + i(1) + carr([i(0) + carr([cs("r1"), cs("r2")]) + TAGS])
                  + TAGS]) + TAGS),
    (ConsumerGroupMemberMetadataKey("g", "m"),
     ConsumerGroupMemberMetadataValue("inst", None, "client", "/10.0.0.1", ("a", "b"), None,
                                      45000, "uniform"),
     h(0) + cs("inst") + NULL + cs("client") + cs("/10.0.0.1") + carr([cs("a"), cs("b")]) + NULL
     + i(45000) + cs("uniform") + TAGS),
    (ConsumerGroupMemberMetadataKey("g", "m"),
     ConsumerGroupMemberMetadataValue(None, "rack", "c", "h", (), "^t.*", -1, None,
                                      ClassicMemberMetadata(10000, (("range", b"\x01\x02"),))),
     h(0) + NULL + cs("rack") + cs("c") + cs("h") + carr([]) + cs("^t.*") + i(-1) + NULL
     # one tagged field, tag 0, its size, then the struct: session timeout, protocols, tags
     + b"\x01" + b"\x00" + bytes([4 + 1 + 6 + 3 + 1 + 1])
     + i(10000) + carr([cs("range") + bytes([3]) + b"\x01\x02" + TAGS]) + TAGS),
    (ConsumerGroupTargetAssignmentMemberKey("g", "m"),
     ConsumerGroupTargetAssignmentMemberValue(((T1, (0, 2, 4)), (T2, ()))),
     h(0) + carr([tp(T1, 0, 2, 4), tp(T2)]) + TAGS),
    (ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
     ConsumerGroupCurrentMemberAssignmentValue(5, 4, 1, ((T1, (1,)),), ((T2, (3, 7)),)),
     h(0) + i(5) + i(4) + b"\x01" + carr([tp(T1, 1)]) + carr([tp(T2, 3, 7)]) + TAGS),
]


@pytest.mark.parametrize("key, value, data", VALUE_VECTORS)
def test_values_match_kafkas_layout(key, value, data):
    assert encode_value(value) == data
    assert decode_value(key, data) == value


@pytest.mark.parametrize("key, value, data", VALUE_VECTORS)
def test_unknown_tagged_fields_and_later_versions_are_skipped(key, value, data):
    # a later version with an unknown tag (tag 9, 2 bytes) at the end of the value's struct
    assert data.endswith(TAGS)
    if type(value) is ConsumerGroupMemberMetadataValue and value.classic_member_metadata:
        return  # its tags are not empty: covered by the vector itself
    newer = h(3) + data[2:-1] + b"\x01\x09\x02zz"
    assert decode_value(key, newer) == value


@pytest.mark.parametrize("key, _value, _data", VALUE_VECTORS)
def test_tombstones(key, _value, _data):
    assert encode_value(None) is None
    assert decode_value(key, None) is None


def test_classic_records_go_through_the_same_entry_points():
    key = OffsetCommitKey("g", "t", 3)
    value = OffsetCommitValue(10, 2, "", 1000)
    assert decode_key(encode_key(key)) == key
    assert decode_value(key, encode_value(value)) == value


def test_share_and_streams_group_records_stay_unknown():
    assert decode_key(h(9) + s16("g")) == UnknownKey(9)
    assert decode_key(h(11) + s16("g")) == UnknownKey(11)


@pytest.mark.parametrize("data", [h(5) + s16("g"), h(3) + h(-1), h(8) + s16("g") + h(9) + b"ab"])
def test_bad_keys_are_corrupt(data):
    with pytest.raises(CorruptOffsetsRecordError):
        decode_key(data)


# --------------------------------------------------------------------------------------------
# Round trips and fuzz

texts = st.text(max_size=20)
ids = st.uuids()
int32 = st.integers(-(2**31), 2**31 - 1)
assignments = st.lists(st.tuples(ids, st.lists(st.integers(0, 2**31 - 1), max_size=8)
                                 .map(tuple)), max_size=5).map(tuple)
values = st.one_of(
    st.builds(ConsumerGroupMetadataValue, int32),
    st.builds(ConsumerGroupTargetAssignmentMetadataValue, int32),
    st.builds(ConsumerGroupPartitionMetadataValue, st.lists(st.builds(
        TopicMetadata, ids, texts, int32,
        st.lists(st.tuples(int32, st.lists(texts, max_size=3).map(tuple)), max_size=3)
        .map(tuple)), max_size=4).map(tuple)),
    st.builds(ConsumerGroupMemberMetadataValue, st.none() | texts, st.none() | texts, texts, texts,
              st.lists(texts, max_size=5).map(tuple), st.none() | texts, int32,
              st.none() | texts, st.none() | st.builds(
                  ClassicMemberMetadata, int32,
                  st.lists(st.tuples(texts, st.binary(max_size=20)), max_size=3).map(tuple))),
    st.builds(ConsumerGroupTargetAssignmentMemberValue, assignments),
    st.builds(ConsumerGroupCurrentMemberAssignmentValue, int32, int32, st.integers(-128, 127),
              assignments, assignments),
)
_KEY_FOR = {
    ConsumerGroupMetadataValue: ConsumerGroupMetadataKey("g"),
    ConsumerGroupTargetAssignmentMetadataValue: ConsumerGroupTargetAssignmentMetadataKey("g"),
    ConsumerGroupPartitionMetadataValue: ConsumerGroupPartitionMetadataKey("g"),
    ConsumerGroupMemberMetadataValue: ConsumerGroupMemberMetadataKey("g", "m"),
    ConsumerGroupTargetAssignmentMemberValue: ConsumerGroupTargetAssignmentMemberKey("g", "m"),
    ConsumerGroupCurrentMemberAssignmentValue: ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
}


@given(values)
def test_values_round_trip(value):
    key = _KEY_FOR[type(value)]
    assert decode_value(key, encode_value(value)) == value


@given(st.sampled_from(sorted({type(k) for k, _ in KEY_VECTORS}, key=str)), texts, texts)
def test_keys_round_trip(kind, group, member):
    key = kind(group, member) if "Member" in kind.__name__ else kind(group)
    assert decode_key(encode_key(key)) == key


@settings(max_examples=examples(500))
@given(st.sampled_from(list(_KEY_FOR.values())), st.binary(max_size=60))
def test_only_corrupt_errors_escape(key, data):
    try:
        decode_value(key, data)
    except CorruptOffsetsRecordError:
        pass
    try:
        decode_key(data)
    except CorruptOffsetsRecordError:
        pass
