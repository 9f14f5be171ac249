"""The requests of replication in a cluster: the controller's LeaderAndIsr, UpdateMetadata and
StopReplica to brokers; a stopping broker's ControlledShutdown and a leader's AlterPartition
to the controller; and OffsetForLeaderEpoch, which followers (and clients checking for
truncation, KIP-320) send to a partition's leader.

The inter-broker requests are taken only from connections that proved to be a broker's, with
the epochs ZooKeeper holds (brook.cluster.inter_broker_rules); anyone else is answered
CLUSTER_AUTHORIZATION_FAILED and nothing is done. On a single node they are refused."""

from __future__ import annotations

import logging
import time

from kio.schema.errors import ErrorCode

from ...cluster import inter_broker_rules as rules
from ...protocol import inter_broker as ib
from ...protocol.messages import make, response_class, response_module
from ...storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from ..auth import authz
from .api import Api
from .common import NO_THROTTLE, CloseConnection

log = logging.getLogger(__name__)

OFFSET_FOR_LEADER_EPOCH = 23
ALTER_PARTITION = 56


class RefusalLog:
    """One log line per refused request, at most one a `every_s` seconds (a client sending
    them in a loop must not fill the log); the next line counts the ones left out."""

    def __init__(self, every_s: float = 1.0) -> None:
        self.every_s = every_s
        self._last = float("-inf")
        self._left_out = 0

    def __call__(self, connection, refusal: rules.Refusal) -> ErrorCode:
        now = time.monotonic()
        if now - self._last < self.every_s:
            self._left_out += 1
        else:
            more = f" ({self._left_out} more refused since the last line)" if self._left_out else ""
            log.warning("refused %s, answered %s: from %s (%s) on listener %s%s", refusal.reason,
                        refusal.code.name.upper(), getattr(connection, "peer", "?"),
                        authz.principal_of(connection), getattr(connection, "listener_name", "?"), more)
            self._last, self._left_out = now, 0
        return refusal.code


refused = RefusalLog()


def _not_a_broker(connection, what: str) -> ErrorCode:
    return refused(connection, rules.claims(None, -1, what))


async def _from_controller(broker, request, connection) -> ErrorCode:
    """NONE if the request comes from the controller ZooKeeper names, at its epoch, for this
    broker's registration; else the refusal (logged)."""
    what = type(request.body).__name__.removesuffix("Request")
    peer = authz.peer_broker(broker, connection)
    if peer is None:
        return _not_a_broker(connection, what)
    replicas = broker.replicas
    if replicas is None:
        return ErrorCode.invalid_request  # not a cluster
    body = request.body
    cluster = broker.cluster
    verdict = rules.controller_request(peer, body.controller_id, body.controller_epoch,
                                       known_controller=replicas.controller_id,
                                       known_epoch=replicas.controller_epoch, what=what)
    if isinstance(verdict, rules.Refusal):
        return refused(connection, verdict)
    if verdict is rules.Verdict.ASK_ZOOKEEPER:
        zk_controller, zk_epoch = await _zookeeper(cluster.controller_in_zookeeper(), what)
        refusal = rules.controller_from_zookeeper(body.controller_id, body.controller_epoch,
                                                  zk_controller, zk_epoch, what)
        if refusal is not None:
            return refused(connection, refusal)
    verdict = rules.broker_epoch(body.broker_epoch, cluster.broker_epoch, what)
    if isinstance(verdict, rules.Refusal):
        return refused(connection, verdict)
    if verdict is rules.Verdict.ASK_ZOOKEEPER:
        own = await _zookeeper(cluster.own_epoch_in_zookeeper(), what)
        if own != body.broker_epoch:
            return refused(connection, rules.Refusal(
                ErrorCode.stale_broker_epoch, f"{what} for broker epoch {body.broker_epoch}: "
                f"ZooKeeper's registration of this broker has {own}"))
    if body.controller_epoch < replicas.controller_epoch:  # a newer one came while ZooKeeper answered
        return refused(connection, rules.Refusal(
            ErrorCode.stale_controller_epoch, f"{what} of controller epoch {body.controller_epoch}: "
            f"epoch {replicas.controller_epoch} is newer"))
    replicas.controller_id, replicas.controller_epoch = body.controller_id, body.controller_epoch
    return ErrorCode.none


