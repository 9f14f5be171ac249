"""Helpers shared by the storage tests: build batches and read a whole log back."""

from __future__ import annotations

from brook.records import Codec, Record, encode_batch
from brook.storage.log import Log


def make_batch(n: int, ts: int, *, key_prefix: bytes = b"k", size: int = 10, codec: Codec = Codec.NONE,
               start: int = 0) -> bytes:
    records = [
        Record(i, ts + i, key_prefix + str(start + i).encode(), bytes([i % 251]) * size, (("h", b"%d" % i),))
        for i in range(n)
    ]
    return encode_batch(records, codec=codec)


def read_all(lg: Log, start: int | None = None, max_bytes: int = 1 << 20) -> list:
    """Every record from `start` (default: log start) to the log end, as tuples."""
    offset = lg.log_start_offset if start is None else start
    out = []
    while offset < lg.log_end_offset:
        batches = lg.read(offset, max_bytes).batches()
        if not batches:
            break
        for b in batches:
            for r in b.records:
                if r.offset >= offset:
                    out.append((r.offset, r.timestamp, r.key, r.value, r.headers))
            offset = b.last_offset + 1
    return out
