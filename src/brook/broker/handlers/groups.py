"""Group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups and
ListGroups. Each maps kio's entities to the classic coordinator's requests, runs them on the
group's shard (``brook.coordinator.group.shard``) through the coordinator runtime
(``broker.coordinator``) and maps the answer back."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from ...coordinator.common.runtime import CoordinatorError, CoordinatorNotAvailable
from ...coordinator.group import classic
from ...protocol.group_responses import heartbeat_response
from ...protocol.messages import make, response_class, response_module
from ..auth import authz
from .api import Api, RawResponse
from .common import INT32_MIN, NO_THROTTLE, message, ms

FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


def _may_read(broker, connection, group_id: str) -> bool:
    """Group Read: what joining, syncing, heartbeating and leaving need."""
    return broker.authorizer is None or authz.allowed(broker, connection, authz.Op.READ, authz.GROUP, group_id)


def client_host(connection) -> str:
    """As Kafka shows it: the peer's address with a leading slash."""
    peer = getattr(connection, "peer", "") or ""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host.strip("[]")


def _runtime(broker):
    """The coordinator runtime, creating __consumer_offsets first if needed."""
    if broker.coordinator is None or not broker.ensure_offsets_topic():
        raise CoordinatorNotAvailable("the offsets topic is not available")
    return broker.coordinator


async def run_group_op(broker, group_id: str, op):
    """Run ``op`` on the group's shard."""
    return await _runtime(broker).run(group_id, op)


# --- FindCoordinator ------------------------------------------------------------------------


def _coordinator(broker, connection, key: str, key_type: int):
    """(error, detail, (node id, host, port) of the coordinator)."""
    if key_type == GROUP_KEY_TYPE and not authz.allowed(broker, connection, authz.Op.DESCRIBE,
                                                         authz.GROUP, key):
        return ErrorCode.group_authorization_failed, None, None
    if key_type == TRANSACTION_KEY_TYPE and not authz.allowed(
            broker, connection, authz.Op.DESCRIBE, authz.TRANSACTIONAL_ID, key):
        return ErrorCode.transactional_id_authorization_failed, None, None
    code, detail = _coordinator_error(broker, key, key_type)
    if code != ErrorCode.none:
        return code, detail, None
    if broker.replicas is None:
        listener = broker.advertised_listener(connection)
        return code, None, (broker.broker_id, listener.host, listener.port)
    # A cluster: the leader of the key's partition of the coordinator's topic coordinates it.
    runtime = broker.coordinator if key_type == GROUP_KEY_TYPE else broker.txn_coordinator
    cache = broker.replicas.cache
    partition = runtime.partition_for(key)
    info = cache.partition(runtime.topic, partition)
    listener = broker.advertised_listener(connection)
    address = cache.endpoint(info.leader, listener.name) if info is not None and info.leader >= 0 else None
    if address is None:
        return (ErrorCode.coordinator_not_available,
                f"{runtime.topic}-{partition} has no leader reachable on {listener.name}", None)
    return ErrorCode.none, None, (info.leader, *address)


def _coordinator_error(broker, key: str, key_type: int) -> tuple[ErrorCode, str | None]:
    if key_type == TRANSACTION_KEY_TYPE:
        if broker.txn_coordinator is None or not broker.ensure_transaction_topic():
            return (ErrorCode.coordinator_not_available,
                    "the transaction state topic is not available")
        return ErrorCode.none, None
    if key_type != GROUP_KEY_TYPE:
        return ErrorCode.invalid_request, f"unsupported coordinator key type {key_type}"
    if broker.coordinator is None or not broker.ensure_offsets_topic():
        return ErrorCode.coordinator_not_available, "the offsets topic is not available"
    return ErrorCode.none, None


async def handle_find_coordinator(broker, request, connection):
    body, version = request.body, request.api_version
    key_type = getattr(body, "key_type", GROUP_KEY_TYPE)
    cls = response_class(FIND_COORDINATOR, version)

    def fields(code, node):
        node_id, host, port = node if node is not None else (-1, "", -1)
        return dict(node_id=node_id, host=host, port=port, error_code=code)

    if version < 4:
        code, detail, node = _coordinator(broker, connection, body.key, key_type)
        return make(cls, throttle_time=NO_THROTTLE, error_message=message(code, detail),
                    **fields(code, node))
    mod = response_module(FIND_COORDINATOR, version)
    coordinators = []
    for key in body.coordinator_keys:
        code, detail, node = _coordinator(broker, connection, key, key_type)
        coordinators.append(make(mod.Coordinator, key=key, error_message=message(code, detail),
                                 **fields(code, node)))
    return make(cls, throttle_time=NO_THROTTLE, coordinators=tuple(coordinators))


# --- JoinGroup ------------------------------------------------------------------------------


