"""Transactions against the idempotent producer, on one brook broker (and on Tansu, the peer,
in the same run, where it serves transactions):

1. produce: confluent-kafka with acks=all, 100-byte values on one partition, as an idempotent
   producer and as a transactional one committing every 10,000 and every 100 records;
   records per second, and the transactional rates over the idempotent one (goal: at least
   0.8x for transactions of 10,000 records);
2. EndTxn: the time `commit_transaction()` takes once the transaction's records are
   acknowledged (flushed first), so what it waits for is EndTxn: the PrepareCommit record
   replicated, the markers written, the answer; p50 and p99 over transactions of 100 records;
3. consume: confluent-kafka reading the transactions' records from the start with
   read_committed and with read_uncommitted; records per second and the ratio (goal: at least
   0.95x).

Each case runs on a fresh topic; the rounds alternate the order of the producers, and the
medians are printed.

    .venv/bin/python benchmarks/bench_transactions.py          # RECORDS=200000 ROUNDS=3
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer

from brokers import WORK_ROOT, brook_broker, tansu_broker

RECORDS = int(os.environ.get("RECORDS", "200000"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
END_TXNS = int(os.environ.get("END_TXNS", "300"))
VALUE = b"x" * 100
PRODUCER = {"acks": "all", "linger.ms": 5, "batch.size": 262144, "enable.idempotence": True,
            "queue.buffering.max.messages": 1_000_000}


def produce(bootstrap: str, topic: str, per_txn: int | None) -> float:
    """Records per second of RECORDS records, in transactions of `per_txn` (None: idempotent)."""
    conf = {"bootstrap.servers": bootstrap, **PRODUCER}
    if per_txn:
        conf["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    p = Producer(conf)
    if per_txn:
        p.init_transactions(30)
    p.list_topics(topic, timeout=10)  # connected before the clock starts, as init_transactions is
    failed = []

    def report(err, _msg):
        if err is not None:
            failed.append(err)

    started = time.perf_counter()
    for start in range(0, RECORDS, per_txn or RECORDS):
        if per_txn:
            p.begin_transaction()
        for _ in range(min(per_txn or RECORDS, RECORDS - start)):
            while True:
                try:
                    p.produce(topic, VALUE, partition=0, on_delivery=report)
                    break
                except BufferError:
                    p.poll(0.01)
        if per_txn:
            p.commit_transaction(60)
    p.flush(60)
    elapsed = time.perf_counter() - started
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed, e.g. {failed[0]}")
    return RECORDS / elapsed


def end_txn_latencies(bootstrap: str, topic: str) -> list[float]:
    """Seconds of commit_transaction() after the transaction's 100 records were flushed."""
    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER,
                  "transactional.id": f"bench-end-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(30)
    out = []
    for _ in range(END_TXNS):
        p.begin_transaction()
        for _ in range(100):
            p.produce(topic, VALUE, partition=0)
        p.flush(30)
        started = time.perf_counter()
        p.commit_transaction(30)
        out.append(time.perf_counter() - started)
    return out


def consume(bootstrap: str, topic: str, isolation: str, expected: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.max.bytes": 52_428_800})
    c.subscribe([topic])
    got, started = 0, None
    deadline = time.monotonic() + 120
    while got < expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{isolation}: read {got} of {expected} records in 120 s")
        for m in c.consume(10_000, timeout=1.0):
            if m.error():
                if m.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(str(m.error()))
                continue
            if started is None:
                started = time.perf_counter()
            got += 1
    elapsed = time.perf_counter() - started
    c.close()
    return got / elapsed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    WORK_ROOT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=WORK_ROOT))
    brokers = [brook_broker(work), tansu_broker(work)]
    cases = (("idempotent", None), ("txn 10000", 10_000), ("txn 100", 100))
    rates: dict[str, dict[str, list[float]]] = {b.name: {c: [] for c, _ in cases}
                                                 for b in brokers}
    reads: dict[str, dict[str, list[float]]] = {b.name: {"read_committed": [],
                                                         "read_uncommitted": []}
                                                for b in brokers}
    ends: dict[str, list[float]] = {b.name: [] for b in brokers}
    broken: dict[str, str] = {}
    try:
        for b in brokers:
            b.start()
            b.create_topic("warmup", 1)  # the first produce to a fresh broker is slower
            for per_txn in (None, 10_000):
                produce(b.bootstrap, "warmup", per_txn)
            b.delete_topics()
        for r in range(ROUNDS):
            for b in brokers:
                if b.name in broken:
                    continue
                order = cases if r % 2 == 0 else tuple(reversed(cases))
                try:
                    for name, per_txn in order:
                        topic = f"{name.replace(' ', '-')}-{r}"
                        b.create_topic(topic, 1)
                        rates[b.name][name].append(produce(b.bootstrap, topic, per_txn))
                        if per_txn == 10_000:
                            isolations = ["read_committed", "read_uncommitted"]
                            if r % 2:
                                isolations.reverse()
                            for isolation in isolations:
                                reads[b.name][isolation].append(
                                    consume(b.bootstrap, topic, isolation, RECORDS))
                        b.delete_topics()
                    if r == 0:
                        topic = "end-txn"
                        b.create_topic(topic, 1)
                        ends[b.name] = end_txn_latencies(b.bootstrap, topic)
                        b.delete_topics()
                except Exception as exc:  # noqa: BLE001 - a peer without transactions
                    broken[b.name] = f"{type(exc).__name__}: {exc}"
                b.check_alive()
            with open("/proc/loadavg") as f:
                print(f"round {r} done, load average {f.read().split()[:3]}", flush=True)
    finally:
        for b in brokers:
            b.stop()

    print(f"\n{RECORDS} records of 100 B, acks=all, one partition, {ROUNDS} rounds (medians)")
    for b in brokers:
        if b.name in broken:
            print(f"\n{b.name}: not measured ({broken[b.name]})")
            continue
        med = {c: statistics.median(v) for c, v in rates[b.name].items()}
        print(f"\n{b.name}")
        for name, _ in cases:
            print(f"  produce {name:<12} {med[name]:>10,.0f} records/s  "
                  f"{med[name] / med['idempotent']:.2f}x idempotent")
        rc = statistics.median(reads[b.name]["read_committed"])
        ru = statistics.median(reads[b.name]["read_uncommitted"])
        print(f"  consume read_committed   {rc:>10,.0f} records/s  {rc / ru:.2f}x "
              f"read_uncommitted ({ru:,.0f})")
        e = ends[b.name]
        print(f"  EndTxn (commit_transaction after flush), {len(e)} transactions: "
              f"p50 {percentile(e, 0.5) * 1000:.2f} ms, p99 {percentile(e, 0.99) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
