"""The __transaction_state key/value formats and the transactional id partitioner, checked byte
for byte against Apache Kafka's: vectors built field by field from Kafka's published JSON
schemas (TransactionLogKey version 0; TransactionLogValue version 0, classic, and version 1,
flexible with tagged fields PreviousProducerId (0), NextProducerId (1) and
ClientTransactionVersion (2)), round trips, tombstones, unknown record types, and a fuzz test
that nothing but CorruptTransactionRecordError escapes the decoders."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.examples import examples
from tests.support.schema_bytes import compact_string, i16, i32, i64, string, uvarint

from brook.coordinator.transaction.partitioner import TRANSACTION_STATE_TOPIC, partition_for
from brook.coordinator.transaction.schemas import (
    CorruptTransactionRecordError,
    TransactionLogKey,
    TransactionLogValue,
    UnknownKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)


def i8(n):
    return struct.pack(">b", n)


def value_bytes(version, v: TransactionLogValue) -> bytes:
    """TransactionLogValue as Kafka's schema lays it out, field by field in its order (the
    tagged fields, which are declared among the others, all go at the end of the struct)."""
    flexible = version >= 1
    out = i16(version) + i64(v.producer_id) + i16(v.producer_epoch) + i32(v.timeout_ms) + i8(v.status)
    if v.partitions is None:
        out += uvarint(0) if flexible else i32(-1)
    else:
        out += uvarint(len(v.partitions) + 1) if flexible else i32(len(v.partitions))
        for topic, ids in v.partitions:
            out += compact_string(topic) if flexible else string(topic)
            out += uvarint(len(ids) + 1) if flexible else i32(len(ids))
            out += b"".join(i32(p) for p in ids)
            if flexible:
                out += uvarint(0)
    out += i64(v.last_update_ms) + i64(v.start_ms)
    if flexible:
        tags = []
        if v.previous_producer_id != -1:
            tags.append(uvarint(0) + uvarint(8) + i64(v.previous_producer_id))
        if v.next_producer_id != -1:
            tags.append(uvarint(1) + uvarint(8) + i64(v.next_producer_id))
        if v.client_transaction_version != 0:
            tags.append(uvarint(2) + uvarint(2) + i16(v.client_transaction_version))
        out += uvarint(len(tags)) + b"".join(tags)
    return out


ONGOING = TransactionLogValue(producer_id=4001, producer_epoch=3, timeout_ms=60_000, status=1,
                              partitions=(("orders", (0, 2)), ("__consumer_offsets", (17,))),
                              last_update_ms=1_700_000_000_123, start_ms=1_700_000_000_000)
EMPTY = TransactionLogValue(producer_id=7, producer_epoch=0, timeout_ms=900_000, status=0,
                            partitions=None, last_update_ms=5, start_ms=-1)
ROTATED = TransactionLogValue(producer_id=9000, producer_epoch=0, timeout_ms=1, status=4,
                              partitions=(), last_update_ms=1, start_ms=0,
                              previous_producer_id=8999, next_producer_id=9001,
                              client_transaction_version=2)


def test_the_key_is_version_0_and_the_id():
    assert encode_key(TransactionLogKey("my-txn")) == i16(0) + string("my-txn")
    assert decode_key(i16(0) + string("my-txn")) == TransactionLogKey("my-txn")


def test_a_known_vector():
    # TransactionLogValue v1 of producer 7 epoch 0 in Empty, spelled out byte by byte.
    expected = bytes.fromhex(
        "0001"              # version 1
        "0000000000000007"  # ProducerId
        "0000"              # ProducerEpoch
        "000dbba0"          # TransactionTimeoutMs 900000
        "00"                # TransactionStatus Empty
        "00"                # TransactionPartitions: null (compact length 0)
        "0000000000000005"  # TransactionLastUpdateTimestampMs
        "ffffffffffffffff"  # TransactionStartTimestampMs -1
        "00")               # no tagged fields
    assert encode_value(EMPTY) == expected
    assert decode_value(expected) == EMPTY


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("value", [ONGOING, EMPTY], ids=["ongoing", "empty"])
def test_every_version_is_written_as_the_schema_says(version, value):
    assert encode_value(value, version) == value_bytes(version, value)
    assert decode_value(value_bytes(version, value)) == value


def test_tagged_fields_are_written_when_not_their_default_and_read_back():
    data = value_bytes(1, ROTATED)
    assert encode_value(ROTATED) == data
    assert decode_value(data) == ROTATED


def test_version_0_drops_the_tagged_fields():
    v0 = encode_value(ROTATED, 0)
    assert v0 == value_bytes(0, ROTATED)
    back = decode_value(v0)
    assert back.previous_producer_id == -1 and back.client_transaction_version == 0


def test_unknown_tagged_fields_and_a_newer_version_are_read():
    data = bytearray(value_bytes(1, ONGOING))
    data[-1:] = uvarint(1) + uvarint(9) + uvarint(3) + b"abc"  # tag 9, unknown
    data[0:2] = i16(2)
    assert decode_value(bytes(data)) == ONGOING


def test_a_tombstone_is_a_null_value():
    assert encode_value(None) is None
    assert decode_value(None) is None


def test_another_key_version_is_an_unknown_record_type():
    assert decode_key(i16(5) + b"whatever") == UnknownKey(5)


def test_partition_for_is_kafkas_hash():
    # The same rule as __consumer_offsets' (Java's String.hashCode, Kafka's Utils.abs).
    assert TRANSACTION_STATE_TOPIC == "__transaction_state"
    assert partition_for("testgroup", 50) == 27
    assert partition_for("polygenelubricants", 50) == 0


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=80))
def test_garbage_raises_only_the_corrupt_record_error(data):
    for decode in (decode_key, decode_value):
        try:
            decode(data)
        except CorruptTransactionRecordError:
            pass


values = st.builds(
    TransactionLogValue,
    producer_id=st.integers(-1, 2**63 - 1), producer_epoch=st.integers(-1, 32767),
    timeout_ms=st.integers(1, 2**31 - 1), status=st.integers(0, 7),
    partitions=st.none() | st.lists(st.tuples(st.text(max_size=10),
                                              st.lists(st.integers(0, 2**31 - 1), max_size=4)
                                              .map(tuple)), max_size=3).map(tuple),
    last_update_ms=st.integers(-1, 2**62), start_ms=st.integers(-1, 2**62),
    previous_producer_id=st.integers(-1, 2**62), next_producer_id=st.integers(-1, 2**62),
    client_transaction_version=st.integers(0, 3))


@settings(max_examples=examples(200), deadline=None)
@given(values)
def test_round_trip_and_the_schema_agree(value):
    assert encode_value(value) == value_bytes(1, value)
    assert decode_value(encode_value(value)) == value