def topics_image(broker) -> dict[str, tuple[uuid.UUID, int]]:
    """The topics a consumer group may subscribe to: name -> (topic id, partition count),
    internal topics left out as Kafka leaves them out of subscriptions."""
    if broker.replicas is None:
        return {name: (tm.topic_id, tm.partitions) for name, tm in broker.metadata.topics.items()
                if not tm.internal and tm.partitions > 0}
    cache = broker.replicas.cache
    return {name: (cache.topic_ids[name], max(parts) + 1) for name, parts in cache.topics.items()
            if name in cache.topic_ids and parts and not name.startswith("__")}


async def handle_join_group(broker, request, connection):
    body, version = request.body, request.api_version
    session = ms(body.session_timeout)
    rebalance = ms(body.rebalance_timeout) if hasattr(body, "rebalance_timeout") else session
    req = classic.JoinGroup(
        group_id=body.group_id,
        member_id=body.member_id,
        protocol_type=body.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in body.protocols),
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        group_instance_id=getattr(body, "group_instance_id", None),
        client_id=request.client_id or "",
        client_host=client_host(connection),
        version=version,
        reason=getattr(body, "reason", None),
    )
    if not _may_read(broker, connection, body.group_id):
        resp = classic.JoinGroupResponse(error=ErrorCode.group_authorization_failed, member_id=body.member_id)
    elif not body.group_id:
        resp = classic.JoinGroupResponse(error=ErrorCode.invalid_group_id, member_id=body.member_id)
    else:
        try:
            resp = await run_group_op(broker, body.group_id,
                                      lambda shard, now: shard.join_group(
                                          req, now, lambda: topics_image(broker)))
        except CoordinatorError as exc:
            resp = classic.JoinGroupResponse(error=exc.code, member_id=body.member_id)
    mod = response_module(JOIN_GROUP, version)
    members = tuple(make(mod.JoinGroupResponseMember, member_id=m.member_id,
                         group_instance_id=m.group_instance_id, metadata=m.metadata)
                    for m in resp.members)
    protocol = resp.protocol if version >= 7 else (resp.protocol or "")
    return make(response_class(JOIN_GROUP, version), throttle_time=NO_THROTTLE,
                error_code=resp.error, generation_id=resp.generation,
                protocol_type=resp.protocol_type, protocol_name=protocol, leader=resp.leader,
                skip_assignment=getattr(resp, "skip_assignment", False), member_id=resp.member_id, members=members)


# --- SyncGroup ------------------------------------------------------------------------------


async def handle_sync_group(broker, request, connection):
    body, version = request.body, request.api_version
    req = classic.SyncGroup(
        group_id=body.group_id,
        member_id=body.member_id,
        generation=body.generation_id,
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in body.assignments),
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=getattr(body, "protocol_type", None),
        protocol=getattr(body, "protocol_name", None),
    )
    if not _may_read(broker, connection, body.group_id):
        resp = classic.SyncGroupResponse(error=ErrorCode.group_authorization_failed)
    elif not body.group_id:
        resp = classic.SyncGroupResponse(error=ErrorCode.invalid_group_id)
    else:
        try:
            resp = await run_group_op(broker, body.group_id,
                                      lambda shard, now: shard.sync_group(req, now))
        except CoordinatorError as exc:
            resp = classic.SyncGroupResponse(error=exc.code)
    return make(response_class(SYNC_GROUP, version), throttle_time=NO_THROTTLE,
                error_code=resp.error, protocol_type=resp.protocol_type,
                protocol_name=resp.protocol, assignment=resp.assignment)


# --- Heartbeat ------------------------------------------------------------------------------


async def handle_heartbeat(broker, request, connection):
    body, version = request.body, request.api_version
    req = classic.Heartbeat(group_id=body.group_id, member_id=body.member_id,
                            generation=body.generation_id,
                            group_instance_id=getattr(body, "group_instance_id", None))
    if not _may_read(broker, connection, body.group_id):
        code = ErrorCode.group_authorization_failed
    elif not body.group_id:
        code = ErrorCode.invalid_group_id
    else:
        try:
            resp = await run_group_op(broker, body.group_id,
                                      lambda shard, now: shard.heartbeat(req, now))
            code = resp.error
        except CoordinatorError as exc:
            code = exc.code
    frame = heartbeat_response(version, request.correlation_id, code)  # members send it often
    return RawResponse([frame], len(frame))


# --- LeaveGroup -----------------------------------------------------------------------------


async def handle_leave_group(broker, request, connection):
    body, version = request.body, request.api_version
    if version >= 3:
        leaving = tuple(classic.LeavingMember(m.member_id, m.group_instance_id,
                                                getattr(m, "reason", None))
                        for m in body.members)
    else:
        leaving = (classic.LeavingMember(body.member_id),)
    req = classic.LeaveGroup(group_id=body.group_id, members=leaving)
    if not _may_read(broker, connection, body.group_id):
        resp = classic.LeaveGroupResponse(ErrorCode.group_authorization_failed)
    elif not body.group_id:
        resp = classic.LeaveGroupResponse(ErrorCode.invalid_group_id)
    else:
        try:
            resp = await run_group_op(broker, body.group_id,
                                      lambda shard, now: shard.leave_group(req, now))
        except CoordinatorError as exc:
            resp = classic.LeaveGroupResponse(exc.code)
    cls = response_class(LEAVE_GROUP, version)
    if version < 3:
        code = resp.error
        if code == ErrorCode.none and resp.members:
            code = resp.members[0][2]
        return make(cls, throttle_time=NO_THROTTLE, error_code=code)
    mod = response_module(LEAVE_GROUP, version)
    members = tuple(make(mod.MemberResponse, member_id=mid, group_instance_id=iid, error_code=code)
                    for mid, iid, code in resp.members)
    return make(cls, throttle_time=NO_THROTTLE, error_code=resp.error, members=members)


