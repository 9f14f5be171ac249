"""Keyed timers fired by a fake clock."""

from brook.clock import FakeClock
from brook.coordinator.common.timer import Timers


def test_fires_when_due_in_deadline_order():
    clock, timers = FakeClock(0), Timers()
    timers.schedule("b", 20, lambda now: ("b", now))
    timers.schedule("a", 10, lambda now: ("a", now))
    clock.advance(9)
    assert timers.expire(clock.milliseconds()) == []
    clock.advance(15)
    assert timers.expire(clock.milliseconds()) == [("a", 24), ("b", 24)]
    assert timers.expire(clock.milliseconds()) == [] and not timers.keys()


def test_rescheduling_a_key_replaces_it():
    timers = Timers()
    timers.schedule("k", 10, lambda now: "old")
    timers.schedule("k", 30, lambda now: "new")
    assert timers.expire(25) == []
    assert timers.deadline("k") == 30
    assert timers.expire(30) == ["new"]


def test_cancel():
    timers = Timers()
    timers.schedule("k", 10, lambda now: "x")
    assert timers.cancel("k") and not timers.cancel("k")
    assert "k" not in timers and timers.next_deadline() is None
    assert timers.expire(100) == []


def test_a_callback_may_schedule_a_timer_already_due():
    timers = Timers()
    timers.schedule("a", 10, lambda now: timers.schedule("b", 5, lambda now: "b") or "a")
    assert timers.expire(10) == ["a", "b"]
