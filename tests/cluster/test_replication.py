"""Replication on real brokers and a real ZooKeeper: a topic with three replicas on three
brokers, acks=all produce through confluent-kafka, and leadership moving when a leader dies."""

from __future__ import annotations

import contextlib
import signal
import time

import pytest

from tests.support.cluster_harness import (ClusterBrokers, ZkView, brokers, own_zookeeper,  # noqa: F401
                                           wait_for, zk, zookeeper)

pytestmark = pytest.mark.broker

FAST = {"replica.lag.time.max.ms": 3000, "replica.fetch.wait.max.ms": 100,
        "replica.fetch.backoff.ms": 200, "controlled.shutdown.retry.backoff.ms": 200}


def _three(brokers, zk, extra=None):
    procs = [brokers(i, {**FAST, **(extra or {})}) for i in (1, 2, 3)]
    brokers.wait_ready(zk, [1, 2, 3])
    return procs


def _bootstrap(procs) -> str:
    return ",".join(p.bootstrap for p in procs if p.proc is not None and p.proc.poll() is None)


def _create(bootstrap: str, name: str, partitions: int = 1, rf: int = 3, configs=None):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(name, partitions, rf, config=configs or {})],
                             operation_timeout=20, request_timeout=30)
    fs[name].result(timeout=40)


def _state(zk, topic, p=0):
    return zk.json(f"/brokers/topics/{topic}/partitions/{p}/state")


def _metadata(bootstrap, topic):
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return md.topics[topic].partitions


def _produce(bootstrap, topic, values, **conf):
    from confluent_kafka import Producer
    acked, failed = [], []

    def report(err, msg):
        (failed if err else acked).append(msg.value() if not err else (msg.value(), err))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": 60000, **conf})
    for v in values:
        p.produce(topic, v, on_delivery=report)
        p.poll(0)
    p.flush(90)
    return acked, failed


def _consume_all(bootstrap, topic, expected: int, timeout=60):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m.value())
    c.close()
    return out


def test_a_replicated_topic_is_led_by_one_and_followed_by_all(zk, brokers):
    procs = _three(brokers, zk)
    bootstrap = _bootstrap(procs)
    _create(bootstrap, "rep", rf=3)
    assignment = zk.json("/brokers/topics/rep")
    assert sorted(assignment["partitions"]["0"]) == [1, 2, 3]
    state = wait_for(lambda: _state(zk, "rep"), 20, "the partition state written", brokers)
    assert state["leader"] == assignment["partitions"]["0"][0]
    assert sorted(state["isr"]) == [1, 2, 3] and state["leader_epoch"] == 0
    parts = wait_for(lambda: _metadata(bootstrap, "rep"), 20, "metadata of rep", brokers)
    assert parts[0].leader == state["leader"] and sorted(parts[0].replicas) == [1, 2, 3]
    values = [f"v{i}".encode() for i in range(500)]
    acked, failed = _produce(bootstrap, "rep", values)
    assert failed == [] and acked == values
    assert _consume_all(bootstrap, "rep", 500) == values


def test_leader_killed_a_follower_takes_over_without_losing_acknowledged_records(zk, brokers):
    procs = _three(brokers, zk)
    bootstrap = _bootstrap(procs)
    _create(bootstrap, "failover", rf=3, configs={"min.insync.replicas": "2"})
    first = [f"a{i}".encode() for i in range(300)]
    acked, failed = _produce(bootstrap, "failover", first)
    assert failed == [] and acked == first
    state = _state(zk, "failover")
    leader = state["leader"]
    brokers[leader].proc.send_signal(signal.SIGKILL)
    brokers[leader].proc.wait()
    new = wait_for(lambda: (s := _state(zk, "failover")) and s["leader"] not in (leader, -1) and s,
                   30, "a new leader elected", brokers)
    assert new["leader_epoch"] > state["leader_epoch"]
    assert leader not in new["isr"]
    rest = [p for i, p in brokers.brokers.items() if i != leader]
    bootstrap = _bootstrap(rest)
    second = [f"b{i}".encode() for i in range(300)]
    acked2, failed2 = _produce(bootstrap, "failover", second)
    assert failed2 == [] and acked2 == second
    assert _consume_all(bootstrap, "failover", 600) == first + second


def _end_offsets(bootstrap, topic, partitions):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        c.close()


def test_followers_keep_replicating_when_fetch_responses_end_inside_a_batch(zk, brokers):
    # Large producer batches and a follower fetch limit that is not a multiple of them: most
    # follower fetches end inside a batch. The followers keep the whole batches and fetch the
    # rest; before, every follower failed on the cut batch for good and acks=all never came.
    procs = _three(brokers, zk, {"replica.fetch.max.bytes": 700_001})
    bootstrap = _bootstrap(procs)
    _create(bootstrap, "cut", partitions=4, rf=3, configs={"min.insync.replicas": "2"})
    values = [b"%06d" % i + b"x" * 1018 for i in range(24_000)]
    acked, failed = _produce(bootstrap, "cut", values, **{"batch.size": 262144, "message.timeout.ms": 60000})
    assert failed == [] and len(acked) == len(values), f"{len(failed)} failed, e.g. {failed[:1]}"
    ends = _end_offsets(bootstrap, "cut", 4)
    assert sum(ends) == len(values)
    # Every follower holds every record: each broker alone, asked as leader after the others
    # stop, would need them; here the ISR in ZooKeeper still names all three.
    for p in range(4):
        assert sorted(_state(zk, "cut", p)["isr"]) == [1, 2, 3]
    assert "TruncatedBatchError" not in brokers.tails()


def _leader_of(zk, topic, p=0):
    return _state(zk, topic, p)["leader"]


