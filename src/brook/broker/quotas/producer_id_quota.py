"""A rate of InitProducerId per client, KIP-936's idea (its `producer_ids_rate` quota) as a
broker config, `producer.ids.rate`: new producer ids per second for each client id and
for each client address, with a burst of one second's worth.

A client over the rate is throttled as Kafka throttles quotas: its answer carries
`throttle_time_ms` and is held back that long (the connection answers in order, so the
client's later requests wait too). Ids are never refused, only slowed, so a well-behaved
producer fleet restarting at once still starts; a loop of InitProducerId gets one id per
1/rate seconds. (The state ids create when they produce is bounded apart, by
`producer.id.max.count`.)
"""

from __future__ import annotations

import time
from typing import Callable

DEFAULT_PRODUCER_IDS_RATE = 100.0  # per second, per client id and per address
_MAX_BUCKETS = 10_000  # buckets of idle clients are dropped past this many


class ProducerIdQuota:
    def __init__(self, rate: float = DEFAULT_PRODUCER_IDS_RATE,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0:
            raise ValueError("producer.ids.rate must be positive")
        self.rate = rate
        self.burst = max(1.0, rate)
        self._monotonic = monotonic
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)
        self.throttled = 0  # answers held back, ever (a metric)

    def record(self, client_id: str | None, address: str | None) -> float:
        """One new producer id for this client: the seconds to hold its answer (0 if within
        the rate). The longer of the client id's and the address's throttles applies."""
        now = self._monotonic()
        delay = max(self._take(f"id:{client_id}", now), self._take(f"ip:{address}", now))
        if delay > 0:
            self.throttled += 1
        if len(self._buckets) > _MAX_BUCKETS:
            self._drop_full(now)
        return delay

    def _take(self, key: str, now: float) -> float:
        tokens, at = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate) - 1.0
        self._buckets[key] = (tokens, now)
        return -tokens / self.rate if tokens < 0 else 0.0

    def _drop_full(self, now: float) -> None:
        """Forget the clients whose buckets have refilled: they are as if never seen."""
        full = [k for k, (tokens, at) in self._buckets.items()
                if tokens + (now - at) * self.rate >= self.burst]
        for k in full:
            del self._buckets[k]
