"""Produce throughput of two brook source trees side by side, with bench_broker's produce():
one broker process per tree, the same cases run on both one right after the other, the order
alternating each round (noise from the machine hits both alike).

    git archive <base commit> src | tar -x -C /tmp/base
    .venv/bin/python benchmarks/produce_side_by_side.py /tmp/base/src src    # ROUNDS=3, COMPRESSED=1

Prints each case's median records/s per tree, every round, and after/before; and the broker's
median CPU time a record, before/after (what throughput would be for a broker that is the
bottleneck: steadier than records/s when other work shares the machine).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

import bench_broker as bb
from brokers import Broker, brook_broker

CASES = [(100, 1), (100, 8), (1024, 1), (1024, 8)]  # value size, partitions (acks=1)
COMPRESSED_CASES = [(1024, 1, "zstd"), (1024, 1, "gzip")]


def start(name: str, src: str, work: Path) -> Broker:
    broker = brook_broker(work, {"group.initial.rebalance.delay.ms": "0"}, name=name, src=src)
    broker.start()
    return broker


def main(before_src: str, after_src: str) -> None:
    work = Path(tempfile.mkdtemp(prefix="side-by-side-"))
    before, after = start("before", before_src, work), start("after", after_src, work)
    rounds = int(os.environ.get("ROUNDS", "3"))
    cases = [(s, p, "none") for s, p in CASES]
    if os.environ.get("COMPRESSED"):
        cases += COMPRESSED_CASES
    payloads = {s: bb._payloads(s, bb.POOL) for s in (100, 1024)}
    rates: dict[tuple, dict[str, list[float]]] = {}
    cpu: dict[tuple, dict[str, list[float]]] = {}
    try:
        for b in (before, after):
            bb.produce(b, bb._topic(b, "warmup", 1), 1, payloads[100][:bb.WARMUP_RECORDS], "1")
        for r in range(rounds):
            for size, parts, codec in cases:
                n = bb.RECORDS[size] if codec == "none" else bb.RECORDS[size] // 4
                values = (payloads[size] * (n // len(payloads[size]) + 1))[:n]
                for b in ((before, after) if r % 2 == 0 else (after, before)):
                    topic = bb._topic(b, f"p{size}-{parts}-{codec}-{r}", parts)
                    bb.PRODUCER_CONFIG["compression.type"] = codec
                    try:
                        run = bb.produce(b, topic, parts, values, "1")
                    finally:
                        bb.PRODUCER_CONFIG["compression.type"] = "none"
                    rates.setdefault((size, parts, codec), {}).setdefault(b.name, []).append(n / run.seconds)
                    # the broker's CPU time a record: steadier than the rate on a busy machine
                    cpu.setdefault((size, parts, codec), {}).setdefault(b.name, []).append(
                        run.broker_cpu * run.seconds / n * 1e6)
                    b.delete_topics()
            with open("/proc/loadavg") as f:
                print(f"round {r} done, load average {f.read().split()[:3]}", flush=True)
    finally:
        before.stop()
        after.stop()
    for (size, parts, codec), d in rates.items():
        b, a = statistics.median(d["before"]), statistics.median(d["after"])
        print(f"{size} B, {parts} partition(s), {codec}: before {b:,.0f} records/s "
              f"{[round(x) for x in d['before']]}, after {a:,.0f} {[round(x) for x in d['after']]}, "
              f"after/before {a / b:.2f}")
        cb, ca = statistics.median(cpu[size, parts, codec]["before"]), \
            statistics.median(cpu[size, parts, codec]["after"])
        print(f"    broker CPU a record: before {cb:.2f} us, after {ca:.2f} us, "
              f"before/after {cb / ca:.2f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
