"""`dump-log --transaction-log-decoder`: the records of `__transaction_state` as readable
transactional id states and tombstones, decoded by brook.coordinator.transaction.schemas
(Kafka's TransactionLogKey and TransactionLogValue), as `offsets_decoder` reads
`__consumer_offsets`: `decode` gives plain values (the JSON lines), `describe` one line of text.
"""

from __future__ import annotations

from typing import Any

from ..coordinator.transaction.metadata import TransactionState
from ..coordinator.transaction.schemas import (CorruptTransactionRecordError, UnknownKey,
                                               decode_key, decode_value)
from .offsets_decoder import unreadable


def _state_name(status: int) -> str:
    try:
        return TransactionState(status).display
    except ValueError:
        return f"Unknown({status})"


def decode(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    """One record of the transaction log as plain values; `type` says what it is."""
    try:
        k = decode_key(key or b"")
        if isinstance(k, UnknownKey):
            return {"type": "unknown", "record_type": k.version}
        v = decode_value(value)
    except CorruptTransactionRecordError as exc:
        return {"type": "corrupt", "error": str(exc)}
    out: dict[str, Any] = {"type": "transaction_metadata", "transactional_id": k.transactional_id}
    if v is None:
        out["tombstone"] = True
        return out
    out.update(producer_id=v.producer_id, producer_epoch=v.producer_epoch,
               state=_state_name(v.status), timeout_ms=v.timeout_ms,
               partitions=None if v.partitions is None else
               [{"topic": t, "partitions": list(ps)} for t, ps in v.partitions],
               last_update_timestamp=v.last_update_ms, start_timestamp=v.start_ms,
               previous_producer_id=v.previous_producer_id,
               next_producer_id=v.next_producer_id,
               client_transaction_version=v.client_transaction_version)
    return out


def describe(d: dict[str, Any]) -> str:
    """One line of text for a decoded record."""
    text = unreadable(d)
    if text is not None:
        return text
    head = f"transaction_metadata transactional_id={d['transactional_id']}"
    if d.get("tombstone"):
        return f"{head} tombstone"
    partitions = "null" if d["partitions"] is None else "[" + ",".join(
        f"{p['topic']}-{i}" for p in d["partitions"] for i in p["partitions"]) + "]"
    extra = "".join(f" {name}={d[name]}" for name, default in (
        ("previous_producer_id", -1), ("next_producer_id", -1),
        ("client_transaction_version", 0)) if d[name] != default)
    return (f"{head} producer_id={d['producer_id']} producer_epoch={d['producer_epoch']} "
            f"state={d['state']} partitions={partitions} timeout_ms={d['timeout_ms']} "
            f"last_update_timestamp={d['last_update_timestamp']} "
            f"start_timestamp={d['start_timestamp']}{extra}")
