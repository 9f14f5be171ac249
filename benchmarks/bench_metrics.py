"""What a scrape of /metrics costs a broker holding many committed offsets, and what it costs
the broker's clients meanwhile.

    .venv/bin/python benchmarks/bench_metrics.py [--groups 1000] [--scrapes 8]

A real broker (`python -m brook broker` with `metrics.port`) gets `--topics` topics of
`--partitions` partitions, 20 records in each partition, then one OffsetCommit per group (a
simple consumer's: generation -1) for every partition of every topic, pipelined on one
connection: 1,000 groups x 100 partitions = 100,000 committed offsets, one
`brook_consumergroup_lag` series each. Then, while another process keeps measuring request
round trips (ApiVersions and a one-partition OffsetCommit, alternately, one every
`--interval` seconds, on two connections of their own), /metrics is scraped `--scrapes` times
as curl asks for it (the Prometheus text format, not compressed) and `--scrapes` times as
Prometheus asks (OpenMetrics preferred, gzip), `--gap` seconds apart.

Printed: each kind of scrape's time (median and worst), size and broker CPU (measured
apart, over 4 scrapes with no other traffic); the probe's round trips that
started during scrapes against those that started outside any (median, p99, worst, and how
many per second were answered). The last scrape is parsed with prometheus_client's parser and
its lag series are checked against the offsets committed (all present, each value exact).
Not a test and not part of `make bench`: a measurement to read.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import io
import json
import multiprocessing
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from brokers import WORK_ROOT, brook_broker, free_port  # noqa: E402

API_VERSIONS, OFFSET_COMMIT = 18, 8
RECORDS_PER_PARTITION = 20
# What Prometheus 2.x sends (OpenMetrics first); prometheus_client serves the first type it knows.
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


class Wire:
    """Kafka requests over one blocking socket: kio entities in, kio entities out."""

    def __init__(self, bootstrap: str, timeout: float = 60.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def encode(self, body) -> bytes:
        from kio.serial import entity_writer

        from brook.protocol.messages import make

        cls = type(body)
        self.correlation_id += 1
        header_cls = cls.__header_schema__
        buf = io.BytesIO()
        entity_writer(header_cls)(buf, make(header_cls, request_api_key=cls.__api_key__,
                                            request_api_version=cls.__version__,
                                            correlation_id=self.correlation_id,
                                            client_id="bench-metrics"))
        entity_writer(cls)(buf, body)
        data = buf.getvalue()
        return struct.pack(">i", len(data)) + data

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            out += chunk
        return bytes(out)

    def decode(self, frame: bytes, api_key: int, version: int):
        from kio.index import load_response_schema
        from kio.serial import entity_reader

        cls = load_response_schema(api_key, version)
        _, offset = entity_reader(cls.__header_schema__)(frame, 0)
        return entity_reader(cls)(frame, offset)[0]


def _module(api_key: int, version: int):
    from kio.index import load_request_schema

    cls = load_request_schema(api_key, version)
    return cls, __import__(cls.__module__, fromlist=["x"])


def commit_request(group: str, offsets: dict[str, list[tuple[int, int]]]):
    from brook.protocol.messages import make

    cls, m = _module(OFFSET_COMMIT, 8)
    topics = tuple(m.OffsetCommitRequestTopic(name=topic, partitions=tuple(
        make(m.OffsetCommitRequestPartition, partition_index=p, committed_offset=o,
             committed_leader_epoch=-1, committed_metadata="") for p, o in parts))
        for topic, parts in offsets.items())
    return make(cls, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, topics=topics,
                retention_time=datetime.timedelta(milliseconds=-1))


def expected_offset(g: int, t: int, p: int) -> int:
    """The offset group g commits for partition p of topic t: spread over 0..20 (lags 20..0)."""
    return (g * 7 + t * 3 + p) % (RECORDS_PER_PARTITION + 1)


def commit_offsets(bootstrap: str, groups: int, topics: list[str], partitions: int) -> float:
    """One OffsetCommit per group for every partition, pipelined; returns the seconds it took.
    Every partition must be answered without error."""
    wire = Wire(bootstrap)
    errors: list[BaseException] = []

    def send() -> None:
        try:
            for g in range(groups):
                body = commit_request(f"group-{g}", {
                    topic: [(p, expected_offset(g, t, p)) for p in range(partitions)]
                    for t, topic in enumerate(topics)})
                wire.sock.sendall(wire.encode(body))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t0 = time.perf_counter()
    writer = threading.Thread(target=send, daemon=True)
    writer.start()
    try:
        for _ in range(groups):
            answer = wire.decode(wire.recv_frame(), OFFSET_COMMIT, 8)
            bad = [(t.name, p.partition_index, p.error_code) for t in answer.topics
                   for p in t.partitions if p.error_code != 0]
            if bad:
                raise RuntimeError(f"OffsetCommit refused: {bad[:5]}")
        writer.join()
        if errors:
            raise errors[0]
        return time.perf_counter() - t0
    finally:
        wire.close()


def probe(bootstrap: str, topic: str, interval: float, stop, out_path: str) -> None:
    """Round trips until `stop` is set: ApiVersions and OffsetCommit alternately, each on its
    own connection; writes [(monotonic start, kind, seconds)] as JSON to out_path."""
    from brook.protocol.messages import make

    versions_cls, _ = _module(API_VERSIONS, 3)
    versions = Wire(bootstrap, timeout=120)
    committer = Wire(bootstrap, timeout=120)
    ask = versions.encode(make(versions_cls, client_software_name="bench-probe",
                               client_software_version="1"))
    samples: list[tuple[float, str, float]] = []
    offset = 0
    try:
        while not stop.is_set():
            t0 = time.monotonic()
            versions.sock.sendall(ask)
            versions.recv_frame()
            t1 = time.monotonic()
            samples.append((t0, "ApiVersions", t1 - t0))
            offset += 1
            frame = committer.encode(commit_request("bench-probe", {topic: [(0, offset % 20)]}))
            t0 = time.monotonic()
            committer.sock.sendall(frame)
            committer.recv_frame()
            t1 = time.monotonic()
            samples.append((t0, "OffsetCommit", t1 - t0))
            if interval:
                time.sleep(interval)
    finally:
        versions.close()
        committer.close()
        with open(out_path, "w") as f:
            json.dump(samples, f)


def scrape(url: str, as_prometheus: bool) -> tuple[float, float, int, bytes]:
    """(monotonic start, end, bytes received, body decoded) of one GET of /metrics."""
    headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"} if as_prometheus else {}
    t0 = time.monotonic()
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=300) as resp:
        raw = resp.read()
        encoding = resp.headers.get("Content-Encoding")
    t1 = time.monotonic()
    body = gzip.decompress(raw) if encoding == "gzip" else raw
    return t0, t1, len(raw), body


def produce_records(bootstrap: str, topics: list[str], partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "1"})
    for topic in topics:
        for p in range(partitions):
            for i in range(RECORDS_PER_PARTITION):
                producer.produce(topic, b"v%d" % i, partition=p)
    if producer.flush(60):
        raise RuntimeError("records not delivered")


def check_lag(body: bytes, groups: int, topics: list[str], partitions: int) -> int:
    """The lag series of a scrape against the commits: every one there, each value exact."""
    from prometheus_client.parser import text_string_to_metric_families

    lags = {}
    for family in text_string_to_metric_families(body.decode()):
        if family.name == "brook_consumergroup_lag":
            for s in family.samples:
                lags[(s.labels["group"], s.labels["topic"], int(s.labels["partition"]))] = s.value
    for g in range(groups):
        for t, topic in enumerate(topics):
            for p in range(partitions):
                want = RECORDS_PER_PARTITION - expected_offset(g, t, p)
                got = lags.get((f"group-{g}", topic, p))
                if got != want:
                    raise AssertionError(f"lag of group-{g} {topic}/{p}: {got}, expected {want}")
    return len(lags)


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def summary(latencies: list[float], seconds: float) -> str:
    if not latencies:
        return "no round trips"
    ms = [x * 1000 for x in latencies]
    return (f"{len(ms)} round trips ({len(ms) / seconds:,.0f}/s): "
            f"median {statistics.median(ms):.2f} ms, "
            f"p99 {percentile(ms, 0.99):.2f} ms, worst {max(ms):.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--scrapes", type=int, default=8, help="of each kind")
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between scrapes")
    parser.add_argument("--interval", type=float, default=0.001,
                        help="seconds the probe waits between round trips (0: back to back)")
    args = parser.parse_args()

    WORK_ROOT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="metrics-scrape-", dir=WORK_ROOT))
    metrics_port = free_port()
    broker = brook_broker(work, {"metrics.port": str(metrics_port)})
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    topics = [f"t{t}" for t in range(args.topics)]
    ctx = multiprocessing.get_context("spawn")
    try:
        broker.start()
        for topic in topics:
            broker.create_topic(topic, args.partitions)
        produce_records(broker.bootstrap, topics, args.partitions)
        seconds = commit_offsets(broker.bootstrap, args.groups, topics, args.partitions)
        committed = args.groups * args.topics * args.partitions
        print(f"{committed:,} offsets committed by {args.groups:,} groups in {seconds:.1f} s "
              f"(pipelined OffsetCommit v8, one request per group)")
        scrape(url, False)  # warm up
        cpu = {}
        for kind in ("curl", "Prometheus"):  # the broker's CPU per scrape, nothing else going on
            before = broker.cpu()
            for _ in range(4):
                scrape(url, kind == "Prometheus")
            cpu[kind] = (broker.cpu() - before) / 4

        stop = ctx.Event()
        out_path = str(work / "probe.json")
        prober = ctx.Process(target=probe, args=(broker.bootstrap, topics[0], args.interval,
                                                 stop, out_path))
        prober.start()
        time.sleep(3.0)  # the probe connects and runs a while without scrapes
        windows: dict[str, list[tuple[float, float, int]]] = {"curl": [], "Prometheus": []}
        body = b""
        for i in range(2 * args.scrapes):
            kind = "Prometheus" if i % 2 else "curl"
            t0, t1, size, body = scrape(url, kind == "Prometheus")
            windows[kind].append((t0, t1, size))
            broker.check_alive()
            time.sleep(args.gap)
        stop.set()
        prober.join(120)
        with open(out_path) as f:
            samples = json.load(f)
        series = check_lag(body, args.groups, topics, args.partitions)
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(f"{series:,} brook_consumergroup_lag series in a scrape, every value as committed")
    all_windows = [w for ws in windows.values() for w in ws]
    for kind, ws in windows.items():
        times = [t1 - t0 for t0, t1, _ in ws]
        print(f"scrape as {kind}: median {statistics.median(times):.3f} s, "
              f"worst {max(times):.3f} s, "
              f"{ws[-1][2] / 1e6:.2f} MB on the wire, {cpu[kind]:.2f} s of broker CPU")
    probe_start = samples[0][0]
    probe_end = samples[-1][0]
    in_scrape_time = sum(t1 - t0 for t0, t1, _ in all_windows)
    for name in ("ApiVersions", "OffsetCommit"):
        during = [lat for t, k, lat in samples
                  if k == name and any(t0 <= t <= t1 for t0, t1, _ in all_windows)]
        outside = [lat for t, k, lat in samples
                   if k == name
                   and not any(t0 - 0.05 <= t <= t1 + 0.05 for t0, t1, _ in all_windows)]
        print(f"{name} during scrapes:  {summary(during, in_scrape_time)}")
        outside_time = probe_end - probe_start - in_scrape_time
        print(f"{name} outside scrapes: {summary(outside, outside_time)}")


if __name__ == "__main__":
    main()
