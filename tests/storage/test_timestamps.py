"""Produce-time timestamp checks for CreateTime topics (message.timestamp.before.max.ms,
message.timestamp.after.max.ms and the deprecated message.timestamp.difference.max.ms),
judged from the batch header's base and max timestamps against the log's clock."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brook.clock import FakeClock
from brook.records import Record, encode_batch
from brook.records.batch import LOG_APPEND_TIME, NO_TIMESTAMP
from brook.storage.config import LONG_MAX, LogConfig
from brook.storage.errors import InvalidTimestampError
from brook.storage.log import Log
from brook.storage.producer_state import AppendOrigin

HOUR = 3_600_000


def batch(*timestamps, **kw):
    return encode_batch([Record(i, ts, b"k%d" % i, b"v") for i, ts in enumerate(timestamps)], **kw)


def open_log(path, config, clock, name="t-0"):
    return Log(str(path / name), config, clock=clock)


def accepted(lg, data, **kw):
    end = lg.log_end_offset
    try:
        lg.append(data, **kw)
    except InvalidTimestampError:
        assert lg.log_end_offset == end
        return False
    return True


def test_kafka_defaults():
    cfg = LogConfig()
    assert cfg.message_timestamp_before_max_ms == LONG_MAX
    assert cfg.message_timestamp_after_max_ms == HOUR  # Kafka 4.0 (KIP-1030)
    assert cfg.message_timestamp_difference_max_ms == LONG_MAX
    props = cfg.to_topic_props()
    assert props["message.timestamp.after.max.ms"] == str(HOUR)
    assert "message.timestamp.difference.max.ms" in props


def test_by_default_old_timestamps_pass_and_more_than_an_hour_ahead_fails(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, LogConfig(), clock)
    now = clock.milliseconds()
    assert accepted(lg, batch(0, 1))
    assert accepted(lg, batch(now + HOUR))
    assert not accepted(lg, batch(now + HOUR + 1))
    lg.close()


@given(before=st.integers(3, 10**9), after=st.integers(0, 10**9), delta=st.integers(-3, 3))
def test_the_bounds_are_inclusive(tmp_path_factory, before, after, delta):
    clock = FakeClock()
    lg = open_log(tmp_path_factory.mktemp("b"), LogConfig(message_timestamp_before_max_ms=before,
                                                          message_timestamp_after_max_ms=after), clock)
    now = clock.milliseconds()
    assert accepted(lg, batch(now - before + delta)) == (delta >= 0)  # base timestamp: the earliest
    assert accepted(lg, batch(now, now + after + delta)) == (delta <= 0)  # max timestamp: the latest
    lg.close()


def test_a_batch_is_judged_by_its_first_and_its_latest_timestamps(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, LogConfig(message_timestamp_before_max_ms=1000,
                                      message_timestamp_after_max_ms=1000), clock)
    now = clock.milliseconds()
    assert not accepted(lg, batch(now - 1001, now, now))  # first too old
    assert not accepted(lg, batch(now, now + 1001, now))  # one record too far ahead
    assert accepted(lg, batch(now - 1000, now + 1000, now))
    lg.close()


def test_records_without_timestamps_are_not_judged(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, LogConfig(message_timestamp_before_max_ms=0,
                                      message_timestamp_after_max_ms=0), clock)
    assert accepted(lg, batch(NO_TIMESTAMP, NO_TIMESTAMP))
    lg.close()


def test_the_log_clock_is_the_reference(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, LogConfig(message_timestamp_before_max_ms=10,
                                      message_timestamp_after_max_ms=10), clock)
    future = batch(clock.milliseconds() + 100)
    assert not accepted(lg, future)
    clock.advance(90)
    assert accepted(lg, future)
    clock.advance(200)
    assert not accepted(lg, future)
    lg.close()


def test_one_bad_batch_refuses_the_whole_append(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, LogConfig(), clock)
    now = clock.milliseconds()
    assert not accepted(lg, batch(now) + batch(now + 2 * HOUR) + batch(now))
    assert lg.log_end_offset == 0 and lg.size == 0
    lg.close()


def test_the_deprecated_difference_key_bounds_both_sides_and_the_tighter_bound_wins(tmp_path):
    clock = FakeClock()
    cfg = LogConfig().with_overrides({"message.timestamp.difference.max.ms": "5000"})
    assert (cfg.timestamp_before_max_ms, cfg.timestamp_after_max_ms) == (5000, 5000)
    cfg2 = cfg.with_overrides({"message.timestamp.after.max.ms": "100"})
    assert (cfg2.timestamp_before_max_ms, cfg2.timestamp_after_max_ms) == (5000, 100)
    broker = LogConfig.from_broker_props({"log.message.timestamp.difference.max.ms": "7"})
    assert (broker.timestamp_before_max_ms, broker.timestamp_after_max_ms) == (7, 7)
    lg = open_log(tmp_path, cfg, clock)
    now = clock.milliseconds()
    assert not accepted(lg, batch(now - 5001))
    assert accepted(lg, batch(now - 5000, now + 5000 - 1))
    lg.close()


def test_broker_level_keys_set_the_defaults():
    cfg = LogConfig.from_broker_props({"log.message.timestamp.before.max.ms": "11",
                                       "log.message.timestamp.after.max.ms": "12"})
    assert (cfg.timestamp_before_max_ms, cfg.timestamp_after_max_ms) == (11, 12)


def test_log_append_time_topics_do_not_judge_producer_timestamps(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime",
                                      message_timestamp_before_max_ms=0, message_timestamp_after_max_ms=0), clock)
    info = lg.append(batch(1, clock.milliseconds() + 10 * HOUR))
    assert info.log_append_time == clock.milliseconds()
    lg.close()


def test_a_producer_may_not_claim_log_append_time_on_a_log_append_time_topic(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"), clock)
    claimed = batch(clock.milliseconds(), timestamp_type=LOG_APPEND_TIME)
    assert not accepted(lg, claimed)
    assert accepted(lg, batch(clock.milliseconds()))
    lg.close()


def test_coordinator_appends_are_judged_too_but_replicated_ones_are_not(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, LogConfig(message_timestamp_after_max_ms=0), clock)
    ahead = clock.milliseconds() + 1
    assert not accepted(lg, batch(ahead), origin=AppendOrigin.COORDINATOR)
    assert accepted(lg, encode_batch([Record(5, ahead, b"k", b"v")]), assign_offsets=False)
    lg.close()
