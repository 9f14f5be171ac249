"""Offset commit throughput of two brook source trees side by side, each case run on both one
right after the other, the order alternating each round (noise from the machine hits both
alike):

1. in process: the coordinator runtime alone, commits of 1, 10 and 100 partitions submitted
   as the OffsetCommit handler submits them, to a writer that appends nothing and answers each
   append when a simulated high watermark passes it (moved every WINDOW appends, as replicas
   fetching in rounds move it; "cluster"), or at once ("single"): the coordinator's own CPU per
   commit, no network, no encoding; and "replicated log": the broker's writer on a real
   ``__consumer_offsets`` partition led with one follower whose fetches are simulated (records
   encoded and appended, high watermark waiters and timers), still no network;
2. one broker: bench_coordinator's pipelined commits (raw OffsetCommit v9, 8 in flight per
   connection, 4 groups) and confluent-kafka's synchronous commits;
3. three brokers on ZooKeeper (``__consumer_offsets`` of one partition, so that one broker
   coordinates every group whatever the assignment, and the committed topic replicated three
   times, min.insync.replicas=2): pipelined commits to the coordinator.

    git archive <base commit> src | tar -x -C /tmp/base
    .venv/bin/python benchmarks/commit_side_by_side.py /tmp/base/src src
    # ROUNDS=3 CLUSTER_ROUNDS=2 PARTS=1,2,3 (which of the three parts)

Prints each case's median per tree, every round, and after/before.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_coordinator as bc
from brokers import Broker, brook_broker

PARTITIONS = (1, 10, 100)
CLUSTER_PARTITIONS = (1, 100)
SECONDS = float(os.environ.get("SECONDS", "2"))


# --- 1. the runtime alone, in a process of each tree ---------------------------------------

IN_PROCESS = r'''
import asyncio, json, sys, time
from brook.clock import SYSTEM_CLOCK
from brook.coordinator.common.runtime import CoordinatorRuntime
from brook.coordinator.group.classic import GroupConfig
from brook.coordinator.group.offsets import CommitPartition, CommitTopic, OffsetCommit
from brook.coordinator.group.partitioner import OFFSETS_TOPIC, partition_for
from brook.coordinator.group.shard import CoordinatorShard

WINDOW = 8
COMMITS = int(sys.argv[1])
SINGLE = sys.argv[2] == "single"  # a single broker's writer: committed when appended

class ReplicatedWriter:
    """Appends nothing; each append is answered when the high watermark passes it, which moves
    to the end every WINDOW appends."""
    def __init__(self):
        self.end = 0
        self.waiting = []
    def append(self, partition, epoch, records, now, restoring=False):
        self.end += 1
        return self.end
    def written(self, partition, offset):
        if SINGLE:
            return None
        fut = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        if len(self.waiting) >= WINDOW:
            waiting, self.waiting = self.waiting, []
            for f in waiting:
                f.set_result(None)
        return fut
    def high_watermark(self, partition):
        return self.end
    def log_end_offset(self, partition):
        return self.end
    def read(self, partition):
        return iter(())

async def main():
    out = {}
    for parts in (1, 10, 100):
        rt = CoordinatorRuntime(1, ReplicatedWriter(), SYSTEM_CLOCK,
                                lambda: CoordinatorShard(GroupConfig()), topic=OFFSETS_TOPIC,
                                partitioner=partition_for)
        rt.start()
        await rt.wait_loaded()
        requests = [OffsetCommit(f"g{i % 4}", (CommitTopic("t", tuple(
            CommitPartition(p, i * 1000 + p) for p in range(parts))),)) for i in range(256)]
        n = COMMITS // parts
        for rep in range(2):  # the first warms up
            pending = []
            t0 = time.process_time()
            for i in range(n):
                req = requests[i % 256]
                pending.append(rt.submit(req.group_id, lambda s, now, r=req: s.commit_offsets(r, now)))
                if len(pending) >= 64:
                    await asyncio.gather(*pending)
                    pending = []
            rt.writer.waiting, waiting = [], rt.writer.waiting
            for f in waiting:
                f.set_result(None)
            await asyncio.gather(*pending)
            cpu = time.process_time() - t0
        out[parts] = cpu / n * 1e6
        await rt.stop()
    print(json.dumps(out))

asyncio.run(main())
'''


REPLICATED_LOG = r'''
import asyncio, json, sys, time, tempfile, gc
from brook.broker.broker import Broker
from brook.broker.config import BrokerConfig
from brook.broker.offsets_log import PartitionOffsetsLog
from brook.clock import SYSTEM_CLOCK
from brook.coordinator.common.runtime import CoordinatorRuntime
from brook.coordinator.group.classic import GroupConfig
from brook.coordinator.group.offsets import CommitPartition, CommitTopic, OffsetCommit
from brook.coordinator.group.partitioner import OFFSETS_TOPIC, partition_for
from brook.coordinator.group.shard import CoordinatorShard

WINDOW = 8
# The broker's own writer on a real __consumer_offsets partition led here with one follower,
# which "fetches" (the high watermark moves to the log end) every WINDOW commits.
async def main():
    out = {}
    for parts in (1, 10, 100):
        d = tempfile.mkdtemp()
        broker = Broker(BrokerConfig.from_props({"log.dirs": d, "offsets.topic.num.partitions": "1"}))
        broker.open()
        broker.ensure_offsets_topic()
        p = broker.partition(OFFSETS_TOPIC, 0)
        p.become_leader(0, 1, (0, 1), (0, 1), 0, 0)
        broker.replicas = object()
        broker.min_insync_replicas = lambda t: 1
        writer = PartitionOffsetsLog(broker)
        rt = CoordinatorRuntime(1, writer, SYSTEM_CLOCK, lambda: CoordinatorShard(GroupConfig()),
                                topic=OFFSETS_TOPIC, partitioner=partition_for)
        rt.start(load_all=False)
        rt.load(0, 1)
        await rt.wait_loaded()
        requests = [OffsetCommit(f"g{i % 4}", (CommitTopic("t", tuple(
            CommitPartition(q, i * 1000 + q) for q in range(parts))),)) for i in range(256)]
        n = 40000 // parts
        for rep in range(2):
            pending = []
            t0 = time.process_time()
            for i in range(n):
                req = requests[i % 256]
                pending.append(rt.submit(req.group_id, lambda s, now, r=req: s.commit_offsets(r, now)))
                if len(pending) % WINDOW == 0:
                    p.on_follower_fetch(1, p.log_end_offset, int(time.time() * 1000))
                if len(pending) >= 64:
                    await asyncio.gather(*pending)
                    pending = []
            p.on_follower_fetch(1, p.log_end_offset, int(time.time() * 1000))
            await asyncio.gather(*pending)
            cpu = time.process_time() - t0
        out[parts] = round(cpu / n * 1e6, 1)
        await rt.stop()
        broker.replicas = None
        broker.close()
    print(json.dumps(out))
asyncio.run(main())
'''


def in_process(src: str, mode: str, commits: int = 40_000) -> dict[int, float]:
    """µs of CPU per commit of the runtime of the tree at ``src``, its writes waiting for a
    high watermark (``mode`` "cluster") or committed when appended ("single")."""
    code = REPLICATED_LOG if mode == "replicated log" else IN_PROCESS
    out = subprocess.run([sys.executable, "-c", code, str(commits), mode], check=True,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.path.abspath(src)})
    return {int(k): v for k, v in json.loads(out.stdout).items()}


# --- 2. one broker ---------------------------------------------------------------------------


def start_single(name: str, src: str, work: Path) -> Broker:
    broker = brook_broker(work, {"group.initial.rebalance.delay.ms": "0"}, name=name, src=src)
    broker.start()
    return broker


# --- 3. three brokers ------------------------------------------------------------------------


class Cluster:
    def __init__(self, name: str, src: str, work: Path) -> None:
        from brook.cluster.local_zookeeper import ZooKeeperServer

        self.name = name
        self.work = work / name
        self.work.mkdir()
        self.zk = ZooKeeperServer(self.work / "zookeeper")
        self.brokers: dict[int, Broker] = {}
        self.src = src

    def start(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        self.zk.start()
        for i in (1, 2, 3):
            d = self.work / f"broker{i}"
            d.mkdir()
            b = brook_broker(d, {"broker.id": str(i), "zookeeper.connect": self.zk.connect,
                                 "zookeeper.session.timeout.ms": "6000",
                                 "group.initial.rebalance.delay.ms": "0",
                                 # one coordinator for every group, whatever the assignment
                                 "offsets.topic.num.partitions": "1"})
            b.argv = ["env", f"PYTHONPATH={os.path.abspath(self.src)}", *b.argv]
            b.start()
            self.brokers[i] = b
        bootstrap = ",".join(b.bootstrap for b in self.brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 60
        while len(admin.list_topics(timeout=10).brokers) < 3:
            if time.monotonic() > deadline:
                raise RuntimeError("the brokers did not all join")
            time.sleep(0.2)
        admin.create_topics([NewTopic(bc.COMMIT_TOPIC, 100, 3,
                                      config={"min.insync.replicas": "2"})],
                            operation_timeout=30)[bc.COMMIT_TOPIC].result(60)
        time.sleep(2)

    def coordinator_port(self, group: str) -> int:
        from brook.protocol.messages import make, request_class

        deadline = time.monotonic() + 60
        while True:
            for b in self.brokers.values():
                try:
                    with socket.create_connection(("127.0.0.1", b.port), timeout=10) as s:
                        _, answer = bc._blocking_request(s, make(
                            request_class(10, 4), key_type=0, coordinator_keys=(group,)), 1)
                except OSError:
                    continue
                c = answer.coordinators[0]
                if c.error_code == 0:
                    return self.brokers[c.node_id].port
            if time.monotonic() > deadline:
                raise RuntimeError(f"no coordinator for {group}")
            time.sleep(0.2)

    def cpu(self) -> float:
        return sum(bc.process_schedstat(b.proc.pid)[0] for b in self.brokers.values())

    def stop(self) -> None:
        for b in self.brokers.values():
            try:
                b.stop()
            except Exception:  # noqa: BLE001
                pass
        self.zk.stop()


def cluster_commits(cluster: Cluster, partitions: int, base: int,
                    seconds: float = SECONDS) -> tuple[float, float]:
    """(commits/s, CPU µs of the three brokers per commit): bench_coordinator's pipelined
    commits, each group's connection to its coordinator."""
    from kio.schema.errors import ErrorCode

    pipes: list[bc._Pipe] = []
    sel = selectors.DefaultSelector()
    try:
        for g in bc._committer_groups():
            deadline = time.monotonic() + 60
            while True:  # the offsets topic is made on first use, then loaded
                port = cluster.coordinator_port(g)
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                frame, answer = bc._blocking_request(sock, bc._commit_body(g, partitions, base), 0)
                codes = {p.error_code for t in answer.topics for p in t.partitions}
                if codes == {ErrorCode.none}:
                    break
                sock.close()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{cluster.name}: commits of {g} answered {codes}")
                time.sleep(0.2)
            frames = [bytearray(bc._frame(bc._commit_body(g, partitions, base + i * partitions), 0))
                      for i in range(1, bc.POOL + 1)]
            pipes.append(bc._Pipe(sock, frames, frame[4:]))
            sel.register(sock, selectors.EVENT_READ, pipes[-1])
        cpu0, t0 = cluster.cpu(), time.perf_counter()
        for pipe in pipes:
            pipe.sock.sendall(pipe.next_frames(bc.WINDOW))
        deadline = t0 + seconds
        sending = True
        while True:
            for key, _ in sel.select(timeout=30):
                bc._answers(key.data, sending)
            if sending and time.perf_counter() >= deadline:
                sending = False
            if not sending and all(p.received == p.sent for p in pipes):
                break
        elapsed = time.perf_counter() - t0
        commits = sum(p.received for p in pipes)
        return commits / elapsed, (cluster.cpu() - cpu0) / commits * 1e6
    finally:
        sel.close()
        for pipe in pipes:
            pipe.sock.close()


