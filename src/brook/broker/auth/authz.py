"""The handlers' one door to the authorizer: who is asking (the connection's principal and
address) and what a request may do. With no authorizer configured every check is one
attribute test, and everything is allowed, as in Kafka without authorizer.class.name."""

from __future__ import annotations

import logging

from ...security.acls import CLUSTER_NAME, SUPPORTED_OPERATIONS, Operation, ResourceType, bitfield

log = logging.getLogger("brook.authorizer")  # Kafka has kafka.authorizer.logger for this

ANONYMOUS = "User:ANONYMOUS"

Op = Operation
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                                           ResourceType.TRANSACTIONAL_ID)


def principal_of(connection) -> str:
    return getattr(connection, "principal", ANONYMOUS)


def host_of(connection) -> str:
    """The client's address as ACLs name hosts (no port, no brackets)."""
    peer = getattr(connection, "peer", "") or ""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return host.strip("[]")


def allowed(broker, connection, op: Operation, rtype: ResourceType, name: str, *,
            log_denied: bool = True) -> bool:
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    if getattr(connection, "peer_broker_id", None) is not None:
        return True  # a broker of this cluster (its inter-broker identity): a super user
    principal = principal_of(connection)
    if authorizer.authorize(principal, host_of(connection), op, rtype, name):
        return True
    if log_denied:
        log.info("Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s",
                 principal, op.name, host_of(connection), rtype.name, name)
    return False


def cluster_allowed(broker, connection, op: Operation, *, log_denied: bool = True) -> bool:
    return allowed(broker, connection, op, CLUSTER, CLUSTER_NAME, log_denied=log_denied)


def allowed_names(broker, connection, op: Operation, rtype: ResourceType, names, *,
                  log_denied: bool = True) -> set[str]:
    """The names among `names` the principal may `op` (each name decided once)."""
    unique = set(names)
    if broker.authorizer is None:
        return unique
    return {n for n in unique if allowed(broker, connection, op, rtype, n, log_denied=log_denied)}


def describable_topics(broker, connection, names, *, log_denied: bool = True) -> set[str]:
    """The topics among `names` the principal may Describe."""
    return allowed_names(broker, connection, Op.DESCRIBE, TOPIC, names, log_denied=log_denied)


def any_allowed(broker, connection, op: Operation, rtype: ResourceType) -> bool:
    """May the principal `op` some resource of the type (Kafka's authorizeByResourceType)?"""
    authorizer = broker.authorizer
    if authorizer is not None and getattr(connection, "peer_broker_id", None) is not None:
        return True
    return authorizer is None or authorizer.authorize_any(principal_of(connection), host_of(connection),
                                                          op, rtype)


def authorized_operations(broker, connection, rtype: ResourceType, name: str) -> int:
    """The bitfield of the operations the principal may perform on the resource; every
    operation the type has when there is no authorizer (as Kafka answers)."""
    authorizer = broker.authorizer
    if authorizer is None or getattr(connection, "peer_broker_id", None) is not None:
        return bitfield(SUPPORTED_OPERATIONS[rtype])
    return authorizer.authorized_operations(principal_of(connection), host_of(connection), rtype, name)


def may_create_topic(broker, connection, name: str) -> bool:
    """Cluster Create, or Create on the topic (CreateTopics, auto-creation)."""
    return (cluster_allowed(broker, connection, Op.CREATE, log_denied=False)
            or allowed(broker, connection, Op.CREATE, TOPIC, name))


def peer_broker(broker, connection) -> int | None:
    """Which broker of the cluster the connection is (brook.cluster.inter_broker_rules): the
    id it logged in as with the cluster's inter-broker identity; UNBOUND for a principal the
    operator made a broker's (with an authorizer, one allowed Cluster ClusterAction; without,
    this broker's own inter-broker SASL user); None for a client."""
    from ...cluster.inter_broker_rules import UNBOUND

    broker_id = getattr(connection, "peer_broker_id", None)
    if broker_id is not None:
        return broker_id
    if broker.authorizer is not None:
        return UNBOUND if cluster_allowed(broker, connection, Op.CLUSTER_ACTION) else None
    own = broker.config.inter_broker_sasl
    if own is not None and principal_of(connection) == f"User:{own.username}":
        return UNBOUND
    return None
