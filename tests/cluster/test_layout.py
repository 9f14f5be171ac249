"""The pure parts of the cluster: Kafka's ZooKeeper paths, the JSON of each znode (compared
with what Kafka 2.8 brokers write, as seen in zookeeper-shell), the view's changes, and the
configuration keys."""

from __future__ import annotations

import subprocess
import sys

import pytest

from brook.broker.config import BrokerConfig, ConfigError
from brook.broker.metadata import InconsistentClusterIdError, MetadataStore
from brook.cluster import zk_data, zk_paths
from brook.cluster.view import LiveBroker, membership_change
from brook.cluster.zk_data import BrokerRegistration, Endpoint, ZkDataError

# /brokers/ids/1 of a Kafka 2.8 broker (zookeeper-shell `get`), and the same broker in brook.
KAFKA_BROKER_JSON = (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
                     b'"endpoints":["PLAINTEXT://192.168.1.14:9092"],"jmx_port":-1,"port":9092,'
                     b'"host":"192.168.1.14","version":5,"timestamp":"1724097127252"}')


def test_broker_registration_is_kafkas_json_byte_for_byte():
    reg = BrokerRegistration(1, (Endpoint("PLAINTEXT", "192.168.1.14", 9092),), timestamp=1724097127252)
    assert zk_data.encode_broker(reg) == KAFKA_BROKER_JSON
    assert zk_data.decode_broker(1, KAFKA_BROKER_JSON) == reg


def test_broker_registration_with_rack_and_two_listeners():
    reg = BrokerRegistration(2, (Endpoint("INTERNAL", "kafka-2", 29092), Endpoint("PLAINTEXT", "localhost", 9092)),
                             rack="r1", timestamp=5)
    data = zk_data.encode_broker(reg)
    # "rack" where Scala's HashMap puts it; host and port are those of the first endpoint whose
    # security protocol is PLAINTEXT
    assert data == (b'{"features":{},"listener_security_protocol_map":{"INTERNAL":"PLAINTEXT",'
                    b'"PLAINTEXT":"PLAINTEXT"},"endpoints":["INTERNAL://kafka-2:29092",'
                    b'"PLAINTEXT://localhost:9092"],"rack":"r1","jmx_port":-1,"port":29092,'
                    b'"host":"kafka-2","version":5,"timestamp":"5"}')
    assert zk_data.decode_broker(2, data) == reg
    assert zk_data.decode_broker(2, data).endpoint("INTERNAL").port == 29092


def test_broker_registrations_kafka_wrote_decode():
    confluent = (b'{"features":{},"listener_security_protocol_map":{"BROKER":"PLAINTEXT","SSL_HOST":"SSL"},'
                 b'"endpoints":["BROKER://broker1:9091","SSL_HOST://localhost:29091"],"jmx_port":-1,'
                 b'"port":9091,"host":"broker1","version":5,"tags":{},"timestamp":"1673382717473"}')
    reg = zk_data.decode_broker(1, confluent)
    assert reg.endpoints == (Endpoint("BROKER", "broker1", 9091), Endpoint("SSL_HOST", "localhost", 29091, "SSL"))
    assert reg.rack is None and reg.timestamp == 1673382717473
    v1 = zk_data.decode_broker(7, b'{"version":1,"host":"h","port":9092,"jmx_port":9999,"timestamp":"1"}')
    assert v1.endpoints == (Endpoint("PLAINTEXT", "h", 9092),) and v1.jmx_port == 9999
    v4 = zk_data.decode_broker(3, b'{"version":4,"host":null,"port":-1,"jmx_port":-1,"timestamp":"2",'
                                  b'"endpoints":["[::1]:x"]}' .replace(b'"[::1]:x"', b'"PLAINTEXT://[::1]:9092"'))
    assert v4.endpoints == (Endpoint("PLAINTEXT", "::1", 9092),)
    for bad in (b"", b"[]", b'{"version":0}', b'{"version":5,"endpoints":["nope"],"jmx_port":-1}',
                b'{"version":5}', b"\xff"):
        with pytest.raises(ZkDataError):
            zk_data.decode_broker(1, bad)


def test_controller_cluster_id_and_epoch_are_kafkas():
    assert zk_data.encode_controller(2, 1673382716473) == b'{"version":1,"brokerid":2,"timestamp":"1673382716473"}'
    assert zk_data.decode_controller(b'{"version":1,"brokerid":2,"timestamp":"1"}') == 2
    # what Kafka 3.4+ writes (KIP-866) reads too
    assert zk_data.decode_controller(b'{"version":2,"brokerid":1,"timestamp":"1","kraftControllerEpoch":-1}') == 1
    assert zk_data.encode_cluster_id("eQzK4lYlQ9y8P21IScOl_g") == b'{"version":"1","id":"eQzK4lYlQ9y8P21IScOl_g"}'
    assert zk_data.decode_cluster_id(b'{"version":"1","id":"eQzK4lYlQ9y8P21IScOl_g"}') == "eQzK4lYlQ9y8P21IScOl_g"
    assert zk_data.encode_controller_epoch(12) == b"12" and zk_data.decode_controller_epoch(b"12") == 12
    for decode, bad in ((zk_data.decode_controller, b"{}"), (zk_data.decode_cluster_id, b'{"version":"1"}'),
                        (zk_data.decode_controller_epoch, b"x"), (zk_data.decode_controller, None)):
        with pytest.raises(ZkDataError):
            decode(bad)


