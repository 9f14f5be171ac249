"""Dynamic broker configs on the single node with real clients: AlterConfigs and
IncrementalAlterConfigs on a broker (its id) and on the cluster-wide default (the empty
name), applied without a restart, persisted across one, reported with their sources, and
refused with Kafka's errors for read-only keys and bad values."""

from __future__ import annotations

import socket
import sys
import time

import pytest
from kio.schema.errors import ErrorCode

from brook.protocol.messages import make, request_class
from tests.support.broker_harness import BROKER_DEFAULTS, confluent_config
from tests.support.kafka_wire import WireClient

BROKER = 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 2, 3, 4, 5

FAST = {**BROKER_DEFAULTS, "log.retention.check.interval.ms": "200",
        "log.segment.delete.delay.ms": "0", "log.retention.hours": "100"}


def incremental(bootstrap, name, ops, validate_only=False):
    """IncrementalAlterConfigs v1 of a broker resource: (key, operation, value) each."""
    cls = request_class(44, 1)
    mod = sys.modules[cls.__module__]
    body = cls(resources=(mod.AlterConfigsResource(
        resource_type=BROKER, resource_name=name, configs=tuple(
            mod.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops)),),
        validate_only=validate_only)
    with WireClient(bootstrap) as c:
        (result,) = c.request(body).responses
    return result


def describe(bootstrap, name="1", keys=None):
    cls = request_class(32, 4)
    mod = sys.modules[cls.__module__]
    body = make(cls, resources=(mod.DescribeConfigsResource(
        resource_type=BROKER, resource_name=name,
        configuration_keys=None if keys is None else tuple(keys)),),
        include_synonyms=True, include_documentation=False)
    with WireClient(bootstrap) as c:
        (result,) = c.request(body).results
    assert result.error_code == ErrorCode.none, result.error_message
    return {c.name: c for c in result.configs}


def synonyms(entry):
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def _confluent_set(admin, name, **values):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in values.items()])
    return admin.incremental_alter_configs([resource], request_timeout=10)[resource]


