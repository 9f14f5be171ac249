"""Transaction markers (control batches) byte for byte as Kafka writes them
(MemoryRecords.withEndTransactionMarker): the batch header's flags and fields, the one record's
ControlRecordType key and EndTransactionMarker value."""

from __future__ import annotations

import struct

import pytest

from brook.records import Record, decode_batch, encode_batch, read_header
from brook.records.batch import CONTROL_BIT, TRANSACTIONAL_BIT
from brook.records.control import (
    ABORT,
    COMMIT,
    ControlRecordType,
    EndTransactionMarker,
    end_txn_marker_batch,
    parse_marker,
    read_marker,
)
from brook.records.errors import CorruptRecordError


def test_a_commit_marker_batch_is_kafkas():
    data = end_txn_marker_batch(producer_id=4242, producer_epoch=3, coordinator_epoch=17,
                                committed=True, timestamp=1_700_000_000_000)
    h = read_header(data)
    assert h.attributes == CONTROL_BIT | TRANSACTIONAL_BIT  # uncompressed, CreateTime
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (4242, 3, -1)
    assert (h.base_offset, h.last_offset_delta, h.record_count) == (0, 0, 1)
    assert h.base_timestamp == h.max_timestamp == 1_700_000_000_000
    # The record: length 16, attributes 0, timestamp delta 0, offset delta 0, key of 4 bytes
    # (version 0, type 1), value of 6 bytes (version 0, coordinator epoch 17), no headers.
    assert data[61:] == bytes([0x20, 0, 0, 0, 0x08]) + b"\x00\x00\x00\x01" + bytes([0x0c]) \
        + b"\x00\x00\x00\x00\x00\x11" + b"\x00"
    assert len(data) == 78  # Kafka's RECORD_BATCH_OVERHEAD 61 + CURRENT_END_TXN_SCHEMA_RECORD_SIZE 17
    assert read_marker(data) == EndTransactionMarker(COMMIT, 17)


def test_an_abort_marker_and_its_decoding():
    data = end_txn_marker_batch(7, 0, 2, committed=False, timestamp=5)
    record = decode_batch(data).records[0]
    assert record.key == struct.pack(">hh", 0, 0) and record.value == struct.pack(">hi", 0, 2)
    marker = read_marker(data)
    assert marker.control_type == ABORT and not marker.committed and marker.coordinator_epoch == 2


def test_newer_versions_are_read_as_version_0_and_damage_is_refused():
    assert parse_marker(struct.pack(">hhh", 1, 1, 9), struct.pack(">hiq", 3, 5, 0)) == (COMMIT, 5)
    assert parse_marker(struct.pack(">hh", 0, 2), b"") is None  # LEADER_CHANGE: no marker
    assert parse_marker(struct.pack(">hh", 0, 99), b"") is None  # unknown type
    for key, value in [(b"\x00\x00\x00", b""), (struct.pack(">hh", -1, 0), b""),
                       (struct.pack(">hh", 0, 0), b"\x00\x00\x00"),
                       (struct.pack(">hh", 0, 1), struct.pack(">hi", -2, 0))]:
        with pytest.raises(CorruptRecordError):
            parse_marker(key, value)
    assert ControlRecordType(2) is ControlRecordType.LEADER_CHANGE


def test_an_empty_control_batch_holds_no_marker():
    empty = encode_batch([], base_offset=5, producer_id=7, producer_epoch=0, transactional=True,
                         control=True, base_timestamp=1, max_timestamp=1)
    assert read_marker(empty) is None
    with pytest.raises(ValueError):
        read_marker(encode_batch([Record(0, 1, b"k", b"v")]))
