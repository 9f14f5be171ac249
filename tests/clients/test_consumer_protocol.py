"""Consumer groups of the KIP-848 protocol with a real client: confluent-kafka with
``group.protocol=consumer`` against a real broker, for each server-side assignor
(``group.remote.assignor``: uniform, range).

1. three consumers share a 12-partition topic, each partition owned once (as the consumers
   report it and as ConsumerGroupDescribe has it);
2. a fourth joins while records flow: the others keep their partitions but those that move
   (no stop of the whole group: none of them is ever left with nothing) and keep processing
   records produced after the newcomer joined, before the group settles;
3. one is SIGKILLed: after the broker's session timeout its partitions move to the others;
4. the consumers stop, the broker crashes (SIGKILL) and restarts: the committed offsets are
   unchanged and new consumers of the group resume from them;
5. every produced record is processed, duplicates only from uncommitted windows.

The consumer processes (``test_group_scenario``'s worker, client
``confluent-consumer-protocol``), their reports and the checks are those of
``test_group_scenario``.
"""

from __future__ import annotations

import signal
import time
import uuid

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.clients.test_group_scenario import (  # noqa: E402
    PARTITIONS,
    PER_BATCH,
    WAIT,
    Group,
    _check_processing,
    _committed,
    _next_offsets,
)
from tests.support.broker_harness import BrokerProcess  # noqa: E402

SESSION_TIMEOUT_MS = 10_000
BROKER = {
    "num.partitions": 4,
    "offsets.topic.num.partitions": 10,
    "group.consumer.session.timeout.ms": SESSION_TIMEOUT_MS,
    "group.consumer.heartbeat.interval.ms": 500,
}


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_consumer_protocol_group(tmp_path, assignor):
    with BrokerProcess(tmp_path / "broker", overrides=BROKER) as broker:
        run = uuid.uuid4().hex[:8]
        g = Group("confluent-consumer-protocol", assignor, broker.bootstrap, f"kip848-{run}",
                                  f"kip848-{assignor}-{run}", str(tmp_path))
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(g.topic, PARTITIONS, 1)])[g.topic].result(15)
        try:
            # 1. three consumers, every partition owned once
            first = [g.start(f"c{i}") for i in range(3)]
            before = g.wait_settled(first)
            listed = {x.group_id: x for x in admin.list_consumer_groups().result(15).valid}
            assert str(listed[g.group].type).endswith("CONSUMER")  # not a classic group
            g.produce("a")
            g.wait_processed()

            # 2. a fourth joins while records flow; the others never stop
            joined_at = time.time()
            members = [*first, g.start("c3")]
            g.produce("b")
            after = g.wait_settled(members)
            settled_at = time.time()
            assert after[3], "the newcomer owns nothing"
            if assignor == "uniform":  # sticky: the others only give up what it gets
                assert all(a <= b for a, b in zip(after[:3], before)), (before, after)
            for w in first:
                owned_since = [e["parts"] for e in w.log
                               if e["ev"] == "assigned" and e["t"] > joined_at]
                assert all(owned_since), f"{w.name} was left with nothing: {owned_since}"
            flowing = [r for w in first for e in w.log if e["ev"] == "processed"
                       and joined_at < e["t"] < settled_at for r in e["recs"]]
            g.wait_processed()

            # 3. one is killed without leaving: its partitions move after the session timeout
            victim, kept = members[1], after[1]
            g.produce("c")
            g.wait_for(lambda: any(p in kept and o >= 2 * PER_BATCH
                                   for p, o in victim.processed))
            g.kill(victim)
            killed_at = time.time()
            survivors = [w for w in members if w is not victim]
            moved = g.wait_settled(survivors, timeout=SESSION_TIMEOUT_MS / 1000 + WAIT)
            assert kept <= set().union(*moved)
            assert time.time() - killed_at >= SESSION_TIMEOUT_MS / 2000
            g.wait_processed()

            # 4. stop, crash and restart the broker: the commits stay, new consumers resume
            g.stop(*survivors)
            committed = _committed(broker.bootstrap, g.topic, g.group)
            assert committed == _next_offsets(sorted(g.produced))
            broker.restart(signal.SIGKILL)
            g.admin = None
            assert _committed(broker.bootstrap, g.topic, g.group) == committed
            g.produce("d")
            resumed = [g.start(f"r{i}") for i in range(2)]
            g.wait_settled(resumed)
            g.wait_processed()
            g.stop(*resumed)

            # 5. every record processed, none after a commit past it
            _check_processing(g.workers, g.produced)
            assert flowing, "no record processed by the others while the newcomer joined"
        finally:
            g.close()


