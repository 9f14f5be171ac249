"""Writing a coordinator's records as record batches of its topic.

A coordinator's records are key and value objects of its own formats, which it serializes (the
group coordinator's: ``brook.coordinator.group.schemas``); ``encode_batches`` writes the bytes
as one v2 batch timestamped ``now`` (the log assigns the offsets). Past ``max_batch_bytes`` (the
topic's max.message.bytes) it writes several, each within it, so that a write of many records
(the tombstones of 100,000 expired offsets) is not one batch the log refuses every time. A
coordinator may have faster paths of its own for the records it writes most (the group
coordinator's offset commits: ``brook.coordinator.group.batch_writer``).

A transactional write (``producer``) is one batch of that producer: the transactional attribute,
its id and epoch, and no sequence, as Kafka's coordinator runtime writes it.
"""

from __future__ import annotations

from ...records import Record as LogRecord
from ...records import encode_batch
from .result import TxnProducer

__all__ = ["encode_batches"]


def encode_batches(records: list[tuple[bytes, bytes | None]], now: int, base_offset: int = 0,
                   max_batch_bytes: int | None = None,
                   producer: TxnProducer | None = None) -> bytes:
    """One record batch of ``records`` (the bytes of each one's key and value; None: a
    tombstone), timestamped ``now``; past ``max_batch_bytes``, several batches, each within
    it. With ``producer``, one transactional batch of that producer, whatever its size (a
    transaction's write is not split: the log refuses it whole if too large)."""
    if producer is not None:
        return _encode(records, now, base_offset, producer)
    batch = _encode(records, now, base_offset)
    if max_batch_bytes is None or len(batch) <= max_batch_bytes:
        return batch
    return b"".join(_bounded(records, now, max_batch_bytes))


def _encode(records: list, now: int, base_offset: int = 0,
            producer: TxnProducer | None = None) -> bytes:
    logged = [LogRecord(offset=base_offset + i, timestamp=now, key=key, value=value)
              for i, (key, value) in enumerate(records)]
    if producer is None:
        return encode_batch(logged, base_offset=base_offset)
    return encode_batch(logged, base_offset=base_offset, producer_id=producer.producer_id,
                        producer_epoch=producer.producer_epoch, transactional=True)


def _bounded(records: list, now: int, max_batch_bytes: int) -> list[bytes]:
    """Batches of ``records``, in order, each within ``max_batch_bytes`` (halved until it fits;
    a record that does not fit alone is left for the log to refuse)."""
    batch = _encode(records, now)
    if len(batch) <= max_batch_bytes or len(records) == 1:
        return [batch]
    half = len(records) // 2
    return (_bounded(records[:half], now, max_batch_bytes)
            + _bounded(records[half:], now, max_batch_bytes))
