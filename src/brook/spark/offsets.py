"""Offsets of a read: the JSON model Spark checkpoints, rate limits and read splits.

An offset of the source is one position per topic partition, held as a dict
``{(topic, partition): offset}``. Its JSON form is Spark's Kafka source's,
``{"topic": {"0": 23, "1": 40}}``, with topics in name order and partitions in numeric
order, so that equal offsets always have equal JSON (Spark compares offsets by their JSON).
In the ``startingOffsets`` / ``endingOffsets`` options, -2 stands for the earliest offset
and -1 for the latest, as in Spark.

Everything here is pure: no client, no Spark.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]

EARLIEST = -2
LATEST = -1


class OffsetsError(ValueError):
    """An offsets JSON that cannot be read (the message says what is wrong)."""


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The JSON-able form: ``{topic: {partition: offset}}`` in a fixed order."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def dumps(offsets: Mapping[TopicPartition, int]) -> str:
    return json.dumps(to_json(offsets), separators=(",", ":"))


def from_json(value: object, what: str = "offsets") -> Offsets:
    """Read ``{topic: {partition: offset}}`` (a dict, or a JSON string of one)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise OffsetsError(f"{what} is not valid JSON ({exc}): {value!r}") from None
    if not isinstance(value, dict):
        raise OffsetsError(f'{what} must be a JSON object like {{"topic": {{"0": 23}}}}, '
                           f"not {value!r}")
    out: Offsets = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, dict):
            raise OffsetsError(f'{what}: topic {topic!r} must map partitions to offsets, like '
                               f'{{"0": 23}}, not {partitions!r}')
        for partition, offset in partitions.items():
            p = _partition(partition, f"{what}: topic {topic!r}")
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise OffsetsError(f"{what}: offset of {topic}-{p} must be an integer, "
                                   f"not {offset!r}")
            out[(topic, p)] = offset
    return out


def assign_from_json(text: str) -> list[TopicPartition]:
    """Read the ``assign`` option: ``{"topicA": [0, 1], "topicB": [2]}``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OffsetsError(f"assign is not valid JSON ({exc}): {text!r}") from None
    if not isinstance(value, dict) or not value:
        raise OffsetsError(f'assign must be a non-empty JSON object like {{"topicA": [0, 1]}}, '
                           f"not {text!r}")
    out: list[TopicPartition] = []
    for topic, partitions in value.items():
        if not isinstance(partitions, list) or not partitions:
            raise OffsetsError(f"assign: topic {topic!r} needs a non-empty list of partitions, "
                               f"not {partitions!r}")
        out += [(topic, _partition(p, f"assign: topic {topic!r}")) for p in partitions]
    if len(set(out)) != len(out):
        raise OffsetsError(f"assign names a partition more than once: {text!r}")
    return sorted(out)


def _partition(value: object, where: str) -> int:
    if isinstance(value, bool):
        raise OffsetsError(f"{where}: partition {value!r} is not a partition number")
    try:
        p = int(value)  # JSON object keys are strings
    except (TypeError, ValueError):
        raise OffsetsError(f"{where}: partition {value!r} is not a partition number") from None
    if p < 0 or (isinstance(value, str) and value != str(p)):
        raise OffsetsError(f"{where}: partition {value!r} is not a partition number")
    return p


def limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
          max_offsets: int) -> Offsets:
    """End offsets that advance at most ``max_offsets`` past ``start`` in total.

    As in Spark's ``maxOffsetsPerTrigger``, the total is split over the partitions in
    proportion to what each has available (``latest - start``); what the rounding leaves over
    goes to the largest remainders, so exactly ``min(max_offsets, available)`` offsets are
    taken. Partitions missing from ``start`` count from 0; partitions whose latest offset is
    not above their start keep their latest offset.
    """
    if max_offsets < 1:
        raise ValueError("max_offsets must be at least 1")
    sizes = {tp: latest[tp] - start.get(tp, 0) for tp in latest}
    available = {tp: n for tp, n in sizes.items() if n > 0}
    total = sum(available.values())
    end = dict(latest)
    if total <= max_offsets:
        return end
    # Integer arithmetic: offsets go up to 2**63, beyond what a float holds exactly.
    shares = {tp: divmod(max_offsets * n, total) for tp, n in available.items()}
    take = {tp: whole for tp, (whole, _) in shares.items()}
    left = max_offsets - sum(take.values())
    by_remainder = sorted(available, key=lambda tp: (-shares[tp][1], tp))
    for tp in by_remainder[:left]:
        take[tp] += 1
    for tp, n in take.items():
        end[tp] = start.get(tp, 0) + n
    return end


@dataclass(frozen=True, slots=True)
class Range:
    """Offsets ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def split(ranges: Iterable[Range], max_records: int | None = None,
          min_partitions: int | None = None) -> list[Range]:
    """Cut offset ranges into read splits, one Spark task each, as Spark's Kafka source does.

    A range of ``n`` offsets becomes ``ceil(n / max_records)`` pieces, and when
    ``min_partitions`` asks for more splits than there are ranges, each range also gets its
    share of ``min_partitions`` in proportion to its size. Pieces are contiguous, in order,
    and of nearly equal sizes. Empty ranges are dropped.
    """
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    out: list[Range] = []
    for r in ranges:
        parts = 1
        if max_records:
            parts = max(parts, math.ceil(r.size / max_records))
        if min_partitions and min_partitions > len(ranges):
            parts = max(parts, (2 * r.size * min_partitions + total) // (2 * total))  # rounded
        parts = min(parts, r.size)
        step, extra = divmod(r.size, parts)
        start = r.start
        for i in range(parts):
            end = start + step + (1 if i < extra else 0)
            out.append(Range(r.topic, r.partition, start, end))
            start = end
    return out


def pack(items: Sequence[T], tasks: int, size: Callable[[T], int]) -> list[list[T]]:
    """``items`` in at most ``tasks`` groups of nearly equal total ``size``: the largest first,
    each into the group that holds least so far (within the largest item of the mean). Every
    item is in one group; groups keep the items' order; none is empty."""
    if tasks <= 0:
        raise ValueError(f"tasks must be positive, not {tasks}")
    if len(items) <= tasks:
        return [[item] for item in items]
    loads = [0] * tasks
    members: list[list[int]] = [[] for _ in range(tasks)]
    for i in sorted(range(len(items)), key=lambda i: -size(items[i])):
        g = min(range(tasks), key=loads.__getitem__)
        loads[g] += size(items[i])
        members[g].append(i)
    return [[items[i] for i in sorted(m)] for m in members if m]



def offsets_behind_latest(end: object, latest: object) -> dict[str, str]:
    """Spark's Kafka source's lag metrics from a progress report's ``endOffset`` and
    ``latestOffset`` (JSON strings or dicts): per partition with a latest offset, latest minus
    the end of the micro-batch (0 when the batch did not read the partition yet), and their
    minimum, maximum and mean, as strings as in ``sources[].metrics``; empty when either is
    missing."""
    if not end or not latest:
        return {}
    consumed = from_json(end, "endOffset")
    behind = [offset - consumed.get(tp, 0) for tp, offset in from_json(latest, "latestOffset")
              .items()]
    if not behind:
        return {}
    return {"minOffsetsBehindLatest": str(min(behind)),
            "maxOffsetsBehindLatest": str(max(behind)),
            "avgOffsetsBehindLatest": str(sum(behind) / len(behind))}
