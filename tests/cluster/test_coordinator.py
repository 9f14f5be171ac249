"""The group coordinator in a cluster (issue 18's core): __consumer_offsets replicated three
times, each group coordinated by the leader of its offsets partition, commits answered once
on every in-sync replica, and the coordinator moving with leadership when its broker dies,
without losing a committed offset."""

from __future__ import annotations

import time

import pytest

from tests.support.cluster_harness import brokers, wait_for, zk, zookeeper  # noqa: F401

pytestmark = pytest.mark.broker

SETTINGS = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 200,
            "controlled.shutdown.retry.backoff.ms": 200, "offsets.topic.num.partitions": 5,
            "group.initial.rebalance.delay.ms": 0}


def _start(brokers, zk):
    for i in (1, 2, 3):
        brokers(i, SETTINGS)
    return brokers.wait_ready(zk, [1, 2, 3])


def _coordinator(bootstrap, group):
    from tests.support.kafka_wire import WireClient, request_class
    from brook.protocol.messages import make
    with WireClient(bootstrap.split(",")[0], 10) as w:
        r = w.request(make(request_class(10, 4), key_type=0, coordinator_keys=(group,)))
    c = r.coordinators[0]
    return c.error_code, c.node_id


def _offsets_partition(group, n=5):
    from brook.coordinator.group.partitioner import partition_for
    return partition_for(group, n)


def test_groups_are_coordinated_by_their_offsets_partitions_leader_and_survive_its_death(zk, brokers):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    bootstrap = _start(brokers, zk)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("events", 1, 3)], operation_timeout=20)["events"].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(100):
        p.produce("events", f"e{i}".encode())
    assert p.flush(30) == 0

    group = "g-failover"
    # The offsets topic is made on first use, replicated three times.
    code, node = wait_for(lambda: (r := _coordinator(bootstrap, group))[0] == 0 and r, 30,
                          "a coordinator for the group", brokers)
    state = wait_for(lambda: zk.json(f"/brokers/topics/__consumer_offsets/partitions/"
                                     f"{_offsets_partition(group)}/state"), 10, "offsets state", brokers)
    assert node == state["leader"] and sorted(state["isr"]) == [1, 2, 3]
    assert len(zk.json("/brokers/topics/__consumer_offsets")["partitions"]) == 5
    # Every broker names the same coordinator.
    for i in (1, 2, 3):
        assert _coordinator(brokers[i].bootstrap, group) == (0, node)

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.subscribe(["events"])
    got = 0
    deadline = time.monotonic() + 60
    while got < 60 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    c.commit(offsets=[TopicPartition("events", 0, 60)], asynchronous=False)
    c.close()

    # The coordinator dies: the group's offsets partition gets a new leader, which loads it.
    brokers[node].kill()
    rest = ",".join(brokers[i].bootstrap for i in (1, 2, 3) if i != node)
    code, new = wait_for(lambda: (r := _coordinator(rest, group))[0] == 0 and r[1] != node and r, 30,
                         "a new coordinator", brokers)
    c = Consumer({"bootstrap.servers": rest, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    committed = wait_for(lambda: (x := c.committed([TopicPartition("events", 0)], timeout=10))
                         and x[0].offset >= 0 and x, 30, "the committed offset from the new coordinator",
                         brokers)
    assert committed[0].offset == 60
    c.subscribe(["events"])
    first = None
    deadline = time.monotonic() + 60
    while first is None and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            first = m
    c.close()
    assert first is not None and first.offset() == 60


def test_a_follower_is_not_the_coordinator(zk, brokers):
    from tests.support.kafka_wire import WireClient, request_class
    from brook.protocol.messages import make
    from kio.schema.errors import ErrorCode
    bootstrap = _start(brokers, zk)
    group = "g-routing"
    code, node = wait_for(lambda: (r := _coordinator(bootstrap, group))[0] == 0 and r, 30,
                          "a coordinator", brokers)
    other = next(i for i in (1, 2, 3) if i != node)
    with WireClient(brokers[other].bootstrap, 10) as w:
        r = w.request(make(request_class(9, 8), groups=(make(__import__(
            request_class(9, 8).__module__, fromlist=["x"]).OffsetFetchRequestGroup,
            group_id=group, topics=None),), require_stable=False))
    assert r.groups[0].error_code == ErrorCode.not_coordinator


def test_a_commit_not_replicated_in_time_is_answered_coordinator_not_available(zk, brokers):
    """The coordinator's writes wait for the offsets partition's in-sync replicas, at most
    offsets.commit.timeout.ms: with both followers paused (still in the ISR), a commit is
    answered COORDINATOR_NOT_AVAILABLE after that time, which clients retry; once the
    followers are back, the retried commit succeeds."""
    import signal
    from kio.schema.errors import ErrorCode
    from tests.support.kafka_wire import WireClient
    from tests.support.commit_frames import commit
    settings = {**SETTINGS, "offsets.commit.timeout.ms": 1000, "replica.lag.time.max.ms": 60_000,
                "zookeeper.session.timeout.ms": 30_000}
    for i in (1, 2, 3):
        brokers(i, settings)
    bootstrap = brokers.wait_ready(zk, [1, 2, 3])
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("t", 1, 3)], operation_timeout=20)["t"].result(30)
    group = "g"  # commit_frames commits to topic "t", partition 0
    code, node = wait_for(lambda: (r := _coordinator(bootstrap, group))[0] == 0 and r, 30,
                          "a coordinator", brokers)
    with WireClient(brokers[node].bootstrap, 30) as w:
        first = wait_for(lambda: (a := w.request(commit(group, 5))).topics[0].partitions[0]
                         .error_code == ErrorCode.none and a, 30, "a first commit", brokers)
        assert first
        others = [i for i in (1, 2, 3) if i != node]
        for i in others:
            brokers[i].proc.send_signal(signal.SIGSTOP)
        try:
            start = time.monotonic()
            answer = w.request(commit(group, 6))
            took = time.monotonic() - start
            assert answer.topics[0].partitions[0].error_code == ErrorCode.coordinator_not_available
            assert 0.9 <= took < 10, took
        finally:
            for i in others:
                brokers[i].proc.send_signal(signal.SIGCONT)
        wait_for(lambda: w.request(commit(group, 7)).topics[0].partitions[0].error_code
                 == ErrorCode.none, 30, "the commit retried", brokers)


