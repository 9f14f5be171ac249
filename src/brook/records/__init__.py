"""Kafka record formats: RecordBatch v2, legacy message sets, compression codecs. Bytes in,
bytes out: knows nothing of files, sockets or partitions."""

from .batch import (
    CREATE_TIME,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    BatchHeader,
    Record,
    RecordBatch,
    decode_batch,
    encode_batch,
    iter_batches,
    read_header,
    scan_batches,
    set_base_offset,
    verify_crc,
    whole_batches_size,
)
from .compression import Codec
from .errors import (
    CorruptRecordError,
    RecordsError,
    TruncatedBatchError,
    UnsupportedCompressionError,
)
from .legacy import (
    NO_TIMESTAMP_TYPE,
    LegacyMessage,
    decode_message_set,
    encode_message_set,
    magic_of,
    to_v2_batches,
)

__all__ = [
    "CREATE_TIME",
    "HEADER_SIZE",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "NO_TIMESTAMP_TYPE",
    "BatchHeader",
    "Codec",
    "CorruptRecordError",
    "LegacyMessage",
    "Record",
    "RecordBatch",
    "RecordsError",
    "TruncatedBatchError",
    "UnsupportedCompressionError",
    "decode_batch",
    "decode_message_set",
    "encode_batch",
    "encode_message_set",
    "iter_batches",
    "magic_of",
    "read_header",
    "scan_batches",
    "set_base_offset",
    "to_v2_batches",
    "verify_crc",
    "whole_batches_size",
]
