"""A follower's fetcher waits replica.fetch.backoff.ms before asking again for a partition its
leader answered with an error, as Kafka's fetcher delays such partitions. Asking again at once
spun both brokers: under the nemesis, leaders refusing the fetches of a broker whose ZooKeeper
session had just expired (TOPIC_AUTHORIZATION_FAILED until it registered again) answered
thousands of fetches a second, and the follower logged each."""

from __future__ import annotations

import asyncio
import logging
import types

from confluent_kafka.admin import AdminClient, NewTopic

from brook.broker.broker import Broker
from brook.broker.config import BrokerConfig
from brook.replication.replica_fetcher import ReplicaFetcher

BACKOFF_MS = 300


def test_a_partition_the_leader_refuses_is_asked_again_only_after_the_backoff(
        broker, tmp_path, caplog):
    # The leader: a real broker process. Its follower Fetches from a connection that is not a
    # broker's are refused partition by partition (TOPIC_AUTHORIZATION_FAILED).
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("refused", 1, 1)])["refused"].result(10)
    follower = Broker(BrokerConfig.from_props({
        "log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:9092", "broker.id": "7",
        "replica.fetch.backoff.ms": str(BACKOFF_MS), "replica.fetch.wait.max.ms": "50"}))
    follower.open()
    follower.cluster = types.SimpleNamespace(channel_credentials=None)  # no inter-broker login
    follower.create_topic("refused", 1)
    asked = []

    async def main():
        fetcher = ReplicaFetcher(types.SimpleNamespace(broker=follower), 1, broker.host,
                                 broker.port)
        request = fetcher.channel.request

        async def counted(req, *args, **kwargs):
            asked.append(type(req).__name__)
            return await request(req, *args, **kwargs)

        fetcher.channel.request = counted
        fetcher.add(("refused", 0), 0)
        await asyncio.sleep(1.5)
        await fetcher.stop()

    with caplog.at_level(logging.WARNING, logger="brook.replication.replica_fetcher"):
        try:
            asyncio.run(main())
        finally:
            follower.cluster = None
            follower.close()
    fetches = asked.count("FetchRequest")
    refusals = [r for r in caplog.records if "TOPIC_AUTHORIZATION_FAILED" in r.getMessage()]
    # 1.5 s at one fetch per 300 ms: about 5 (a spinning fetcher makes hundreds)
    assert 2 <= fetches <= 1.5 * 1000 / BACKOFF_MS + 2, asked
    assert len(refusals) == 1, [r.getMessage() for r in refusals]
