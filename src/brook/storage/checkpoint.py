"""Offset checkpoint files in Kafka's text format, written atomically.

    0                      <- version
    2                      <- number of entries
    my-topic 0 1234        <- topic partition offset
    my-topic 1 99
"""

from __future__ import annotations

import os

VERSION = 0


class CorruptCheckpointError(Exception):
    pass


def read_checkpoint(path: str) -> dict[tuple[str, int], int]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"{path}: not UTF-8 text ({exc})") from None
    try:
        if int(lines[0]) != VERSION:
            raise CorruptCheckpointError(f"{path}: unknown version {lines[0]!r}")
        count = int(lines[1])
        entries = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split(" ")
            entries[(topic, int(partition))] = int(offset)
    except (IndexError, ValueError) as exc:
        raise CorruptCheckpointError(f"{path}: malformed checkpoint ({exc})") from None
    if len(entries) != count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    return entries


def write_checkpoint(path: str, entries: dict[tuple[str, int], int]) -> None:
    lines = [str(VERSION), str(len(entries))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    atomic_write_text(path, "\n".join(lines) + "\n")


def atomic_write_text(path: str, text: str) -> None:
    """Write to a temporary file, fsync it, rename it over the old one, fsync the directory."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
