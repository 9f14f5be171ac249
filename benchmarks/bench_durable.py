"""Durable acknowledgements (log.flush.before.ack) against page-cache acknowledgements, brook
against itself in the same run.

    .venv/bin/python benchmarks/run_all.py bench_durable
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_broker import PRODUCER_CONFIG, _payloads, produce  # noqa: E402
from bench_coordinator import COMMIT_TOPIC, pipelined_commits  # noqa: E402
from brokers import brook_broker  # noqa: E402

COMMAND = ".venv/bin/python benchmarks/run_all.py bench_durable"
TITLE = "Durable acknowledgements (fsync before the answer, shared) against page cache"
ROUNDS = 3
COMMIT_SECONDS = 2.0
PRODUCE_RECORDS = 200_000
PRODUCE_SIZE = 1024
PARTITIONS = 4
DESCRIPTION = f"""\
brook brokers in the same run, one with the default flush policy (answers from the page
cache, as Kafka acknowledges) and one with `log.flush.before.ack=true` (produce with acks 1 or
all and every group coordinator write answered only once fsynced; the fsyncs are shared by all
requests waiting, across partitions and connections, and a connection goes on with its
pipelined requests meanwhile). All on the same disk of this machine (`{tempfile.gettempdir()}`).

- *Offset commits*: bench_coordinator's pipelined client: 4 connections, each its own group,
  8 OffsetCommit requests of 1 partition in flight per connection, {COMMIT_SECONDS:.0f} s a round.
- *Produce*: confluent-kafka, acks=all, {PRODUCE_RECORDS:,} records of {PRODUCE_SIZE} bytes to a
  topic of {PARTITIONS} partitions, bench_broker's producer settings.
- Median of {ROUNDS} rounds, the brokers in turn (a different one first each round), each measurement after an `os.sync()`
  (the last one's write-back must not compete with it). The ratio is durable / page cache
  (the issue's goal: at least 0.7). The durable broker runs with the default
  `log.flush.before.ack.syncfs=true`; a third broker with it off (an fsync a file) is
  measured alongside.
"""


def _fsync_latency_ms(directory: str) -> float:
    """The median time of a 4 KiB write and fsync in ``directory``: what one round costs."""
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    times = []
    try:
        for _ in range(50):
            os.write(fd, b"x" * 4096)
            t = time.perf_counter()
            os.fsync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        os.unlink(path)
    return sorted(times)[len(times) // 2] * 1000


def _dir(work: Path, name: str) -> Path:
    path = work / name.replace(" ", "-").replace(",", "")
    path.mkdir()
    return path


def run() -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="bench-durable-"))
    fsync_ms = _fsync_latency_ms(str(work))
    brokers = {name: brook_broker(_dir(work, name), settings) for name, settings in (
        ("page cache", {}),
        ("durable", {"log.flush.before.ack": "true"}),
        ("durable, fsync a file", {"log.flush.before.ack": "true",
                                   "log.flush.before.ack.syncfs": "false"}))}
    try:
        for b in brokers.values():
            b.start()
            b.create_topic(COMMIT_TOPIC, 100)
            b.create_topic("produce", PARTITIONS)
        payloads = _payloads(PRODUCE_SIZE, PRODUCE_RECORDS)
        commits: dict[str, list[float]] = {name: [] for name in brokers}
        produced: dict[str, list[float]] = {name: [] for name in brokers}
        for b in brokers.values():  # warm-up
            pipelined_commits(b, 1, 1_000, 0.5)
            produce(b, "produce", PARTITIONS, payloads[:20_000], "all", PRODUCER_CONFIG)
        base = 10_000
        order = list(brokers.items())
        for r in range(ROUNDS):
            for name, b in order[r % len(order):] + order[:r % len(order)]:
                os.sync()  # no write-back of the last measurement's produce left to compete
                run_ = pipelined_commits(b, 1, base, COMMIT_SECONDS)
                base += run_.commits + 100
                commits[name].append(run_.commits / run_.seconds)
                os.sync()
                p = produce(b, "produce", PARTITIONS, payloads, "all", PRODUCER_CONFIG)
                produced[name].append(PRODUCE_RECORDS * PRODUCE_SIZE / p.seconds / 1e6)
    finally:
        for b in brokers.values():
            b.stop()
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()[0]

    def med(xs: list[float]) -> float:
        return sorted(xs)[len(xs) // 2]

    def rounds(figures: dict[str, list[float]], digits: int) -> str:
        return "; ".join(f"{name} {[round(x, digits) if digits else round(x) for x in xs]}"
                         for name, xs in figures.items())

    notes = (f"rounds: {rounds(commits, 0)}; one fsync of 4 KiB takes {fsync_ms:.2f} ms here "
             f"(median); load average {load:.1f} at the end")
    produce_notes = f"rounds: {rounds(produced, 1)}; load average {load:.1f}"
    rows = []
    for name, label in (("durable", ""), ("durable, fsync a file", ", log.flush.before.ack.syncfs=false")):
        rows += [
            dict(name=f"offset commits, pipelined, 1 partition{label}", value=med(commits[name]),
                 unit="commits/s", peer="page cache", peer_value=med(commits["page cache"]),
                 command=COMMAND, notes=notes),
            dict(name=f"produce acks=all, {PRODUCE_SIZE} B records{label}", value=med(produced[name]),
                 unit="MB/s", peer="page cache", peer_value=med(produced["page cache"]),
                 command=COMMAND, notes=produce_notes),
        ]
    return rows
