"""Where `brook groups reset-offsets` moves offsets: Kafka's reset semantics as pure functions
(brook.cli.reset), without a broker."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brook.cli.errors import CliError
from brook.cli.reset import (Change, ResetSpec, parse_datetime, parse_duration, parse_topic_arg,
                             plan, reset_spec)


def ms(*args, tz=timezone.utc) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)


# --- --to-datetime ----------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("2024-01-02T03:04:05.678", ms(2024, 1, 2, 3, 4, 5) + 678),  # no zone: UTC, as Kafka
    ("2024-01-02T03:04:05.678Z", ms(2024, 1, 2, 3, 4, 5) + 678),
    ("2024-01-02T03:04:05.000+01:00", ms(2024, 1, 2, 2, 4, 5)),
    ("2024-01-02T03:04:05.000-05", ms(2024, 1, 2, 8, 4, 5)),
    ("1970-01-01T00:00:00.000", 0),
    ("2024-02-29T23:59:59.999+00:00", ms(2024, 3, 1) - 1),
])
def test_datetime_formats_kafka_accepts(text, expected):
    assert parse_datetime(text) == expected


@pytest.mark.parametrize("text", [
    "2024-01-02 03:04:05.678",  # Kafka requires the T
    "2024-01-02T03:04:05",  # and milliseconds
    "2024-01-02T03:04:05.6",
    "2024-13-02T03:04:05.000",
    "2023-02-29T00:00:00.000",
    "2024-01-02T03:04:05.000+25:00",
    "2024-01-02T03:04:05.000+0100",
    "yesterday",
])
def test_datetime_rejects_other_formats_as_usage_errors(text):
    with pytest.raises(CliError) as err:
        parse_datetime(text)
    assert err.value.code == 2
    assert "YYYY-MM-DDTHH:mm:SS.sss" in err.value.message or "invalid datetime" in err.value.message


# --- --by-duration ----------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    # java.time.Duration.parse's own examples
    ("PT20.345S", 20_345),
    ("PT15M", 15 * 60_000),
    ("PT10H", 10 * 3_600_000),
    ("P2D", 2 * 86_400_000),
    ("P2DT3H4M", 2 * 86_400_000 + 3 * 3_600_000 + 4 * 60_000),
    ("PT-6H3M", -6 * 3_600_000 + 3 * 60_000),
    ("-PT6H3M", -(6 * 3_600_000 + 3 * 60_000)),
    ("-PT-6H+3M", 6 * 3_600_000 - 3 * 60_000),
    ("pt1h", 3_600_000),
    ("PT-0.5S", -500),
    ("P0D", 0),
])
def test_duration_as_java_reads_it(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["P", "PT", "P1DT", "P1Y", "P1M", "1D", "PT1.5H", "", "P-D"])
def test_duration_rejects_what_java_rejects(text):
    with pytest.raises(CliError) as err:
        parse_duration(text)
    assert err.value.code == 2


def test_by_duration_is_now_minus_the_duration():
    spec = reset_spec(by_duration="PT1H", now_ms=10_000_000)
    assert spec == ResetSpec("timestamp", 10_000_000 - 3_600_000)


# --- scope and scenario -----------------------------------------------------------------------


def test_topic_arguments():
    assert parse_topic_arg("orders") == ("orders", None)
    assert parse_topic_arg("orders:0,2,5") == ("orders", [0, 2, 5])
    for bad in ("orders:", "orders:x", ":0", "a:1:2", "orders:-1", ""):
        with pytest.raises(CliError):
            parse_topic_arg(bad)


def test_exactly_one_scenario():
    with pytest.raises(CliError, match="got none"):
        reset_spec()
    with pytest.raises(CliError, match="--to-earliest and --to-offset"):
        reset_spec(to_earliest=True, to_offset=3)
    assert reset_spec(to_latest=True) == ResetSpec("latest")
    assert reset_spec(to_offset=0) == ResetSpec("offset", 0)
    assert reset_spec(shift_by=-2) == ResetSpec("shift", -2)
    assert reset_spec(to_datetime="1970-01-01T00:00:01.000") == ResetSpec("timestamp", 1000)


# --- the plan ---------------------------------------------------------------------------------

A0, A1 = ("a", 0), ("a", 1)
START = {A0: 10, A1: 0}
END = {A0: 50, A1: 5}


def test_earliest_and_latest_are_the_log_bounds():
    changes, warnings = plan(ResetSpec("earliest"), [A1, A0], {A0: 30}, START, END)
    assert changes == [Change("a", 0, 30, 10), Change("a", 1, None, 0)]
    assert warnings == []
    changes, _ = plan(ResetSpec("latest"), [A0, A1], {A0: 30}, START, END)
    assert [c.new for c in changes] == [50, 5]


def test_to_offset_is_clamped_with_warnings():
    changes, warnings = plan(ResetSpec("offset", 7), [A0, A1], {}, START, END)
    assert [c.new for c in changes] == [10, 5]
    assert len(warnings) == 2
    assert "below the log start offset of a-0; using 10" in warnings[0]
    assert "above the log end offset of a-1; using 5" in warnings[1]


def test_shift_moves_the_committed_offset_and_needs_one():
    changes, warnings = plan(ResetSpec("shift", -5), [A0], {A0: 30}, START, END)
    assert changes == [Change("a", 0, 30, 25)] and warnings == []
    changes, warnings = plan(ResetSpec("shift", 100), [A0], {A0: 30}, START, END)
    assert changes[0].new == 50 and warnings
    with pytest.raises(CliError, match="no committed offset"):
        plan(ResetSpec("shift", 1), [A0, A1], {A0: 30}, START, END)


def test_timestamp_falls_back_to_the_log_end():
    changes, warnings = plan(ResetSpec("timestamp", 123), [A0, A1], {}, START, END,
                             by_time={A0: 42, A1: -1})
    assert [c.new for c in changes] == [42, 5]
    assert warnings == ["a-1 has no record at or after the time; using its log end offset 5"]


bounds = st.tuples(st.integers(0, 1000), st.integers(0, 1000)).map(sorted)


@given(bounds, st.integers(-2000, 2000), st.one_of(st.none(), st.integers(0, 1000)),
       st.sampled_from(["offset", "shift", "earliest", "latest"]))
def test_offsets_always_land_within_the_log(bound, value, committed, kind):
    start, end = bound
    committed_map = {} if committed is None else {A0: committed}
    spec = ResetSpec(kind, value)
    if kind == "shift" and committed is None:
        with pytest.raises(CliError):
            plan(spec, [A0], committed_map, {A0: start}, {A0: end})
        return
    (change,), warnings = plan(spec, [A0], committed_map, {A0: start}, {A0: end})
    assert start <= change.new <= end
    assert change.current == committed
    requested = {"offset": value, "shift": (committed or 0) + value,
                 "earliest": start, "latest": end}[kind]
    assert (change.new == requested) == (not warnings)
