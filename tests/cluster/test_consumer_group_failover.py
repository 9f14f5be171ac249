"""A KIP-848 consumer group across the death of its coordinator: three brokers on ZooKeeper,
__consumer_offsets replicated three times, three confluent-kafka consumers with
``group.protocol=consumer`` consuming while the leader of the group's offsets partition is
SIGKILLed. The new coordinator loads the group's records: the same members, at the same group
epoch (nobody was fenced, the group did not start over), and every record produced before and
after is consumed; no partition is ever held by two consumers at once."""

from __future__ import annotations

import threading
import time

import pytest

from tests.support.cluster_harness import brokers, wait_for, zk, zookeeper  # noqa: F401

pytestmark = pytest.mark.broker

SETTINGS = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 200,
            "controlled.shutdown.retry.backoff.ms": 200, "offsets.topic.num.partitions": 3,
            "group.consumer.session.timeout.ms": 30_000,
            "group.consumer.heartbeat.interval.ms": 500}
PARTITIONS = 6
GROUP = "kip848-failover"


def _describe(bootstrap: str):
    """ConsumerGroupDescribe of the group from its coordinator: (error, group epoch, members by
    id with their epochs), or None while it cannot be asked."""
    from brook.protocol.messages import make
    from tests.support.kafka_wire import WireClient, request_class

    try:
        for address in bootstrap.split(","):
            with WireClient(address, 10) as w:
                r = w.request(make(request_class(10, 4), key_type=0, coordinator_keys=(GROUP,)))
                c = r.coordinators[0]
                if c.error_code != 0:
                    continue
            with WireClient(f"{c.host}:{c.port}", 10) as w:
                r = w.request(make(request_class(69, 0), group_ids=(GROUP,),
                                   include_authorized_operations=False))
            g = r.groups[0]
            return g.error_code, g.group_epoch, {m.member_id: m.member_epoch for m in g.members}
    except OSError:
        return None
    return None


class Consumers:
    """Consumer threads of the group; every partition change checked against the others."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.lock = threading.Lock()
        self.owner: dict[int, str] = {}
        self.violations: list[str] = []
        self.seen: set[tuple[int, int]] = set()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, name: str) -> None:
        t = threading.Thread(target=self._run, args=(name,), daemon=True)
        t.start()
        self.threads.append(t)

    def _run(self, name: str) -> None:
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP,
                      "client.id": name, "group.protocol": "consumer",
                      "auto.offset.reset": "earliest", "enable.auto.commit": True,
                      "auto.commit.interval.ms": 200, "fetch.wait.max.ms": 100})

        def assigned(consumer, partitions):
            with self.lock:
                for tp in partitions:
                    other = self.owner.get(tp.partition)
                    if other is not None and other != name:
                        self.violations.append(f"{tp.partition} given to {name} while {other} "
                                               f"holds it")
                    self.owner[tp.partition] = name

        def revoked(consumer, partitions):
            with self.lock:
                for tp in partitions:
                    if self.owner.get(tp.partition) == name:
                        del self.owner[tp.partition]

        c.subscribe(["events"], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
        try:
            while not self.stop.is_set():
                for m in c.consume(100, 0.1):
                    if not m.error():
                        with self.lock:
                            self.seen.add((m.partition(), m.offset()))
        finally:
            c.close()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def _produce(bootstrap: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        p.produce("events", f"e{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(60) == 0


def test_a_consumer_group_survives_its_coordinators_death(zk, brokers):
    from confluent_kafka.admin import AdminClient, NewTopic

    from brook.coordinator.group.partitioner import partition_for

    for i in (1, 2, 3):
        brokers(i, SETTINGS)
    bootstrap = brokers.wait_ready(zk, [1, 2, 3])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("events", PARTITIONS, 3)], operation_timeout=20)["events"] \
        .result(30)
    _produce(bootstrap, 600)

    consumers = Consumers(bootstrap)
    try:
        for i in range(3):
            consumers.start(f"c{i}")
        # settled: three members at the group epoch, every record of the first batch consumed
        before = wait_for(lambda: (d := _describe(bootstrap)) and d[0] == 0 and len(d[2]) == 3
                          and set(d[2].values()) == {d[1]} and d, 60, "three stable members",
                          brokers)
        wait_for(lambda: len(consumers.seen) >= 600, 60, "the first records consumed", brokers)
        _, epoch, members = before

        # the coordinator (leader of the group's offsets partition) dies
        state = zk.json(f"/brokers/topics/__consumer_offsets/partitions/"
                        f"{partition_for(GROUP, 3)}/state")
        dead = state["leader"]
        brokers[dead].kill()
        rest = ",".join(brokers[i].bootstrap for i in (1, 2, 3) if i != dead)
        after = wait_for(lambda: (d := _describe(rest)) and d[0] == 0 and d[2] and d, 60,
                         "the group on the new coordinator", brokers)
        assert after[1] >= epoch
        # the new coordinator has the same members (loaded, not rejoined), at the group epoch
        assert set(after[2]) == set(members), (members, after)
        assert after[1] == epoch, "the group changed epoch: a member was fenced or rejoined"

        _produce(rest, 600)
        wait_for(lambda: len(consumers.seen) >= 1200, 90, "every record consumed", brokers)
        final = _describe(rest)
        assert set(final[2]) == set(members) and final[1] == epoch
    finally:
        consumers.close()
    assert not consumers.violations, consumers.violations
    assert consumers.seen == {(p, o) for p in range(PARTITIONS) for o in range(200)}