def _wire(proc):
    from tests.support.kafka_wire import WireClient
    return WireClient(proc.bootstrap, 10)


def _produce_request(topic: str, value: bytes, acks: int = -1, timeout_ms: int = 5000):
    from datetime import timedelta
    from tests.support.kafka_wire import request_class
    from brook.protocol.messages import make
    cls = request_class(0, 9)
    mod = __import__(cls.__module__, fromlist=["x"])
    records = _batch([value])
    return make(cls, transactional_id=None, acks=acks, timeout=timedelta(milliseconds=timeout_ms),
                topic_data=(make(mod.TopicProduceData, name=topic, partition_data=(
                    make(mod.PartitionProduceData, index=0, records=records),)),))


def _batch(values):
    from brook.records import Record, encode_batch
    now = int(time.time() * 1000)
    return encode_batch([Record(i, now, None, v) for i, v in enumerate(values)])


def _fetch_request(topic: str, offset: int, leader_epoch: int = -1):
    from datetime import timedelta
    from tests.support.kafka_wire import request_class
    from brook.protocol.messages import make
    cls = request_class(1, 12)
    mod = __import__(cls.__module__, fromlist=["x"])
    return make(cls, replica_id=-1, max_wait=timedelta(milliseconds=10), min_bytes=0, max_bytes=1 << 20,
                isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
                topics=(make(mod.FetchTopic, topic=topic, partitions=(make(
                    mod.FetchPartition, partition=0, current_leader_epoch=leader_epoch, fetch_offset=offset,
                    last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),)),))


def _codes(response):
    return [p.error_code for t in response.responses for p in getattr(t, "partition_responses", None)
            or getattr(t, "partitions", ())]


def test_followers_refuse_clients_and_stale_or_future_epochs_are_told_apart(zk, brokers):
    from kio.schema.errors import ErrorCode
    procs = _three(brokers, zk)
    _create(_bootstrap(procs), "routed", rf=3)
    leader = wait_for(lambda: _leader_of(zk, "routed") if _metadata(_bootstrap(procs), "routed")[0].leader >= 0
                      else None, 20, "a leader", brokers)
    follower = next(i for i in (1, 2, 3) if i != leader)
    with _wire(brokers[follower]) as w:
        assert _codes(w.request(_produce_request("routed", b"x"))) == [ErrorCode.not_leader_or_follower]
        assert _codes(w.request(_fetch_request("routed", 0))) == [ErrorCode.not_leader_or_follower]
    with _wire(brokers[leader]) as w:
        assert _codes(w.request(_produce_request("routed", b"x"))) == [ErrorCode.none]
        assert _codes(w.request(_fetch_request("routed", 0, leader_epoch=0))) == [ErrorCode.none]
        assert _codes(w.request(_fetch_request("routed", 0, leader_epoch=7))) == [ErrorCode.unknown_leader_epoch]
    # Every broker lists every broker, and the same leader.
    for i in (1, 2, 3):
        from confluent_kafka.admin import AdminClient
        md = AdminClient({"bootstrap.servers": brokers[i].bootstrap}).list_topics("routed", timeout=10)
        assert sorted(md.brokers) == [1, 2, 3]
        assert md.topics["routed"].partitions[0].leader == leader


def test_an_isr_change_refused_as_ineligible_fences_the_partition_epoch(zk, brokers):
    """AlterPartition adding a broker that is not alive is refused INELIGIBLE_REPLICA, and the
    controller writes the partition's state again under a new partition epoch: a copy of the
    same request sent earlier and still on its way (a leader asks again after a timeout) then
    meets INVALID_UPDATE_VERSION instead of adding the broker after the leader dropped the
    change (found by the replication simulation, seed 60825)."""
    import uuid

    from kio.schema.errors import ErrorCode

    from brook.controller.controller import topic_uuid
    from tests.support.wire_requests import req_mod
    procs = _three(brokers, zk)
    _create(_bootstrap(procs), "fenced", rf=3)
    leader = wait_for(lambda: _leader_of(zk, "fenced"), 20, "a leader", brokers)
    gone = next(i for i in (1, 2, 3) if i not in (leader, zk.controller()))
    brokers[gone].kill()
    wait_for(lambda: gone not in _state(zk, "fenced")["isr"], 30, "the ISR without it", brokers)
    before = _state(zk, "fenced")
    version = zk.get("/brokers/topics/fenced/partitions/0/state")[1].version
    topic_id = topic_uuid(zk.json("/brokers/topics/fenced")["topic_id"])
    assert isinstance(topic_id, uuid.UUID)
    m = req_mod(56, 2)

    def ask():
        from brook.protocol.messages import make
        from tests.support.broker_login import as_broker, broker_epoch
        with as_broker(zk, brokers[zk.controller()].bootstrap, leader) as w:  # as the leader does
            answer = w.request(make(m.AlterPartitionRequest, broker_id=leader,
                                    broker_epoch=broker_epoch(zk, leader), topics=(
                make(m.TopicData, topic_id=topic_id, partitions=(make(
                    m.PartitionData, partition_index=0, leader_epoch=before["leader_epoch"],
                    new_isr=tuple(before["isr"]) + (gone,), leader_recovery_state=0,
                    partition_epoch=version),)),)))
        return answer.topics[0].partitions[0]

    refused = ask()
    assert refused.error_code == ErrorCode.ineligible_replica
    assert refused.partition_epoch == version + 1 and list(refused.isr) == before["isr"]
    after, stat = zk.get("/brokers/topics/fenced/partitions/0/state")
    assert stat.version == version + 1
    assert {k: v for k, v in __import__("json").loads(after).items() if k != "controller_epoch"} == \
        {k: v for k, v in before.items() if k != "controller_epoch"}
    late = ask()  # the same request again, as a late copy of it would arrive
    assert late.error_code == ErrorCode.invalid_update_version
    assert _state(zk, "fenced")["isr"] == before["isr"]


