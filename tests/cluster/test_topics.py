"""Topics in a cluster through confluent-kafka's AdminClient, as Kafka 2.8 does them in
ZooKeeper mode: created with replicas spread over the brokers, grown with CreatePartitions,
reconfigured (every broker holding the topic applies the change), and deleted (every replica
drops its logs, also one that was down at the time)."""

from __future__ import annotations

import time

import pytest

from tests.support.cluster_harness import brokers, wait_for, zk, zookeeper  # noqa: F401

pytestmark = pytest.mark.broker

FAST = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 200,
        "controlled.shutdown.retry.backoff.ms": 200}


def _admin(bootstrap):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap})


def _start(brokers, zk, n=3):
    for i in range(1, n + 1):
        brokers(i, FAST)
    return brokers.wait_ready(zk, list(range(1, n + 1)))


def _logs(brokers, topic):
    """{broker id: sorted partition numbers of `topic` it has a log of}."""
    out = {}
    for i, proc in brokers.brokers.items():
        names = [d.name for d in proc.log_dir.iterdir()] if proc.log_dir.exists() else []
        out[i] = sorted(int(n.rsplit("-", 1)[1]) for n in names if n.rsplit("-", 1)[0] == topic)
    return out


def test_replicas_are_spread_and_every_broker_leads_some(zk, brokers):
    from confluent_kafka.admin import NewTopic
    bootstrap = _start(brokers, zk)
    admin = _admin(bootstrap)
    admin.create_topics([NewTopic("spread", 6, 2)], operation_timeout=20)["spread"].result(30)
    assignment = {int(p): r for p, r in zk.json("/brokers/topics/spread")["partitions"].items()}
    assert sorted(assignment) == list(range(6))
    assert all(len(set(r)) == 2 for r in assignment.values())
    leaders = [r[0] for r in assignment.values()]
    assert sorted(leaders.count(b) for b in (1, 2, 3)) == [2, 2, 2]
    wait_for(lambda: all(sorted(parts) == sorted(p for p, r in assignment.items() if b in r)
                         for b, parts in _logs(brokers, "spread").items()), 20,
             "each broker holding exactly its replicas", brokers)
    md = admin.list_topics("spread", timeout=10).topics["spread"]
    assert {p: md.partitions[p].replicas for p in md.partitions} == assignment


def test_too_many_replicas_are_refused(zk, brokers):
    from confluent_kafka.admin import NewTopic
    from confluent_kafka import KafkaException
    bootstrap = _start(brokers, zk, 2)
    admin = _admin(bootstrap)
    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic("big", 1, 3)])["big"].result(30)
    assert info.value.args[0].name() == "INVALID_REPLICATION_FACTOR"


