"""Kafka's ZooKeeper layout (kafka.zk.ZkData in Kafka 2.8), and the `zookeeper.connect` string.

Paths are those of Kafka so that tools reading a Kafka cluster's ZooKeeper read brook's; they
are relative to the chroot of `zookeeper.connect` (``host:port[,host:port...][/chroot]``).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PORT = 2181  # ZooKeeper's client port when a host names none (ConnectStringParser)

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_SEQUENCE_ID = "/brokers/seqid"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CLUSTER_ID = "/cluster/id"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
#: brook's own: the secret brokers derive their logins to each other from (not Kafka's layout)
BROKER_SECRET = "/brook/broker_secret"
CONSUMERS = "/consumers"  # the old consumer's path, still created by Kafka 2.8
CONFIG_ENTITY_TYPES = ("topics", "clients", "users", "brokers")  # ConfigType.all

# Persistent paths every Kafka 2.8 broker makes sure of at start (ZkData.PersistentZkPaths).
PERSISTENT_PATHS = (
    CONSUMERS,
    BROKER_IDS,
    TOPICS,
    CONFIG_CHANGES,
    DELETE_TOPICS,
    BROKER_SEQUENCE_ID,
    ISR_CHANGE_NOTIFICATION,
    LATEST_PRODUCER_ID_BLOCK,
    LOG_DIR_EVENT_NOTIFICATION,
) + tuple(f"{CONFIG}/{t}" for t in CONFIG_ENTITY_TYPES)


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG}/topics/{topic}"


DEFAULT_ENTITY = "<default>"  # the cluster-wide default of an entity type (ZooKeeperInternals)


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize for a user name in a ZooKeeper path: URL-encoded, with
    letters, digits, '.', '-' and '_' kept (and '*' as %2A, a space as %20)."""
    from urllib.parse import quote
    return quote(name, safe="-_.").replace("~", "%7E")


def desanitize(name: str) -> str:
    from urllib.parse import unquote
    return unquote(name)


def user_config_path(user: str) -> str:
    """/config/users/<user, sanitized>: a user's SCRAM credentials (and quotas)."""
    return f"{CONFIG}/users/{sanitize(user)}"


def broker_config_path(broker_id: int | None) -> str:
    """A broker's dynamic configs, or the cluster-wide defaults (None)."""
    return f"{CONFIG}/brokers/{DEFAULT_ENTITY if broker_id is None else broker_id}"


def broker_id_of(child: str) -> int | None:
    """The broker id a child of /brokers/ids names (None for anything else)."""
    return int(child) if child.isdigit() else None


class ConnectStringError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ConnectString:
    """`zookeeper.connect` taken apart: the servers, and the chroot ("" for none)."""

    hosts: tuple[tuple[str, int], ...]
    chroot: str

    @property
    def servers(self) -> str:
        """The servers as kazoo takes them (the chroot is applied by brook, not by kazoo)."""
        return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.hosts)

    def path(self, path: str) -> str:
        """A layout path inside the chroot."""
        return self.chroot + path if path != "/" else (self.chroot or "/")

    def __str__(self) -> str:
        return self.servers + self.chroot


def parse_connect(value: str) -> ConnectString:
    """``host:port[,host:port...][/chroot]`` as ZooKeeper's ConnectStringParser reads it (a host
    without a port is on 2181), with the chroot checked as ZooKeeper checks paths."""
    value = value.strip()
    servers, slash, chroot = value.partition("/")
    chroot = slash + chroot
    if chroot == "/":
        chroot = ""
    if chroot:
        if chroot.endswith("/") or "//" in chroot or any(p in (".", "..") for p in chroot.split("/")):
            raise ConnectStringError(f"zookeeper.connect={value!r}: invalid chroot path {chroot!r}")
    hosts = []
    for item in (s.strip() for s in servers.split(",")):
        if not item:
            continue
        if item.startswith("["):  # [IPv6]:port
            host, _, rest = item[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else ""
        elif item.count(":") == 1:
            host, _, port_text = item.partition(":")
        else:
            host, port_text = item, ""
        try:
            port = int(port_text) if port_text else DEFAULT_PORT
        except ValueError:
            raise ConnectStringError(f"zookeeper.connect={value!r}: {item!r} is not host:port") from None
        if not host or not 0 < port < 65536:
            raise ConnectStringError(f"zookeeper.connect={value!r}: {item!r} is not host:port")
        hosts.append((host, port))
    if not hosts:
        raise ConnectStringError(f"zookeeper.connect={value!r} names no server")
    return ConnectString(tuple(hosts), chroot)
