"""Log configuration with Kafka's topic-level keys, defaults, and broker-level fallbacks.

A topic's effective config is its own overrides over the broker's `log.*` defaults over
Kafka's built-in defaults, exactly as in Kafka (`LogConfig.fromProps`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 24 * 3600 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60_000
    max_message_bytes: int = 1024 * 1024 + 12
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600 * 1000  # Kafka 4.0's default (KIP-1030)
    message_timestamp_difference_max_ms: int = LONG_MAX  # deprecated (KIP-937), see below
    producer_id_expiration_ms: int = 24 * 3600 * 1000  # broker-level only

    @property
    def timestamp_before_max_ms(self) -> int:
        """How far in the past a CreateTime timestamp may be. The deprecated
        `message.timestamp.difference.max.ms` still bounds both sides: the tighter wins."""
        return min(self.message_timestamp_before_max_ms, self.message_timestamp_difference_max_ms)

    @property
    def timestamp_after_max_ms(self) -> int:
        """How far in the future a CreateTime timestamp may be (see timestamp_before_max_ms)."""
        return min(self.message_timestamp_after_max_ms, self.message_timestamp_difference_max_ms)

    @property
    def compact(self) -> bool:
        return "compact" in self.policies

    @property
    def delete(self) -> bool:
        return "delete" in self.policies

    @property
    def policies(self) -> frozenset[str]:
        return frozenset(p.strip() for p in self.cleanup_policy.split(",") if p.strip())

    def with_overrides(self, props: Mapping[str, Any]) -> "LogConfig":
        """Apply topic-level keys (`segment.bytes`, `retention.ms`, ...)."""
        changes = {}
        for key, raw in props.items():
            name = TOPIC_KEYS.get(key)
            if name is None:
                raise ValueError(f"unknown topic config {key!r}")
            changes[name] = _parse(name, raw)
        cfg = replace(self, **changes)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if not 14 <= self.segment_bytes <= 2**31 - 1:
            raise ValueError("segment.bytes must be in [14, 2147483647] (index positions are int32)")
        if self.segment_index_bytes < 8:
            raise ValueError("segment.index.bytes must be at least 8")
        if not self.policies or not self.policies <= {"delete", "compact"}:
            raise ValueError(f"invalid cleanup.policy {self.cleanup_policy!r}")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError("min.cleanable.dirty.ratio must be in [0, 1]")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError(f"invalid message.timestamp.type {self.message_timestamp_type!r}")
        if self.producer_id_expiration_ms < 1:
            raise ValueError("producer.id.expiration.ms must be at least 1")

    def to_topic_props(self) -> dict[str, str]:
        """Every key with its value as a string, as DescribeConfigs shows them."""
        out = {}
        for key, name in TOPIC_KEYS.items():
            value = getattr(self, name)
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    @classmethod
    def from_broker_props(cls, props: Mapping[str, Any]) -> "LogConfig":
        """Broker-wide defaults from `log.*` keys of server.properties."""
        changes: dict[str, Any] = {}
        for broker_key, name, scale in BROKER_KEYS:
            if broker_key in props and name not in changes:
                value = _parse(name, props[broker_key])
                changes[name] = value if scale == 1 or value == -1 else value * scale
        cfg = replace(cls(), **changes)
        cfg.validate()
        return cfg


# Fields set only by a broker-level key (Kafka has no topic-level key for them).
BROKER_ONLY_FIELDS = frozenset({"producer_id_expiration_ms"})

# Topic-level key -> field name.
TOPIC_KEYS: dict[str, str] = {f.name.replace("_", "."): f.name for f in fields(LogConfig)
                              if f.name not in BROKER_ONLY_FIELDS}

# Broker-level key -> (field, multiplier to reach the field's unit). Listed most specific
# first: Kafka prefers log.retention.ms over .minutes over .hours.
BROKER_KEYS: list[tuple[str, str, int]] = [
    ("log.segment.bytes", "segment_bytes", 1),
    ("log.roll.ms", "segment_ms", 1),
    ("log.roll.hours", "segment_ms", 3600 * 1000),
    ("log.index.size.max.bytes", "segment_index_bytes", 1),
    ("log.index.interval.bytes", "index_interval_bytes", 1),
    ("log.flush.interval.messages", "flush_messages", 1),
    ("log.flush.interval.ms", "flush_ms", 1),
    ("log.retention.ms", "retention_ms", 1),
    ("log.retention.minutes", "retention_ms", 60 * 1000),
    ("log.retention.hours", "retention_ms", 3600 * 1000),
    ("log.retention.bytes", "retention_bytes", 1),
    ("log.cleanup.policy", "cleanup_policy", 1),
    ("log.cleaner.delete.retention.ms", "delete_retention_ms", 1),
    ("log.cleaner.min.cleanable.ratio", "min_cleanable_dirty_ratio", 1),
    ("log.cleaner.min.compaction.lag.ms", "min_compaction_lag_ms", 1),
    ("log.cleaner.max.compaction.lag.ms", "max_compaction_lag_ms", 1),
    ("log.segment.delete.delay.ms", "file_delete_delay_ms", 1),
    ("message.max.bytes", "max_message_bytes", 1),
    ("log.message.timestamp.type", "message_timestamp_type", 1),
    ("log.message.timestamp.before.max.ms", "message_timestamp_before_max_ms", 1),
    ("log.message.timestamp.after.max.ms", "message_timestamp_after_max_ms", 1),
    ("log.message.timestamp.difference.max.ms", "message_timestamp_difference_max_ms", 1),
    ("producer.id.expiration.ms", "producer_id_expiration_ms", 1),
]

_TYPES = {f.name: f.type for f in fields(LogConfig)}


def _parse(name: str, raw: Any) -> Any:
    kind = _TYPES[name]
    if kind == "str":
        value = str(raw).strip()
        return value
    try:
        if kind == "float":
            return float(raw)
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{name.replace('_', '.')}: {raw!r} is not a number") from None
    if name == "retention_ms" and value == -1 or name == "retention_bytes" and value == -1:
        return value
    if value < 0:
        raise ValueError(f"{name.replace('_', '.')} must not be negative")
    return value
