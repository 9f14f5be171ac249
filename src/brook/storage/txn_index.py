"""The aborted-transaction index of a segment (`.txnindex`), in Kafka's format.

One entry per transaction aborted by a marker written in the segment, in the order of the
markers: 34 bytes, big-endian,

    version int16 (0) | producer_id int64 | first_offset int64 | last_offset int64
    | last_stable_offset int64

`first_offset` is the transaction's first offset (it may lie in an earlier segment),
`last_offset` the offset of its ABORT marker, and `last_stable_offset` the log's last stable
offset once the transaction ended: the first offset of the earliest transaction of another
producer still open then, or `last_offset + 1` if none was. A read_committed Fetch collects the
entries that overlap the range it returns from this segment onward, and may stop at the first
entry whose last stable offset is at or past the end of that range: every transaction that
began before it had ended by then, so no later marker can abort data of the range.

As in Kafka the file is created by the first entry, and a missing file is an empty index. It is
written through (an abort is rare; the bytes go to the file at once), fsynced with its segment,
and a cache like the other indexes: recovery rebuilds it from the log. The entries are kept in
memory once read, loaded lazily (most segments have none and no file).
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from typing import NamedTuple

from .index import CorruptIndexError

TXN_INDEX_SUFFIX = ".txnindex"
VERSION = 0
ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ENTRY.pack(VERSION, *self)


def decode_entries(data: bytes, path: str = "") -> list[AbortedTxn]:
    """The entries of a `.txnindex` file's bytes. Raises CorruptIndexError."""
    if len(data) % ENTRY_SIZE:
        raise CorruptIndexError(f"{path}: size {len(data)} is not a multiple of {ENTRY_SIZE}")
    out = []
    for version, *fields in ENTRY.iter_unpack(data):
        if version != VERSION:
            raise CorruptIndexError(f"{path}: aborted transaction entry of version {version}")
        out.append(AbortedTxn(*fields))
    return out


class TransactionIndex:
    """The `.txnindex` of one segment."""

    __slots__ = ("path", "base_offset", "_entries", "_unsynced")

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None  # None: not read yet
        self._unsynced = False

    @property
    def entries(self) -> list[AbortedTxn]:
        """Every entry, oldest first (read from the file the first time)."""
        entries = self._entries
        if entries is None:
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = b""
            entries = self._entries = decode_entries(data, self.path)
        return entries

    def __len__(self) -> int:
        return len(self.entries)

    def load(self, next_offset: int | None = None) -> None:
        """Read the file and check it (Kafka's sanityCheck, and more): markers in order, each
        in this segment, below `next_offset` (the segment's end) when given, with its
        transaction's first offset at or before it. Raises CorruptIndexError."""
        self._entries = None
        entries = self.entries
        last = self.base_offset - 1
        for e in entries:
            if e.last_offset <= last or e.first_offset > e.last_offset or e.producer_id < 0 \
                    or (next_offset is not None and e.last_offset >= next_offset):
                self._entries = None
                raise CorruptIndexError(f"{self.path}: entry {e} is out of order or out of "
                                        "the segment")
            last = e.last_offset

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(f"{self.path}: aborted transaction {txn} is not after {entries[-1]}")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            data = txn.encode()
            if os.write(fd, data) != len(data):
                raise OSError(f"short write to {self.path}")
        finally:
            os.close(fd)
        entries.append(txn)
        self._unsynced = True

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """The entries whose transactions overlap [fetch_offset, upper_bound_offset), and
        whether the search is complete (else it goes on in the next segment)."""
        entries = self.entries
        out = []
        # Entries are in marker order: those before the fetch offset neither overlap the range
        # nor end the search (a transaction that ended before it cannot vouch for one after).
        for i in range(bisect_left(entries, fetch_offset, key=_last_offset), len(entries)):
            e = entries[i]
            if e.first_offset < upper_bound_offset:
                out.append(e)
            if e.last_stable_offset >= upper_bound_offset:
                return out, True
        return out, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or after `offset`."""
        entries = self.entries
        n = bisect_left(entries, offset, key=_last_offset)
        if n == len(entries):
            return
        self._entries = entries[:n]  # a new list: a reader's snapshot stays whole
        if n == 0:
            self._unlink()
        else:
            os.truncate(self.path, n * ENTRY_SIZE)
            self._unsynced = True

    def reset(self) -> None:
        self._entries = []
        self._unlink()

    def flush(self) -> None:
        if self._unsynced:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                self._unsynced = False
                return
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._unsynced = False

    def rename(self, path: str) -> None:
        if os.path.exists(self.path):
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self._unlink()

    def _unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._unsynced = False

    def __repr__(self) -> str:
        return f"TransactionIndex({self.path!r})"


def _last_offset(e: AbortedTxn) -> int:
    return e.last_offset
