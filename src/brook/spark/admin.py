"""What the Spark driver asks the broker: partitions, offsets, and a group's commits.

One confluent-kafka ``AdminClient``, created on first use and never pickled (Spark pickles
readers to ship them to executors; a client holds threads and sockets). Partitions come from
a Metadata request for all topics, so that subscribing to a topic that does not exist yet
never creates it (brook, like Kafka, auto-creates topics named in a Metadata request).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from .offsets import Offsets, TopicPartition
from .options import OptionError, Subscription

log = logging.getLogger("brook.spark")

T = TypeVar("T")



#: A partition's leader moved (a failover): librdkafka does not mark these retriable in admin
#: results, but asked again after its metadata refresh the new leader answers, as Kafka's
#: clients retry them
_LEADER_MOVED = frozenset({KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH,
                           KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE})

class BrokerRequestError(RuntimeError):
    """A request to the broker failed after its retries."""


class Admin:
    def __init__(self, client_settings: Mapping[str, str], *, timeout_s: float = 30.0,
                 retries: int = 3, retry_interval_ms: int = 10) -> None:
        self.settings = dict(client_settings)
        self.timeout_s = timeout_s
        self.retries = retries
        self.retry_interval_ms = retry_interval_ms
        self._client: AdminClient | None = None

    @property
    def client(self) -> AdminClient:
        if self._client is None:
            try:
                self._client = AdminClient({**self.settings, "logger": log})
            except KafkaException as exc:
                raise OptionError(f"the kafka.* client settings are not valid: "
                                  f"{exc.args[0].str()}") from None
        return self._client

    def close(self) -> None:
        self._client = None  # the AdminClient has no close; dropping it stops its threads

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_client"] = None
        return state

    # ---------------------------------------------------------------- partitions

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        """The partitions the subscription covers now, sorted."""
        metadata = self._retry("list topics", lambda: self.client.list_topics(
            timeout=self.timeout_s))
        counts = {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}
        if subscription.assigned:
            missing = [f"{t}-{p}" for t, p in subscription.assigned if p >= counts.get(t, 0)]
            if missing:
                raise BrokerRequestError(f"assigned partitions do not exist: {', '.join(missing)}")
            return list(subscription.assigned)
        return sorted((t, p) for t, n in counts.items() if subscription.matches(t)
                      for p in range(n))

    # ---------------------------------------------------------------- offsets

    def earliest(self, partitions: Iterable[TopicPartition]) -> Offsets:
        return self._list_offsets(partitions, OffsetSpec.earliest())

    def latest(self, partitions: Iterable[TopicPartition]) -> Offsets:
        """The end of each partition as the tasks will read it: with read_committed (the
        default, as in librdkafka) the last stable offset, so a range never ends inside a
        transaction still open, which its reader would wait on until the transaction ends."""
        return self._list_offsets(partitions, OffsetSpec.latest())

    @property
    def isolation(self) -> IsolationLevel:
        level = self.settings.get("isolation.level", "read_committed").lower()
        return (IsolationLevel.READ_UNCOMMITTED if level == "read_uncommitted"
                else IsolationLevel.READ_COMMITTED)

    def _list_offsets(self, partitions: Iterable[TopicPartition], spec: OffsetSpec) -> Offsets:
        wanted = {KafkaTopicPartition(t, p): spec for t, p in partitions}
        if not wanted:
            return {}

        def ask() -> Offsets:
            futures = self.client.list_offsets(wanted, isolation_level=self.isolation,
                                               request_timeout=self.timeout_s)
            return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

        return self._retry("list offsets", ask)

    # ---------------------------------------------------------------- groups

    def committed(self, group: str, partitions: Iterable[TopicPartition]) -> Offsets:
        """The group's committed offsets of these partitions (those without one are left out)."""
        tps = [KafkaTopicPartition(t, p) for t, p in partitions]
        if not tps:
            return {}

        def ask() -> Offsets:
            request = [ConsumerGroupTopicPartitions(group, tps)]
            future = self.client.list_consumer_group_offsets(
                request, request_timeout=self.timeout_s)[group]
            return {(tp.topic, tp.partition): tp.offset for tp in future.result().topic_partitions
                    if tp.error is None and tp.offset >= 0}

        return self._retry("fetch the group's committed offsets", ask)

    def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit offsets to the group as a simple commit: no member id, generation -1, as
        a consumer that was assigned its partitions commits. Kafka refuses it while the
        group has members."""
        tps = [KafkaTopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        request = [ConsumerGroupTopicPartitions(group, tps)]
        future = self.client.alter_consumer_group_offsets(request,
                                                          request_timeout=self.timeout_s)[group]
        result = future.result()
        failed = [f"{tp.topic}-{tp.partition}: {tp.error.str()}" for tp in result.topic_partitions
                  if tp.error is not None]
        if failed:
            raise BrokerRequestError(f"committing to group {group!r} failed for "
                                     f"{'; '.join(failed)}")

    # ---------------------------------------------------------------- retries

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        """Spark's fetchOffset.numRetries and fetchOffset.retryIntervalMs."""
        attempt = 0
        while True:
            try:
                return call()
            except KafkaException as exc:
                error = exc.args[0]
                if attempt >= self.retries or not (error.retriable()
                                                   or error.code() in _LEADER_MOVED):
                    raise BrokerRequestError(f"cannot {what} from "
                                             f"{self.settings['bootstrap.servers']}: "
                                             f"{error.str()}") from None
                attempt += 1
                log.info("retrying to %s (%d of %d): %s", what, attempt, self.retries, error.str())
                time.sleep(self.retry_interval_ms / 1000)