def test_sources_synonyms_and_persistence(broker_factory):
    """A per-broker value wins over the cluster-wide default, which wins over
    server.properties; DescribeConfigs names each source and lists them in that order. Both
    survive a restart; deleting one uncovers the next."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

    broker = broker_factory(FAST)
    admin = AdminClient(confluent_config(broker.bootstrap))
    assert _confluent_set(admin, "1", log_retention_hours="50").result(10) is None
    assert incremental(broker.bootstrap, "", [("log.retention.hours", SET, "70"),
                                              ("min.insync.replicas", SET, "2")]).error_code == 0

    resource = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([resource], request_timeout=10)[resource].result(10)
    hours = configs["log.retention.hours"]
    assert (hours.value, hours.source) == ("50", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert not hours.is_read_only
    isr = configs["min.insync.replicas"]
    assert (isr.value, isr.source) == ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)

    def check():
        configs = describe(broker.bootstrap, keys=["log.retention.hours", "min.insync.replicas"])
        assert synonyms(configs["log.retention.hours"]) == [
            ("log.retention.hours", "50", DYNAMIC_BROKER), ("log.retention.hours", "70", DYNAMIC_DEFAULT),
            ("log.retention.hours", "100", STATIC), ("log.retention.hours", "168", DEFAULT)]
        # The cluster-wide defaults are the empty name's answer, with their own synonyms only.
        defaults = describe(broker.bootstrap, name="")
        assert sorted(defaults) == ["log.retention.hours", "min.insync.replicas"]
        assert synonyms(defaults["log.retention.hours"]) == [
            ("log.retention.hours", "70", DYNAMIC_DEFAULT)]
        assert defaults["min.insync.replicas"].config_source == DYNAMIC_DEFAULT

    check()
    broker.restart()
    check()

    assert incremental(broker.bootstrap, "1", [("log.retention.hours", DELETE, None)]).error_code == 0
    hours = describe(broker.bootstrap, keys=["log.retention.hours"])["log.retention.hours"]
    assert (hours.value, hours.config_source) == ("70", DYNAMIC_DEFAULT)
    assert incremental(broker.bootstrap, "", [("log.retention.hours", DELETE, None),
                                              ("min.insync.replicas", DELETE, None)]).error_code == 0
    broker.restart()
    hours = describe(broker.bootstrap, keys=["log.retention.hours"])["log.retention.hours"]
    assert (hours.value, hours.config_source) == ("100", STATIC)
    assert describe(broker.bootstrap, name="") == {}


def test_read_only_keys_and_bad_values_are_refused(broker):
    """INVALID_CONFIG with a message, nothing stored (of the other keys in the request either)."""
    for key, value, text in (
            ("broker.id", "5", "Cannot update these configs dynamically: broker.id"),
            ("log.dirs", "/tmp/elsewhere", "Cannot update these configs dynamically: log.dirs"),
            ("listeners", "PLAINTEXT://:9999", "Cannot update these configs dynamically: listeners"),
            ("num.io.threads", "4", "Cannot update these configs dynamically: num.io.threads"),
            ("log.retention.ms", "soon", "Not a number of type LONG"),
            ("message.max.bytes", "99999999999", "Not a number of type INT"),
            ("unclean.leader.election.enable", "maybe", "either true or false"),
            ("log.cleanup.policy", "shred", "invalid cleanup.policy"),
            ("ssl.keystore.password", "x", "ssl.keystore.password")):
        for name in ("1", ""):
            result = incremental(broker.bootstrap, name, [("log.segment.bytes", SET, "5000000"),
                                                          (key, SET, value)])
            assert result.error_code == ErrorCode.invalid_config, (key, result)
            assert text in result.error_message, (key, result.error_message)
    configs = describe(broker.bootstrap, keys=["log.segment.bytes", "broker.id"])
    assert configs["log.segment.bytes"].config_source == DEFAULT
    assert configs["broker.id"].value == "1"


def test_other_brokers_and_bad_operations_are_invalid_requests(broker):
    for name, text in (("2", "Unexpected broker id"), ("x", "must be an integer")):
        result = incremental(broker.bootstrap, name, [("log.retention.ms", SET, "1000")])
        assert result.error_code == ErrorCode.invalid_request and text in result.error_message
    result = incremental(broker.bootstrap, "1", [("log.retention.ms", APPEND, "1000")])
    assert result.error_code == ErrorCode.invalid_request
    assert describe(broker.bootstrap, keys=["log.retention.ms"])["log.retention.ms"].value is None


def test_validate_only_changes_nothing(broker):
    result = incremental(broker.bootstrap, "1", [("log.retention.ms", SET, "1000")],
                         validate_only=True)
    assert result.error_code == ErrorCode.none
    assert describe(broker.bootstrap, keys=["log.retention.ms"])["log.retention.ms"].value is None
    result = incremental(broker.bootstrap, "1", [("broker.id", SET, "3")], validate_only=True)
    assert result.error_code == ErrorCode.invalid_config


def test_topics_inherit_broker_level_values(broker):
    """A topic without its own min.insync.replicas (or other broker-level key) answers the
    broker's value, with the broker's source."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(confluent_config(broker.bootstrap))
    admin.create_topics([NewTopic("inheriting", 1, 1)], request_timeout=10)["inheriting"].result(10)
    assert incremental(broker.bootstrap, "", [("min.insync.replicas", SET, "2"),
                                              ("log.retention.bytes", SET, "999999")]).error_code == 0
    cls = request_class(32, 4)
    mod = sys.modules[cls.__module__]
    with WireClient(broker.bootstrap) as c:
        (result,) = c.request(make(cls, resources=(mod.DescribeConfigsResource(
            resource_type=2, resource_name="inheriting",
            configuration_keys=("min.insync.replicas", "retention.bytes")),),
            include_synonyms=True, include_documentation=False)).results
    configs = {e.name: e for e in result.configs}
    assert (configs["min.insync.replicas"].value, configs["min.insync.replicas"].config_source) \
        == ("2", DYNAMIC_DEFAULT)
    assert (configs["retention.bytes"].value, configs["retention.bytes"].config_source) == \
        ("999999", DYNAMIC_DEFAULT)
    assert synonyms(configs["retention.bytes"]) == [
        ("log.retention.bytes", "999999", DYNAMIC_DEFAULT), ("log.retention.bytes", "-1", DEFAULT)]
    assert incremental(broker.bootstrap, "", [("min.insync.replicas", DELETE, None),
                                              ("log.retention.bytes", DELETE, None)]).error_code == 0


