"""What the broker counts as it happens, for its metrics: requests per API (how many, their
total time, a count per time bucket) and record bytes and messages per topic.

Plain objects of integers, written by the event loop alone (`BrokerMetrics.request_done`,
`produced`, `fetched`): the hot path pays one dict lookup and a few increments, where
prometheus_client's own Counter and Histogram take a lock per increment. The collector turns
them into Prometheus counters and a histogram when scraped.
"""

from __future__ import annotations

from prometheus_client.utils import floatToGoString

# Request total time buckets, seconds: most requests take well under a millisecond; a
# long-polling Fetch waits up to its max_wait_ms (500 ms by default in clients).
REQUEST_TIME_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                        0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: The buckets' ``le`` labels, as prometheus_client writes them, and the last one's.
BUCKET_LABELS = tuple(floatToGoString(b) for b in REQUEST_TIME_BUCKETS) + ("+Inf",)


class RequestStats:
    """One API's answered requests: how many, their total time, and a count per time bucket
    (index i counts times <= REQUEST_TIME_BUCKETS[i]; the last one the rest)."""

    __slots__ = ("count", "time_sum", "buckets")

    def __init__(self) -> None:
        self.count = 0
        self.time_sum = 0.0
        self.buckets = [0] * (len(REQUEST_TIME_BUCKETS) + 1)


class TopicStats:
    __slots__ = ("bytes_in", "messages_in", "bytes_out", "produce_conversions", "fetch_conversions")

    def __init__(self) -> None:
        self.bytes_in = self.messages_in = self.bytes_out = 0
        self.produce_conversions = self.fetch_conversions = 0
