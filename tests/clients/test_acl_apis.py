"""CreateAcls, DescribeAcls and DeleteAcls against a broker process with ACLs on, through
confluent-kafka's AdminClient and raw requests of every version; ACLs survive a restart;
without an authorizer the APIs answer SECURITY_DISABLED."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType,
                                   ResourceType)
from kio.schema.errors import ErrorCode

from brook.protocol.messages import make, request_class
from tests.support.acl_broker import AclBroker, acl
from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess
from tests.support.kafka_wire import WireClient

pytestmark = pytest.mark.broker

ANY_FILTER = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = AclBroker(tmp_path_factory.mktemp("acl-apis"))
    b.proc.start()
    try:
        yield b
    finally:
        b.proc.close()


@pytest.fixture(autouse=True)
def clean(broker):
    broker.revoke_all()
    yield


def _describe(admin, f=ANY_FILTER):
    return admin.describe_acls(f, request_timeout=30).result()


def test_admin_creates_describes_and_deletes_acls(broker):
    admin = broker.admin()
    bindings = [acl("TOPIC", "orders", "READ"), acl("TOPIC", "orders-", "WRITE", pattern="PREFIXED"),
                acl("GROUP", "*", "READ", "User:bob"), acl("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE"),
                acl("TOPIC", "orders", "DELETE", permission="DENY", host="10.1.2.3")]
    broker.grant(*bindings)
    broker.grant(bindings[0])  # again: kept once
    assert sorted(map(str, _describe(admin))) == sorted(map(str, bindings))
    # MATCH: what applies to the topic orders-eu
    match = AclBindingFilter(ResourceType.TOPIC, "orders-eu", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert [str(b) for b in _describe(admin, match)] == [str(bindings[1])]
    only_bob = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None,
                                AclOperation.ANY, AclPermissionType.ANY)
    deleted = admin.delete_acls([only_bob], request_timeout=30)[only_bob].result()
    assert [str(b) for b in deleted] == [str(bindings[2])]
    assert len(_describe(admin)) == 4


def test_invalid_bindings_are_refused_one_by_one(broker):
    admin = broker.admin()
    good, bad = acl("TOPIC", "t", "READ"), acl("TOPIC", "t", "READ", principal="alice")
    futures = admin.create_acls([good, bad], request_timeout=30)
    assert futures[good].result() is None
    with pytest.raises(KafkaException) as e:
        futures[bad].result()
    assert e.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert [str(b) for b in _describe(admin)] == [str(good)]


@pytest.mark.parametrize("user", ["alice", "bob"])
def test_acl_apis_need_cluster_alter_and_describe(broker, user):
    other = broker.admin(user)
    with pytest.raises(KafkaException) as e:
        for f in other.create_acls([acl("TOPIC", "t", "READ", f"User:{user}")], request_timeout=30).values():
            f.result()
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # (confluent-kafka's describe_acls answers [] for a refusal: ask on the wire)
    with broker.wire(user) as c:
        assert _wire_describe(c).error_code == ErrorCode.cluster_authorization_failed
    with pytest.raises(KafkaException) as e:
        other.delete_acls([ANY_FILTER], request_timeout=30)[ANY_FILTER].result()
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # granted: Cluster Alter lets create and delete; Describe (implied by Alter) lets describe
    broker.grant(acl("CLUSTER", "kafka-cluster", "ALTER", f"User:{user}"))
    for f in other.create_acls([acl("GROUP", "g", "READ", f"User:{user}")], request_timeout=30).values():
        assert f.result() is None
    assert len(_describe(other)) == 2
    assert len(other.delete_acls([ANY_FILTER], request_timeout=30)[ANY_FILTER].result()) == 2


def _wire_describe(c, version=3):
    return c.request(make(request_class(29, version), resource_type_filter=1, resource_name_filter=None,
                          pattern_type_filter=1, principal_filter=None, host_filter=None,
                          operation=1, permission_type=1))


def _creation(version, **kw):
    from brook.protocol.messages import request_class as rc
    cls = rc(30, version)
    import sys
    mod = sys.modules[cls.__module__]
    return make(cls, creations=(make(mod.AclCreation, **kw),))


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_every_version_creates_describes_and_deletes(broker, version):
    import sys
    with broker.wire("admin") as c:
        r = c.request(_creation(version, resource_type=2, resource_name=f"v{version}", resource_pattern_type=3,
                                principal="User:alice", host="*", operation=3, permission_type=3))
        assert [x.error_code for x in r.results] == [ErrorCode.none]
        describe = request_class(29, version)
        r = c.request(make(describe, resource_type_filter=2, resource_name_filter=f"v{version}",
                           pattern_type_filter=3, principal_filter=None, host_filter=None,
                           operation=1, permission_type=1))
        assert r.error_code == ErrorCode.none
        assert [(res.resource_name, [(a.principal, a.operation, a.permission_type) for a in res.acls])
                for res in r.resources] == [(f"v{version}", [("User:alice", 3, 3)])]
        delete = request_class(31, version)
        mod = sys.modules[delete.__module__]
        r = c.request(make(delete, filters=(make(mod.DeleteAclsFilter, resource_type_filter=1,
                                                 resource_name_filter=None, pattern_type_filter=1,
                                                 principal_filter=None, host_filter=None, operation=1,
                                                 permission_type=1),)))
        assert [len(f.matching_acls) for f in r.filter_results] == [1]
        assert r.filter_results[0].matching_acls[0].resource_name == f"v{version}"


def test_acls_survive_a_restart(tmp_path):
    b = AclBroker(tmp_path)
    b.proc.start()
    try:
        kept, gone = acl("TOPIC", "kept", "READ"), acl("GROUP", "gone", "READ")
        b.grant(kept, gone)
        f = AclBindingFilter(ResourceType.GROUP, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
        admin = b.admin()
        admin.delete_acls([f], request_timeout=30)[f].result()
        b.proc.restart()
        assert [str(x) for x in _describe(b.admin())] == [str(kept)]
        b.proc.restart(9)  # a crash: the journal has them too
        assert [str(x) for x in _describe(b.admin())] == [str(kept)]
    finally:
        b.proc.close()


def test_without_an_authorizer_acl_apis_answer_security_disabled(tmp_path):
    with BrokerProcess(tmp_path, overrides=BROKER_DEFAULTS) as proc:
        with WireClient(proc.bootstrap) as c:
            r = _wire_describe(c)
            assert r.error_code == ErrorCode.security_disabled
            assert r.error_message == "No Authorizer is configured on the broker"
            r = c.request(_creation(3, resource_type=2, resource_name="t", resource_pattern_type=3,
                                    principal="User:alice", host="*", operation=3, permission_type=3))
            assert [x.error_code for x in r.results] == [ErrorCode.security_disabled]


def test_without_an_authorizer_authorized_operations_are_all_a_resource_has(tmp_path):
    from brook.security.acls import SUPPORTED_OPERATIONS, ResourceType, bitfield
    from tests.support.wire_build import request
    with BrokerProcess(tmp_path, overrides=BROKER_DEFAULTS) as proc:
        with WireClient(proc.bootstrap) as c:
            c.request(request(19, 7, topics=[{"name": "t", "num_partitions": 1, "replication_factor": -1}],
                              timeout=timedelta(seconds=5)))
            r = c.request(request(3, 10, topics=[{"name": "t", "topic_id": uuid.UUID(int=0)}],
                                  include_cluster_authorized_operations=True,
                                  include_topic_authorized_operations=True))
            topic_ops = bitfield(SUPPORTED_OPERATIONS[ResourceType.TOPIC])
            assert r.topics[0].topic_authorized_operations == topic_ops
            assert r.cluster_authorized_operations == bitfield(SUPPORTED_OPERATIONS[ResourceType.CLUSTER])
            r = c.request(request(60, 1, include_cluster_authorized_operations=True, endpoint_type=1))
            assert r.cluster_authorized_operations == bitfield(SUPPORTED_OPERATIONS[ResourceType.CLUSTER])
            r = c.request(request(15, 5, groups=["g"], include_authorized_operations=True))
            assert r.groups[0].authorized_operations == bitfield(SUPPORTED_OPERATIONS[ResourceType.GROUP])
            r = c.request(request(3, 10, topics=[{"name": "t", "topic_id": uuid.UUID(int=0)}]))
            assert r.cluster_authorized_operations == r.topics[0].topic_authorized_operations == -(2**31)
