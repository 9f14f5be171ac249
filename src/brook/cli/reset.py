"""Where `brook groups reset-offsets` moves a group's offsets: the semantics of Kafka's
kafka-consumer-groups.sh `--reset-offsets`, as pure functions of what the brokers said.

- `--to-earliest` / `--to-latest`: the partition's log start / log end offset.
- `--to-offset N` and `--shift-by N` (from the committed offset, which must exist): the result
  is clamped to [log start, log end], with a warning when clamped.
- `--to-datetime` and `--by-duration` (now minus the duration): the offset of the first record
  whose timestamp is at or after the time; a partition without such a record falls back to its
  log end offset, with a warning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterable, Mapping

from .errors import CliError

TP = tuple[str, int]

DATETIME_FORMAT = "YYYY-MM-DDTHH:mm:SS.sss, optionally followed by Z, +hh:mm or +hh (UTC if none)"

_DATETIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})(Z|[+-]\d{2}(?::\d{2})?)?")

# java.time.Duration.parse: days, hours, minutes, seconds with up to nine decimals, each signed;
# the whole may be negated; letters in either case.
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def parse_datetime(text: str) -> int:
    """Milliseconds since the epoch of Kafka's `--to-datetime` format (see DATETIME_FORMAT)."""
    m = _DATETIME.fullmatch(text.strip())
    if not m:
        raise CliError(f"invalid datetime {text!r}: expected {DATETIME_FORMAT}", code=2)
    year, month, day, hour, minute, second, millis = (int(g) for g in m.groups()[:7])
    zone = m.group(8) or "Z"
    if zone == "Z":
        tz = timezone.utc
    else:
        sign = -1 if zone[0] == "-" else 1
        hours, _, minutes = zone[1:].partition(":")
        if int(hours) > 23 or int(minutes or 0) > 59:
            raise CliError(f"invalid datetime {text!r}: bad zone offset {zone}", code=2)
        tz = timezone(sign * timedelta(hours=int(hours), minutes=int(minutes or 0)))
    try:
        when = datetime(year, month, day, hour, minute, second, millis * 1000, tzinfo=tz)
    except ValueError as exc:
        raise CliError(f"invalid datetime {text!r}: {exc}", code=2) from None
    return (when - _EPOCH) // timedelta(milliseconds=1)


def parse_duration(text: str) -> int:
    """Milliseconds of an ISO-8601 duration as java.time.Duration reads it (PnDTnHnMn.nS)."""
    m = _DURATION.fullmatch(text.strip())
    if (not m or not any(m.group(i) for i in (2, 4, 5, 6))
            or (m.group(3) and not any(m.group(i) for i in (4, 5, 6)))):
        raise CliError(f"invalid duration {text!r}: expected PnDTnHnMnS, e.g. P1DT2H or PT30M",
                       code=2)
    negate, days, _, hours, minutes, seconds, fraction = m.groups()
    nanos = int((fraction or "").ljust(9, "0")) if fraction is not None else 0
    if seconds and seconds.startswith("-"):
        nanos = -nanos
    total_ms = (int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000
                + int(minutes or 0) * 60_000 + int(seconds or 0) * 1000) + nanos // 1_000_000
    return -total_ms if negate == "-" else total_ms


def parse_topic_arg(arg: str) -> tuple[str, list[int] | None]:
    """`topic` (all its partitions: None) or `topic:0,1,2` (those partitions), as Kafka does."""
    if ":" not in arg:
        if not arg.strip():
            raise CliError("empty topic name", code=2)
        return arg.strip(), None
    parts = arg.split(":")
    if len(parts) != 2 or not parts[0].strip():
        raise CliError(f"invalid topic argument {arg!r}: expected TOPIC or TOPIC:P[,P...]", code=2)
    partitions = []
    for p in parts[1].split(","):
        try:
            partitions.append(int(p))
        except ValueError:
            raise CliError(f"invalid partition {p!r} in {arg!r}", code=2) from None
        if partitions[-1] < 0:
            raise CliError(f"invalid partition {p!r} in {arg!r}", code=2)
    return parts[0].strip(), partitions


