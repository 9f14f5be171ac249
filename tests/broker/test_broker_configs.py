"""DescribeConfigs on a broker (and the broker-level synonyms of topic configs) with real
clients and exact requests: every config brook knows with its value and source, a key asked
for by name always answered, secrets masked, synonyms in order of precedence."""

from __future__ import annotations

import sys

import pytest
from kio.schema.errors import ErrorCode

from brook.protocol.messages import make, request_class
from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess, confluent_config
from tests.support.kafka_wire import WireClient

TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5
BOOLEAN, STRING, INT, LONG, LIST, PASSWORD, UNKNOWN = 1, 2, 3, 5, 7, 9, 0

STATIC_SETTINGS = {
    **BROKER_DEFAULTS,
    "log.retention.hours": "24",
    "log.segment.bytes": "2000000",
    "ssl.keystore.password": "hunter2",
    "listener.name.plaintext.sasl.jaas.config": "secret-module required;",
    "my.plugin.setting": "not-for-everyone",
}


@pytest.fixture(scope="module")
def cbroker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker-configs"), overrides=STATIC_SETTINGS) as proc:
        yield proc


def describe(bootstrap, name="1", keys=None, *, resource_type=BROKER, synonyms=False,
             docs=False, version=4):
    cls = request_class(32, version)
    mod = sys.modules[cls.__module__]
    body = make(cls, resources=(mod.DescribeConfigsResource(
        resource_type=resource_type, resource_name=name,
        configuration_keys=None if keys is None else tuple(keys)),),
        include_synonyms=synonyms, include_documentation=docs)
    with WireClient(bootstrap) as c:
        (result,) = c.request(body).results
    return result


def by_name(result):
    return {c.name: c for c in result.configs}


