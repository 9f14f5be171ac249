"""Down-conversion: stored v2 batches rewritten as the legacy message set an old consumer reads
(Fetch v0-v1 read magic 0, Fetch v2-v3 magic 1).

As Kafka converts (its RecordsUtil.downConvert): control batches are dropped (an old
consumer knows no transaction markers); a compressed batch becomes one wrapper message in the
same codec holding all its records, those before the fetch offset included (the consumer
skips them, as it skips them in a v2 batch); an uncompressed batch becomes one plain message per
record from the fetch offset on. Offsets are the stored ones. Magic 1 keeps each record's
timestamp, or the batch's LogAppendTime for every record of a batch in LogAppendTime; magic 0
has no timestamps. Headers have no place in a legacy message and are lost. zstd has no legacy
codec: a batch in zstd cannot be converted (UnsupportedCompressionError, Kafka's
UNSUPPORTED_COMPRESSION_TYPE).

Only whole batches are converted (a batch cut short at the end of a read is left out), and the
result stops at whole messages within `max_bytes`, but always holds the first one, so that a
consumer makes progress.
"""

from __future__ import annotations

from typing import NamedTuple

from .batch import LOG_APPEND_TIME, decode_batch, read_header
from .compression import DEFAULT_LIMIT, Codec
from .errors import TruncatedBatchError, UnsupportedCompressionError
from .legacy import encode_records


class Converted(NamedTuple):
    data: bytes  # the message set
    records: int  # records written into it (Kafka's count of conversions)


def down_convert(buf: bytes | bytearray | memoryview, magic: int, fetch_offset: int,
                 max_bytes: int, limit: int = DEFAULT_LIMIT) -> Converted:
    """The v2 batches in `buf` as a message set of `magic` (0 or 1), at most `max_bytes` long
    unless its first message alone is longer. A compressed batch inflates to at most `limit`
    bytes (InflationLimitError past it)."""
    view = memoryview(buf)
    pieces: list[bytes] = []
    size = records = 0
    pos = 0
    while pos < len(view):
        try:
            header = read_header(view, pos)
        except TruncatedBatchError:
            break
        if pos + header.size > len(view):
            break  # cut short by the read's byte limit
        start, pos = pos, pos + header.size
        if header.is_control:
            continue
        if header.compression == Codec.ZSTD:
            raise UnsupportedCompressionError(
                f"the batch at offset {header.base_offset} is in zstd, which magic {magic} cannot carry")
        batch = decode_batch(view, start, verify=False, limit=limit)
        append_time = batch.max_timestamp if batch.timestamp_type == LOG_APPEND_TIME else None
        if header.compression == Codec.NONE:
            entries = encode_records([r for r in batch.records if r.offset >= fetch_offset],
                                     magic, Codec.NONE, append_time)
            counts = [1] * len(entries)
        elif batch.records:
            entries = encode_records(batch.records, magic, header.compression, append_time)
            counts = [len(batch.records)]
        else:
            continue  # every record compacted away
        for entry, count in zip(entries, counts):
            if pieces and size + len(entry) > max_bytes:
                return Converted(b"".join(pieces), records)
            pieces.append(entry)
            size += len(entry)
            records += count
    return Converted(b"".join(pieces), records)
