"""The families with a series per partition and per committed offset, written as exposition
text directly: the partitions' log end and start offsets, sizes and segments, and consumer
group lag.

A broker may hold hundreds of thousands of committed offsets. A prometheus_client Sample
object and its formatting per series made a scrape of 100,000 offsets cost about a second of
CPU; here each line is written as prometheus_client would write it (labels in name order,
values by floatToGoString's rules), byte for byte, straight into text, and the lines are the
same in the Prometheus text format and in OpenMetrics.

A scraper may ask for a name escaping (``escaping=dots`` in its Accept header, where
prometheus_client writes ``_`` as ``__``): the families here are written under the names
prometheus_client's ``escape_metric_name`` gives them for that escaping, which are the names
the scrape's other families carry. (One exception, prometheus_client's own: in OpenMetrics
with ``escaping=values`` it writes its sample lines as ``U__...`` even for valid names, while
these keep a valid name as it is, as the escaping scheme says.)
"""

from __future__ import annotations

import logging
from functools import lru_cache

from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.utils import floatToGoString

from .loop_reader import LoopReader

log = logging.getLogger(__package__)

PARTITION_FAMILIES = (
    ("brook_log_end_offset", "The offset of the next record appended."),
    ("brook_log_start_offset", "The first offset still in the log."),
    ("brook_log_size_bytes", "Bytes in the partition's segment files."),
    ("brook_log_segments", "Segments of the partition's log."),
)
LAG_FAMILY = ("brook_consumergroup_lag", "High watermark minus the group's committed offset.")
STATE_FAMILIES = PARTITION_FAMILIES + (LAG_FAMILY,)

#: OpenMetrics' end marker, which closes an exposition.
EOF = b"# EOF\n"
# Integers in [_EXACT_MIN, _EXACT_MAX) are written f"{v}.0", which is what prometheus_client's
# floatToGoString(v) writes for them (it switches to exponents at 1e6, and a float is exact
# up to 2**53); the others go through floatToGoString itself.
_EXACT_MIN, _EXACT_MAX = -(2**53), 1_000_000
# Lines joined into one chunk of bytes at a time.
_CHUNK_LINES = 4096


def _number(v: int) -> str:
    """An integer sample value as prometheus_client writes it."""
    return f"{v}.0" if _EXACT_MIN <= v < _EXACT_MAX else floatToGoString(v)


def _label(value: str) -> str:
    """A label value escaped as both formats want it (backslash, newline, double quote)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class _Only:
    """A registry of one metric, for prometheus_client to write its HELP and TYPE lines."""

    def __init__(self, metric) -> None:
        self.metric = metric

    def collect(self):
        return [self.metric]


#: The escaping of names prometheus_client applies when a scrape names none.
DEFAULT_ESCAPING = getattr(openmetrics, "UNDERSCORES", "underscores")
_escape_name = getattr(openmetrics, "escape_metric_name", None)


def written_names(escaping: str = DEFAULT_ESCAPING) -> dict[str, str]:
    """{family name: the name its lines carry} under a scrape's name escaping."""
    if _escape_name is None:  # a prometheus_client without escapings
        return {name: name for name, _ in STATE_FAMILIES}
    return {name: _escape_name(name, escaping) for name, _ in STATE_FAMILIES}


@lru_cache(maxsize=8)
def family_headers(escaping: str = DEFAULT_ESCAPING) -> dict[str, tuple[bytes, bytes]]:
    """{family name: (text format, OpenMetrics) HELP and TYPE lines}, as prometheus_client
    writes them under this escaping."""
    kwargs = {} if _escape_name is None else {"escaping": escaping}
    headers = {}
    for name, documentation in STATE_FAMILIES:
        only = _Only(GaugeMetricFamily(name, documentation))
        headers[name] = (generate_latest(only, **kwargs),
                         openmetrics.generate_latest(only, **kwargs)[:-len(EOF)])
    return headers


