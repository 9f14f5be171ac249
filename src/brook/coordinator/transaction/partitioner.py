"""``__transaction_state`` and which of its partitions holds a transactional id: Kafka's rule,
``abs(transactionalId.hashCode()) % transaction.state.log.num.partitions``
(``brook.coordinator.common.partitioner``)."""

from __future__ import annotations

from ..common.partitioner import partition_for

__all__ = ["TRANSACTION_STATE_TOPIC", "partition_for"]

#: The topic of the transaction coordinator's records (Kafka's name).
TRANSACTION_STATE_TOPIC = "__transaction_state"
