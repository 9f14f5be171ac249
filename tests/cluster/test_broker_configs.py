"""Dynamic broker configs in a cluster, as Kafka's ZooKeeper mode keeps them:
/config/brokers/<default> and /config/brokers/<id> with a change notification, applied by
every broker they concern without a restart, and read again at start."""

from __future__ import annotations

import sys

import pytest
from kio.schema.errors import ErrorCode

from brook.protocol.messages import make, request_class
from tests.support.cluster_harness import brokers, wait_for, zk, zookeeper  # noqa: F401
from tests.support.kafka_wire import WireClient

pytestmark = pytest.mark.broker

BROKER = 4
SET, DELETE = 0, 1
DYNAMIC_BROKER, DYNAMIC_DEFAULT, DEFAULT = 2, 3, 5


def incremental(bootstrap, name, ops):
    cls = request_class(44, 1)
    mod = sys.modules[cls.__module__]
    with WireClient(bootstrap) as c:
        (result,) = c.request(cls(resources=(mod.AlterConfigsResource(
            resource_type=BROKER, resource_name=name, configs=tuple(
                mod.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops)),),
            validate_only=False)).responses
    return result


def entry(bootstrap, broker_id, key):
    cls = request_class(32, 4)
    mod = sys.modules[cls.__module__]
    with WireClient(bootstrap) as c:
        (result,) = c.request(make(cls, resources=(mod.DescribeConfigsResource(
            resource_type=BROKER, resource_name=str(broker_id), configuration_keys=(key,)),),
            include_synonyms=True, include_documentation=False)).results
    assert result.error_code == ErrorCode.none, result.error_message
    (found,) = result.configs
    return found.value, found.config_source


def test_defaults_and_per_broker_configs_through_zookeeper(zk, brokers):
    for i in (1, 2):
        brokers(i)
    wait_for(lambda: zk.broker_ids() == [1, 2], 30, "brokers registered", brokers)

    result = incremental(brokers[1].bootstrap, "", [("log.retention.ms", SET, "7200000")])
    assert result.error_code == ErrorCode.none, result.error_message
    assert zk.json("/config/brokers/<default>")["config"] == {"log.retention.ms": "7200000"}
    assert any(zk.json(f"/config/changes/{c}")["entity_path"] == "brokers/<default>"
               for c in zk.children("/config/changes"))
    for i in (1, 2):  # every broker applies the default when notified
        wait_for(lambda: entry(brokers[i].bootstrap, i, "log.retention.ms")
                 == ("7200000", DYNAMIC_DEFAULT), 15, f"broker {i} taking the default", brokers)

    result = incremental(brokers[2].bootstrap, "2", [("log.retention.ms", SET, "3600000")])
    assert result.error_code == ErrorCode.none, result.error_message
    assert zk.json("/config/brokers/2")["config"] == {"log.retention.ms": "3600000"}
    assert entry(brokers[2].bootstrap, 2, "log.retention.ms") == ("3600000", DYNAMIC_BROKER)
    assert entry(brokers[1].bootstrap, 1, "log.retention.ms") == ("7200000", DYNAMIC_DEFAULT)
    # Broker 1 cannot set broker 2's: each broker's configs go to that broker, as in Kafka.
    result = incremental(brokers[1].bootstrap, "2", [("log.retention.ms", SET, "1")])
    assert result.error_code == ErrorCode.invalid_request
    result = incremental(brokers[1].bootstrap, "", [("zookeeper.connect", SET, "elsewhere:2181")])
    assert result.error_code == ErrorCode.invalid_config
    assert zk.json("/config/brokers/<default>")["config"] == {"log.retention.ms": "7200000"}

    # A restarted broker reads them from ZooKeeper.
    brokers[2].restart()
    wait_for(lambda: zk.broker_ids() == [1, 2], 30, "broker 2 back", brokers)
    assert entry(brokers[2].bootstrap, 2, "log.retention.ms") == ("3600000", DYNAMIC_BROKER)

    result = incremental(brokers[1].bootstrap, "", [("log.retention.ms", DELETE, None)])
    assert result.error_code == ErrorCode.none
    assert zk.json("/config/brokers/<default>")["config"] == {}
    wait_for(lambda: entry(brokers[1].bootstrap, 1, "log.retention.ms") == (None, DEFAULT),
             15, "the default removed", brokers)
    assert entry(brokers[2].bootstrap, 2, "log.retention.ms") == ("3600000", DYNAMIC_BROKER)
