"""ConsumerGroupHeartbeat and ConsumerGroupDescribe under ACLs, as Kafka 4 checks them: Group
Read to heartbeat, Describe on every subscribed topic, Group Describe to describe."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import NewTopic
from kio.schema.errors import ErrorCode

from brook.protocol.messages import make
from tests.support.acl_broker import AclBroker, acl
from tests.support.kafka_wire import request_class


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = AclBroker(tmp_path_factory.mktemp("acl-consumer-groups"))
    b.proc.start()
    try:
        admin = b.admin()  # kept: the futures die with the client
        admin.create_topics([NewTopic("secured", 2, 1)])["secured"].result(15)
        yield b
    finally:
        b.proc.close()


def heartbeat(broker, group: str):
    from datetime import timedelta

    with broker.wire("alice") as w:
        return w.request(make(request_class(68, 0), group_id=group, member_id="m-alice",
                              member_epoch=0, rebalance_timeout=timedelta(seconds=30),
                              subscribed_topic_names=("secured",), topic_partitions=()))


def describe(broker, group: str):
    with broker.wire("alice") as w:
        return w.request(make(request_class(69, 0), group_ids=(group,),
                              include_authorized_operations=False)).groups[0]


def test_heartbeat_needs_group_read_and_describe_on_the_topics(broker):
    assert heartbeat(broker, "acl-g").error_code == ErrorCode.group_authorization_failed
    broker.grant(acl("GROUP", "acl-g", "READ"))
    assert heartbeat(broker, "acl-g").error_code == ErrorCode.topic_authorization_failed
    broker.grant(acl("TOPIC", "secured", "DESCRIBE"))
    r = heartbeat(broker, "acl-g")
    assert r.error_code == ErrorCode.none and r.member_epoch == 1


def test_describe_needs_group_describe(broker):
    assert describe(broker, "acl-d").error_code == ErrorCode.group_authorization_failed
    broker.grant(acl("GROUP", "acl-d", "DESCRIBE"))
    assert describe(broker, "acl-d").error_code == ErrorCode.group_id_not_found
