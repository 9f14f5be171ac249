"""The transaction coordinator's ``MarkerWriter`` over the wire: WriteTxnMarkers (version 1) sent
to each partition's leader on brook's inter-broker channel (``brook.cluster.channel``), the
partitions grouped by leader, one request per leader at a time.

Partitions this broker leads may be written in process instead: ``local`` (when given) is an
async function ``local(request, partitions) -> {partition: error}`` that writes the markers of
``request`` on those of this broker's partitions, the partition side's entry point; the others
still go over the wire.

Leaders and their channels are ``brook.broker.leader_channels``'s; a single node whose
listeners all require SASL or TLS cannot reach itself that way (the in-process writer is for
that case). A partition without a known leader, or whose leader cannot be reached, is answered
NOT_LEADER_OR_FOLLOWER, which the ``MarkerSender`` tries again.
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from ..cluster.channel import ChannelError
from ..coordinator.transaction.markers import MarkerRequest
from ..protocol.messages import make, request_class
from .leader_channels import LeaderChannels

log = logging.getLogger(__name__)

API_KEY = 27
VERSION = 1


class ChannelMarkerWriter:
    def __init__(self, broker, local=None) -> None:
        self.broker = broker
        self.local = local
        self.leaders = LeaderChannels(broker, "txn-markers")

    async def write_markers(self, request: MarkerRequest) -> dict[tuple[str, int], ErrorCode]:
        answers: dict[tuple[str, int], ErrorCode] = {}
        by_leader: dict[int, tuple[tuple[str, int], list[tuple[str, int]]]] = {}
        for tp in sorted(request.partitions):
            leader = self.leaders.leader(*tp)
            if leader is None:
                answers[tp] = ErrorCode.not_leader_or_follower
                continue
            by_leader.setdefault(leader[0], (leader[1], []))[1].append(tp)
        sends = []
        for broker_id, (address, tps) in by_leader.items():
            if self.local is not None and broker_id == self.broker.broker_id:
                sends.append(self._write_here(request, tps))
            else:
                sends.append(self._send(broker_id, address, request, tps))
        results = await asyncio.gather(*sends)
        for r in results:
            answers.update(r)
        return answers

    async def _write_here(self, request: MarkerRequest, tps: list[tuple[str, int]]):
        failed = {tp: ErrorCode.not_leader_or_follower for tp in tps}
        try:
            return {**failed, **await self.local(request, tps)}
        except Exception as exc:  # noqa: BLE001 - tried again by the sender
            log.warning("writing markers here failed: %s", exc)
            return failed

    async def _send(self, broker_id: int, address, request: MarkerRequest,
                    tps: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        cls = request_class(API_KEY, VERSION)
        mod = __import__(cls.__module__, fromlist=["x"])
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)
        body = make(cls, markers=(make(
            mod.WritableTxnMarker, producer_id=request.producer_id,
            producer_epoch=request.producer_epoch, transaction_result=request.commit,
            coordinator_epoch=request.coordinator_epoch,
            topics=tuple(make(mod.WritableTxnMarkerTopic, name=t, partition_indexes=tuple(ps))
                         for t, ps in topics.items())),))
        failed = {tp: ErrorCode.not_leader_or_follower for tp in tps}
        try:
            response = await self.leaders.channel(broker_id, address).request(body)
        except ChannelError as exc:
            log.warning("WriteTxnMarkers to broker %d failed: %s", broker_id, exc)
            return failed
        answers = {}
        for marker in response.markers:
            for t in marker.topics:
                for p in t.partitions:
                    answers[(t.name, p.partition_index)] = ErrorCode(p.error_code)
        return {**failed, **answers}

    def close(self) -> None:
        self.leaders.close()