def test_reassignment_requests_are_what_kafka_reassign_partitions_writes():
    # As kafka-reassign-partitions.sh --zookeeper (Kafka 2.x) writes the node, log_dirs included.
    written = (b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3],'
               b'"log_dirs":["any","any"]},{"topic":"u","partition":5,"replicas":[1]}]}')
    moves = zk_data.decode_reassignment_request(written)
    assert moves == {("t", 0): (2, 3), ("u", 5): (1,)}
    assert zk_data.decode_reassignment_request(zk_data.encode_reassignment_request(moves)) == moves
    assert zk_data.encode_reassignment_request({("t", 0): (2, 3)}) == (
        b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3]}]}')
    for bad in (b'{"version":1,"partitions":[{"topic":"t","replicas":[1]}]}',
                b'{"version":1,"partitions":[{"topic":7,"partition":0,"replicas":[1]}]}',
                b"not json"):
        with pytest.raises(ZkDataError):
            zk_data.decode_reassignment_request(bad)


def test_paths_are_kafkas():
    assert zk_paths.broker_path(3) == "/brokers/ids/3"
    assert zk_paths.partition_state_path("t", 0) == "/brokers/topics/t/partitions/0/state"
    assert zk_paths.topic_config_path("t") == "/config/topics/t"
    assert set(zk_paths.PERSISTENT_PATHS) == {
        "/consumers", "/brokers/ids", "/brokers/topics", "/config/changes", "/admin/delete_topics",
        "/brokers/seqid", "/isr_change_notification", "/latest_producer_id_block",
        "/log_dir_event_notification", "/config/topics", "/config/clients", "/config/users",
        "/config/brokers"}
    assert zk_paths.broker_id_of("12") == 12 and zk_paths.broker_id_of("seqid") is None


def test_connect_string():
    c = zk_paths.parse_connect("zk1:2181,zk2:2182,zk3/kafka/prod")
    assert c.hosts == (("zk1", 2181), ("zk2", 2182), ("zk3", 2181)) and c.chroot == "/kafka/prod"
    assert c.servers == "zk1:2181,zk2:2182,zk3:2181"
    assert c.path("/controller") == "/kafka/prod/controller" and c.path("/") == "/kafka/prod"
    assert str(c) == "zk1:2181,zk2:2182,zk3:2181/kafka/prod"
    plain = zk_paths.parse_connect("[::1]:2181/")
    assert plain.hosts == (("::1", 2181),) and plain.chroot == "" and plain.path("/controller") == "/controller"
    for bad in ("", "/kafka", "h:x", "h:0", "h:2181/kafka/", "h:2181/a//b", "h:2181/a/../b"):
        with pytest.raises(zk_paths.ConnectStringError):
            zk_paths.parse_connect(bad)


def _live(broker_id, epoch):
    return LiveBroker(BrokerRegistration(broker_id, (Endpoint("PLAINTEXT", "h", 9000 + broker_id),)), epoch)


def test_membership_change_tells_joining_leaving_and_bouncing():
    before = {1: _live(1, 10), 2: _live(2, 11), 3: _live(3, 12)}
    after = {1: _live(1, 10), 3: _live(3, 20), 4: _live(4, 21)}
    change = membership_change(before, after)
    assert (change.added, change.removed, change.bounced, change.live) == ((4,), (2,), (3,), (1, 3, 4))
    assert change.describe() == ("Newly added brokers: 4, deleted brokers: 2, bounced brokers: 3, "
                                 "all live brokers: 1,3,4")
    assert not membership_change(after, dict(after))


def test_cluster_config_keys():
    cfg = BrokerConfig.from_props({"zookeeper.connect": "127.0.0.1:2181/brook", "broker.id": "2",
                                   "broker.rack": "r1", "zookeeper.session.timeout.ms": "4000"})
    assert (cfg.zookeeper_connect, cfg.broker_id, cfg.broker_rack) == ("127.0.0.1:2181/brook", 2, "r1")
    # zookeeper.connection.timeout.ms defaults to the session timeout, as in Kafka
    assert (cfg.zookeeper_session_timeout_ms, cfg.zookeeper_connection_timeout_ms) == (4000, 4000)
    single = BrokerConfig.from_props({})
    assert (single.zookeeper_connect, single.zookeeper_session_timeout_ms, single.broker_rack) == (None, 18000, None)
    with pytest.raises(ConfigError, match="needs its own broker.id"):
        BrokerConfig.from_props({"zookeeper.connect": "127.0.0.1:2181"})
    with pytest.raises(ConfigError, match="invalid chroot"):
        BrokerConfig.from_props({"zookeeper.connect": "127.0.0.1:2181/a/", "broker.id": "1"})
    with pytest.raises(ConfigError, match="at least 1"):
        BrokerConfig.from_props({"zookeeper.connect": "h", "broker.id": "1",
                                 "zookeeper.connection.timeout.ms": "0"})


def test_log_dirs_of_another_cluster_are_refused_with_kafkas_message(tmp_path):
    store = MetadataStore((str(tmp_path),), 1)
    store.load("clusterA")  # empty dirs take the cluster's id
    store.close()
    assert "cluster.id=clusterA" in (tmp_path / "meta.properties").read_text()
    store = MetadataStore((str(tmp_path),), 1)
    with pytest.raises(InconsistentClusterIdError) as info:
        store.load("clusterB")
    assert str(info.value) == (
        "The Cluster ID clusterB doesn't match stored clusterId Some(clusterA) in meta.properties. "
        "The broker is trying to join the wrong cluster. Configured zookeeper.connect may be wrong.")
    store = MetadataStore((str(tmp_path),), 1)
    store.load("clusterA")
    assert store.cluster_id == "clusterA"
    store.close()


def test_the_single_node_imports_no_zookeeper_client():
    code = ("import sys, brook.cli.app, brook.broker.server, brook.broker.handlers;"
            "from brook.cli.broker import broker;"
            "assert 'kazoo' not in sys.modules, sorted(m for m in sys.modules if 'kazoo' in m)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
