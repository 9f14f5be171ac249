"""The console's lag history: samples kept for the hour, the chart's series, the consumption
rate and the time behind, on made-up times (no clock, no broker)."""

import math

from brook.console.lag import GroupSeries, LagHistory, duration_text, time_behind


def rows(**lags):
    """offset rows of topic t: partition p -> (committed, lag)."""
    return [{"topic": "t", "partition": int(p[1:]), "current_offset": c, "lag": lag}
            for p, (c, lag) in lags.items()]


def test_chart_has_the_total_and_each_partition_with_gaps_for_missing_values():
    h = LagHistory()
    h.add("g", 100.0, rows(p0=(10, 5)))
    h.add("g", 101.0, rows(p0=(12, 3), p1=(0, 7)))
    chart = h.chart("g")
    assert chart["t"] == [100.0, 101.0]
    assert chart["series"][0] == {"label": "total", "values": [5.0, 10.0]}
    assert chart["series"][1] == {"label": "t-0", "values": [5.0, 3.0]}
    assert chart["series"][2] == {"label": "t-1", "values": [None, 7.0]}
    assert chart["lag"] == 10.0


def test_samples_older_than_the_time_kept_are_dropped():
    h = LagHistory(keep_s=10)
    for t in range(0, 30):
        h.add("g", float(t), rows(p0=(t, 1)))
    chart = h.chart("g")
    assert chart["t"][0] == 19.0 and chart["t"][-1] == 29.0


def test_a_partition_without_values_left_is_forgotten():
    s = GroupSeries()
    s.add(0.0, {("t", 0): 1}, {("t", 0): 1})
    s.add(5.0, {("t", 1): 1}, {("t", 1): 1})
    s.trim(1.0)
    assert list(s.partitions) == [("t", 1)]


def test_rate_and_time_behind_come_from_the_committed_offsets():
    h = LagHistory()
    h.add("g", 0.0, rows(p0=(100, 1000)))
    h.add("g", 10.0, rows(p0=(300, 800)))  # 200 records in 10 s
    _, lag, rate = h.latest("g")
    assert rate == 20.0
    assert time_behind(lag, rate) == 40.0
    assert h.chart("g")["time_behind"] == 40.0


def test_time_behind_is_zero_without_lag_and_unknown_when_not_consuming():
    assert time_behind(0, None) == 0.0
    assert time_behind(5, 0.0) is None
    assert time_behind(None, 3.0) is None
    assert duration_text(None) == "not consuming"
    assert duration_text(4.2) == "4 s"
    assert duration_text(200) == "3 min 20 s"
    assert duration_text(7500) == "2 h 5 min"


def test_the_chart_draws_the_partitions_with_most_lag_and_counts_the_others():
    h = LagHistory()
    h.add("g", 0.0, [{"topic": "t", "partition": p, "current_offset": 0, "lag": p}
                     for p in range(30)])
    chart = h.chart("g", max_partitions=5)
    assert [s["label"] for s in chart["series"]] == ["total", "t-25", "t-26", "t-27", "t-28",
                                                     "t-29"]
    assert chart["hidden_partitions"] == 25


def test_groups_gone_are_forgotten_after_the_time_kept():
    h = LagHistory(keep_s=60)
    h.add("old", 0.0, rows(p0=(1, 1)))
    h.add("new", 0.0, rows(p0=(1, 1)))
    h.forget_except(["new"], now=30.0)
    assert h.groups() == ["new", "old"]  # a deleted group's chart stays for the hour
    h.forget_except(["new"], now=61.0)
    assert h.groups() == ["new"]


def test_unknown_lag_is_a_gap_not_a_zero():
    h = LagHistory()
    h.add("g", 0.0, rows(p0=(None, None)))
    chart = h.chart("g")
    assert chart["series"][0]["values"] == [None] and chart["lag"] is None
    assert math.isnan(h._groups["g"].total[0])