# --- the runs --------------------------------------------------------------------------------


def _report(title: str, rates: dict, unit: str) -> None:
    print(title)
    for case, d in rates.items():
        b, a = statistics.median(d["before"]), statistics.median(d["after"])
        print(f"  {case}: before {b:,.1f} {unit} {[round(x, 1) for x in d['before']]}, "
              f"after {a:,.1f} {[round(x, 1) for x in d['after']]}, after/before {a / b:.3f}")


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main(before_src: str, after_src: str) -> None:
    rounds = int(os.environ.get("ROUNDS", "3"))
    cluster_rounds = int(os.environ.get("CLUSTER_ROUNDS", "2"))
    parts = {int(p) for p in os.environ.get("PARTS", "1,2,3").split(",")}
    trees = {"before": before_src, "after": after_src}
    work = Path(tempfile.mkdtemp(prefix="commit-side-by-side-"))
    try:
        if 1 in parts:
            cpu: dict = {}
            for r in range(rounds):
                for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                    for mode in ("cluster", "single", "replicated log"):
                        for p, us in in_process(trees[name], mode).items():
                            cpu.setdefault(f"{mode}, {p} partition(s)", {}).setdefault(
                                name, []).append(us)
            _report(f"1. the runtime alone, CPU µs per commit (load {_load()})", cpu, "µs")
        if 2 in parts:
            single = {n: start_single(n, s, work) for n, s in trees.items()}
            rates: dict = {}
            costs: dict = {}
            try:
                for b in single.values():
                    b.create_topic(bc.COMMIT_TOPIC, 100)
                    for p in PARTITIONS:
                        bc.pipelined_commits(b, p, 1000, bc.WARMUP_SECONDS)
                        bc.client_commits(b, p, 1000, bc.WARMUP_SECONDS)
                base = 1000
                for r in range(rounds):
                    for p in PARTITIONS:
                        for kind, fn in (("pipelined", bc.pipelined_commits),
                                         ("confluent-kafka", bc.client_commits)):
                            for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                                base += 10_000_000
                                run = fn(single[name], p, base)
                                case = f"{kind}, {p} partition(s)"
                                rates.setdefault(case, {}).setdefault(name, []).append(
                                    run.commits / run.seconds)
                                costs.setdefault(case, {}).setdefault(name, []).append(
                                    run.broker_cpu * run.seconds / run.commits * 1e6)
                    print(f"single broker round {r} done, load {_load()}", flush=True)
            finally:
                for b in single.values():
                    b.stop()
            _report("2. one broker, commits/s", rates, "commits/s")
            _report("2. one broker, broker CPU µs per commit", costs, "µs")
        if 3 in parts:
            rates = {}
            costs = {}
            base = 1000
            for r in range(cluster_rounds):
                for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                    cluster = Cluster(f"{name}-{r}", trees[name], work)
                    try:
                        cluster.start()
                        for p in CLUSTER_PARTITIONS:
                            cluster_commits(cluster, p, base, bc.WARMUP_SECONDS)
                        for p in CLUSTER_PARTITIONS:
                            base += 10_000_000
                            rate, cost = cluster_commits(cluster, p, base)
                            case = f"pipelined, {p} partition(s)"
                            rates.setdefault(case, {}).setdefault(name, []).append(rate)
                            costs.setdefault(case, {}).setdefault(name, []).append(cost)
                    finally:
                        cluster.stop()
                print(f"cluster round {r} done, load {_load()}", flush=True)
            _report("3. three brokers, commits/s", rates, "commits/s")
            _report("3. three brokers, CPU µs of the three per commit", costs, "µs")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
