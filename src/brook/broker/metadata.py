"""Embedded single-node metadata: the cluster id, topics with their ids, partition counts
and config overrides, the producer id block, and the dynamic broker configs (this broker's and
the cluster-wide defaults), kept in the first log dir.

On disk it is a snapshot (`brook-metadata.json`, replaced atomically) and a journal of the
changes since (`brook-metadata.log`, one JSON record per line, fsynced before a change is
answered), as Kafka's controller keeps a metadata log with snapshots: a change costs one
short append whatever the number of topics, and the journal is folded into a new snapshot
at start and whenever it holds more records than there are topics. Records set absolute
state (a topic's whole definition, a deletion, the producer id block's end), so replaying
the journal over a snapshot that already holds some of it gives the same state. A torn last
line (a crash during an append, never answered) is dropped.

Also writes Kafka's `meta.properties` (broker.id, cluster.id) in every log dir, and refuses
to start on a log dir that belongs to another cluster or broker.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from ..storage.checkpoint import atomic_write_text as _atomic_write
from ..storage.config import TOPIC_KEYS, LogConfig
from ..cluster.zk_data import new_cluster_id
from ..properties import parse_properties

log = logging.getLogger(__name__)

METADATA_FILE = "brook-metadata.json"
JOURNAL_FILE = "brook-metadata.log"
_MIN_RECORDS_TO_FOLD = 1000  # the journal is folded into a snapshot after more than this
META_PROPERTIES = "meta.properties"
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
# Topics only the broker creates, with their proper configuration, and only it writes:
# Kafka's internal topics (Topic.INTERNAL_TOPICS) and the name of its metadata log.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__cluster_metadata"})
# Internal topics' configs that the coordinator relies on: they keep their values.
PROTECTED_INTERNAL_CONFIGS = ("cleanup_policy", "retention_ms", "retention_bytes")

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


class InvalidRequestError(MetadataError):
    """INVALID_REQUEST"""


class PolicyViolationError(MetadataError):
    """POLICY_VIOLATION"""


class InconsistentClusterIdError(MetadataError):
    """The log dirs belong to another cluster than ZooKeeper's /cluster/id (Kafka's
    InconsistentClusterIdException)."""


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


def _topic_from_json(name: str, t: dict) -> TopicMetadata:
    return TopicMetadata(name, uuid.UUID(t["id"]), int(t["partitions"]), dict(t.get("configs", {})),
                         bool(t.get("internal", False)))


def _topic_record(tm: TopicMetadata) -> dict:
    return {"topic": tm.name, **tm.to_json()}


class MetadataStore:
    def __init__(self, log_dirs: tuple[str, ...], broker_id: int) -> None:
        self.log_dirs = log_dirs
        self.broker_id = broker_id
        self.path = os.path.join(log_dirs[0], METADATA_FILE)
        self.journal_path = os.path.join(log_dirs[0], JOURNAL_FILE)
        self.topics: dict[str, TopicMetadata] = {}
        #: Topics being deleted: gone for clients, their names reserved until the groups'
        #: committed offsets of them are tombstoned (a restart finishes what a crash left).
        self.deleting: dict[str, TopicMetadata] = {}
        self.generation = 0  # changes with every change applied
        self.by_id: dict[uuid.UUID, TopicMetadata] = {}
        self._by_metric_name: dict[str, str] = {}  # '.' as '_' -> topic (see colliding_topic)
        self.next_producer_id = 0
        self.producer_id_block_end = 0
        self.cluster_id = ""
        #: Dynamic broker configs of the embedded single node: "" (the cluster-wide default)
        #: and this broker's id -> their configs.
        self.broker_configs: dict[str, dict[str, str]] = {}
        #: SCRAM credentials: user -> mechanism (SCRAM-SHA-256) -> Kafka's text of the
        #: credential (salt, stored key, server key, iterations), as /config/users/<user> holds.
        self.user_scram: dict[str, dict[str, str]] = {}
        #: Client quotas: the entity's path under ZooKeeper's /config (users/alice/clients/app,
        #: brook.broker.quotas.client_quotas.Entity.path) -> quota key -> value.
        self.client_quotas: dict[str, dict[str, float]] = {}
        #: ACL bindings (brook.security.acls.AclBinding.to_json), in the order created.
        self.acls: list[dict] = []
        self._journal_fd = -1
        self._journal_records = 0
        self._pending: list[dict] = []
        self._batch_depth = 0

    # -------------------------------------------------------------- load and save

    def load(self, cluster_id: str | None = None) -> None:
        """Load the metadata; `cluster_id` is the cluster's (ZooKeeper's /cluster/id), which
        log dirs of another cluster refuse (InconsistentClusterIdError)."""
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            self.cluster_id = data["cluster_id"]
            for name, t in data.get("topics", {}).items():
                self._put_topic(_topic_from_json(name, t))
            for name, t in data.get("deleting", {}).items():
                self.deleting[name] = _topic_from_json(name, t)
            self.producer_id_block_end = int(data.get("producer_id_block_end", 0))
            self.broker_configs = {str(k): {str(a): str(b) for a, b in v.items()}
                                   for k, v in data.get("broker_configs", {}).items()}
            self.user_scram = {str(k): {str(a): str(b) for a, b in v.items()}
                               for k, v in data.get("user_scram", {}).items()}
            self.client_quotas = {str(k): {str(a): float(b) for a, b in v.items()}
                                  for k, v in data.get("client_quotas", {}).items()}
            self.acls = list(data.get("acls", []))
        self._replay_journal()
        # Ids of the block handed out before a restart are never reused.
        self.next_producer_id = self.producer_id_block_end
        self.cluster_id = self._check_meta_properties(self.cluster_id, cluster_id)
        self._journal_fd = os.open(self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._write_snapshot()  # folds the journal in (and makes its creation durable)

    def close(self) -> None:
        if self._journal_fd >= 0:
            os.close(self._journal_fd)
            self._journal_fd = -1

    def _replay_journal(self) -> None:
        try:
            with open(self.journal_path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        *lines, torn = data.split(b"\n")
        if torn:
            log.warning("%s: dropping %d bytes of a change that was being written at a crash",
                        self.journal_path, len(torn))
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
                self._apply(record)
            except (ValueError, KeyError, TypeError) as exc:
                raise MetadataError(f"{self.journal_path}: line {number} is not a metadata record "
                                    f"({exc}); the broker cannot know its topics") from None

    def _apply(self, record: dict) -> None:
        """One journal record, live or replayed."""
        self.generation += 1  # what was built from the metadata before is stale
        if "topic" in record:
            self._put_topic(_topic_from_json(record["topic"], record))
        elif "deleting" in record:
            tm = self.topics.get(record["deleting"])
            if tm is not None and str(tm.topic_id) == record["id"]:  # not a later one's
                self._remove_topic(tm.name)
                self.deleting[tm.name] = tm
        elif "delete" in record:
            self._remove_topic(record["delete"])
            self.deleting.pop(record["delete"], None)
        elif "broker_config" in record:
            configs = {str(k): str(v) for k, v in record["configs"].items()}
            if configs:
                self.broker_configs[str(record["broker_config"])] = configs
            else:
                self.broker_configs.pop(str(record["broker_config"]), None)
        elif "user_scram" in record:
            credentials = {str(k): str(v) for k, v in record["credentials"].items()}
            if credentials:
                self.user_scram[str(record["user_scram"])] = credentials
            else:
                self.user_scram.pop(str(record["user_scram"]), None)
        elif "client_quota" in record:
            values = {str(k): float(v) for k, v in record["values"].items()}
            if values:
                self.client_quotas[str(record["client_quota"])] = values
            else:
                self.client_quotas.pop(str(record["client_quota"]), None)
        elif "acls_added" in record:
            self.acls.extend(b for b in record["acls_added"] if b not in self.acls)
        elif "acls_removed" in record:
            self.acls = [b for b in self.acls if b not in record["acls_removed"]]
        elif "producer_id_block_end" in record:
            self.producer_id_block_end = max(self.producer_id_block_end, int(record["producer_id_block_end"]))
        else:
            raise KeyError(f"unknown record {sorted(record)}")

    def _record(self, record: dict) -> None:
        """Make a change durable, then apply it (inside `batch()`: apply it now, make it
        durable when the batch ends; a failed write then leaves the batch's changes applied
        in memory only, and their requests answered with the error)."""
        if self._batch_depth:
            self._apply(record)
            self._pending.append(record)
            return
        self._write([record])
        self._apply(record)
        self._maybe_fold()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Changes inside are written with one append and one fsync when it ends (a
        CreateTopics request's topics, as Kafka's controller commits them as one batch).
        Nothing inside may be answered before it ends."""
        self._batch_depth += 1
        try:
            yield
        finally:
            self._batch_depth -= 1
            if not self._batch_depth and self._pending:
                records, self._pending = self._pending, []
                self._write(records)
                self._maybe_fold()

    def _write(self, records: list[dict]) -> None:
        """Append records to the journal, durably."""
        data = "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self._journal_fd, view):]
        os.fsync(self._journal_fd)
        self._journal_records += len(records)

    def _maybe_fold(self) -> None:
        """A new snapshot of the state (records applied) once the journal outgrows it."""
        if self._journal_records > max(_MIN_RECORDS_TO_FOLD, len(self.topics)):
            self._write_snapshot()

    def _check_meta_properties(self, cluster_id: str, expected: str | None = None) -> str:
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
        if expected is not None and ids and expected not in ids:
            raise InconsistentClusterIdError(
                f"The Cluster ID {expected} doesn't match stored clusterId Some({ids.pop()}) in "
                "meta.properties. The broker is trying to join the wrong cluster. Configured "
                "zookeeper.connect may be wrong.")
        cluster_id = ids.pop() if ids else expected or new_cluster_id()
        for d in self.log_dirs:
            if found.get(d) != cluster_id:
                _atomic_write(os.path.join(d, META_PROPERTIES),
                              f"#\nversion=0\nbroker.id={self.broker_id}\ncluster.id={cluster_id}\n")
        return cluster_id

    def _write_snapshot(self) -> None:
        """Replace the snapshot with the whole state, then empty the journal it now holds."""
        data = {
            "cluster_id": self.cluster_id,
            "producer_id_block_end": self.producer_id_block_end,
            "topics": {name: t.to_json() for name, t in sorted(self.topics.items())},
            "deleting": {name: t.to_json() for name, t in sorted(self.deleting.items())},
            "broker_configs": self.broker_configs,
            "user_scram": self.user_scram,
            "client_quotas": self.client_quotas,
            "acls": self.acls,
        }
        _atomic_write(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.ftruncate(self._journal_fd, 0)
        os.fsync(self._journal_fd)
        self._journal_records = 0

    def _put_topic(self, tm: TopicMetadata) -> None:
        old = self.topics.get(tm.name)
        if old is not None and old.topic_id == tm.topic_id:  # the same topic, changed in place
            old.partitions, old.configs, old.internal = tm.partitions, tm.configs, tm.internal
            return
        if old is not None:
            self.by_id.pop(old.topic_id, None)
        self.topics[tm.name] = tm
        self.by_id[tm.topic_id] = tm
        self._by_metric_name[tm.name.replace(".", "_")] = tm.name

    def _remove_topic(self, name: str) -> TopicMetadata | None:
        tm = self.topics.pop(name, None)
        if tm is not None:
            self.by_id.pop(tm.topic_id, None)
            self._by_metric_name.pop(name.replace(".", "_"), None)
        return tm

    # -------------------------------------------------------------- topics

    def get(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def colliding_topic(self, name: str) -> str | None:
        """An existing topic whose name differs only by '.' vs '_' (their metric names collide,
        so Kafka refuses the second)."""
        other = self._by_metric_name.get(name.replace(".", "_"))
        return other if other != name else None

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None,
                     internal: bool = False, topic_id: uuid.UUID | None = None) -> TopicMetadata:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if name in self.deleting:
            raise TopicExistsError(f"topic {name!r} is marked for deletion")
        other = self.colliding_topic(name)
        if other is not None:
            raise InvalidTopicError(f"topic {name!r} collides with existing topic {other!r}")
        if partitions < 1:
            raise InvalidPartitionsError("number of partitions must be at least 1")
        tm = TopicMetadata(name, topic_id or uuid.uuid4(), partitions, dict(configs or {}), internal)
        self._record(_topic_record(tm))
        return self.topics[name]

    def delete_topic(self, name: str) -> TopicMetadata:
        """Mark a topic for deletion: it is gone for clients at once, its name stays reserved
        until ``finish_deletion``."""
        tm = self.topics.get(name)
        if tm is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        self._record({"deleting": name, "id": str(tm.topic_id)})
        return tm

    def finish_deletion(self, name: str) -> None:
        """The deleted topic's committed offsets are gone: its name is free again."""
        if name in self.deleting:
            self._record({"delete": name})

    def set_partitions(self, name: str, count: int) -> None:
        tm = self.topics[name]
        self._record(_topic_record(TopicMetadata(name, tm.topic_id, count, dict(tm.configs), tm.internal)))

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        tm = self.topics[name]
        self._record(_topic_record(TopicMetadata(name, tm.topic_id, tm.partitions, dict(configs), tm.internal)))

    # -------------------------------------------------------------- dynamic broker configs

    def set_broker_configs(self, entity: str, configs: dict[str, str]) -> None:
        """The dynamic configs of a broker (`entity` its id) or of the cluster-wide default
        (`entity` ""), replacing what was there; {} removes them."""
        self._record({"broker_config": entity, "configs": dict(configs)})

    # -------------------------------------------------------------- SCRAM credentials

    def set_user_scram(self, user: str, credentials: dict[str, str]) -> None:
        """A user's SCRAM credentials by mechanism, replacing what was there; {} removes them."""
        self._record({"user_scram": user, "credentials": dict(credentials)})

    # -------------------------------------------------------------- client quotas

    def set_client_quota(self, entity_path: str, values: dict[str, float]) -> None:
        """A quota entity's values (`entity_path` as under ZooKeeper's /config), replacing
        what was there; {} removes them."""
        self._record({"client_quota": entity_path, "values": dict(values)})
    # -------------------------------------------------------------- ACLs

    def add_acls(self, bindings: list[dict]) -> None:
        """ACL bindings (their JSON), durable before this returns; present ones are kept once."""
        self._record({"acls_added": list(bindings)})

    def remove_acls(self, bindings: list[dict]) -> None:
        self._record({"acls_removed": list(bindings)})

    # -------------------------------------------------------------- producer ids

    def allocate_producer_id(self, block_size: int = 1000) -> int:
        """A producer id never handed out before, even across restarts: the end of the
        current block is persisted before any id of the block is used."""
        if self.next_producer_id >= self.producer_id_block_end:
            self._record({"producer_id_block_end": self.next_producer_id + block_size})
        pid = self.next_producer_id
        self.next_producer_id += 1
        return pid
