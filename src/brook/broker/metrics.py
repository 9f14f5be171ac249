"""The broker's Prometheus metrics, served over HTTP when `metrics.port` is set.

Three kinds, each with its own cost:

- **Counted as it happens** (Produce, Fetch, every request): bytes and messages in and bytes
  out per topic, requests and their total time per API. The hot path pays one dict lookup and
  a few integer increments on plain objects written by the event loop alone; the collector
  turns them into Prometheus counters and a histogram when scraped. (prometheus_client's own
  Counter and Histogram take a lock per increment and cost several times as much.)
- **Read when scraped, a few series** (`BrokerCollector`, nothing per append): groups per
  state, rebalances, the offsets cache and the load of the ``__consumer_offsets`` partitions,
  exported through prometheus_client's registry.
- **Read when scraped, a series per partition and per committed offset** (`StateFamilies`):
  the partitions' offsets and sizes and consumer group lag. A broker may hold hundreds of
  thousands of committed offsets, so these are written as exposition text directly (a Sample
  object and prometheus_client's formatting per series made a scrape of 100,000 offsets cost
  about a second of CPU).

What is read when scraped is read *on the event loop* (`LoopReader`), in slices of about
SLICE_SECONDS between which the loop serves its clients: every value is read as the event loop
left it, and the scrape's thread waits without competing for the interpreter lock meanwhile.

Every broker has a registry of its own (not prometheus_client's global one), so brokers in one
process do not share counters. `BrokerMetrics.exposition` puts the registry's families and the
state families together; the HTTP server serves it. docs/metrics.md lists the metrics and
Kafka's names for them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
import threading
import time
import zlib
from bisect import bisect_left
from collections.abc import Callable, Generator
from time import perf_counter
from typing import TypeVar
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer, choose_encoder, gzip_accepted
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.utils import floatToGoString

from ..coordinator.group import GroupState

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The longest the event loop reads for a scrape before it serves its clients again, and how
#: long it serves them before it reads on. (The pause is a timer, not a place in the queue of
#: ready callbacks: a request's steps from one callback to the next all get their turn in it,
#: where a slice queued right behind each of them would double its wait at every step.)
SLICE_SECONDS = 0.001
PAUSE_SECONDS = 0.001
#: How long a scrape waits for the event loop to run the next slice of its reading before it
#: reads from its own thread instead (a loop stalled that long has worse problems; the scrape
#: still answers). A busy loop that keeps running slices is waited for.
LOOP_WAIT_SECONDS = 5.0
#: How often a waiting scrape looks whether the loop still runs and still reads.
_POLL_SECONDS = 0.1
#: gzip level of compressed scrapes (Prometheus asks for gzip): level 1 compresses 100,000 lag
#: series (7 MB) in ~35 ms to ~5 %; prometheus_client's level 9 takes ~0.45 s for ~3.5 %.
GZIP_LEVEL = 1

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

    # --- the exposition -------------------------------------------------------------------

    def exposition(self, accept: str | None = None,
                   names: list[str] | None = None) -> tuple[bytes, str]:
        """(body, content type) of a scrape: the format the Accept header asks for, as
        prometheus_client chooses it (OpenMetrics for Prometheus, else the text format), and
        only the families in `names` when given (a ``name[]`` query)."""
        parts, content_type = self._exposition_parts(accept, names)
        return b"".join(parts), content_type

    def _exposition_parts(self, accept: str | None,
                          names: list[str] | None) -> tuple[list[bytes], str]:
        """`exposition` as the pieces of its body, not joined: the lag series of a large
        broker are tens of megabytes, and the server sends (or compresses) them piece by
        piece rather than holding them twice."""
        encoder, content_type = choose_encoder(accept or "")
        om = content_type.startswith("application/openmetrics-text")
        wanted = set(names) if names else None
        registry = self.registry if wanted is None else self.registry.restricted_registry(wanted)
        head = encoder(registry)
        if om:
            head = head[:-len(_EOF)]  # the state families go before the end marker
        parts = [head]
        try:
            state = self.state.collect(wanted)
        except Exception:  # a bug here must not cost the scrape its other metrics
            log.exception("collecting the partition and lag metrics failed")
            state = {}
        for name, _ in STATE_FAMILIES:
            chunks = state.get(name)
            if chunks is not None and (wanted is None or name in wanted):
                parts.append(_FAMILY_HEADERS[name][om])
                parts.extend(chunks)
        if om:
            parts.append(_EOF)
        return parts, content_type

    def generate(self) -> bytes:
        """Every metric in the Prometheus text format, as `curl .../metrics` gets them."""
        return self.exposition()[0]

    # --- serving ---------------------------------------------------------------------------

    @property
    def port(self) -> int | None:
        return None if self._server is None else self._server.server_port

    def start(self, host: str, port: int) -> None:
        """Serve /metrics on host:port from a thread of its own (raises OSError if it cannot).
        Called on the broker's event loop, it reads the state families there."""
        self.reader.loop = _running_loop()
        addr = host or "0.0.0.0"
        try:
            family, addr = _address_family(addr, port)

            class Server(ThreadingWSGIServer):
                address_family = family

            self._server = make_server(addr, port, self._app, Server, handler_class=_QuietHandler)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot serve metrics on {host or '0.0.0.0'}:{port}: "
                                     f"{exc.strerror or exc}") from None
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="brook-metrics")
        self._thread.start()
        log.info("serving Prometheus metrics on http://%s:%d/metrics", host or "0.0.0.0", port)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            self._thread.join(5)
        # The reader keeps the loop: a scrape accepted before the server stopped still reads
        # on it while it runs (the broker closes on it), and from its own thread once it ends.

    def _app(self, environ, start_response):
        """The WSGI application: prometheus_client's (OPTIONS, 405 for other methods than GET,
        an empty /favicon.ico, metrics on any other path, ``name[]``, gzip when accepted)."""
        method = environ["REQUEST_METHOD"]
        headers: list[tuple[str, str]] = []
        if method == "OPTIONS":
            status, headers, body = "200 OK", [("Allow", "OPTIONS,GET")], b""
        elif method != "GET":
            status = "405 Method Not Allowed"
            headers = [("Allow", "OPTIONS,GET")]
            body = f"# HTTP {status}: {method}; use OPTIONS or GET\n".encode()
        elif environ["PATH_INFO"] == "/favicon.ico":
            status, body = "200 OK", b""
        else:
            names = parse_qs(environ.get("QUERY_STRING", "")).get("name[]")
            parts, content_type = self._exposition_parts(environ.get("HTTP_ACCEPT"), names)
            status, headers = "200 OK", [("Content-Type", content_type)]
            if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING")):
                parts = _gzip(parts)
                headers.append(("Content-Encoding", "gzip"))
            headers.append(("Content-Length", str(sum(map(len, parts)))))
            start_response(status, headers)
            return parts
        start_response(status, headers)
        return [body]