async def _zookeeper(read, what: str):
    """A ZooKeeper read a check needs; when it fails the connection is closed unanswered, so
    that the controller sends the request again rather than take a refusal."""
    from ...cluster.zk_client import TRANSIENT_ERRORS
    try:
        return await read
    except TRANSIENT_ERRORS as exc:
        log.warning("closing the connection that sent %s unanswered: ZooKeeper could not be read "
                    "to check it (%s); the controller sends it again", what, type(exc).__name__)
        raise CloseConnection(f"cannot check {what} against ZooKeeper") from None


async def handle_leader_and_isr(broker, request, connection):
    code = await _from_controller(broker, request, connection)
    topics = []
    if code == ErrorCode.none:
        code, results = await broker.replicas.leader_and_isr(request.body)
        topics = [ib.LeaderAndIsrTopicError(topic_id=topic_id, partition_errors=tuple(
            ib.LeaderAndIsrPartitionError(partition_index=p, error_code=e) for p, e in errors))
            for _, topic_id, errors in results]
    return ib.LeaderAndIsrResponse(error_code=code, topics=tuple(topics))


async def handle_update_metadata(broker, request, connection):
    code = await _from_controller(broker, request, connection)
    if code == ErrorCode.none:
        code = broker.replicas.update_metadata(request.body)
    return ib.UpdateMetadataResponse(error_code=code)


async def handle_stop_replica(broker, request, connection):
    code = await _from_controller(broker, request, connection)
    errors = []
    if code == ErrorCode.none:
        for ts in request.body.topic_states:
            for ps in ts.partition_states:
                errors.append(ib.StopReplicaPartitionError(
                    topic_name=ts.topic_name, partition_index=ps.partition_index,
                    error_code=broker.replicas.stop_replica(ts.topic_name, ps.partition_index,
                                                            ps.delete_partition)))
    return ib.StopReplicaResponse(error_code=code, partition_errors=tuple(errors))


def _from_registered_broker(broker, connection, controller, broker_id: int, broker_epoch: int,
                            what: str, unknown: ErrorCode = ErrorCode.stale_broker_epoch) -> ErrorCode:
    refusal = rules.registered_broker(authz.peer_broker(broker, connection), broker_id, broker_epoch,
                                      {b: live.epoch for b, live in controller.live.items()}, what, unknown)
    return ErrorCode.none if refusal is None else refused(connection, refusal)


async def handle_controlled_shutdown(broker, request, connection):
    if authz.peer_broker(broker, connection) is None:
        return ib.ControlledShutdownResponse(error_code=_not_a_broker(connection, "ControlledShutdown"),
                                             remaining_partitions=())
    cluster = broker.cluster
    controller = cluster.controller if cluster is not None else None
    if controller is None:
        return ib.ControlledShutdownResponse(error_code=ErrorCode.not_controller, remaining_partitions=())
    body = request.body
    code = _from_registered_broker(broker, connection, controller, body.broker_id, body.broker_epoch,
                                   "ControlledShutdown", ErrorCode.broker_not_available)
    if code != ErrorCode.none:
        return ib.ControlledShutdownResponse(error_code=code, remaining_partitions=())
    remaining = await controller.controlled_shutdown(body.broker_id)
    return ib.ControlledShutdownResponse(
        error_code=ErrorCode.none,
        remaining_partitions=tuple(ib.RemainingPartition(topic_name=t, partition_index=p)
                                   for t, p in remaining))


async def handle_alter_partition(broker, request, connection):
    version = request.api_version
    mod = response_module(ALTER_PARTITION, version)
    cls = response_class(ALTER_PARTITION, version)
    if authz.peer_broker(broker, connection) is None:
        return make(cls, throttle_time=NO_THROTTLE, error_code=_not_a_broker(connection, "AlterPartition"),
                    topics=())
    cluster = broker.cluster
    controller = cluster.controller if cluster is not None else None
    if controller is None:
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.not_controller, topics=())
    body = request.body
    code = _from_registered_broker(broker, connection, controller, body.broker_id, body.broker_epoch,
                                   "AlterPartition")
    if code != ErrorCode.none:
        return make(cls, throttle_time=NO_THROTTLE, error_code=code, topics=())
    by_id = {}
    from ...controller.controller import topic_uuid
    for name, a in controller.assignments.items():
        tid = topic_uuid(a.topic_id)
        if tid is not None:
            by_id[tid] = name
    topics = []
    for t in body.topics:
        name = by_id.get(t.topic_id)
        parts = []
        for pd in t.partitions:
            if name is None:
                code, state = ErrorCode.unknown_topic_id, None
            else:
                code, state = await controller.alter_partition(
                    body.broker_id, name, pd.partition_index, pd.leader_epoch, tuple(pd.new_isr),
                    pd.partition_epoch)
            parts.append(make(mod.PartitionData, partition_index=pd.partition_index, error_code=code,
                              leader_id=state.leader if state else -1,
                              leader_epoch=state.leader_epoch if state else -1,
                              isr=state.isr if state else (), leader_recovery_state=0,
                              partition_epoch=state.zk_version if state else -1))
        topics.append(make(mod.TopicData, topic_id=t.topic_id, partitions=tuple(parts)))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, topics=tuple(topics))


