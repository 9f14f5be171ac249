"""Fetch v0-v3: the stored v2 batches a read found, rewritten for consumers that cannot read
them (magic 0 for Fetch v0-v1, magic 1 for v2-v3; `brook.records.down_convert`).

The read itself is the one every Fetch makes (file regions, within the request's byte limits,
the first batch whole). The regions are then read into memory and converted off the event
loop, in a worker thread, so that a large conversion (it decodes and re-encodes every record,
a few microseconds each) does not hold up the broker's other connections; what a request
converts is bounded by its byte limits, plus one first batch over them. Each partition's
messages are cut at whole messages within the bytes its read was allowed (its
`partition_max_bytes`, less what partitions before it took of the response's `max_bytes`),
at least the first message.
A zstd batch cannot be converted: its partition is answered UNSUPPORTED_COMPRESSION_TYPE. A
stored batch that inflates past what Produce lets one inflate to (`records.validate.inflate_limit`;
written before Produce checked records) is not converted: MESSAGE_TOO_LARGE.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.fetch_response import PartitionResult
from ...records.down_convert import Converted, down_convert
from ...records.errors import UnsupportedCompressionError
from ..errors import error_code_for

log = logging.getLogger(__name__)

_MAGIC_0_BEFORE = 2  # Fetch v0-v1 read magic 0 ...
_MAGIC_1_BEFORE = 4  # ... and v2-v3 magic 1; v4 and later read the stored v2 batches as they are


def legacy_magic(version: int) -> int | None:
    """The message format a Fetch version's consumer reads, when it is not the stored v2."""
    if version < _MAGIC_0_BEFORE:
        return 0
    return 1 if version < _MAGIC_1_BEFORE else None


def down_conversion_enabled(broker, topic: str) -> bool:
    """The topic's message.downconversion.enable, else the broker's
    log.message.downconversion.enable (true by default, as in Kafka)."""
    tm = broker.metadata.get(topic)
    value = (tm.configs if tm else {}).get("message.downconversion.enable")
    if value is None:
        value = broker.config.props.get("log.message.downconversion.enable", "true")
    return value.strip().lower() != "false"


@dataclass(slots=True)
class Pending:
    """A partition of the answer whose `records` are file regions still to convert."""

    result: PartitionResult
    topic: str
    fetch_offset: int
    limit: int  # the bytes its read was allowed
    inflate_limit: int  # what a compressed batch of the topic may inflate to


async def convert(broker, pending: list[Pending], magic: int) -> None:
    """Replace each pending partition's regions by its converted message set (or an error)."""
    outcomes = await asyncio.to_thread(_convert_all, pending, magic)
    for p, outcome in zip(pending, outcomes):
        pr = p.result
        for region in pr.records:
            region.release()
        pr.records = ()
        if isinstance(outcome, Converted):
            if outcome.data:
                pr.records = (outcome.data,)
            if broker.metrics is not None and outcome.records:
                broker.metrics.fetch_converted(p.topic, outcome.records)
        elif isinstance(outcome, UnsupportedCompressionError):  # zstd: no legacy codec
            pr.error_code = ErrorCode.unsupported_compression_type
            pr.high_watermark = pr.last_stable_offset = pr.log_start_offset = -1
        else:
            pr.error_code = error_code_for(outcome)
            log.warning("down-converting %s-%d from offset %d failed: %s", p.topic, pr.partition,
                        p.fetch_offset, outcome)


def _convert_all(pending: list[Pending], magic: int) -> list[Any]:
    """In a worker thread: each partition's converted records, or the exception it raised."""
    out: list[Any] = []
    for p in pending:
        try:
            data = b"".join(region.read() for region in p.result.records)
            out.append(down_convert(data, magic, p.fetch_offset, p.limit, p.inflate_limit))
        except Exception as exc:  # answered as that partition's error, on the event loop
            out.append(exc)
    return out
