"""The broker configs brook knows: each key's type, default, whether it can change without a
restart, and a line of documentation, as Kafka's KafkaConfig declares them. DescribeConfigs
answers from here; dynamic broker configs (AlterConfigs on a broker) are checked here.

Defaults are brook's own (what the broker does when the key is unset), which are Kafka's
except where config.py says otherwise. Keys with no default (None) are, as in Kafka, those
that only stand in for another (`log.retention.ms` before `log.retention.hours`) or that are
off unless set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..storage.config import BROKER_KEYS, LogConfig
from ..storage.manager import ManagerConfig
from .quotas.producer_id_quota import DEFAULT_PRODUCER_IDS_RATE

# DescribeConfigs v3+ config_type (Kafka's DescribeConfigsResponse.ConfigType).
UNKNOWN, BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(10)

# DescribeConfigs config_source (Kafka's DescribeConfigsResponse.ConfigSource).
SOURCE_UNKNOWN = 0
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    type: int
    default: str | None
    doc: str
    #: brook applies a new value without a restart (Kafka marks it dynamic too); the others
    #: are read-only for AlterConfigs.
    dynamic: bool = False


def _s(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


_L = LogConfig()
_M = ManagerConfig()

# The log-level defaults topics inherit (Kafka's DynamicLogConfig.ReconfigurableConfigs):
# all dynamic in brook, applied to every log without an override of its own.
_LOG_DOCS = {
    "log.segment.bytes": "The maximum size of a single log file.",
    "log.roll.ms": "The maximum time before a new log segment is rolled out (in milliseconds); "
                   "if not set, log.roll.hours is used.",
    "log.roll.hours": "The maximum time before a new log segment is rolled out (in hours).",
    "log.index.size.max.bytes": "The maximum size in bytes of the offset index.",
    "log.index.interval.bytes": "The interval with which an entry is added to the offset index.",
    "log.flush.interval.messages": "The number of messages accumulated on a log partition "
                                   "before messages are flushed to disk.",
    "log.flush.interval.ms": "The maximum time in ms that a message in any topic is kept in "
                             "memory before flushed to disk.",
    "log.retention.ms": "The number of milliseconds to keep a log file before deleting it; if "
                        "not set, log.retention.minutes is used. -1: no time limit.",
    "log.retention.minutes": "The number of minutes to keep a log file before deleting it; if "
                             "not set, log.retention.hours is used.",
    "log.retention.hours": "The number of hours to keep a log file before deleting it.",
    "log.retention.bytes": "The maximum size of the log before deleting it (-1: no limit).",
    "log.cleanup.policy": "The default cleanup policy for segments beyond the retention window "
                          "(delete, compact, or both).",
    "log.cleaner.delete.retention.ms": "The amount of time to retain tombstones in compacted logs.",
    "log.cleaner.min.cleanable.ratio": "The minimum ratio of dirty log to total log for a log to "
                                       "be eligible for cleaning.",
    "log.cleaner.min.compaction.lag.ms": "The minimum time a message will remain uncompacted in "
                                         "the log.",
    "log.cleaner.max.compaction.lag.ms": "The maximum time a message will remain ineligible for "
                                         "compaction in the log.",
    "log.segment.delete.delay.ms": "The amount of time to wait before deleting a file from the "
                                   "filesystem.",
    "message.max.bytes": "The largest record batch size allowed (the default of topics' "
                         "max.message.bytes).",
    "log.message.timestamp.type": "Whether the timestamp in the message is message create time "
                                  "or log append time (CreateTime or LogAppendTime).",
    "log.message.timestamp.before.max.ms": "How far a message's timestamp may be before the "
                                           "broker's time.",
    "log.message.timestamp.after.max.ms": "How far a message's timestamp may be after the "
                                          "broker's time.",
    "log.message.timestamp.difference.max.ms": "[DEPRECATED] The maximum difference between a "
                                               "message's timestamp and the broker's time.",
    "producer.id.expiration.ms": "The time in ms that a topic partition leader will wait before "
                                 "expiring producer IDs.",
}
# Keys that stand in for another and have no default of their own (Kafka's).
_NO_DEFAULT = {"log.roll.ms", "log.retention.ms", "log.retention.minutes"}
_LOG_TYPES = {"log.roll.hours": INT, "log.retention.minutes": INT, "log.retention.hours": INT,
              "log.segment.bytes": INT, "log.index.size.max.bytes": INT,
              "log.index.interval.bytes": INT, "message.max.bytes": INT,
              "log.cleanup.policy": LIST, "log.message.timestamp.type": STRING,
              "log.cleaner.min.cleanable.ratio": DOUBLE, "producer.id.expiration.ms": INT}
_LOG_SCALE = {"log.roll.hours": 3600 * 1000, "log.retention.hours": 3600 * 1000}


def _log_keys() -> list[ConfigKey]:
    out = []
    for key, name, _scale in BROKER_KEYS:
        if key in _NO_DEFAULT:
            default = None
        else:
            default = _s(getattr(_L, name) // _LOG_SCALE.get(key, 1) if key in _LOG_SCALE
                         else getattr(_L, name))
        out.append(ConfigKey(key, _LOG_TYPES.get(key, LONG), default, _LOG_DOCS[key], dynamic=True))
    return out


_KEYS: list[ConfigKey] = [
    *_log_keys(),
    # Topic-level keys brook takes and reports but does not act on, at the broker level.
    ConfigKey("compression.type", STRING, "producer",
              "The final compression type for a topic (brook keeps the producer's).", dynamic=True),
    ConfigKey("min.insync.replicas", INT, "1",
              "The minimum number of replicas that must acknowledge a write with acks=all.",
              dynamic=True),
    ConfigKey("unclean.leader.election.enable", BOOLEAN, "false",
              "Whether replicas not in the ISR may be elected leader as a last resort.",
              dynamic=True),
    ConfigKey("log.preallocate", BOOLEAN, "false",
              "Whether to preallocate the file when creating a new segment (brook does not).",
              dynamic=True),
    ConfigKey("log.message.downconversion.enable", BOOLEAN, "true",
              "Whether down-conversion of message formats is enabled for consume requests.",
              dynamic=True),
    # Read-only: read once at start.
    ConfigKey("broker.id", INT, "1", "The broker id for this server."),
    ConfigKey("node.id", INT, None, "The node id (used in place of broker.id when set)."),
    ConfigKey("listeners", STRING, "PLAINTEXT://127.0.0.1:9092",
              "Listener list: the URIs the broker listens on."),
    ConfigKey("advertised.listeners", STRING, None,
              "Listeners to publish to clients if different from listeners."),
    ConfigKey("inter.broker.listener.name", STRING, None,
              "Name of the listener used for communication between brokers."),
    ConfigKey("listener.security.protocol.map", STRING,
              "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
              "Each listener's security protocol."),
    ConfigKey("sasl.enabled.mechanisms", LIST, "GSSAPI",
              "SASL mechanisms of SASL listeners (brook has PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)."),
    ConfigKey("control.plane.listener.name", STRING, None,
              "Name of the listener the controller's requests to brokers go to (else the "
              "inter-broker listener)."),
    ConfigKey("sasl.mechanism.inter.broker.protocol", STRING, "GSSAPI",
              "The SASL mechanism brokers authenticate to each other with."),
    ConfigKey("sasl.server.max.receive.size", INT, "524288",
              "The largest frame accepted before a SASL connection has authenticated."),
    ConfigKey("connections.max.reauth.ms", LONG, "0",
              "How long a SASL session lasts before the client must authenticate again on its "
              "connection (KIP-368); 0: for as long as the connection."),
    ConfigKey("connection.failed.authentication.delay.ms", INT, "100",
              "How long a failed authentication waits before its answer and the close."),
    ConfigKey("authorizer.class.name", STRING, "",
              "The authorizer: Kafka's kafka.security.authorizer.AclAuthorizer or "
              "org.apache.kafka.metadata.authorizer.StandardAuthorizer select brook's ACLs; "
              "empty: no authorization."),
    ConfigKey("super.users", STRING, None,
              "Principals allowed everything, separated by semicolons (User:admin;User:broker)."),
    ConfigKey("allow.everyone.if.no.acl.found", BOOLEAN, "false",
              "Allow a request on a resource no ACL covers."),
    ConfigKey("ssl.keystore.type", STRING, None,
              "The keystore's format: brook reads PEM (JKS and PKCS12 are refused).", dynamic=True),
    ConfigKey("ssl.keystore.location", STRING, None,
              "A PEM file holding the broker's private key and its certificate chain.", dynamic=True),
    ConfigKey("ssl.keystore.key", STRING, None, "The broker's private key, inline PEM."),
    ConfigKey("ssl.keystore.certificate.chain", STRING, None,
              "The broker's certificate chain, inline PEM."),
    ConfigKey("ssl.key.password", STRING, None, "The password of an encrypted private key."),
    ConfigKey("ssl.truststore.type", STRING, None, "The truststore's format: PEM.", dynamic=True),
    ConfigKey("ssl.truststore.location", STRING, None,
              "A PEM file of the certificates trusted to sign clients' (and other brokers') certificates.", dynamic=True),
    ConfigKey("ssl.truststore.certificates", STRING, None, "Trusted certificates, inline PEM."),
    ConfigKey("ssl.client.auth", STRING, "none",
              "Whether TLS clients must present a certificate: none, requested or required."),
    ConfigKey("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3", "The TLS versions accepted."),
    ConfigKey("ssl.principal.mapping.rules", STRING, "DEFAULT",
              "Rules mapping a client certificate's subject to a user name."),
    ConfigKey("ssl.endpoint.identification.algorithm", STRING, "https",
              "Whether a broker checks the host name of the brokers it connects to over TLS "
              "(https) or not (empty)."),
    ConfigKey("log.dirs", STRING, None, "The directories in which the log data is kept (if not "
              "set, log.dir is used)."),
    ConfigKey("log.dir", STRING, "./data", "The directory in which the log data is kept."),
    ConfigKey("num.partitions", INT, "1", "The default number of log partitions per topic."),
    ConfigKey("default.replication.factor", INT, "1",
              "The default replication factor for automatically created topics."),
    ConfigKey("auto.create.topics.enable", BOOLEAN, "true",
              "Enable auto creation of topic on the server."),
    ConfigKey("delete.topic.enable", BOOLEAN, "true", "Enables delete topic."),
    ConfigKey("max.partitions.per.request", INT, "10000",
              "The most partitions one CreateTopics or CreatePartitions request may add."),
    ConfigKey("max.broker.partitions", INT, "100000",
              "The maximum number of partitions this broker may hold."),
    ConfigKey("socket.request.max.bytes", INT, str(100 * 1024 * 1024),
              "The maximum number of bytes in a socket request."),
    ConfigKey("fetch.max.bytes", INT, str(55 * 1024 * 1024),
              "The maximum number of bytes returned for a fetch request."),
    ConfigKey("producer.ids.rate", DOUBLE, _s(DEFAULT_PRODUCER_IDS_RATE),
              "InitProducerId requests allowed per second per client id and address."),
    ConfigKey("quota.window.num", INT, "11",
              "The number of samples to retain in memory for client quotas."),
    ConfigKey("quota.window.size.seconds", INT, "1",
              "The time span of each sample for client quotas."),
    ConfigKey("connections.max.idle.ms", LONG, "600000",
              "Idle connections timeout: connections idle longer are closed."),
    ConfigKey("max.connections", INT, str(INT_MAX),
              "The maximum number of connections the broker accepts at any time.", dynamic=True),
    ConfigKey("max.connections.per.ip", INT, str(INT_MAX),
              "The maximum number of connections allowed from each ip address.", dynamic=True),
    ConfigKey("max.connections.per.ip.overrides", STRING, "",
              "A comma-separated list of per-ip or hostname overrides (host:count).", dynamic=True),
    ConfigKey("max.incremental.fetch.session.cache.slots", INT, "1000",
              "The maximum number of incremental fetch sessions."),
    ConfigKey("log.flush.before.ack", BOOLEAN, "false",
              "Answer produce and group writes only once they are fsynced (brook's)."),
    ConfigKey("log.flush.before.ack.syncfs", BOOLEAN, "true",
              "With log.flush.before.ack, make several files of one file system durable with "
              "one syncfs instead of an fsync each (brook's; Linux 5.8 and later)."),
    ConfigKey("log.flush.scheduler.interval.ms", LONG, _s(_M.flush_scheduler_interval_ms),
              "How often logs are checked for a flush due by flush.ms."),
    ConfigKey("log.retention.check.interval.ms", LONG, _s(_M.retention_check_interval_ms),
              "How often logs are checked for segments to delete."),
    ConfigKey("log.flush.offset.checkpoint.interval.ms", INT,
              _s(_M.recovery_point_checkpoint_interval_ms),
              "How often the recovery points are checkpointed."),
    ConfigKey("log.flush.start.offset.checkpoint.interval.ms", INT,
              _s(_M.start_offset_checkpoint_interval_ms),
              "How often the log start offsets are checkpointed."),
    ConfigKey("log.cleaner.enable", BOOLEAN, _s(_M.cleaner_enable),
              "Enable the log cleaner process (compaction)."),
    ConfigKey("log.cleaner.backoff.ms", LONG, _s(_M.cleaner_backoff_ms),
              "The amount of time to sleep when there are no logs to clean."),
    ConfigKey("producer.id.expiration.check.interval.ms", INT,
              _s(_M.producer_expiration_check_interval_ms),
              "How often expired producer ids are removed."),
    ConfigKey("producer.id.max.count", INT, _s(_M.producer_id_max_count),
              "The most producer ids the broker keeps state for (brook's)."),
    ConfigKey("log.segment.fd.cache.size", INT, _s(_M.segment_fd_cache_size),
              "Segment files kept open at most (brook's)."),
    ConfigKey("offsets.topic.num.partitions", INT, "50",
              "The number of partitions for the offset commit topic."),
    ConfigKey("offsets.topic.segment.bytes", INT, "104857600",
              "The offsets topic segment bytes."),
    ConfigKey("offsets.topic.replication.factor", SHORT, "3",
              "The replication factor for the offsets topic."),
    ConfigKey("offsets.commit.timeout.ms", INT, "5000",
              "How long an offset commit waits for every replica of the offsets topic "
              "partition before it is answered with an error the client retries."),
    ConfigKey("transaction.state.log.num.partitions", INT, "50",
              "The number of partitions for the transaction topic."),
    ConfigKey("transaction.state.log.replication.factor", SHORT, "3",
              "The replication factor for the transaction topic."),
    ConfigKey("transaction.state.log.min.isr", INT, "2",
              "min.insync.replicas of the transaction topic."),
    ConfigKey("transaction.state.log.segment.bytes", INT, "104857600",
              "The transaction topic segment bytes."),
    ConfigKey("transaction.max.timeout.ms", INT, "900000",
              "The largest transaction timeout a producer may ask for."),
    ConfigKey("transactional.id.expiration.ms", INT, "604800000",
              "How long a transactional id without transaction updates is kept."),
    ConfigKey("transaction.partition.verification.enable", BOOLEAN, "true",
              "Whether a leader asks the transaction coordinator that a partition is in the "
              "transaction before a transactional batch begins one there (KIP-890)."),
    ConfigKey("offsets.retention.minutes", INT, "10080",
              "How long committed offsets of a group with no members are kept."),
    ConfigKey("offsets.retention.check.interval.ms", LONG, "600000",
              "Frequency at which to check for stale offsets."),
    ConfigKey("offset.metadata.max.bytes", INT, "4096",
              "The maximum size for a metadata entry associated with an offset commit."),
    ConfigKey("group.min.session.timeout.ms", INT, "6000",
              "The minimum allowed session timeout for registered consumers."),
    ConfigKey("group.max.session.timeout.ms", INT, "1800000",
              "The maximum allowed session timeout for registered consumers."),
    ConfigKey("group.initial.rebalance.delay.ms", INT, "3000",
              "The time the group coordinator waits for more consumers to join a new group."),
    ConfigKey("group.max.size", INT, str(INT_MAX),
              "The maximum number of consumers that a single consumer group can accommodate."),
    ConfigKey("metrics.port", INT, None, "Prometheus metrics over HTTP on this port (brook's)."),
    ConfigKey("zookeeper.connect", STRING, None, "The ZooKeeper connection string."),
    ConfigKey("zookeeper.session.timeout.ms", INT, "18000", "ZooKeeper session timeout."),
    ConfigKey("zookeeper.connection.timeout.ms", INT, None,
              "The max time the client waits to establish a connection to ZooKeeper (if not "
              "set, zookeeper.session.timeout.ms)."),
    ConfigKey("broker.rack", STRING, None, "Rack of the broker."),
    ConfigKey("replica.lag.time.max.ms", LONG, "30000",
              "A follower not caught up for this long is removed from the ISR."),
    ConfigKey("replica.fetch.wait.max.ms", INT, "500",
              "The maximum wait time for each fetcher request issued by follower replicas."),
    ConfigKey("replica.fetch.min.bytes", INT, "1",
              "Minimum bytes expected for each fetch response."),
    ConfigKey("replica.fetch.max.bytes", INT, str(1024 * 1024),
              "The number of bytes of messages to attempt to fetch for each partition."),
    ConfigKey("replica.fetch.response.max.bytes", INT, str(10 * 1024 * 1024),
              "Maximum bytes expected for the entire fetch response."),
    ConfigKey("replica.fetch.backoff.ms", INT, "1000",
              "The amount of time to sleep when a fetch partition error occurs."),
    ConfigKey("replica.socket.timeout.ms", INT, "30000",
              "The socket timeout for network requests to the leader."),
    ConfigKey("replica.high.watermark.checkpoint.interval.ms", LONG, "5000",
              "The frequency with which the high watermark is saved out to disk."),
    ConfigKey("request.timeout.ms", INT, "30000",
              "How long inter-broker requests wait for an answer."),
    ConfigKey("controlled.shutdown.enable", BOOLEAN, "true", "Enable controlled shutdown."),
    ConfigKey("controlled.shutdown.max.retries", INT, "3",
              "Controlled shutdown attempts before an unclean shutdown."),
    ConfigKey("controlled.shutdown.retry.backoff.ms", LONG, "5000",
              "Time to wait between controlled shutdown attempts."),
    ConfigKey("auto.leader.rebalance.enable", BOOLEAN, "true",
              "Enables auto leader balancing."),
    ConfigKey("leader.imbalance.check.interval.seconds", LONG, "300",
              "The frequency with which the partition rebalance check is triggered."),
    ConfigKey("leader.imbalance.per.broker.percentage", INT, "10",
              "The ratio of leader imbalance allowed per broker."),
    # In Kafka's sample server.properties; accepted, not acted on (brook has no such pools).
    ConfigKey("num.network.threads", INT, "3", "Threads for network requests (not used by brook)."),
    ConfigKey("num.io.threads", INT, "8", "Threads for requests (not used by brook)."),
    ConfigKey("num.recovery.threads.per.data.dir", INT, "1",
              "Threads per data directory for log recovery (not used by brook)."),
    ConfigKey("socket.send.buffer.bytes", INT, "102400",
              "The SO_SNDBUF buffer of the socket server sockets (not used by brook)."),
    ConfigKey("socket.receive.buffer.bytes", INT, "102400",
              "The SO_RCVBUF buffer of the socket server sockets (not used by brook)."),
    ConfigKey("transaction.state.log.replication.factor", SHORT, "3",
              "The replication factor for the transaction topic (not used by brook)."),
    ConfigKey("transaction.state.log.min.isr", INT, "2",
              "min.insync.replicas for the transaction topic (not used by brook)."),
    # Dynamic in Kafka, fixed in brook (no such pools or limits to resize): read-only here, so
    # that setting one is refused rather than silently kept as a custom config.
    ConfigKey("background.threads", INT, "10",
              "Threads for background tasks (not used by brook)."),
    ConfigKey("num.replica.fetchers", INT, "1",
              "Fetcher threads per source broker (brook has one fetcher per broker)."),
    ConfigKey("log.cleaner.threads", INT, "1",
              "Background threads for log cleaning (brook has one)."),
    ConfigKey("log.cleaner.io.max.bytes.per.second", DOUBLE, "1.7976931348623157E308",
              "The log cleaner's I/O limit (not used by brook)."),
    ConfigKey("log.cleaner.dedupe.buffer.size", LONG, "134217728",
              "Memory for log deduplication across all cleaner threads (not used by brook)."),
    ConfigKey("log.cleaner.io.buffer.size", INT, "524288",
              "Memory for log cleaner I/O buffers (not used by brook)."),
    ConfigKey("max.connection.creation.rate", INT, str(INT_MAX),
              "The most connections accepted per second (not used by brook)."),
]

KEYS: dict[str, ConfigKey] = {k.name: k for k in _KEYS}

# Names whose values are secrets, whatever brook knows of them (Kafka's PASSWORD type: the SSL
# passwords and keys, SASL's JAAS config, listener-prefixed forms of both).
_SECRET = re.compile(r"password|sasl\.jaas\.config|ssl\.keystore\.key$|\.secret")

# Synonyms in order of precedence (Kafka's DynamicBrokerConfig.brokerConfigSynonyms).
_SYNONYM_GROUPS = [
    ["log.roll.ms", "log.roll.hours"],
    ["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
]
_SYNONYMS = {name: group for group in _SYNONYM_GROUPS for name in group}


def synonyms(name: str) -> list[str]:
    """`name` and the keys that stand in for it, most specific first."""
    return _SYNONYMS.get(name, [name])


_LISTENER_PREFIX = re.compile(r"^listener\.name\.[^.]+\.(?=ssl\.)")


def key_of(name: str) -> ConfigKey | None:
    """The key `name` sets: a listener's own TLS setting (listener.name.<l>.ssl.*) is its
    ssl.* key for one listener."""
    return KEYS.get(name) or KEYS.get(_LISTENER_PREFIX.sub("", name))


def config_type(name: str) -> int:
    if _SECRET.search(name):
        return PASSWORD
    key = key_of(name)
    return key.type if key is not None else UNKNOWN


def is_sensitive(name: str) -> bool:
    """A password, or a key brook does not know (Kafka: "if we can't determine the config
    entry type, treat it as a sensitive config to be safe")."""
    return config_type(name) in (PASSWORD, UNKNOWN)


def is_dynamic(name: str) -> bool:
    key = key_of(name)
    return key is not None and key.dynamic and not _SECRET.search(name)


_TYPE_NAMES = {BOOLEAN: "BOOLEAN", INT: "INT", SHORT: "SHORT", LONG: "LONG", DOUBLE: "DOUBLE"}
_RANGES = {INT: (-2**31, 2**31 - 1), SHORT: (-2**15, 2**15 - 1), LONG: (-2**63, 2**63 - 1)}


def check_value(name: str, value: str) -> None:
    """ValueError (Kafka's ConfigException message) if `value` is not of `name`'s type."""
    kind = config_type(name)
    text = str(value).strip()
    if kind == BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"Invalid value {value} for configuration {name}: Expected value "
                             "to be either true or false")
    elif kind in _RANGES:
        lo, hi = _RANGES[kind]
        try:
            number = int(text)
        except ValueError:
            number = None
        if number is None or not lo <= number <= hi:
            raise ValueError(f"Invalid value {value} for configuration {name}: Not a number of "
                             f"type {_TYPE_NAMES[kind]}")
    elif kind == DOUBLE:
        try:
            float(text)
        except ValueError:
            raise ValueError(f"Invalid value {value} for configuration {name}: Not a number of "
                             "type DOUBLE") from None


def loggable(configs: dict[str, str]) -> dict[str, str]:
    """`configs` with the values of sensitive keys hidden, for the broker's log."""
    return {k: "[hidden]" if is_sensitive(k) else v for k, v in configs.items()}


def defaults() -> dict[str, str]:
    """Every key with a default, as DEFAULT_CONFIG synonyms show it."""
    return {k.name: k.default for k in _KEYS if k.default is not None}
