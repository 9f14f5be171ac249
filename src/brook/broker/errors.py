"""Exceptions of the layers below, as Kafka error codes.

Matched by class name along the exception's MRO, so the storage and metadata layers keep
their own exception types without knowing the protocol.
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

log = logging.getLogger(__name__)

_BY_CLASS_NAME: dict[str, ErrorCode] = {
    "OffsetOutOfRangeError": ErrorCode.offset_out_of_range,
    "CorruptRecordError": ErrorCode.corrupt_message,
    "TruncatedBatchError": ErrorCode.corrupt_message,
    "UnsupportedCompressionError": ErrorCode.unsupported_compression_type,
    "RecordTooLargeError": ErrorCode.message_too_large,
    "InflationLimitError": ErrorCode.message_too_large,
    "RecordBatchTooLargeError": ErrorCode.record_list_too_large,
    "InvalidRecordError": ErrorCode.invalid_record,
    "InvalidTimestampError": ErrorCode.invalid_timestamp,
    "OutOfOrderSequenceError": ErrorCode.out_of_order_sequence_number,
    "InvalidProducerEpochError": ErrorCode.invalid_producer_epoch,
    "UnknownProducerIdError": ErrorCode.unknown_producer_id,
    "InvalidTxnStateError": ErrorCode.invalid_txn_state,
    "TransactionCoordinatorFencedError": ErrorCode.transaction_coordinator_fenced,
    "KafkaStorageError": ErrorCode.kafka_storage_error,
    # no Kafka code says "too many producers": a retriable one, the client tries again later
    "ProducerIdBudgetFullError": ErrorCode.request_timed_out,
    "InvalidTopicError": ErrorCode.invalid_topic_exception,
    "TopicExistsError": ErrorCode.topic_already_exists,
    "UnknownTopicError": ErrorCode.unknown_topic_or_partition,
    "InvalidConfigError": ErrorCode.invalid_config,
    "InvalidPartitionsError": ErrorCode.invalid_partitions,
    "InvalidRequestError": ErrorCode.invalid_request,
    "PolicyViolationError": ErrorCode.policy_violation,
    "OSError": ErrorCode.kafka_storage_error,
}


def error_code_for(exc: BaseException) -> ErrorCode:
    for cls in type(exc).__mro__:
        code = _BY_CLASS_NAME.get(cls.__name__)
        if code is not None:
            return code
    return ErrorCode.unknown_server_error
