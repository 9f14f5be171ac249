"""Fetch: file regions of each partition's log, sent with `sendfile`.

If fewer than `min_bytes` are available the request waits, up to `max_wait_ms`, and is
woken by the first append to any partition it asked for (no polling). Sessions
(KIP-227) are declined: every response has session id 0, which clients take as "send full
fetch requests", and an incremental request gets FETCH_SESSION_ID_NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from ...protocol.fetch_response import MAX_VERSION, MIN_VERSION, PartitionResult, TopicResult, encode_fetch_response
from ...storage.errors import OffsetOutOfRangeError
from ..errors import error_code_for
from . import Api, RawResponse
from .common import ms

log = logging.getLogger(__name__)

API_KEY = 1
READ_COMMITTED = 1


def _read(broker, topics, max_bytes: int, read_committed: bool) -> tuple[list[TopicResult], int]:
    remaining = max_bytes
    total = 0
    first = True
    results = []
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
            else:
                hw = partition.high_watermark
                pr.high_watermark = pr.last_stable_offset = hw
                pr.log_start_offset = partition.log_start_offset
                try:
                    limit = min(fp.partition_max_bytes, remaining)
                    if limit > 0 or first:
                        info = partition.log.read(fp.fetch_offset, limit, max_offset=hw,
                                                  min_one_message=first)
                        if info.regions:
                            pr.records = info.regions
                            size = info.size
                            total += size
                            remaining -= size
                            first = False
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
    session_id = getattr(body, "session_id", 0)
    if session_id != 0:
        pieces, size = encode_fetch_response(version, request.correlation_id, [],
                                             error_code=ErrorCode.fetch_session_id_not_found)
        return RawResponse(pieces, size)
    topics = _topics(broker, body, version)
    max_bytes = min(getattr(body, "max_bytes", 2**31 - 1), broker.config.fetch_max_bytes)
    read_committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    max_wait_ms = ms(body.max_wait)
    results, total = _read(broker, topics, max_bytes, read_committed)
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
                await asyncio.wait_for(woken, remaining)
            except asyncio.TimeoutError:
                pass
            finally:
                for p in partitions:
                    p.remove_listener(wake)
            results, total = _read(broker, topics, max_bytes, read_committed)
            if _has_error(results):
                break
    pieces, size = encode_fetch_response(version, request.correlation_id, results)
    return RawResponse(pieces, size)


def _has_error(results: list[TopicResult]) -> bool:
    return any(p.error_code for t in results for p in t.partitions)


APIS = [Api(API_KEY, "Fetch", MIN_VERSION, MAX_VERSION, handle)]
