"""The broker settings of KIP-848 consumer groups: Kafka 4's keys, defaults and checks."""

import pytest

from brook.broker.config import BrokerConfig, ConfigError


def test_defaults_are_kafkas():
    cfg = BrokerConfig.from_props({})
    assert cfg.group_consumer_session_timeout_ms == 45_000
    assert cfg.group_consumer_heartbeat_interval_ms == 5_000
    assert cfg.group_consumer_max_size == 2**31 - 1
    assert cfg.group_consumer_assignors == ("uniform", "range")
    assert cfg.group_consumer_migration_policy == "bidirectional"


def test_migration_policy_is_read_as_kafka_reads_it():
    for policy in ("bidirectional", "upgrade", "downgrade", "disabled"):
        cfg = BrokerConfig.from_props({"group.consumer.migration.policy": policy.upper()})
        assert cfg.group_consumer_migration_policy == policy


def test_assignors_by_name_or_by_kafkas_class_name():
    cfg = BrokerConfig.from_props({"group.consumer.assignors":
                                   "range, org.apache.kafka.coordinator.group.assignor.UniformAssignor"})
    assert cfg.group_consumer_assignors == ("range", "uniform")


@pytest.mark.parametrize("props", [{"group.consumer.assignors": "sticky"},
                                   {"group.consumer.assignors": ""},
                                   {"group.consumer.max.size": "0"},
                                   {"group.consumer.session.timeout.ms": "-1"},
                                   {"group.consumer.migration.policy": "sideways"}])
def test_bad_settings_are_refused(props):
    with pytest.raises(ConfigError):
        BrokerConfig.from_props(props)
