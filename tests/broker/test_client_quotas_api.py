"""DescribeClientQuotas and AlterClientQuotas against a broker in this process: Kafka's
answers and error codes, validate_only, filters, and quotas kept across a restart."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from brook.broker.broker import Broker
from brook.broker.config import BrokerConfig
from brook.broker.handlers import client_quotas
from brook.protocol.messages import Request, make, request_class
from tests.support.wire_requests import req_mod as request_module


def _broker(tmp_path) -> Broker:
    broker = Broker(BrokerConfig.from_props({"log.dirs": str(tmp_path),
                                             "listeners": "PLAINTEXT://127.0.0.1:9092"}))
    broker.open()
    return broker


@pytest.fixture
def broker(tmp_path):
    b = _broker(tmp_path)
    yield b
    b.close()


def alter(broker, entries, validate_only=False, version=1):
    """entries: [({"user": "alice"}, {"producer_byte_rate": 1024.0, "consumer_byte_rate": None})]
    (None removes)."""
    mod = request_module(49, version)
    body = make(request_class(49, version), validate_only=validate_only, entries=tuple(
        make(mod.EntryData,
             entity=tuple(make(mod.EntityData, entity_type=t, entity_name=n) for t, n in entity.items()),
             ops=tuple(make(mod.OpData, key=k, value=0.0 if v is None else float(v), remove=v is None)
                       for k, v in ops.items()))
        for entity, ops in entries))
    response = asyncio.run(client_quotas.alter(broker, Request(49, version, 1, "test", body, 0), None))
    return [(e.error_code, e.error_message) for e in response.entries]


def describe(broker, components=(), strict=False, version=1):
    mod = request_module(48, version)
    body = make(request_class(48, version), strict=strict, components=tuple(
        make(mod.ComponentData, entity_type=t, match_type=m, match=n) for t, m, n in components))
    response = asyncio.run(client_quotas.describe(broker, Request(48, version, 1, "test", body, 0), None))
    if response.error_code != ErrorCode.none:
        return response.error_code, response.error_message
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity):
            {v.key: v.value for v in entry.values} for entry in response.entries}


@pytest.mark.parametrize("version", [0, 1])
def test_alter_then_describe(broker, version):
    assert alter(broker, [({"user": "alice"}, {"producer_byte_rate": 1024}),
                          ({"user": "alice", "client-id": None}, {"consumer_byte_rate": 2048,
                                                                  "request_percentage": 12.5}),
                          ({"client-id": "app"}, {"controller_mutation_rate": 3})],
                 version=version) == [(ErrorCode.none, None)] * 3
    assert describe(broker, version=version) == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
        (("user", "alice"), ("client-id", None)): {"consumer_byte_rate": 2048.0, "request_percentage": 12.5},
        (("client-id", "app"),): {"controller_mutation_rate": 3.0},
    }
    assert broker.quotas.quota("producer_byte_rate", "alice", "x")[0] == 1024


def test_remove_a_key_and_the_last_key_removes_the_entity(broker):
    alter(broker, [({"user": "alice"}, {"producer_byte_rate": 1024, "consumer_byte_rate": 10})])
    alter(broker, [({"user": "alice"}, {"producer_byte_rate": None})])
    assert describe(broker) == {(("user", "alice"),): {"consumer_byte_rate": 10.0}}
    alter(broker, [({"user": "alice"}, {"consumer_byte_rate": None, "request_percentage": None})])
    assert describe(broker) == {}
    assert not broker.quotas.active


def test_validate_only_changes_nothing(broker):
    assert alter(broker, [({"user": "alice"}, {"producer_byte_rate": 1024})],
                 validate_only=True) == [(ErrorCode.none, None)]
    assert describe(broker) == {}
    code, message = alter(broker, [({"user": "alice"}, {"producer_byte_rate": -1})], validate_only=True)[0]
    assert code == ErrorCode.invalid_request


@pytest.mark.parametrize("entity, ops, text", [
    ({"user": "a"}, {"bogus_rate": 1}, "Invalid configuration key bogus_rate"),
    ({"user": "a"}, {"producer_byte_rate": 0}, "must be greater than 0"),
    ({"user": "a"}, {"consumer_byte_rate": 10.5}, "fractional"),
    ({"group": "a"}, {"producer_byte_rate": 1}, "Unhandled client quota entity type: group"),
    ({"ip": "1.2.3.4"}, {"connection_creation_rate": 1}, "Unhandled client quota entity type: ip"),
    ({"user": ""}, {"producer_byte_rate": 1}, "Empty user not supported"),
    ({}, {"producer_byte_rate": 1}, "Invalid empty client quota entity"),
])
def test_refusals_are_invalid_request_per_entry(broker, entity, ops, text):
    results = alter(broker, [(entity, ops), ({"user": "ok"}, {"producer_byte_rate": 5})])
    assert results[0][0] == ErrorCode.invalid_request and text in results[0][1]
    assert results[1] == (ErrorCode.none, None)  # the others still go through, as in Kafka
    assert describe(broker) == {(("user", "ok"),): {"producer_byte_rate": 5.0}}


def test_a_duplicate_entity_or_key_is_refused(broker):
    results = alter(broker, [({"user": "a"}, {"producer_byte_rate": 5}),
                             ({"user": "a"}, {"producer_byte_rate": 6})])
    assert results[1][0] == ErrorCode.invalid_request
    mod = request_module(49, 1)
    body = make(request_class(49, 1), validate_only=False, entries=(make(
        mod.EntryData, entity=(make(mod.EntityData, entity_type="user", entity_name="b"),),
        ops=(make(mod.OpData, key="producer_byte_rate", value=1.0, remove=False),
             make(mod.OpData, key="producer_byte_rate", value=2.0, remove=False))),))
    response = asyncio.run(client_quotas.alter(broker, Request(49, 1, 1, "t", body, 0), None))
    assert response.entries[0].error_code == ErrorCode.invalid_request


def test_describe_filters(broker):
    alter(broker, [({"user": "alice"}, {"producer_byte_rate": 1}),
                   ({"user": "alice", "client-id": "app"}, {"producer_byte_rate": 2}),
                   ({"user": None}, {"producer_byte_rate": 3}),
                   ({"client-id": None}, {"producer_byte_rate": 4})])
    assert set(describe(broker, [("user", 0, "alice")])) == {
        (("user", "alice"),), (("user", "alice"), ("client-id", "app"))}
    assert set(describe(broker, [("user", 0, "alice")], strict=True)) == {(("user", "alice"),)}
    assert set(describe(broker, [("user", 1, None)])) == {(("user", None),)}
    assert set(describe(broker, [("client-id", 2, None)])) == {
        (("user", "alice"), ("client-id", "app")), (("client-id", None),)}
    assert describe(broker, [("ip", 2, None)]) == {}


@pytest.mark.parametrize("components, code", [
    ([("user", 0, None)], ErrorCode.invalid_request),
    ([("user", 1, "x")], ErrorCode.invalid_request),
    ([("user", 7, None)], ErrorCode.invalid_request),
    ([("user", 2, None), ("user", 2, None)], ErrorCode.invalid_request),
    ([("", 2, None)], ErrorCode.invalid_request),
    ([("ip", 2, None), ("user", 2, None)], ErrorCode.invalid_request),
    ([("group", 2, None)], ErrorCode.unsupported_version),
])
def test_describe_refusals(broker, components, code):
    assert describe(broker, components)[0] == code


def test_quotas_survive_a_restart(tmp_path):
    broker = _broker(tmp_path)
    try:
        alter(broker, [({"user": "alice", "client-id": "a/b"}, {"producer_byte_rate": 1024}),
                       ({"user": None}, {"consumer_byte_rate": 99})])
        alter(broker, [({"user": None}, {"request_percentage": 50})])
    finally:
        broker.close()
    for _ in range(2):  # from the journal, then from the snapshot it was folded into
        broker = _broker(tmp_path)
        try:
            assert describe(broker) == {
                (("user", "alice"), ("client-id", "a/b")): {"producer_byte_rate": 1024.0},
                (("user", None),): {"consumer_byte_rate": 99.0, "request_percentage": 50.0},
            }
            assert broker.quotas.quota("consumer_byte_rate", "zed", "c") == (99.0, ("zed", ""))
        finally:
            broker.close()


def test_the_quota_window_is_kafkas_broker_config(tmp_path):
    from brook.broker.config import ConfigError
    props = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:9092"}
    broker = Broker(BrokerConfig.from_props({**props, "quota.window.num": "3",
                                             "quota.window.size.seconds": "2"}))
    assert (broker.quotas.window_num, broker.quotas.window_size_ms) == (3, 2000)
    assert Broker(BrokerConfig.from_props(props)).quotas.window_num == 11
    with pytest.raises(ConfigError, match="quota.window.num"):
        BrokerConfig.from_props({**props, "quota.window.num": "0"})