def _gzip(parts: list[bytes]) -> list[bytes]:
    """The parts compressed as one gzip stream, each part let go once it is compressed."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts.reverse()
    out = []
    while parts:
        piece = compressor.compress(parts.pop())
        if piece:
            out.append(piece)
    out.append(compressor.flush())
    return out


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's name
        pass


def _address_family(addr: str, port: int) -> tuple[int, str]:
    """The address family and address to bind (an IPv6 host gets an IPv6 socket)."""
    family, _, _, _, sockaddr = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM,
                                                   flags=socket.AI_PASSIVE)[0]
    return family, sockaddr[0]


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
                              ("groups", self._groups)):
            try:
                read = figures[name]
                if isinstance(read, Exception):
                    raise read
                families = list(section(read))
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
        for topic, nbytes_in, nmessages_in, nbytes_out in counts:
            bytes_in.add_metric([topic], nbytes_in)
            messages_in.add_metric([topic], nmessages_in)
            bytes_out.add_metric([topic], nbytes_out)
        return bytes_in, messages_in, bytes_out

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
            for bound, k in zip(_BUCKET_LABELS, per_bucket):
                cumulative += k
                buckets.append((bound, cumulative))
            total_time.add_metric([name], buckets, time_sum)
        return count, total_time

    def _groups(self, figures):
        states, rebalances, offsets, cache_bytes, loads = figures
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
        load_time = GaugeMetricFamily(
            "brook_coordinator_partition_load_time_seconds",
            "How long loading the __consumer_offsets partition took (at the broker's start).",
            labels=["partition"])
        loaded = GaugeMetricFamily(
            "brook_coordinator_partition_records_loaded",
            "Group and offset records replayed when the __consumer_offsets partition was loaded.",
            labels=["partition"])
        for index, seconds, records in loads:
            load_time.add_metric([str(index)], seconds)
            loaded.add_metric([str(index)], records)
        yield load_time
        yield loaded


def _registry_figures(broker, metrics: BrokerMetrics):
    """A walk (see `LoopReader`) returning {section: what it read, or the exception that
    stopped it} for the sections "topic" and "request" (one step: the counts as the event loop
    left them) and "groups" (a step per ``__consumer_offsets`` partition)."""
    found: dict[str, object] = {}
    for name, read in (("topic", _topic_counts), ("request", _request_counts)):
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


def _topic_counts(broker, metrics: BrokerMetrics) -> list[tuple[str, int, int, int]]:
    """(topic, bytes in, messages in, bytes out) of each topic; a deleted topic's counts go,
    as Kafka removes a deleted topic's metrics."""
    topics = metrics.topics
    metadata = broker.metadata
    counts = []
    for topic, stats in list(topics.items()):
        if metadata.get(topic) is None:
            del topics[topic]
        else:
            counts.append((topic, stats.bytes_in, stats.messages_in, stats.bytes_out))
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
    rebalances = offsets = cache_bytes = 0
    loads = []
    runtime = broker.groups
    for shard in list(runtime.shards) if runtime is not None else []:
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
            loads.append((shard.index, load_time_ms / 1000, shard.records_loaded))
        yield
    return states, rebalances, offsets, cache_bytes, loads


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


