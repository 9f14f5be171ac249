"""Fetch: file regions of each partition's log, sent with `sendfile`.

If fewer than `min_bytes` are available the request waits, up to `max_wait_ms`, and is
woken by the first append to any partition it reads (no polling). A sessionless request
(session id 0, epoch -1: librdkafka, aiokafka, kcat) goes straight to the read. Any other
goes through the broker's `FetchSessionCache` (KIP-227, `brook.broker.fetch_session`): a full
request may open a session, an incremental one reads every partition of its session (and
its long-poll is woken by any of them, not only those it names) and is answered with the
partitions that changed.

Fetch v0-v3 come from consumers that cannot read v2 batches: what the read found is
down-converted before the answer (`fetch_conversion`), without the control batches
(transaction markers), which they do not know.

Transactions (KIP-98): every answer carries the partition's last stable offset (v4+). A
consumer's isolation_level (v4+; before, read_uncommitted) decides what it reads: up to the
high watermark, or with read_committed up to the last stable offset, with the aborted
transactions of the range read (from the segments' `.txnindex`), so that it drops their
records. Both read file regions for `sendfile` alike. A follower reads up to the log end.
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from ...protocol.fetch_response import (
    MAX_VERSION,
    MIN_VERSION,
    TOPIC_IDS_FROM,
    PartitionResult,
    TopicResult,
    encode_fetch_response,
)
from ...records.validate import inflate_limit
from ...storage.errors import OffsetOutOfRangeError
from ...cluster import inter_broker_rules as rules
from ..auth import authz
from ..errors import error_code_for
from ..fetch_session import FINAL_EPOCH, INVALID_SESSION_ID
from ..quotas.throttling import fetch_throttle, fetch_with_throttle, release
from .api import Api, RawResponse
from .fetch_conversion import Pending, convert, down_conversion_enabled, legacy_magic
from .common import ms
from .replication import refused

log = logging.getLogger(__name__)

API_KEY = 1
READ_COMMITTED = 1


def _read(broker, topics, max_bytes: int, read_committed: bool, replica_id: int = -1,
          magic: int | None = None, pending: list[Pending] | None = None,
          ) -> tuple[list[TopicResult], int]:
    """Read every partition; with a legacy `magic`, the partitions given records are listed
    in `pending`, to be converted."""
    remaining = max_bytes
    total = 0
    first = True
    results = []
    replicas = broker.replicas  # a cluster: only the leader serves, followers read past the HW
    now = broker.clock.milliseconds() if replica_id >= 0 else 0
    for name, topic_id, partitions, topic_error in topics:
        tr = TopicResult(name or "", topic_id)
        for fp in partitions:
            pr = PartitionResult(fp.partition)
            if read_committed:
                pr.aborted_transactions = []
            partition = broker.partition(name, fp.partition) if name else None
            if topic_error is not None:
                pr.error_code = topic_error
            elif partition is None:
                pr.error_code = ErrorCode.unknown_topic_or_partition
            elif replicas is not None and (code := replicas.leader_error(
                    partition, getattr(fp, "current_leader_epoch", -1))):
                pr.error_code = code
            elif magic is not None and not down_conversion_enabled(broker, name):
                pr.error_code = ErrorCode.unsupported_version  # Kafka's answer when it is off
            else:
                if replica_id >= 0:
                    partition.on_follower_fetch(replica_id, fp.fetch_offset, now)
                hw = partition.high_watermark
                log_ = partition.log
                state = log_.producer_state  # the LSO costs nothing without transactions
                lso = log_.last_stable_offset(hw) if state.ongoing or state.unreplicated else hw
                pr.high_watermark = hw
                pr.last_stable_offset = lso
                pr.log_start_offset = partition.log_start_offset
                try:
                    limit = min(fp.partition_max_bytes, remaining)
                    if limit > 0 or first:
                        # Read at least the first batch whole; past the first partition with
                        # data, a first batch larger than the limit is left out rather than
                        # sent cut short (as Kafka does from Fetch v3: a client given only part
                        # of one batch cannot make progress and fails).
                        if replica_id >= 0:
                            info = log_.read(fp.fetch_offset, limit, min_one_message=True)
                        elif read_committed:
                            info = log_.read(fp.fetch_offset, limit, max_offset=lso,
                                             min_one_message=True, aborted=True)
                        else:
                            info = log_.read(fp.fetch_offset, limit, max_offset=hw,
                                             min_one_message=True)
                        size = info.size
                        if info.regions and (first or size <= limit):
                            pr.records = info.regions
                            if read_committed and replica_id < 0:
                                pr.aborted_transactions = info.aborted_transactions
                            total += size
                            remaining -= size
                            first = False
                            if magic is not None:
                                pending.append(Pending(pr, name, fp.fetch_offset, limit, inflate_limit(
                                    partition.log.config.max_message_bytes)))
                except OffsetOutOfRangeError:
                    pr.error_code = ErrorCode.offset_out_of_range
                except Exception as exc:
                    pr.error_code = error_code_for(exc)
                    log.warning("fetch from %s-%d at offset %d failed: %s", name, fp.partition,
                                fp.fetch_offset, exc)
            tr.partitions.append(pr)
        results.append(tr)
    return results, total


def _topics(broker, body, version):
    out = []
    for ft in body.topics:
        topic_id = getattr(ft, "topic_id", None)
        name = getattr(ft, "topic", None)
        error = None
        if version >= 13:
            tm = broker.metadata.by_id.get(topic_id)
            if tm is None:
                error = ErrorCode.unknown_topic_id
            else:
                name = tm.name
        out.append((name, topic_id, ft.partitions, error))
    return out


async def handle(broker, request, connection):
    body = request.body
    version = request.api_version
    session_id = getattr(body, "session_id", INVALID_SESSION_ID)  # v7+
    epoch = getattr(body, "session_epoch", FINAL_EPOCH)
    if session_id == INVALID_SESSION_ID and epoch == FINAL_EPOCH:
        topics = _topics(broker, body, version)
        if _replica_id(body) >= 0:
            topics = _follower_topics(broker, connection, _replica_id(body), topics)
        elif broker.authorizer is not None:
            topics = _authorized(broker, connection, topics)
        results = await _fetch(broker, body, topics, legacy_magic(version))
        if version <= _LAST_WITHOUT_STORAGE_ERROR:
            _storage_error_as_not_leader(results)
        if broker.metrics is not None:
            broker.metrics.fetched(results)
        pieces, size = encode_fetch_response(version, request.correlation_id, results)
        if broker.quotas.active and _replica_id(body) < 0:
            throttle = fetch_throttle(broker, request, connection, size)
            if throttle:  # over consumer_byte_rate: answered empty, as Kafka answers it
                release(pieces)
                pieces, size = encode_fetch_response(version, request.correlation_id, [],
                                                     throttle_time_ms=throttle)
        return RawResponse(pieces, size)
    return await _handle_in_session(broker, request, connection, session_id, epoch)


def _authorized(broker, connection, topics):
    """`topics` with TOPIC_AUTHORIZATION_FAILED for those the principal may not Read."""
    may = authz.allowed_names(broker, connection, authz.Op.READ, authz.TOPIC,
                              (name for name, _, _, error in topics if error is None and name))
    return [(name, topic_id, parts, error if error is not None or name in may
             else ErrorCode.topic_authorization_failed) for name, topic_id, parts, error in topics]


def _follower_topics(broker, connection, replica_id: int, topics):
    """A follower's fetch reads past the high watermark and moves it: every partition is
    refused (TOPIC_AUTHORIZATION_FAILED, Kafka's answer to a follower without ClusterAction)
    unless the connection is the registered broker `replica_id` (inter_broker_rules)."""
    cluster = broker.cluster
    refusal = rules.follower(authz.peer_broker(broker, connection), replica_id,
                             cluster.view.brokers if cluster is not None else None)
    if refusal is None:
        return topics
    refused(connection, refusal)
    return [(name, topic_id, parts, error if error is not None else refusal.code)
            for name, topic_id, parts, error in topics]


#: Consumers of Fetch v0-v5 may not know KAFKA_STORAGE_ERROR (they take it for a fatal unknown
#: error): as Kafka does, they are told NOT_LEADER_OR_FOLLOWER, which makes them refresh their
#: metadata and retry.
_LAST_WITHOUT_STORAGE_ERROR = 5


def _storage_error_as_not_leader(results: list[TopicResult]) -> None:
    for tr in results:
        for pr in tr.partitions:
            if pr.error_code == ErrorCode.kafka_storage_error:
                pr.error_code = ErrorCode.not_leader_or_follower


async def _fetch(broker, body, topics, magic: int | None = None) -> list[TopicResult]:
    """Read `topics`, waiting as the request allows for `min_bytes` to be there."""
    max_bytes = min(getattr(body, "max_bytes", 2**31 - 1), broker.config.fetch_max_bytes)
    read_committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    max_wait_ms = ms(body.max_wait)
    replica_id = _replica_id(body)
    pending: list[Pending] = []
    results, total = _read(broker, topics, max_bytes, read_committed, replica_id, magic, pending)
    if total < body.min_bytes and max_wait_ms > 0 and not _has_error(results):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        partitions = [p for name, _, parts, err in topics if err is None and name
                      for fp in parts if (p := broker.partition(name, fp.partition)) is not None]
        while total < body.min_bytes:
            remaining = deadline - loop.time()
            if remaining <= 0 or not partitions:
                break
            woken = loop.create_future()

            def wake(fut=woken):
                if not fut.done():
                    fut.set_result(None)

            for p in partitions:
                p.on_new_data(wake)
            try:
                async with asyncio.timeout(remaining):  # (not wait_for: see cluster/channel.py)
                    await woken
            except asyncio.TimeoutError:
                pass
            finally:
                for p in partitions:
                    p.remove_listener(wake)
            pending = []
            results, total = _read(broker, topics, max_bytes, read_committed, replica_id, magic,
                                   pending)
            if _has_error(results):
                break
    if pending:
        await convert(broker, pending, magic)
    return results


def _replica_id(body) -> int:
    """The fetching follower's broker id (v15+ in replica_state), -1 for a consumer."""
    state = getattr(body, "replica_state", None)
    if state is not None:
        return state.replica_id
    return getattr(body, "replica_id", -1)


# ---------------------------------------------------------------- fetch sessions (KIP-227)

async def _handle_in_session(broker, request, connection, session_id: int, epoch: int):
    body = request.body
    version = request.api_version
    uses_topic_ids = version >= TOPIC_IDS_FROM
    field = "topic_id" if uses_topic_ids else "topic"
    fetch = [(getattr(ft, field), fp) for ft in body.topics for fp in ft.partitions]
    forgotten = [(getattr(ft, field), p) for ft in body.forgotten_topics_data
                 for p in ft.partitions]
    context = broker.fetch_sessions.new_context(session_id, epoch, fetch, forgotten, uses_topic_ids)
    if context.error_code:
        pieces, size = encode_fetch_response(version, request.correlation_id, [],
                                             error_code=context.error_code)
        return RawResponse(pieces, size)
    topics = _session_topics(broker, context.partitions, uses_topic_ids)
    if _replica_id(body) >= 0:
        topics = _follower_topics(broker, connection, _replica_id(body), topics)
    elif broker.authorizer is not None:
        topics = _authorized(broker, connection, topics)
    results = await _fetch(broker, body, topics)
    done = context.complete([pr for tr in results for pr in tr.partitions])
    if done.error_code:
        results = []
    elif done.include is not None:
        results = _select(results, done.include)
    if broker.metrics is not None:
        broker.metrics.fetched(results)
    pieces, size = encode_fetch_response(version, request.correlation_id, results,
                                         error_code=done.error_code, session_id=done.session_id)
    if broker.quotas.active and _replica_id(body) < 0:
        # Over consumer_byte_rate in a session: the data goes (the session has moved on to
        # it) with the wait, and the connection is muted; the bytes stay counted.
        throttle = fetch_throttle(broker, request, connection, size, answered_empty=False)
        if throttle:
            pieces = fetch_with_throttle(pieces, version, throttle)
    return RawResponse(pieces, size)


def _session_topics(broker, partitions, uses_topic_ids: bool):
    """(topic key, partition) pairs in order as `_read`'s topics: each run of one topic is one
    topic of the response, so a topic may come more than once, as in Kafka's responses."""
    out = []
    last = object()
    for key, fp in partitions:
        if key != last:
            last = key
            if uses_topic_ids:
                tm = broker.metadata.by_id.get(key)
                if tm is None:
                    out.append((None, key, [], ErrorCode.unknown_topic_id))
                else:
                    out.append((tm.name, key, [], None))
            else:
                out.append((key, None, [], None))
        out[-1][2].append(fp)
    return out


def _select(results: list[TopicResult], include: list[bool]) -> list[TopicResult]:
    out = []
    i = 0
    for tr in results:
        kept = []
        for pr in tr.partitions:
            if include[i]:
                kept.append(pr)
            i += 1
        if kept:
            tr.partitions = kept
            out.append(tr)
    return out


def _has_error(results: list[TopicResult]) -> bool:
    return any(p.error_code for t in results for p in t.partitions)


APIS = [Api(API_KEY, "Fetch", MIN_VERSION, MAX_VERSION, handle)]
