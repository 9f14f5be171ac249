"""A member joining a group of N on 900 partitions: the classic protocol (librdkafka's eager
`range`, every member stops) against KIP-848's (`group.protocol=consumer`, `uniform`), same
broker, same run.

    .venv/bin/python benchmarks/run_all.py bench_consumer_protocol
    BENCH_MEMBERS=10,50 .venv/bin/python benchmarks/run_all.py bench_consumer_protocol

Measured from the consumers' own rebalance callbacks (confluent-kafka, one process, a thread
each): *join* is from the newcomer's subscribe (its first JoinGroup or heartbeat) until the
members' assignments cover every partition exactly once with the newcomer holding its share;
*pause* is the longest time one of the existing members held no partition during the change
(the classic eager protocol revokes everything from everyone; the new protocol only revokes
what moves).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from brokers import WORK_ROOT, brook_broker  # noqa: E402

TITLE = "Consumer groups: KIP-848 against the classic protocol (a member joins)"
PARTITIONS = 900
MEMBERS = tuple(int(n) for n in os.environ.get("BENCH_MEMBERS", "10").split(","))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
DESCRIPTION = f"""\
A group of N members on a {PARTITIONS}-partition topic, one more joins; {ROUNDS} rounds each
(median). *join*: the newcomer's subscribe until every partition is owned exactly once and the
newcomer has its share, as the consumers' rebalance callbacks report it. *pause*: the longest
time an existing member owned nothing during that change. Classic: librdkafka's eager `range`
(`session.timeout.ms` 10 s, `heartbeat.interval.ms` 500 ms); KIP-848: `uniform` with
`group.consumer.heartbeat.interval.ms` 500 ms. Both columns are brook: *brook* is the
KIP-848 protocol, the peer the classic one. One broker; the consumers are threads of one
process on the same machine. Join times are dominated by the heartbeat interval (a member
learns of the change at its next heartbeat) in both protocols; what differs is that classic
members all give up everything until the new generation's assignment.
"""


class Member:
    """A consumer thread that keeps polling and records its assignment as it changes."""

    def __init__(self, bootstrap: str, group: str, name: str, protocol: str,
                 owners: dict, lock: threading.Lock) -> None:
        self.name, self.owned, self.empty_since = name, set(), None
        self.longest_empty = 0.0
        self.stop = threading.Event()
        self.lock, self.owners = lock, owners
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                "enable.auto.commit": False, "auto.offset.reset": "latest"}
        if protocol == "consumer":
            conf.update({"group.protocol": "consumer", "group.remote.assignor": "uniform"})
        else:
            conf.update({"partition.assignment.strategy": "range",
                         "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500})
        self.conf = conf
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _changed(self, now: float) -> None:
        if self.owned:
            if self.empty_since is not None:
                self.longest_empty = max(self.longest_empty, now - self.empty_since)
                self.empty_since = None
        elif self.empty_since is None:
            self.empty_since = now

    def _run(self) -> None:
        from confluent_kafka import Consumer

        c = Consumer(self.conf)

        def assigned(consumer, partitions):
            with self.lock:
                self.owned |= {tp.partition for tp in partitions}
                self._changed(time.monotonic())

        def revoked(consumer, partitions):
            with self.lock:
                self.owned -= {tp.partition for tp in partitions}
                self._changed(time.monotonic())

        c.subscribe(["bench-848"], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
        try:
            while not self.stop.is_set():
                c.poll(0.05)
        finally:
            c.close()

    def reset_pause(self) -> None:
        with self.lock:
            self.longest_empty = 0.0
            self.empty_since = None if self.owned else time.monotonic()

    def close(self) -> None:
        self.stop.set()


def _settled(members: list[Member], lock: threading.Lock) -> bool:
    with lock:
        owned = [m.owned for m in members]
        if any(not o for o in owned):
            return False
        return sum(map(len, owned)) == PARTITIONS and len(set().union(*owned)) == PARTITIONS


def _wait(condition, timeout: float) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise RuntimeError("the group did not settle")
        time.sleep(0.005)
    return time.monotonic() - start


def one_join(bootstrap: str, protocol: str, n: int, round_: int) -> tuple[float, float]:
    lock = threading.Lock()
    group = f"bench-{protocol}-{n}-{round_}-{time.time_ns()}"
    members = [Member(bootstrap, group, f"m{i}", protocol, {}, lock) for i in range(n)]
    try:
        _wait(lambda: _settled(members, lock), 120)
        time.sleep(1)  # steady
        for m in members:
            m.reset_pause()
        newcomer = Member(bootstrap, group, "new", protocol, {}, lock)
        start = newcomer.started
        everyone = [*members, newcomer]
        _wait(lambda: _settled(everyone, lock), 120)
        join = time.monotonic() - start
        with lock:
            now = time.monotonic()
            pause = max(max(m.longest_empty, (now - m.empty_since) if m.empty_since else 0.0)
                        for m in members)
        newcomer.close()
        return join, pause
    finally:
        for m in members:
            m.close()
        for m in members:
            m.thread.join(30)


def run() -> list[dict]:
    WORK_ROOT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=WORK_ROOT))
    broker = brook_broker(work, {"group.initial.rebalance.delay.ms": "0",
                                 "group.consumer.heartbeat.interval.ms": "500",
                                 "offsets.topic.num.partitions": "10"})
    broker.start()
    results = []
    try:
        broker.create_topic("bench-848", PARTITIONS)
        for n in MEMBERS:
            figures = {}
            for protocol in ("classic", "consumer"):
                runs = [one_join(broker.bootstrap, protocol, n, r) for r in range(ROUNDS)]
                figures[protocol] = (statistics.median(j for j, _ in runs) * 1000,
                                     statistics.median(p for _, p in runs) * 1000)
            for i, what in enumerate(("join", "pause of the existing members")):
                results.append(dict(
                    name=f"{what}, {n} + 1 members", value=round(figures["consumer"][i]),
                    unit="ms", peer="classic (eager range)",
                    peer_value=round(figures["classic"][i]), higher_is_better=False,
                    command=f"BENCH_MEMBERS={n} .venv/bin/python benchmarks/run_all.py "
                            "bench_consumer_protocol",
                    notes=f"median of {ROUNDS}"))
    finally:
        broker.stop()
    return results


if __name__ == "__main__":
    for r in run():
        print(r)