# --- reading on the event loop ----------------------------------------------------------------


class LoopReader:
    """Runs a scrape's reads of the broker's state on the broker's event loop.

    A read is a *walk*: a generator that yields at short intervals (after a partition, a
    group, an offsets partition) and returns what it read. Called from another thread while
    `loop` runs (it is set when the metrics start serving), `read` has the loop run the walk in
    slices of `slice_seconds`, one callback each, `pause_seconds` apart, and waits. So the loop
    serves its clients between slices, the scrape's thread does not compete with it for the
    interpreter lock meanwhile, and every value is read as the event loop left it (within a
    step, the same instant: a group's committed offsets and the partitions' high watermarks).

    Without a running loop, or called on the loop itself, `read` runs the walk on the calling
    thread at once; so it does when the loop stops running while a read waits for it (nothing
    changes the state any more), and when the loop has run no slice for `wait_seconds` (a
    stalled loop: logged). Walks are written to be safe off the loop too (copies of dicts
    before they are walked, the coordinator's offsets read from copies, the logs' immutable
    segment tuples), though not instantaneous.
    """

    slice_seconds = SLICE_SECONDS
    pause_seconds = PAUSE_SECONDS
    wait_seconds = LOOP_WAIT_SECONDS

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def read(self, walk: Callable[[], Generator[None, None, T]]) -> T:
        """What `walk()` returns; an exception of the walk is raised here."""
        loop = self.loop
        if loop is not None and loop.is_running() and _running_loop() is not loop:
            done: concurrent.futures.Future = concurrent.futures.Future()
            slices = [0]  # counted by the loop
            try:
                loop.call_soon_threadsafe(self._step, loop, walk(), done, slices)
            except RuntimeError:  # the loop was closed meanwhile
                pass
            else:
                stalled = self._wait(loop, done, slices)
                if not done.cancel():  # it finished after all
                    return done.result()
                if stalled:
                    log.warning("the event loop has not read for the metrics for %.0f s; "
                                "reading them from the scrape's thread", self.wait_seconds)
        steps = walk()
        while True:
            try:
                next(steps)
            except StopIteration as stop:
                return stop.value

    def _wait(self, loop, done: concurrent.futures.Future, slices: list[int]) -> bool:
        """Wait for `done` while the loop runs slices; False when the loop stopped running,
        True when it ran none for `wait_seconds`. (Returns when `done` is done, too.)"""
        seen, since = slices[0], time.monotonic()
        while True:
            try:
                done.result(min(_POLL_SECONDS, self.wait_seconds))
            except BaseException:  # noqa: BLE001 - a timeout, or the walk's: `read` raises it
                pass
            if done.done() or not loop.is_running():
                return False
            now = time.monotonic()
            if slices[0] != seen:
                seen, since = slices[0], now
            elif now - since >= self.wait_seconds:
                return True

    def _step(self, loop, steps, done: concurrent.futures.Future, slices: list[int]) -> None:
        """One slice of a walk, on the event loop."""
        if done.cancelled():  # the scrape stopped waiting
            steps.close()
            return
        slices[0] += 1
        clock = perf_counter
        deadline = clock() + self.slice_seconds
        try:
            while True:
                next(steps)
                if clock() >= deadline:
                    break
        except StopIteration as stop:
            _settle(done.set_result, stop.value)
        except Exception as exc:  # noqa: BLE001 - raised in the scrape's thread
            _settle(done.set_exception, exc)
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: the loop's too
            _settle(done.set_exception, exc)
            raise
        else:
            loop.call_later(self.pause_seconds, self._step, loop, steps, done, slices)