def test_acks_all_is_refused_below_min_insync_replicas_and_acks_1_is_not(zk, brokers):
    procs = _three(brokers, zk)
    _create(_bootstrap(procs), "guarded", rf=3, configs={"min.insync.replicas": "2"})
    leader = wait_for(lambda: _leader_of(zk, "guarded"), 20, "a leader", brokers)
    for i in (1, 2, 3):
        if i != leader:
            brokers[i].kill()
    wait_for(lambda: _state(zk, "guarded")["isr"] == [leader], 30, "the ISR down to the leader", brokers)
    from kio.schema.errors import ErrorCode
    with _wire(brokers[leader]) as w:
        wait_for(lambda: _codes(w.request(_produce_request("guarded", b"x"))) == [ErrorCode.not_enough_replicas],
                 10, "NOT_ENOUGH_REPLICAS for acks=all", brokers)
        assert _codes(w.request(_produce_request("guarded", b"y", acks=1))) == [ErrorCode.none]


def test_acks_all_waiting_while_the_isr_shrinks_below_min_insync_is_not_acknowledged(zk, brokers):
    # Both followers paused past their ZooKeeper sessions while an acks=all produce waits on
    # the leader: the controller shrinks the ISR to the leader alone, which moves the high
    # watermark past the waiting records. They are held by one broker only, so the answer is
    # NOT_ENOUGH_REPLICAS_AFTER_APPEND, not success (before: success, then lost with the leader).
    from kio.schema.errors import ErrorCode

    from tests.support.kafka_wire import WireClient
    procs = _three(brokers, zk)
    _create(_bootstrap(procs), "shrunk", rf=3, configs={"min.insync.replicas": "2"})
    leader = wait_for(lambda: _leader_of(zk, "shrunk"), 20, "a leader", brokers)
    followers = [i for i in (1, 2, 3) if i != leader]
    with WireClient(brokers[leader].bootstrap, 60) as w:
        assert _codes(w.request(_produce_request("shrunk", b"before"))) == [ErrorCode.none]
        for i in followers:
            brokers[i].proc.send_signal(signal.SIGSTOP)
        try:
            codes = _codes(w.request(_produce_request("shrunk", b"waiting", timeout_ms=30000)))
            assert _state(zk, "shrunk")["isr"] == [leader]
        finally:
            for i in followers:
                brokers[i].proc.send_signal(signal.SIGCONT)
    assert codes == [ErrorCode.not_enough_replicas_after_append]


@pytest.fixture
def small_disk(tmp_path):
    """A 6 MiB disk for one broker's log dir."""
    from tests.support.small_disk import small_tmpfs
    with small_tmpfs(tmp_path / "small", 6 << 20) as mount:
        yield mount


def test_a_leader_whose_disk_is_full_steps_down_and_another_in_sync_replica_leads(zk, brokers, small_disk):
    # Broker 1's log dir is on a small disk and it leads the topic. When its disk fills, it
    # moves its leaderships to the other in-sync replicas and stops (Kafka's broker stops once
    # its log dirs are offline); the producer carries on against the new leader, and every
    # acknowledged record is there. Before, broker 1 kept leading and refused every write.
    from confluent_kafka.admin import AdminClient, NewTopic
    b1 = brokers(1, {**FAST, "log.dirs": str(small_disk / "logs"), "log.segment.bytes": 1 << 20})
    procs = [b1] + [brokers(i, FAST) for i in (2, 3)]
    brokers.wait_ready(zk, [1, 2, 3])
    bootstrap = _bootstrap(procs)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics(
        [NewTopic("full", num_partitions=1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "2"})],
        operation_timeout=20)
    fs["full"].result(timeout=40)
    wait_for(lambda: _leader_of(zk, "full") == 1, 20, "broker 1 leading", brokers)
    (small_disk / "ballast").write_bytes(b"\0" * (3 << 20))
    values = [b"%05d" % i + b"v" * 4000 for i in range(1500)]  # 6 MB: more than the disk holds
    acked, failed = _produce(bootstrap, "full", values, **{"enable.idempotence": True})
    assert failed == [] and sorted(acked) == values
    assert b1.proc.wait(30) == 1
    assert "log dir" in b1.stderr_tail() and "is offline" in b1.stderr_tail()
    state = _state(zk, "full")
    assert state["leader"] in (2, 3) and 1 not in state["isr"]
    assert _consume_all(_bootstrap(procs[1:]), "full", len(values)) == values


def _broker_1_on_a_small_disk(zk, brokers, small_disk, topic: str, replicas: list[int]):
    """Three brokers, broker 1's log dir on `small_disk`, and a one-partition topic with
    `replicas` in that order: broker 1's process and the bootstrap servers."""
    from confluent_kafka.admin import AdminClient, NewTopic
    b1 = brokers(1, {**FAST, "log.dirs": str(small_disk / "logs")})
    procs = [b1] + [brokers(i, FAST) for i in (2, 3)]
    brokers.wait_ready(zk, [1, 2, 3])
    bootstrap = _bootstrap(procs)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[replicas])],
                             operation_timeout=20)
    fs[topic].result(timeout=40)
    return b1, bootstrap


def _fill_to_the_last_byte(disk) -> None:
    with open(disk / "ballast", "wb") as ballast:
        with contextlib.suppress(OSError):
            while True:
                ballast.write(b"\0" * 65536)
                ballast.flush()