@dataclass(frozen=True)
class ResetSpec:
    """One reset scenario: earliest, latest, offset (N), shift (N) or timestamp (ms)."""

    kind: str
    value: int = 0

    @property
    def needs_committed(self) -> bool:
        return self.kind == "shift"


def reset_spec(*, to_earliest: bool = False, to_latest: bool = False, to_offset: int | None = None,
               shift_by: int | None = None, to_datetime: str | None = None,
               by_duration: str | None = None, now_ms: int = 0) -> ResetSpec:
    """The scenario of exactly one of the options (now_ms anchors --by-duration)."""
    chosen = [name for name, given in (
        ("--to-earliest", to_earliest), ("--to-latest", to_latest),
        ("--to-offset", to_offset is not None), ("--shift-by", shift_by is not None),
        ("--to-datetime", to_datetime is not None), ("--by-duration", by_duration is not None),
    ) if given]
    if len(chosen) != 1:
        what = "none" if not chosen else " and ".join(chosen)
        raise CliError("choose exactly one of --to-earliest, --to-latest, --to-offset, "
                       f"--shift-by, --to-datetime, --by-duration (got {what})", code=2)
    if to_earliest:
        return ResetSpec("earliest")
    if to_latest:
        return ResetSpec("latest")
    if to_offset is not None:
        return ResetSpec("offset", to_offset)
    if shift_by is not None:
        return ResetSpec("shift", shift_by)
    if to_datetime is not None:
        return ResetSpec("timestamp", parse_datetime(to_datetime))
    return ResetSpec("timestamp", now_ms - parse_duration(by_duration or ""))


@dataclass(frozen=True)
class Change:
    topic: str
    partition: int
    current: int | None  # the committed offset, None if there is none
    new: int


def clamp(tp: TP, offset: int, start: int, end: int, warnings: list[str]) -> int:
    """Kafka's checkOffsetsRange: above the log end -> log end, below the log start -> log start."""
    name = f"{tp[0]}-{tp[1]}"
    if offset > end:
        warnings.append(f"new offset {offset} is above the log end offset of {name}; using {end}")
        return end
    if offset < start:
        warnings.append(f"new offset {offset} is below the log start offset of {name}; "
                        f"using {start}")
        return start
    return offset


def plan(spec: ResetSpec, partitions: Iterable[TP], committed: Mapping[TP, int],
         log_start: Mapping[TP, int], log_end: Mapping[TP, int],
         by_time: Mapping[TP, int] | None = None) -> tuple[list[Change], list[str]]:
    """The new offset of every partition, and warnings for clamped or fallen-back ones.

    `committed` holds the group's committed offsets, `by_time` the offset of the first record at
    or after the spec's timestamp (-1 when there is none) for a timestamp spec.
    """
    changes, warnings = [], []
    for tp in sorted(set(partitions)):
        start, end = log_start[tp], log_end[tp]
        current = committed.get(tp)
        if spec.kind == "earliest":
            new = start
        elif spec.kind == "latest":
            new = end
        elif spec.kind == "offset":
            new = clamp(tp, spec.value, start, end, warnings)
        elif spec.kind == "shift":
            if current is None:
                raise CliError(f"cannot shift the offset of {tp[0]}-{tp[1]}: the group has no "
                               "committed offset for it")
            new = clamp(tp, current + spec.value, start, end, warnings)
        elif spec.kind == "timestamp":
            found = (by_time or {}).get(tp, -1)
            if found < 0:
                warnings.append(f"{tp[0]}-{tp[1]} has no record at or after the time; "
                                f"using its log end offset {end}")
                new = end
            else:
                new = found
        else:
            raise ValueError(f"unknown reset kind {spec.kind!r}")
        changes.append(Change(tp[0], tp[1], current, new))
    return changes, warnings
