"""The inter-broker APIs of a default cluster (one PLAINTEXT listener, no authorizer) on real
brokers: a client sending them by hand, with the real controller's id and epochs, is refused
and nothing happens (each test fails on a broker that takes them from anyone); a broker with
the cluster's secret is still held to the epochs ZooKeeper has; and the brokers themselves
replicate, elect a new controller and fail over as before."""

from __future__ import annotations

import signal
import time
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode

from brook.protocol import inter_broker as ib
from brook.protocol.messages import make
from tests.support.broker_harness import free_port
from tests.support.broker_login import as_broker, broker_epoch
from tests.support.cluster_harness import brokers, wait_for, zk, zookeeper  # noqa: F401
from tests.support.kafka_wire import WireClient, request_class

pytestmark = pytest.mark.broker

FAST = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 200,
        "controlled.shutdown.retry.backoff.ms": 200}
CAF = ErrorCode.cluster_authorization_failed


def _three(brokers, zk, extra=None) -> str:
    for i in (1, 2, 3):
        brokers(i, {**FAST, **(extra or {})})
    return brokers.wait_ready(zk, [1, 2, 3])


def _create(bootstrap: str, name: str, assignment: list[int], configs=None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(name, 1, replica_assignment=[assignment], config=configs or {})],
                             operation_timeout=20, request_timeout=30)
    fs[name].result(timeout=40)


def _leader(zk, topic: str) -> int | None:
    state = zk.json(f"/brokers/topics/{topic}/partitions/0/state")
    return state["leader"] if state else None


def _produce(bootstrap: str, topic: str, n: int) -> int:
    """Records acknowledged (acks=all) of `n` sent."""
    from confluent_kafka import Producer
    acked = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), on_delivery=lambda err, msg: err or acked.append(msg.offset()))
    p.flush(30)
    return len(acked)


