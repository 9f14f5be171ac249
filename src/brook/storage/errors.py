"""Errors of the storage engine. Each maps to one Kafka error code at the protocol layer."""

from __future__ import annotations

# A producer's batch is refused by its header (here) and by its records (brook.records.validate)
# with the same two errors: Kafka's INVALID_RECORD and INVALID_TIMESTAMP (32; also for a
# producer that claims LogAppendTime on a LogAppendTime topic).
from ..records.errors import InvalidRecordError, InvalidTimestampError  # noqa: F401


class StorageError(Exception):
    """Base class of storage errors."""


class OffsetOutOfRangeError(StorageError):
    """Kafka's OFFSET_OUT_OF_RANGE: the offset is before the log start or after its end."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is out of range [{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class RecordTooLargeError(StorageError):
    """Kafka's MESSAGE_TOO_LARGE: a batch is over max.message.bytes."""


class RecordBatchTooLargeError(StorageError):
    """Kafka's RECORD_LIST_TOO_LARGE: a batch cannot fit in a segment at all."""


class KafkaStorageError(StorageError):
    """Kafka's KAFKA_STORAGE_ERROR: the disk failed us (I/O error, disk full)."""


class OutOfOrderSequenceError(StorageError):
    """Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER (45): an idempotent producer's batch does not
    continue its sequence (or a new epoch does not start at 0)."""


class InvalidProducerEpochError(StorageError):
    """Kafka's INVALID_PRODUCER_EPOCH (47): the batch's producer epoch is older than the
    epoch the partition has seen from that producer id (a fenced, zombie producer)."""


class InvalidTxnStateError(StorageError):
    """Kafka's INVALID_TXN_STATE (48): a producer with a transaction open on the partition
    sent a non-transactional batch."""


class TransactionCoordinatorFencedError(StorageError):
    """Kafka's TRANSACTION_COORDINATOR_FENCED (52): a marker from a coordinator whose epoch is
    older than the one the producer's last marker carried (a deposed coordinator)."""
