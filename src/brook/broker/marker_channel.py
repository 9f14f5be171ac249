"""The transaction coordinator's ``MarkerWriter`` over the wire: WriteTxnMarkers (version 1) sent
to each partition's leader on brook's inter-broker channel (``brook.cluster.channel``), the
partitions grouped by leader, one request per leader at a time.

Partitions this broker leads may be written in process instead: ``local`` (when given) is an
async function ``local(request, partitions) -> {partition: error}`` that writes the markers of
``request`` on those of this broker's partitions, the partition side's entry point; the others
still go over the wire.

In a cluster the leader is the metadata cache's and the address its endpoint on the
inter-broker listener, with the cluster's inter-broker login. On a single node the leader is
this broker, reached on its inter-broker listener (``inter.broker.listener.name``, else the
first); a single node whose listeners all require SASL or TLS cannot reach itself this way (the
in-process writer, once partitions write markers, is for that case). A partition without a
known leader, or whose leader cannot be reached, is answered NOT_LEADER_OR_FOLLOWER, which the
``MarkerSender`` tries again.
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from ..cluster.channel import BrokerChannel, ChannelError
from ..coordinator.transaction.markers import MarkerRequest
from ..protocol.messages import make, request_class

log = logging.getLogger(__name__)

API_KEY = 27
VERSION = 1


class ChannelMarkerWriter:
    def __init__(self, broker, local=None) -> None:
        self.broker = broker
        self.local = local
        self.channels: dict[int, BrokerChannel] = {}

    def _leader(self, topic: str, partition: int) -> tuple[int, tuple[str, int]] | None:
        b = self.broker
        if b.replicas is None:
            c = b.config
            name = c.inter_broker_listener_name
            listener = next((l for l in c.listeners if l.name == name), c.listeners[0])
            host = listener.host or "127.0.0.1"
            if host in ("0.0.0.0", "::"):
                host = "127.0.0.1"
            return b.broker_id, (host, listener.port)
        cache = b.replicas.cache
        info = cache.partition(topic, partition)
        if info is None or info.leader < 0:
            return None
        address = cache.endpoint(info.leader, b.replicas.listener)
        return None if address is None else (info.leader, address)

    def _channel(self, broker_id: int, address: tuple[str, int]) -> BrokerChannel:
        ch = self.channels.get(broker_id)
        if ch is None:
            b = self.broker
            sasl = b.cluster.channel_credentials if b.cluster is not None else None
            ch = self.channels[broker_id] = BrokerChannel(
                broker_id, *address, client_id=f"broker-{b.broker_id}-txn-markers",
                timeout_s=b.config.request_timeout_ms / 1000, sasl=sasl,
                tls=getattr(b.config, "inter_broker_tls", None))
        else:
            ch.retarget(*address)
        return ch

    async def write_markers(self, request: MarkerRequest) -> dict[tuple[str, int], ErrorCode]:
        answers: dict[tuple[str, int], ErrorCode] = {}
        by_leader: dict[int, tuple[tuple[str, int], list[tuple[str, int]]]] = {}
        for tp in sorted(request.partitions):
            leader = self._leader(*tp)
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
            response = await self._channel(broker_id, address).request(body)
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
        for ch in self.channels.values():
            ch.close()
        self.channels.clear()
