"""Committing a streaming query's progress to a consumer group, so lag tools can see it.

The checkpoint stays the source of truth: the query restarts from its checkpoint, never from
the group. The group's committed offsets follow the checkpoint, one commit per position the
query has finished processing. A commit that fails (the broker is away, the group has live
members) is logged and tried again with the next position; it never fails the query.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from .admin import Admin
from .offsets import Offsets, TopicPartition, dumps

log = logging.getLogger("brook.spark")

RETRY_INTERVAL_S = 1.0


class GroupCommitter:
    """Commits offsets that moved since the last successful commit of this query run."""

    def __init__(self, admin: Admin, group_id: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.admin = admin
        self.group_id = group_id
        self.clock = clock
        self.committed: Offsets = {}  # what this run has committed
        self._failed_at: float | None = None
        self._last_error: str | None = None

    def commit(self, offsets: Mapping[TopicPartition, int]) -> bool:
        """Commit the offsets that differ from the last commit; True when the group holds
        them afterwards. After a failure, commits are not tried again for a second (Spark asks
        every few milliseconds while a query is idle)."""
        changed = {tp: o for tp, o in offsets.items() if o >= 0 and self.committed.get(tp) != o}
        if not changed:
            return True
        now = self.clock()
        if self._failed_at is not None and now - self._failed_at < RETRY_INTERVAL_S:
            return False
        try:
            self.admin.commit(self.group_id, changed)
        except Exception as exc:  # the checkpoint has the progress; the group catches up later
            self._failed_at = now
            message = str(exc)
            if message != self._last_error:
                log.warning("cannot commit offsets %s to group %r (will retry): %s",
                            dumps(changed), self.group_id, message)
                self._last_error = message
            return False
        self.committed.update(changed)
        self._failed_at = None
        if self._last_error is not None:
            log.info("committing to group %r works again", self.group_id)
            self._last_error = None
        return True
