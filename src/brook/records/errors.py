"""Exceptions raised for bad record bytes. Nothing else escapes the decoders."""


class RecordsError(Exception):
    """Base class for every error about record bytes."""


class CorruptRecordError(RecordsError):
    """The bytes are complete but invalid: bad CRC, bad magic, impossible sizes or fields."""


class InflationLimitError(CorruptRecordError):
    """Compressed records that would inflate past what the broker allows for one batch
    (answered MESSAGE_TOO_LARGE: a producer that splits batches can still send them)."""


class TruncatedBatchError(RecordsError):
    """The bytes end before the batch (or message) they start is complete."""


class UnsupportedCompressionError(CorruptRecordError):
    """The attributes name a compression codec brook does not know."""


class InvalidRecordError(RecordsError):
    """Bytes that break a rule of what a producer may send (Kafka's INVALID_RECORD): records
    that do not decode, legacy messages of mixed magic, more than one compressed wrapper.
    `record_errors` names the records at fault, (index in the batch, message), when the
    batch failed because of some of its records only (KIP-467)."""

    def __init__(self, message: str, record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class InvalidTimestampError(InvalidRecordError):
    """Records whose CreateTime timestamps are out of the range the topic allows around now
    (Kafka's INVALID_TIMESTAMP)."""