def _running_loop():
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _settle(setter, value) -> None:
    try:
        setter(value)
    except concurrent.futures.InvalidStateError:  # cancelled: the scrape stopped waiting
        pass


# --- the state families: a series per partition and per committed offset ----------------------

PARTITION_FAMILIES = (
    ("brook_log_end_offset", "The offset of the next record appended."),
    ("brook_log_start_offset", "The first offset still in the log."),
    ("brook_log_size_bytes", "Bytes in the partition's segment files."),
    ("brook_log_segments", "Segments of the partition's log."),
)
LAG_FAMILY = ("brook_consumergroup_lag", "High watermark minus the group's committed offset.")
STATE_FAMILIES = PARTITION_FAMILIES + (LAG_FAMILY,)

_EOF = b"# EOF\n"
# Integers in [_EXACT_MIN, _EXACT_MAX) are written f"{v}.0", which is what prometheus_client's
# floatToGoString(v) writes for them (it switches to exponents at 1e6, and a float is exact
# up to 2**53); the others go through floatToGoString itself.
_EXACT_MIN, _EXACT_MAX = -(2**53), 1_000_000
# Lines joined into one chunk of bytes at a time.
_CHUNK_LINES = 4096


def _number(v: int) -> str:
    """An integer sample value as prometheus_client writes it."""
    return f"{v}.0" if _EXACT_MIN <= v < _EXACT_MAX else floatToGoString(v)


