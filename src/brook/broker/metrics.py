"""The broker's Prometheus metrics, served over HTTP when `metrics.port` is set.

Two kinds, each with its own cost:

- **Counted as it happens** (Produce, Fetch, every request): bytes and messages in and bytes
  out per topic, requests and their total time per API. The hot path pays one dict lookup and
  a few integer increments on plain objects written by the event loop alone; the collector
  turns them into Prometheus counters and a histogram when scraped. (prometheus_client's own
  Counter and Histogram take a lock per increment and cost several times as much.)
- **Read when scraped** (`BrokerCollector`, nothing per append): the partitions' offsets and
  sizes, consumer group lag, groups per state, rebalances, the offsets cache and the load of the
  ``__consumer_offsets`` partitions. Scrapes run on the HTTP server's threads while the event
  loop keeps changing what they read, so they read snapshots (``list()`` of dicts, the logs'
  immutable segment tuples) and skip what changes under them rather than fail.

Every broker has a registry of its own (not prometheus_client's global one), so brokers in one
process do not share counters. docs/metrics.md lists the metrics and Kafka's names for them.
"""

from __future__ import annotations

import logging
import struct
from bisect import bisect_left
from time import perf_counter

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.utils import floatToGoString

from ..coordinator.group import GroupState

log = logging.getLogger(__name__)

# Request total time buckets, seconds: most requests take well under a millisecond; a
# long-polling Fetch waits up to its max_wait_ms (500 ms by default in clients).
REQUEST_TIME_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                        0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_BUCKET_LABELS = tuple(floatToGoString(b) for b in REQUEST_TIME_BUCKETS) + ("+Inf",)


class RequestStats:
    """One API's answered requests: how many, their total time, and a count per time bucket
    (index i counts times <= REQUEST_TIME_BUCKETS[i]; the last one the rest)."""

    __slots__ = ("count", "time_sum", "buckets")

    def __init__(self) -> None:
        self.count = 0
        self.time_sum = 0.0
        self.buckets = [0] * (len(REQUEST_TIME_BUCKETS) + 1)


class TopicStats:
    __slots__ = ("bytes_in", "messages_in", "bytes_out")

    def __init__(self) -> None:
        self.bytes_in = self.messages_in = self.bytes_out = 0


class BrokerMetrics:
    """The metrics of one broker: its registry, the hot-path counts and the HTTP server."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = BrokerCollector(broker, self)
        self.registry.register(self.collector)
        ProcessCollector(registry=self.registry)
        self.requests = {key: RequestStats() for key in broker.apis}
        self.topics: dict[str, TopicStats] = {}
        self._server = None
        self._thread = None

    # --- the hot path (event loop) -------------------------------------------------------

    def request_done(self, api_key: int, received: float) -> None:
        """A request was answered; `received` is `perf_counter()` when its frame arrived."""
        elapsed = perf_counter() - received
        stats = self.requests[api_key]
        stats.count += 1
        stats.time_sum += elapsed
        stats.buckets[bisect_left(REQUEST_TIME_BUCKETS, elapsed)] += 1

    def produced(self, topic: str, nbytes: int, messages: int) -> None:
        stats = self.topics.get(topic) or self._topic(topic)
        stats.bytes_in += nbytes
        stats.messages_in += messages

    def fetched(self, results) -> None:
        """Count the record bytes of a Fetch response's partitions (`TopicResult`s)."""
        for tr in results:
            nbytes = sum(pr.records_size for pr in tr.partitions if pr.records)
            if nbytes:
                (self.topics.get(tr.name) or self._topic(tr.name)).bytes_out += nbytes

    def _topic(self, topic: str) -> TopicStats:
        stats = self.topics[topic] = TopicStats()
        return stats

    # --- serving ---------------------------------------------------------------------------

    @property
    def port(self) -> int | None:
        return None if self._server is None else self._server.server_port

    def start(self, host: str, port: int) -> None:
        """Serve /metrics on host:port from a thread of its own (raises OSError if it cannot)."""
        try:
            self._server, self._thread = start_http_server(port, host or "0.0.0.0",
                                                           registry=self.registry)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot serve metrics on {host or '0.0.0.0'}:{port}: "
                                     f"{exc.strerror or exc}") from None
        log.info("serving Prometheus metrics on http://%s:%d/metrics", host or "0.0.0.0", port)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            self._thread.join(5)


