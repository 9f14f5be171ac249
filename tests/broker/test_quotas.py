"""The quota core on a fake clock: Kafka's windowed rate, its throttle time, and which of the
eight entity levels applies."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brook.broker.quotas.client_quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotas,
    Entity,
    Rate,
    sanitize,
    throttle_time_ms,
    validate_value,
)
from brook.clock import FakeClock
from tests.support.examples import examples

# Kafka's eight levels, first wins (user "alice", client id "app").
LEVELS = [
    Entity(True, "alice", True, "app"),
    Entity(True, "alice", True, None),
    Entity(True, "alice"),
    Entity(True, None, True, "app"),
    Entity(True, None, True, None),
    Entity(True, None),
    Entity(client_set=True, client_id="app"),
    Entity(client_set=True, client_id=None),
]


# ---------------------------------------------------------------- the rate

def test_a_new_rate_is_measured_over_at_least_one_whole_window():
    """One sample of data is not a rate over the few ms it covers: the span counts as at least
    one window (1 s; Kafka's ten let a new client burst ten seconds of its quota)."""
    clock = FakeClock()
    rate = Rate()
    rate.record(1000, clock.milliseconds())
    assert rate.window_size(clock.milliseconds()) == 1_000
    assert rate.measure(clock.milliseconds()) == pytest.approx(1000.0)
    clock.advance(500)
    assert rate.window_size(clock.milliseconds()) == 1_000
    clock.advance(2000)
    assert rate.window_size(clock.milliseconds()) == 2_500
    assert rate.measure(clock.milliseconds()) == pytest.approx(1000 / 2.5)


def test_the_span_grows_past_ten_windows_and_old_samples_expire():
    clock = FakeClock()
    rate = Rate()
    for _ in range(12):  # one record a second for 12 s: 12 samples (11 plus the overlapping one)
        rate.record(100, clock.milliseconds())
        clock.advance(1000)
    now = clock.milliseconds()
    # The samples whose last event is 11 s old or more are dropped: 10 s of 10 records left.
    assert rate.window_size(now) == 10_000
    assert rate.measure(now) == pytest.approx(100.0)
    clock.advance(11_000)  # nothing for the whole span: nothing measured
    assert rate.measure(clock.milliseconds()) == 0.0


def test_throttle_time_brings_the_rate_back_to_the_quota():
    # rate 300 over 10 s against a quota of 100: 20 s more make it 100 (300 * 10 / 30).
    assert throttle_time_ms(300.0, 100.0, 10_000) == 20_000
    assert throttle_time_ms(100.0, 100.0, 10_000) == 0


def test_a_client_within_its_quota_is_not_throttled_and_one_over_it_is():
    clock = FakeClock()
    quotas = ClientQuotas()
    quotas.replace(Entity(True, "alice"), {PRODUCER_BYTE_RATE: 1000})
    now = clock.milliseconds()
    assert quotas.record(PRODUCER_BYTE_RATE, "alice", "app", 1_000, now) == 0  # exactly 1000 B/s
    # 1 byte more: (1001/1 - 1000) / 1000 * 1000 ms = 1 ms
    assert quotas.record(PRODUCER_BYTE_RATE, "alice", "app", 1, now) == 1
    assert quotas.record(PRODUCER_BYTE_RATE, "alice", "app", 9_999, now) == 10_000


def test_the_request_time_quota_waits_at_most_one_window_the_byte_rates_are_not_capped():
    now = FakeClock().milliseconds()
    quotas = ClientQuotas()
    quotas.replace(Entity(True, None), {REQUEST_PERCENTAGE: 10, PRODUCER_BYTE_RATE: 10})
    assert quotas.record(REQUEST_PERCENTAGE, "bob", "x", 10_000, now) == 1000
    assert quotas.record(PRODUCER_BYTE_RATE, "bob", "x", 10_000, now) == 999_000


def test_unrecord_takes_a_fetch_back():
    now = FakeClock().milliseconds()
    quotas = ClientQuotas()
    quotas.replace(Entity(client_set=True, client_id=None), {CONSUMER_BYTE_RATE: 100})
    assert quotas.record(CONSUMER_BYTE_RATE, "u", "c", 5000, now) > 0
    quotas.unrecord(CONSUMER_BYTE_RATE, "u", "c", 5000, now)
    assert quotas.measured(CONSUMER_BYTE_RATE, "u", "c", now) == 0.0


def test_no_quota_means_nothing_is_measured_and_the_broker_is_not_active():
    quotas = ClientQuotas()
    assert not quotas.active
    assert quotas.record(PRODUCER_BYTE_RATE, "alice", "app", 10**9, 0) == 0
    quotas.replace(Entity(True, "alice"), {"controller_mutation_rate": 5})
    assert not quotas.active  # stored, not enforced
    quotas.replace(Entity(True, "alice"), {CONSUMER_BYTE_RATE: 5})
    assert quotas.active and quotas.enforced(CONSUMER_BYTE_RATE)
    assert not quotas.enforced(PRODUCER_BYTE_RATE)
    quotas.replace(Entity(True, "alice"), {})
    assert not quotas.active and quotas.configs == {}


# ---------------------------------------------------------------- precedence

@pytest.mark.parametrize("first", range(8))
def test_the_first_of_the_eight_levels_that_sets_the_key_wins(first):
    quotas = ClientQuotas()
    for i, entity in enumerate(LEVELS[first:], first):
        quotas.replace(entity, {PRODUCER_BYTE_RATE: 1000 + i})
    limit, _ = quotas.quota(PRODUCER_BYTE_RATE, "alice", "app")
    assert limit == 1000 + first


def test_each_key_is_found_on_its_own():
    quotas = ClientQuotas()
    quotas.replace(Entity(True, "alice", True, "app"), {PRODUCER_BYTE_RATE: 1})
    quotas.replace(Entity(client_set=True, client_id="app"), {CONSUMER_BYTE_RATE: 2})
    assert quotas.quota(PRODUCER_BYTE_RATE, "alice", "app")[0] == 1
    assert quotas.quota(CONSUMER_BYTE_RATE, "alice", "app")[0] == 2
    assert quotas.quota(PRODUCER_BYTE_RATE, "bob", "app") is None


def test_clients_under_one_users_quota_share_its_rate_but_a_default_is_per_user():
    now = FakeClock().milliseconds()
    quotas = ClientQuotas()
    quotas.replace(Entity(True, "alice"), {PRODUCER_BYTE_RATE: 100})
    quotas.replace(Entity(True, None), {PRODUCER_BYTE_RATE: 100})
    quotas.record(PRODUCER_BYTE_RATE, "alice", "one", 100, now)  # 100 B/s: at the quota
    assert quotas.record(PRODUCER_BYTE_RATE, "alice", "two", 100, now) > 0  # shared: over
    quotas.record(PRODUCER_BYTE_RATE, "bob", "one", 100, now)
    assert quotas.record(PRODUCER_BYTE_RATE, "carol", "one", 100, now) == 0  # carol's own


@settings(max_examples=examples(200), deadline=None)
@given(st.sets(st.integers(0, 7)).filter(bool))
def test_precedence_property(present):
    quotas = ClientQuotas()
    for i in present:
        quotas.replace(LEVELS[i], {CONSUMER_BYTE_RATE: float(i + 1)})
    assert quotas.quota(CONSUMER_BYTE_RATE, "alice", "app")[0] == min(present) + 1


# ---------------------------------------------------------------- rates and throttling, properties

@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 999), st.floats(0, 1e6)), min_size=1, max_size=30))
def test_rate_within_one_window_is_the_sum_over_that_window(events):
    clock = FakeClock()
    rate = Rate()
    start = clock.milliseconds()
    for offset, value in sorted(events):
        rate.record(value, start + offset)
    first, last = min(o for o, _ in events), max(o for o, _ in events)
    span = 1_000  # within the first window: measured over one whole window
    assert rate.measure(start + last) == pytest.approx(sum(v for _, v in events) / (span / 1000))


