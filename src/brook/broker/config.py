"""Broker configuration from Kafka's server.properties keys.

Only keys brook acts on are read here; log defaults (`log.*`) go to `LogConfig`, the log
manager's intervals to `ManagerConfig`. Unknown keys are kept (and shown by
DescribeConfigs) but otherwise ignored, as Kafka ignores keys it does not know.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..security.client import ClientCredentials
from ..security.listeners import (
    DEFAULT_PROTOCOL_MAP,
    ListenerSecurity,
    SecurityConfigError,
    inter_broker_credentials,
    listener_security,
    parse_protocol_map,
)
from ..security.acls import parse_super_users
from ..security.tls import TlsConfigError, client_context
from ..storage.config import LogConfig
from ..storage.manager import ManagerConfig
from .quotas.producer_id_quota import DEFAULT_PRODUCER_IDS_RATE
from ..properties import parse_properties

DEFAULT_LISTENER = "PLAINTEXT://127.0.0.1:9092"

#: authorizer.class.name values that switch on brook's ACL authorizer (Kafka's own classes,
#: so an existing server.properties works unchanged).
ACL_AUTHORIZERS = ("kafka.security.authorizer.AclAuthorizer",
                   "org.apache.kafka.metadata.authorizer.StandardAuthorizer")


class ConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int

    @classmethod
    def parse(cls, spec: str) -> "Listener":
        name, sep, rest = spec.strip().partition("://")
        if not sep:
            raise ConfigError(f"listener {spec!r} is not NAME://host:port")
        parts = urlsplit("//" + rest)
        try:
            port = parts.port
        except ValueError as exc:
            raise ConfigError(f"listener {spec!r}: {exc}") from None
        if port is None:
            raise ConfigError(f"listener {spec!r} has no port")
        return cls(name.upper(), parts.hostname or "", port)


def _listener_security(props: dict[str, str], listeners) -> dict[str, ListenerSecurity]:
    try:
        protocols = parse_protocol_map(props.get("listener.security.protocol.map", DEFAULT_PROTOCOL_MAP))
        return {l.name: listener_security(props, l.name, protocols) for l in listeners}
    except SecurityConfigError as exc:
        raise ConfigError(str(exc)) from None


def _per_ip_overrides(v: str) -> tuple[tuple[str, int], ...]:
    out = []
    for item in (i.strip() for i in str(v).split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ConfigError(f"{item!r} is not host:count")
        out.append((host.strip().strip("[]"), int(count)))
    return tuple(out)


def _authorizer(v: str) -> bool:
    name = v.strip()
    if name and name not in ACL_AUTHORIZERS:
        raise ValueError(f"brook's authorizer is selected by {' or '.join(ACL_AUTHORIZERS)}")
    return bool(name)


_ASSIGNOR_CLASSES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
                     "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}


def _assignor_names(v: str) -> tuple[str, ...]:
    """group.consumer.assignors: names (uniform, range) or Kafka's class names of them."""
    names = tuple(_ASSIGNOR_CLASSES.get(n.strip(), n.strip()) for n in v.split(",") if n.strip())
    unknown = [n for n in names if n not in ("uniform", "range")]
    if unknown or not names:
        raise ValueError(f"unknown assignors {unknown or names}: uniform and range are served")
    return names


def _migration_policy(v: str) -> str:
    """group.consumer.migration.policy, case-insensitive as Kafka reads it."""
    policy = v.strip().lower()
    if policy not in ("bidirectional", "upgrade", "downgrade", "disabled"):
        raise ValueError("one of bidirectional, upgrade, downgrade, disabled")
    return policy


def _bool(v: str) -> bool:
    v = str(v).strip().lower()
    if v not in ("true", "false"):
        raise ConfigError(f"{v!r} is not true or false")
    return v == "true"


