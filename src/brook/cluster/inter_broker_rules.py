"""Who may send the requests brokers send each other, and with which epochs: the pure rules
(the handlers in brook.broker.handlers.replication and .fetch supply what they check against).

A connection is a broker's only if it proved it (`peer`):

- the broker id it logged in as with the cluster's inter-broker identity
  (brook.security.broker_identity), or
- UNBOUND: a principal the operator made a broker's (with an authorizer, one allowed Cluster
  ClusterAction; without one, this broker's own inter-broker SASL user), which names no id;
- None: a client. Clients get CLUSTER_AUTHORIZATION_FAILED for the controller's requests,
  ControlledShutdown and AlterPartition, and TOPIC_AUTHORIZATION_FAILED for each partition of
  a follower's Fetch: Kafka's answers to a principal without ClusterAction.

Then the epochs, checked against ZooKeeper rather than believed: a controller request must
come from the controller ZooKeeper names, at the epoch ZooKeeper holds, addressed to this
broker's own registration (its broker epoch, the czxid of /brokers/ids/<id>); a follower or
a leader asking for an ISR change must be a registered broker, the one it logged in as.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

UNBOUND = -1  # a broker's principal that names no broker id


class Verdict(enum.Enum):
    OK = "ok"
    ASK_ZOOKEEPER = "ask ZooKeeper"  # newer than this broker knows: believed only if ZooKeeper agrees


@dataclass(frozen=True, slots=True)
class Refusal:
    code: ErrorCode
    reason: str  # for the log line


def _not_a_broker(what: str) -> Refusal:
    return Refusal(ErrorCode.cluster_authorization_failed, f"{what} from a connection that is not a broker's")


def claims(peer: int | None, broker_id: int, what: str) -> Refusal | None:
    """A broker id a request names must be the one its connection logged in as."""
    if peer is None:
        return _not_a_broker(what)
    if peer != UNBOUND and peer != broker_id:
        return Refusal(ErrorCode.cluster_authorization_failed,
                       f"{what} naming broker {broker_id} from a connection of broker {peer}")
    return None


def controller_request(peer: int | None, controller_id: int, controller_epoch: int, *,
                       known_controller: int, known_epoch: int, what: str) -> Verdict | Refusal:
    """LeaderAndIsr, UpdateMetadata, StopReplica: from the controller this broker has
    verified (`known_controller` at `known_epoch`, -1 before the first), or from one with a
    newer epoch, to be verified with ZooKeeper (`controller_from_zookeeper`)."""
    refused = claims(peer, controller_id, what)
    if refused is not None:
        return refused
    if controller_epoch < known_epoch:
        return Refusal(ErrorCode.stale_controller_epoch,
                       f"{what} of controller {controller_id} at epoch {controller_epoch}: "
                       f"epoch {known_epoch} is newer")
    if controller_epoch == known_epoch:
        if controller_id != known_controller:
            return Refusal(ErrorCode.stale_controller_epoch,
                           f"{what} of broker {controller_id} at epoch {controller_epoch}: broker "
                           f"{known_controller} is the controller of that epoch")
        return Verdict.OK
    return Verdict.ASK_ZOOKEEPER


def controller_from_zookeeper(controller_id: int, controller_epoch: int, zk_controller: int,
                              zk_epoch: int, what: str) -> Refusal | None:
    """A newer controller epoch than this broker knew is believed if ZooKeeper holds it, with
    the sender as /controller (the controller writes both before it sends anything)."""
    if (controller_id, controller_epoch) == (zk_controller, zk_epoch):
        return None
    return Refusal(ErrorCode.stale_controller_epoch,
                   f"{what} of broker {controller_id} at controller epoch {controller_epoch}, but "
                   f"ZooKeeper names broker {zk_controller} at epoch {zk_epoch}")


def broker_epoch(request_epoch: int, own_epoch: int, what: str) -> Verdict | Refusal:
    """A controller request is addressed to one registration of this broker (Kafka's
    STALE_BROKER_EPOCH for an older one). A newer one than this broker knows can only be a
    registration it made a moment ago: ZooKeeper is asked."""
    if request_epoch == own_epoch:
        return Verdict.OK
    if request_epoch > own_epoch:
        return Verdict.ASK_ZOOKEEPER
    return Refusal(ErrorCode.stale_broker_epoch,
                   f"{what} for broker epoch {request_epoch}: this broker's is {own_epoch}")


def registered_broker(peer: int | None, broker_id: int, epoch: int, live: dict[int, int], what: str,
                      unknown: ErrorCode = ErrorCode.stale_broker_epoch) -> Refusal | None:
    """ControlledShutdown and AlterPartition at the controller: from the broker the request
    names, registered (`live`: broker id -> broker epoch; else `unknown`, Kafka's answer for
    each), at its current broker epoch."""
    refused = claims(peer, broker_id, what)
    if refused is not None:
        return refused
    if broker_id not in live:
        return Refusal(unknown, f"{what} of broker {broker_id}, which is not registered")
    if epoch != live[broker_id]:
        return Refusal(ErrorCode.stale_broker_epoch,
                       f"{what} of broker {broker_id} at broker epoch {epoch}: its registration's "
                       f"is {live[broker_id]}")
    return None


def follower(peer: int | None, replica_id: int, live_ids, what: str = "a follower's Fetch") -> Refusal | None:
    """A Fetch with a replica id moves the high watermark and the ISR: only a registered
    broker may send one, as itself."""
    refused = claims(peer, replica_id, what)
    if refused is not None:
        return Refusal(ErrorCode.topic_authorization_failed, refused.reason)
    if live_ids is not None and replica_id not in live_ids:
        return Refusal(ErrorCode.topic_authorization_failed,
                       f"{what} as broker {replica_id}, which is not registered")
    return None


def txn_markers(peer: int | None, *, cluster: bool, authorizer: bool, may_alter_cluster: bool,
                what: str = "WriteTxnMarkers") -> Refusal | None:
    """WriteTxnMarkers commits or aborts transactions on a partition: from a transaction
    coordinator, i.e. a broker of the cluster (`peer`: with an authorizer, any principal
    allowed Cluster ClusterAction), or, as Kafka allows, a principal allowed Cluster Alter
    (an operator aborting a hanging transaction, KIP-664). On a single node without an
    authorizer anyone may, as with Kafka without one; a cluster without one keeps it to its
    brokers, as it keeps the other requests brokers send each other."""
    if peer is not None or (authorizer and may_alter_cluster) or not (cluster or authorizer):
        return None
    return _not_a_broker(what)