@settings(max_examples=examples(40), deadline=None)
@given(quota=st.integers(1_000, 10_000_000), share=st.floats(0.01, 2.0), late=st.integers(0, 50))
def test_a_client_that_waits_as_told_converges_to_its_quota(quota, share, late):
    """Kafka's throttling is a feedback loop: a client that waits each throttle time it is
    given (and `late` ms more) sends, once the first seconds are past, at its quota (within 3%
    with requests of a fifth of the quota or less)."""
    size = max(1, int(quota * share))  # one request's bytes: 1% to 2 s of the quota
    quotas = ClientQuotas()
    quotas.replace(Entity(True, "alice"), {PRODUCER_BYTE_RATE: quota})
    now, sent, mark = 0, 0, None
    while now < 75_000:
        wait = quotas.record(PRODUCER_BYTE_RATE, "alice", "c", size, now)
        sent += size
        if mark is None and now >= 15_000:
            mark = (now, sent)
        now += max(wait, 1) + late
    measured = (sent - mark[1]) / ((now - mark[0]) / 1000)
    if share <= 0.2:  # requests small against the quota: close to it
        assert measured <= quota * 1.03
    else:  # large ones: the rate moves in steps of whole requests and samples
        assert measured <= quota * 1.1 + 2 * size / 60
    if late == 0 and share <= 0.1:
        assert measured >= quota * 0.9


