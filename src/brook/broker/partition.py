"""A partition this broker leads: its log plus the replication state Kafka keeps for it.

On one node the broker is always the leader, the in-sync replica set is itself and the
high watermark is the log end offset right after each append; the fields are here so
replication can later move the high watermark on followers' acknowledgements instead.
"""

from __future__ import annotations

from typing import Callable

from ..storage.log import Log
from ..storage.producer_state import AppendOrigin


class Partition:
    __slots__ = ("topic", "index", "log", "leader_epoch", "high_watermark", "_listeners")

    def __init__(self, topic: str, index: int, log: Log, leader_epoch: int = 0) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.leader_epoch = leader_epoch
        self.high_watermark = log.log_end_offset
        self._listeners: list[Callable[[], None]] = []

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def append(self, records, origin: AppendOrigin = AppendOrigin.CLIENT):
        info = self.log.append(records, leader_epoch=self.leader_epoch, origin=origin)
        self.high_watermark = self.log.log_end_offset
        self._notify()
        return info

    def on_new_data(self, callback: Callable[[], None]) -> None:
        """Call `callback` once, the next time records become visible to consumers."""
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[], None]) -> None:
        try:
            self._listeners.remove(callback)
        except ValueError:
            pass

    def _notify(self) -> None:
        if self._listeners:
            listeners, self._listeners = self._listeners, []
            for cb in listeners:
                cb()
