"""The broker: metadata, the log manager, the partitions, and the API registry that the
connections dispatch to. Topic operations live here so every handler shares them."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time

from ..clock import SYSTEM_CLOCK, Clock, MonotonicWallClock
from ..storage.config import LogConfig
from ..storage.dir_lock import LogDirLocks
from ..storage.manager import LogManager
from .config import BrokerConfig, ConfigError, Listener
from .config_defs import loggable
from ..security.acls import AclBinding, AclFilter, Authorizer, PatternType, ResourceType
from ..security.scram import MECHANISMS as SCRAM_MECHANISMS
from .dynamic_config import TOPIC_SYNONYMS, BrokerConfigLayers, DynamicConfigError, check_dynamic_configs, replaced
from ..coordinator.common.runtime import CoordinatorRuntime
from ..coordinator.group.classic import GroupConfig
from ..coordinator.group.consumer import ConsumerGroupConfig
from ..coordinator.group.offsets import OffsetsConfig
from ..coordinator.group.partitioner import OFFSETS_TOPIC, partition_for
from ..coordinator.group.shard import CoordinatorShard
from ..coordinator.transaction.markers import MarkerSender
from ..coordinator.transaction.partitioner import TRANSACTION_STATE_TOPIC
from ..coordinator.transaction.shard import TransactionConfig, TransactionShard
from .fetch_session import FetchSessionCache
from .group_commit import GroupCommitter
from .offsets_log import PartitionOffsetsLog, transaction_state_log
from .marker_channel import ChannelMarkerWriter
from .txn_verification import TransactionVerifier
from .txn_markers import TxnMarker, write_txn_markers
from .handlers import registry
from .metadata import (
    INTERNAL_TOPICS,
    PASSIVE_TOPIC_KEYS,
    PROTECTED_INTERNAL_CONFIGS,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    PolicyViolationError,
    TopicExistsError,
    MetadataStore,
    UnknownTopicError,
    validate_topic_configs,
    validate_topic_name,
)
from ..replication.partition import Partition
from .quotas.producer_id_quota import ProducerIdQuota
from .quotas import throttling
from .quotas.client_quotas import KEYS as QUOTA_KEYS
from .quotas.client_quotas import ClientQuotas, Entity, quota_text, quota_values
from .zookeeper_calls import in_zookeeper
from .response_cache import EncodedResponseCache

log = logging.getLogger(__name__)

CREATE_TURN_SECONDS = 0.005  # the longest CreateTopics makes partitions before others' turn


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        #: What timeouts run on (group sessions and rebalances, fetch sessions): the wall clock
        #: advanced by the monotonic one, so a step of the system clock moves no deadline.
        self.timeout_clock = MonotonicWallClock() if clock is SYSTEM_CLOCK else clock
        self.broker_id = config.broker_id
        #: The configuration in layers (dynamic over static over defaults): DescribeConfigs
        #: answers from it, dynamic broker configs change it.
        self.config_layers = BrokerConfigLayers(dict(config.props))
        #: Called with (old, new) BrokerConfig when dynamic broker configs change it.
        self.on_config_change = None
        self.config_lock = asyncio.Lock()  # AlterConfigs of broker configs, one at a time
        self.metadata = MetadataStore(config.log_dirs, config.broker_id)
        self.apis = registry()
        self.supported_versions = {k: (a.min_version, a.max_version) for k, a in self.apis.items()}
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.log_manager: LogManager | None = None
        self.producer_id_quota = ProducerIdQuota(config.producer_ids_rate)
        #: Client quotas (brook.broker.quotas.client_quotas): what is set, and the clients' measured rates.
        self.quotas = ClientQuotas(config.quota_window_num, config.quota_window_size_seconds * 1000)
        #: log.flush.before.ack: what makes appends durable before they are answered
        self.group_commit = (GroupCommitter(config.log_flush_before_ack_syncfs)
                             if config.log_flush_before_ack else None)
        self.metadata_responses = EncodedResponseCache()
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots,
                                                self.timeout_clock)
        #: The group coordinator: the runtime of the __consumer_offsets shards.
        self.coordinator: CoordinatorRuntime[CoordinatorShard] | None = None
        #: The transaction coordinator: the runtime of the __transaction_state shards, and what
        #: writes their transactions' markers.
        self.txn_coordinator: CoordinatorRuntime[TransactionShard] | None = None
        self.txn_marker_sender: MarkerSender | None = None
        #: KIP-890: asks transaction coordinators whether a partition is in a transaction
        self.txn_verifier = TransactionVerifier(self)
        self.metrics = None  # a brook.broker.metrics.BrokerMetrics when metrics.port is set
        self.dir_locks = LogDirLocks(config.log_dirs)
        #: The cluster on ZooKeeper (a brook.cluster.zk_cluster.ZkCluster) when zookeeper.connect
        #: is set; None for the embedded single node.
        self.cluster = None
        self._cluster_user_scram: dict[str, dict[str, str]] = {}  # see user_scram()
        #: The ACL authorizer (brook.security.acls.Authorizer) when authorizer.class.name
        #: selects it, with the ACLs as stored; None: everything is allowed (see authz.py).
        self.authorizer: Authorizer | None = None
        #: Replication in a cluster (a brook.replication.replica_manager.ReplicaManager), else None.
        self.replicas = None
        #: In a cluster, called with (log dir, error) when a write to a log dir failed (the
        #: server steps down); None on a single node, which refuses writes and keeps serving.
        self.on_log_dir_failure = None
        self._creating: dict[str, int] = {}  # topic -> partitions being created (in slices)
        self._producer_ids = (0, -1)  # in a cluster: the next id and the end of this broker's block
        self._producer_id_lock = asyncio.Lock()
        #: Creations of coordinators' topics under way in a cluster, by topic.
        self._creating_internal: dict[str, asyncio.Task] = {}

    # ------------------------------------------------------------ lifecycle

    def open(self, cluster_id: str | None = None) -> None:
        """Lock the log dirs (`LogDirInUseError` if another broker has them) unless `lock`
        did, then load metadata and every log (recovering after a crash). `cluster_id`: the
        cluster's, from ZooKeeper (log dirs of another cluster refuse to load)."""
        if not self.dir_locks.held:
            self.dir_locks.acquire()
        try:
            self._load(cluster_id)
        except BaseException:
            self.close()
            raise

    def lock(self) -> None:
        """Lock the log dirs ahead of `open` (a broker joining a cluster fails on dirs in use
        before it waits for ZooKeeper)."""
        self.dir_locks.acquire()

    @property
    def controller_id(self) -> int:
        """The controller DescribeCluster names: the elected one in a cluster (-1 while there
        is none), else this broker."""
        return self.broker_id if self.cluster is None else self.cluster.view.controller_id

    def _load(self, cluster_id: str | None = None) -> None:
        self.metadata.load(cluster_id)
        if self.config.acl_authorizer:  # (in a cluster, ZooKeeper's: load_cluster_acls)
            self.authorizer = Authorizer(self.config.super_users, self.config.allow_everyone_if_no_acl_found,
                                         (AclBinding.from_json(b) for b in self.metadata.acls)
                                         if cluster_id is None else ())
        if cluster_id is None:  # in a cluster they are ZooKeeper's (load_cluster_broker_configs)
            stored = self.metadata.broker_configs
            self.use_dynamic_configs(stored.get("", {}), stored.get(str(self.broker_id), {}))
            self.quotas.replace_all({Entity.from_path(path): values
                                     for path, values in self.metadata.client_quotas.items()})
            throttling.install(self)
        self.log_manager = LogManager(self.config.log_dirs, self.config.log_config, clock=self.clock,
                                      manager_config=self.config.manager_config,
                                      topic_config=self.topic_log_config)
        self.log_manager.startup()
        for tp in list(self.log_manager.logs):
            tm = self.metadata.get(tp[0])
            if tm is None or tp[1] >= tm.partitions:
                # A topic deleted just before a crash: its logs go too, so a new topic of the
                # same name never shows the old records.
                log.warning("deleting log %s-%d: its topic no longer exists", *tp)
                self.log_manager.delete_log(*tp)
        if cluster_id is not None:
            # In a cluster this broker holds the partitions the controller gives it: the logs
            # it has wait, leaderless and at no epoch, for the controller's word.
            high_watermarks = self.log_manager.read_high_watermarks()
            for tp in list(self.log_manager.logs):
                p = Partition(tp[0], tp[1], self.log_manager.logs[tp], leader_epoch=-1)
                p.high_watermark = min(high_watermarks.get(tp, 0), p.log_end_offset)
                self.partitions[tp] = p
        else:
            for tm in self.metadata.topics.values():
                for i in range(tm.partitions):
                    self._open_partition(tm.name, i)
        # The group coordinator: one shard per partition of __consumer_offsets (the topic's own
        # count when it exists, as Kafka does, else offsets.topic.num.partitions).
        tm = self.metadata.get(OFFSETS_TOPIC)
        self.coordinator = CoordinatorRuntime(
            tm.partitions if tm else self.config.offsets_topic_num_partitions,
            PartitionOffsetsLog(self), self.timeout_clock, self._new_coordinator_shard,
            topic=OFFSETS_TOPIC, partitioner=partition_for, lease=self._may_coordinate)
        tm = self.metadata.get(TRANSACTION_STATE_TOPIC)
        self.txn_coordinator = CoordinatorRuntime(
            tm.partitions if tm else self.config.transaction_state_log_num_partitions,
            transaction_state_log(self), self.timeout_clock, self._new_transaction_shard,
            topic=TRANSACTION_STATE_TOPIC, partitioner=partition_for, lease=self._may_coordinate)
        self.txn_marker_sender = MarkerSender(self.txn_coordinator,
                                              ChannelMarkerWriter(self, local=self._write_markers_here),
                                              partition_exists=self.partition_exists)

    def _may_coordinate(self) -> bool:
        """Whether this broker may answer coordinator requests (groups, transactions) now:
        always on a single node; in a cluster, while its ZooKeeper session is known to be alive
        (a broker that was paused past it answers NOT_COORDINATOR until ZooKeeper answers it
        again, or until it finds the session expired and gives up its leaderships)."""
        return self.cluster is None or self.cluster.lease_holds()

    def _new_coordinator_shard(self) -> CoordinatorShard:
        c = self.config
        return CoordinatorShard(
            GroupConfig(min_session_timeout_ms=c.group_min_session_timeout_ms,
                        max_session_timeout_ms=c.group_max_session_timeout_ms,
                        max_size=c.group_max_size,
                        initial_rebalance_delay_ms=c.group_initial_rebalance_delay_ms),
            OffsetsConfig.from_broker(c),
            consumer_config=ConsumerGroupConfig(
                session_timeout_ms=c.group_consumer_session_timeout_ms,
                heartbeat_interval_ms=c.group_consumer_heartbeat_interval_ms,
                max_size=c.group_consumer_max_size, assignors=c.group_consumer_assignors,
                migration_policy=c.group_consumer_migration_policy))

    def _new_transaction_shard(self) -> TransactionShard:
        c = self.config
        return TransactionShard(TransactionConfig(c.transaction_max_timeout_ms,
                                                  c.transactional_id_expiration_ms),
                                markers=self.txn_marker_sender.send)

    async def _write_markers_here(self, request, partitions):
        """The coordinator's markers on partitions this broker leads, written in process (a
        single node whose listeners all need SASL or TLS could not send them to itself)."""
        marker = TxnMarker(request.producer_id, request.producer_epoch, request.coordinator_epoch,
                           request.commit, tuple(partitions))
        results = await write_txn_markers(self, [marker])
        return {(topic, index): code for (_, topic, index), code in results.items()}

    def partition_exists(self, topic: str, partition: int) -> bool:
        """Whether a partition exists (a transaction's markers are owed to existing ones only):
        in a cluster, unless the controller's last picture lacks it."""
        if self.replicas is not None:
            return self.replicas.cache.may_exist(topic, partition)
        return 0 <= partition < self.partition_count(topic)

    def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has (0: no such topic)."""
        tm = self.metadata.get(topic)
        return tm.partitions if tm is not None else 0

    def ensure_offsets_topic(self) -> bool:
        """Create `__consumer_offsets` on first use (FindCoordinator or a group request), as
        Kafka does: internal, compacted, offsets.topic.* partitions and segment size. False if
        it cannot be created."""
        return self._ensure_coordinator_topic(OFFSETS_TOPIC, self.coordinator.num_partitions,
                                              self.offsets_topic_configs(),
                                              self.config.offsets_topic_replication_factor)

    def offsets_topic_configs(self) -> dict[str, str]:
        return {"cleanup.policy": "compact",
                "segment.bytes": str(self.config.offsets_topic_segment_bytes),
                "compression.type": "producer"}

    def ensure_transaction_topic(self) -> bool:
        """Create `__transaction_state` on first use (FindCoordinator for a transactional id,
        a transactional request), as Kafka does: internal, compacted,
        transaction.state.log.* partitions, replication, min.insync.replicas and segment
        size. False while it does not exist."""
        return self._ensure_coordinator_topic(
            TRANSACTION_STATE_TOPIC, self.txn_coordinator.num_partitions,
            self.transaction_topic_configs(), self.config.transaction_state_log_replication_factor)

    def transaction_topic_configs(self) -> dict[str, str]:
        c = self.config
        configs = {"cleanup.policy": "compact",
                   "segment.bytes": str(c.transaction_state_log_segment_bytes),
                   "compression.type": "uncompressed",
                   "unclean.leader.election.enable": "false"}
        if self.replicas is not None:  # (a single node has one replica: the default of 1)
            configs["min.insync.replicas"] = str(c.transaction_state_log_min_isr)
        return configs

    def _ensure_coordinator_topic(self, name: str, partitions: int, configs: dict[str, str],
                                  replication_factor: int) -> bool:
        if self.replicas is not None:
            return self._ensure_replicated_topic(name, partitions, configs, replication_factor)
        if self.metadata.get(name) is not None:
            return True
        try:
            self.create_topic(name, partitions, configs, internal=True)
        except Exception:
            log.exception("cannot create %s", name)
            return False
        return True

    def _ensure_replicated_topic(self, name: str, partitions: int, configs: dict[str, str],
                                 replication_factor: int) -> bool:
        """In a cluster: whether a coordinator's topic exists; if not, its creation is started
        (once at a time) and the caller answers COORDINATOR_NOT_AVAILABLE meanwhile, as Kafka
        does until enough brokers are alive for its replication factor."""
        if name in self.replicas.cache.topics:
            return True
        task = self._creating_internal.get(name)
        if task is None or task.done():
            self._creating_internal[name] = asyncio.get_running_loop().create_task(
                self._create_replicated_topic(name, partitions, configs, replication_factor))
        return False

    async def _create_replicated_topic(self, name: str, partitions: int, configs: dict[str, str],
                                       rf: int) -> None:
        from .cluster_topics import TopicRefused, create_topic
        live = len(self.cluster.view.brokers)
        if live < rf:
            log.warning("%s needs %d live brokers (its replication factor), %d are alive: its "
                        "coordinator waits", name, rf, live)
            return
        try:
            await create_topic(self, name, partitions, rf, configs, internal=True)
        except TopicRefused as exc:
            if exc.code != 36:  # TOPIC_ALREADY_EXISTS: another broker made it
                log.warning("cannot create %s: %s", name, exc)

    def checkpoint_high_watermarks(self) -> None:
        """In a cluster: the replicas' high watermarks, for the next start."""
        if self.replicas is not None and self.log_manager is not None:
            self.log_manager.checkpoint_high_watermarks(
                {tp: p.high_watermark for tp, p in self.partitions.items()})

    def close(self) -> None:
        try:
            if self.log_manager is not None and self.log_manager.started:
                self.checkpoint_high_watermarks()
                self.log_manager.shutdown()
            self.metadata.close()
        finally:
            self.dir_locks.release()  # last: the dirs are the next broker's once all is written

    def tick(self) -> int:
        """Run due periodic log work; returns the delay in ms until the next is due."""
        lm = self.log_manager
        now = self.clock.milliseconds()
        lm.tick(now)
        return max(0, lm.next_due_ms() - self.clock.milliseconds())

    # ------------------------------------------------------------ partitions and topics

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def _open_partition(self, topic: str, index: int) -> Partition:
        lg = self.log_manager.get_or_create_log(topic, index)
        p = Partition(topic, index, lg)
        self.partitions[(topic, index)] = p
        return p

    def open_replica(self, topic: str, index: int) -> Partition:
        """A partition the controller gives this broker in a cluster (its topic is known)."""
        lg = self.log_manager.get_or_create_log(topic, index)
        p = Partition(topic, index, lg, leader_epoch=-1)
        self.partitions[(topic, index)] = p
        return p

    async def ensure_replicated_topic(self, name: str, topic_id) -> None:
        """Know a cluster topic locally (its id, partition count and configs, from ZooKeeper)
        before holding partitions of it."""
        tm = self.metadata.get(name)
        if tm is not None:
            return
        zk = self.cluster.client
        assignment, configs = await asyncio.to_thread(
            lambda: (zk.read_topic(name), zk.read_topic_config(name)))
        count = max(assignment.partitions) + 1 if assignment and assignment.partitions else 1
        if self.metadata.get(name) is None:
            self.metadata.create_topic(name, count, configs, internal=name in INTERNAL_TOPICS,
                                       topic_id=topic_id)
            log.info("topic %s (%d partitions) is replicated here", name, count)

    def topic_log_config(self, topic: str) -> LogConfig:
        tm = self.metadata.get(topic)
        overrides = {k: v for k, v in (tm.configs if tm else {}).items() if k not in PASSIVE_TOPIC_KEYS}
        return self.config.log_config.with_overrides(overrides)

    def log_dir_failed(self, directory: str, exc: BaseException) -> None:
        """A write under `directory` (a partition's log directory) failed with a storage
        error: in a cluster, the log dir is offline and the broker steps down."""
        if self.on_log_dir_failure is not None:
            parent = os.path.dirname(os.path.abspath(directory))
            self.on_log_dir_failure(parent, exc)

    def min_insync_replicas(self, topic: str) -> int:
        """The topic's min.insync.replicas, else the broker's (1 where neither parses)."""
        tm = self.metadata.get(topic)
        try:
            return int((tm.configs if tm else {}).get(
                "min.insync.replicas", self.config.props.get("min.insync.replicas", "1")))
        except ValueError:
            return 1

    def topic_config_values(self, topic: str, overrides: dict[str, str]) -> dict[str, str]:
        """Every topic config key with its effective value (DescribeConfigs)."""
        cfg = validate_topic_configs({k: v for k, v in overrides.items() if k not in PASSIVE_TOPIC_KEYS},
                                     self.config.log_config)
        values = cfg.to_topic_props()
        values.update(PASSIVE_TOPIC_KEYS)
        props = self.config.props  # a broker-level value a topic inherits (min.insync.replicas)
        for key in PASSIVE_TOPIC_KEYS:
            broker_key = (TOPIC_SYNONYMS.get(key) or [None])[0]
            if broker_key in props:
                values[key] = props[broker_key]
        values.update({k: v for k, v in overrides.items() if k in PASSIVE_TOPIC_KEYS})
        return values

    # ------------------------------------------------------------ creating partitions

    def check_new_topic(self, name: str, partitions: int, configs: dict[str, str], *,
                        internal: bool = False) -> None:
        """Everything a topic's creation checks before any file is made (MetadataError)."""
        validate_topic_name(name)
        if name in INTERNAL_TOPICS and not internal:
            # Whoever created it first would get an ordinary topic (deletable, not compacted).
            raise InvalidRequestError(f"Creation of internal topic {name} is prohibited: the broker "
                                      "creates it, with its proper configuration, on first use.")
        validate_topic_configs(configs, self.config.log_config)
        if partitions < 1:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        if self.metadata.get(name) is not None or name in self._creating:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        other = self.metadata.colliding_topic(name)
        if other is not None:
            raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")
        if not internal:  # the coordinator's topic is made whatever the clients took
            self.check_room(partitions)

    def check_room(self, adding: int) -> None:
        """`adding` partitions fit under max.broker.partitions. (Not under the open files limit:
        a partition holds no descriptor of its own, its segment files are opened through the
        bounded cache of storage.fd_cache.)"""
        have = len(self.partitions) + sum(self._creating.values())
        limit = self.config.max_broker_partitions
        if have + adding > limit:
            raise InvalidPartitionsError(
                f"{adding} more partition(s) would bring this broker to {have + adding}, over "
                f"max.broker.partitions={limit}")

    def log_config_of(self, configs: dict[str, str]) -> LogConfig:
        """The log config of a topic with these overrides (before its metadata exists)."""
        return self.config.log_config.with_overrides(
            {k: v for k, v in configs.items() if k not in PASSIVE_TOPIC_KEYS})

    def _open_logs(self, name: str, indexes: range, config: LogConfig | None = None) -> list:
        """The logs of these partitions, made now; all or none (a failure removes those made)."""
        logs = []
        try:
            for i in indexes:
                logs.append(self.log_manager.get_or_create_log(name, i, config))
        except BaseException:
            self.discard_logs(name, indexes[:len(logs)])
            raise
        return logs

    def discard_logs(self, name: str, indexes) -> None:
        for i in indexes:
            try:
                self.log_manager.delete_log(name, i)
            except Exception:
                log.exception("cannot remove the log of %s-%d after a failed creation", name, i)

    async def open_logs_in_slices(self, name: str, indexes: range, config: LogConfig | None = None) -> list:
        """`_open_logs` in turns of CREATE_TURN_SECONDS, the event loop serving others between
        them; the partitions count against the broker's room meanwhile (the caller reserved
        them with `reserve`)."""
        logs: list = []
        try:
            turn = time.perf_counter()
            for i in indexes:
                logs.append(self.log_manager.get_or_create_log(name, i, config))
                if time.perf_counter() - turn > CREATE_TURN_SECONDS:
                    await asyncio.sleep(0)
                    turn = time.perf_counter()
        except BaseException:  # an error, or the request cancelled: nothing is left behind
            self.discard_logs(name, indexes[:len(logs)])
            raise
        return logs

    def reserve(self, name: str, partitions: int) -> None:
        """Count `partitions` of `name` as being created (released by `release`)."""
        self._creating[name] = self._creating.get(name, 0) + partitions

    def release(self, name: str) -> None:
        self._creating.pop(name, None)

    def register_topic(self, name: str, configs: dict[str, str], logs: list, *, internal: bool = False):
        """Make a topic whose logs are all open known: metadata, then its partitions, with no
        await between them (a crash before the metadata leaves logs that the next start
        deletes as those of no topic)."""
        try:
            tm = self.metadata.create_topic(name, len(logs), configs, internal=internal)
        except BaseException:
            self.discard_logs(name, range(len(logs)))
            raise
        for i, lg in enumerate(logs):
            self.partitions[(name, i)] = Partition(name, i, lg)
        n = len(logs)
        log.info("created topic %s with %d partition%s", name, n, "" if n == 1 else "s")
        return tm

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None, *,
                     validate_only: bool = False, internal: bool = False):
        """Create a topic at once (auto-creation, the offsets topic; CreateTopics creates in
        slices instead). All or nothing: a partition that cannot be made leaves no trace."""
        configs = dict(configs or {})
        self.check_new_topic(name, partitions, configs, internal=internal)
        if validate_only:
            return None
        return self.register_topic(name, configs, self._open_logs(name, range(partitions),
                                                                  self.log_config_of(configs)),
                                   internal=internal)

    def delete_topic(self, name: str) -> None:
        """Delete a topic's metadata and logs; its name stays reserved until
        ``complete_topic_deletions`` has removed the groups' offsets of it."""
        tm = self.metadata.delete_topic(name)  # metadata first: a crash now still deletes the logs
        for i in range(tm.partitions):
            p = self.partitions.pop((name, i), None)
            if p is not None:
                p._notify()  # wake waiting fetches; they answer UNKNOWN_TOPIC_OR_PARTITION
            self.log_manager.delete_log(name, i)
        log.info("deleted topic %s", name)

    async def new_producer_id(self) -> int:
        """A producer id never handed out before, for an idempotent producer or a transactional
        id: on a single node from the metadata's blocks, in a cluster from the blocks this
        broker claims in ZooKeeper."""
        if self.cluster is not None:
            return await self.allocate_cluster_producer_id()
        return self.metadata.allocate_producer_id()

    async def allocate_cluster_producer_id(self) -> int:
        """A producer id no broker of the cluster hands out twice: from a block this broker
        claimed in ZooKeeper (/latest_producer_id_block), a new block when it runs out."""
        async with self._producer_id_lock:
            nxt, end = self._producer_ids
            if nxt > end:
                client = self.cluster.client
                nxt, end = await in_zookeeper(client, client.allocate_producer_id_block, self.broker_id)
                log.info("claimed producer ids %d to %d", nxt, end)
            self._producer_ids = (nxt + 1, end)
            return nxt

    def delete_replica(self, name: str, index: int) -> None:
        """In a cluster: drop this broker's replica of a partition (StopReplica with delete),
        and the topic's local metadata with its last partition here."""
        p = self.partitions.pop((name, index), None)
        if p is not None:
            p._notify()
            self.log_manager.delete_log(name, index)
        if self.metadata.get(name) is not None and not any(t == name for t, _ in self.partitions):
            self.metadata.delete_topic(name)
            self.metadata.finish_deletion(name)
            log.info("deleted topic %s (no partition of it left here)", name)

    async def drop_topics_not_in(self, names: set[str]) -> None:
        """At start in a cluster: logs of topics ZooKeeper no longer has (deleted while this
        broker was down) go, and the others take their configs as ZooKeeper has them now."""
        for tp in [tp for tp in self.partitions if tp[0] not in names]:
            log.warning("deleting log %s-%d: its topic was deleted while this broker was away", *tp)
            self.delete_replica(*tp)
        zk = self.cluster.client
        for name in [n for n in self.metadata.topics if n in names]:
            self.apply_topic_config(name, await asyncio.to_thread(zk.read_topic_config, name))

    def apply_topic_config(self, name: str, configs: dict[str, str]) -> None:
        """A topic's configs as ZooKeeper has them (a cluster), applied if this broker holds
        the topic."""
        tm = self.metadata.get(name)
        if tm is None or dict(tm.configs) == configs:
            return
        try:
            self.set_topic_configs(name, configs)
        except Exception as exc:  # noqa: BLE001 - checked when written; a bad one is logged
            log.warning("cannot apply the configs of topic %s from ZooKeeper: %s", name, exc)
            return
        log.info("topic %s: configs now %s", name, configs)

    async def complete_topic_deletions(self) -> bool:
        """Tombstone every group's committed offsets of topics that no longer exist, on every
        partition of __consumer_offsets once loaded, then free the names of the topics marked
        for deletion. Run after DeleteTopics and at every start, so a crash between a topic's
        deletion and its offsets' tombstones is finished by the next start, and a topic created
        again under the name never starts its groups at the old offsets. False (names kept
        reserved) when a partition could not be written."""
        runtime = self.coordinator
        await runtime.wait_loaded()
        exists = self.metadata.topics.__contains__
        if self.replicas is not None:
            # A cluster: a topic exists if the controller says so (this broker holds only some).
            # Until the controller has spoken, nothing is known to be gone.
            cache = self.replicas.cache
            while cache.version == 0:
                await asyncio.sleep(0.1)
            exists = lambda t: t in cache.topics or t in self.metadata.topics  # noqa: E731
        complete = all(c.state.value == "active" for c in runtime.contexts.values())
        count = 0
        for partition, outcome in await runtime.run_all(
                lambda shard, now: shard.delete_offsets_of_missing_topics(exists, now)):
            if isinstance(outcome, BaseException):
                complete = False
                log.warning("%s-%d: removing the committed offsets of deleted topics failed: %s",
                            OFFSETS_TOPIC, partition, outcome)
            else:
                count += outcome
        if count:
            log.info("removed %d committed offset(s) of deleted topics", count)
        if complete:
            for name in list(self.metadata.deleting):
                self.metadata.finish_deletion(name)
        return complete

    def check_new_partitions(self, name: str, count: int):
        tm = self.metadata.get(name)
        if tm is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        if tm.internal:
            # Groups map to partitions by the count: a new count moves nearly every group
            # away from its committed offsets.
            raise InvalidRequestError(f"The number of partitions of internal topic {name} cannot "
                                      f"be changed (groups are placed by it).")
        if count <= tm.partitions:
            raise InvalidPartitionsError(
                f"Topic currently has {tm.partitions} partitions, which is higher than or equal to "
                f"the requested {count}.")
        if name in self._creating:
            raise InvalidPartitionsError(f"Topic '{name}' is having partitions added already.")
        self.check_room(count - tm.partitions)
        return tm

    async def create_partitions(self, name: str, count: int, *, validate_only: bool = False) -> None:
        tm = self.check_new_partitions(name, count)
        if validate_only:
            return
        old = tm.partitions
        self.reserve(name, count - old)
        try:
            logs = await self.open_logs_in_slices(name, range(old, count))
        finally:
            self.release(name)
        if self.metadata.get(name) is not tm:  # deleted (or replaced) meanwhile
            self.discard_logs(name, range(old, count))
            raise UnknownTopicError(f"Topic '{name}' was deleted while its partitions were added.")
        try:
            self.metadata.set_partitions(name, count)
        except BaseException:
            self.discard_logs(name, range(old, count))
            raise
        for i, lg in zip(range(old, count), logs):
            self.partitions[(name, i)] = Partition(name, i, lg)
        log.info("topic %s now has %d partitions", name, count)

    def set_topic_configs(self, name: str, configs: dict[str, str], *, validate_only: bool = False) -> None:
        cfg = validate_topic_configs({k: v for k, v in configs.items()}, self.config.log_config)
        tm = self.metadata.get(name)
        if tm is not None and tm.internal:
            self._check_internal_configs(tm, cfg)
        if validate_only:
            return
        self.metadata.set_configs(name, configs)
        self.log_manager.update_config(name, cfg)

    def _check_internal_configs(self, tm, cfg: LogConfig) -> None:
        """An internal topic keeps what its coordinator relies on: compaction only, no
        retention, and batches as large as the broker takes (a group's metadata record)."""
        current = self.topic_log_config(tm.name)
        for attr in PROTECTED_INTERNAL_CONFIGS:
            if getattr(cfg, attr) != getattr(current, attr):
                key = attr.replace("_", ".")
                raise PolicyViolationError(f"{key} of internal topic {tm.name} cannot be changed "
                                           f"(it stays {getattr(current, attr)})")
        floor = self.config.message_max_bytes
        if cfg.max_message_bytes < floor:
            raise PolicyViolationError(
                f"max.message.bytes of internal topic {tm.name} cannot be below message.max.bytes "
                f"({floor}): the group coordinator's records must fit")

    # ------------------------------------------------------------ SCRAM credentials

    def user_scram(self) -> dict[str, dict[str, str]]:
        """user -> mechanism -> Kafka's text of its SCRAM credential: the metadata's on the
        single node; in a cluster, ZooKeeper's /config/users as last read."""
        return self.metadata.user_scram if self.cluster is None else self._cluster_user_scram

    async def set_user_scram(self, changes: dict[str, dict[str, str]]) -> None:
        """Users' new SCRAM credentials ({} removes a user's), durable before this returns. In
        a cluster each user's node keeps its other configs (quotas) and the other brokers
        hear of it through /config/changes (ZooKeeperUnavailable when ZooKeeper fails it)."""
        if self.cluster is None:
            with self.metadata.batch():
                for user, credentials in changes.items():
                    self.metadata.set_user_scram(user, credentials)
            return
        zk = self.cluster.client

        def write() -> None:
            for user, credentials in changes.items():
                configs = {k: v for k, v in zk.read_user_config(user).items() if k not in SCRAM_MECHANISMS}
                zk.write_user_config(user, {**configs, **credentials})

        await in_zookeeper(zk, write)
        for user, credentials in changes.items():
            self._set_cluster_user_scram(user, credentials)

    async def load_cluster_user_scram(self, user: str | None = None) -> None:
        """In a cluster: the SCRAM credentials in /config/users (one user's, on its change
        notification; everyone's at start)."""
        zk = self.cluster.client
        if user is None:
            users = await asyncio.to_thread(zk.read_user_configs)
            self._cluster_user_scram = {}
        else:
            users = {user: await asyncio.to_thread(zk.read_user_config, user)}
        for name, configs in users.items():
            self._set_cluster_user_scram(name, {k: v for k, v in configs.items() if k in SCRAM_MECHANISMS})

    def _set_cluster_user_scram(self, user: str, credentials: dict[str, str]) -> None:
        if credentials:
            self._cluster_user_scram[user] = dict(credentials)
        else:
            self._cluster_user_scram.pop(user, None)

    # ------------------------------------------------------------ client quotas

    async def set_client_quotas(self, changes: dict[Entity, dict[str, float]]) -> None:
        """Entities' new quotas ({} removes an entity's), durable before this returns. In a
        cluster they go to ZooKeeper's /config/users/..., /config/clients/... (a user's node
        keeps its SCRAM credentials) and the other brokers hear of them through /config/changes
        (ZooKeeperUnavailable when ZooKeeper fails it)."""
        if self.cluster is None:
            with self.metadata.batch():
                for entity, values in changes.items():
                    self.metadata.set_client_quota(entity.path(), values)
        else:
            zk = self.cluster.client

            def write() -> None:
                for entity, values in changes.items():
                    path = entity.path()
                    others = {k: v for k, v in zk.read_entity_config(path).items()
                              if k not in QUOTA_KEYS}  # SCRAM credentials stay
                    zk.write_entity_config(path, {**others, **{k: quota_text(k, v)
                                                               for k, v in values.items()}})

            await in_zookeeper(zk, write)
        for entity, values in changes.items():
            self.quotas.replace(entity, values)
        throttling.install(self)

    async def load_cluster_quotas(self, entity_path: str | None = None) -> None:
        """In a cluster: the quotas in ZooKeeper's /config (one entity's, on its change
        notification; everyone's at start)."""
        zk = self.cluster.client
        if entity_path is None:
            found = await asyncio.to_thread(zk.read_quota_entities)
        else:
            found = {entity_path: await asyncio.to_thread(zk.read_entity_config, entity_path)}
        entities = {}
        for path, configs in found.items():
            try:
                entities[Entity.from_path(path)] = quota_values(configs)
            except ValueError:
                log.warning("ignoring /config/%s: not a client quota entity", path)
        if entity_path is None:
            self.quotas.replace_all(entities)
        else:
            for entity, values in entities.items():
                self.quotas.replace(entity, values)
        throttling.install(self)
    # ------------------------------------------------------------ ACLs

    async def create_acls(self, bindings: list[AclBinding]) -> None:
        """New ACL bindings, durable before this returns, then in force."""
        if self.cluster is not None:
            await self._change_cluster_acls(bindings, add=True)
            return
        present = set(self.authorizer.bindings())
        new = [b for b in dict.fromkeys(bindings) if b not in present]
        if new:
            self.metadata.add_acls([b.to_json() for b in new])
        for b in new:
            self.authorizer.add(b)
            log.info("ACL added: %s", b.describe())

    async def delete_acls(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """The bindings each filter matched, removed (durably) together."""
        matched = [self.authorizer.matching(f) for f in filters]
        gone = list(dict.fromkeys(b for found in matched for b in found))
        if self.cluster is not None:
            # (ZooKeeper's ACLs as this broker last heard of them, as Kafka's brokers filter)
            await self._change_cluster_acls(gone, add=False)
            return matched
        if gone:
            self.metadata.remove_acls([b.to_json() for b in gone])
        for b in gone:
            self.authorizer.remove(b)
            log.info("ACL removed: %s", b.describe())
        return matched

    async def _change_cluster_acls(self, bindings: list[AclBinding], add: bool) -> None:
        """In a cluster: each resource's ACLs rewritten in ZooKeeper (conditionally, with a
        change notification the other brokers follow), then in force here."""
        from ..cluster import zk_acls
        by_resource: dict[tuple, set] = {}
        for b in bindings:
            by_resource.setdefault((b.resource_type, b.pattern_type, b.name), set()).add(
                (b.principal, b.host, b.operation, b.permission))
        zk = self.cluster.client

        def write() -> dict[tuple, bytes | None]:
            written = {}
            for (rtype, pattern, name), entries in by_resource.items():
                def change(data, entries=entries):
                    current = zk_acls.decode_acls(data)
                    new = current | entries if add else current - entries
                    return zk_acls.encode_acls(new) if new else None
                written[rtype, pattern, name] = zk.update_acls(
                    zk_acls.resource_path(rtype, pattern, name), change,
                    zk_acls.change_node(rtype, pattern, name))
            return written

        for (rtype, pattern, name), data in (await asyncio.to_thread(write)).items():
            self.authorizer.set_resource(rtype, pattern, name, zk_acls.decode_acls(data))
        for b in bindings:
            log.info("ACL %s: %s", "added" if add else "removed", b.describe())

    async def load_cluster_acls(self, resource=None) -> None:
        """In a cluster: the ACLs in ZooKeeper (one resource's, on its change notification;
        all of them at start)."""
        from ..cluster import zk_acls
        zk = self.cluster.client
        if resource is None:
            found = await asyncio.to_thread(zk.read_all_acls)
            self.authorizer.clear()
            for root, type_dir, name, data in found:
                try:
                    rtype = zk_acls.lookup(ResourceType, type_dir)
                    entries = zk_acls.decode_acls(data)
                except (ValueError, KeyError) as exc:
                    log.warning("ignoring the ACLs of %s/%s/%s: %s", root, type_dir, name, exc)
                    continue
                pattern = PatternType.LITERAL if root == zk_acls.ACLS else PatternType.PREFIXED
                self.authorizer.set_resource(rtype, pattern, name, entries)
            log.info("%d ACL(s) read from ZooKeeper", sum(1 for _ in self.authorizer.bindings()))
            return
        rtype, pattern, name = resource
        path = zk_acls.resource_path(rtype, pattern, name)
        data, _ = await asyncio.to_thread(zk.read_acls, path)
        try:
            entries = zk_acls.decode_acls(data)
        except (ValueError, KeyError) as exc:
            log.warning("ignoring the ACLs of %s: %s", path, exc)
            return
        self.authorizer.set_resource(rtype, pattern, name, entries)

    # ------------------------------------------------------------ dynamic broker configs

    def check_broker_configs(self, default: bool, configs: dict[str, str]):
        """(layers, BrokerConfig) with the cluster-wide default layer (`default`) or this
        broker's dynamic layer replaced by `configs`; DynamicConfigError if they are refused."""
        check_dynamic_configs(configs)
        layers = replaced(self.config_layers, default, configs)
        try:
            return layers, BrokerConfig.from_props(layers.merged())
        except ConfigError as exc:
            raise DynamicConfigError(str(exc)) from None

    def set_broker_configs(self, default: bool, configs: dict[str, str], *,
                           validate_only: bool = False) -> None:
        """AlterConfigs on the single node: checked, persisted in the metadata, then applied."""
        layers, cfg = self.check_broker_configs(default, configs)
        if validate_only:
            return
        self.metadata.set_broker_configs("" if default else str(self.broker_id), configs)
        self.use_config(layers, cfg)

    def use_dynamic_configs(self, cluster_default: dict[str, str], per_broker: dict[str, str]) -> None:
        """Dynamic configs as stored (the metadata, or ZooKeeper in a cluster), applied; any
        that the broker cannot take now are logged and left out, as Kafka does."""
        if (cluster_default, per_broker) == (self.config_layers.cluster_default,
                                             self.config_layers.per_broker):
            return
        layers = self.config_layers
        for default, configs in ((True, cluster_default), (False, per_broker)):
            try:
                check_dynamic_configs(configs)
                layers = replaced(layers, default, configs)
                BrokerConfig.from_props(layers.merged())  # ConfigError if they make no valid configuration
            except (DynamicConfigError, ConfigError) as exc:
                log.warning("dynamic broker configs %s ignored: %s", loggable(configs), exc)
                layers = replaced(layers, default, {})
        self.use_config(layers, BrokerConfig.from_props(layers.merged()))

    def use_config(self, layers: BrokerConfigLayers, cfg: BrokerConfig) -> None:
        """Run on `cfg` from now on: the dynamic keys take effect (the log-level defaults of
        every log without its own override, the controller's unclean elections, connection
        limits); the others cannot have changed."""
        old = self.config
        cfg = dataclasses.replace(cfg, listeners=old.listeners,
                                  advertised_listeners=old.advertised_listeners)
        self.config_layers = layers
        self.config = cfg
        lm = self.log_manager
        if lm is not None:
            lm.default_config = cfg.log_config
            for topic in {t for t, _ in lm.logs}:
                try:
                    lm.update_config(topic, self.topic_log_config(topic))
                except ValueError as exc:
                    log.warning("topic %s keeps its log config: %s", topic, exc)
        if self.cluster is not None:
            self.cluster.config = cfg  # a controller elected later starts on it
            if self.cluster.controller is not None:
                self.cluster.controller.unclean = cfg.unclean_leader_election_enable
        if self.on_config_change is not None:
            self.on_config_change(old, cfg)
        log.info("dynamic broker configs: this broker's %s, the cluster-wide defaults %s",
                 loggable(layers.per_broker), loggable(layers.cluster_default))

    async def load_cluster_broker_configs(self) -> None:
        """In a cluster: the dynamic configs in ZooKeeper (/config/brokers/<default> and
        /config/brokers/<id>), applied; at start and on every change notification of them."""
        zk = self.cluster.client
        cluster_default, per_broker = await asyncio.to_thread(
            lambda: (zk.read_broker_config(None), zk.read_broker_config(self.broker_id)))
        self.use_dynamic_configs(cluster_default, per_broker)

    def advertised_listener(self, connection) -> Listener:
        listeners = self.config.advertised
        name = getattr(connection, "listener_name", None)
        for l in listeners:
            if l.name == name:
                return l
        return listeners[0]
