"""Brokers on a real ZooKeeper, as real processes: registration as Kafka writes it, controller
election and failover, a duplicate broker id, ZooKeeper down at start or restarted, a lost
session, and what clients see (DescribeCluster through confluent-kafka, `brook cluster`)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.support.broker_harness import BrokerProcess
from tests.support.cluster_harness import (SESSION_TIMEOUT_MS, ClusterBrokers, ZkView, brokers,  # noqa: F401
                             confluent_describe_cluster, describe_cluster, own_zookeeper, wait_for,
                             zk, zookeeper)

SESSION_S = SESSION_TIMEOUT_MS / 1000


def test_registration_is_kafkas(zk, brokers):
    before = time.time() * 1000
    b1 = brokers(1, {"broker.rack": "rack-a"})
    data, stat = zk.get("/brokers/ids/1")
    assert stat.ephemeralOwner != 0  # ephemeral: gone with the broker's session
    assert list(json.loads(data)) == ["features", "listener_security_protocol_map", "endpoints", "rack",
                                      "jmx_port", "port", "host", "version", "timestamp"]
    reg = json.loads(data)
    assert reg == {"features": {}, "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
                   "endpoints": [f"PLAINTEXT://127.0.0.1:{b1.port}"], "rack": "rack-a", "jmx_port": -1,
                   "port": b1.port, "host": "127.0.0.1", "version": 5, "timestamp": reg["timestamp"]}
    assert before <= int(reg["timestamp"]) <= time.time() * 1000
    cluster = zk.json("/cluster/id")
    assert list(cluster) == ["version", "id"] and cluster["version"] == "1"
    assert f"cluster.id={cluster['id']}" in (b1.log_dir / "meta.properties").read_text()
    for path in ("/brokers/topics", "/brokers/seqid", "/config/topics", "/config/changes",
                 "/admin/delete_topics", "/isr_change_notification", "/latest_producer_id_block"):
        assert zk.get(path) is not None, path
    controller = zk.json("/controller")
    assert list(controller) == ["version", "brokerid", "timestamp"]
    assert controller["version"] == 1 and controller["brokerid"] == 1
    assert zk.controller_epoch() == 1
    b1.stop()  # a clean stop ends the session: the registration goes at once
    assert zk.broker_ids() == [] and zk.controller() is None


def test_two_brokers_one_controller_and_what_clients_see(zk, brokers):
    b1 = brokers(1)
    b2 = brokers(2, {"broker.rack": "r2"})
    b1.id, b2.id = 1, 2
    wait_for(lambda: zk.broker_ids() == [1, 2], 10, "both registered", brokers)
    assert zk.controller() == 1 and zk.controller_epoch() == 1
    wait_for(lambda: "Newly added brokers: 2, deleted brokers: , bounced brokers: , all live brokers: 1,2"
             in b1.stderr_path.read_text(), 10, "the controller logs broker 2 joining", brokers)
    assert "successfully elected as the controller" not in b2.stderr_path.read_text()

    cluster_id = zk.json("/cluster/id")["id"]
    expected = {1: ("127.0.0.1", b1.port, None), 2: ("127.0.0.1", b2.port, "r2")}
    for b in (b1, b2):  # every broker answers the whole cluster and the elected controller
        assert wait_for(lambda: describe_cluster(b.bootstrap) == (cluster_id, 1, expected), 10,
                        f"DescribeCluster of {b.bootstrap}", brokers)

    # Metadata: every live broker and the elected controller, as the controller told each broker
    # (UpdateMetadata); a topic is created through either (written to ZooKeeper, led by one).
    # confluent-kafka's describe_cluster is made of Metadata (librdkafka sends no DescribeCluster).
    from confluent_kafka.admin import AdminClient, NewTopic
    for b in (b1, b2):
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        md = wait_for(lambda: (m := admin.list_topics(timeout=10)) and sorted(m.brokers) == [1, 2] and m,
                      10, f"both brokers in {b.bootstrap}'s metadata", brokers)
        assert md.controller_id == 1 and md.cluster_id == cluster_id
        admin.create_topics([NewTopic(f"t{b.id}", 1)])[f"t{b.id}"].result(timeout=15)
        assert confluent_describe_cluster(b.bootstrap) == (cluster_id, 1, expected)

    out = subprocess.run([sys.executable, "-m", "brook", "cluster", "-b", b2.bootstrap],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"ClusterId: {cluster_id}  Controller: 1"
    assert lines[1].split() == ["BROKER", "HOST:PORT", "RACK", "CONTROLLER"]
    assert lines[2].split() == ["1", f"127.0.0.1:{b1.port}", "-", "yes"]
    assert lines[3].split() == ["2", f"127.0.0.1:{b2.port}", "r2"]
    as_json = subprocess.run([sys.executable, "-m", "brook", "cluster", "-b", b1.bootstrap, "--output", "json"],
                             capture_output=True, text=True, timeout=60)
    assert json.loads(as_json.stdout) == {
        "cluster_id": cluster_id, "controller": 1,
        "brokers": [{"id": 1, "host": "127.0.0.1", "port": b1.port, "rack": None},
                    {"id": 2, "host": "127.0.0.1", "port": b2.port, "rack": "r2"}]}


def test_sigkill_of_the_controller_moves_it_within_the_session_timeout(zk, brokers):
    b1 = brokers(1)
    b2 = brokers(2)
    wait_for(lambda: zk.broker_ids() == [1, 2], 10, "both registered", brokers)
    assert zk.controller() == 1
    epoch = zk.controller_epoch()
    killed = time.monotonic()
    b1.kill()
    wait_for(lambda: zk.controller() == 2, SESSION_S + 5, "broker 2 becomes the controller", brokers,
             interval=0.01)
    failover = time.monotonic() - killed
    print(f"controller failover after SIGKILL: {failover:.2f} s (session timeout {SESSION_S:g} s)")
    assert failover < SESSION_S + 3
    assert zk.controller_epoch() == epoch + 1
    assert zk.broker_ids() == [2]
    wait_for(lambda: "2 successfully elected as the controller. Epoch incremented to 2"
             in b2.stderr_path.read_text(), 5, "broker 2's log", brokers)
    wait_for(lambda: describe_cluster(b2.bootstrap)[1:] == (2, {2: ("127.0.0.1", b2.port, None)}), 10,
             "DescribeCluster without broker 1", brokers)
    # broker 1 comes back: it joins as a broker, the controller stays
    b1.start()
    wait_for(lambda: zk.broker_ids() == [1, 2], 10, "broker 1 back", brokers)
    wait_for(lambda: "Newly added brokers: 1" in b2.stderr_path.read_text(), 10, "the controller sees it", brokers)
    assert zk.controller() == 2 and zk.controller_epoch() == epoch + 1


def test_a_duplicate_broker_id_is_refused(zk, brokers):
    b1 = brokers(1)
    owner = zk.get("/brokers/ids/1")[1].ephemeralOwner
    twin = brokers.process(1)
    result = subprocess.run(twin.command(), capture_output=True, text=True, timeout=60, cwd=twin.data_dir)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = [ln for ln in result.stderr.splitlines() if "broker.id 1" in ln]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith("brook: Error while creating ephemeral at /brokers/ids/1, node already "
                                "exists and owner '0x")
    assert "broker.id 1 is registered by another live broker" in errors[0]
    assert zk.get("/brokers/ids/1")[1].ephemeralOwner == owner  # the first one is untouched
    assert b1.running and zk.controller() == 1


def test_a_broker_restarted_at_once_after_a_crash_waits_for_its_old_session_to_expire(zk, brokers):
    # A supervisor restarting a killed broker at once: its previous session still holds
    # /brokers/ids/1 (with the same endpoints) until it expires. The broker waits for that,
    # saying so, then registers; Kafka's broker exits here instead, and a supervisor loops.
    brokers(2)
    b1 = brokers(1)
    old = zk.get("/brokers/ids/1")[1].ephemeralOwner
    b1.kill()
    b1.start()  # listening again at once, on the same port
    wait_for(lambda: (got := zk.get("/brokers/ids/1")) is not None and got[1].ephemeralOwner != old,
             SESSION_S * 3 + 10, "broker 1 registered by its new session", brokers)
    assert b1.running
    log = b1.stderr_path.read_text().split("===== start #2")[1]
    assert "an earlier run whose session has not expired yet; waiting up to" in log
    assert zk.broker_ids() == [1, 2]


def test_a_live_session_holding_the_id_with_the_same_endpoints_is_refused_after_the_wait(zk, brokers):
    # The registration in the way advertises this broker's endpoints but its session keeps
    # being renewed (here: the test's own ZooKeeper session): after a session timeout and the
    # margin, the start fails as for any other broker holding the id.
    from brook.cluster import zk_data
    from tests.support.broker_harness import free_port
    port = free_port()
    reg = zk_data.BrokerRegistration(1, (zk_data.Endpoint("PLAINTEXT", "127.0.0.1", port),))
    zk.kz.create(zk.chroot + "/brokers/ids/1", zk_data.encode_broker(reg), ephemeral=True, makepath=True)
    twin = brokers.process(1, port=port)
    started = time.monotonic()
    result = subprocess.run(twin.command(), capture_output=True, text=True, timeout=90, cwd=twin.data_dir)
    waited = time.monotonic() - started
    assert result.returncode == 1, result.stderr[-2000:]
    assert "waiting up to" in result.stderr
    assert "broker.id 1 is registered by another live broker" in result.stderr
    assert waited >= SESSION_S  # it waited for the session it took for an earlier run of its own
    assert zk.get("/brokers/ids/1")[1].ephemeralOwner == zk.kz.client_id[0]


def test_zookeeper_down_at_start_then_up(own_zookeeper, tmp_path):
    server = own_zookeeper
    cluster = ClusterBrokers(tmp_path, lambda: server.connect + "/late")
    b1 = cluster.process(1, start_timeout=60)
    starting = threading.Thread(target=b1.start)
    try:
        starting.start()
        wait_for(lambda: b1.stderr_path.exists() and b1.stderr_path.read_text().count(
            "Timed out waiting for connection to ZooKeeper") >= 2, 20, "two attempts logged", cluster)
        assert b1.proc.poll() is None  # waiting, not dead
        server.start()
        starting.join(30)
        assert b1.running
        log = b1.stderr_path.read_text()
        assert "Traceback" not in log
        attempts = [ln for ln in log.splitlines() if "Timed out waiting for connection" in ln]
        assert re.search(r"ZooKeeper at 127\.0\.0\.1:\d+/late while in state: CONNECTING \(attempt 1, "
                         r"1000 ms: .*Connection refused\); trying again", attempts[0]), attempts[0]
        view = ZkView(server, "/late")
        try:
            assert view.broker_ids() == [1] and view.controller() == 1
        finally:
            view.close()
    finally:
        starting.join(60)
        cluster.close()


def test_zookeeper_restarted_brokers_stay_or_register_again(own_zookeeper, tmp_path):
    server = own_zookeeper.start()
    cluster = ClusterBrokers(tmp_path, lambda: server.connect)
    view = ZkView(server, "")
    try:
        b1, b2 = cluster(1), cluster(2)
        wait_for(lambda: view.broker_ids() == [1, 2], 10, "both registered", cluster)
        epochs = {i: view.get(f"/brokers/ids/{i}")[1].czxid for i in (1, 2)}
        cluster_id = view.json("/cluster/id")["id"]

        # Restarted with its data: the sessions survive it, and the registrations with them.
        server.restart(down_for=1.0)
        wait_for(lambda: "Reconnected to ZooKeeper" in b2.stderr_path.read_text(), 15, "reconnected", cluster)
        # the test's own client reconnects in its own time (its reads give None meanwhile)
        wait_for(lambda: all(view.get(f"/brokers/ids/{i}") is not None for i in (1, 2)), 15,
                 "the registrations readable", cluster)
        assert {i: view.get(f"/brokers/ids/{i}")[1].czxid for i in (1, 2)} == epochs
        assert view.controller() == 1 and view.controller_epoch() == 1

        # Restarted empty (it lost its disk): the sessions are unknown to it, so they expire,
        # and the brokers register again, elect a controller and put the cluster id back.
        view.close()  # its session is lost with the data too
        server.restart(wipe=True)
        view = ZkView(server, "")
        wait_for(lambda: view.broker_ids() == [1, 2] and view.controller() in (1, 2), 20,
                 "both registered again, a controller", cluster)
        assert view.json("/cluster/id")["id"] == cluster_id
        assert view.controller_epoch() == 1  # /controller_epoch began again
        for b in (b1, b2):
            log = b.stderr_path.read_text()
            assert "ZooKeeper session expired" in log and "Traceback" not in log
        # The new controller's UpdateMetadata reaches broker 1 in its own time.
        wait_for(lambda: describe_cluster(b1.bootstrap)[1:] == (view.controller(), {
            1: ("127.0.0.1", b1.port, None), 2: ("127.0.0.1", b2.port, None)}), 20,
            "broker 1 naming the new controller", cluster)
    finally:
        view.close()
        cluster.close()


def test_a_paused_controller_loses_its_session_and_comes_back_as_a_broker(zk, brokers):
    b1 = brokers(1)
    b2 = brokers(2)
    wait_for(lambda: zk.broker_ids() == [1, 2] and zk.controller() == 1, 10, "two brokers", brokers)
    old_epoch = zk.get("/brokers/ids/1")[1].czxid
    os.kill(b1.proc.pid, signal.SIGSTOP)  # a zombie: alive, but silent past its session
    try:
        wait_for(lambda: zk.controller() == 2, SESSION_S + 5, "broker 2 takes over", brokers)
        assert zk.broker_ids() == [2] and zk.controller_epoch() == 2
    finally:
        os.kill(b1.proc.pid, signal.SIGCONT)
    wait_for(lambda: zk.broker_ids() == [1, 2], 15, "broker 1 registers again", brokers)
    assert zk.get("/brokers/ids/1")[1].czxid != old_epoch  # a new registration
    log1 = b1.stderr_path.read_text()
    wait_for(lambda: "Resigned as the controller (epoch 1)" in b1.stderr_path.read_text(), 10,
             "broker 1 knows it is not the controller any more", brokers)
    assert zk.controller() == 2 and zk.controller_epoch() == 2
    wait_for(lambda: "Newly added brokers: 1" in b2.stderr_path.read_text(), 10, "the controller sees it", brokers)
    assert "Traceback" not in log1


def _zk_client(connect: str, session_ms: int, connection_ms: int):
    from brook.cluster.zk_client import ZkClient
    from brook.cluster.zk_paths import parse_connect

    client = ZkClient(parse_connect(connect), session_ms, lambda what: None, connection_ms)
    assert client.connect_until(threading.Event(), 10_000)
    client.ensure_layout()
    return client


def test_a_zookeeper_call_cut_off_by_a_lost_connection_is_made_again_on_the_next_session(own_zookeeper):
    """An admin request's ZooKeeper call sent to a server that stops answering (here: paused)
    fails with a lost connection; brook makes it again once it has a session, as Kafka's
    ZooKeeper client does, instead of answering the client with an error. (In CI a CreateTopics
    met the broker's expired session just after a ZooKeeper restart and was refused.)"""
    server = own_zookeeper.start()
    client = _zk_client(server.connect, 2000, 30_000)
    try:
        client.ensure_layout()
        server.proc.send_signal(signal.SIGSTOP)  # the connection stays open; answers stop
        result = {}
        call = threading.Thread(target=lambda: result.update(
            names=client.call_in_session(client.topic_names)))
        call.start()
        time.sleep(4)  # kazoo gives up on the connection after 2/3 of the session timeout
        server.proc.send_signal(signal.SIGCONT)
        call.join(30)
        assert result == {"names": []}
    finally:
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        client.close()


def test_a_zookeeper_call_waits_for_a_session_at_most_the_connection_timeout(own_zookeeper):
    """As long as zookeeper.connection.timeout.ms, once; then calls fail at once until a
    session comes (a request of many topics does not wait for each)."""
    from kazoo.handlers.threading import KazooTimeoutError

    server = own_zookeeper.start()
    client = _zk_client(server.connect, 2000, 1500)
    try:
        server.stop()
        began = time.monotonic()
        with pytest.raises(KazooTimeoutError, match="no ZooKeeper session within 1500 ms"):
            client.call_in_session(client.topic_names)
        assert 1.4 < time.monotonic() - began < 4
        began = time.monotonic()  # given up on: the next call fails at once, until a session
        with pytest.raises(KazooTimeoutError, match="no ZooKeeper session for over 1500 ms"):
            client.call_in_session(client.topic_names)
        assert time.monotonic() - began < 0.5
        server.start()

        def served():
            try:
                return client.call_in_session(client.topic_names) == []
            except KazooTimeoutError:
                return False
        wait_for(served, 20, "calls served again once a session came")
    finally:
        client.close()


def test_topic_writes_made_again_after_a_lost_answer_find_their_own_work_done(zk):
    """A ZooKeeper write whose answer a lost connection took may have been applied: made
    again, creating a topic or adding partitions finds its own result and says so, and still
    refuses another creation of the name."""
    from brook.cluster.zk_data import TopicAssignment

    client = _zk_client(zk.connect, 10_000, 10_000)
    try:
        mine = TopicAssignment("AAAAAAAAAAAAAAAAAAAAAQ", {0: (1,)})
        assert client.create_topic("t", mine, {}) is True
        assert client.create_topic("t", mine, {}) is True  # the same topic id: this very creation
        assert client.create_topic("t", TopicAssignment("AAAAAAAAAAAAAAAAAAAAAg", {0: (1,)}), {}) is False
        grown = TopicAssignment(mine.topic_id, {0: (1,), 1: (1,)})
        assert client.add_partitions("t", grown, mine) is True
        assert client.add_partitions("t", grown, mine) is True  # already grown to exactly this
        other = TopicAssignment(mine.topic_id, {0: (1,), 1: (1,), 2: (1,)})
        assert client.add_partitions("t", other, mine) is False  # changed meanwhile by someone else
        assert client.read_topic("t") == grown
    finally:
        client.close()


def test_init_producer_id_while_zookeeper_is_away_is_answered_and_served_once_it_is_back(
        own_zookeeper, tmp_path):
    # Found by the nemesis: a new block of producer ids is claimed in ZooKeeper; with ZooKeeper
    # away the claim raised out of the handler, which closed the client's connection. Now the
    # answer is COORDINATOR_NOT_AVAILABLE (retriable), the connection stays, and an id is given
    # once ZooKeeper is back.
    import datetime

    from kio.schema.errors import ErrorCode

    from brook.protocol.messages import make
    from tests.support.kafka_wire import WireClient, request_class
    server = own_zookeeper.start()
    cluster = ClusterBrokers(tmp_path, lambda: server.connect)
    try:
        b1 = cluster(1)
        init = make(request_class(22, 4), transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
                    producer_id=-1, producer_epoch=-1)
        with WireClient(b1.bootstrap, 30) as w:
            server.stop()
            answer = w.request(init)  # the broker's first id: a block is claimed first
            assert answer.error_code == ErrorCode.coordinator_not_available, answer
            assert answer.producer_id == -1
            server.start()
            answer = wait_for(lambda: (a := w.request(init)).error_code == ErrorCode.none and a, 30,
                              "a producer id once ZooKeeper is back", cluster)
            assert answer.producer_id >= 0 and answer.producer_epoch == 0
        assert "Traceback" not in b1.stderr_path.read_text()
    finally:
        cluster.close()