def test_a_follower_whose_disk_is_full_elected_leader_steps_down(zk, brokers, small_disk):
    # Found by the nemesis (a disk-full broker, the last in the ISR, elected leader): taking
    # the leadership writes the leader-epoch checkpoint, which fails on a full disk. The
    # partition answers KAFKA_STORAGE_ERROR and the broker's log dir goes offline: it moves its
    # leaderships away and stops. Before, the error ended the whole LeaderAndIsr (closing the
    # controller's connection), the controller sent it again and again, and the broker held
    # the leadership in ZooKeeper without ever serving it.
    b1, bootstrap = _broker_1_on_a_small_disk(zk, brokers, small_disk, "after-full", [2, 1, 3])
    wait_for(lambda: _state(zk, "after-full")["isr"] == [2, 1, 3], 30, "all in sync", brokers)
    values = [f"v{i}".encode() for i in range(100)]
    assert _produce(bootstrap, "after-full", values)[1] == []
    wait_for(lambda: 1 in _state(zk, "after-full")["isr"], 30, "broker 1 in sync", brokers)
    _fill_to_the_last_byte(small_disk)
    brokers[2].kill()  # the preferred order makes broker 1 the next leader
    assert b1.proc.wait(60) == 1
    assert "cannot take the leadership" in b1.stderr_tail(400)
    wait_for(lambda: _state(zk, "after-full")["leader"] == 3, 30, "broker 3 leading", brokers)
    assert _consume_all(brokers[3].bootstrap, "after-full", len(values)) == values


def test_a_follower_whose_disk_is_full_goes_offline_at_a_new_leader_epoch(zk, brokers, small_disk):
    # Found by the nemesis: a follower with a full disk copying the first batch of a new leader
    # epoch fails to write its leader-epoch checkpoint. That failure was an OSError the fetcher
    # only logged, again at every fetch, the log dir never taken offline; now it is a storage
    # error like a failed append: the broker stops, as Kafka's does with its log dirs offline.
    b1, bootstrap = _broker_1_on_a_small_disk(zk, brokers, small_disk, "epoch-full", [2, 3, 1])
    assert _produce(bootstrap, "epoch-full", [b"before"])[1] == []
    wait_for(lambda: _state(zk, "epoch-full")["isr"] == [2, 3, 1], 30, "all in sync", brokers)
    _fill_to_the_last_byte(small_disk)
    brokers[2].kill()
    wait_for(lambda: _state(zk, "epoch-full")["leader"] == 3, 30, "broker 3 leading", brokers)
    assert _produce(brokers[3].bootstrap, "epoch-full", [b"after"])[1] == []
    assert b1.proc.wait(60) == 1
    assert "leader-epoch checkpoint" in b1.stderr_tail(400)


def test_a_broker_restarted_with_an_empty_data_dir_replicates_everything_back(zk, brokers):
    import shutil
    procs = _three(brokers, zk)
    _create(_bootstrap(procs), "refill", rf=3)
    values = [f"r{i}".encode() for i in range(2000)]
    acked, failed = _produce(_bootstrap(procs), "refill", values)
    assert failed == []
    leader = _leader_of(zk, "refill")
    victim = next(i for i in (1, 2, 3) if i != leader)
    brokers[victim].kill()
    shutil.rmtree(brokers[victim].log_dir)
    wait_for(lambda: victim not in _state(zk, "refill")["isr"], 30, "the victim out of the ISR", brokers)
    brokers[victim].start()
    wait_for(lambda: victim in _state(zk, "refill")["isr"], 60, "the refilled broker back in the ISR", brokers)
    # It holds every record: make it the only one left with them and read from it.
    for i in (1, 2, 3):
        if i != victim:
            brokers[i].stop()
    wait_for(lambda: _leader_of(zk, "refill") == victim, 30, "the refilled broker leading", brokers)
    assert _consume_all(brokers[victim].bootstrap, "refill", 2000) == values


def test_a_paused_leader_is_replaced_and_its_late_writes_are_never_acknowledged(zk, brokers):
    procs = _three(brokers, zk, {"request.timeout.ms": 3000})
    _create(_bootstrap(procs), "zombie", rf=3, configs={"min.insync.replicas": "2"})
    first = [f"a{i}".encode() for i in range(200)]
    assert _produce(_bootstrap(procs), "zombie", first)[1] == []
    state = _state(zk, "zombie")
    old = state["leader"]
    brokers[old].proc.send_signal(signal.SIGSTOP)
    try:
        new = wait_for(lambda: (s := _state(zk, "zombie"))["leader"] not in (old, -1) and s, 30,
                       "a new leader while the old one is paused", brokers)
        assert new["leader_epoch"] > state["leader_epoch"]
        others = _bootstrap([p for i, p in brokers.brokers.items() if i != old])
        second = [f"b{i}".encode() for i in range(200)]
        assert _produce(others, "zombie", second)[1] == []
    finally:
        brokers[old].proc.send_signal(signal.SIGCONT)
    # The zombie wakes up believing it leads: what it takes is never acknowledged with acks=all.
    from kio.schema.errors import ErrorCode
    with _wire(brokers[old]) as w:
        codes = _codes(w.request(_produce_request("zombie", b"late", timeout_ms=2000)))
    assert codes[0] != ErrorCode.none
    wait_for(lambda: old in _state(zk, "zombie")["isr"], 60, "the old leader back as an in-sync follower", brokers)
    assert _consume_all(others, "zombie", 400) == first + second


def test_sigterm_moves_leadership_away_before_the_broker_stops(zk, brokers):
    procs = _three(brokers, zk)
    _create(_bootstrap(procs), "graceful", rf=3)
    assert _produce(_bootstrap(procs), "graceful", [b"x"] * 10)[1] == []
    state = _state(zk, "graceful")
    old = state["leader"]
    brokers[old].stop()
    after = _state(zk, "graceful")
    assert after["leader"] not in (old, -1), "leadership moved before the process exited"
    assert "Controlled shutdown succeeded" in brokers[old].stderr_path.read_text()
    brokers[old].start()
    wait_for(lambda: sorted(_state(zk, "graceful")["isr"]) == [1, 2, 3], 60, "back in the ISR", brokers)