async def handle_offset_for_leader_epoch(broker, request, connection):
    """Where a leader epoch ends in this leader's log (the start of the next epoch it has, or
    its log end for its latest), for followers truncating and clients checking (KIP-320).
    On a single node every partition is led at epoch 0 from its first offset."""
    version = request.api_version
    mod = response_module(OFFSET_FOR_LEADER_EPOCH, version)
    body = request.body
    topics = []
    may = None  # brokers may ask of every topic, clients of those they may Describe
    if broker.authorizer is not None and not authz.cluster_allowed(broker, connection, authz.Op.CLUSTER_ACTION,
                                                                   log_denied=False):
        may = authz.describable_topics(broker, connection, (t.topic for t in body.topics))
    for t in body.topics:
        parts = []
        for pr in t.partitions:
            p = broker.partition(t.topic, pr.partition)
            epoch, end = UNDEFINED_EPOCH, UNDEFINED_OFFSET
            if may is not None and t.topic not in may:
                code = ErrorCode.topic_authorization_failed
            elif broker.replicas is not None:
                code = broker.replicas.leader_error(p, getattr(pr, "current_leader_epoch", -1))
            else:
                code = ErrorCode.unknown_topic_or_partition if p is None else ErrorCode.none
            if code == ErrorCode.none:
                if broker.replicas is None:
                    epoch, end = (0, p.high_watermark) if pr.leader_epoch >= 0 else (UNDEFINED_EPOCH,
                                                                                    UNDEFINED_OFFSET)
                else:
                    # From the log, for clients too (as Kafka): a new leader's high watermark
                    # can lag records its consumers have read, which are no truncation.
                    epoch, end = p.log.epoch_cache.end_offset_for(pr.leader_epoch, p.log_end_offset)
            parts.append(make(mod.EpochEndOffset, error_code=code, partition=pr.partition,
                              leader_epoch=epoch, end_offset=end))
        topics.append(make(mod.OffsetForLeaderTopicResult, topic=t.topic, partitions=tuple(parts)))
    return make(response_class(OFFSET_FOR_LEADER_EPOCH, version), throttle_time=NO_THROTTLE,
                topics=tuple(topics))


ELECT_LEADERS = 43


async def handle_elect_leaders(broker, request, connection):
    """ElectLeaders (KIP-460): preferred or unclean elections, by the controller (clients
    send it to Metadata's controller; any other broker answers NOT_CONTROLLER)."""
    version = request.api_version
    mod = response_module(ELECT_LEADERS, version)
    cls = response_class(ELECT_LEADERS, version)
    body = request.body
    cluster = broker.cluster
    controller = cluster.controller if cluster is not None else None
    wanted = None if body.topic_partitions is None else [
        (t.topic, p) for t in body.topic_partitions for p in t.partitions]
    election_type = getattr(body, "election_type", 0)
    if broker.authorizer is not None and not authz.cluster_allowed(broker, connection, authz.Op.ALTER):
        code = ErrorCode.cluster_authorization_failed
        results = {tp: (code, None) for tp in wanted or []}
        top = code
    elif controller is None:
        code = ErrorCode.not_controller if cluster is not None else ErrorCode.invalid_request
        results = {tp: (code, None) for tp in wanted or []}
        top = ErrorCode.none if wanted else code
    else:
        results = await controller.elect_leaders(wanted, election_type)
        top = ErrorCode.none
    by_topic: dict[str, list] = {}
    for (topic, p), (code, text) in sorted(results.items()):
        if wanted is None and code == ErrorCode.election_not_needed:
            continue  # an election of everything lists only what it changed or could not
        by_topic.setdefault(topic, []).append(make(mod.PartitionResult, partition_id=p,
                                                   error_code=code, error_message=text))
    return make(cls, throttle_time=NO_THROTTLE, error_code=top, replica_election_results=tuple(
        make(mod.ReplicaElectionResult, topic=t, partition_result=tuple(ps))
        for t, ps in by_topic.items()))


