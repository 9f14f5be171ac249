"""The broker's Prometheus metrics, served over HTTP when `metrics.port` is set.

Two kinds, each with its own cost:

- **Counted as it happens** (Produce, Fetch, every request): bytes and messages in and bytes
  out per topic, requests and their total time per API. The hot path pays one dict lookup and
  a few counter increments; the counters' children are made once per API and per topic.
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
from time import perf_counter

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector

from ..coordinator.group import GroupState

log = logging.getLogger(__name__)

# Request total time buckets, seconds: most requests take well under a millisecond; a
# long-polling Fetch waits up to its max_wait_ms (500 ms by default in clients).
REQUEST_TIME_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                        0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class BrokerMetrics:
    """The metrics of one broker: its registry, the hot-path counters and the HTTP server."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.registry = registry = CollectorRegistry(auto_describe=False)
        # First: a scrape forgets deleted topics before the topic counters below are read.
        registry.register(BrokerCollector(broker, self))
        self.bytes_in = Counter("brook_topic_bytes_in", "Record bytes appended by Produce requests.",
                                ["topic"], registry=registry)
        self.messages_in = Counter("brook_topic_messages_in", "Records appended by Produce requests.",
                                   ["topic"], registry=registry)
        self.bytes_out = Counter("brook_topic_bytes_out", "Record bytes sent in Fetch responses.",
                                 ["topic"], registry=registry)
        self.requests = Counter("brook_requests", "Requests answered, by API.", ["request"],
                                registry=registry)
        self.request_time = Histogram(
            "brook_request_total_time_seconds",
            "Time from a request's frame received to its response written, by API.",
            ["request"], buckets=REQUEST_TIME_BUCKETS, registry=registry)
        ProcessCollector(registry=registry)
        self._apis = {key: (self.requests.labels(api.name), self.request_time.labels(api.name))
                      for key, api in broker.apis.items()}
        self._topics: dict[str, tuple] = {}  # topic -> (bytes in, messages in, bytes out)
        self._server = None
        self._thread = None

    # --- the hot path (event loop) -------------------------------------------------------

    def request_done(self, api_key: int, received: float) -> None:
        """A request was answered; `received` is `perf_counter()` when its frame arrived."""
        count, total_time = self._apis[api_key]
        count.inc()
        total_time.observe(perf_counter() - received)

    def produced(self, topic: str, nbytes: int, messages: int) -> None:
        counters = self._topics.get(topic) or self._topic(topic)
        counters[0].inc(nbytes)
        counters[1].inc(messages)

    def fetched(self, results) -> None:
        """Count the record bytes of a Fetch response's partitions (`TopicResult`s)."""
        for tr in results:
            nbytes = sum(pr.records_size for pr in tr.partitions if pr.records)
            if nbytes:
                (self._topics.get(tr.name) or self._topic(tr.name))[2].inc(nbytes)

    def _topic(self, topic: str) -> tuple:
        counters = self._topics[topic] = (self.bytes_in.labels(topic), self.messages_in.labels(topic),
                                          self.bytes_out.labels(topic))
        return counters

    # --- scrape time (HTTP threads) ------------------------------------------------------

    def forget_deleted_topics(self) -> None:
        """Drop the counters of topics that no longer exist, as Kafka removes a deleted topic's
        metrics (a topic created again under the name starts from zero)."""
        metadata = self.broker.metadata
        for topic in list(self._topics):
            if metadata.get(topic) is None:
                self._topics.pop(topic, None)
                for counter in (self.bytes_in, self.messages_in, self.bytes_out):
                    counter.remove(topic)

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
        self.metrics.forget_deleted_topics()
        yield from self._partitions()
        runtime = self.broker.groups
        shards = list(runtime.shards) if runtime is not None else []
        yield from self._groups(shards)
        yield from self._lag(shards)

    def _partitions(self):
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
            groups = dict(core.groups)
            for group in list(groups.values()):
                states[group.state.value] += 1
            rebalances += getattr(core, "rebalances", 0)
            manager = shard.offsets
            if manager is not None:
                # Groups known only by their offsets (simple consumers) are Empty, as ListGroups says.
                states[GroupState.EMPTY.value] += sum(1 for g in manager.cache.groups()
                                                      if g not in groups)
                offsets += len(manager.cache)
                cache_bytes += _cache_bytes(manager)
            load_time_ms = getattr(shard, "load_time_ms", None)
            if load_time_ms is not None:
                load_time.add_metric([str(shard.index)], load_time_ms / 1000)
                loaded.add_metric([str(shard.index)], getattr(shard, "records_loaded", 0))
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
        labels = ["group", "topic", "partition"]
        current = GaugeMetricFamily("brook_consumergroup_current_offset",
                                    "The group's committed offset.", labels=labels)
        lag = GaugeMetricFamily("brook_consumergroup_lag",
                                "High watermark minus the group's committed offset.", labels=labels)
        partitions = self.broker.partitions
        for shard in shards:
            manager = shard.offsets
            if manager is None:
                continue
            for group in manager.cache.groups():
                for committed in _group_offsets(manager, group):
                    topic, index, offset = committed
                    values = [group, topic, str(index)]
                    current.add_metric(values, offset)
                    partition = partitions.get((topic, index))
                    if partition is not None:
                        lag.add_metric(values, partition.high_watermark - offset)
        return current, lag


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
    estimate = getattr(manager.cache, "memory_bytes", None)
    return estimate() if estimate is not None else 0