def _produce_until(stop, bootstrap: str, topic: str, acked: list, failed: list, conf: dict) -> None:
    """acks=all records m0000000, m0000001, ... every 2 ms until ``stop``, then flushed; the
    acknowledged values go to ``acked``, (value, error) pairs to ``failed``."""
    from confluent_kafka import Producer

    def report(err, msg):
        (failed if err else acked).append((msg.value(), str(err)) if err else msg.value())

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                  "message.timeout.ms": 120000, **conf})
    i = 0
    while not stop.is_set():
        p.produce(topic, f"m{i:07d}".encode(), on_delivery=report)
        p.poll(0)
        i += 1
        time.sleep(0.002)
    p.flush(120)


def test_a_rolling_restart_under_acks_all_load_loses_nothing(zk, brokers):
    import threading
    procs = _three(brokers, zk)
    bootstrap = _bootstrap(procs)
    _create(bootstrap, "rolling", rf=3, configs={"min.insync.replicas": "2"})
    acked, failed = [], []
    stop = threading.Event()
    t = threading.Thread(target=_produce_until, args=(stop, bootstrap, "rolling", acked, failed, {
        "enable.idempotence": False, "max.in.flight.requests.per.connection": 1,
        "retries": 1000000}))
    t.start()
    try:
        time.sleep(1)
        for i in (1, 2, 3):
            brokers[i].stop()
            brokers[i].start()
            wait_for(lambda: sorted(_state(zk, "rolling")["isr"]) == [1, 2, 3], 60,
                     f"broker {i} back in the ISR", brokers)
        time.sleep(1)
    finally:
        stop.set()
        t.join(180)
    assert failed == [] and len(acked) > 100
    got = _consume_to_end(bootstrap, "rolling")
    # Retries may write a record twice (no idempotence), never lose or reorder an acknowledged
    # one; with duplicates the log holds more records than were acknowledged, so it is read to
    # its high watermark, not to a count.
    pos = 0
    for v in acked:
        assert v in got[pos:], (f"acknowledged {v!r} is not in the log after position {pos} "
                                f"({len(got)} records read, {len(acked)} acknowledged)")
        pos = got.index(v, pos) + 1


def test_leaders_killed_in_a_loop_under_an_idempotent_producer_lose_and_repeat_nothing(zk, brokers):
    """SIGKILL of the partition's leader three times while an idempotent acks=all producer and
    a consumer run: every acknowledged record is in the log once and in order (the producer
    state moves with leadership, so a resent batch is not written twice), and the consumer
    reads on past each failover. Each killed broker comes back before the next kill, so the
    ISR can hold `min.insync.replicas=2`."""
    import threading
    from confluent_kafka import Consumer, TopicPartition
    procs = _three(brokers, zk)
    bootstrap = _bootstrap(procs)
    _create(bootstrap, "loop", rf=3, configs={"min.insync.replicas": "2"})
    acked, failed, consumed = [], [], []
    stop = threading.Event()

    def consume():
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "loop-reader",
                      "enable.auto.commit": False})
        c.assign([TopicPartition("loop", 0, 0)])
        while not stop.is_set() or len(consumed) < len(acked):
            m = c.poll(0.2)
            if m is not None and not m.error():
                consumed.append(m.value())
            if stop.is_set() and time.monotonic() > stop_at[0] + 60:
                break
        c.close()

    stop_at = [float("inf")]
    threads = [threading.Thread(target=_produce_until, args=(stop, bootstrap, "loop", acked, failed,
                                                             {"enable.idempotence": True})),
               threading.Thread(target=consume)]
    for t in threads:
        t.start()
    epochs = []
    try:
        for _ in range(3):
            before = len(consumed)
            wait_for(lambda: len(consumed) > before + 100, 60, "the consumer reading on", brokers)
            state = _state(zk, "loop")
            epochs.append(state["leader_epoch"])
            victim = state["leader"]
            brokers[victim].proc.send_signal(signal.SIGKILL)
            brokers[victim].proc.wait()
            wait_for(lambda: _state(zk, "loop")["leader"] not in (victim, -1), 30,
                     "a new leader elected", brokers)
            brokers[victim].start()
            wait_for(lambda: sorted(_state(zk, "loop")["isr"]) == [1, 2, 3], 60,
                     f"broker {victim} back in the ISR", brokers)
        before = len(consumed)
        wait_for(lambda: len(consumed) > before + 100, 60, "the consumer reading after the last kill",
                 brokers)
    finally:
        stop_at[0] = time.monotonic()
        stop.set()
        for t in threads:
            t.join(180)
    assert failed == [] and len(acked) > 300
    assert epochs == sorted(set(epochs)), epochs
    log = _consume_to_end(_bootstrap(procs), "loop")
    assert len(log) == len(set(log)), "a record is in the log twice"
    assert log == sorted(log), "records are out of order in the log"
    assert set(acked) <= set(log), f"{len(set(acked) - set(log))} acknowledged records are lost"
    assert consumed == log[:len(consumed)], "the consumer saw something other than the log"


def _consume_to_end(bootstrap, topic, timeout=90):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"end-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
    c.assign([TopicPartition(topic, 0, 0)])
    out, last = [], -1
    deadline = time.monotonic() + timeout
    while last < high - 1 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m.value())
            last = m.offset()
    c.close()
    return out


