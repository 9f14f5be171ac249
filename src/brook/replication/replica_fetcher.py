"""A follower's fetcher: one task per leader broker, copying the partitions this broker follows
from that leader, as Kafka's ReplicaFetcherThread does.

A partition joins the fetcher truncating: first the fetcher asks the leader where this log's
latest leader epoch ends (OffsetForLeaderEpoch) and cuts the log there, so a former leader
drops exactly the tail its successor never had (KIP-101, KIP-279). Then it fetches from its
log end with the replica's id, appends what comes as follower (offsets and epochs kept) and
takes the leader's high watermark. The leader learns from each fetch offset how far this
replica is, which moves its high watermark and decides the ISR.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from ..cluster.channel import BrokerChannel, ChannelError
from .truncation import truncation_offset
from ..protocol.messages import make, request_class
from ..records.batch import whole_batches_size
from ..storage.errors import KafkaStorageError
from ..storage.leader_epoch import UNDEFINED_EPOCH

log = logging.getLogger(__name__)

FETCH_KEY, FETCH_VERSION = 1, 12
EPOCH_KEY, EPOCH_VERSION = 23, 4


#: Answers that mean the controller's news has not reached one of the two brokers yet: the
#: partition is simply fetched again (and told apart once LeaderAndIsr arrives).
_AWAITING_THE_CONTROLLER = (ErrorCode.fenced_leader_epoch, ErrorCode.not_leader_or_follower,
                            ErrorCode.unknown_leader_epoch, ErrorCode.unknown_topic_or_partition)


@dataclass(slots=True)
class FetchState:
    leader_epoch: int
    truncating: bool = True
    #: monotonic time before which the partition is not asked for again: a leader that
    #: answered it with an error is asked again only after replica.fetch.backoff.ms (Kafka
    #: delays such partitions; asking at once spins the fetcher and the leader)
    delayed_until: float = 0.0
    #: the error last logged for it, so a leader refusing for a while is logged once
    last_error: int = 0


class ReplicaFetcher:
    def __init__(self, manager, leader_id: int, host: str, port: int) -> None:
        self.manager = manager
        self.broker = manager.broker
        self.leader_id = leader_id
        cfg = self.broker.config
        self.channel = BrokerChannel(leader_id, host, port,
                                     client_id=f"broker-{self.broker.broker_id}-fetcher-{leader_id}",
                                     timeout_s=cfg.replica_socket_timeout_ms / 1000,
                                     sasl=self.broker.cluster.channel_credentials,
                                     tls=cfg.inter_broker_tls)
        self.partitions: dict[tuple[str, int], FetchState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def add(self, tp: tuple[str, int], leader_epoch: int) -> None:
        self.partitions[tp] = FetchState(leader_epoch)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    def remove(self, tp: tuple[str, int]) -> None:
        self.partitions.pop(tp, None)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.channel.close()

    async def _run(self) -> None:
        backoff = self.broker.config.replica_fetch_backoff_ms / 1000
        while True:
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                if any(st.truncating for st in self.partitions.values()):
                    await self._truncate()
                await self._fetch()
            except ChannelError as exc:
                log.warning("fetching from leader %d: %s", self.leader_id, exc)
                await asyncio.sleep(backoff)
            except Exception:  # noqa: BLE001 - a bug must not stop replication for good
                log.exception("fetching from leader %d failed", self.leader_id)
                await asyncio.sleep(backoff)

    # ------------------------------------------------------------ truncation

    async def _truncate(self) -> None:
        todo = {tp: st for tp, st in self.partitions.items() if st.truncating}
        cls = request_class(EPOCH_KEY, EPOCH_VERSION)
        mod = __import__(cls.__module__, fromlist=["x"])
        topics: dict[str, list] = {}
        for (topic, p), st in todo.items():
            part = self.broker.partition(topic, p)
            if part is None:
                self.partitions.pop((topic, p), None)
                continue
            epoch = part.log.epoch_cache.latest_epoch
            if epoch == UNDEFINED_EPOCH:
                # Nothing this log knows of epochs: keep up to the high watermark, which was
                # replicated to every in-sync replica (Kafka before KIP-101).
                part.log.truncate_to(part.high_watermark)
                st.truncating = False
                continue
            topics.setdefault(topic, []).append(make(
                mod.OffsetForLeaderPartition, partition=p, current_leader_epoch=st.leader_epoch,
                leader_epoch=epoch))
        if not topics:
            return
        request = make(cls, replica_id=self.broker.broker_id, topics=tuple(
            make(mod.OffsetForLeaderTopic, topic=t, partitions=tuple(ps)) for t, ps in topics.items()))
        response = await self.channel.request(request)
        for t in response.topics:
            for pr in t.partitions:
                tp = (t.topic, pr.partition)
                st = self.partitions.get(tp)
                part = self.broker.partition(*tp)
                if st is None or part is None or not st.truncating or st is not todo.get(tp):
                    continue  # the partition was given again meanwhile: asked again
                if pr.error_code != ErrorCode.none:
                    log.info("%s-%d: leader %d answered OffsetForLeaderEpoch with %s", *tp,
                             self.leader_id, ErrorCode(pr.error_code).name.upper())
                    continue  # asked again on the next round (the controller's news may be late)
                # Not finished: the leader answered an epoch this log skipped; asked again
                # about the epoch the cut leaves last (KIP-279).
                st.truncating = not self._truncate_to_epoch_end(part, pr.leader_epoch,
                                                                pr.end_offset)

    @staticmethod
    def _truncate_to_epoch_end(part, leader_epoch: int, end_offset: int) -> bool:
        """Cut the log where the leader's answer says; True if truncation is finished."""
        lg = part.log
        target, finished = truncation_offset(lg.epoch_cache, lg.log_end_offset,
                                             part.high_watermark, leader_epoch, end_offset)
        if target < lg.log_end_offset:
            log.info("%s-%d: truncating from %d to %d to match leader epoch %d", part.topic,
                     part.index, lg.log_end_offset, target, leader_epoch)
            lg.truncate_to(target)
            if part.high_watermark > lg.log_end_offset:
                part.high_watermark = lg.log_end_offset
        elif not finished:
            # An epoch of ours the leader never had, holding no records (we led it and wrote
            # nothing): forget it, or the next round would ask about it again.
            lg.epoch_cache.truncate_from_end(target)
        return finished

    # ------------------------------------------------------------ fetching

    async def _fetch(self) -> None:
        cfg = self.broker.config
        cls = request_class(FETCH_KEY, FETCH_VERSION)
        mod = __import__(cls.__module__, fromlist=["x"])
        topics: dict[str, list] = {}
        now = time.monotonic()
        for (topic, p), st in self.partitions.items():
            if st.truncating or st.delayed_until > now:
                continue
            part = self.broker.partition(topic, p)
            if part is None:
                continue
            lg = part.log
            topics.setdefault(topic, []).append(make(
                mod.FetchPartition, partition=p, current_leader_epoch=st.leader_epoch,
                fetch_offset=lg.log_end_offset, last_fetched_epoch=lg.epoch_cache.latest_epoch,
                log_start_offset=lg.log_start_offset, partition_max_bytes=cfg.replica_fetch_max_bytes))
        if not topics:
            due = [st.delayed_until for st in self.partitions.values() if st.delayed_until > now]
            wait = cfg.replica_fetch_backoff_ms / 1000
            await asyncio.sleep(min(wait, max(0.0, min(due) - now)) if due else wait)
            return
        request = make(cls, replica_id=self.broker.broker_id, max_wait=_ms(cfg.replica_fetch_wait_max_ms),
                       min_bytes=cfg.replica_fetch_min_bytes, max_bytes=cfg.replica_fetch_response_max_bytes,
                       isolation_level=0, session_id=0, session_epoch=-1,
                       topics=tuple(make(mod.FetchTopic, topic=t, partitions=tuple(ps))
                                    for t, ps in topics.items()),
                       forgotten_topics_data=(), rack_id="")
        response = await self.channel.request(
            request, timeout_s=cfg.replica_socket_timeout_ms / 1000 + cfg.replica_fetch_wait_max_ms / 1000)
        if response.error_code != ErrorCode.none:
            raise ChannelError(f"leader {self.leader_id} answered fetch with "
                               f"{ErrorCode(response.error_code).name.upper()}")
        served = []
        for t in response.responses:
            for pr in t.partitions:
                if self._apply(t.topic, pr):
                    served.append((t.topic, pr.partition_index))
        # Partitions given data go to the back of the next request, so one whose first batch
        # is larger than what is left of the response's byte budget is asked first in turn
        # (the leader sends the first partition's first batch whole) and is never starved.
        for tp in served:
            st = self.partitions.pop(tp, None)
            if st is not None:
                self.partitions[tp] = st

    def _apply(self, topic: str, pr) -> bool:
        """Apply one partition's answer; whether it carried records."""
        tp = (topic, pr.partition_index)
        st = self.partitions.get(tp)
        part = self.broker.partition(*tp)
        if st is None or part is None or st.truncating:
            return False
        code = pr.error_code
        records = pr.records
        if code not in (ErrorCode.none, ErrorCode.offset_out_of_range):
            st.delayed_until = time.monotonic() + self.broker.config.replica_fetch_backoff_ms / 1000
        if code == ErrorCode.none:
            if records:
                # The response's byte limits may cut its last batch short: the whole ones
                # are appended, and the next fetch starts where the cut one does.
                whole = whole_batches_size(records)
                if whole:
                    try:
                        part.log.append_as_follower(memoryview(records)[:whole])
                    except KafkaStorageError as exc:
                        self.broker.log_dir_failed(part.log.directory, exc)
                        raise
            part.follower_high_watermark(pr.high_watermark)
            if pr.log_start_offset > part.log.log_start_offset:
                part.log.increase_log_start_offset(min(pr.log_start_offset, part.log.log_end_offset))
        elif code == ErrorCode.offset_out_of_range:
            # Our end is past the leader's (an unclean election) or before its start (retention):
            # as Kafka, start over at the leader's start when below it, else truncate again.
            if part.log.log_end_offset < pr.log_start_offset:
                log.info("%s-%d: log end %d is before leader %d's log start %d: starting there",
                         *tp, part.log.log_end_offset, self.leader_id, pr.log_start_offset)
                part.log.truncate_fully_and_start_at(pr.log_start_offset)
                part.high_watermark = pr.log_start_offset
            else:
                st.truncating = True
        elif code not in _AWAITING_THE_CONTROLLER and code != st.last_error:
            log.warning("%s-%d: leader %d answered fetch with %s (asked again every %d ms, "
                        "logged again when the answer changes)", *tp, self.leader_id,
                        ErrorCode(code).name.upper(), self.broker.config.replica_fetch_backoff_ms)
        st.last_error = code
        return bool(records)


def _ms(value: int):
    from datetime import timedelta
    return timedelta(milliseconds=value)
