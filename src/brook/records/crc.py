"""CRC-32C (Castagnoli), the checksum of Kafka's v2 record batches and of brook's own files.

fastcrc dispatches to the widest carry-less multiply the CPU has (VPCLMULQDQ with AVX-512
where present): a 16 KiB batch is checked in ~0.4 µs where the SSE4.2-only `crc32c` package
takes ~0.85 µs, and checking every produced batch is a sizeable part of an append
(docs/benchmarks.md, storage). `crc32c(data, initial)` continues a checksum like zlib.crc32.
"""

from __future__ import annotations

from fastcrc.crc32 import iscsi as crc32c

__all__ = ["crc32c"]