# --- DescribeGroups -------------------------------------------------------------------------


def _described(d, mod):
    members = tuple(make(mod.DescribedGroupMember, member_id=m.member_id,
                         group_instance_id=m.group_instance_id, client_id=m.client_id,
                         client_host=m.client_host, member_metadata=m.metadata,
                         member_assignment=m.assignment) for m in d.members)
    return dict(group_state=d.state, protocol_type=d.protocol_type, protocol_data=d.protocol,
                members=members), d.error, d.message


async def read_group(broker, connection, group_id: str, fn) -> tuple[ErrorCode, object]:
    """A describe request's read of one group (DescribeGroups, ConsumerGroupDescribe): Group
    Describe, a group id, and ``fn(shard, now)`` on the group's shard; (NONE, its value) or
    (the error, None)."""
    if not authz.allowed(broker, connection, authz.Op.DESCRIBE, authz.GROUP, group_id):
        return ErrorCode.group_authorization_failed, None
    if not group_id:
        return ErrorCode.invalid_group_id, None
    try:
        if broker.coordinator is None:
            raise CoordinatorNotAvailable()
        return ErrorCode.none, await broker.coordinator.read(group_id, fn)
    except CoordinatorError as exc:
        return exc.code, None


async def handle_describe_groups(broker, request, connection):
    body, version = request.body, request.api_version
    mod = response_module(DESCRIBE_GROUPS, version)
    out = []
    include_ops = getattr(body, "include_authorized_operations", False)
    for group_id in body.groups:
        summary, text, ops = None, None, INT32_MIN
        code, described = await read_group(
            broker, connection, group_id, lambda shard, now: shard.describe_group(group_id))
        if code == ErrorCode.none:
            summary, code, text = _described(described, mod)
            if include_ops and code == ErrorCode.none:
                ops = authz.authorized_operations(broker, connection, authz.GROUP, group_id)
        if summary is None:
            summary = dict(group_state="", protocol_type="", protocol_data="", members=())
        out.append(make(mod.DescribedGroup, error_code=code, error_message=text, group_id=group_id,
                        authorized_operations=ops, **summary))
    return make(response_class(DESCRIBE_GROUPS, version), throttle_time=NO_THROTTLE,
                groups=tuple(out))


# --- ListGroups -----------------------------------------------------------------------------


async def handle_list_groups(broker, request, connection):
    body, version = request.body, request.api_version
    mod = response_module(LIST_GROUPS, version)
    states = {s.lower() for s in getattr(body, "states_filter", ())}
    types = {t.lower() for t in getattr(body, "types_filter", ())}
    code = ErrorCode.none
    groups = []
    runtime = broker.coordinator
    if types and not types & {"classic", "consumer"}:
        pass
    elif runtime is None or not runtime.started:
        code = ErrorCode.coordinator_not_available
    else:
        listed, loading = await runtime.read_all(lambda shard, now: shard.list_groups(states))
        if loading:
            code = ErrorCode.coordinator_load_in_progress
        groups = [make(mod.ListedGroup, group_id=g.group_id, protocol_type=g.protocol_type,
                       group_state=g.state, group_type=g.group_type)
                  for shard_groups in listed for g in shard_groups
                  if not types or g.group_type in types]
        if broker.authorizer is not None and not authz.cluster_allowed(broker, connection, authz.Op.DESCRIBE,
                                                                       log_denied=False):
            # without Cluster Describe, only the groups it may Describe (silently)
            may = authz.allowed_names(broker, connection, authz.Op.DESCRIBE, authz.GROUP,
                                      (g.group_id for g in groups), log_denied=False)
            groups = [g for g in groups if g.group_id in may]
    return make(response_class(LIST_GROUPS, version), throttle_time=NO_THROTTLE, error_code=code,
                groups=tuple(groups))


APIS = [
    Api(FIND_COORDINATOR, "FindCoordinator", 0, 6, handle_find_coordinator),
    Api(JOIN_GROUP, "JoinGroup", 0, 9, handle_join_group),
    Api(HEARTBEAT, "Heartbeat", 0, 4, handle_heartbeat),
    Api(LEAVE_GROUP, "LeaveGroup", 0, 5, handle_leave_group),
    Api(SYNC_GROUP, "SyncGroup", 0, 5, handle_sync_group),
    Api(DESCRIBE_GROUPS, "DescribeGroups", 0, 6, handle_describe_groups),
    Api(LIST_GROUPS, "ListGroups", 0, 5, handle_list_groups),
]
