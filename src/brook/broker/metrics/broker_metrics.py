"""One broker's metrics: its own registry (brokers in one process do not share counters), the
hooks the hot path counts through, the exposition of a scrape (the registry's families and the
state families in one body) and the start and stop of serving it.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from time import perf_counter

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.process_collector import ProcessCollector

from .collector import BrokerCollector
from .counts import REQUEST_TIME_BUCKETS, RequestStats, TopicStats
from .loop_reader import LoopReader, running_loop
from .serving import MetricsServer
from .state_families import (
    DEFAULT_ESCAPING,
    EOF,
    STATE_FAMILIES,
    StateFamilies,
    family_headers,
)

log = logging.getLogger(__package__)


class BrokerMetrics:
    """The metrics of one broker: its registry, the hot-path counts and the HTTP server."""

    def __init__(self, broker) -> None:
        self.broker = broker
        # Collectors without names: a name[] query collects them and keeps the samples named.
        self.registry = CollectorRegistry(auto_describe=False,
                                          support_collectors_without_names=True)
        self.collector = BrokerCollector(broker, self)
        self.registry.register(self.collector)
        ProcessCollector(registry=self.registry)
        self.reader = LoopReader()
        self.state = StateFamilies(broker, self.reader)
        self.requests = {key: RequestStats() for key in broker.apis}
        self.topics: dict[str, TopicStats] = {}
        self._server: MetricsServer | None = None

    # --- the hot path (event loop) -------------------------------------------------------

    def request_done(self, api_key: int, received: float) -> None:
        """A request was answered; `received` is `perf_counter()` when its frame arrived."""
        elapsed = perf_counter() - received
        stats = self.requests[api_key]
        stats.count += 1
        stats.time_sum += elapsed
        stats.buckets[bisect_left(REQUEST_TIME_BUCKETS, elapsed)] += 1

    def produced(self, topic: str, nbytes: int, messages: int, converted: int = 0) -> None:
        """Count an append; `converted` records of it came as legacy messages (Produce v0-v2)."""
        stats = self.topics.get(topic) or self._topic(topic)
        stats.bytes_in += nbytes
        stats.messages_in += messages
        if converted:
            stats.produce_conversions += converted

    def fetch_converted(self, topic: str, records: int) -> None:
        """Count records down-converted for an old consumer (Fetch v0-v3)."""
        (self.topics.get(topic) or self._topic(topic)).fetch_conversions += records

    def fetched(self, results) -> None:
        """Count the record bytes of a Fetch response's partitions (`TopicResult`s)."""
        for tr in results:
            nbytes = sum(pr.records_size for pr in tr.partitions if pr.records)
            if nbytes:
                (self.topics.get(tr.name) or self._topic(tr.name)).bytes_out += nbytes

    def _topic(self, topic: str) -> TopicStats:
        stats = self.topics[topic] = TopicStats()
        return stats

    # --- the exposition -------------------------------------------------------------------

    def exposition(self, accept: str | None = None,
                   names: list[str] | None = None) -> tuple[bytes, str]:
        """(body, content type) of a scrape: the format the Accept header asks for, as
        prometheus_client chooses it (OpenMetrics for Prometheus, else the text format), and
        only the families in `names` when given (a ``name[]`` query)."""
        parts, content_type = self.exposition_parts(accept, names)
        return b"".join(parts), content_type

    def exposition_parts(self, accept: str | None,
                          names: list[str] | None) -> tuple[list[bytes], str]:
        """`exposition` as the pieces of its body, not joined: the lag series of a large
        broker are tens of megabytes, and the server sends (or compresses) them piece by
        piece rather than holding them twice."""
        encoder, content_type = choose_encoder(accept or "")
        om = content_type.startswith("application/openmetrics-text")
        wanted = set(names) if names else None
        registry = self.registry if wanted is None else self.registry.restricted_registry(wanted)
        # The name escaping the scraper asked for (prometheus_client's encoder carries it).
        escaping = (getattr(encoder, "keywords", None) or {}).get("escaping", DEFAULT_ESCAPING)
        head = encoder(registry)
        if om:
            head = head[:-len(EOF)]  # the state families go before the end marker
        parts = [head]
        try:
            state = self.state.collect(wanted, escaping)
        except Exception:  # a bug here must not cost the scrape its other metrics
            log.exception("collecting the partition and lag metrics failed")
            state = {}
        headers = family_headers(escaping)
        for name, _ in STATE_FAMILIES:
            chunks = state.get(name)
            if chunks is not None and (wanted is None or name in wanted):
                parts.append(headers[name][om])
                parts.extend(chunks)
        if om:
            parts.append(EOF)
        return parts, content_type

    def generate(self) -> bytes:
        """Every metric in the Prometheus text format, as `curl .../metrics` gets them."""
        return self.exposition()[0]

    # --- serving ---------------------------------------------------------------------------

    @property
    def port(self) -> int | None:
        return None if self._server is None else self._server.port

    def start(self, host: str, port: int) -> None:
        """Serve /metrics on host:port from a thread of its own (raises OSError if it cannot).
        Called on the broker's event loop, it reads the state families there."""
        self.reader.loop = running_loop()
        self._server = MetricsServer(host, port, self.exposition_parts)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()
        # The reader keeps the loop: a scrape accepted before the server stopped still reads
        # on it while it runs (the broker closes on it), and from its own thread once it ends.
