"""Transaction verification (KIP-890 part 1), the leader's side: before a producer's
transactional batch may begin a transaction on a partition, the leader asks the transaction
coordinator whether the partition is in the producer's transaction: in process when this
broker coordinates the transactional id, else with AddPartitionsToTxn v4 ``verify_only`` to
the leader of the id's ``__transaction_state`` partition (``brook.broker.leader_channels``).

Without it, a Produce delayed in the network past its transaction's end (its abort markers
written) would begin a transaction on the partition that no coordinator knows and none will
ever end: the last stable offset stuck there, every read_committed consumer with it (Kafka's
"hanging transactions", KAFKA-14402).

The coordinator's answers reach the producer as Kafka 3.9 passes them on: TRANSACTION_ABORTABLE
(the partition is not in the transaction) as itself to Produce v11+ and as INVALID_TXN_STATE
before; PRODUCER_FENCED as INVALID_PRODUCER_EPOCH (what producers expect there); those a
producer should just retry (the coordinator moving, loading, or busy with the previous
transaction's markers) as NOT_ENOUGH_REPLICAS, which every client retries without refreshing
its metadata; others (an unknown producer id) as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from kio.schema.errors import ErrorCode

from ..cluster.channel import ChannelError
from ..coordinator.common.partitioner import partition_for
from ..coordinator.common.runtime import CoordinatorError
from ..coordinator.transaction.partitioner import TRANSACTION_STATE_TOPIC
from ..protocol.messages import make, request_class
from .leader_channels import LeaderChannels

log = logging.getLogger(__name__)

API_KEY = 24  # AddPartitionsToTxn
VERSION = 4  # the batched form brokers send, with verify_only

E = ErrorCode
#: coordinator errors a producer retries as NOT_ENOUGH_REPLICAS (Kafka 3.9's translation)
_RETRIED = frozenset({E.concurrent_transactions, E.network_exception,
                      E.coordinator_load_in_progress, E.coordinator_not_available,
                      E.not_coordinator})

TopicPartition = tuple[str, int]


_FOR_PRODUCE = {E.transaction_abortable: E.invalid_txn_state,
                E.producer_fenced: E.invalid_producer_epoch}


def produce_error(code: ErrorCode, version: int) -> ErrorCode:
    """What a Produce of ``version`` answers for a partition whose verification ended with
    ``code``: from v11 (KIP-890) TRANSACTION_ABORTABLE is itself."""
    if code in _RETRIED:
        return E.not_enough_replicas
    if code == E.transaction_abortable and version >= 11:
        return code
    return _FOR_PRODUCE.get(code, code)


class TransactionVerifier:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.leaders = LeaderChannels(broker, "txn-verification")

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Collection[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """The coordinator's answer for each partition (NONE: in the transaction)."""
        runtime = self.broker.txn_coordinator
        if runtime is None:
            return dict.fromkeys(partitions, E.coordinator_not_available)
        wanted = tuple(partitions)
        try:
            return await runtime.read(transactional_id, lambda shard, now: shard.verify_partitions(
                transactional_id, producer_id, producer_epoch, wanted))
        except CoordinatorError as exc:
            if exc.code != E.not_coordinator or self.broker.replicas is None:
                return dict.fromkeys(wanted, exc.code)
        return await self._ask(transactional_id, producer_id, producer_epoch, wanted,
                               runtime.num_partitions)

    async def _ask(self, tid: str, pid: int, epoch: int, partitions: tuple[TopicPartition, ...],
                   num_partitions: int) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4 verify_only to the coordinator of ``tid``."""
        failed = dict.fromkeys(partitions, E.not_coordinator)
        leader = self.leaders.leader(TRANSACTION_STATE_TOPIC, partition_for(tid, num_partitions))
        if leader is None:
            return failed
        cls = request_class(API_KEY, VERSION)
        mod = __import__(cls.__module__, fromlist=["x"])
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        body = make(cls, transactions=(make(
            mod.AddPartitionsToTxnTransaction, transactional_id=tid, producer_id=pid,
            producer_epoch=epoch, verify_only=True,
            topics=tuple(make(mod.AddPartitionsToTxnTopic, name=t, partitions=tuple(ps))
                         for t, ps in topics.items())),))
        try:
            response = await self.leaders.channel(*leader).request(body)
        except ChannelError as exc:
            log.info("verifying transaction %r with broker %d failed: %s", tid, leader[0], exc)
            return dict.fromkeys(partitions, E.network_exception)
        if response.error_code != E.none:
            return dict.fromkeys(partitions, ErrorCode(response.error_code))
        answers = {}
        for txn in response.results_by_transaction:
            for t in txn.topic_results:
                for p in t.results_by_partition:
                    answers[(t.name, p.partition_index)] = ErrorCode(p.partition_error_code)
        return {**failed, **{tp: c for tp, c in answers.items() if tp in failed}}

    def close(self) -> None:
        self.leaders.close()