def test_partitions_added_configs_changed_and_the_topic_deleted_everywhere(zk, brokers):
    from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic
    bootstrap = _start(brokers, zk)
    admin = _admin(bootstrap)
    admin.create_topics([NewTopic("life", 2, 3)], operation_timeout=20)["life"].result(30)
    admin.create_partitions([NewPartitions("life", 4)])["life"].result(30)
    wait_for(lambda: len(admin.list_topics("life", timeout=10).topics["life"].partitions) == 4
             and all(p.leader >= 0 for p in admin.list_topics("life", timeout=10).topics["life"].partitions.values()),
             20, "four partitions with leaders", brokers)
    wait_for(lambda: all(parts == [0, 1, 2, 3] for parts in _logs(brokers, "life").values()), 20,
             "every broker holding the new partitions", brokers)

    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    resource = ConfigResource("topic", "life", incremental_configs=[
        ConfigEntry("retention.ms", "12345", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    assert zk.json("/config/topics/life")["config"] == {"retention.ms": "12345"}
    assert any(zk.json(f"/config/changes/{c}")["entity_path"] == "topics/life"
               for c in zk.children("/config/changes"))
    for i in (1, 2, 3):  # every broker answers the new value
        one = _admin(brokers[i].bootstrap)
        got = one.describe_configs([ConfigResource("topic", "life")])
        value = list(got.values())[0].result(30)["retention.ms"].value
        assert value == "12345"
        wait_for(lambda: "topic life: configs now {'retention.ms': '12345'}" in brokers[i].stderr_path.read_text(),
                 10, f"broker {i} applying the change", brokers)

    # One replica is down while the topic is deleted: it drops its logs when it comes back.
    brokers[3].stop()
    admin = _admin(",".join(brokers[i].bootstrap for i in (1, 2)))
    admin.delete_topics(["life"], operation_timeout=20)["life"].result(30)
    assert zk.get("/brokers/topics/life") is None and zk.get("/config/topics/life") is None
    assert zk.children("/admin/delete_topics") == []
    wait_for(lambda: _logs(brokers, "life")[1] == [] and _logs(brokers, "life")[2] == [], 20,
             "the live replicas' logs gone", brokers)
    assert _logs(brokers, "life")[3] == [0, 1, 2, 3]
    brokers[3].start()
    wait_for(lambda: _logs(brokers, "life")[3] == [], 20, "the returning replica's logs gone", brokers)
    assert "life" not in _admin(brokers[3].bootstrap).list_topics(timeout=10).topics


def test_producer_ids_are_unique_across_the_brokers(zk, brokers):
    """Each broker hands out ids from blocks it claims in /latest_producer_id_block, so two
    idempotent producers on two brokers never share an id (they would corrupt each other's
    sequence numbers on a partition both write)."""
    from tests.support.kafka_wire import WireClient, request_class
    from brook.protocol.messages import make
    from datetime import timedelta
    _start(brokers, zk, 2)
    ids = {}
    for i in (1, 2):
        with WireClient(brokers[i].bootstrap, 10) as w:
            ids[i] = [w.request(make(request_class(22, 4), transactional_id=None,
                                     transaction_timeout=timedelta(seconds=60), producer_id=-1,
                                     producer_epoch=-1)).producer_id for _ in range(3)]
    assert len(set(ids[1] + ids[2])) == 6
    block = zk.json("/latest_producer_id_block")
    assert block["version"] == 1 and int(block["block_end"]) == 1999
    assert {ids[1][0] // 1000, ids[2][0] // 1000} == {0, 1}


def _preferred_and_leader(zk, topic, p):
    return (zk.json(f"/brokers/topics/{topic}")["partitions"][str(p)][0],
            zk.json(f"/brokers/topics/{topic}/partitions/{p}/state")["leader"])


def test_preferred_leaders_are_elected_on_request_and_by_the_cli(zk, brokers):
    import subprocess
    import sys
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import NewTopic
    for i in (1, 2, 3):
        brokers(i, {**FAST, "auto.leader.rebalance.enable": "false"})
    bootstrap = brokers.wait_ready(zk, [1, 2, 3])
    admin = _admin(bootstrap)
    admin.create_topics([NewTopic("pref", 1, 3)], operation_timeout=20)["pref"].result(30)
    preferred, leader = wait_for(lambda: _preferred_and_leader(zk, "pref", 0), 20, "a leader", brokers)
    assert preferred == leader
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("pref", 0)]).result(30)
    assert result[TopicPartition("pref", 0)].name() == "ELECTION_NOT_NEEDED"
    brokers[preferred].stop()  # leadership moves away ...
    brokers[preferred].start()  # ... and stays away: no automatic rebalance here
    wait_for(lambda: preferred in zk.json("/brokers/topics/pref/partitions/0/state")["isr"], 30,
             "the preferred replica back in the ISR", brokers)
    assert _preferred_and_leader(zk, "pref", 0)[1] != preferred
    out = subprocess.run([sys.executable, "-m", "brook", "topics", "elect-leaders", "pref", "-b", bootstrap],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1].split() == ["pref", "0", "elected"]
    assert _preferred_and_leader(zk, "pref", 0) == (preferred, preferred)
    again = subprocess.run([sys.executable, "-m", "brook", "topics", "elect-leaders", "-b", bootstrap],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "Every partition is led by its preferred replica." in again.stdout


def test_leadership_goes_back_to_the_preferred_replica_by_itself(zk, brokers):
    from confluent_kafka.admin import NewTopic
    settings = {**FAST, "leader.imbalance.check.interval.seconds": "1"}
    for i in (1, 2, 3):
        brokers(i, settings)
    admin = _admin(brokers.wait_ready(zk, [1, 2, 3]))
    admin.create_topics([NewTopic("auto", 3, 3)], operation_timeout=20)["auto"].result(30)
    preferred, _ = wait_for(lambda: _preferred_and_leader(zk, "auto", 0), 20, "a leader", brokers)
    brokers[preferred].stop()
    assert _preferred_and_leader(zk, "auto", 0)[1] != preferred
    brokers[preferred].start()
    wait_for(lambda: _preferred_and_leader(zk, "auto", 0)[1] == preferred, 30,
             "the preferred replica leading again", brokers)


def test_a_partition_moves_to_other_brokers_with_its_records(zk, brokers):
    import subprocess
    import sys
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import NewTopic
    bootstrap = _start(brokers, zk)
    admin = _admin(bootstrap)
    admin.create_topics([NewTopic("moving", 1, 2)], operation_timeout=20)["moving"].result(30)
    before = zk.json("/brokers/topics/moving")["partitions"]["0"]
    leader = wait_for(lambda: zk.json("/brokers/topics/moving/partitions/0/state")["leader"], 20,
                      "a leader", brokers)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    values = [f"m{i}".encode() for i in range(2000)]
    for v in values:
        p.produce("moving", v)
    assert p.flush(60) == 0
    newcomer = next(b for b in (1, 2, 3) if b not in before)
    stays = next(b for b in before if b != leader)
    target = [newcomer, stays]  # the leader is moved out
    out = subprocess.run([sys.executable, "-m", "brook", "topics", "reassign",
                          f"moving:0={newcomer},{stays}", "-b", bootstrap],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr + out.stdout
    assert "Reassigning moving-0." in out.stdout
    wait_for(lambda: zk.json("/brokers/topics/moving")["partitions"]["0"] == target, 60,
             "the assignment to become the target", brokers)
    moved = zk.json("/brokers/topics/moving")
    assert moved["adding_replicas"] == {} and moved["removing_replicas"] == {}
    state = zk.json("/brokers/topics/moving/partitions/0/state")
    assert state["leader"] in target and sorted(state["isr"]) == sorted(target)
    wait_for(lambda: _logs(brokers, "moving")[leader] == [], 20, "the old leader's log deleted", brokers)
    assert _logs(brokers, "moving")[newcomer] == [0]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    c.assign([TopicPartition("moving", 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 2000 and time.monotonic() < deadline:
        for m in c.consume(500, 0.5):
            if not m.error():
                got.append(m.value())
    c.close()
    assert got == values
    listed = subprocess.run([sys.executable, "-m", "brook", "topics", "reassignments", "-b", bootstrap],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "No partition is being reassigned." in listed.stdout


def test_moves_written_to_admin_reassign_partitions_are_made_and_the_node_goes(zk, brokers):
    """What older kafka-reassign-partitions.sh (--zookeeper) writes: the controller starts
    each move the node asks for, takes a refused one out at once (a broker that does not
    exist), and deletes the node when every move is done; the records move along."""
    import json
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import NewTopic
    bootstrap = _start(brokers, zk)
    admin = _admin(bootstrap)
    admin.create_topics([NewTopic("zkmoved", 2, 1)], operation_timeout=20)["zkmoved"].result(30)
    wait_for(lambda: all(zk.get(f"/brokers/topics/zkmoved/partitions/{p}/state") for p in (0, 1)),
             20, "the partitions' states", brokers)
    before = zk.json("/brokers/topics/zkmoved")["partitions"]
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    values = [f"z{i}".encode() for i in range(500)]
    for v in values:
        p.produce("zkmoved", v, partition=0)
    assert p.flush(60) == 0
    target = [b for b in (1, 2, 3) if b not in before["0"]]  # two brokers without it
    request = {"version": 1, "partitions": [
        {"topic": "zkmoved", "partition": 0, "replicas": target},
        {"topic": "zkmoved", "partition": 1, "replicas": [before["1"][0], 7]}]}  # 7: no such broker
    zk.kz.create(zk.chroot + "/admin/reassign_partitions", json.dumps(request).encode(),
                 makepath=True)
    wait_for(lambda: zk.get("/admin/reassign_partitions") is None, 60,
             "the node deleted once the move is done", brokers)
    after = zk.json("/brokers/topics/zkmoved")
    assert after["partitions"] == {"0": target, "1": before["1"]}
    assert after["adding_replicas"] == {} and after["removing_replicas"] == {}
    state = zk.json("/brokers/topics/zkmoved/partitions/0/state")
    assert state["leader"] in target and sorted(state["isr"]) == sorted(target)
    controller = zk.controller()
    assert "refused" in brokers[controller].stderr_path.read_text()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    c.assign([TopicPartition("zkmoved", 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 500 and time.monotonic() < deadline:
        for m in c.consume(500, 0.5):
            if not m.error():
                got.append(m.value())
    c.close()
    assert got == values