def test_list_configs_append_and_subtract(broker):
    assert incremental(broker.bootstrap, "", [("log.cleanup.policy", APPEND, "compact")]).error_code == 0
    policy = describe(broker.bootstrap, name="")["log.cleanup.policy"]
    assert policy.value == "delete,compact"
    assert incremental(broker.bootstrap, "", [("log.cleanup.policy", SUBTRACT, "delete")]).error_code == 0
    assert describe(broker.bootstrap, name="")["log.cleanup.policy"].value == "compact"
    assert incremental(broker.bootstrap, "", [("log.cleanup.policy", DELETE, None)]).error_code == 0


def test_legacy_alter_configs_replaces_the_whole_set(broker_factory):
    """AlterConfigs (not incremental) replaces a broker's dynamic configs with those given,
    as Kafka does: a key not given is removed. (kafka-python, on AlterConfigs, sends the
    other dynamic keys along itself.)"""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    broker = broker_factory()
    assert incremental(broker.bootstrap, "1", [("log.retention.bytes", SET, "123456"),
                                               ("log.roll.hours", SET, "5")]).error_code == 0
    cls = request_class(33, 2)
    mod = sys.modules[cls.__module__]
    with WireClient(broker.bootstrap) as c:
        (result,) = c.request(cls(resources=(mod.AlterConfigsResource(
            resource_type=BROKER, resource_name="1", configs=(
                mod.AlterableConfig(name="log.roll.hours", value="6"),)),),
            validate_only=False)).responses
    assert result.error_code == ErrorCode.none
    configs = describe(broker.bootstrap, keys=["log.retention.bytes", "log.roll.hours"])
    assert (configs["log.roll.hours"].value, configs["log.roll.hours"].config_source) == \
        ("6", DYNAMIC_BROKER)
    assert (configs["log.retention.bytes"].value, configs["log.retention.bytes"].config_source) \
        == ("-1", DEFAULT)

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        answer = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1",
                                                     configs={"log.roll.hours": "7"})],
                                     incremental=False)
        assert answer == {"broker": {"1": "OK"}}
        answer = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1",
                                                     configs={"log.roll.hours": "eight"})],
                                     incremental=False)
        assert "[Error 40] InvalidConfigurationError" in answer["broker"]["1"]
        assert "Not a number of type INT" in answer["broker"]["1"]
    finally:
        admin.close()
    assert describe(broker.bootstrap, keys=["log.roll.hours"])["log.roll.hours"].value == "7"


