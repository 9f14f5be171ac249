"""Online migration with a real client: a classic group of confluent-kafka consumers
(``group.protocol=classic``, with librdkafka's eager range assignor, and with its cooperative
sticky one: a cooperative member inside the consumer group says what it still owns when it
rejoins) consuming while records flow;
its consumers restarted one by one with ``group.protocol=consumer`` (the group becomes a
consumer group when the first one joins, the classic members carry on inside it), then one by
one back to classic (a classic group again when the last new-protocol member leaves). The
consumers start from the committed offsets only (``auto.offset.reset=latest``: a lost offset
would skip records); every record delivered is processed, no partition is held by two
consumers at once."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("confluent_kafka")

from tests.cluster.test_consumer_group_failover import ownership_callbacks  # noqa: E402
from tests.support.broker_harness import BrokerProcess  # noqa: E402

PARTITIONS = 6
GROUP = "migrating"
BROKER = {"group.consumer.session.timeout.ms": 10_000,
          "group.consumer.heartbeat.interval.ms": 500,
          "group.initial.rebalance.delay.ms": 0}
WAIT = 60


def _group_type(bootstrap: str) -> str | None:
    """"consumer" with its members' types (ConsumerGroupDescribe v1's MemberType: classic
    members inside it and consumer ones) when ConsumerGroupDescribe knows the group, "classic"
    when not."""
    from brook.protocol.messages import make
    from tests.support.kafka_wire import WireClient, request_class

    with WireClient(bootstrap, 10) as w:
        r = w.request(make(request_class(69, 1), group_ids=(GROUP,),
                           include_authorized_operations=False))
    g = r.groups[0]
    if g.error_code == 69:
        return "classic"
    if g.error_code:
        return None
    kinds = sorted({"classic" if m.member_type == 0 else "consumer" for m in g.members})
    return f"consumer ({'+'.join(kinds)})"


class Members:
    """Consumer threads of the group, each with its protocol; every assignment checked
    against the others'."""

    def __init__(self, bootstrap: str, strategy: str) -> None:
        self.bootstrap = bootstrap
        self.strategy = strategy
        self.lock = threading.Lock()
        self.owner: dict[int, str] = {}
        self.violations: list[str] = []
        self.seen: set[tuple[int, int]] = set()
        self.running: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self.errors: list[str] = []

    def start(self, name: str, protocol: str) -> None:
        stop = threading.Event()
        t = threading.Thread(target=self._run, args=(name, protocol, stop), daemon=True)
        self.running[name] = (t, stop)
        t.start()

    def stop(self, name: str) -> None:
        t, stop = self.running.pop(name)
        stop.set()
        t.join(60)
        assert not t.is_alive(), f"{name} did not close"

    def holds(self, name: str) -> bool:
        with self.lock:
            return name in self.owner.values()

    def _run(self, name: str, protocol: str, stop: threading.Event) -> None:
        from confluent_kafka import Consumer

        conf = {"bootstrap.servers": self.bootstrap, "group.id": GROUP, "client.id": name,
                "group.protocol": protocol, "auto.offset.reset": "latest",
                "enable.auto.commit": True, "auto.commit.interval.ms": 200,
                "fetch.wait.max.ms": 100}
        if protocol == "classic":
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                         "partition.assignment.strategy": self.strategy})
        c = Consumer(conf)

        assigned, revoked = ownership_callbacks(self, name)
        c.subscribe(["migrating"], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
        try:
            while not stop.is_set():
                for m in c.consume(100, 0.1):
                    if m.error():
                        self.errors.append(f"{name}: {m.error()}")
                    else:
                        with self.lock:
                            self.seen.add((m.partition(), m.offset()))
        finally:
            c.close()
            with self.lock:  # closed: whatever it held is released
                for p in [p for p, o in self.owner.items() if o == name]:
                    del self.owner[p]


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_classic_group_migrates_to_the_new_protocol_and_back_while_consuming(tmp_path,
                                                                               strategy):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    with BrokerProcess(tmp_path / "broker", overrides=BROKER) as broker:
        bootstrap = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("migrating", PARTITIONS, 1)])["migrating"].result(15)
        # the group's offsets start at 0 (the consumers only ever resume from commits)
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
        c.commit(offsets=[TopicPartition("migrating", p, 0) for p in range(PARTITIONS)],
                 asynchronous=False)
        c.close()

        delivered: set[tuple[int, int]] = set()
        stop_feed = threading.Event()

        def feed() -> None:
            p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

            def done(err, msg):
                if err is None:
                    delivered.add((msg.partition(), msg.offset()))

            i = 0
            while not stop_feed.is_set():
                for _ in range(PARTITIONS):
                    p.produce("migrating", b"r%d" % i, partition=i % PARTITIONS,
                              on_delivery=done)
                    i += 1
                p.poll(0)
                time.sleep(0.02)
            assert p.flush(30) == 0

        members = Members(bootstrap, strategy)
        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()

        def progress(what: str, name: str | None = None) -> None:
            before = len(members.seen)
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:
                if len(members.seen) > before + 300 and (name is None or members.holds(name)):
                    return
                time.sleep(0.1)
            raise AssertionError(f"no progress: {what} ({len(members.seen) - before} records, "
                                 f"owners {members.owner})")

        types = []
        try:
            for i in range(3):
                members.start(f"classic-{i}", "classic")
            progress("the classic group")
            types.append(_group_type(bootstrap))
            for i in range(3):  # one by one to the new protocol, records flowing
                members.stop(f"classic-{i}")
                members.start(f"consumer-{i}", "consumer")
                progress(f"consumer-{i} in", f"consumer-{i}")
                types.append(_group_type(bootstrap))
            for i in range(3):  # and back
                members.stop(f"consumer-{i}")
                members.start(f"classic-{i}b", "classic")
                progress(f"classic-{i}b in", f"classic-{i}b")
                types.append(_group_type(bootstrap))
            stop_feed.set()
            feeder.join(60)
            deadline = time.monotonic() + WAIT
            while not delivered <= members.seen and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            stop_feed.set()
            for name in list(members.running):
                members.stop(name)
    mixed, only = "consumer (classic+consumer)", "consumer (consumer)"
    assert types == ["classic", mixed, mixed, only, mixed, mixed, "classic"], types
    assert not members.violations, members.violations
    missing = delivered - members.seen
    assert delivered and not missing, f"{len(missing)} records never processed: " \
                                      f"{sorted(missing)[:10]}"
