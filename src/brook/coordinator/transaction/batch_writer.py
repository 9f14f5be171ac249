"""Writing the transaction coordinator's records as record batches of ``__transaction_state``:
each ``CoordinatorRecord`` is a ``TransactionLogKey`` and the id's ``TransactionMetadata`` (or
None, a tombstone), serialized with Kafka's schemas (``schemas``)."""

from __future__ import annotations

from ..common.batch_writer import encode_batches
from ..common.result import TxnProducer, record_pairs
from .metadata import TransactionMetadata
from .schemas import encode_key, encode_value

__all__ = ["encode_records"]


def encode_records(records: list, now: int, base_offset: int = 0,
                   max_batch_bytes: int | None = None, producer: TxnProducer | None = None
                   ) -> bytes:
    pairs = []
    for key, value in record_pairs(records):
        if type(value) is TransactionMetadata:
            value = value.value()
        pairs.append((encode_key(key), encode_value(value)))
    return encode_batches(pairs, now, base_offset, max_batch_bytes, producer)
