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
Two brook brokers in the same run, one with the default flush policy (answers from the page
cache, as Kafka acknowledges) and one with `log.flush.before.ack=true` (produce with acks 1 or
all and every group coordinator write answered only once fsynced; the fsyncs are shared by all
requests waiting, across partitions and connections, and a connection goes on with its
pipelined requests meanwhile). Both on the same disk of this machine (`{tempfile.gettempdir()}`).

- *Offset commits*: bench_coordinator's pipelined client: 4 connections, each its own group,
  8 OffsetCommit requests of 1 partition in flight per connection, {COMMIT_SECONDS:.0f} s a round.
- *Produce*: confluent-kafka, acks=all, {PRODUCE_RECORDS:,} records of {PRODUCE_SIZE} bytes to a
  topic of {PARTITIONS} partitions, bench_broker's producer settings.
- Median of {ROUNDS} rounds, alternating the brokers. The ratio is durable / page cache (the
  issue's goal: at least 0.7).
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


def run() -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="bench-durable-"))
    plain_dir, durable_dir = work / "plain", work / "durable"
    plain_dir.mkdir()
    durable_dir.mkdir()
    fsync_ms = _fsync_latency_ms(str(work))
    plain = brook_broker(plain_dir)
    durable = brook_broker(durable_dir, {"log.flush.before.ack": "true"})
    brokers = (plain, durable)
    try:
        for b in brokers:
            b.start()
            b.create_topic(COMMIT_TOPIC, 100)
            b.create_topic("produce", PARTITIONS)
        payloads = _payloads(PRODUCE_SIZE, PRODUCE_RECORDS)
        commits: dict[str, list[float]] = {"plain": [], "durable": []}
        produced: dict[str, list[float]] = {"plain": [], "durable": []}
        for b in brokers:  # warm-up
            pipelined_commits(b, 1, 1_000, 0.5)
            produce(b, "produce", PARTITIONS, payloads[:20_000], "all", PRODUCER_CONFIG)
        base = 10_000
        for r in range(ROUNDS):
            for name, b in (("plain", plain), ("durable", durable))[:: 1 if r % 2 == 0 else -1]:
                run_ = pipelined_commits(b, 1, base, COMMIT_SECONDS)
                base += run_.commits + 100
                commits[name].append(run_.commits / run_.seconds)
                p = produce(b, "produce", PARTITIONS, payloads, "all", PRODUCER_CONFIG)
                produced[name].append(PRODUCE_RECORDS * PRODUCE_SIZE / p.seconds / 1e6)
    finally:
        for b in brokers:
            b.stop()
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()[0]

    def med(xs: list[float]) -> float:
        return sorted(xs)[len(xs) // 2]

    notes = (f"rounds: durable {[round(x) for x in commits['durable']]}, page cache "
             f"{[round(x) for x in commits['plain']]}; one fsync of 4 KiB takes {fsync_ms:.2f} ms "
             f"here (median); load average {load:.1f} at the end")
    produce_notes = (f"rounds: durable {[round(x, 1) for x in produced['durable']]}, page cache "
                     f"{[round(x, 1) for x in produced['plain']]}; load average {load:.1f}")
    return [
        dict(name="offset commits, pipelined, 1 partition", value=med(commits["durable"]),
             unit="commits/s", peer="page cache", peer_value=med(commits["plain"]),
             command=COMMAND, notes=notes),
        dict(name=f"produce acks=all, {PRODUCE_SIZE} B records", value=med(produced["durable"]),
             unit="MB/s", peer="page cache", peer_value=med(produced["plain"]),
             command=COMMAND, notes=produce_notes),
    ]