LOADING_GROUPS = [f"big-{g:03d}" for g in range(120)]
LOADING_PARTITIONS = 1000  # 120 groups x 1,000 partitions: 120,000 commit records to load


def test_the_new_coordinator_answers_load_in_progress_while_it_loads_then_the_offsets(zk, brokers):
    """120,000 commits in the only offsets partition; its leader stops (a controlled
    shutdown). OffsetFetch, asked over and over on the other brokers from before the stop,
    sees NOT_COORDINATOR (not the leader), COORDINATOR_LOAD_IN_PROGRESS while the new leader
    loads, and then exactly the offsets committed, never anything else."""
    import threading
    from kio.schema.errors import ErrorCode
    from tests.support.offsets_wire import OffsetsWire
    settings = {**SETTINGS, "offsets.topic.num.partitions": 1}
    for i in (1, 2, 3):
        brokers(i, settings)
    bootstrap = brokers.wait_ready(zk, [1, 2, 3])
    code, node = wait_for(lambda: (r := _coordinator(bootstrap, "big-000"))[0] == 0 and r, 30,
                          "a coordinator", brokers)
    expected = {g: {("wide", p): (i * 10_000 + p, 3, "") for p in range(LOADING_PARTITIONS)}
                for i, g in enumerate(LOADING_GROUPS)}
    with OffsetsWire(brokers[node].bootstrap, timeout=120) as wire:
        wire.create_topics(wide=LOADING_PARTITIONS)  # one replica each (default.replication.factor)
        probe = wire.commit_request(LOADING_GROUPS[0], {"wide": [(LOADING_PARTITIONS - 1, 0, 3, "")]})
        wait_for(lambda: wire.client.request(probe).topics[0].partitions[0].error_code
                 == ErrorCode.none, 30, "the topic known to the coordinator", brokers)
        wire.commit_all(wire.commit_request(g, {"wide": [(p, o, e, m) for (_, p), (o, e, m)
                                                         in offsets.items()]})
                        for g, offsets in expected.items())
        assert wire.fetch_groups(LOADING_GROUPS[-1:])[0] == {LOADING_GROUPS[-1]: expected[LOADING_GROUPS[-1]]}
    others = [i for i in (1, 2, 3) if i != node]
    seen: list[tuple[int, object]] = []  # (broker, error code or the offsets)
    stop = threading.Event()

    def ask(i: int) -> None:
        probe = LOADING_GROUPS[-1]
        with OffsetsWire(brokers[i].bootstrap, timeout=30) as w:
            while not stop.is_set():
                got, errors = w.fetch_groups([probe])
                seen.append((i, errors[probe] if probe in errors else got[probe] == expected[probe]))
                if probe not in errors:
                    stop.set()  # the new coordinator answered: the other asker stops too

    askers = [threading.Thread(target=ask, args=(i,), daemon=True) for i in others]
    for t in askers:
        t.start()
    time.sleep(0.2)
    assert brokers[node].stop() == 0
    stop.wait(60)
    for t in askers:
        t.join(30)
    answers = [a for _, a in seen]
    assert set(answers) <= {ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
                            ErrorCode.coordinator_not_available, True}, set(answers)
    assert ErrorCode.coordinator_load_in_progress in answers
    assert True in answers
    leader = next(i for i, a in seen if a is True)
    # Once it answered with offsets, the new coordinator never went back to loading.
    after = [a for i, a in seen if i == leader]
    assert after[-1] is True and after.index(True) == len(after) - 1
    def all_offsets():  # from whoever coordinates now (a busy machine may move it again)
        code, node = _coordinator(",".join(brokers[i].bootstrap for i in others), LOADING_GROUPS[0])
        if code != 0:
            return None
        with OffsetsWire(brokers[node].bootstrap, timeout=60) as wire:
            got, errors = wire.fetch_groups(LOADING_GROUPS)
        return not errors and got

    assert wait_for(all_offsets, 60, "every group's offsets", brokers) == expected


