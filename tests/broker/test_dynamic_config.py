"""The broker's configuration in layers (brook.broker.dynamic_config) and the table of the
configs brook knows (brook.broker.config_defs), without a broker process: precedence and
synonyms as Kafka's DynamicBrokerConfig has them, what a dynamic layer may hold, defaults
that agree with what the broker does, and dynamic configs kept by the metadata store."""

from __future__ import annotations

import dataclasses

import pytest

from brook.broker import config_defs as defs
from brook.broker.config import BrokerConfig
from brook.broker.dynamic_config import (
    BrokerConfigLayers,
    DynamicConfigError,
    check_dynamic_configs,
    replaced,
)
from brook.broker.metadata import MetadataStore

DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 2, 3, 4, 5


def test_a_dynamic_key_replaces_the_static_one_and_its_synonyms():
    layers = BrokerConfigLayers({"log.retention.ms": "1000", "num.partitions": "3"},
                                cluster_default={"log.retention.hours": "2"})
    merged = layers.merged()
    assert "log.retention.ms" not in merged and merged["log.retention.hours"] == "2"
    assert BrokerConfig.from_props(merged).log_config.retention_ms == 2 * 3600 * 1000
    layers = replaced(layers, False, {"log.retention.minutes": "5"})
    assert BrokerConfig.from_props(layers.merged()).log_config.retention_ms == 5 * 60 * 1000


def test_sources_and_synonyms_in_order_of_precedence():
    layers = BrokerConfigLayers({"log.roll.hours": "10"}, {"log.roll.hours": "20"},
                                {"log.roll.hours": "30", "log.roll.ms": "1000"})
    entries = {e.name: e for e in layers.describe_broker(["log.roll.hours", "log.roll.ms"],
                                                         with_synonyms=True)}
    ms = entries["log.roll.ms"]
    assert (ms.value, ms.source) == ("1000", DYNAMIC_BROKER)
    assert [(s.name, s.value, s.source) for s in ms.synonyms] == [
        ("log.roll.ms", "1000", DYNAMIC_BROKER), ("log.roll.hours", "30", DYNAMIC_BROKER),
        ("log.roll.hours", "20", DYNAMIC_DEFAULT), ("log.roll.hours", "10", STATIC),
        ("log.roll.hours", "168", DEFAULT)]
    hours = entries["log.roll.hours"]
    assert (hours.value, hours.source) == ("30", DYNAMIC_BROKER)
    assert hours.synonyms[0].name == "log.roll.hours"  # log.roll.ms is not listed under hours
    defaults = layers.describe_default(None, with_synonyms=True)
    assert [(e.name, e.value, e.source, [s.source for s in e.synonyms]) for e in defaults] == [
        ("log.roll.hours", "20", DYNAMIC_DEFAULT, [DYNAMIC_DEFAULT])]


def test_secrets_are_never_shown():
    layers = BrokerConfigLayers({"ssl.truststore.password": "s", "custom.token": "t",
                                 "listener.name.internal.sasl.jaas.config": "j"})
    for e in layers.describe_broker(None, with_synonyms=True):
        if e.name in ("ssl.truststore.password", "custom.token",
                      "listener.name.internal.sasl.jaas.config"):
            assert e.value is None and e.sensitive and e.read_only
            assert all(s.value is None for s in e.synonyms)
    assert defs.loggable({"custom.token": "t", "log.retention.ms": "1"}) == {
        "custom.token": "[hidden]", "log.retention.ms": "1"}


@pytest.mark.parametrize("configs, text", [
    ({"broker.id": "2"}, "Cannot update these configs dynamically: broker.id"),
    ({"log.cleaner.threads": "4"}, "log.cleaner.threads"),
    ({"sasl.jaas.config": "x"}, "no secrets"),
    ({"log.retention.bytes": "lots"}, "Not a number of type LONG"),
    ({"log.segment.bytes": str(2**31)}, "Not a number of type INT"),
    ({"log.preallocate": "yes"}, "either true or false"),
    ({"log.cleaner.min.cleanable.ratio": "half"}, "type DOUBLE"),
    ({"message.max.bytes": None}, "Null value"),
])
def test_what_a_dynamic_layer_may_not_hold(configs, text):
    with pytest.raises(DynamicConfigError, match=text):
        check_dynamic_configs(configs)


def test_custom_keys_and_dynamic_keys_are_accepted():
    check_dynamic_configs({"my.plugin.setting": "1", "log.retention.ms": "-1",
                           "log.cleanup.policy": "compact,delete", "max.connections.per.ip": "5",
                           "unclean.leader.election.enable": "TRUE"})


def test_the_defaults_are_what_the_broker_does_unset():
    """Every default in the table, set explicitly, gives the configuration of an empty
    server.properties: the table and the broker agree."""
    explicit = BrokerConfig.from_props(defs.defaults())
    implicit = BrokerConfig.from_props({})
    diff = {f.name for f in dataclasses.fields(BrokerConfig)
            if getattr(explicit, f.name) != getattr(implicit, f.name)}
    assert diff == {"props"}


def test_every_log_level_key_is_known_and_dynamic():
    from brook.storage.config import BROKER_KEYS

    for key, _field, _scale in BROKER_KEYS:
        assert defs.is_dynamic(key), key
    for key in ("listeners", "log.dirs", "broker.id", "zookeeper.connect", "num.partitions"):
        assert not defs.is_dynamic(key), key


def test_the_metadata_store_keeps_dynamic_configs(tmp_path):
    store = MetadataStore((str(tmp_path),), 1)
    store.load()
    store.set_broker_configs("", {"log.retention.ms": "1000"})
    store.set_broker_configs("1", {"message.max.bytes": "5000"})
    store.set_broker_configs("1", {"message.max.bytes": "6000"})
    store.close()
    again = MetadataStore((str(tmp_path),), 1)
    again.load()  # the journal replayed, then folded into the snapshot
    assert again.broker_configs == {"": {"log.retention.ms": "1000"}, "1": {"message.max.bytes": "6000"}}
    again.set_broker_configs("", {})
    again.close()
    third = MetadataStore((str(tmp_path),), 1)
    third.load()  # from the snapshot and the journal
    assert third.broker_configs == {"1": {"message.max.bytes": "6000"}}
    third.close()


def test_a_cluster_controller_takes_unclean_elections_at_once(tmp_path):
    """unclean.leader.election.enable is the controller's: a change reaches the running one
    and the configuration a controller elected later starts on."""
    from types import SimpleNamespace

    from brook.broker.broker import Broker

    broker = Broker(BrokerConfig.from_props({"log.dirs": str(tmp_path)}))
    controller = SimpleNamespace(unclean=False)
    broker.cluster = SimpleNamespace(config=broker.config, controller=controller)
    layers, cfg = broker.check_broker_configs(True, {"unclean.leader.election.enable": "true"})
    broker.use_config(layers, cfg)
    assert controller.unclean is True
    assert broker.cluster.config.unclean_leader_election_enable is True
    assert broker.config.props["unclean.leader.election.enable"] == "true"
