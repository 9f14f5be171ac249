"""When a committed offset expires (KIP-211), as one pure rule.

The coordinator's periodic expiry (``OffsetsManager.expire``) and the Spark offsets audit
(``brook.spark.offsets_analytics``) both decide with these functions, so they cannot disagree.

Kafka's rule, given the offset's group as it is:

* an offset kept by a *Stable consumer group* whose members subscribe to its topic never expires
  while that lasts; when the members' subscriptions are not known (other protocol types, or
  metadata that cannot be read), a Stable group keeps all its offsets; so does a group that is
  rebalancing or Dead;
* otherwise an explicit expire timestamp (OffsetCommit v1-v4's retention) decides alone;
* otherwise the offset expires ``offsets.retention.minutes`` after a base time: when the group
  became Empty for an Empty group with a protocol type, else (no group, a simple consumer's
  group without a protocol type, a topic a Stable consumer group does not subscribe to) the
  offset's own commit timestamp.
"""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["COMMIT_TIMESTAMP", "expires_at", "expiry_base", "offset_expires_at"]

#: ``expiry_base``'s answer for "from each offset's own commit timestamp".
COMMIT_TIMESTAMP = -1

CONSUMER_PROTOCOL_TYPE = "consumer"
_STABLE = "Stable"
_EMPTY = "Empty"


def expiry_base(state: str | None, protocol_type: str | None, state_timestamp: int,
                subscribed_topics: Collection[str] | None, topic: str) -> int | None:
    """Where the retention of a group's offsets of ``topic`` counts from: a timestamp,
    ``COMMIT_TIMESTAMP`` (each offset's commit), or None when they are kept.

    ``state`` is the group's state name (None: no group), ``state_timestamp`` when it entered
    it (-1: not known, as in metadata written before version 2: kept, since the time it became
    Empty is not known), ``subscribed_topics`` what its members subscribe to (None: not known)."""
    if state is None or not protocol_type:
        return COMMIT_TIMESTAMP
    if state == _EMPTY:
        return None if state_timestamp == -1 else state_timestamp
    if state == _STABLE and protocol_type == CONSUMER_PROTOCOL_TYPE:
        if subscribed_topics is None or topic in subscribed_topics:
            return None
        return COMMIT_TIMESTAMP
    return None


def offset_expires_at(base: int | None, commit_timestamp: int, expire_timestamp: int,
                      retention_ms: int) -> int | None:
    """When one offset expires, given ``expiry_base``'s answer for its group and topic (None:
    kept)."""
    if base is None:
        return None
    if expire_timestamp != -1:
        return expire_timestamp
    return (commit_timestamp if base == COMMIT_TIMESTAMP else base) + retention_ms


def expires_at(state: str | None, protocol_type: str | None, state_timestamp: int,
               subscribed_topics: Collection[str] | None, topic: str, commit_timestamp: int,
               expire_timestamp: int, retention_ms: int) -> int | None:
    """When an offset expires under the rule above (None: kept while the group stays so)."""
    base = expiry_base(state, protocol_type, state_timestamp, subscribed_topics, topic)
    return offset_expires_at(base, commit_timestamp, expire_timestamp, retention_ms)