@settings(max_examples=examples(200), deadline=None)
@given(st.floats(1, 1e9), st.floats(1, 1e9), st.integers(1, 20_000))
def test_throttle_time_is_zero_at_the_quota_and_grows_with_the_excess(quota, over, window):
    assert throttle_time_ms(quota, quota, window) == 0
    assert throttle_time_ms(quota + over, quota, window) >= throttle_time_ms(quota + over / 2, quota, window)


# ---------------------------------------------------------------- entities

@settings(max_examples=examples(200), deadline=None)
@given(st.one_of(st.none(), st.text(min_size=1)), st.one_of(st.none(), st.text(min_size=1)),
       st.sampled_from(["user", "client", "both"]))
def test_entity_paths_round_trip(user, client, kind):
    entity = (Entity(True, user) if kind == "user" else
              Entity(client_set=True, client_id=client) if kind == "client" else
              Entity(True, user, True, client))
    assert Entity.from_path(entity.path()) == entity


def test_paths_are_zookeepers():
    assert Entity(True, "alice", True, None).path() == "users/alice/clients/<default>"
    assert Entity(client_set=True, client_id="a/b c*~").path() == "clients/a%2Fb%20c%2A%7E"
    assert Entity(True, "<default>").path() == "users/%3Cdefault%3E"  # a user so named is not the default
    assert sanitize("alice.01-_x") == "alice.01-_x"


def test_values_are_checked_as_kafka_checks_them():
    assert validate_value("producer_byte_rate", 1024) is None
    assert validate_value("request_percentage", 12.5) is None
    assert validate_value("controller_mutation_rate", 0.5) is None
    assert "Invalid configuration key" in validate_value("bogus", 1)
    assert "greater than 0" in validate_value("consumer_byte_rate", 0)
    assert "fractional" in validate_value("producer_byte_rate", 1.5)


def test_describe_filters_strict_and_not():
    quotas = ClientQuotas()
    for entity in LEVELS:
        quotas.replace(entity, {PRODUCER_BYTE_RATE: 1})
    found = lambda filters, strict: {e for e, _ in quotas.describe(filters, strict)}  # noqa: E731
    assert found([("user", 0, "alice")], False) == {LEVELS[0], LEVELS[1], LEVELS[2]}
    assert found([("user", 0, "alice")], True) == {LEVELS[2]}
    assert found([("user", 1, None)], False) == {LEVELS[3], LEVELS[4], LEVELS[5]}
    assert found([("user", 2, None), ("client-id", 2, None)], True) == {
        LEVELS[0], LEVELS[1], LEVELS[3], LEVELS[4]}
    assert found([("client-id", 1, None)], True) == {LEVELS[7]}
    assert found([], False) == set(LEVELS)
    assert found([], True) == set()
    assert list(itertools.chain(found([("user", 0, "nobody")], False))) == []