def _consume_all(bootstrap: str, group: str, topic: str, want: int, **conf) -> list:
    """Read ``want`` records as a member of ``group``, commit, leave; the values read."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})
    got = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + WAIT
        while len(got) < want and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
        # nothing more: a moment for a record read twice to show
        end = time.monotonic() + 1
        while time.monotonic() < end:
            m = c.poll(0.1)
            if m is not None and not m.error():
                got.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def test_a_group_moves_between_the_protocols_with_its_offsets(tmp_path):
    """Offline migration: the classic group's members stop, consumer-protocol members of the
    same group id resume from its offsets, and back."""
    from confluent_kafka import Producer

    with BrokerProcess(tmp_path / "broker", overrides=BROKER) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("moves", 4, 1)])["moves"].result(15)
        producer = Producer({"bootstrap.servers": broker.bootstrap})

        def produce(tag):
            values = [f"{tag}-{i}".encode() for i in range(40)]
            for i, v in enumerate(values):
                producer.produce("moves", v, partition=i % 4)
            assert producer.flush(30) == 0
            return sorted(values)

        first = produce("a")
        assert sorted(_consume_all(broker.bootstrap, "moving", "moves", 40)) == first
        second = produce("b")
        assert sorted(_consume_all(broker.bootstrap, "moving", "moves", 40,
                                   **{"group.protocol": "consumer"})) == second
        third = produce("c")
        assert sorted(_consume_all(broker.bootstrap, "moving", "moves", 40)) == third


def test_a_regex_subscription_takes_topics_as_they_appear(tmp_path):
    from confluent_kafka import Consumer

    with BrokerProcess(tmp_path / "broker", overrides=BROKER) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for topic, n in (("rx-a", 2), ("other", 2)):
            admin.create_topics([NewTopic(topic, n, 1)])[topic].result(15)
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "rx",
                      "group.protocol": "consumer", "topic.metadata.refresh.interval.ms": 500})
        try:
            c.subscribe(["^rx-.*"])

            def owned(n):
                deadline = time.monotonic() + WAIT
                while len(c.assignment()) < n and time.monotonic() < deadline:
                    c.poll(0.1)
                return sorted((tp.topic, tp.partition) for tp in c.assignment())

            assert owned(2) == [("rx-a", 0), ("rx-a", 1)]
            admin.create_topics([NewTopic("rx-b", 1, 1)])["rx-b"].result(15)
            assert owned(3) == [("rx-a", 0), ("rx-a", 1), ("rx-b", 0)]
        finally:
            c.close()


def test_exactly_once_with_a_consumer_protocol_group(tmp_path):
    """Read-process-write with a transactional producer that commits the consumer's offsets
    with its group metadata (KIP-447), the consumer in a group.protocol=consumer group."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    with BrokerProcess(tmp_path / "broker", overrides={
            **BROKER, "transaction.state.log.num.partitions": 2,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for topic in ("eos-in", "eos-out"):
            admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(15)
        source = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(20):
            source.produce("eos-in", str(i).encode(), partition=i % 2)
        assert source.flush(30) == 0

        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "eos",
                      "group.protocol": "consumer", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "isolation.level": "read_committed"})
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "eos-tx"})
        try:
            p.init_transactions(30)
            c.subscribe(["eos-in"])
            done = 0
            deadline = time.monotonic() + WAIT
            while done < 20 and time.monotonic() < deadline:
                msgs = [m for m in c.consume(20, 0.5) if not m.error()]
                if not msgs:
                    continue
                p.begin_transaction()
                for m in msgs:
                    p.produce("eos-out", m.value(), partition=m.partition())
                p.send_offsets_to_transaction(c.position(c.assignment()),
                                              c.consumer_group_metadata(), 30)
                p.commit_transaction(30)
                done += len(msgs)
            assert done == 20
        finally:
            c.close()
        committed = _committed(broker.bootstrap, "eos-in", "eos")  # asks for 12 partitions
        assert {q: committed[q] for q in (0, 1)} == {0: 10, 1: 10}
        out = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "eos-check",
                        "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        try:
            out.assign([TopicPartition("eos-out", q) for q in range(2)])
            got = []
            deadline = time.monotonic() + WAIT
            while len(got) < 20 and time.monotonic() < deadline:
                m = out.poll(0.2)
                if m is not None and not m.error():
                    got.append(int(m.value()))
            assert sorted(got) == list(range(20))
        finally:
            out.close()
