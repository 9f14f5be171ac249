"""What a partition's leader knows of its followers, and what follows from it: the high
watermark (the lowest log end offset in the ISR: every record below it is on every in-sync
replica), which followers have fallen out of sync (no catching up for replica.lag.time.max.ms)
and which have caught up enough to come back. Pure: the partition feeds it offsets and times."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass


@dataclass(slots=True)
class FollowerState:
    log_end_offset: int = -1  # unknown until its first fetch
    #: the last time its fetch reached the leader's log end offset as it was at that fetch
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0


class ReplicaTracker:
    def __init__(self, leader: int, replicas: tuple[int, ...], isr: tuple[int, ...],
                 now_ms: int) -> None:
        self.leader = leader
        self.replicas = replicas
        self.isr = isr
        # A new leader gives every follower a full lag period to show up (as Kafka does), so
        # the ISR does not shrink the moment leadership moves.
        self.followers = {r: FollowerState(-1, now_ms, now_ms) for r in replicas if r != leader}
        #: replicas an ISR change asked of the controller adds, until it is answered
        self.pending: tuple[int, ...] = ()

    def set_isr(self, isr: tuple[int, ...]) -> None:
        """The ISR as the controller wrote it (an ISR change asked for is answered: none is
        pending any more)."""
        self.isr = isr
        self.pending = ()

    def propose_isr(self, isr: tuple[int, ...]) -> None:
        """An ISR change is being asked of the controller. Until it is answered the high
        watermark counts the replicas it adds as well as the current ISR (Kafka's maximal
        ISR): once the controller has written the new ISR, any of them may be elected, so the
        high watermark must not pass what one of them lacks."""
        self.pending = tuple(r for r in isr if r not in self.isr)

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.isr + self.pending

    def set_replicas(self, replicas: tuple[int, ...], now_ms: int) -> None:
        """The assignment changed (a reassignment): new followers are tracked from now, with a
        full lag period to show up; removed ones are forgotten."""
        self.replicas = replicas
        for r in replicas:
            if r != self.leader and r not in self.followers:
                self.followers[r] = FollowerState(-1, now_ms, now_ms)
        for r in [r for r in self.followers if r not in replicas]:
            del self.followers[r]

    def on_fetch(self, replica: int, fetch_offset: int, leader_end_offset: int, now_ms: int) -> bool:
        """A follower fetched from `fetch_offset`: it has everything below it. True if it is a
        replica of this partition (followers of another assignment are ignored)."""
        st = self.followers.get(replica)
        if st is None:
            return False
        st.log_end_offset = fetch_offset
        st.last_fetch_ms = now_ms
        if fetch_offset >= leader_end_offset:
            st.last_caught_up_ms = now_ms
        return True

    def high_watermark(self, leader_end_offset: int) -> int:
        """The lowest log end offset of the ISR and of the replicas an ISR change in flight
        adds (followers not heard from count as 0)."""
        hw = leader_end_offset
        for r in self.maximal_isr:
            if r != self.leader:
                st = self.followers.get(r)
                hw = min(hw, st.log_end_offset if st is not None and st.log_end_offset >= 0 else 0)
        return hw

    def out_of_sync(self, now_ms: int, max_lag_ms: int) -> tuple[int, ...]:
        """ISR members that have not caught up for longer than `max_lag_ms`."""
        return tuple(r for r in self.isr if r != self.leader and
                     now_ms - self.followers[r].last_caught_up_ms > max_lag_ms)

    def caught_up(self, high_watermark: int, leader_epoch_start: int,
                  alive: Container[int] | None = None) -> tuple[int, ...]:
        """Followers outside the ISR that may come back: they have everything up to the high
        watermark and everything of the current leader epoch's start (Kafka's
        isFollowerInSync with its leader-epoch condition), and their brokers are among
        `alive`, the brokers the controller last said are alive (Kafka's
        isReplicaIsrEligible): the controller refuses any other."""
        need = max(high_watermark, leader_epoch_start)
        return tuple(r for r, st in self.followers.items()
                     if r not in self.isr and st.log_end_offset >= need
                     and (alive is None or r in alive))