def _consume(bootstrap: str, topic: str, n: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def _stop_replica(controller: int, epoch: int, broker_epoch_: int, topic: str):
    return ib.StopReplicaRequest(
        controller_id=controller, controller_epoch=epoch, broker_epoch=broker_epoch_,
        topic_states=(ib.StopReplicaTopicState(topic_name=topic, partition_states=(
            ib.StopReplicaPartitionState(partition_index=0, leader_epoch=-2, delete_partition=True),)),))


def _leader_and_isr(controller: int, epoch: int, broker_epoch_: int):
    """An empty LeaderAndIsr: it changes no partition, only what controller epoch the broker
    takes requests from."""
    return ib.LeaderAndIsrRequest(controller_id=controller, controller_epoch=epoch,
                                  broker_epoch=broker_epoch_, type_=ib.INCREMENTAL, topic_states=(),
                                  live_leaders=())


def _fetch(topic: str, offset: int, replica_id: int):
    cls = request_class(1, 12)
    mod = __import__(cls.__module__, fromlist=["x"])
    return make(cls, replica_id=replica_id, max_wait=timedelta(milliseconds=10), min_bytes=0,
                max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                forgotten_topics_data=(), topics=(make(mod.FetchTopic, topic=topic, partitions=(make(
                    mod.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=offset,
                    last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),)),))


def _produce_request(topic: str, value: bytes, timeout_ms: int):
    from brook.records import Record, encode_batch
    cls = request_class(0, 9)
    mod = __import__(cls.__module__, fromlist=["x"])
    batch = encode_batch([Record(0, int(time.time() * 1000), None, value)])
    return make(cls, transactional_id=None, acks=-1, timeout=timedelta(milliseconds=timeout_ms),
                topic_data=(make(mod.TopicProduceData, name=topic, partition_data=(
                    make(mod.PartitionProduceData, index=0, records=batch),)),))


def _fetch_codes(response) -> list[ErrorCode]:
    return [p.error_code for t in response.responses for p in t.partitions]


def test_an_anonymous_stop_replica_with_delete_deletes_nothing(zk, brokers):
    bootstrap = _three(brokers, zk)
    _create(bootstrap, "kept", [1, 2, 3])
    wait_for(lambda: _leader(zk, "kept") == 1, 20, "broker 1 leading", brokers)
    assert _produce(bootstrap, "kept", 200) == 200
    controller, epoch = zk.controller(), zk.controller_epoch()
    answers = []
    for i in (1, 2, 3):  # every replica, with the real controller's id and epochs
        with WireClient(brokers[i].bootstrap) as w:
            answers.append(w.request(_stop_replica(controller, epoch, broker_epoch(zk, i), "kept")))
    time.sleep(1)  # what a deletion would have taken
    for i in (1, 2, 3):
        assert (brokers[i].log_dir / "kept-0").is_dir()
    assert _consume(bootstrap, "kept", 200) == [f"v{i}".encode() for i in range(200)]
    assert [(a.error_code, a.partition_errors) for a in answers] == [(CAF, ())] * 3
    for i in (1, 2, 3):
        assert "refused StopReplica from a connection that is not a broker's, answered " \
               "CLUSTER_AUTHORIZATION_FAILED" in brokers[i].stderr_path.read_text()


def test_a_forged_controller_epoch_does_not_fence_the_real_controller(zk, brokers):
    bootstrap = _three(brokers, zk)
    controller, epoch = zk.controller(), zk.controller_epoch()
    victim = next(i for i in (1, 2, 3) if i != controller)
    other = next(i for i in (1, 2, 3) if i not in (controller, victim))
    mine = broker_epoch(zk, victim)
    with WireClient(brokers[victim].bootstrap) as w:
        forged = w.request(_leader_and_isr(controller, 2**31 - 1, mine))
    # The victim still takes the real controller's word: it comes to lead a new topic.
    _create(bootstrap, "after", [victim, controller, other])
    wait_for(lambda: _leader(zk, "after") == victim, 20, "the victim elected leader", brokers)
    assert _produce(bootstrap, "after", 10) == 10
    assert forged.error_code == CAF
    # With the cluster's secret, logged in as the controller, the epochs are still ZooKeeper's.
    with as_broker(zk, brokers[victim].bootstrap, controller) as w:
        assert w.request(_leader_and_isr(controller, 2**31 - 1, mine)).error_code == \
            ErrorCode.stale_controller_epoch
        assert w.request(_leader_and_isr(controller, epoch - 1, mine)).error_code == \
            ErrorCode.stale_controller_epoch
        assert w.request(_leader_and_isr(controller, epoch, mine - 1)).error_code == \
            ErrorCode.stale_broker_epoch
        assert w.request(_leader_and_isr(controller, epoch, mine)).error_code == ErrorCode.none
    # Logged in as another broker: it may not speak for the controller, nor be one that
    # ZooKeeper does not name.
    with as_broker(zk, brokers[victim].bootstrap, other) as w:
        assert w.request(_leader_and_isr(controller, epoch, mine)).error_code == CAF
        assert w.request(_leader_and_isr(other, epoch + 1, mine)).error_code == \
            ErrorCode.stale_controller_epoch


def test_a_follower_fetch_from_a_client_gets_no_acks_all_record_acknowledged(zk, brokers):
    """Both followers paused: a client fetching as each of them, from the leader's log end,
    would move the high watermark and have the leader alone acknowledge an acks=all record."""
    bootstrap = _three(brokers, zk, {"replica.lag.time.max.ms": 30_000})
    _create(bootstrap, "acked", [1, 2, 3], {"min.insync.replicas": "3"})
    wait_for(lambda: zk.in_sync(["acked"]) and _leader(zk, "acked") == 1, 20, "in sync, led by 1", brokers)
    assert _produce(bootstrap, "acked", 1) == 1  # offset 0, on every replica
    for i in (2, 3):
        brokers[i].proc.send_signal(signal.SIGSTOP)
    try:
        with WireClient(brokers[1].bootstrap) as producer, WireClient(brokers[1].bootstrap) as attacker:
            sent = producer.send(_produce_request("acked", b"x", timeout_ms=2000))
            time.sleep(0.3)  # appended at offset 1, waiting for the followers
            fetched = [_fetch_codes(attacker.request(_fetch("acked", 2, replica))) for replica in (2, 3, 7)]
            answer = producer.recv(0, 9, sent)
        code = answer.responses[0].partition_responses[0].error_code
        assert code in (ErrorCode.request_timed_out, ErrorCode.not_enough_replicas_after_append), code
        assert fetched == [[ErrorCode.topic_authorization_failed]] * 3
        with as_broker(zk, brokers[1].bootstrap, 2) as broker2:  # a broker fetches as itself only
            assert _fetch_codes(broker2.request(_fetch("acked", 2, 3))) == [ErrorCode.topic_authorization_failed]
    finally:
        for i in (2, 3):
            brokers[i].proc.send_signal(signal.SIGCONT)
    wait_for(lambda: _produce(bootstrap, "acked", 1) == 1, 30, "acks=all again with the followers back", brokers)


def test_an_anonymous_update_metadata_sends_no_client_elsewhere(zk, brokers):
    bootstrap = _three(brokers, zk)
    controller, epoch = zk.controller(), zk.controller_epoch()
    trap = free_port()
    victim = next(i for i in (1, 2, 3) if i != controller)
    forged = ib.UpdateMetadataRequest(
        controller_id=controller, controller_epoch=epoch, broker_epoch=broker_epoch(zk, victim),
        topic_states=(), live_brokers=tuple(ib.UpdateMetadataBroker(id_=b, rack=None, endpoints=(
            ib.UpdateMetadataEndpoint(port=trap, host="127.0.0.1", listener="PLAINTEXT",
                                      security_protocol=0),)) for b in (1, 2, 3)))
    with WireClient(brokers[victim].bootstrap) as w:
        answer = w.request(forged)
        md = w.request(make(request_class(3, 12), topics=None, allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False))
    assert sorted((b.node_id, b.port) for b in md.brokers) == \
        sorted((i, int(brokers[i].bootstrap.rsplit(":", 1)[1])) for i in (1, 2, 3))
    assert answer.error_code == CAF


def test_controlled_shutdown_and_alter_partition_come_from_registered_brokers_only(zk, brokers):
    _three(brokers, zk)
    controller = zk.controller()
    other = next(i for i in (1, 2, 3) if i != controller)
    epoch = broker_epoch(zk, other)
    shutdown = ib.ControlledShutdownRequest(broker_id=other, broker_epoch=epoch)
    alter = make(request_class(56, 2), broker_id=other, broker_epoch=epoch, topics=())
    with WireClient(brokers[controller].bootstrap) as w:
        assert w.request(shutdown).error_code == CAF
        assert w.request(alter).error_code == CAF
    with as_broker(zk, brokers[controller].bootstrap, other) as w:
        assert w.request(ib.ControlledShutdownRequest(broker_id=other, broker_epoch=epoch - 1)).error_code \
            == ErrorCode.stale_broker_epoch
        assert w.request(make(request_class(56, 2), broker_id=other, broker_epoch=epoch - 1,
                              topics=())).error_code == ErrorCode.stale_broker_epoch
        assert w.request(make(request_class(56, 2), broker_id=other, broker_epoch=epoch,
                              topics=())).error_code == ErrorCode.none
        third = next(i for i in (1, 2, 3) if i not in (controller, other))
        assert w.request(ib.ControlledShutdownRequest(broker_id=third, broker_epoch=broker_epoch(zk, third))
                         ).error_code == CAF  # as another broker
    assert zk.broker_ids() == [1, 2, 3]


def test_brokers_log_in_replicate_and_fail_over_to_a_new_controller(zk, brokers):
    """The new controller's first requests carry an epoch the brokers have not seen: they
    believe it once ZooKeeper holds it, and none of the brokers' own requests is refused."""
    bootstrap = _three(brokers, zk, {"replica.lag.time.max.ms": 3000})
    _create(bootstrap, "before", [1, 2, 3])
    wait_for(lambda: zk.in_sync(["before"]), 20, "in sync", brokers)
    assert _produce(bootstrap, "before", 50) == 50
    old, epoch = zk.controller(), zk.controller_epoch()
    survivors = [i for i in (1, 2, 3) if i != old]
    brokers[old].kill()
    wait_for(lambda: zk.controller() in survivors and zk.controller_epoch() > epoch, 30,
             "a new controller", brokers)
    alive = ",".join(brokers[i].bootstrap for i in survivors)
    _create(alive, "after", survivors)
    wait_for(lambda: _leader(zk, "after") == survivors[0], 20, "the new topic led", brokers)
    assert _produce(alive, "after", 50) == 50
    assert _consume(alive, "before", 50) == [f"v{i}".encode() for i in range(50)]
    for i in survivors:
        log = brokers[i].stderr_path.read_text()
        assert "refused" not in log.replace("Connection refused", "")
        assert "authenticated User:__brook_broker_" in log


def test_a_control_plane_listener_takes_the_controllers_requests(zk, brokers):
    """control.plane.listener.name: the controller's requests go to that listener, and
    connections there log in too (a listener's name proves nothing)."""
    ports = {i: (free_port(), free_port()) for i in (1, 2)}
    for i in (1, 2):
        brokers(i, {**FAST, "listeners": f"PLAINTEXT://127.0.0.1:{ports[i][0]},CONTROL://127.0.0.1:{ports[i][1]}",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROL:PLAINTEXT",
                    "control.plane.listener.name": "CONTROL"})
    bootstrap = brokers.wait_ready(zk, [1, 2])
    _create(bootstrap, "replicated", [1, 2])
    wait_for(lambda: zk.in_sync(["replicated"]) and _leader(zk, "replicated") == 1, 20, "in sync", brokers)
    assert _produce(bootstrap, "replicated", 10) == 10
    controller = zk.controller()
    other = 2 if controller == 1 else 1
    login = f"authenticated User:__brook_broker_{controller} (broker {controller}) from"
    wait_for(lambda: any(login in line and "on listener CONTROL" in line
                         for line in brokers[other].stderr_path.read_text().splitlines()),
             10, "the controller logging in on CONTROL", brokers)
    with WireClient(f"127.0.0.1:{ports[other][1]}") as w:
        answer = w.request(_stop_replica(controller, zk.controller_epoch(), broker_epoch(zk, other), "replicated"))
    assert answer.error_code == CAF


def test_on_a_plaintext_listener_only_brokers_log_in(zk, brokers):
    """Clients' SaslHandshake is answered as before; SCRAM-SHA-512 knows the brokers' names
    only, and only with the cluster's secret."""
    from brook.security import broker_identity
    from tests.support.broker_login import cluster_secret, log_in
    from tests.support.sasl_wire import ScramClient, authenticate, handshake
    brokers(1, FAST)
    brokers.wait_ready(zk, [1])
    bootstrap = brokers[1].bootstrap

    def metadata(w):
        return w.request(make(request_class(3, 12), topics=(), allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False))

    with WireClient(bootstrap) as w:
        assert handshake(w, "PLAIN").error_code == ErrorCode.illegal_sasl_state
        assert handshake(w, "SCRAM-SHA-512", version=0).error_code == ErrorCode.illegal_sasl_state
        assert metadata(w).brokers  # still an ordinary client
    for user, secret in (("alice", cluster_secret(zk)), (broker_identity.user_for(1), bytes(32))):
        with WireClient(bootstrap) as w:
            assert handshake(w, "SCRAM-SHA-512").error_code == ErrorCode.none
            scram = ScramClient("sha512", user, broker_identity.password(secret, user))
            first = authenticate(w, scram.first())
            if first.error_code == ErrorCode.none:
                first = authenticate(w, scram.final(first.auth_bytes))
            assert first.error_code == ErrorCode.sasl_authentication_failed, user
            assert w.closed_by_peer()
    with WireClient(bootstrap) as w:
        log_in(w, cluster_secret(zk), 1)
        assert metadata(w).brokers
        assert handshake(w, "SCRAM-SHA-512").error_code == ErrorCode.illegal_sasl_state  # once
