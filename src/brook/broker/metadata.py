"""Embedded single-node metadata: the cluster id, topics with their ids, partition counts
and config overrides, and the producer id block. Persisted in the first log dir, written
atomically, so it survives restarts.

Also writes Kafka's `meta.properties` (broker.id, cluster.id) in every log dir, and refuses
to start on a log dir that belongs to another cluster or broker.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import uuid
from dataclasses import dataclass, field

from ..storage.checkpoint import atomic_write_text as _atomic_write
from ..storage.config import TOPIC_KEYS, LogConfig
from .properties import parse_properties

log = logging.getLogger(__name__)

METADATA_FILE = "brook-metadata.json"
META_PROPERTIES = "meta.properties"
MAX_TOPIC_NAME_LENGTH = 249
# Kafka's controller refuses one operation that would create more records than this.
MAX_PARTITIONS_PER_REQUEST = 10_000
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")

# Kafka topic keys brook accepts and reports with Kafka's defaults but does not act on
# (replication, tiered storage and broker-side recompression do not exist here).
PASSIVE_TOPIC_KEYS: dict[str, str] = {
    "compression.type": "producer",
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    "preallocate": "false",
    "message.downconversion.enable": "true",
    "follower.replication.throttled.replicas": "",
    "leader.replication.throttled.replicas": "",
    "remote.storage.enable": "false",
    "local.retention.ms": "-2",
    "local.retention.bytes": "-2",
    "segment.jitter.ms": "0",
}


class MetadataError(Exception):
    pass


class InvalidTopicError(MetadataError):
    """INVALID_TOPIC_EXCEPTION"""


class TopicExistsError(MetadataError):
    """TOPIC_ALREADY_EXISTS"""


class UnknownTopicError(MetadataError):
    """UNKNOWN_TOPIC_OR_PARTITION"""


class InvalidConfigError(MetadataError):
    """INVALID_CONFIG"""


class InvalidPartitionsError(MetadataError):
    """INVALID_PARTITIONS"""


def new_cluster_id() -> str:
    """22 characters of URL-safe base64 of a random UUID, as Kafka makes them."""
    while True:
        s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not s.startswith("-"):
            return s


def validate_topic_name(name: str) -> None:
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicError(f"topic name {name!r} has characters other than ASCII "
                                "alphanumerics, '.', '_' and '-'")


def validate_topic_configs(configs: dict[str, str | None], base: LogConfig) -> LogConfig:
    """The topic's effective LogConfig; raises InvalidConfigError for unknown keys or values."""
    log_keys = {}
    for key, value in configs.items():
        if value is None:
            raise InvalidConfigError(f"Null value not supported for topic configs: {key}")
        if key in TOPIC_KEYS:
            log_keys[key] = value
        elif key not in PASSIVE_TOPIC_KEYS:
            raise InvalidConfigError(f"unknown topic config {key!r}")
    try:
        return base.with_overrides(log_keys)
    except (ValueError, TypeError) as exc:
        raise InvalidConfigError(str(exc)) from None


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False

    def to_json(self) -> dict:
        return {"id": str(self.topic_id), "partitions": self.partitions,
                "configs": self.configs, "internal": self.internal}


class MetadataStore:
    def __init__(self, log_dirs: tuple[str, ...], broker_id: int) -> None:
        self.log_dirs = log_dirs
        self.broker_id = broker_id
        self.path = os.path.join(log_dirs[0], METADATA_FILE)
        self.topics: dict[str, TopicMetadata] = {}
        self.by_id: dict[uuid.UUID, TopicMetadata] = {}
        self.next_producer_id = 0
        self.producer_id_block_end = 0
        self.cluster_id = ""

    # -------------------------------------------------------------- load and save

    def load(self) -> None:
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            self.cluster_id = data["cluster_id"]
            for name, t in data.get("topics", {}).items():
                tm = TopicMetadata(name, uuid.UUID(t["id"]), int(t["partitions"]),
                                   dict(t.get("configs", {})), bool(t.get("internal", False)))
                self.topics[name] = tm
                self.by_id[tm.topic_id] = tm
            # Ids of the block handed out before a restart are never reused.
            self.next_producer_id = self.producer_id_block_end = int(data.get("producer_id_block_end", 0))
        self.cluster_id = self._check_meta_properties(self.cluster_id)
        self.save()

    def _check_meta_properties(self, cluster_id: str) -> str:
        found: dict[str, str] = {}
        for d in self.log_dirs:
            p = os.path.join(d, META_PROPERTIES)
            if os.path.exists(p):
                with open(p, encoding="utf-8") as f:
                    props = parse_properties(f.read())
                found[d] = props.get("cluster.id", "")
                bid = props.get("broker.id") or props.get("node.id")
                if bid is not None and int(bid) != self.broker_id:
                    raise MetadataError(f"{p} belongs to broker {bid}, not broker {self.broker_id}")
        ids = {c for c in found.values() if c} | ({cluster_id} if cluster_id else set())
        if len(ids) > 1:
            raise MetadataError(f"log dirs belong to different clusters: {sorted(ids)}")
        cluster_id = ids.pop() if ids else new_cluster_id()
        for d in self.log_dirs:
            if found.get(d) != cluster_id:
                _atomic_write(os.path.join(d, META_PROPERTIES),
                              f"#\nversion=0\nbroker.id={self.broker_id}\ncluster.id={cluster_id}\n")
        return cluster_id

    def save(self) -> None:
        data = {
            "cluster_id": self.cluster_id,
            "producer_id_block_end": self.producer_id_block_end,
            "topics": {name: t.to_json() for name, t in sorted(self.topics.items())},
        }
        _atomic_write(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")

    # -------------------------------------------------------------- topics

    def get(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def colliding_topic(self, name: str) -> str | None:
        """An existing topic whose name differs only by '.' vs '_' (their metric names collide,
        so Kafka refuses the second)."""
        norm = name.replace(".", "_")
        for other in self.topics:
            if other != name and other.replace(".", "_") == norm:
                return other
        return None

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None,
                     internal: bool = False, save: bool = True) -> TopicMetadata:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        other = self.colliding_topic(name)
        if other is not None:
            raise InvalidTopicError(f"topic {name!r} collides with existing topic {other!r}")
        if partitions < 1:
            raise InvalidPartitionsError("number of partitions must be at least 1")
        tm = TopicMetadata(name, uuid.uuid4(), partitions, dict(configs or {}), internal)
        self.topics[name] = tm
        self.by_id[tm.topic_id] = tm
        if save:
            self.save()
        return tm

    def delete_topic(self, name: str) -> TopicMetadata:
        tm = self.topics.pop(name, None)
        if tm is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        self.by_id.pop(tm.topic_id, None)
        self.save()
        return tm

    def set_partitions(self, name: str, count: int) -> None:
        self.topics[name].partitions = count
        self.save()

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self.topics[name].configs = dict(configs)
        self.save()

    # -------------------------------------------------------------- producer ids

    def allocate_producer_id(self, block_size: int = 1000) -> int:
        """A producer id never handed out before, even across restarts: the end of the
        current block is persisted before any id of the block is used."""
        if self.next_producer_id >= self.producer_id_block_end:
            self.producer_id_block_end = self.next_producer_id + block_size
            self.save()
        pid = self.next_producer_id
        self.next_producer_id += 1
        return pid
