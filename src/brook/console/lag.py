"""Lag over time, kept in the console's memory: per group, a sample every interval of the
total lag, the lag of each partition and the sum of its committed offsets, for the last hour
(`keep_s`). Pure: samples come in with their time, nothing here reads a clock or a broker.

Arrays of floats (NaN: no value at that time) keep an hour of a thousand groups in tens of
megabytes rather than in a list of dicts per sample.
"""

from __future__ import annotations

import math
import threading
from array import array
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

TP = tuple[str, int]
NAN = float("nan")
DEFAULT_KEEP_S = 3600.0
RATE_WINDOW_S = 60.0  # how far back the consumption rate is measured
MAX_PARTITION_SERIES = 24  # the chart's partition lines: those with the most lag at the end


def _num(value: float) -> float | None:
    return None if math.isnan(value) else value


@dataclass
class GroupSeries:
    """One group's samples, oldest first, all arrays of the same length."""

    times: array = field(default_factory=lambda: array("d"))  # seconds since the epoch
    total: array = field(default_factory=lambda: array("d"))
    committed: array = field(default_factory=lambda: array("d"))  # sum of committed offsets
    partitions: dict[TP, array] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.times)

    def add(self, at: float, lags: Mapping[TP, int | None],
            committed: Mapping[TP, int | None]) -> None:
        n = len(self.times)
        self.times.append(at)
        known = [lag for lag in lags.values() if lag is not None]
        self.total.append(float(sum(known)) if known else NAN)
        offsets = [o for o in committed.values() if o is not None]
        self.committed.append(float(sum(offsets)) if offsets else NAN)
        for tp, lag in lags.items():
            values = self.partitions.get(tp)
            if values is None:
                values = self.partitions[tp] = array("d", [NAN]) * n
            values.append(NAN if lag is None else float(lag))
        for tp, values in self.partitions.items():
            if len(values) == n:
                values.append(NAN)

    def trim(self, before: float) -> None:
        """Drop the samples older than `before`, and partitions left with no value."""
        cut = bisect_left(self.times, before)
        if not cut:
            return
        for arr in (self.times, self.total, self.committed, *self.partitions.values()):
            del arr[:cut]
        for tp in [tp for tp, v in self.partitions.items() if all(math.isnan(x) for x in v)]:
            del self.partitions[tp]

    def rate(self, window_s: float = RATE_WINDOW_S) -> float | None:
        """Records consumed per second over the last `window_s` (from the committed offsets);
        None with fewer than two samples in the window."""
        if len(self.times) < 2:
            return None
        end = len(self.times) - 1
        first = max(0, bisect_left(self.times, self.times[end] - window_s))
        while first < end and math.isnan(self.committed[first]):
            first += 1
        if first >= end or math.isnan(self.committed[end]):
            return None
        dt = self.times[end] - self.times[first]
        if dt <= 0:
            return None
        return max(0.0, (self.committed[end] - self.committed[first]) / dt)


def time_behind(lag: float | None, rate: float | None) -> float | None:
    """Seconds the group needs to catch up at the rate it consumes: 0 with no lag, None when
    it is not consuming (or nothing is known)."""
    if lag is None:
        return None
    if lag <= 0:
        return 0.0
    if not rate:
        return None
    return lag / rate


def duration_text(seconds: float | None) -> str:
    """`4 s`, `3 min 20 s`, `2 h 5 min`; `not consuming` for None."""
    if seconds is None:
        return "not consuming"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


class LagHistory:
    """Every group's GroupSeries; safe to use from the sampler's thread and the pages'."""

    def __init__(self, keep_s: float = DEFAULT_KEEP_S) -> None:
        self.keep_s = keep_s
        self._groups: dict[str, GroupSeries] = {}
        self._lock = threading.Lock()

    def add(self, group: str, at: float, rows: Iterable[Mapping[str, Any]]) -> None:
        """One sample of a group from its offset rows (topic, partition, current_offset, lag),
        as brook.cli.groups.offset_rows makes them."""
        lags: dict[TP, int | None] = {}
        committed: dict[TP, int | None] = {}
        for r in rows:
            tp = (r["topic"], r["partition"])
            lags[tp] = r["lag"]
            committed[tp] = r["current_offset"]
        with self._lock:
            series = self._groups.setdefault(group, GroupSeries())
            series.add(at, lags, committed)
            series.trim(at - self.keep_s)

    def forget_except(self, groups: Iterable[str], now: float) -> None:
        """Drop the history of groups not in `groups` once their last sample is older than
        the time kept (a deleted group's chart stays for the hour)."""
        keep = set(groups)
        with self._lock:
            for g in [g for g, s in self._groups.items()
                      if g not in keep and (not s.times or s.times[-1] < now - self.keep_s)]:
                del self._groups[g]

    def groups(self) -> list[str]:
        with self._lock:
            return sorted(self._groups)

    def latest(self, group: str) -> tuple[float, float | None, float | None] | None:
        """(time, total lag, consumption rate) of the group's last sample, None if none."""
        with self._lock:
            s = self._groups.get(group)
            if not s:
                return None
            return s.times[-1], _num(s.total[-1]), s.rate()

    def chart(self, group: str, max_partitions: int = MAX_PARTITION_SERIES) -> dict[str, Any]:
        """uPlot's data for a group: times, then the total and the partitions with the most
        lag now (null where a value is missing), and the time behind."""
        with self._lock:
            s = self._groups.get(group)
            if not s:
                return {"t": [], "series": [], "lag": None, "rate": None, "time_behind": None,
                        "hidden_partitions": 0}
            ranked = sorted(s.partitions.items(),
                            key=lambda kv: (-(0 if math.isnan(kv[1][-1]) else kv[1][-1]), kv[0]))
            shown = sorted(ranked[:max_partitions], key=lambda kv: kv[0])
            series = [{"label": "total", "values": [_num(v) for v in s.total]}]
            series += [{"label": f"{t}-{p}", "values": [_num(v) for v in values]}
                       for (t, p), values in shown]
            lag, rate = _num(s.total[-1]), s.rate()
            return {"t": list(s.times), "series": series, "lag": lag, "rate": rate,
                    "time_behind": time_behind(lag, rate),
                    "hidden_partitions": max(0, len(ranked) - max_partitions)}
