"""The collector of prometheus_client's registry: the per-topic and per-API counts and the
group coordinator's few gauges (a handful of series whatever the broker holds), read when
scraped, in one walk on the event loop (see `LoopReader`).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from ...coordinator.group.classic_group import GroupState
from ...coordinator.group.consumer_group import ConsumerGroupState
from .counts import BUCKET_LABELS

log = logging.getLogger(__package__)


class BrokerMetrics(Protocol):
    """What the collector reads of `broker_metrics.BrokerMetrics` (which registers it)."""

    reader: Any  # a LoopReader
    topics: dict
    requests: dict


#: quota key -> Kafka's quota type (its throttle-time metrics' type= name)
_QUOTA_TYPES = {"producer_byte_rate": "Produce", "consumer_byte_rate": "Fetch",
                "request_percentage": "Request"}


class BrokerCollector:
    """The registry's figures: per topic and per API counts, and the coordinator's few gauges
    (a handful of series whatever the broker holds), all read in one walk of the `LoopReader`
    (an API's count, time and buckets from the same instant)."""

    def __init__(self, broker, metrics: BrokerMetrics) -> None:
        self.broker = broker
        self.metrics = metrics

    def collect(self):
        figures = self.metrics.reader.read(lambda: _registry_figures(self.broker, self.metrics))
        for name, section in (("topic", self._topics), ("request", self._requests),
                              ("groups", self._groups), ("quota", self._quotas)):
            try:
                read = figures.pop(name)  # let go once used: fewer objects alive at a time
                if isinstance(read, Exception):
                    raise read
                families = list(section(read))
                del read
            except Exception:  # a bug here must not cost the scrape its other metrics
                log.exception("collecting the %s metrics failed", name)
                continue
            yield from families

    def _topics(self, counts):
        labels = ["topic"]
        bytes_in = CounterMetricFamily("brook_topic_bytes_in",
                                       "Record bytes appended by Produce requests.", labels=labels)
        messages_in = CounterMetricFamily("brook_topic_messages_in",
                                          "Records appended by Produce requests.", labels=labels)
        bytes_out = CounterMetricFamily("brook_topic_bytes_out",
                                        "Record bytes sent in Fetch responses.", labels=labels)
        produce_conversions = CounterMetricFamily(
            "brook_topic_produce_message_conversions",
            "Records of Produce v0-v2 up-converted from legacy messages to v2 batches.", labels=labels)
        fetch_conversions = CounterMetricFamily(
            "brook_topic_fetch_message_conversions",
            "Records down-converted to legacy messages for Fetch v0-v3.", labels=labels)
        for topic, nbytes_in, nmessages_in, nbytes_out, nproduce_conv, nfetch_conv in counts:
            bytes_in.add_metric([topic], nbytes_in)
            messages_in.add_metric([topic], nmessages_in)
            bytes_out.add_metric([topic], nbytes_out)
            produce_conversions.add_metric([topic], nproduce_conv)
            fetch_conversions.add_metric([topic], nfetch_conv)
        return bytes_in, messages_in, bytes_out, produce_conversions, fetch_conversions

    def _requests(self, counts):
        labels = ["request"]
        count = CounterMetricFamily("brook_requests", "Requests answered, by API.", labels=labels)
        total_time = HistogramMetricFamily(
            "brook_request_total_time_seconds",
            "Time from a request's frame received to its response written, by API.",
            labels=labels)
        apis = self.broker.apis
        for key, n, time_sum, per_bucket in counts:
            name = apis[key].name
            count.add_metric([name], n)
            cumulative, buckets = 0, []
            for bound, k in zip(BUCKET_LABELS, per_bucket):
                cumulative += k
                buckets.append((bound, cumulative))
            total_time.add_metric([name], buckets, time_sum)
        return count, total_time

    def _quotas(self, throttled):
        """Client quotas' throttling (brook.broker.quotas.client_quotas), by quota type as Kafka names it."""
        labels = ["quota_type"]
        count = CounterMetricFamily("brook_quota_throttled_responses",
                                    "Responses throttled for a client quota, by quota type.", labels=labels)
        seconds = CounterMetricFamily("brook_quota_throttle_time_seconds",
                                      "Throttle time given to clients over a quota, by quota type.",
                                      labels=labels)
        for key, name in _QUOTA_TYPES.items():
            n, ms = throttled.get(key, (0, 0))
            count.add_metric([name], n)
            seconds.add_metric([name], ms / 1000)
        return count, seconds

    def _groups(self, figures):
        states, rebalances, offsets, cache_bytes, loads, consumer = figures
        per_state = GaugeMetricFamily("brook_coordinator_groups",
                                      "Consumer groups of this coordinator, by state.",
                                      labels=["state"])
        for state, n in states.items():
            per_state.add_metric([state], n)
        yield per_state
        consumer_states, epoch_bumps, reconciliations = consumer
        per_state = GaugeMetricFamily(
            "brook_coordinator_consumer_groups",
            "KIP-848 consumer groups of this coordinator, by state.", labels=["state"])
        for state, n in consumer_states.items():
            per_state.add_metric([state], n)
        yield per_state
        yield CounterMetricFamily("brook_coordinator_consumer_group_rebalances",
                                  "Group epoch bumps of KIP-848 consumer groups.",
                                  value=epoch_bumps)
        yield CounterMetricFamily("brook_coordinator_consumer_group_reconciliations",
                                  "Members of KIP-848 consumer groups moved to a new epoch.",
                                  value=reconciliations)
        yield CounterMetricFamily("brook_coordinator_rebalances",
                                  "Completed rebalances (join phases) of classic groups.",
                                  value=rebalances)
        yield GaugeMetricFamily("brook_coordinator_offsets", "Committed offsets in the cache.",
                                value=offsets)
        yield GaugeMetricFamily("brook_coordinator_offsets_cache_bytes",
                                "Estimated memory of the offsets cache.", value=cache_bytes)
        load_time = GaugeMetricFamily(
            "brook_coordinator_partition_load_time_seconds",
            "How long loading the __consumer_offsets partition took (at the broker's start).",
            labels=["partition"])
        loaded = GaugeMetricFamily(
            "brook_coordinator_partition_records_loaded",
            "Group and offset records replayed when the __consumer_offsets partition was loaded.",
            labels=["partition"])
        skipped = GaugeMetricFamily(
            "brook_coordinator_partition_records_skipped",
            "Records of the __consumer_offsets partition that could not be read when it was "
            "loaded, and were skipped (each is logged with its offset).",
            labels=["partition"])
        for index, seconds, records, unreadable in loads:
            load_time.add_metric([str(index)], seconds)
            loaded.add_metric([str(index)], records)
            skipped.add_metric([str(index)], unreadable)
        yield load_time
        yield loaded
        yield skipped


def _registry_figures(broker, metrics: BrokerMetrics):
    """A walk (see `LoopReader`) returning {section: what it read, or the exception that
    stopped it} for the sections "topic" and "request" (one step: the counts as the event loop
    left them) and "groups" (a step per ``__consumer_offsets`` partition)."""
    found: dict[str, object] = {}
    for name, read in (("topic", _topic_counts), ("request", _request_counts),
                       ("quota", lambda broker, _: dict(broker.quotas.throttled))):
        try:
            found[name] = read(broker, metrics)
        except Exception as exc:  # noqa: BLE001 - logged by the collector
            found[name] = exc
    yield
    try:
        found["groups"] = yield from _group_figures(broker)
    except Exception as exc:  # noqa: BLE001 - logged by the collector
        found["groups"] = exc
    return found


def _topic_counts(broker, metrics: BrokerMetrics) -> list[tuple[str, int, int, int, int, int]]:
    """(topic, bytes in, messages in, bytes out) of each topic; a deleted topic's counts go,
    as Kafka removes a deleted topic's metrics."""
    topics = metrics.topics
    metadata = broker.metadata
    counts = []
    for topic, stats in list(topics.items()):
        if metadata.get(topic) is None:
            del topics[topic]
        else:
            counts.append((topic, stats.bytes_in, stats.messages_in, stats.bytes_out,
                           stats.produce_conversions, stats.fetch_conversions))
    return counts


def _request_counts(broker, metrics: BrokerMetrics) -> list[tuple[int, int, float, list[int]]]:
    """(API key, requests, their total time, count per time bucket) of each API."""
    return [(key, stats.count, stats.time_sum, list(stats.buckets))
            for key, stats in metrics.requests.items()]


def _group_figures(broker):
    """A walk over the ``__consumer_offsets`` partitions, a step each, returning (groups per
    state, rebalances, cached offsets, cache bytes, [(partition, load seconds, records
    loaded)])."""
    states = dict.fromkeys((s.value for s in GroupState), 0)
    consumer_states = dict.fromkeys((s.value for s in ConsumerGroupState
                                     if s is not ConsumerGroupState.DEAD), 0)
    rebalances = offsets = cache_bytes = epoch_bumps = reconciliations = 0
    loads = []
    runtime = broker.coordinator
    for ctx in list(runtime.contexts.values()) if runtime is not None else []:
        shard = ctx.shard
        for group in list(shard.groups.values()):  # simple consumers' groups too (Empty)
            states[group.state.value] += 1
        rebalances += shard.classic.rebalances
        for consumer_group in list(shard.consumer.groups.values()):
            consumer_states[consumer_group.state.value] += 1
        epoch_bumps += shard.consumer.rebalances
        reconciliations += shard.consumer.reconciliations
        offsets += shard.offsets.cached_offsets
        cache_bytes += _cache_bytes(shard.offsets)
        load_time_ms = ctx.load_time_ms
        if load_time_ms is not None:
            loads.append((ctx.partition, load_time_ms / 1000, ctx.records_loaded,
                          ctx.records_skipped))
        yield
    return (states, rebalances, offsets, cache_bytes, loads,
            (consumer_states, epoch_bumps, reconciliations))


def _cache_bytes(manager) -> int:
    """The offsets cache's estimate of its memory. It walks the cache's dicts, which the event
    loop may resize meanwhile when this runs on another thread: tried again, then left out (0)
    of this scrape."""
    for _ in range(2):
        try:
            return manager.cache_bytes()
        except (RuntimeError, AttributeError, TypeError):  # e.g. a dict resized under it
            continue
    return 0