def _label(value: str) -> str:
    """A label value escaped as both formats want it (backslash, newline, double quote)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class _Only:
    """A registry of one metric, for prometheus_client to write its HELP and TYPE lines."""

    def __init__(self, metric) -> None:
        self.metric = metric

    def collect(self):
        return [self.metric]


def _family_headers(name: str, documentation: str) -> tuple[bytes, bytes]:
    """(text format, OpenMetrics) HELP and TYPE lines of a gauge, as prometheus_client
    writes them."""
    family = GaugeMetricFamily(name, documentation)
    return (generate_latest(_Only(family)),
            openmetrics.generate_latest(_Only(family))[:-len(_EOF)])


_FAMILY_HEADERS = {name: _family_headers(name, doc) for name, doc in STATE_FAMILIES}


class StateFamilies:
    """The families with a series per partition (log end and start offsets, size, segments) and
    per committed offset (consumer group lag), as exposition text.

    Each line is written as prometheus_client would write it (labels in name order, values by
    floatToGoString's rules) straight into text: no Sample objects, no formatting calls per
    series. The lines are the same in the Prometheus text format and in OpenMetrics. The
    broker's state is read through the `LoopReader`.
    """

    def __init__(self, broker, reader: LoopReader) -> None:
        self.broker = broker
        self.reader = reader

    def collect(self, names: set[str] | None = None) -> dict[str, list[bytes]]:
        """{family name: its sample lines in chunks} of the families among `names` (all when
        None); a section that fails is logged and left out."""
        found: dict[str, list[bytes]] = {}
        for section, families, walk in (("partitions", PARTITION_FAMILIES, self._partitions),
                                        ("lag", (LAG_FAMILY,), self._lag)):
            if names is not None and not any(name in names for name, _ in families):
                continue
            try:
                found.update(self.reader.read(walk))
            except Exception:  # a bug here must not cost the scrape its other metrics
                log.exception("collecting the %s metrics failed", section)
        return found

    def _partitions(self):
        lines: tuple[list[str], ...] = ([], [], [], [])
        chunks: tuple[list[bytes], ...] = ([], [], [], [])
        end, start, size, count = lines
        partitions = self.broker.partitions
        for key in list(partitions):
            partition = partitions.get(key)
            if partition is not None:  # else deleted meanwhile
                topic, index = key
                labels = f'{{partition="{index}",topic="{_label(topic)}"}} '
                lg = partition.log
                segs = lg.segments  # an immutable tuple, replaced (never changed) by the log
                end.append(f"brook_log_end_offset{labels}{_number(segs[-1].next_offset)}\n")
                start.append(f"brook_log_start_offset{labels}{_number(lg.log_start_offset)}\n")
                size.append(f"brook_log_size_bytes{labels}{_number(sum(s.size for s in segs))}\n")
                count.append(f"brook_log_segments{labels}{_number(len(segs))}\n")
                if len(end) >= _CHUNK_LINES:
                    _flush(lines, chunks)
            yield
        _flush(lines, chunks)
        return {name: family for (name, _), family in zip(PARTITION_FAMILIES, chunks)}

    def _lag(self):
        # One series per committed offset: the partition's high watermark minus the offset,
        # for the partitions the broker has (a deleted topic's offsets have none).
        lines: list[str] = []
        chunks: list[bytes] = []
        add = lines.append
        partitions = self.broker.partitions
        runtime = self.broker.groups
        low, high, go = _EXACT_MIN, _EXACT_MAX, floatToGoString
        for shard in list(runtime.shards) if runtime is not None else []:
            manager = shard.offsets
            if manager is None:
                continue
            cache = manager.cache
            for group in cache.groups():  # a step each: a group's offsets from one instant
                head = f'brook_consumergroup_lag{{group="{_label(group)}",partition="'
                for topic in cache.topics(group):
                    tail = f'",topic="{_label(topic)}"}} '
                    for index, offset in cache.committed_offsets(group, topic):
                        partition = partitions.get((topic, index))
                        if partition is not None:
                            lag = partition.high_watermark - offset
                            if low <= lag < high:
                                add(f"{head}{index}{tail}{lag}.0\n")
                            else:
                                add(f"{head}{index}{tail}{go(lag)}\n")
                if len(lines) >= _CHUNK_LINES:
                    chunks.append("".join(lines).encode())
                    lines.clear()
                yield
                if shard.offsets is not manager:  # the partition was unloaded meanwhile
                    break
        chunks.append("".join(lines).encode())
        return {LAG_FAMILY[0]: chunks}


def _flush(lines: tuple[list[str], ...], chunks: tuple[list[bytes], ...]) -> None:
    for family_lines, family_chunks in zip(lines, chunks):
        family_chunks.append("".join(family_lines).encode())
        family_lines.clear()