def test_log_defaults_apply_to_every_topic_without_a_restart(broker_factory):
    """log.segment.bytes and log.retention.ms changed at run time: topics without their own
    value roll smaller segments and lose what is older than the new retention; a topic with
    its own retention.ms keeps it."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = broker_factory(FAST)
    admin = AdminClient(confluent_config(broker.bootstrap))
    topics = {"inherits": {}, "own": {"retention.ms": str(10 * 3600 * 1000)}}
    for name, configs in topics.items():
        admin.create_topics([NewTopic(name, 1, 1, config=configs)], request_timeout=10)[name].result(10)
    assert incremental(broker.bootstrap, "", [("log.segment.bytes", SET, "1000")]).error_code == 0

    producer = Producer(confluent_config(broker.bootstrap, **{"linger.ms": 0}))
    old = int(time.time() * 1000) - 3600 * 1000
    for i in range(20):
        for name in topics:
            producer.produce(name, value=b"x" * 300, partition=0, timestamp=old + i)
        producer.flush(10)
    segments = {name: len(list((broker.log_dir / f"{name}-0").glob("*.log"))) for name in topics}
    assert all(n >= 5 for n in segments.values()), segments  # 1000-byte segments

    consumer = Consumer(confluent_config(broker.bootstrap, **{"group.id": "dyn"}))

    def earliest(name):
        return consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=10)[0]

    try:
        assert earliest("inherits") == 0
        assert _confluent_set(admin, "1", log_retention_ms="60000").result(10) is None
        deadline = time.monotonic() + 20
        while earliest("inherits") == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert earliest("inherits") > 0  # retention ran with the new default
        assert earliest("own") == 0  # its own retention.ms still wins
    finally:
        consumer.close()


def test_message_max_bytes_applies_without_a_restart(broker_factory):
    from confluent_kafka import KafkaError, Producer

    broker = broker_factory()
    producer = Producer(confluent_config(broker.bootstrap, **{"linger.ms": 0, "retries": 0}))
    errors = []

    def produce(size):
        errors.clear()
        producer.produce("sized", value=b"x" * size, on_delivery=lambda err, msg: errors.append(err))
        producer.flush(15)
        return errors[0]

    assert produce(5000) is None
    assert incremental(broker.bootstrap, "", [("message.max.bytes", SET, "2000")]).error_code == 0
    err = produce(5000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert produce(500) is None
    assert incremental(broker.bootstrap, "", [("message.max.bytes", DELETE, None)]).error_code == 0
    assert produce(5000) is None


def test_connection_limits_apply_without_a_restart(broker_factory):
    """max.connections.per.ip and max.connections.per.ip.overrides changed at run time: a
    second connection from this address is closed at once, then accepted again."""
    broker = broker_factory()
    host, port = broker.bootstrap.rsplit(":", 1)

    def second_refused() -> bool:
        time.sleep(0.3)  # the connections of earlier requests are gone on the broker's side too
        with WireClient(broker.bootstrap) as first:
            assert first.request(request_class(18, 0)()).error_code == ErrorCode.none
            second = socket.create_connection((host, int(port)), timeout=5)
            second.settimeout(1)
            try:
                return second.recv(1) == b""
            except ConnectionResetError:
                return True
            except socket.timeout:
                return False
            finally:
                second.close()

    def alter(name, key, op, value=None):
        time.sleep(0.3)  # (as above: one connection at a time while the limit is 1)
        return incremental(broker.bootstrap, name, [(key, op, value)])

    assert not second_refused()
    assert alter("1", "max.connections.per.ip", SET, "1").error_code == 0
    assert second_refused()
    assert alter("1", "max.connections.per.ip", DELETE).error_code == 0
    assert not second_refused()
    assert alter("", "max.connections.per.ip.overrides", SET, "127.0.0.1:1").error_code == 0
    deadline = time.monotonic() + 10  # the override's address is resolved off the event loop
    while not second_refused() and time.monotonic() < deadline:
        pass
    assert second_refused()
    result = alter("", "max.connections.per.ip.overrides", SET, "nonsense")
    assert result.error_code == ErrorCode.invalid_config and "host:count" in result.error_message
    assert alter("", "max.connections.per.ip.overrides", DELETE).error_code == 0
    assert not second_refused()


@pytest.mark.parametrize("key", ["log.retention.ms", "message.max.bytes"])
def test_cli_alter_and_describe(broker, key):
    from typer.testing import CliRunner

    from brook.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["configs", "alter", "--broker-defaults", "--set", f"{key}=100000",
                                 "-b", broker.bootstrap])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"Set {key}=100000 on the cluster-wide broker defaults.\n"
    result = runner.invoke(app, ["configs", "describe", "--broker", "1", "--changed",
                                 "-b", broker.bootstrap])
    row = [line.split() for line in result.stdout.splitlines() if line.startswith(key + " ")]
    assert row == [[key, "100000", "DYNAMIC_DEFAULT_BROKER_CONFIG", "yes"]]
    result = runner.invoke(app, ["configs", "alter", "--broker", "1", "--set", "broker.id=4",
                                 "-b", broker.bootstrap])
    assert result.exit_code == 1
    assert "cannot alter the configs of broker 1: INVALID_CONFIG" in result.output.replace(
        "invalid_config", "INVALID_CONFIG")
    result = runner.invoke(app, ["configs", "alter", "--broker-defaults", "--delete", key,
                                 "-b", broker.bootstrap])
    assert result.exit_code == 0 and "Removed" in result.stdout
