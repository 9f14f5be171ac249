"""The Cluster and Topics pages on two real brokers and a real ZooKeeper, one of them stopped:
the partitions it shared are listed as under-replicated, the one only it held as offline, and
the per-broker leader and partition counts follow."""

from __future__ import annotations

import re
from html import unescape

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from starlette.testclient import TestClient

from brook.console.app import ConsoleSettings, create_app
from brook.console.backend import Backend
from brook.security.client_settings import ClientSecurity
from tests.support.cluster_harness import brokers, wait_for, zk, zookeeper  # noqa: F401

pytestmark = pytest.mark.broker

SETTINGS = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 200,
            "controlled.shutdown.retry.backoff.ms": 200, "offsets.topic.num.partitions": 1,
            "offsets.topic.replication.factor": 1, "zookeeper.session.timeout.ms": 6000}


def text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def test_under_replicated_and_offline_partitions_are_listed(zk, brokers):  # noqa: F811
    for i in (1, 2):
        brokers(i, SETTINGS)
    bootstrap = brokers.wait_ready(zk, [1, 2])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic("shared", 2, 2),
                                   NewTopic("only-on-2", 1, replica_assignment=[[2]])])
    for f in futures.values():
        f.result(30)
    backend = Backend(brokers[1].bootstrap, 10.0, ClientSecurity())
    with TestClient(create_app(backend, ConsoleSettings()), raise_server_exceptions=False) as c:
        wait_for(lambda: "in sync" if re.search(r'id="urp">0<', c.get("/cluster").text)
                 and "only-on-2" in c.get("/topics").text else None, 30,
                 "the topics created and in sync", brokers)
        page = text(c.get("/cluster").text)
        held = {int(b): (int(lead), int(n)) for b, lead, n in
                re.findall(r"(\d) 127\.0\.0\.1:\d+ - (?:yes )?(\d+) (\d+) configs", page)}
        assert {b: n for b, (_, n) in held.items()} == {1: 2, 2: 3}, page
        assert sum(lead for lead, _ in held.values()) == 3, page
        brokers[2].close()
        wait_for(lambda: re.search(r'id="offline">1<', c.get("/cluster").text), 30,
                 "the partition only broker 2 held offline", brokers)
        wait_for(lambda: re.search(r'id="urp">2<', c.get("/cluster").text), 30,
                 "the shared partitions under-replicated", brokers)
        html = c.get("/cluster").text
        urp = text(html[html.index('id="urp-table"'):html.index('id="offline-table"')])
        assert "shared 0" in urp and "shared 1" in urp, urp
        offline = text(html[html.index('id="offline-table"'):])
        assert "only-on-2 0 - 2" in offline, offline
        topics = text(c.get("/topics").text)
        assert "shared 2 2 2 0" in topics and "only-on-2 1 1 0 1" in topics, topics
