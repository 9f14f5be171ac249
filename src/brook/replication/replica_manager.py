"""A broker's part in replication, in a cluster: it applies the controller's LeaderAndIsr
(leading some partitions, following others through one fetcher per leader) and
UpdateMetadata (the cluster picture Metadata answers from), and as a leader it keeps the ISR
right: followers that stopped catching up for replica.lag.time.max.ms leave it, followers that
caught up come back, each change asked of the controller (AlterPartition) and applied when
the controller has written it.
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from ..cluster.channel import BrokerChannel, ChannelError
from ..cluster.metadata_cache import MetadataCache
from ..protocol import inter_broker as ib
from ..protocol.messages import make, request_class
from ..coordinator.group.partitioner import OFFSETS_TOPIC
from ..storage.errors import KafkaStorageError
from ..coordinator.transaction.partitioner import TRANSACTION_STATE_TOPIC
from .partition import Partition
from .replica_fetcher import ReplicaFetcher

log = logging.getLogger(__name__)

ALTER_PARTITION_KEY, ALTER_PARTITION_VERSION = 56, 2


class ReplicaManager:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.broker_id = broker.broker_id
        #: The controller this broker takes requests from, and its epoch: checked against
        #: ZooKeeper when they changed (handlers.replication._from_controller).
        self.controller_id = -1
        self.controller_epoch = -1
        self.cache = MetadataCache()
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._following: dict[tuple[str, int], int] = {}  # partition -> leader it is fetched from
        self._isr_task: asyncio.Task | None = None
        self._controller_channel: BrokerChannel | None = None
        #: partitions with an ISR change asked of the controller, until answered or superseded
        self._altering: dict[tuple[str, int], object] = {}

    def start(self) -> None:
        self._isr_task = asyncio.create_task(self._maintain_isr(), name="isr")

    async def stop(self) -> None:
        if self._isr_task is not None:
            self._isr_task.cancel()
            await asyncio.gather(self._isr_task, return_exceptions=True)
        for f in list(self.fetchers.values()):
            await f.stop()
        self.fetchers.clear()
        if self._controller_channel is not None:
            self._controller_channel.close()

    @property
    def listener(self) -> str:
        cfg = self.broker.config
        return cfg.inter_broker_listener_name or cfg.advertised[0].name

    # ------------------------------------------------------------ from the controller

    async def leader_and_isr(self, request) -> tuple[ErrorCode, list[tuple[str, object, list]]]:
        """Apply LeaderAndIsr; the request-level error and each topic's partition errors."""
        if request.controller_epoch < self.controller_epoch:
            log.info("ignoring LeaderAndIsr of controller %d epoch %d: epoch %d is newer",
                     request.controller_id, request.controller_epoch, self.controller_epoch)
            return ErrorCode.stale_controller_epoch, []
        self._note_controller(request)
        leaders = {ll.broker_id: (ll.host_name, ll.port) for ll in request.live_leaders}
        now = self.broker.clock.milliseconds()
        out = []
        for ts in request.topic_states:
            try:
                await self.broker.ensure_replicated_topic(ts.topic_name, ts.topic_id)
            except Exception as exc:  # noqa: BLE001 - answered per partition
                log.warning("cannot create topic %s for LeaderAndIsr: %s", ts.topic_name, exc)
                out.append((ts.topic_name, ts.topic_id, [(ps.partition_index, ErrorCode.kafka_storage_error)
                                                         for ps in ts.partition_states]))
                continue
            errors = []
            for ps in ts.partition_states:
                errors.append((ps.partition_index, self._apply(ts.topic_name, ps, leaders, now)))
            out.append((ts.topic_name, ts.topic_id, errors))
        return ErrorCode.none, out

    def _apply(self, topic: str, ps, leaders: dict, now: int) -> ErrorCode:
        tp = (topic, ps.partition_index)
        tm = self.broker.metadata.get(topic)
        if tm is not None and ps.partition_index >= tm.partitions:  # CreatePartitions grew it
            self.broker.metadata.set_partitions(topic, ps.partition_index + 1)
        try:
            p = self.broker.partition(*tp) or self.broker.open_replica(*tp)
        except Exception as exc:  # noqa: BLE001 - this partition fails, the others go on
            log.warning("cannot open the log of %s-%d: %s", *tp, exc)
            return ErrorCode.kafka_storage_error
        if ps.leader_epoch < p.leader_epoch:
            return ErrorCode.fenced_leader_epoch  # older news than this broker has
        isr, replicas = tuple(ps.isr), tuple(ps.replicas)
        same_epoch = ps.leader_epoch == p.leader_epoch and ps.leader == p.leader_id
        if ps.leader == self.broker_id:
            if same_epoch and p.tracker is not None:
                # A repeat, or an ISR change: only a newer state than this leader has counts
                # (an older one may arrive after this leader's own ISR change was written).
                if ps.partition_epoch > p.zk_version:
                    p.update_leadership(isr, replicas, ps.partition_epoch, now)
                    self._altering.pop(tp, None)  # the ISR is known again
                return ErrorCode.none
            self._altering.pop(tp, None)
            self._stop_following(tp)
            try:  # writes the leader-epoch checkpoint
                p.become_leader(self.broker_id, ps.leader_epoch, isr, replicas, ps.partition_epoch, now)
            except (OSError, KafkaStorageError) as exc:
                return self._storage_failed(tp, p, exc)
            log.info("%s-%d: leader at epoch %d from offset %d (high watermark %d, ISR %s)", *tp,
                     ps.leader_epoch, p.log_end_offset, p.high_watermark, list(isr))
            runtime = self._coordinator_of(topic)
            if runtime is not None:  # its groups (transactions) are coordinated here from now on
                runtime.load(ps.partition_index, ps.leader_epoch)
        else:
            if same_epoch and p.tracker is None and (ps.leader < 0 or tp in self._following):
                p.update_leadership(isr, replicas, ps.partition_epoch)
                return ErrorCode.none
            p.become_follower(ps.leader, ps.leader_epoch, isr, replicas, ps.partition_epoch)
            self._altering.pop(tp, None)
            self._stop_following(tp)
            runtime = self._coordinator_of(topic)
            if runtime is not None:
                runtime.unload(ps.partition_index)
            if ps.leader >= 0:
                self._follow(tp, ps.leader, ps.leader_epoch, leaders)
            log.info("%s-%d: follower of %d at epoch %d", *tp, ps.leader, ps.leader_epoch)
        return ErrorCode.none

    def _follow(self, tp, leader: int, epoch: int, leaders: dict) -> None:
        address = leaders.get(leader) or self.cache.endpoint(leader, self.listener)
        if address is None:
            log.warning("%s-%d: no address for leader %d yet", *tp, leader)
            return
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            fetcher = self.fetchers[leader] = ReplicaFetcher(self, leader, *address)
        else:
            fetcher.channel.retarget(*address)
        fetcher.add(tp, epoch)
        self._following[tp] = leader

    def _stop_following(self, tp) -> None:
        leader = self._following.pop(tp, None)
        if leader is not None and leader in self.fetchers:
            self.fetchers[leader].remove(tp)

    def update_metadata(self, request) -> ErrorCode:
        if request.controller_epoch < self.controller_epoch:
            return ErrorCode.stale_controller_epoch
        self._note_controller(request)
        self.cache.update(request)
        # Followers whose leader had no known address yet.
        for (topic, idx), part in list(self.broker.partitions.items()):
            if part.tracker is None and part.leader_id >= 0 and part.leader_id != self.broker_id \
                    and (topic, idx) not in self._following:
                self._follow((topic, idx), part.leader_id, part.leader_epoch, {})
        return ErrorCode.none

    def _note_controller(self, request) -> None:
        self.controller_epoch = request.controller_epoch
        self.controller_id = request.controller_id

    def controller_to_ask(self) -> int:
        """Where to send AlterPartition: the controller ZooKeeper names (watched, so fresher
        than the last UpdateMetadata, which a broker may have missed), else the metadata's."""
        cluster = self.broker.cluster
        known = cluster.view.controller_id if cluster is not None else -1
        return known if known >= 0 else self.cache.controller_id

    def _registered_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """A broker's address on the inter-broker listener as its registration says."""
        cluster = self.broker.cluster
        live = cluster.view.brokers.get(broker_id) if cluster is not None else None
        ep = live.registration.endpoint(self.listener) if live is not None else None
        return None if ep is None else (ep.host, ep.port)

    def _coordinator_of(self, topic: str):
        """The coordinator runtime whose shards follow the leadership of ``topic``'s partitions
        (the group coordinator's __consumer_offsets, the transaction coordinator's
        __transaction_state), else None."""
        if topic == OFFSETS_TOPIC:
            return self.broker.coordinator
        if topic == TRANSACTION_STATE_TOPIC:
            return self.broker.txn_coordinator
        return None

    def fence(self, why: str) -> None:
        """Stop leading anything at once (this broker lost its ZooKeeper session: another may
        lead its partitions already). Clients get NOT_LEADER_OR_FOLLOWER until the controller
        says again what this broker leads."""
        fenced = 0
        for p in self.broker.partitions.values():
            if p.tracker is not None:
                p.become_follower(-1, p.leader_epoch, p.isr, p.replicas, p.zk_version)
                runtime = self._coordinator_of(p.topic)
                if runtime is not None:
                    runtime.unload(p.index)
                fenced += 1
        if fenced:
            log.warning("fenced %d partition leadership(s): %s", fenced, why)

    def stop_replica(self, topic: str, index: int, delete: bool) -> ErrorCode:
        """Stop fetching the partition; with `delete`, its log goes (a deleted topic, or a
        replica moved away), and the topic itself once none of its partitions is left here."""
        tp = (topic, index)
        self._stop_following(tp)
        p = self.broker.partitions.get(tp)
        if p is None:
            return ErrorCode.none
        if p.tracker is not None:
            p.become_follower(-1, p.leader_epoch, p.isr, p.replicas, p.zk_version)
        runtime = self._coordinator_of(topic)
        if runtime is not None:
            runtime.unload(index)
        if delete:
            self.broker.delete_replica(topic, index)
        return ErrorCode.none

    def _storage_failed(self, tp, p: Partition, exc: BaseException) -> ErrorCode:
        """Taking a leadership failed on the disk (a full disk, an I/O error): as Kafka does,
        the partition answers KAFKA_STORAGE_ERROR, the others of the request still apply, and
        the log dir goes offline (the broker moves its leaderships away and stops). Before, the
        error ended the whole LeaderAndIsr, which the controller sent again and again."""
        log.error("%s-%d: cannot take the leadership: %s", *tp, exc)
        p.become_follower(-1, p.leader_epoch, p.isr, p.replicas, p.zk_version)
        self.broker.log_dir_failed(p.log.directory, exc)
        return ErrorCode.kafka_storage_error

    # ------------------------------------------------------------ the ISR, as a leader

    async def _maintain_isr(self) -> None:
        cfg = self.broker.config
        lag = cfg.replica_lag_time_max_ms
        checkpoint_every = cfg.replica_high_watermark_checkpoint_interval_ms / 1000
        next_checkpoint = asyncio.get_running_loop().time() + checkpoint_every
        while True:
            await asyncio.sleep(min(lag / 2, 1000) / 1000)
            now = self.broker.clock.milliseconds()
            for tp, p in list(self.broker.partitions.items()):
                if p.tracker is None or tp in self._altering:
                    continue
                out = p.tracker.out_of_sync(now, lag)
                # Only brokers the controller last said are alive: another would be refused
                # INELIGIBLE_REPLICA, at a ZooKeeper write each time (the refusal fences).
                back = p.tracker.caught_up(p.high_watermark, p.epoch_start_offset,
                                           self.cache.brokers)
                if out or back:
                    isr = tuple(r for r in p.isr if r not in out) + tuple(back)
                    if isr and isr != p.isr:
                        self._alter_isr(tp, p, isr)
            if asyncio.get_running_loop().time() >= next_checkpoint:
                next_checkpoint += checkpoint_every
                try:
                    await asyncio.to_thread(self.broker.checkpoint_high_watermarks)
                except OSError as exc:
                    log.warning("cannot write the high watermark checkpoint: %s", exc)

    def _alter_isr(self, tp, p: Partition, isr: tuple[int, ...]) -> None:
        """Ask the controller for an ISR change, as Kafka 2.8 does: until it is answered the
        change is pending and the high watermark counts the replicas it adds (the maximal
        ISR: once written, any of them may be elected); a lost answer or NOT_CONTROLLER is
        asked again; a refusal that cannot apply (INELIGIBLE_REPLICA) drops it; any other
        stays pending until a LeaderAndIsr says what the ISR is."""
        token = object()
        self._altering[tp] = token
        tracker = p.tracker
        tracker.propose_isr(isr)
        asyncio.create_task(self._ask_alter_partition(tp, p, tracker, token, isr, p.leader_epoch,
                                                      p.zk_version))

    async def _ask_alter_partition(self, tp, p: Partition, tracker, token, isr, epoch: int,
                                   version: int) -> None:
        backoff = self.broker.config.replica_fetch_backoff_ms / 1000

        def current() -> bool:
            return self._altering.get(tp) is token and p.tracker is tracker

        while current():
            answer = await self._send_alter_partition(tp, isr, epoch, version)
            if not current():
                return
            if answer is None or answer[0] == ErrorCode.not_controller:
                await asyncio.sleep(backoff)  # lost, or the controller moved: ask again
                continue
            code, state = answer
            if code == ErrorCode.none and p.leader_epoch == state[1]:
                p.update_leadership(tuple(state[2]), p.replicas, state[3])
                del self._altering[tp]
            elif (code == ErrorCode.ineligible_replica and state[3] >= 0
                  and p.leader_epoch == state[1]):
                # not applied, and fenced by the controller (a new partition epoch): no copy
                # of this request can be applied later, so the change is dropped for good
                p.update_leadership(tuple(state[2]), p.replicas, state[3])
                del self._altering[tp]
            elif code in (ErrorCode.ineligible_replica, ErrorCode.invalid_request,
                          ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id):
                tracker.set_isr(p.isr)  # not applied: the ISR is still what it was
                del self._altering[tp]
            else:
                log.info("%s-%d: the controller refused the ISR change: %s; waiting for its "
                         "word on the ISR", *tp, ErrorCode(code).name.upper())
            return

    async def _send_alter_partition(self, tp, isr, epoch: int, version: int):
        """(error, (leader, leader epoch, isr, partition epoch)) from the controller, or None
        when no answer came."""
        controller = self.controller_to_ask()
        address = self.cache.endpoint(controller, self.listener) or self._registered_endpoint(controller)
        topic_id = self.cache.topic_ids.get(tp[0])
        if address is None or topic_id is None:
            return None
        ch = self._controller_channel
        if ch is None or ch.broker_id != controller:
            if ch is not None:
                ch.close()
            ch = self._controller_channel = BrokerChannel(
                controller, *address, client_id=f"broker-{self.broker_id}-alter-partition",
                sasl=self.broker.cluster.channel_credentials, tls=self.broker.config.inter_broker_tls)
        else:
            ch.retarget(*address)
        cls = request_class(ALTER_PARTITION_KEY, ALTER_PARTITION_VERSION)
        mod = __import__(cls.__module__, fromlist=["x"])
        request = make(cls, broker_id=self.broker_id, broker_epoch=self.broker.cluster.broker_epoch, topics=(make(
            mod.TopicData, topic_id=topic_id, partitions=(make(
                mod.PartitionData, partition_index=tp[1], leader_epoch=epoch, new_isr=isr,
                leader_recovery_state=0, partition_epoch=version),)),))
        log.info("%s-%d: asking the controller to change the ISR to %s", *tp, list(isr))
        try:
            response = await ch.request(request)
        except ChannelError as exc:
            log.warning("%s-%d: AlterPartition failed: %s", *tp, exc)
            return None
        if response.error_code != ErrorCode.none:
            return response.error_code, None
        for t in response.topics:
            for pr in t.partitions:
                return pr.error_code, (pr.leader_id, pr.leader_epoch, tuple(pr.isr), pr.partition_epoch)
        return None

    # ------------------------------------------------------------ what clients may do here

    def leader_error(self, p: Partition | None, current_leader_epoch: int = -1) -> ErrorCode:
        """NONE if clients may produce to or consume from `p` here, else Kafka's error."""
        if p is None:
            return ErrorCode.unknown_topic_or_partition
        if p.tracker is None:
            return ErrorCode.not_leader_or_follower
        if current_leader_epoch >= 0:
            if current_leader_epoch < p.leader_epoch:
                return ErrorCode.fenced_leader_epoch
            if current_leader_epoch > p.leader_epoch:
                return ErrorCode.unknown_leader_epoch
        return ErrorCode.none
