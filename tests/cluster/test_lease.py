"""The lease on a broker's ZooKeeper session (brook.cluster.lease): held while the latest request
or ping that got an answer was sent less than the session timeout (less a margin) ago, counted
from its sending, never from its answer. First the rule on a fake clock, then kazoo's real
connection to a real ZooKeeper watched for it: renewed by kazoo's pings while idle, lapsed after
a jump of the clock (as a process paused past its session sees it) until the next answer, and
lapsed while ZooKeeper does not answer."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brook.cluster.lease import MARGIN, SessionLease
from tests.support.cluster_harness import own_zookeeper, wait_for  # noqa: F401
from tests.support.examples import examples

PING = -2
WATCH = -1


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_no_lease_before_an_answer():
    lease = SessionLease(6000, Clock())
    assert not lease.holds()
    lease.sent(PING)
    assert not lease.holds()


def test_the_lease_runs_from_the_send_time_of_the_latest_answer():
    clock = Clock()
    lease = SessionLease(6000, clock)
    lease.sent(1)
    clock.now += 4.0  # a slow answer: the server may have received it at once
    lease.answered(1)
    assert lease.holds()
    clock.now = 100.0 + 6.0 * (1 - MARGIN) - 0.001
    assert lease.holds()
    clock.now = 100.0 + 6.0 * (1 - MARGIN)
    assert not lease.holds()
    lease.sent(PING)
    lease.answered(PING)
    assert lease.holds() and lease.remaining_s() == pytest.approx(4.8)


def test_a_process_paused_past_its_session_finds_its_lease_lapsed():
    clock = Clock()
    lease = SessionLease(6000, clock)
    lease.sent(PING)
    lease.answered(PING)
    clock.now += 10  # SIGSTOP ... SIGCONT
    assert not lease.holds()
    lease.sent(PING)  # sent after waking: its answer renews the lease (if the session lives)
    clock.now += 0.01
    assert not lease.holds()
    lease.answered(PING)
    assert lease.holds()


def test_replies_are_matched_in_order_and_watch_events_are_not_replies():
    clock = Clock()
    lease = SessionLease(6000, clock)
    lease.sent(1)
    clock.now += 1
    lease.sent(2)
    clock.now += 1
    lease.answered(WATCH)
    assert lease.confirmed is None
    lease.answered(2)  # 1 was answered before it, unseen (or never will be): dropped
    assert lease.confirmed == 101.0
    lease.answered(1)  # not outstanding any more
    assert lease.confirmed == 101.0


def test_a_reply_saying_the_session_expired_confirms_nothing():
    lease = SessionLease(6000, Clock())
    lease.sent(1)
    lease.answered(1, -112)  # SESSIONEXPIRED
    assert not lease.holds()


def test_a_new_connection_drops_what_the_old_one_sent_and_a_shorter_negotiated_timeout_counts():
    clock = Clock()
    lease = SessionLease(60_000, clock)
    lease.sent(5)
    lease.connecting()
    lease.answered(5)  # an xid of the new connection's counting, not the old request
    assert lease.confirmed is None
    lease.connected(40_000)  # the server's maxSessionTimeout cut it down
    lease.sent(1)
    lease.answered(1)
    clock.now += 40 * (1 - MARGIN)
    assert not lease.holds()


# Events: ("send",) a request goes out; ("receive",) ZooKeeper receives the oldest request in
# flight; ("reply",) this client reads the reply to the oldest request received; ("wait", s).
events = st.lists(st.one_of(st.just(("send",)), st.just(("receive",)), st.just(("reply",)),
                            st.tuples(st.just("wait"), st.floats(0, 10))), max_size=60)


@settings(max_examples=examples(500), deadline=None)
@given(events, st.integers(1000, 60_000))
def test_while_the_lease_holds_zookeeper_has_not_expired_the_session(events, timeout_ms):
    """ZooKeeper expires the session ``timeout`` after it last received something from the
    client; whatever the delays of requests and replies, the lease never holds past that."""
    clock = Clock(0.0)
    lease = SessionLease(timeout_ms, clock)
    timeout = timeout_ms / 1000
    in_flight: list[int] = []  # xids sent, not received
    received: list[int] = []  # xids received, not replied to
    last_received = None
    xid = 0
    for event in events:
        if event[0] == "send":
            xid += 1
            lease.sent(xid)
            in_flight.append(xid)
        elif event[0] == "receive" and in_flight:
            received.append(in_flight.pop(0))
            last_received = clock.now
        elif event[0] == "reply" and received:
            lease.answered(received.pop(0))
        elif event[0] == "wait":
            clock.now += event[1]
        if lease.holds():
            assert last_received is not None and clock.now < last_received + timeout


# --- kazoo's connection to a real ZooKeeper -----------------------------------------------------


class JumpingClock:
    """The monotonic clock, plus jumps the test makes (a pause of the process, as it sees it)."""

    def __init__(self) -> None:
        self.jumped = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.jumped


def _client(connect: str, session_ms: int, clock=time.monotonic):
    from brook.cluster.zk_client import ZkClient
    from brook.cluster.zk_paths import parse_connect

    client = ZkClient(parse_connect(connect), session_ms, lambda what: None, 30_000, clock=clock)
    assert client.connect_until(threading.Event(), 10_000)
    return client


def test_kazoos_pings_keep_the_lease_while_idle_and_a_jump_of_the_clock_lapses_it(own_zookeeper):
    server = own_zookeeper.start()
    clock = JumpingClock()
    client = _client(server.connect, 3000, clock)
    try:
        wait_for(client.lease.holds, 5, "the lease after connecting")
        confirmed = client.lease.confirmed
        deadline = time.monotonic() + 4  # more than the session timeout, without a request
        while time.monotonic() < deadline:
            assert client.lease.holds()
            time.sleep(0.05)
        assert client.lease.confirmed > confirmed  # renewed by pings alone
        clock.jumped += 3.0  # as a process paused 3 s sees its clock when it wakes
        assert not client.lease.holds()
        began = time.monotonic()
        wait_for(client.lease.holds, 3, "the lease renewed by the next ping")
        assert time.monotonic() - began < 1.5  # kazoo pings every third of the timeout
    finally:
        client.close()


def test_the_lease_lapses_while_zookeeper_does_not_answer(own_zookeeper):
    server = own_zookeeper.start()
    client = _client(server.connect, 3000)
    try:
        wait_for(client.lease.holds, 5, "the lease after connecting")
        server.proc.send_signal(signal.SIGSTOP)  # the connection stays open; answers stop
        stopped = time.monotonic()
        wait_for(lambda: not client.lease.holds(), 5, "the lease lapsing")
        assert time.monotonic() - stopped <= 3.0 * (1 - MARGIN) + 0.1
        server.proc.send_signal(signal.SIGCONT)
        wait_for(client.lease.holds, 10, "the lease back once ZooKeeper answers")
    finally:
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        client.close()


def test_a_lost_session_ends_the_lease_until_the_broker_has_fenced_it():
    clock = Clock()
    lease = SessionLease(6000, clock)
    lease.sent(1)
    lease.answered(1)
    lease.lost()
    assert not lease.holds()
    lease.connecting()  # a new session at once: its answers do not count yet
    lease.sent(1)
    lease.answered(1)
    assert not lease.holds()
    lease.fenced()
    assert lease.holds()


def test_a_new_session_after_an_expiry_renews_no_lease_until_fenced(own_zookeeper):
    from kazoo.protocol.connection import _SESSION_EXPIRED

    server = own_zookeeper.start()
    client = _client(server.connect, 3000)
    try:
        wait_for(client.lease.holds, 5, "the lease after connecting")
        old = client.session_id
        client.kz._call(_SESSION_EXPIRED, None)  # kazoo's hook: the session found expired
        wait_for(lambda: client.session_id not in (None, old), 10, "a new session")
        client.kz.exists("/")  # answered in the new session
        assert not client.lease.holds()
        client.lease.fenced()
        wait_for(client.lease.holds, 3, "the lease in the new session")
    finally:
        client.close()