def test_the_controllers_death_moves_its_leaderships_and_the_next_controller_carries_on(zk, brokers):
    procs = _three(brokers, zk)
    bootstrap = _bootstrap(procs)
    _create(bootstrap, "ctl", partitions=3, rf=3, configs={"min.insync.replicas": "2"})
    first = [f"c{i}".encode() for i in range(300)]
    assert _produce(bootstrap, "ctl", first)[1] == []
    controller = zk.controller()
    epoch = zk.controller_epoch()
    led = [p for p in range(3) if _leader_of(zk, "ctl", p) == controller]
    brokers[controller].kill()
    wait_for(lambda: zk.controller() not in (None, controller), 30, "another controller", brokers)
    assert zk.controller_epoch() == epoch + 1
    for p in led:
        wait_for(lambda: _leader_of(zk, "ctl", p) not in (controller, -1), 30,
                 f"partition {p} led elsewhere", brokers)
        assert _state(zk, "ctl", p)["controller_epoch"] == epoch + 1
    rest = _bootstrap([brokers[i] for i in (1, 2, 3) if i != controller])
    second = [f"d{i}".encode() for i in range(300)]
    assert _produce(rest, "ctl", second)[1] == []
    # The old controller comes back as a broker and catches up; the topic is whole on it.
    brokers[controller].start()
    wait_for(lambda: all(sorted(_state(zk, "ctl", p)["isr"]) == [1, 2, 3] for p in range(3)), 60,
             "every ISR complete", brokers)
    assert zk.controller() != controller


def test_zookeeper_restarted_with_its_data_and_replication_goes_on(own_zookeeper, tmp_path):
    from tests.support.cluster_harness import ClusterBrokers, ZkView
    server = own_zookeeper.start()
    cluster = ClusterBrokers(tmp_path, lambda: server.connect)
    view = ZkView(server, "")
    try:
        # Kafka's default connection timeout is the session timeout: a call waits that long for
        # the session the restart may have cost (the harness's 1 s is for start-up tests).
        procs = [cluster(i, {**FAST, "zookeeper.connection.timeout.ms": 10_000}) for i in (1, 2, 3)]
        # every broker naming the controller first: librdkafka's admin client, told "no
        # controller" once by a broker just started, waits out its timeouts (1 run in 6 here)
        cluster.wait_ready(view, [1, 2, 3])
        bootstrap = _bootstrap(procs)
        _create(bootstrap, "zkr", rf=3)
        first = [f"z{i}".encode() for i in range(200)]
        assert _produce(bootstrap, "zkr", first)[1] == []
        server.restart(down_for=1.0)
        second = [f"y{i}".encode() for i in range(200)]
        assert _produce(bootstrap, "zkr", second)[1] == []
        _create(bootstrap, "after-restart", rf=3)
        assert _consume_all(bootstrap, "zkr", 400) == first + second
        # The test's own ZooKeeper client may still be reconnecting after the restart (its
        # reads give None meanwhile): the full ISR is waited for, not read once.
        wait_for(lambda: sorted((view.json("/brokers/topics/zkr/partitions/0/state") or
                                 {"isr": []})["isr"]) == [1, 2, 3], 30, "the full ISR", cluster)
    finally:
        view.close()
        cluster.close()


