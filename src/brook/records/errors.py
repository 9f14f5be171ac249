"""Exceptions raised for bad record bytes. Nothing else escapes the decoders."""


class RecordsError(Exception):
    """Base class for every error about record bytes."""


class CorruptRecordError(RecordsError):
    """The bytes are complete but invalid: bad CRC, bad magic, impossible sizes or fields."""


class TruncatedBatchError(RecordsError):
    """The bytes end before the batch (or message) they start is complete."""


class UnsupportedCompressionError(CorruptRecordError):
    """The attributes name a compression codec brook does not know."""


class InvalidRecordError(RecordsError):
    """Well-formed bytes that break a rule of what a producer may send (Kafka's
    INVALID_RECORD): legacy messages of mixed magic, or more than one compressed wrapper."""
