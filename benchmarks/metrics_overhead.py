"""What the Prometheus metrics cost a producer: brook with `metrics.port` (scraped every second)
against brook without, in interleaved rounds, plus the per-call cost of the hot-path hooks.

    .venv/bin/python benchmarks/metrics_overhead.py [--rounds 5]

Two workloads through confluent-kafka, acks=1, one partition, 100-byte values:
- batched: large batches (linger.ms=5), the broker's throughput case;
- one record per request (batch.num.messages=1): the per-request hooks' worst case.
Printed: the median of the rounds' records/s and the broker's CPU time per record; then
what one scrape costs with 10,000 and 100,000 committed offsets (one lag series each).
Not a test and not part of `make bench`: a measurement to read.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from brokers import WORK_ROOT, Broker, brook_broker, free_port  # noqa: E402

WORKLOADS = {
    "batched": (300_000, {"linger.ms": 5, "batch.size": 1_048_576, "batch.num.messages": 10_000}),
    "one record per request": (20_000, {"linger.ms": 0, "batch.num.messages": 1}),
}
VALUE = b"v" * 100


def produce(broker: Broker, topic: str, n: int, config: dict) -> tuple[float, float]:
    """(records/s, broker CPU µs per record) for n records."""
    delivered = 0

    def on_delivery(err, _msg) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1",
                         "enable.idempotence": False, "compression.type": "none",
                         "queue.buffering.max.messages": 2_000_000, "on_delivery": on_delivery,
                         **config})
    producer.produce(topic, VALUE)  # connect and learn the leader outside the timing
    producer.flush(30)
    delivered = 0
    cpu0, t0 = broker.cpu(), time.perf_counter()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
    producer.flush(120)
    elapsed, cpu = time.perf_counter() - t0, broker.cpu() - cpu0
    if delivered != n:
        raise RuntimeError(f"{delivered} of {n} records delivered")
    return n / elapsed, cpu / n * 1e6


class Scraper(threading.Thread):
    """Scrapes /metrics every `interval` seconds, as a (busy) Prometheus would."""

    def __init__(self, port: int, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.url, self.interval = f"http://127.0.0.1:{port}/metrics", interval
        self.done = threading.Event()
        self.scrapes = 0

    def run(self) -> None:
        while not self.done.wait(self.interval):
            with urllib.request.urlopen(self.url, timeout=10) as resp:
                resp.read()
            self.scrapes += 1


def hook_costs() -> dict[str, float]:
    """Nanoseconds per call of the hot-path hooks, in this process."""
    from brook.broker.broker import Broker as InProcessBroker
    from brook.broker.config import BrokerConfig
    from brook.broker.metrics import BrokerMetrics

    work = Path(tempfile.mkdtemp(prefix="metrics-hooks-", dir=WORK_ROOT))
    broker = InProcessBroker(BrokerConfig.from_props({"log.dirs": str(work)}))
    try:
        broker.open()
        metrics = BrokerMetrics(broker)
        produce_key = next(k for k, a in broker.apis.items() if a.name == "Produce")
        n = 200_000
        out = {}
        t0 = time.perf_counter()
        for _ in range(n):
            metrics.request_done(produce_key, t0)
        out["request_done (count + time)"] = (time.perf_counter() - t0) / n * 1e9
        t0 = time.perf_counter()
        for _ in range(n):
            metrics.produced("t", 1000, 10)
        out["produced (bytes + messages)"] = (time.perf_counter() - t0) / n * 1e9
        return out
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)


def scrape_cost(groups: int) -> tuple[int, float, int]:
    """(committed offsets, seconds, bytes) of one scrape of an in-process broker whose
    coordinator holds `groups` groups with 100 committed offsets each (10 topics of 10
    partitions), replayed as the runtime replays commits."""
    import asyncio

    from brook.broker.broker import Broker as InProcessBroker
    from brook.broker.config import BrokerConfig
    from brook.broker.metrics import BrokerMetrics
    from brook.coordinator.group.schemas import OffsetCommitKey, OffsetCommitValue

    work = Path(tempfile.mkdtemp(prefix="metrics-scrape-", dir=WORK_ROOT))
    broker = InProcessBroker(BrokerConfig.from_props({"log.dirs": str(work)}))

    async def run() -> tuple[int, float, int]:
        broker.open()
        metrics = BrokerMetrics(broker)
        for t in range(10):
            broker.create_topic(f"t{t}", 10)
        broker.ensure_offsets_topic()
        rt = broker.coordinator
        rt.start()
        await rt.wait_loaded()
        try:
            for g in range(groups):
                shard = rt.contexts[rt.partition_for(f"g{g}")].shard
                for t in range(10):
                    for p in range(10):
                        shard.replay(OffsetCommitKey(f"g{g}", f"t{t}", p), OffsetCommitValue(5), 0)
            t0 = time.perf_counter()
            body = metrics.generate()
            return groups * 100, time.perf_counter() - t0, len(body)
        finally:
            await rt.stop()

    try:
        return asyncio.run(run())
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    WORK_ROOT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="metrics-", dir=WORK_ROOT))
    (work / "off").mkdir()
    (work / "on").mkdir()
    metrics_port = free_port()
    plain = brook_broker(work / "off")
    plain.name = "metrics off"
    measured = brook_broker(work / "on", {"metrics.port": str(metrics_port)})
    measured.name = "metrics on"
    brokers = [plain, measured]
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for b in brokers:
            b.start()
        scraper = Scraper(metrics_port)
        scraper.start()
        for rnd in range(args.rounds):
            for w, (n, config) in WORKLOADS.items():
                for b in (brokers if rnd % 2 == 0 else brokers[::-1]):
                    topic = f"m-{rnd}-{len(results)}"
                    b.create_topic(topic, 1)
                    results.setdefault((w, b.name), []).append(produce(b, topic, n, config))
                    b.delete_topics()
            print(f"round {rnd + 1} of {args.rounds} done", file=sys.stderr, flush=True)
        scraper.done.set()
    finally:
        for b in brokers:
            b.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.rounds} rounds, medians; the metrics broker scraped {scraper.scrapes} times "
          f"(every second)")
    for w in WORKLOADS:
        off = [r for r in results[(w, "metrics off")]]
        on = [r for r in results[(w, "metrics on")]]
        rate_off, rate_on = (statistics.median(x[0] for x in rs) for rs in (off, on))
        cpu_off, cpu_on = (statistics.median(x[1] for x in rs) for rs in (off, on))
        print(f"{w}: metrics off {rate_off:,.0f} records/s, {cpu_off:.1f} µs broker CPU/record; "
              f"on {rate_on:,.0f} records/s, {cpu_on:.1f} µs broker CPU/record "
              f"(throughput {100 * (rate_on / rate_off - 1):+.1f} %, "
              f"CPU/record {100 * (cpu_on / cpu_off - 1):+.1f} %)")
        print(f"   rounds off: {', '.join(f'{x[0]:,.0f}' for x in off)}; "
              f"on: {', '.join(f'{x[0]:,.0f}' for x in on)}")
    for name, ns in hook_costs().items():
        print(f"hook {name}: {ns:,.0f} ns per call")
    for groups in (100, 1000):
        offsets, seconds, size = scrape_cost(groups)
        print(f"one scrape with {offsets:,} committed offsets: {seconds:.2f} s, "
              f"{size / 1e6:.1f} MB of text")


if __name__ == "__main__":
    main()
