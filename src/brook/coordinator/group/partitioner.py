"""``__consumer_offsets`` and which of its partitions holds a group: Kafka's rule
(``abs(group.hashCode()) % offsets.topic.num.partitions``, ``brook.coordinator.common.partitioner``
explains its quirks)."""

from __future__ import annotations

from ..common.partitioner import java_abs, java_string_hash, partition_for

__all__ = ["OFFSETS_TOPIC", "java_string_hash", "java_abs", "partition_for"]

#: The topic of the group coordinator's records (Kafka's name, as tools expect it).
OFFSETS_TOPIC = "__consumer_offsets"
