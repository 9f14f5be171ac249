"""A partition this broker holds: its log plus the replication state Kafka keeps for it.

On one node the broker is always the leader, the in-sync replica set is itself and the high
watermark is the log end offset right after each append. The last stable offset (what
read_committed consumers read up to) is the high watermark, or the first offset of the
earliest transaction still open (or decided by a marker the high watermark has not passed).
In a cluster the controller makes the broker the partition's leader or a follower
(`become_leader` / `become_follower`); as leader, the high watermark moves when the in-sync
followers have fetched past it, and acks=all answers wait for it (`wait_for_high_watermark`).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Callable

from .replica_tracker import ReplicaTracker
from ..records.control import end_txn_marker_batch
from ..storage.log import Log
from ..storage.producer_state import UNVERIFIED, AppendOrigin

NO_LEADER = -1


def _high_watermark_of(ref: "weakref.ref[Partition]") -> Callable[[], int | None]:
    """The partition's high watermark, through a weak reference: the log holds this, and a
    cycle between a partition and its log would outlive them (the broker frees its structures
    by reference counting; brook.broker.heap). (The log lowers it to its last stable offset
    itself: compaction stays below open transactions.)"""
    def high_watermark() -> int | None:
        partition = ref()
        return None if partition is None else partition.high_watermark
    return high_watermark


class NotLeaderError(Exception):
    """The partition has no leader here any more (NOT_LEADER_OR_FOLLOWER)."""


class NotEnoughReplicasAfterAppend(Exception):
    """The high watermark reached the records with fewer in-sync replicas than
    min.insync.replicas (NOT_ENOUGH_REPLICAS_AFTER_APPEND): they are held by too few
    brokers to be acknowledged with acks=all."""


class Partition:
    __slots__ = ("topic", "index", "log", "leader_epoch", "high_watermark", "_listeners",
                 "leader_id", "replicas", "isr", "zk_version", "tracker", "epoch_start_offset",
                 "_hw_waiters", "pending_isr", "__weakref__")

    def __init__(self, topic: str, index: int, log: Log, leader_epoch: int = 0,
                 leader_id: int = NO_LEADER) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.leader_epoch = leader_epoch
        self.high_watermark = log.log_end_offset
        self._listeners: list[Callable[[], None]] = []
        #: the leader's broker id in a cluster; NO_LEADER on a single node (always this broker)
        self.leader_id = leader_id
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.zk_version = -1  # of the partition's state znode, as the controller last sent it
        self.tracker: ReplicaTracker | None = None  # set while this broker leads it in a cluster
        self.epoch_start_offset = 0
        self._hw_waiters: list[tuple[int, int, asyncio.Future]] = []
        self.pending_isr: tuple[int, ...] | None = None  # an ISR change asked of the controller
        log.cleaning_bound = _high_watermark_of(weakref.ref(self))  # compaction stays below it

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO on the leader: min(high watermark, first unstable offset)."""
        return self.log.last_stable_offset(self.high_watermark)

    @property
    def replicated(self) -> bool:
        """Whether this broker leads the partition in a cluster (followers may hold it too)."""
        return self.tracker is not None

    def append(self, records, origin: AppendOrigin = AppendOrigin.CLIENT, checked: int | None = None,
               guard: object = UNVERIFIED):
        info = self.log.append(records, leader_epoch=self.leader_epoch, origin=origin, checked=checked,
                               guard=guard)
        if self.tracker is None:
            self.high_watermark = self.log.log_end_offset
        else:
            self.maybe_advance_high_watermark()
        self._notify()  # consumers when the HW moved; followers long-polling for any new data
        return info

    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      committed: bool):
        """Append a transaction marker (Kafka's EndTransactionMarker) as its coordinator asked,
        at this leader's epoch, as any append; the caller waits for the high watermark to pass
        it (`wait_for_high_watermark(info.last_offset + 1)`) before the marker counts."""
        batch = end_txn_marker_batch(producer_id, producer_epoch, coordinator_epoch, committed,
                                     self.log.clock.milliseconds())
        return self.append(batch, origin=AppendOrigin.COORDINATOR)

    # ------------------------------------------------------------ replication

    def become_leader(self, broker_id: int, leader_epoch: int, isr: tuple[int, ...],
                      replicas: tuple[int, ...], zk_version: int, now_ms: int) -> None:
        self.leader_id = broker_id
        self.leader_epoch = leader_epoch
        self.isr, self.replicas, self.zk_version = isr, replicas, zk_version
        self.pending_isr = None
        self.log.epoch_cache.assign(leader_epoch, self.log.log_end_offset)
        self.epoch_start_offset = self.log.log_end_offset
        self.tracker = ReplicaTracker(broker_id, replicas, isr, now_ms)
        self.maybe_advance_high_watermark()

    def update_leadership(self, isr: tuple[int, ...], replicas: tuple[int, ...], zk_version: int,
                          now_ms: int = 0) -> None:
        """The same leader epoch with another ISR (this broker's own ISR change, confirmed) or
        other replicas (a reassignment)."""
        self.isr, self.replicas, self.zk_version = isr, replicas, zk_version
        if self.tracker is not None:
            if replicas != self.tracker.replicas:
                self.tracker.set_replicas(replicas, now_ms)
            self.tracker.set_isr(isr)
            self.maybe_advance_high_watermark()

    def become_follower(self, leader: int, leader_epoch: int, isr: tuple[int, ...],
                        replicas: tuple[int, ...], zk_version: int) -> None:
        self.leader_id = leader
        self.leader_epoch = leader_epoch
        self.isr, self.replicas, self.zk_version = isr, replicas, zk_version
        self.tracker = None
        self.pending_isr = None
        self._fail_waiters(NotLeaderError(f"{self.topic}-{self.index}: leadership moved to {leader}"))

    def on_follower_fetch(self, replica: int, fetch_offset: int, now_ms: int) -> None:
        tracker = self.tracker
        if tracker is not None and tracker.on_fetch(replica, fetch_offset, self.log.log_end_offset, now_ms):
            self.maybe_advance_high_watermark()

    def follower_high_watermark(self, leader_high_watermark: int) -> None:
        """As a follower: the leader's high watermark, capped at what this log has."""
        hw = min(leader_high_watermark, self.log.log_end_offset)
        if hw > self.high_watermark:
            self.high_watermark = hw
            self._notify()

    def maybe_advance_high_watermark(self) -> None:
        """The high watermark never moves back; it moves forward to the ISR's lowest end."""
        hw = self.tracker.high_watermark(self.log.log_end_offset)
        if hw > self.high_watermark:
            self.high_watermark = hw
            self._notify()
            if self._hw_waiters:
                self._complete_waiters()

    def wait_for_high_watermark(self, offset: int, min_insync: int = 1) -> asyncio.Future:
        """A future done once the high watermark reaches `offset` (an acks=all produce); it
        fails with NotEnoughReplicasAfterAppend when the high watermark gets there with fewer
        than `min_insync` replicas in sync (the ISR shrank while the records waited: the
        check before the append is not enough, as Kafka's checkEnoughReplicasReachOffset)."""
        fut = asyncio.get_running_loop().create_future()
        self._hw_waiters.append((offset, min_insync, fut))
        if self.high_watermark >= offset:
            self._complete_waiters()
        return fut

    def _in_sync_count(self) -> int:
        """The ISR's size counting an expansion asked of the controller (Kafka's maximal ISR:
        the high watermark already counts those replicas)."""
        return len(self.tracker.maximal_isr) if self.tracker is not None else len(self.isr)

    def _complete_waiters(self) -> None:
        hw = self.high_watermark
        in_sync = None
        waiting = []
        for offset, min_insync, fut in self._hw_waiters:
            if fut.done():
                continue
            if offset > hw:
                waiting.append((offset, min_insync, fut))
                continue
            if in_sync is None:
                in_sync = self._in_sync_count()
            if in_sync >= min_insync:
                fut.set_result(None)
            else:
                fut.set_exception(NotEnoughReplicasAfterAppend(
                    f"{self.topic}-{self.index}: {in_sync} in-sync replicas, "
                    f"min.insync.replicas is {min_insync}"))
                fut.exception()  # retrieved: a waiter that went away leaves no warning
        self._hw_waiters = waiting

    def _fail_waiters(self, exc: Exception) -> None:
        waiters, self._hw_waiters = self._hw_waiters, []
        for _, _, fut in waiters:
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # retrieved: a waiter that went away leaves no warning

    # ------------------------------------------------------------ consumers waiting for data

    def on_new_data(self, callback: Callable[[], None]) -> None:
        """Call `callback` once, the next time records become visible to consumers."""
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[], None]) -> None:
        try:
            self._listeners.remove(callback)
        except ValueError:
            pass

    def _notify(self) -> None:
        if self._listeners:
            listeners, self._listeners = self._listeners, []
            for cb in listeners:
                cb()
