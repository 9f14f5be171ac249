"""Log.append's two paths agree.

The common Produce (one batch, no producer id, with timestamps, passing every check) takes
a shorter path than the general one. Here every append goes to two logs with the same
config and clock: one through `append` (short path when it applies), the other through
the general path alone. The answers, the errors, the segments, the indexes and every byte
on disk must be the same.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from tests.support.examples import examples

from brook.clock import FakeClock
from brook.records import Record, encode_batch
from brook.records.batch import LOG_APPEND_TIME
from brook.storage.config import LONG_MAX, LogConfig
from brook.storage.log import Log
from brook.storage.producer_state import AppendOrigin

HOUR = 3_600_000


def general_append(lg: Log, records: bytes, leader_epoch: int | None = None,
                   origin: AppendOrigin = AppendOrigin.CLIENT):
    return lg._append(memoryview(records), lg.clock.milliseconds(), leader_epoch, True, origin)


configs = st.builds(
    LogConfig,
    segment_bytes=st.integers(300, 4000),
    segment_ms=st.sampled_from([1, 60_000, HOUR, 7 * 24 * HOUR]),
    segment_index_bytes=st.integers(8, 120),
    index_interval_bytes=st.integers(0, 600),
    flush_messages=st.sampled_from([1, 7, 50, LONG_MAX]),
    max_message_bytes=st.integers(200, 5000),
    message_timestamp_type=st.sampled_from(["CreateTime", "CreateTime", "LogAppendTime"]),
    message_timestamp_before_max_ms=st.sampled_from([LONG_MAX, HOUR]),
    message_timestamp_after_max_ms=st.sampled_from([0, HOUR]),
)

# What can differ from the common case, one batch at a time (most batches are plain).
FLAWS = ["plain"] * 6 + ["no_timestamps", "old", "future", "idempotent", "control", "log_append_time",
                         "base_offset", "count_mismatch", "bad_crc", "bad_magic", "truncated"]

batch_specs = st.tuples(
    st.integers(1, 6),  # records
    st.integers(0, 300),  # value size
    st.sampled_from(FLAWS),
    st.integers(-5000, 5000),  # timestamp skew from the clock, ms
)

appends = st.lists(
    st.tuples(
        st.lists(batch_specs, min_size=1, max_size=3),  # batches in one append
        st.sampled_from([None, None, 3]),  # leader epoch
        st.sampled_from([AppendOrigin.CLIENT] * 4 + [AppendOrigin.COORDINATOR]),
        st.sampled_from([0, 0, 1, 1000, 2 * HOUR]),  # clock advance before the append
    ),
    min_size=1,
    max_size=25,
)


def build(spec, now: int, sequences: dict[int, int]) -> bytes:
    n, size, flaw, skew = spec
    ts = now + skew
    records = [Record(i, ts + i, None, bytes([i]) * size) for i in range(n)]
    kw: dict = {}
    if flaw == "no_timestamps":
        records = [Record(i, -1, None, bytes([i]) * size) for i in range(n)]
    elif flaw == "old":
        records = [Record(i, now - 2 * HOUR + i, None, b"x") for i in range(n)]
    elif flaw == "future":
        kw["max_timestamp"] = now + 2 * HOUR
    elif flaw == "idempotent":
        seq = sequences.get(7, 0)
        sequences[7] = seq + n
        kw.update(producer_id=7, producer_epoch=0, base_sequence=seq)
    elif flaw == "control":
        kw["control"] = True
    elif flaw == "log_append_time":
        kw["timestamp_type"] = LOG_APPEND_TIME
    elif flaw == "base_offset":
        kw["base_offset"] = 5
    elif flaw == "count_mismatch":
        kw["last_offset_delta"] = n
    data = bytearray(encode_batch(records, **kw))
    if flaw == "bad_crc":
        data[-1] ^= 0x01
    elif flaw == "bad_magic":
        data[16] = 1
    elif flaw == "truncated":
        del data[-3:]
    return bytes(data)


def outcome(call):
    try:
        return ("ok", tuple(call()))
    except Exception as exc:  # the error type and message must match too
        return ("error", type(exc).__name__, str(exc))


def segment_state(lg: Log) -> list:
    return [(s.base_offset, s.size, s.next_offset, s.max_timestamp_so_far, s.offset_of_max_timestamp,
             s.rolling_base_ms, s.bytes_since_last_index, s.index_full, s.created_ms,
             [s.index._entry_bytes(i) for i in range(len(s.index))],
             [s.time_index._entry_bytes(i) for i in range(len(s.time_index))],
             os.pread(s.fd, s.size + 1, 0))
            for s in lg.segments]


def directory_bytes(path: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = f.read()
    return out


@settings(max_examples=examples(100))
@given(config=configs, ops=appends)
def test_short_path_and_general_path_leave_the_same_log(tmp_path_factory, config, ops):
    root = tmp_path_factory.mktemp("paths")
    clock = FakeClock()
    # one topic partition in two directories: error messages name it
    short = Log(str(root / "short" / "t-0"), config, clock=clock)
    general = Log(str(root / "general" / "t-0"), config, clock=clock)
    general_calls = []
    real_general = short._append
    short._append = lambda *a: (general_calls.append(1), real_general(*a))[1]
    sequences: dict[int, int] = {}
    for specs, leader_epoch, origin, advance in ops:
        clock.advance(advance)
        data = b"".join(build(spec, clock.milliseconds(), sequences) for spec in specs)
        before = len(general_calls)
        got = outcome(lambda: short.append(data, leader_epoch=leader_epoch, origin=origin))
        want = outcome(lambda: general_append(general, data, leader_epoch, origin))
        event("short path" if len(general_calls) == before else "general path")
        assert got == want
        assert short.log_end_offset == general.log_end_offset
        assert short.unflushed_messages == general.unflushed_messages
        assert short.recovery_point == general.recovery_point
    assert segment_state(short) == segment_state(general)
    assert short.producer_state.snapshot(short.log_end_offset) == \
        general.producer_state.snapshot(general.log_end_offset)
    short.close()
    general.close()
    assert directory_bytes(short.directory) == directory_bytes(general.directory)


def test_a_plain_produce_takes_the_short_path(tmp_path):
    clock = FakeClock()
    lg = Log(str(tmp_path / "t-0"), LogConfig(index_interval_bytes=100), clock=clock)
    lg._append = lambda *a: pytest.fail("took the general path")
    batch = encode_batch([Record(i, clock.milliseconds(), None, b"v" * 200) for i in range(3)])
    for i in range(4):
        info = lg.append(batch, leader_epoch=2)
        assert (info.first_offset, info.last_offset, info.record_count) == (3 * i, 3 * i + 2, 3)
        assert info.max_timestamp == clock.milliseconds() and info.offset_of_max_timestamp == 3 * i + 2
    seg = lg.active_segment
    # an index entry for every batch after more than index.interval.bytes
    assert [seg.index.lookup(o) for o in (3, 6, 9)] == [(3, len(batch)), (6, 2 * len(batch)),
                                                         (9, 3 * len(batch))]
    assert lg.read(6, 1).batches()[0].partition_leader_epoch == 2
    lg.close()


@pytest.mark.parametrize("flaw", ["no_timestamps", "idempotent", "control", "bad_crc", "count_mismatch"])
def test_anything_but_the_common_case_takes_the_general_path(tmp_path, flaw):
    clock = FakeClock()
    lg = Log(str(tmp_path / "t-0"), LogConfig(), clock=clock)
    calls = []
    real = lg._append
    lg._append = lambda *a: (calls.append(1), real(*a))[1]
    outcome(lambda: lg.append(build((2, 10, flaw, 0), clock.milliseconds(), {})))
    assert calls == [1]
    lg.close()


def test_the_short_path_honours_flush_messages_and_rolls(tmp_path):
    clock = FakeClock()
    batch = encode_batch([Record(i, clock.milliseconds(), None, b"v" * 100) for i in range(4)])
    config = LogConfig(flush_messages=8, segment_bytes=3 * len(batch))
    lg = Log(str(tmp_path / "t-0"), config, clock=clock)
    lg._append = lambda *a: pytest.fail("took the general path")
    lg.append(batch)
    assert (lg.unflushed_messages, lg.recovery_point) == (4, 0)
    lg.append(batch)
    assert (lg.unflushed_messages, lg.recovery_point) == (0, 8)
    lg.append(batch)
    lg.append(batch)  # would pass segment.bytes: a new segment
    assert [s.base_offset for s in lg.segments] == [0, 12]
    lg.close()


def test_a_replaced_config_applies_to_the_next_append(tmp_path):
    clock = FakeClock()
    lg = Log(str(tmp_path / "t-0"), LogConfig(), clock=clock)
    batch = encode_batch([Record(i, clock.milliseconds(), None, b"v" * 100) for i in range(4)])
    lg.append(batch)
    lg.config = LogConfig(max_message_bytes=len(batch) - 1)
    assert outcome(lambda: lg.append(batch))[1] == "RecordTooLargeError"
    lg.config = LogConfig(message_timestamp_type="LogAppendTime")
    clock.advance(5)
    info = lg.append(batch)
    assert info.log_append_time == clock.milliseconds() == info.max_timestamp
    lg.config = LogConfig(flush_messages=1)
    lg.append(batch)
    assert lg.recovery_point == lg.log_end_offset == 12
    lg.close()
