"""The leader epoch cache of a partition: for every leader epoch the log has seen, the first
offset written in it (KIP-101), kept in the partition's `leader-epoch-checkpoint` in Kafka's
format (a version line `0`, a count, then one `epoch start-offset` line per epoch).

A follower asks its leader where its own latest epoch ends (OffsetForLeaderEpoch) and cuts its
log there: exactly the tail the leader never had, nothing it had. `end_offset_for` is the
leader's side of that question, with KIP-279's answer for an epoch it does not know.
"""

from __future__ import annotations

import os
from bisect import bisect_right

from .errors import KafkaStorageError

FILE_NAME = "leader-epoch-checkpoint"
VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, directory: str | None) -> None:
        self.path = os.path.join(directory, FILE_NAME) if directory else None
        self.entries: list[tuple[int, int]] = []  # (epoch, start offset), both increasing
        if self.path and os.path.exists(self.path):
            self.entries = read_checkpoint(self.path)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def epoch_at(self, offset: int) -> int:
        """The epoch the record at `offset` was written in (UNDEFINED_EPOCH before any)."""
        i = bisect_right([s for _, s in self.entries], offset)
        return self.entries[i - 1][0] if i else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` (no-op unless it is a newer epoch).
        Entries a new epoch overlaps (a start at or past it) go: they were never replicated."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return False
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        self._flush()
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for a follower whose latest epoch is `epoch`: the start of the
        first epoch after it, or the log end if it is the latest. An epoch this log skipped is
        answered with the largest epoch below it (KIP-279), so the follower truncates to where
        both logs agree. An epoch older than every epoch here ends where the first one starts
        (Kafka's answer: whatever the follower has of it, this log does not). Without any
        epoch, or for UNDEFINED_EPOCH: (UNDEFINED_EPOCH, UNDEFINED_OFFSET)."""
        if not self.entries or epoch < 0:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch < self.entries[0][0]:
            return epoch, self.entries[0][1]
        if epoch >= self.entries[-1][0]:
            return self.entries[-1][0], log_end_offset
        epochs = [e for e, _ in self.entries]
        i = bisect_right(epochs, epoch)  # entries[i] is the first epoch above `epoch`
        return self.entries[i - 1][0], self.entries[i][1]

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was cut at `end_offset`: epochs starting there or later are gone."""
        before = len(self.entries)
        while self.entries and self.entries[-1][1] >= end_offset:
            self.entries.pop()
        if len(self.entries) != before:
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Records below `start_offset` are gone: the epoch holding it now starts there."""
        if not self.entries or self.entries[0][1] >= start_offset:
            return
        i = bisect_right([s for _, s in self.entries], start_offset)
        self.entries = [(self.entries[i - 1][0], start_offset)] + self.entries[i:]
        self._flush()

    def clear(self) -> None:
        self.entries = []
        self._flush()

    def _flush(self) -> None:
        if self.path:
            write_checkpoint(self.path, self.entries)


def write_checkpoint(path: str, entries: list[tuple[int, int]]) -> None:
    """Write-then-rename with fsync, as Kafka's CheckpointFile does. A failure of the disk
    (full, I/O error) is a KafkaStorageError, as a failed append is: the log dir goes
    offline, whether a leader or a follower's fetcher was writing."""
    text = f"{VERSION}\n{len(entries)}\n" + "".join(f"{e} {o}\n" for e, o in entries)
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise KafkaStorageError(f"cannot write the leader-epoch checkpoint {path}: {exc}") from exc


def read_checkpoint(path: str) -> list[tuple[int, int]]:
    """The entries of a checkpoint file; a malformed file reads as empty (the cache then
    refills as records are written, as Kafka does without a file)."""
    try:
        with open(path) as f:
            lines = f.read().split("\n")
        if int(lines[0]) != VERSION:
            return []
        count = int(lines[1])
        out = []
        for line in lines[2:2 + count]:
            epoch, offset = line.split()
            out.append((int(epoch), int(offset)))
        if len(out) != count:
            return []
        return out
    except (OSError, ValueError, IndexError):
        return []
