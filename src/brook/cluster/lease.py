"""A lease on the broker's ZooKeeper session: whether the session is known to be alive now.

ZooKeeper expires a session when it has heard nothing from its client for the session timeout,
counted from the moment its server received the client's latest request or ping (and rounded
up to its next tick). A request sent at time ``t`` that got an answer was received at ``t`` or
later, so the session lives at least until ``t + timeout``. Another broker takes over this
broker's partitions (and so the group coordinator of its offsets partitions) only after the
controller has seen the session expire. So while

    now < (send time of the latest request or ping answered) + session timeout - margin

no other broker has taken over for that reason, and this broker may answer as a coordinator
from its own state. A broker paused (SIGSTOP, a long GC, a stalled VM) past its session wakes
up with the lease lapsed, and refuses to answer until a fresh answer from ZooKeeper renews the
lease, or until it learns that the session expired (then its leaderships are fenced). The margin
(a fifth of the timeout) covers the clocks of two machines running at slightly different rates.

Times are this process's monotonic clock, so a step of the wall clock changes nothing; under a
tool that moves the monotonic clock too (libfaketime), a step forward looks like a pause and the
broker refuses until its next ZooKeeper ping (a third of the session timeout): harmless.

What the lease does not cover: leadership moved by the controller while this broker's session
lived (a reassignment or a preferred leader election sent to a broker that was paused for less
than its session timeout); that broker learns it from the controller's next request.

A session found expired (``lost()``) ends the lease until the broker has given up what it led
in that session (``fenced()``): the client opens a new session at once, whose answers would
otherwise renew the lease before the broker, busy on its event loop, has handled the loss.

The bookkeeping is sans-I/O: ``sent(xid)`` when a request or ping goes out, ``answered(xid,
error)`` when a reply comes in, ``connecting()`` when a new connection is made (nothing sent on
the old one will be answered), ``connected(timeout)`` with the timeout the server gave the
session and ``lost()`` when the session is gone. ``brook.cluster.zk_client`` calls them from
kazoo's connection thread; ``holds()`` and ``fenced()`` are called on the event loop.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

__all__ = ["MARGIN", "SessionLease"]

#: The part of the session timeout the lease ends before it.
MARGIN = 0.2

#: ZooKeeper's error codes of a reply that says nothing of the session being alive: an
#: expired session, a session moved to another server, an authentication that failed.
_NOT_ALIVE = frozenset({-112, -118, -115})


class SessionLease:
    def __init__(self, timeout_ms: int, clock: Callable[[], float] = time.monotonic,
                 margin: float = MARGIN) -> None:
        self._configured_ms = timeout_ms
        self._clock = clock
        self._margin = margin
        self._valid_s = timeout_ms / 1000 * (1 - margin)
        #: (xid, send time) of what was sent on this connection and not answered yet, in order
        self._sent: deque[tuple[int, float]] = deque()
        #: The send time of the latest request or ping answered (None: none yet)
        self.confirmed: float | None = None
        #: A session was lost and the broker has not yet fenced what it led in it.
        self.unfenced_loss = False

    def connecting(self) -> None:
        """A new connection: what was sent on the previous one is not answered any more."""
        self._sent.clear()

    def connected(self, negotiated_ms: float) -> None:
        """The server gave the session ``negotiated_ms``: the lease uses it when shorter than
        the timeout asked for (a server may cut it down to its maxSessionTimeout)."""
        self._valid_s = min(self._configured_ms, negotiated_ms) / 1000 * (1 - self._margin)

    def sent(self, xid: int) -> None:
        """A request (or ping) with ``xid`` is being sent now."""
        self._sent.append((xid, self._clock()))

    def answered(self, xid: int, error: int = 0) -> None:
        """A reply to ``xid`` came. Replies come in the order requests were sent; a reply to
        something not sent (a watch event) is ignored."""
        sent = self._sent
        for i, (x, _) in enumerate(sent):
            if x == xid:
                break
        else:
            return
        for _ in range(i):
            sent.popleft()
        _, at = sent.popleft()
        if error not in _NOT_ALIVE and (self.confirmed is None or at > self.confirmed):
            self.confirmed = at

    def lost(self) -> None:
        """The session expired (or was closed): no lease until ``fenced()``."""
        self.unfenced_loss = True

    def fenced(self) -> None:
        """The broker gave up what it led in the session lost: a new session's answers count."""
        self.unfenced_loss = False

    def holds(self) -> bool:
        """Whether the session is known to be alive now."""
        confirmed = self.confirmed
        return (confirmed is not None and not self.unfenced_loss
                and self._clock() < confirmed + self._valid_s)

    def remaining_s(self) -> float:
        """How long the lease holds from now without another answer (<= 0: lapsed)."""
        if self.confirmed is None:
            return 0.0
        return self.confirmed + self._valid_s - self._clock()