class StateFamilies:
    """The families with a series per partition (log end and start offsets, size, segments) and
    per committed offset (consumer group lag), as exposition text.

    Each line is written as prometheus_client would write it (labels in name order, values by
    floatToGoString's rules) straight into text: no Sample objects, no formatting calls per
    series. The lines are the same in the Prometheus text format and in OpenMetrics. The
    broker's state is read through the `LoopReader`.
    """

    def __init__(self, broker, reader: LoopReader) -> None:
        self.broker = broker
        self.reader = reader

    def collect(self, names: set[str] | None = None,
                escaping: str = DEFAULT_ESCAPING) -> dict[str, list[bytes]]:
        """{family name: its sample lines in chunks} of the families among `names` (all when
        None), their lines named under `escaping`; a section that fails is logged and left
        out."""
        found: dict[str, list[bytes]] = {}
        written = written_names(escaping)
        for section, families, walk in (("partitions", PARTITION_FAMILIES, self._partitions),
                                        ("lag", (LAG_FAMILY,), self._lag)):
            if names is not None and not any(name in names for name, _ in families):
                continue
            try:
                found.update(self.reader.read(lambda walk=walk: walk(written)))
            except Exception:  # a bug here must not cost the scrape its other metrics
                log.exception("collecting the %s metrics failed", section)
        return found

    def _partitions(self, written: dict[str, str]):
        lines: tuple[list[str], ...] = ([], [], [], [])
        chunks: tuple[list[bytes], ...] = ([], [], [], [])
        end, start, size, count = lines
        end_name, start_name, size_name, count_name = (written[n] for n, _ in PARTITION_FAMILIES)
        partitions = self.broker.partitions
        for key in list(partitions):
            partition = partitions.get(key)
            if partition is not None:  # else deleted meanwhile
                topic, index = key
                labels = f'{{partition="{index}",topic="{_label(topic)}"}} '
                lg = partition.log
                segs = lg.segments  # an immutable tuple, replaced (never changed) by the log
                end.append(f"{end_name}{labels}{_number(segs[-1].next_offset)}\n")
                start.append(f"{start_name}{labels}{_number(lg.log_start_offset)}\n")
                size.append(f"{size_name}{labels}{_number(sum(s.size for s in segs))}\n")
                count.append(f"{count_name}{labels}{_number(len(segs))}\n")
                if len(end) >= _CHUNK_LINES:
                    _flush(lines, chunks)
            yield
        _flush(lines, chunks)
        return {name: family for (name, _), family in zip(PARTITION_FAMILIES, chunks)}

    def _lag(self, written: dict[str, str]):
        # One series per committed offset: the partition's high watermark minus the offset,
        # for the partitions the broker has (a deleted topic's offsets have none).
        lines: list[str] = []
        chunks: list[bytes] = []
        add = lines.append
        partitions = self.broker.partitions
        runtime = self.broker.coordinator
        low, high, go = _EXACT_MIN, _EXACT_MAX, floatToGoString
        lag_name = written[LAG_FAMILY[0]]
        for ctx in list(runtime.contexts.values()) if runtime is not None else []:
            shard = ctx.shard
            cache = shard.offsets.cache
            for group in cache.groups():  # a step each: a group's offsets from one instant
                head = f'{lag_name}{{group="{_label(group)}",partition="'
                for topic in cache.topics(group):
                    tail = f'",topic="{_label(topic)}"}} '
                    for index, offset in cache.committed_offsets(group, topic):
                        partition = partitions.get((topic, index))
                        if partition is not None:
                            lag = partition.high_watermark - offset
                            if low <= lag < high:
                                add(f"{head}{index}{tail}{lag}.0\n")
                            else:
                                add(f"{head}{index}{tail}{go(lag)}\n")
                if len(lines) >= _CHUNK_LINES:
                    chunks.append("".join(lines).encode())
                    lines.clear()
                yield
                if runtime.contexts.get(ctx.partition) is not ctx or ctx.shard is not shard:
                    break  # unloaded meanwhile
        chunks.append("".join(lines).encode())
        return {LAG_FAMILY[0]: chunks}


def _flush(lines: tuple[list[str], ...], chunks: tuple[list[bytes], ...]) -> None:
    for family_lines, family_chunks in zip(lines, chunks):
        family_chunks.append("".join(family_lines).encode())
        family_lines.clear()
