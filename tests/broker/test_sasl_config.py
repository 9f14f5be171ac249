"""Listener security from Kafka's keys: the protocol map, SASL mechanisms, PLAIN's JAAS users."""

from __future__ import annotations

import pytest

from brook.broker.config import BrokerConfig, ConfigError

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b" '
        'user_alice="alice-secret";')


def config(**props):
    return BrokerConfig.from_props({k.replace("_", "."): v for k, v in props.items()})


def test_the_default_is_one_plaintext_listener_without_sasl():
    cfg = BrokerConfig.from_props({})
    assert [(s.name, s.protocol, s.sasl) for s in cfg.listener_security.values()] == [
        ("PLAINTEXT", "PLAINTEXT", False)]


def test_sasl_plaintext_with_plain_users_and_per_listener_mechanisms():
    cfg = BrokerConfig.from_props({
        "listeners": "SASL_PLAINTEXT://:9093,CLIENTS://:9094,PLAINTEXT://:9092",
        "listener.security.protocol.map": "CLIENTS:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.clients.sasl.enabled.mechanisms": "plain,SCRAM-SHA-256",
        "listener.name.clients.plain.sasl.jaas.config": JAAS,
    })
    sec = cfg.listener_security
    assert sec["SASL_PLAINTEXT"].mechanisms == ("SCRAM-SHA-512",)
    assert sec["CLIENTS"].mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert sec["CLIENTS"].plain_users == {"alice": "alice-secret"}
    assert "alice-secret" not in repr(sec["CLIENTS"])
    assert not sec["PLAINTEXT"].sasl


@pytest.mark.parametrize("props,message", [
    ({"listeners": "SSL://:9093"}, "listener SSL uses TLS: set ssl.keystore.location"),
    ({"listeners": "SASL_SSL://:9093", "sasl.enabled.mechanisms": "PLAIN"}, "listener SASL_SSL uses TLS"),
    ({"listeners": "INTERNAL://:9093"}, "No security protocol defined for listener INTERNAL"),
    ({"listeners": "SASL_PLAINTEXT://:9093"}, "GSSAPI, is not supported"),
    ({"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "GSSAPI"}, "GSSAPI not supported"),
    ({"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "PLAIN"},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config is not set"),
    ({"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "PLAIN",
      "listener.name.sasl_plaintext.plain.sasl.jaas.config": "x required a=b"}, "not terminated by semi-colon"),
    ({"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "PLAIN",
      "listener.name.sasl_plaintext.plain.sasl.jaas.config": "x.Other required;"}, "is not org.apache"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "is not LISTENER:PROTOCOL"),
    ({"listeners": "SASL_PLAINTEXT://:9093,PLAINTEXT://:9092", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
      "zookeeper.connect": "127.0.0.1:2181", "broker.id": "1"},
     r"sasl.mechanism.inter.broker.protocol \(GSSAPI\) must be included in sasl.enabled.mechanisms"),
    ({"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
      "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256", "zookeeper.connect": "127.0.0.1:2181",
      "broker.id": "1"}, "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config must give"),
    ({"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
      "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256", "zookeeper.connect": "127.0.0.1:2181",
      "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": "x.Scram required username=a;",
      "broker.id": "1"}, "username and password are needed"),
])
def test_refused_at_start(props, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_props(props)


def test_a_cluster_with_a_plaintext_inter_broker_listener_may_have_sasl_for_clients():
    cfg = BrokerConfig.from_props({
        "listeners": "SASL_PLAINTEXT://:9093,PLAINTEXT://:9092", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "zookeeper.connect": "127.0.0.1:2181", "broker.id": "1", "inter.broker.listener.name": "PLAINTEXT"})
    assert cfg.listener_security["SASL_PLAINTEXT"].sasl


def test_a_sasl_inter_broker_listener_takes_the_brokers_credentials_from_the_jaas_config():
    cfg = BrokerConfig.from_props({
        "listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="pw";',
        "zookeeper.connect": "127.0.0.1:2181", "broker.id": "1"})
    creds = cfg.inter_broker_sasl
    assert (creds.mechanism, creds.username, creds.password) == ("SCRAM-SHA-512", "broker", "pw")
    assert "pw" not in repr(cfg.inter_broker_sasl)
    assert BrokerConfig.from_props({}).inter_broker_sasl is None