def test_a_new_leader_behind_on_the_high_watermark_does_not_tell_consumers_of_a_truncation(zk, brokers):
    """A follower learns the high watermark from its fetches, so a new leader can start with
    one below records consumers have already read (its ISR's other member has not fetched from
    it yet). Asked as a client for the end of the epoch those records belong to
    (OffsetForLeaderEpoch, KIP-320), it answers from its log, as Kafka does: an answer capped
    at its high watermark made librdkafka see a truncation and read committed records again.
    A fetch at the consumer's position is answered empty until the high watermark gets there."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from kio.schema.errors import ErrorCode
    # Followers' fetches wait up to 10 s for new data: the records' high watermark reaches the
    # followers only on the fetch after the one that brought the records.
    procs = _three(brokers, zk, {"replica.fetch.wait.max.ms": 10_000, "replica.lag.time.max.ms": 30_000})
    controller = wait_for(lambda: zk.controller(), 20, "a controller", brokers)
    leader, paused = [i for i in (1, 2, 3) if i != controller]
    successor = controller  # first in the ISR after the leader: the controlled shutdown's choice
    admin = AdminClient({"bootstrap.servers": _bootstrap(procs)})
    admin.create_topics([NewTopic("lagging", 1, replica_assignment=[[leader, successor, paused]])],
                        operation_timeout=20)["lagging"].result(40)
    wait_for(lambda: _state(zk, "lagging")["leader"] == leader, 20, "the leader", brokers)
    acked, failed = _produce(_bootstrap(procs), "lagging", [b"r%d" % i for i in range(10)])
    assert len(acked) == 10 and not failed
    with _wire(brokers[leader]) as w:
        assert w.request(_fetch_request("lagging", 0)).responses[0].partitions[0].high_watermark == 10
    brokers[paused].proc.send_signal(signal.SIGSTOP)  # in the ISR, fetching nothing from the next leader
    try:
        assert brokers[leader].stop() == 0  # a controlled shutdown: leadership moves at once
        state = wait_for(lambda: (s := _state(zk, "lagging"))["leader"] == successor and s, 10,
                         "the successor leading", brokers)
        assert sorted(state["isr"]) == sorted([successor, paused])
        with _wire(brokers[successor]) as w:
            fetched = w.request(_fetch_request("lagging", 10, leader_epoch=state["leader_epoch"]))
            part = fetched.responses[0].partitions[0]
            assert part.error_code == ErrorCode.none and part.high_watermark < 10  # the situation
            assert not part.records
            end = w.request(_offset_for_leader_epoch("lagging", epoch=0, current=state["leader_epoch"]))
            answer = end.topics[0].partitions[0]
            assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (ErrorCode.none, 0, 10)
            # ListOffsets latest: the high watermark for a consumer, the log end for a replica.
            for replica_id, latest in ((-1, part.high_watermark), (-2, 10)):
                listed = w.request(_list_latest("lagging", replica_id, state["leader_epoch"]))
                got = listed.topics[0].partitions[0]
                assert (got.error_code, got.offset) == (ErrorCode.none, latest), replica_id
    finally:
        brokers[paused].proc.send_signal(signal.SIGCONT)


def _offset_for_leader_epoch(topic: str, epoch: int, current: int):
    from tests.support.kafka_wire import request_class
    from brook.protocol.messages import make
    cls = request_class(23, 4)
    mod = __import__(cls.__module__, fromlist=["x"])
    return make(cls, replica_id=-1, topics=(make(mod.OffsetForLeaderTopic, topic=topic, partitions=(
        make(mod.OffsetForLeaderPartition, partition=0, current_leader_epoch=current,
             leader_epoch=epoch),)),))


def _list_latest(topic: str, replica_id: int, current: int):
    from tests.support.kafka_wire import request_class
    from brook.protocol.messages import make
    cls = request_class(2, 7)
    mod = __import__(cls.__module__, fromlist=["x"])
    return make(cls, replica_id=replica_id, isolation_level=0, topics=(make(
        mod.ListOffsetsTopic, name=topic, partitions=(make(
            mod.ListOffsetsPartition, partition_index=0, current_leader_epoch=current,
            timestamp=-1),)),))


@contextlib.contextmanager
def _one_broker_on_its_own_zookeeper(own_zookeeper, tmp_path):
    """(ZooKeeper server, the brokers, broker 1) with a 3 s session, for tests that stop and
    start ZooKeeper under it."""
    server = own_zookeeper.start()
    cluster = ClusterBrokers(tmp_path, lambda: server.connect)
    view = ZkView(server, "")
    try:
        proc = cluster(1, {**FAST, "zookeeper.session.timeout.ms": 3000})
        wait_for(lambda: view.broker_ids() == [1], 30, "registered", cluster)
        view.close()
        yield server, cluster, proc
    finally:
        cluster.close()


def test_create_topics_meeting_an_expired_zookeeper_session_is_answered_not_controller(own_zookeeper, tmp_path):
    """A CreateTopics whose ZooKeeper write cannot be made (the server away for longer than
    the connection timeout, and the session expiring: the broker resigns as controller) is
    answered NOT_CONTROLLER, which clients retry on the controller they find next; the
    connection stays open (it was closed on the exception: a transport failure to clients)."""
    from kio.schema.errors import ErrorCode

    from tests.support.kafka_wire import WireClient
    from tests.support.wire_requests import create_topic, req_mod
    with _one_broker_on_its_own_zookeeper(own_zookeeper, tmp_path) as (server, cluster, proc):
        with WireClient(proc.bootstrap, timeout=60) as c:
            server.stop()
            m = req_mod(19, 7)
            from datetime import timedelta

            from brook.protocol.messages import make
            body = make(m.CreateTopicsRequest, topics=(make(
                m.CreatableTopic, name="meets-an-expired-session", num_partitions=1, replication_factor=1,
                assignments=(), configs=()),), timeout=timedelta(seconds=30), validate_only=False)
            sent = c.send(body)
            time.sleep(6)  # twice the session timeout
            server.start()
            answer = c.recv(19, 7, sent).topics[0]
            assert answer.error_code == ErrorCode.not_controller, answer
            assert "ZooKeeper cannot be reached" in answer.error_message
            wait_for(lambda: create_topic(c, "after-it", replication_factor=1).error_code
                     in (ErrorCode.none, ErrorCode.topic_already_exists), 30, "created again", cluster)
        wait_for(lambda: "Resigned as the controller" in proc.stderr_path.read_text() or
                 "session expired" in proc.stderr_path.read_text(), 5, "the expiry logged", cluster)


def _admin_requests(topic: str, doomed: str) -> dict[str, tuple[int, int, object]]:
    """An admin request of every kind that writes ZooKeeper (apart from CreateTopics, above),
    as (api key, version, body)."""
    import os
    from datetime import timedelta

    from brook.protocol.messages import make
    from tests.support.wire_requests import req_mod
    configs, scram, quotas, delete = req_mod(44, 1), req_mod(51, 0), req_mod(49, 1), req_mod(20, 6)
    return {
        "topic config": (44, 1, make(configs.IncrementalAlterConfigsRequest, validate_only=False, resources=(
            make(configs.AlterConfigsResource, resource_type=2, resource_name=topic, configs=(
                make(configs.AlterableConfig, name="retention.ms", config_operation=0, value="60000"),)),))),
        "broker config": (44, 1, make(configs.IncrementalAlterConfigsRequest, validate_only=False, resources=(
            make(configs.AlterConfigsResource, resource_type=4, resource_name="", configs=(
                make(configs.AlterableConfig, name="message.max.bytes", config_operation=0,
                     value="2000000"),)),))),
        "scram user": (51, 0, make(scram.AlterUserScramCredentialsRequest, deletions=(), upsertions=(
            make(scram.ScramCredentialUpsertion, name="alice", mechanism=1, iterations=4096,
                 salt=os.urandom(16), salted_password=os.urandom(32)),))),
        "client quota": (49, 1, make(quotas.AlterClientQuotasRequest, validate_only=False, entries=(
            make(quotas.EntryData, entity=(make(quotas.EntityData, entity_type="client-id", entity_name="slow"),),
                 ops=(make(quotas.OpData, key="producer_byte_rate", value=1000.0, remove=False),)),))),
        "delete topic": (20, 6, make(delete.DeleteTopicsRequest, timeout=timedelta(seconds=5), topics=(
            make(delete.DeleteTopicState, name=doomed, topic_id=__import__("uuid").UUID(int=0)),))),
    }


def _admin_codes(api_key: int, answer) -> list[tuple[int, str | None]]:
    """(error code, message) of each resource of an admin answer."""
    items = {44: "responses", 51: "results", 49: "entries", 20: "responses"}[api_key]
    return [(r.error_code, r.error_message) for r in getattr(answer, items)]


def test_admin_requests_meeting_zookeeper_away_are_answered_with_error_codes(own_zookeeper, tmp_path):
    """Configs, SCRAM users, quotas and topic deletion write ZooKeeper: with the server away
    past the connection timeout and this broker's session expiring, each is answered with an error code (NOT_CONTROLLER for
    DeleteTopics, which only the controller serves; UNKNOWN_SERVER_ERROR for the others, as
    Kafka's ZooKeeper mode), on a connection that stays open (it was closed on the exception:
    a transport failure to clients); they succeed once it is back."""
    from kio.schema.errors import ErrorCode

    from tests.support.kafka_wire import WireClient
    from tests.support.wire_requests import create_topic
    with _one_broker_on_its_own_zookeeper(own_zookeeper, tmp_path) as (server, cluster, proc):
        requests = _admin_requests("kept", "doomed")
        clients = {what: WireClient(proc.bootstrap, timeout=60) for what in requests}
        try:  # a connection each: a connection's requests are handled one after the other
            c = clients["delete topic"]
            for name in ("kept", "doomed"):
                assert create_topic(c, name, replication_factor=1).error_code == ErrorCode.none
            server.stop()
            sent = {what: (key, v, clients[what].send(body)) for what, (key, v, body) in requests.items()}
            time.sleep(6)  # twice the session timeout
            server.start()
            refused = []
            for what, (key, v, correlation) in sent.items():
                [(code, message)] = _admin_codes(key, clients[what].recv(key, v, correlation))
                # A call kazoo still had queued may go through on the next session instead.
                expected = ErrorCode.not_controller if key == 20 else ErrorCode.unknown_server_error
                assert code in (expected, ErrorCode.none), (what, code, message)
                if code == expected:
                    assert "ZooKeeper cannot be reached" in message, (what, message)
                    refused.append(what)
            assert len(refused) >= 3, f"only {refused} met ZooKeeper away"
            for what in refused:  # the same, with ZooKeeper back
                key, v, body = requests[what]
                wait_for(lambda: _admin_codes(key, clients[what].request(body)) == [(ErrorCode.none, None)],
                         30, f"the {what} request served again", cluster)
        finally:
            for client in clients.values():
                client.close()


@pytest.mark.parametrize("paused", ["leader", "leader and controller"])
def test_acks_all_keeps_flowing_through_a_zookeeper_restart_after_a_paused_leader_returned(
        own_zookeeper, tmp_path, paused):
    # The sequence of issue 27: the leader of a one-partition topic (replication factor 3)
    # paused past its 6 s session, resumed (and fenced itself), then 15 s later ZooKeeper
    # stopped for 3 s and came back. acks=all produce once stalled about 7 s around the
    # restart; the longest wait for an acknowledgement from the restart on stays short. The
    # paused broker is the leader alone, or the leader and the controller at once (it comes
    # back having lost both roles while the others took them over).
    import threading

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.support.cluster_harness import ClusterBrokers, ZkView
    server = own_zookeeper.start()
    cluster = ClusterBrokers(tmp_path, lambda: server.connect)
    view = ZkView(server, "")
    conf = {**FAST, "zookeeper.session.timeout.ms": 6000, "zookeeper.connection.timeout.ms": 6000}
    try:
        procs = [cluster(i, conf) for i in (1, 2, 3)]
        cluster.wait_ready(view, [1, 2, 3])  # each names the controller: admin requests find it
        bootstrap = _bootstrap(procs)
        if paused == "leader":
            _create(bootstrap, "restarts", rf=3, configs={"min.insync.replicas": "2"})
        else:  # the controller as the preferred leader
            wait_for(lambda: view.controller() is not None, 30, "a controller", cluster)
            c = view.controller()
            topic = NewTopic("restarts", num_partitions=1, config={"min.insync.replicas": "2"},
                             replica_assignment=[[c] + [b for b in (1, 2, 3) if b != c]])
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([topic], operation_timeout=20, request_timeout=30)["restarts"].result(40)
        acks: list[float] = []
        stop = threading.Event()

        def produce():
            p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                          "enable.idempotence": True, "message.timeout.ms": 120000})
            i = 0
            while not stop.is_set():
                p.produce("restarts", b"%d" % i,
                          on_delivery=lambda err, msg: err is None and acks.append(time.monotonic()))
                i += 1
                p.poll(0.01)
            p.flush(60)

        t = threading.Thread(target=produce)
        t.start()
        try:
            time.sleep(2)
            leader = view.json("/brokers/topics/restarts/partitions/0/state")["leader"]
            assert paused == "leader" or leader == view.controller()
            cluster[leader].proc.send_signal(signal.SIGSTOP)
            time.sleep(12)
            cluster[leader].proc.send_signal(signal.SIGCONT)
            time.sleep(15)
            restarted = time.monotonic()
            server.restart(down_for=3.0)
            time.sleep(12)
        finally:
            stop.set()
            t.join(90)
        after = [restarted] + [a for a in acks if a > restarted]
        longest = max(b - a for a, b in zip(after, after[1:]))
        # the 3 s ZooKeeper was away and a margin for a loaded machine (no broker's session
        # expired then); the stall seen before was about 7 s
        assert len(after) > 100 and longest < 5.0, f"longest wait {longest:.2f} s"
    finally:
        view.close()
        cluster.close()