ALTER_REASSIGNMENTS = 45
LIST_REASSIGNMENTS = 46


def _controller_or_error(broker):
    cluster = broker.cluster
    controller = cluster.controller if cluster is not None else None
    if controller is not None:
        return controller, ErrorCode.none
    return None, ErrorCode.not_controller if cluster is not None else ErrorCode.invalid_request


async def handle_alter_reassignments(broker, request, connection):
    """AlterPartitionReassignments (KIP-455), by the controller."""
    version = request.api_version
    mod = response_module(ALTER_REASSIGNMENTS, version)
    cls = response_class(ALTER_REASSIGNMENTS, version)
    controller, code = _controller_or_error(broker)
    if broker.authorizer is not None and not authz.cluster_allowed(broker, connection, authz.Op.ALTER):
        controller, code = None, ErrorCode.cluster_authorization_failed
    if controller is None:
        return make(cls, throttle_time=NO_THROTTLE, error_code=code, error_message=None, responses=())
    wanted = {(t.name, p.partition_index): None if p.replicas is None else tuple(p.replicas)
              for t in request.body.topics for p in t.partitions}
    results = await controller.alter_reassignments(wanted)
    by_topic: dict[str, list] = {}
    for (topic, p), (c, text) in results.items():
        by_topic.setdefault(topic, []).append(make(mod.ReassignablePartitionResponse,
                                                   partition_index=p, error_code=c, error_message=text))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                responses=tuple(make(mod.ReassignableTopicResponse, name=t, partitions=tuple(ps))
                                for t, ps in by_topic.items()))


async def handle_list_reassignments(broker, request, connection):
    version = request.api_version
    mod = response_module(LIST_REASSIGNMENTS, version)
    cls = response_class(LIST_REASSIGNMENTS, version)
    controller, code = _controller_or_error(broker)
    if broker.authorizer is not None and not authz.cluster_allowed(broker, connection, authz.Op.DESCRIBE):
        controller, code = None, ErrorCode.cluster_authorization_failed
    if controller is None:
        return make(cls, throttle_time=NO_THROTTLE, error_code=code, error_message=None, topics=())
    ongoing = controller.ongoing_reassignments()
    asked = request.body.topics
    if asked is not None:
        keep = {(t.name, p) for t in asked for p in t.partition_indexes}
        ongoing = {tp: m for tp, m in ongoing.items() if tp in keep}
    by_topic: dict[str, list] = {}
    for (topic, p), m in sorted(ongoing.items()):
        by_topic.setdefault(topic, []).append(make(
            mod.OngoingPartitionReassignment, partition_index=p, replicas=m.replicas,
            adding_replicas=m.adding, removing_replicas=m.removing))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                topics=tuple(make(mod.OngoingTopicReassignment, name=t, partitions=tuple(ps))
                             for t, ps in by_topic.items()))


APIS = [
    Api(ELECT_LEADERS, "ElectLeaders", 0, 2, handle_elect_leaders),
    Api(ALTER_REASSIGNMENTS, "AlterPartitionReassignments", 0, 0, handle_alter_reassignments),
    Api(LIST_REASSIGNMENTS, "ListPartitionReassignments", 0, 0, handle_list_reassignments),
    Api(ib.LEADER_AND_ISR, "LeaderAndIsr", 5, 5, handle_leader_and_isr),
    Api(ib.STOP_REPLICA, "StopReplica", 3, 3, handle_stop_replica),
    Api(ib.UPDATE_METADATA, "UpdateMetadata", 7, 7, handle_update_metadata),
    Api(ib.CONTROLLED_SHUTDOWN, "ControlledShutdown", 3, 3, handle_controlled_shutdown),
    Api(OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpoch", 0, 4, handle_offset_for_leader_epoch),
    Api(ALTER_PARTITION, "AlterPartition", 2, 2, handle_alter_partition),
]
