"""Consumer group APIs of KIP-848: ConsumerGroupHeartbeat and ConsumerGroupDescribe. They map
kio's entities to the consumer group protocol of the group's shard
(``brook.coordinator.group.consumer``), run it through the coordinator runtime, and map the
answer back. Topics are named by id in both: the handler gives the shard the broker's topics
(name, id, partition count) and names the ids in ConsumerGroupDescribe."""

from __future__ import annotations

import uuid
from datetime import timedelta

from kio.schema.errors import ErrorCode

from ...coordinator.common.runtime import CoordinatorError
from ...coordinator.group.consumer import ConsumerHeartbeat, ConsumerHeartbeatResponse
from ...coordinator.group.consumer_group import ConsumerGroup, by_topic
from ...protocol.messages import make, response_class, response_module
from ..auth import authz
from .api import Api
from .common import INT32_MIN, NO_THROTTLE, ms
from .groups import client_host, read_group, run_group_op, topics_image

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69


def _owned(topic_partitions) -> frozenset | None:
    if topic_partitions is None:
        return None
    return frozenset((tp.topic_id, p) for tp in topic_partitions for p in tp.partitions)


async def handle_heartbeat(broker, request, connection):
    body, version = request.body, request.api_version
    req = ConsumerHeartbeat(
        group_id=body.group_id, member_id=body.member_id, member_epoch=body.member_epoch,
        instance_id=body.instance_id, rack_id=body.rack_id,
        rebalance_timeout_ms=ms(body.rebalance_timeout),
        subscribed_topic_names=(None if body.subscribed_topic_names is None
                                else tuple(body.subscribed_topic_names)),
        subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
        server_assignor=body.server_assignor, owned=_owned(body.topic_partitions),
        client_id=request.client_id or "", client_host=client_host(connection))
    if version >= 1 and not body.member_id:
        resp = ConsumerHeartbeatResponse(ErrorCode.invalid_request,
                                         "MemberId can't be empty.")
    elif not _may_read(broker, connection, body.group_id):
        resp = ConsumerHeartbeatResponse(ErrorCode.group_authorization_failed)
    elif not _may_describe_all(broker, connection, req.subscribed_topic_names):
        resp = ConsumerHeartbeatResponse(ErrorCode.topic_authorization_failed)
    elif req.subscribed_topic_regex is not None and not _may_describe_topics(broker, connection):
        resp = ConsumerHeartbeatResponse(ErrorCode.topic_authorization_failed)
    else:
        topics = topics_image(broker)
        try:
            resp = await run_group_op(
                broker, body.group_id,
                lambda shard, now: shard.consumer_group_heartbeat(req, topics, now))
        except CoordinatorError as exc:
            resp = ConsumerHeartbeatResponse(exc.code)
    mod = response_module(CONSUMER_GROUP_HEARTBEAT, version)
    assignment = None
    if resp.assignment is not None:
        assignment = make(mod.Assignment, topic_partitions=tuple(
            make(mod.TopicPartitions, topic_id=t, partitions=ps) for t, ps in resp.assignment))
    return make(response_class(CONSUMER_GROUP_HEARTBEAT, version), throttle_time=NO_THROTTLE,
                error_code=resp.error, error_message=resp.message, member_id=resp.member_id,
                member_epoch=resp.member_epoch,
                heartbeat_interval=timedelta(milliseconds=resp.heartbeat_interval_ms),
                assignment=assignment)


def _may_read(broker, connection, group_id: str) -> bool:
    return broker.authorizer is None or authz.allowed(broker, connection, authz.Op.READ,
                                                      authz.GROUP, group_id)


def _may_describe_all(broker, connection, names) -> bool:
    """Kafka 4 refuses a subscription to topics the member may not Describe."""
    if broker.authorizer is None or not names:
        return True
    return len(authz.describable_topics(broker, connection, set(names))) == len(set(names))


def _may_describe_topics(broker, connection) -> bool:
    """A regex subscription needs Describe on the topics it may match (Kafka checks the
    topics the regex resolves to; brook asks for Cluster Describe or no authorizer)."""
    return broker.authorizer is None or authz.cluster_allowed(broker, connection,
                                                              authz.Op.DESCRIBE,
                                                              log_denied=False)


# --- ConsumerGroupDescribe ------------------------------------------------------------------


def _described(group: ConsumerGroup, assignor: str, mod, names: dict[uuid.UUID, str],
               version: int) -> dict:
    def assignment(partitions):
        return make(mod.Assignment, topic_partitions=tuple(
            make(mod.TopicPartitions, topic_id=t, topic_name=names.get(t, ""), partitions=ps)
            for t, ps in by_topic(partitions)))

    members = []
    for m in group.members.values():
        # MemberType (v1): 0 a classic member (JoinGroup) inside the group, 1 a consumer one
        extra = {"member_type": 0 if m.classic is not None else 1} if version >= 1 else {}
        members.append(make(
            mod.Member, member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
            member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=m.subscribed_topic_names,
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=assignment(m.assignment.assigned),
            target_assignment=assignment(group.target.get(m.member_id, frozenset())), **extra))
    return dict(group_state=str(group.state), group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch, assignor_name=assignor,
                members=tuple(members))


async def handle_describe(broker, request, connection):
    body, version = request.body, request.api_version
    mod = response_module(CONSUMER_GROUP_DESCRIBE, version)
    names = {t: n for n, (t, _) in topics_image(broker).items()}
    out = []
    for group_id in body.group_ids:
        message, ops = None, INT32_MIN
        code, summary = await read_group(
            broker, connection, group_id,
            lambda shard, now: _describe_on(shard, group_id, mod, names, version))
        if code == ErrorCode.none:
            if summary is None:
                code = ErrorCode.group_id_not_found
                message = f"Group {group_id} not found."
            elif body.include_authorized_operations:
                ops = authz.authorized_operations(broker, connection, authz.GROUP, group_id)
        if summary is None:
            summary = dict(group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="",
                           members=())
        out.append(make(mod.DescribedGroup, error_code=code, error_message=message,
                        group_id=group_id, authorized_operations=ops, **summary))
    return make(response_class(CONSUMER_GROUP_DESCRIBE, version), throttle_time=NO_THROTTLE,
                groups=tuple(out))


def _describe_on(shard, group_id: str, mod, names, version: int) -> dict | None:
    group = shard.consumer_groups().get(group_id)
    if group is None:
        return None
    return _described(group, shard.consumer.assignor_of(group), mod, names, version)


APIS = [
    Api(CONSUMER_GROUP_HEARTBEAT, "ConsumerGroupHeartbeat", 0, 1, handle_heartbeat),
    Api(CONSUMER_GROUP_DESCRIBE, "ConsumerGroupDescribe", 0, 1, handle_describe),
]
