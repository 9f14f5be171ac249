"""The run's history: one JSON object per line, one file per writer (each client process, the
nemesis, the final read), merged by time for the checker.

Every event has ``t`` (seconds on CLOCK_MONOTONIC, which all processes of the machine share;
brokers' faked clocks do not touch it: clients and the nemesis run without libfaketime),
``process`` (who recorded it) and ``type``. The types:

=================  =============================================================================
send               invoke of a produce: ``value``, ``partition``
send-ok            its acknowledgement: ``value``, ``partition``, ``offset``
send-fail          a definite failure (the record was not written): ``value``, ``error``
send-info          an indeterminate outcome (it may or may not have been written): ``value``
poll               records a consumer got: ``records`` = [[partition, offset, value], ...]
assign / revoke    a consumer's partitions changed: ``partitions``
commit             invoke of an offset commit: ``offsets`` = {partition: next offset}
commit-ok          its acknowledgement (the partitions the broker accepted): ``offsets``
commit-fail        ``error``
nemesis-start      a fault begins: ``kind``, ``fault`` (an id), ``detail``
nemesis-stop       it is healed: ``kind``, ``fault``
final              the log after healing: ``partition``, ``records`` = [[offset, value], ...]
final-commit       the group's committed offsets after healing: ``offsets``
=================  =============================================================================

Values are ``"<process>:<seq>"``: unique, and ordered per producer process.
"""

from __future__ import annotations

import json
import time
from pathlib import Path


def now() -> float:
    return time.monotonic()


class Recorder:
    """Appends events to one file, each flushed as written (a crash keeps what came before)."""

    def __init__(self, path: str | Path, process: str) -> None:
        self.path = Path(path)
        self.process = process
        self._file = open(self.path, "a", buffering=1, encoding="utf-8")

    def __call__(self, type_: str, **fields) -> dict:
        event = {"t": now(), "process": self.process, "type": type_, **fields}
        self._file.write(json.dumps(event, separators=(",", ":")) + "\n")
        return event

    def close(self) -> None:
        self._file.close()


def load(directory: str | Path) -> list[dict]:
    """Every event of every ``*.jsonl`` file in ``directory``, in time order (a torn last line
    of a killed writer is skipped)."""
    events = []
    for path in sorted(Path(directory).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    events.sort(key=lambda e: e["t"])
    return events


def producer_of(value: str) -> tuple[str, int]:
    """(process, seq) of a value."""
    process, _, seq = value.rpartition(":")
    return process, int(seq)