def test_every_broker_config_with_its_source_confluent(cbroker):
    """Asked for everything, the broker answers every config it knows: unset ones with their
    default (DEFAULT_CONFIG), those of server.properties as STATIC_BROKER_CONFIG."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

    admin = AdminClient(confluent_config(cbroker.bootstrap))
    resource = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([resource], request_timeout=10)[resource].result(10)
    assert len(configs) > 80
    partitions = configs["num.partitions"]
    assert partitions.value == "4" and partitions.source == ConfigSource.STATIC_BROKER_CONFIG.value
    for name, default in (("auto.create.topics.enable", "true"), ("log.roll.hours", "168"),
                          ("offsets.topic.num.partitions", "50"), ("message.max.bytes", "1048588")):
        entry = configs[name]
        assert (entry.value, entry.source) == (default, ConfigSource.DEFAULT_CONFIG.value), name
        assert entry.is_default
    hours = configs["log.retention.hours"]
    assert (hours.value, hours.source) == ("24", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert "log.retention.hours" in hours.synonyms  # (librdkafka keeps one per name)
    # log.retention.ms stands in before hours and has no default of its own, as in Kafka.
    assert configs["log.retention.ms"].value is None
    assert configs["listeners"].is_read_only and configs["log.dirs"].is_read_only
    assert not configs["log.retention.hours"].is_read_only
    assert not configs["log.segment.bytes"].is_read_only


def test_secrets_and_unknown_keys_are_masked_kafka_python(cbroker):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cbroker.bootstrap)
    try:
        answer = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")],
                                        include_synonyms=True, config_filter="all")
    finally:
        admin.close()
    entries = answer["broker"]["1"]
    for name in ("ssl.keystore.password", "listener.name.plaintext.sasl.jaas.config",
                 "my.plugin.setting"):
        entry = entries[name]
        assert entry["value"] is None and entry["is_sensitive"], name
        assert all(s["value"] is None for s in entry["synonyms"]), name
    assert entries["ssl.keystore.password"]["config_type"] == "PASSWORD"
    assert entries["num.partitions"]["value"] == "4"
    assert not entries["num.partitions"]["is_sensitive"]


def test_a_key_asked_for_by_name_is_always_answered(cbroker):
    """Unset, it is answered with its default; a name the broker does not know is left out
    (Kafka omits unknown keys for a broker)."""
    result = describe(cbroker.bootstrap, keys=["num.network.threads", "log.cleaner.enable",
                                               "no.such.key", "log.segment.bytes"])
    assert result.error_code == ErrorCode.none
    configs = by_name(result)
    assert sorted(configs) == ["log.cleaner.enable", "log.segment.bytes", "num.network.threads"]
    assert (configs["log.cleaner.enable"].value, configs["log.cleaner.enable"].config_source) == \
        ("true", DEFAULT)
    assert (configs["log.segment.bytes"].value, configs["log.segment.bytes"].config_source) == \
        ("2000000", STATIC)


def test_synonyms_in_order_of_precedence(cbroker):
    """What is set, then the default; a key standing in before another (log.retention.ms
    before log.retention.hours) and with no default of its own has none, as in Kafka."""
    configs = by_name(describe(cbroker.bootstrap, keys=["log.retention.hours", "log.retention.ms",
                                                        "num.io.threads"], synonyms=True))
    assert [(s.name, s.value, s.source) for s in configs["log.retention.hours"].synonyms] == [
        ("log.retention.hours", "24", STATIC), ("log.retention.hours", "168", DEFAULT)]
    assert configs["log.retention.ms"].synonyms == ()
    assert (configs["log.retention.ms"].value, configs["log.retention.ms"].config_source) == \
        (None, DEFAULT)
    assert [(s.name, s.source) for s in configs["num.io.threads"].synonyms] == \
        [("num.io.threads", DEFAULT)]
    # Without include_synonyms, none.
    assert all(c.synonyms == () for c in describe(cbroker.bootstrap).configs)


def test_types_and_documentation(cbroker):
    configs = by_name(describe(cbroker.bootstrap, docs=True))
    want = {"auto.create.topics.enable": BOOLEAN, "listeners": STRING, "num.partitions": INT,
            "log.retention.bytes": LONG, "log.cleanup.policy": LIST,
            "ssl.keystore.password": PASSWORD, "my.plugin.setting": UNKNOWN}
    assert {k: configs[k].config_type for k in want} == want
    assert "log file" in configs["log.segment.bytes"].documentation
    assert all(c.documentation is None for c in describe(cbroker.bootstrap).configs)


def test_other_broker_ids_are_invalid_requests(cbroker):
    for name, text in (("7", "Unexpected broker id"), ("one", "must be an integer")):
        result = describe(cbroker.bootstrap, name=name)
        assert result.error_code == ErrorCode.invalid_request
        assert text in result.error_message and result.configs == ()


def test_cluster_default_resource_answers_the_dynamic_defaults_only(cbroker):
    """The empty broker name is the cluster-wide dynamic defaults: none set, nothing."""
    result = describe(cbroker.bootstrap, name="")
    assert result.error_code == ErrorCode.none and result.configs == ()


def test_topic_configs_name_their_broker_level_source(cbroker):
    """A topic key without its own value inherits the broker's: its source is the broker's
    (STATIC_BROKER_CONFIG for log.segment.bytes here), its synonyms the broker's keys."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(confluent_config(cbroker.bootstrap))
    admin.create_topics([NewTopic("described", 1, 1, config={"retention.ms": "5000"})],
                        request_timeout=10)["described"].result(10)
    configs = by_name(describe(cbroker.bootstrap, "described", resource_type=TOPIC,
                               synonyms=True))
    segment = configs["segment.bytes"]
    assert (segment.value, segment.config_source, segment.config_type) == ("2000000", STATIC, INT)
    assert [(s.name, s.value, s.source) for s in segment.synonyms] == [
        ("log.segment.bytes", "2000000", STATIC), ("log.segment.bytes", "1073741824", DEFAULT)]
    retention = configs["retention.ms"]
    assert (retention.value, retention.config_source, retention.config_type) == \
        ("5000", DYNAMIC_TOPIC, LONG)
    assert retention.synonyms[0].name == "retention.ms"
    assert configs["cleanup.policy"].config_type == LIST
    assert configs["flush.ms"].config_source == DEFAULT
    assert not any(c.read_only for c in configs.values())