def test_commits_of_100_partitions_are_all_or_nothing_across_coordinator_kills(zk, brokers):
    """Each commit sets all 100 partitions of a topic to the same offset n, sent to the
    coordinator while it is killed (SIGKILL), five times: the next coordinator serves one n for
    all of them, at least the last acknowledged one (acknowledged means on every in-sync
    replica), and the killed broker comes back."""
    import random
    import threading
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from kio.schema.errors import ErrorCode
    from tests.support.kafka_wire import WireClient
    from tests.support.offsets_wire import OffsetsWire
    rng = random.Random(18)
    partitions, kills, group = 100, 5, "atomic"
    for i in (1, 2, 3):
        brokers(i, SETTINGS)
    bootstrap = brokers.wait_ready(zk, [1, 2, 3])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("atomic", partitions, 3)], operation_timeout=20)["atomic"].result(30)
    n = 0
    for round_ in range(kills):
        node = wait_for(lambda: (r := _coordinator(bootstrap, group))[0] == 0 and r[1], 30,
                        "the group's coordinator", brokers)
        with OffsetsWire(brokers[node].bootstrap) as wire:
            request = lambda k: wire.commit_request(group, {"atomic": [(p, k, -1, "") for p in range(partitions)]})  # noqa: E731
        acked = 0

        def commit_until_killed() -> None:
            nonlocal n, acked
            try:
                with WireClient(brokers[node].bootstrap, 30) as w:
                    while True:
                        n += 1
                        answer = w.request(request(n))
                        codes = {p.error_code for p in answer.topics[0].partitions}
                        if codes == {ErrorCode.none}:
                            acked = n
                        else:  # retried, as clients do: the topic not yet known to a new
                            # coordinator, or the commit not replicated within
                            # offsets.commit.timeout.ms on a busy machine (it may land later)
                            assert codes <= {ErrorCode.unknown_topic_or_partition,
                                             ErrorCode.coordinator_load_in_progress,
                                             ErrorCode.coordinator_not_available}, codes
            except (OSError, EOFError, ConnectionError):
                return  # the broker was killed

        thread = threading.Thread(target=commit_until_killed, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while acked < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.2))
        brokers[node].kill()  # while commits are in flight
        thread.join(30)
        assert not thread.is_alive()
        assert acked >= 10, "the commits made no progress before the kill"
        rest = ",".join(brokers[i].bootstrap for i in (1, 2, 3) if i != node)

        def read_committed():
            # A reader of its own each try: librdkafka may keep waiting on the killed
            # coordinator past its timeout (confluentinc/librdkafka#5511); a timeout is
            # asked again, until the new coordinator answers.
            reader = Consumer({"bootstrap.servers": rest, "group.id": group})
            try:
                return reader.committed([TopicPartition("atomic", p) for p in range(partitions)],
                                        timeout=10)
            except KafkaException as exc:
                if not exc.args[0].retriable() and exc.args[0].code() != KafkaError._TIMED_OUT:
                    raise
                return None
            finally:
                reader.close()

        committed = wait_for(read_committed, 60, "the committed offsets", brokers)
        values = {tp.offset for tp in committed}
        assert len(values) == 1, f"round {round_}: a commit was torn: {sorted(values)[:10]}"
        assert acked <= values.pop() <= n
        brokers[node].start()
        wait_for(lambda: zk.broker_ids() == [1, 2, 3], 30, "the broker back", brokers)
    for i in (1, 2, 3):
        assert "Traceback" not in brokers[i].stderr_path.read_text()
