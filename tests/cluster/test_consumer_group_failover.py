"""A KIP-848 consumer group across the death of its coordinator: three brokers on ZooKeeper,
__consumer_offsets replicated three times, three confluent-kafka consumers with
``group.protocol=consumer`` consuming while the leader of the group's offsets partition is
SIGKILLed, three times in a row (each broker brought back and in sync before the next kill)
while records keep arriving. Each new coordinator loads the group's records: the same members,
at the same group epoch (nobody was fenced, the group did not start over), and every record
produced is consumed; no partition is ever held by two consumers at once."""

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


def ownership_callbacks(tracker, name: str):
    """on_assign and on_revoke/on_lost callbacks of consumer ``name`` that keep
    ``tracker.owner`` (partition -> consumer) under ``tracker.lock`` and note in
    ``tracker.violations`` a partition given to one consumer while another holds it."""

    def assigned(consumer, partitions):
        with tracker.lock:
            for tp in partitions:
                other = tracker.owner.get(tp.partition)
                if other is not None and other != name:
                    tracker.violations.append(f"{tp.partition} given to {name} while {other} "
                                              f"holds it")
                tracker.owner[tp.partition] = name

    def revoked(consumer, partitions):
        with tracker.lock:
            for tp in partitions:
                if tracker.owner.get(tp.partition) == name:
                    del tracker.owner[tp.partition]

    return assigned, revoked


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

        assigned, revoked = ownership_callbacks(self, name)
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


class Feeder:
    """Records arriving all along (an idempotent producer, acks=all, into every partition),
    each delivered one remembered as (partition, offset)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.delivered: set[tuple[int, int]] = set()
        self.failed: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 120_000})

        def done(err, msg) -> None:
            if err is not None:
                self.failed.append(str(err))
            else:
                self.delivered.add((msg.partition(), msg.offset()))

        seq = 0
        while not self.stop.is_set():
            for _ in range(PARTITIONS * 2):
                p.produce("events", b"e%d" % seq, partition=seq % PARTITIONS, on_delivery=done)
                seq += 1
            p.poll(0)
            time.sleep(0.05)
        assert p.flush(120) == 0

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(150)


KILLS = 3


def test_a_consumer_group_survives_its_coordinators_deaths(zk, brokers):
    from confluent_kafka.admin import AdminClient, NewTopic

    from brook.coordinator.group.partitioner import partition_for

    for i in (1, 2, 3):
        brokers(i, SETTINGS)
    bootstrap = brokers.wait_ready(zk, [1, 2, 3])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("events", PARTITIONS, 3)], operation_timeout=20)["events"] \
        .result(30)
    wait_for(lambda: zk.in_sync(["events"]), 30, "the topic in sync", brokers)
    feeder = Feeder(bootstrap)
    feeder.thread.start()

    consumers = Consumers(bootstrap)
    try:
        for i in range(3):
            consumers.start(f"c{i}")
        # settled: three members at the group epoch, records consumed
        before = wait_for(lambda: (d := _describe(bootstrap)) and d[0] == 0 and len(d[2]) == 3
                          and set(d[2].values()) == {d[1]} and d, 60, "three stable members",
                          brokers)
        _, epoch, members = before
        offsets = partition_for(GROUP, 3)
        for round_ in range(KILLS):
            seen = len(consumers.seen)
            wait_for(lambda: len(consumers.seen) > seen + 100, 60,
                     f"records consumed before kill {round_}", brokers)
            # the coordinator (leader of the group's offsets partition) dies
            dead = zk.json(f"/brokers/topics/__consumer_offsets/partitions/{offsets}/state")[
                "leader"]
            brokers[dead].kill()
            rest = ",".join(brokers[i].bootstrap for i in (1, 2, 3) if i != dead)
            after = wait_for(lambda: (d := _describe(rest)) and d[0] == 0 and d[2] and d, 60,
                             f"the group on the new coordinator (kill {round_})", brokers)
            # the new coordinator has the same members (loaded, not rejoined), at the group
            # epoch: nobody was fenced, the group did not start over
            assert set(after[2]) == set(members), (round_, members, after)
            assert after[1] == epoch, (round_, epoch, after)
            # recovery: the broker back and every replica in sync before the next kill
            brokers[dead].start()
            wait_for(lambda: zk.broker_ids() == [1, 2, 3], 60, "the broker back", brokers)
            wait_for(lambda: zk.in_sync(["events", "__consumer_offsets"]), 60,
                     "the topics in sync again", brokers)
        feeder.finish()
        assert not feeder.failed, feeder.failed[:5]
        wait_for(lambda: feeder.delivered <= consumers.seen, 90, "every record consumed",
                 brokers)
        final = _describe(bootstrap)
        assert set(final[2]) == set(members) and final[1] == epoch, (members, epoch, final)
    finally:
        feeder.stop.set()
        consumers.close()
    assert not consumers.violations, consumers.violations
    assert feeder.delivered and feeder.delivered <= consumers.seen
