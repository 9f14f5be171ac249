"""Control records: the transaction markers (COMMIT, ABORT) a transaction coordinator has written
to each partition of a transaction, in Kafka's format.

A marker is a batch of one record with the control and transactional bits set in its
attributes, the transaction's producer id and epoch, no sequence (-1), uncompressed, in
CreateTime. Its one record has no headers; its key and value (big-endian):

    key    version int16 (0) | type int16 (ControlRecordType: ABORT 0, COMMIT 1, ...)
    value  version int16 (0) | coordinator_epoch int32      (EndTransactionMarker)

As in Kafka, a key or value of a newer version is read as version 0 (later versions may only
add fields), a negative version or one too short is damage. Control types other than the two
markers (KRaft's LEADER_CHANGE and the others) are never written to a data partition; they,
and an empty control batch (one the cleaner emptied), carry no marker.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from .batch import CONTROL_BIT, HEADER_SIZE, Record, decode_batch, encode_batch, read_header
from .errors import CorruptRecordError


class ControlRecordType(enum.IntEnum):
    """Kafka's ControlRecordType ids."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


ABORT = ControlRecordType.ABORT
COMMIT = ControlRecordType.COMMIT
NO_MARKER = -1  # a ProducerBatch's control type when it is no transaction marker

CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch


class EndTransactionMarker(NamedTuple):
    control_type: ControlRecordType  # ABORT or COMMIT
    coordinator_epoch: int

    @property
    def committed(self) -> bool:
        return self.control_type == COMMIT


def control_key(control_type: int) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, control_type)


def marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def parse_control_type(key: bytes | None) -> ControlRecordType:
    """The type of a control record by its key (UNKNOWN for an id Kafka does not define)."""
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(f"control record key of {0 if key is None else len(key)} bytes, "
                                 f"at least {_KEY.size} needed")
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key version {version}")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return ControlRecordType.UNKNOWN


def parse_marker(key: bytes | None, value: bytes | None) -> EndTransactionMarker | None:
    """The marker a control record holds; None for another control type."""
    control_type = parse_control_type(key)
    if control_type not in (ABORT, COMMIT):
        return None
    if value is None or len(value) < _VALUE.size:
        size = 0 if value is None else len(value)
        raise CorruptRecordError(f"end transaction marker value of {size} bytes, "
                                 f"{_VALUE.size} needed")
    version, coordinator_epoch = _VALUE.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"end transaction marker version {version}")
    return EndTransactionMarker(control_type, coordinator_epoch)


def end_txn_marker_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int,
                         committed: bool, timestamp: int, *, base_offset: int = 0,
                         partition_leader_epoch: int = -1) -> bytes:
    """A marker batch as Kafka writes it (MemoryRecords.withEndTransactionMarker)."""
    control_type = COMMIT if committed else ABORT
    record = Record(base_offset, timestamp, control_key(control_type),
                    marker_value(coordinator_epoch))
    return encode_batch([record], base_offset=base_offset, producer_id=producer_id,
                        producer_epoch=producer_epoch, transactional=True, control=True,
                        partition_leader_epoch=partition_leader_epoch)


def read_marker(buf: bytes | bytearray | memoryview, pos: int = 0) -> EndTransactionMarker | None:
    """The marker of the control batch at `pos` (whole in `buf`, CRC not checked here); None
    for an empty control batch or another control type. Raises CorruptRecordError."""
    header = read_header(buf, pos)
    if not header.attributes & CONTROL_BIT:
        raise ValueError(f"the batch at offset {header.base_offset} is no control batch")
    if header.record_count == 0 or header.size == HEADER_SIZE:
        return None
    batch = decode_batch(buf, pos, verify=False)
    record = batch.records[0]
    return parse_marker(record.key, record.value)