def _check_cluster_config(cfg: "BrokerConfig") -> None:
    from ..cluster.zk_paths import ConnectStringError, parse_connect

    try:
        parse_connect(cfg.zookeeper_connect)
    except ConnectStringError as exc:
        raise ConfigError(str(exc)) from None
    if "broker.id" not in cfg.props and "node.id" not in cfg.props:
        # Kafka would generate one from /brokers/seqid; brook asks for it instead, since two
        # brokers on the default id would refuse each other.
        raise ConfigError("zookeeper.connect is set but broker.id is not: each broker of a cluster "
                          "needs its own broker.id")
    if cfg.broker_id < 0:
        raise ConfigError(f"broker.id={cfg.broker_id} must be 0 or more")
    if cfg.zookeeper_session_timeout_ms < 1 or cfg.zookeeper_connection_timeout_ms < 1:
        raise ConfigError("zookeeper.session.timeout.ms and zookeeper.connection.timeout.ms must "
                          "be at least 1")
    names = [l.name for l in cfg.advertised]
    for key, name in (("inter.broker.listener.name", cfg.inter_broker_listener_name),
                      ("control.plane.listener.name", cfg.control_plane_listener_name)):
        if name is not None and name not in names:
            raise ConfigError(f"{key}={name} must be a listener name defined in advertised.listeners "
                              f"(or listeners): {', '.join(names)}")
    control = cfg.control_plane_listener_name
    if control is not None and control == (cfg.inter_broker_listener_name or names[0]):
        raise ConfigError(f"control.plane.listener.name, when defined, must differ from the "
                          f"inter-broker listener name; both are {control}")


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    props: dict[str, str] = field(default_factory=dict)
    broker_id: int = 1
    listeners: tuple[Listener, ...] = (Listener.parse(DEFAULT_LISTENER),)
    advertised_listeners: tuple[Listener, ...] = ()
    log_dirs: tuple[str, ...] = ("./data",)
    num_partitions: int = 1
    # Partitions one CreateTopics (all its topics) or CreatePartitions may add (the limit
    # Kafka's controller hard-codes), and partitions this broker may hold (KIP-578's name).
    max_partitions_per_request: int = 10_000
    max_broker_partitions: int = 100_000
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    socket_request_max_bytes: int = 100 * 1024 * 1024
    message_max_bytes: int = 1024 * 1024 + 12
    replica_fetch_max_bytes: int = 1024 * 1024
    fetch_max_bytes: int = 55 * 1024 * 1024
    producer_id_expiration_ms: int = 86_400_000
    # InitProducerId per second per client id and per address (KIP-936's producer_ids_rate).
    producer_ids_rate: float = DEFAULT_PRODUCER_IDS_RATE
    # Client quotas' windowed rate (brook.broker.quotas.client_quotas): samples, and each one's seconds.
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    connections_max_idle_ms: int = 600_000
    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    # host or address -> its own limit, from "host:count,host:count" (Kafka's format)
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = ()
    max_incremental_fetch_session_cache_slots: int = 1000
    # Answer produce (acks 1 and all) and group coordinator writes only once fsynced, fsyncs
    # shared among all waiting (brook's key: Kafka relies on replication instead).
    log_flush_before_ack: bool = False
    log_flush_before_ack_syncfs: bool = True
    # The group coordinator and __consumer_offsets (Kafka's keys and defaults).
    offsets_topic_num_partitions: int = 50
    offsets_topic_segment_bytes: int = 104_857_600
    offsets_retention_minutes: int = 10_080
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 2**31 - 1
    # Consumer groups of KIP-848 (Kafka 4's keys and defaults).
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_max_size: int = 2**31 - 1
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")
    group_consumer_migration_policy: str = "bidirectional"
    # Prometheus metrics over HTTP on this port (brook's key; Kafka has JMX instead): off if None.
    metrics_port: int | None = None
    # A cluster on ZooKeeper (Kafka's keys and defaults): off, the embedded single node, if None.
    zookeeper_connect: str | None = None
    zookeeper_session_timeout_ms: int = 18_000
    zookeeper_connection_timeout_ms: int = 18_000  # Kafka's default: the session timeout
    broker_rack: str | None = None
    # Replication in a cluster (Kafka's keys and defaults).
    default_replication_factor: int = 1
    offsets_topic_replication_factor: int = 3
    #: How long a coordinator's write waits for the offsets partition's in-sync replicas
    #: before answering COORDINATOR_NOT_AVAILABLE (Kafka's offsets.commit.timeout.ms).
    offsets_commit_timeout_ms: int = 5_000
    # The transaction coordinator and __transaction_state (Kafka's keys and defaults).
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 104_857_600
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_partition_verification_enable: bool = True  # KIP-890 part 1
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_backoff_ms: int = 1_000
    replica_socket_timeout_ms: int = 30_000
    replica_high_watermark_checkpoint_interval_ms: int = 5_000
    request_timeout_ms: int = 30_000
    unclean_leader_election_enable: bool = False
    inter_broker_listener_name: str | None = None
    #: The listener the controller's requests go to (Kafka's control.plane.listener.name),
    #: else the inter-broker listener.
    control_plane_listener_name: str | None = None
    #: Listener name -> its security protocol, SASL mechanisms and PLAIN users.
    listener_security: dict[str, ListenerSecurity] = field(default_factory=dict)
    #: How this broker authenticates to the others when the inter-broker listener is SASL.
    inter_broker_sasl: ClientCredentials | None = None
    #: How this broker connects to the others when the inter-broker listener is TLS (an
    #: ssl.SSLContext from that listener's ssl.* keys).
    inter_broker_tls: object | None = field(default=None, compare=False, repr=False)
    #: The largest frame a SASL connection may send before it has authenticated (Kafka's
    #: sasl.server.max.receive.size): larger ones close it, unread (CVE-2022-34917).
    sasl_server_max_receive_size: int = 524_288
    #: How long a failed authentication waits before its answer and the close.
    connection_failed_authentication_delay_ms: int = 100
    #: ACLs are checked (authorizer.class.name names an ACL authorizer); else all is allowed.
    acl_authorizer: bool = False
    #: super.users: principals (User:admin) allowed everything.
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5_000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: float = 300
    leader_imbalance_per_broker_percentage: int = 10
    log_config: LogConfig = field(default_factory=LogConfig)
    manager_config: ManagerConfig = field(default_factory=ManagerConfig)

    @classmethod
    def from_file(cls, path: str | None, overrides: dict[str, str] | None = None) -> "BrokerConfig":
        props: dict[str, str] = {}
        if path:
            with open(path, encoding="utf-8") as f:
                props.update(parse_properties(f.read()))
        props.update(overrides or {})
        return cls.from_props(props)

    @classmethod
    def from_props(cls, props: dict[str, str]) -> "BrokerConfig":
        def get(key: str, default, conv=int):
            if key not in props:
                return default
            try:
                return conv(props[key])
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{key}={props[key]!r}: {exc}") from None

        listeners = tuple(Listener.parse(s) for s in props.get("listeners", DEFAULT_LISTENER).split(",")
                          if s.strip())
        advertised = tuple(Listener.parse(s) for s in props.get("advertised.listeners", "").split(",")
                           if s.strip())
        dirs = props.get("log.dirs") or props.get("log.dir") or "./data"
        seen: dict[str, str] = {}
        for d in (d.strip() for d in dirs.split(",")):
            if d and seen.setdefault(os.path.realpath(d), d) != d:
                raise ConfigError(f"log.dirs names one directory twice: {seen[os.path.realpath(d)]!r} "
                                  f"and {d!r}")
        broker_id = get("node.id", get("broker.id", 1))
        zk_connect = props.get("zookeeper.connect", "").strip() or None
        zk_session_timeout = get("zookeeper.session.timeout.ms", 18_000)
        try:
            log_config = LogConfig.from_broker_props(props)
            manager_config = ManagerConfig.from_broker_props(props)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        cfg = cls(
            props=dict(props),
            broker_id=broker_id,
            listeners=listeners,
            advertised_listeners=advertised,
            log_dirs=tuple(os.path.abspath(d.strip()) for d in dirs.split(",") if d.strip()),
            num_partitions=get("num.partitions", 1),
            max_partitions_per_request=get("max.partitions.per.request", 10_000),
            max_broker_partitions=get("max.broker.partitions", 100_000),
            auto_create_topics_enable=get("auto.create.topics.enable", True, _bool),
            delete_topic_enable=get("delete.topic.enable", True, _bool),
            socket_request_max_bytes=get("socket.request.max.bytes", 100 * 1024 * 1024),
            message_max_bytes=get("message.max.bytes", 1024 * 1024 + 12),
            fetch_max_bytes=get("fetch.max.bytes", 55 * 1024 * 1024),
            producer_id_expiration_ms=get("producer.id.expiration.ms", 86_400_000),
            producer_ids_rate=get("producer.ids.rate", DEFAULT_PRODUCER_IDS_RATE, float),
            quota_window_num=get("quota.window.num", 11),
            quota_window_size_seconds=get("quota.window.size.seconds", 1),
            connections_max_idle_ms=get("connections.max.idle.ms", 600_000),
            max_connections=get("max.connections", 2**31 - 1),
            max_connections_per_ip=get("max.connections.per.ip", 2**31 - 1),
            max_connections_per_ip_overrides=get("max.connections.per.ip.overrides", (),
                                                 _per_ip_overrides),
            max_incremental_fetch_session_cache_slots=get("max.incremental.fetch.session.cache.slots", 1000),
            log_flush_before_ack=get("log.flush.before.ack", False, _bool),
            log_flush_before_ack_syncfs=get("log.flush.before.ack.syncfs", True, _bool),
            offsets_topic_num_partitions=get("offsets.topic.num.partitions", 50),
            offsets_topic_segment_bytes=get("offsets.topic.segment.bytes", 104_857_600),
            offsets_retention_minutes=get("offsets.retention.minutes", 10_080),
            offsets_retention_check_interval_ms=get("offsets.retention.check.interval.ms", 600_000),
            offset_metadata_max_bytes=get("offset.metadata.max.bytes", 4096),
            group_min_session_timeout_ms=get("group.min.session.timeout.ms", 6_000),
            group_max_session_timeout_ms=get("group.max.session.timeout.ms", 1_800_000),
            group_initial_rebalance_delay_ms=get("group.initial.rebalance.delay.ms", 3_000),
            group_max_size=get("group.max.size", 2**31 - 1),
            group_consumer_session_timeout_ms=get("group.consumer.session.timeout.ms", 45_000),
            group_consumer_heartbeat_interval_ms=get("group.consumer.heartbeat.interval.ms",
                                                     5_000),
            group_consumer_max_size=get("group.consumer.max.size", 2**31 - 1),
            group_consumer_assignors=get("group.consumer.assignors", ("uniform", "range"),
                                         _assignor_names),
            group_consumer_migration_policy=get("group.consumer.migration.policy",
                                                "bidirectional", _migration_policy),
            metrics_port=get("metrics.port", None),
            zookeeper_connect=zk_connect,
            zookeeper_session_timeout_ms=zk_session_timeout,
            zookeeper_connection_timeout_ms=get("zookeeper.connection.timeout.ms", zk_session_timeout),
            broker_rack=props.get("broker.rack", "").strip() or None,
            default_replication_factor=get("default.replication.factor", 1),
            offsets_topic_replication_factor=get("offsets.topic.replication.factor", 3),
            offsets_commit_timeout_ms=get("offsets.commit.timeout.ms", 5_000),
            transaction_state_log_num_partitions=get("transaction.state.log.num.partitions", 50),
            transaction_state_log_replication_factor=get("transaction.state.log.replication.factor", 3),
            transaction_state_log_min_isr=get("transaction.state.log.min.isr", 2),
            transaction_state_log_segment_bytes=get("transaction.state.log.segment.bytes", 104_857_600),
            transaction_max_timeout_ms=get("transaction.max.timeout.ms", 900_000),
            transactional_id_expiration_ms=get("transactional.id.expiration.ms", 604_800_000),
            transaction_partition_verification_enable=get(
                "transaction.partition.verification.enable", True, _bool),
            replica_lag_time_max_ms=get("replica.lag.time.max.ms", 30_000),
            replica_fetch_wait_max_ms=get("replica.fetch.wait.max.ms", 500),
            replica_fetch_min_bytes=get("replica.fetch.min.bytes", 1),
            replica_fetch_max_bytes=get("replica.fetch.max.bytes", 1024 * 1024),
            replica_fetch_response_max_bytes=get("replica.fetch.response.max.bytes", 10 * 1024 * 1024),
            replica_fetch_backoff_ms=get("replica.fetch.backoff.ms", 1_000),
            replica_socket_timeout_ms=get("replica.socket.timeout.ms", 30_000),
            replica_high_watermark_checkpoint_interval_ms=get(
                "replica.high.watermark.checkpoint.interval.ms", 5_000),
            request_timeout_ms=get("request.timeout.ms", 30_000),
            unclean_leader_election_enable=get("unclean.leader.election.enable", False, _bool),
            inter_broker_listener_name=props.get("inter.broker.listener.name", "").strip().upper() or None,
            control_plane_listener_name=props.get("control.plane.listener.name", "").strip().upper() or None,
            controlled_shutdown_enable=get("controlled.shutdown.enable", True, _bool),
            controlled_shutdown_max_retries=get("controlled.shutdown.max.retries", 3),
            controlled_shutdown_retry_backoff_ms=get("controlled.shutdown.retry.backoff.ms", 5_000),
            auto_leader_rebalance_enable=get("auto.leader.rebalance.enable", True, _bool),
            leader_imbalance_check_interval_seconds=get("leader.imbalance.check.interval.seconds", 300, float),
            leader_imbalance_per_broker_percentage=get("leader.imbalance.per.broker.percentage", 10),
            log_config=log_config,
            manager_config=manager_config,
            listener_security=_listener_security(props, listeners),
            sasl_server_max_receive_size=get("sasl.server.max.receive.size", 524_288),
            connection_failed_authentication_delay_ms=get(
                "connection.failed.authentication.delay.ms", 100),
            acl_authorizer=get("authorizer.class.name", False, _authorizer),
            super_users=parse_super_users(props.get("super.users", "")),
            allow_everyone_if_no_acl_found=get("allow.everyone.if.no.acl.found", False, _bool),
        )
        if not cfg.listeners:
            raise ConfigError("listeners is empty")
        if not cfg.producer_ids_rate > 0:
            raise ConfigError("producer.ids.rate must be positive")
        if cfg.manager_config.producer_id_max_count < 1:
            raise ConfigError("producer.id.max.count must be at least 1")
        if cfg.max_partitions_per_request < 1 or cfg.max_broker_partitions < 1:
            raise ConfigError("max.partitions.per.request and max.broker.partitions must be at least 1")
        if cfg.num_partitions < 1:
            raise ConfigError("num.partitions must be at least 1")
        if cfg.quota_window_num < 1 or cfg.quota_window_size_seconds < 1:
            raise ConfigError("quota.window.num and quota.window.size.seconds must be at least 1")
        if cfg.offsets_topic_num_partitions < 1:
            raise ConfigError("offsets.topic.num.partitions must be at least 1")
        if cfg.transaction_state_log_num_partitions < 1:
            raise ConfigError("transaction.state.log.num.partitions must be at least 1")
        if cfg.transaction_max_timeout_ms < 1 or cfg.transactional_id_expiration_ms < 1:
            raise ConfigError("transaction.max.timeout.ms and transactional.id.expiration.ms "
                              "must be at least 1")
        if cfg.offsets_retention_check_interval_ms < 1:
            raise ConfigError("offsets.retention.check.interval.ms must be at least 1")
        if cfg.group_consumer_max_size < 1 or cfg.group_consumer_session_timeout_ms < 1 \
                or cfg.group_consumer_heartbeat_interval_ms < 1:
            raise ConfigError("group.consumer.max.size, group.consumer.session.timeout.ms and "
                              "group.consumer.heartbeat.interval.ms must be >= 1")
        if cfg.group_min_session_timeout_ms > cfg.group_max_session_timeout_ms:
            raise ConfigError("group.min.session.timeout.ms is above group.max.session.timeout.ms")
        if cfg.group_initial_rebalance_delay_ms < 0 or cfg.group_max_size < 1:
            raise ConfigError("group.initial.rebalance.delay.ms must be >= 0 and group.max.size >= 1")
        if cfg.metrics_port is not None and not 1 <= cfg.metrics_port <= 65535:
            raise ConfigError(f"metrics.port={cfg.metrics_port} is not a port number (1-65535)")
        if cfg.zookeeper_connect is not None:
            _check_cluster_config(cfg)
            inter = cfg.inter_broker_listener_name or cfg.advertised[0].name
            security = cfg.listener_security.get(inter)
            try:
                if security is not None and security.sasl:
                    cfg = dataclasses.replace(cfg, inter_broker_sasl=inter_broker_credentials(props, security))
                if security is not None and security.tls is not None:
                    cfg = dataclasses.replace(cfg, inter_broker_tls=client_context(props, inter))
            except (SecurityConfigError, TlsConfigError) as exc:
                raise ConfigError(str(exc)) from None
        if cfg.sasl_server_max_receive_size < 1:
            raise ConfigError("sasl.server.max.receive.size must be at least 1")
        return cfg

    @property
    def advertised(self) -> tuple[Listener, ...]:
        """What Metadata tells clients: advertised.listeners, else listeners (an unspecified
        host is advertised as this machine's name, as Kafka does)."""
        if self.advertised_listeners:
            return self.advertised_listeners
        import socket
        return tuple(Listener(l.name, l.host if l.host not in ("", "0.0.0.0", "::") else socket.getfqdn(),
                              l.port) for l in self.listeners)