class BrokerCollector:
    """The gauges read from the broker's state at scrape time."""

    def __init__(self, broker, metrics: BrokerMetrics) -> None:
        self.broker = broker
        self.metrics = metrics

    def collect(self):
        runtime = self.broker.groups
        shards = list(runtime.shards) if runtime is not None else []
        for name, section in (("topic", self._topics), ("request", self._requests),
                              ("partitions", self._partitions), ("groups", self._groups),
                              ("lag", self._lag)):
            try:
                families = list(section(shards))
            except Exception:  # a bug here must not cost the scrape its other metrics
                log.exception("collecting the %s metrics failed", name)
                continue
            yield from families

    def _topics(self, shards):
        labels = ["topic"]
        bytes_in = CounterMetricFamily("brook_topic_bytes_in",
                                       "Record bytes appended by Produce requests.", labels=labels)
        messages_in = CounterMetricFamily("brook_topic_messages_in",
                                          "Records appended by Produce requests.", labels=labels)
        bytes_out = CounterMetricFamily("brook_topic_bytes_out",
                                        "Record bytes sent in Fetch responses.", labels=labels)
        topics = self.metrics.topics
        metadata = self.broker.metadata
        for topic, stats in list(topics.items()):
            if metadata.get(topic) is None:
                # Deleted: its counts go, as Kafka removes a deleted topic's metrics.
                topics.pop(topic, None)
                continue
            bytes_in.add_metric([topic], stats.bytes_in)
            messages_in.add_metric([topic], stats.messages_in)
            bytes_out.add_metric([topic], stats.bytes_out)
        return bytes_in, messages_in, bytes_out

    def _requests(self, shards):
        labels = ["request"]
        count = CounterMetricFamily("brook_requests", "Requests answered, by API.", labels=labels)
        total_time = HistogramMetricFamily(
            "brook_request_total_time_seconds",
            "Time from a request's frame received to its response written, by API.",
            labels=labels)
        apis = self.broker.apis
        for key, stats in self.metrics.requests.items():
            name = apis[key].name
            count.add_metric([name], stats.count)
            cumulative, buckets = 0, []
            for bound, n in zip(_BUCKET_LABELS, list(stats.buckets)):
                cumulative += n
                buckets.append((bound, cumulative))
            total_time.add_metric([name], buckets, stats.time_sum)
        return count, total_time

    def _partitions(self, shards):
        labels = ["topic", "partition"]
        end = GaugeMetricFamily("brook_log_end_offset", "The offset of the next record appended.",
                                labels=labels)
        start = GaugeMetricFamily("brook_log_start_offset", "The first offset still in the log.",
                                  labels=labels)
        size = GaugeMetricFamily("brook_log_size_bytes", "Bytes in the partition's segment files.",
                                 labels=labels)
        segments = GaugeMetricFamily("brook_log_segments", "Segments of the partition's log.",
                                     labels=labels)
        for (topic, index), partition in list(self.broker.partitions.items()):
            lg = partition.log
            segs = lg.segments  # an immutable tuple, replaced (never changed) by the log
            values = [topic, str(index)]
            end.add_metric(values, segs[-1].next_offset)
            start.add_metric(values, lg.log_start_offset)
            size.add_metric(values, sum(s.size for s in segs))
            segments.add_metric(values, len(segs))
        return end, start, size, segments

    def _groups(self, shards):
        states = dict.fromkeys((s.value for s in GroupState), 0)
        rebalances = 0
        offsets = cache_bytes = 0
        load_time = GaugeMetricFamily(
            "brook_coordinator_partition_load_time_seconds",
            "How long loading the __consumer_offsets partition took (at the broker's start).",
            labels=["partition"])
        loaded = GaugeMetricFamily(
            "brook_coordinator_partition_records_loaded",
            "Group and offset records replayed when the __consumer_offsets partition was loaded.",
            labels=["partition"])
        for shard in shards:
            core = shard.core
            for group in list(core.groups.values()):  # simple consumers' groups too (Empty)
                states[group.state.value] += 1
            rebalances += core.rebalances
            manager = shard.offsets
            if manager is not None:
                offsets += manager.cached_offsets
                cache_bytes += _cache_bytes(manager)
            load_time_ms = shard.load_time_ms
            if load_time_ms is not None:
                load_time.add_metric([str(shard.index)], load_time_ms / 1000)
                loaded.add_metric([str(shard.index)], shard.records_loaded)
        per_state = GaugeMetricFamily("brook_coordinator_groups",
                                      "Consumer groups of this coordinator, by state.",
                                      labels=["state"])
        for state, n in states.items():
            per_state.add_metric([state], n)
        yield per_state
        yield CounterMetricFamily("brook_coordinator_rebalances",
                                  "Completed rebalances (join phases) of classic groups.",
                                  value=rebalances)
        yield GaugeMetricFamily("brook_coordinator_offsets", "Committed offsets in the cache.",
                                value=offsets)
        yield GaugeMetricFamily("brook_coordinator_offsets_cache_bytes",
                                "Estimated memory of the offsets cache.", value=cache_bytes)
        yield load_time
        yield loaded

    def _lag(self, shards):
        # One series per committed offset: a scrape's cost grows with them (formatting them is
        # most of it), so the committed offset itself is left to brook_log_end_offset - lag.
        lag = GaugeMetricFamily("brook_consumergroup_lag",
                                "High watermark minus the group's committed offset.",
                                labels=["group", "topic", "partition"])
        partitions = self.broker.partitions
        for shard in shards:
            manager = shard.offsets
            if manager is None:
                continue
            for group in manager.cache.groups():
                for topic, index, offset in _group_offsets(manager, group):
                    partition = partitions.get((topic, index))
                    if partition is not None:
                        lag.add_metric([group, topic, str(index)], partition.high_watermark - offset)
        return (lag,)


def _group_offsets(manager, group: str) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of the group's committed offsets. The event loop may change
    them while this reads; a read that trips over a change is tried again, then skipped."""
    for _ in range(2):
        try:
            return [(topic, index, value.offset)
                    for topic, index, value in manager.group_offsets(group)]
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError,
                struct.error):
            continue
    return []


def _cache_bytes(manager) -> int:
    """The offsets cache's estimate of its memory; it walks the cache's dicts, which the event
    loop may resize meanwhile: tried again, then left out (0) of this scrape."""
    for _ in range(2):
        try:
            return manager.cache_bytes()
        except (RuntimeError, AttributeError, TypeError):  # e.g. a dict resized under it
            continue
    return 0
