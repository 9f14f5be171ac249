"""Kafka record formats: RecordBatch v2, legacy message sets, compression codecs."""

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
)
from .compression import Codec
from .errors import CorruptRecordError, RecordsError, TruncatedBatchError, UnsupportedCompressionError

__all__ = [
    "CREATE_TIME",
    "HEADER_SIZE",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "BatchHeader",
    "Codec",
    "CorruptRecordError",
    "Record",
    "RecordBatch",
    "RecordsError",
    "TruncatedBatchError",
    "UnsupportedCompressionError",
    "decode_batch",
    "encode_batch",
    "iter_batches",
    "read_header",
    "scan_batches",
    "set_base_offset",
    "verify_crc",
]
