"""Group coordinator: offset commits and rebalances against Tansu, the offsets cache's memory and
the rate of loading ``__consumer_offsets``.

Run alone with `.venv/bin/python benchmarks/run_all.py bench_coordinator`, or directly
(`.venv/bin/python benchmarks/bench_coordinator.py`) to print the figures without touching docs.
"""

from __future__ import annotations

import asyncio
import datetime
import gc
import importlib.util
import io
import os
import random
import selectors
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import uvloop
from confluent_kafka import Consumer, TopicPartition
from kio.schema.consumer_protocol_assignment.v0.data import (
    ConsumerProtocolAssignment,
    TopicPartition as AssignedPartitions,
)
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from brokers import (
    WORK_ROOT,
    Broker,
    brook_broker,
    own_cpu_seconds,
    process_schedstat,
    tansu_broker,
)
from brook.broker.broker import Broker as BrookBroker
from brook.broker.config import BrokerConfig
from brook.broker.offsets_log import PartitionOffsetsLog
from brook.coordinator.common.result import CoordinatorRecord
from brook.coordinator.group.offsets import OffsetsManager
from brook.coordinator.group.partitioner import OFFSETS_TOPIC, partition_for
from brook.coordinator.group.schemas import (
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from brook.protocol.messages import make, request_class, response_class

COMMAND = ".venv/bin/python benchmarks/run_all.py bench_coordinator"

# --- offset commits
COMMIT_PARTITIONS = (1, 10, 100)  # partitions per commit
COMMITTERS = 4  # concurrent committing consumers, each its own group
COMMIT_SECONDS = 2.0  # per run
COMMIT_ROUNDS = 3
WARMUP_SECONDS = 0.5
WINDOW = 8  # requests in flight per connection of the pipelined client
POOL = 64  # distinct pre-encoded requests per connection (offsets differ), cycled through
COMMIT_TOPIC = "commits"
COMMIT_VERSION = 9  # OffsetCommit version librdkafka 2.16 sends; both brokers take 0-9

# --- rebalances
GROUP_SIZES = (1, 2, 5, 10, 20, 50)
REBALANCE_ROUNDS = 5
TANSU_GROUP_SIZES = (1, 10, 50)  # Tansu holds every join for seconds: a few sizes show it
TANSU_REBALANCE_ROUNDS = 1
TANSU_REBALANCE_BUDGET = 60.0  # seconds
REBALANCE_TIMEOUT = 30.0  # seconds: a round not Stable by then fails (or is reported, Tansu)
SESSION_TIMEOUT_MS = 10_000  # the Java consumer's default before Kafka 3.0
IDLE_HEARTBEAT = 1.0  # seconds between heartbeats of a member of a Stable group
ASSIGNED_TOPIC = "rebalance-topic"
ASSIGNED_PARTITIONS = 100
JOIN_VERSION, SYNC_VERSION, HEARTBEAT_VERSION, LEAVE_VERSION, DESCRIBE_VERSION = 9, 5, 4, 5, 5

# --- the offsets cache and loading
CACHE_OFFSETS = 1_000_000
TARGET_BYTES_PER_OFFSET = 64
LOAD_RECORDS = 1_000_000
KAFKA_LOAD_RATE = 4.4e6  # records/s: Apache Kafka's newest coordinator, the stated goal
SEED = 20_240_917
NOW_MS = 1_760_000_000_000

OFFSET_COMMIT, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 11, 12, 13, 14
DESCRIBE_GROUPS = 15

TITLE = "Group coordinator (offset commits, rebalances, offsets cache, loading)"
DESCRIPTION = f"""\
brook's group coordinator, side by side with [Tansu](https://github.com/tansu-io/tansu) 0.6
where Tansu can be measured the same way. Both brokers are subprocesses on free ports of
127.0.0.1, started as in the broker benchmark: brook (`python -m brook broker`, its log under
`bench-data/`, Kafka's defaults except `group.initial.rebalance.delay.ms=0`; 50 partitions of
`__consumer_offsets`, written to the page cache without fsync) and Tansu with
`--storage-engine memory://tansu/` (commits and group state kept in memory, nothing written).
The clients run in the benchmark's process on the same 2-core machine.

- **Offset commits**: {COMMITTERS} committing consumers at once, each its own group: *simple*
  consumers (generation -1, no member id, what `Consumer.commit(offsets=...)` sends without
  `subscribe`), on four different partitions of brook's `__consumer_offsets`. Separate groups
  are how commit load reaches a coordinator (each group commits its own offsets); brook serves
  every partition of `__consumer_offsets` from one event loop in one process either way. A
  commit carries 1, 10 or 100 partitions of a 100-partition topic, with growing offsets. Two
  clients, {COMMIT_SECONDS:.0f} s per run: *confluent-kafka* (one `Consumer` and thread per
  group, `commit(offsets=[...], asynchronous=False)`, every returned partition checked for an
  error: one commit in flight per consumer, so round trips bound it) and a *pipelined*
  raw-protocol client that shows what the broker itself takes (a connection per group with
  {WINDOW} OffsetCommit v{COMMIT_VERSION} requests in flight, the version librdkafka sends;
  {POOL} distinct requests per connection encoded beforehand and cycled; every answer checked:
  correlation ids in order, bytes equal to a decoded answer without errors). A warm-up, then
  {COMMIT_ROUNDS} rounds; in a round each case runs on both brokers one right after the other,
  alternating which goes first. The table gives the median round; the notes list every round
  and, per second of run (100 % is one core; threads summed), the time the broker ran on a
  CPU, the time it waited for one while runnable, and the client's CPU. *Broker CPU time per
  commit* divides the broker's CPU time by the commits answered: the steadier figure on this
  shared machine, and 1 s divided by it is what one core of its own would serve. brook serves
  from one event-loop thread, Tansu from threads on both cores; with a dozen runnable threads
  of other work on the 2 cores, each thread gets a share, so commits/s say as much about the
  share each broker got (its waiting time) as about its speed. A broker kept always runnable
  by the pipelined client gets a smaller share than one woken by each round trip of the
  confluent-kafka client, which is why brook's pipelined commits/s can come out below its
  confluent-kafka figure.
- **Rebalance time**: a raw-protocol member driver (asyncio on uvloop in the benchmark's
  process, one connection per member, JoinGroup v{JOIN_VERSION}, SyncGroup v{SYNC_VERSION},
  Heartbeat v{HEARTBEAT_VERSION}; protocol type `consumer`, session and rebalance timeouts of
  {SESSION_TIMEOUT_MS / 1000:.0f} s, the leader computing a range assignment of
  {ASSIGNED_PARTITIONS} partitions). A fresh group of N-1 members is formed and Stable
  (untimed), then an Nth member joins: timed from its first JoinGroup (answered
  MEMBER_ID_REQUIRED, KIP-394) until each of the N members holds its SyncGroup answer for the new
  generation and the leader's assignment names all N; DescribeGroups then checks that the group
  is Stable with N members. When the new member sends the JoinGroup that starts the rebalance,
  the existing members send heartbeats back to back until one is answered
  REBALANCE_IN_PROGRESS, and then rejoin at once: the figure holds no heartbeat interval. It is
  the coordinator's work (those heartbeats, N JoinGroups, the GroupMetadata append, N SyncGroups)
  plus the driver's, and waiting for a core; the notes give the CPU both used, and any answer
  a plain rebalance does not give (a member found expired or fenced, which costs a rejoin and
  up to a rebalance timeout). A real client
  adds up to one `heartbeat.interval.ms` (3 s by default) before existing members learn of a
  rebalance. Outside the timed window members heartbeat every {IDLE_HEARTBEAT:.0f} s.
  {REBALANCE_ROUNDS} rounds per size on brook, the median shown. Tansu does not complete a join
  phase when the members have rejoined: its coordinator holds each successful JoinGroup,
  looking again once a second, until half the member's session timeout has passed (the join
  loop of its `coordinator/group/administrator.rs`; with a 30 s session timeout a lone member's
  JoinGroup took 15 s), so its rebalances take 5-7 s here whatever the group size: a design
  choice, not a measure of its speed, so its figures (one round for each of
  {", ".join(map(str, TANSU_GROUP_SIZES))} members, within a {TANSU_REBALANCE_BUDGET:.0f} s
  budget) are in the notes and not compared in the table.
- **Offsets cache memory**: `tracemalloc` around filling one `OffsetsManager` through the
  replay path as loading fills it: {CACHE_OFFSETS:,} offset commit records encoded in the
  `__consumer_offsets` formats beforehand, then traced: `decode_key`, `decode_value`,
  `OffsetsManager.replay`, `loaded()`. Tens of thousands of groups with ids and topic names
  shaped like production ones (`billing-service.orders-projector-…`,
  `prod.payments.transactions.v2`, `connect-…-s3-sink`), 1-4 topics per group from a pool of
  300, 6-64 partitions a topic, 1 % of commits with metadata, varied offsets, leader epochs and
  commit timestamps. All the cache holds counts: group ids, interned topic names, containers,
  rows. The peer is the target of the offset storage requirements (lower is better).
- **Load rate**: records replayed per second when a partition of `__consumer_offsets` holding
  {LOAD_RECORDS:,} records is loaded, per second of CPU time of the loading process: loading is
  one thread's work, so this is what a core of its own gives, and the figure to hold against
  Apache Kafka's (the goal stated in the project's issue, not measured here). The loader's own
  benchmark, `benchmarks/load_rate.py`, measures it when present; without it this module
  writes a partition through a brook `Broker` and times its `GroupRuntime` loading it, per
  wall-clock second too. The row's notes say which ran.

Noise: the machine may be shared with other work (test runs, brokers, Spark's JVM) while these
figures are taken; each part's notes give the load average when it started. Runs made at load
averages of 11 to 20 differed up to 8x in one case's median commits/s (brook, pipelined, 1
partition: 468 to 3,680) and up to 2x in broker CPU time per commit (CPU time too grows when
other work shares the cores and their caches); a 50-member rebalance's median ranged from 93 to
280 ms. The load rate per CPU second varied by under 10 %; bytes per offset do not depend on
the load. Read the CPU-time figures first, ratios of throughputs within about +-25 % of 1 as a
tie, and every time and rate as what the machine gave at that load.
"""


# ---------------------------------------------------------------- the wire


_SIZE = struct.Struct(">i")


def _frame(body, correlation_id: int, client_id: str = "bench") -> bytes:
    """A request frame (size prefix, header, body) for a kio request entity."""
    cls = type(body)
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_cls)(buf, make(header_cls, request_api_key=cls.__api_key__,
                                        request_api_version=cls.__version__,
                                        correlation_id=correlation_id, client_id=client_id))
    entity_writer(cls)(buf, body)
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    del out
    return buf.getvalue()


def _decode(frame: bytes, api_key: int, version: int):
    """(correlation id, body) of a response frame without its size prefix."""
    cls = response_class(api_key, version)
    header, offset = entity_reader(cls.__header_schema__)(frame, 0)
    body, _ = entity_reader(cls)(frame, offset)
    return header.correlation_id, body


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        out += chunk
    return bytes(out)


def _blocking_request(sock: socket.socket, body, correlation_id: int) -> tuple[bytes, object]:
    """Send one request and read its answer: (the answer's frame, decoded body)."""
    sock.sendall(_frame(body, correlation_id))
    size = _SIZE.unpack(_recv_exactly(sock, 4))[0]
    frame = _recv_exactly(sock, size)
    corr, answer = _decode(frame, type(body).__api_key__, type(body).__version__)
    if corr != correlation_id:
        raise RuntimeError(f"answer to {corr}, expected {correlation_id}")
    return frame, answer


class Wire:
    """One asyncio connection, one request at a time: kio entities in and out."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation_id = 0

    @classmethod
    async def open(cls, port: int) -> Wire:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    async def request(self, body):
        self.correlation_id += 1
        self.writer.write(_frame(body, self.correlation_id))
        size = _SIZE.unpack(await self.reader.readexactly(4))[0]
        frame = await self.reader.readexactly(size)
        corr, answer = _decode(frame, type(body).__api_key__, type(body).__version__)
        if corr != self.correlation_id:
            raise RuntimeError(f"answer to {corr}, expected {self.correlation_id}")
        return answer

    def close(self) -> None:
        self.writer.close()


# ---------------------------------------------------------------- 1. offset commits


def _committer_groups() -> list[str]:
    """COMMITTERS group ids on different partitions of a 50-partition __consumer_offsets."""
    groups, seen = [], set()
    i = 0
    while len(groups) < COMMITTERS:
        g = f"committer-{i}"
        p = partition_for(g, 50)
        if p not in seen:
            seen.add(p)
            groups.append(g)
        i += 1
    return groups


def _commit_body(group: str, partitions: int, offset: int):
    cls = request_class(OFFSET_COMMIT, COMMIT_VERSION)
    mod = sys.modules[cls.__module__]
    return make(cls, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, topics=(mod.OffsetCommitRequestTopic(
                    name=COMMIT_TOPIC, partitions=tuple(
                        mod.OffsetCommitRequestPartition(
                            partition_index=p, committed_offset=offset + p,
                            committed_leader_epoch=-1, committed_metadata="")
                        for p in range(partitions))),))


@dataclass
class CommitRun:
    seconds: float
    commits: int
    broker_cpu: float  # CPU seconds per second of run
    broker_wait: float  # seconds waiting for a core (runnable) per second of run
    client_cpu: float


def _broker_cpu(broker: Broker) -> float:
    return process_schedstat(broker.proc.pid)[0]


def _measure(broker: Broker, fn) -> CommitRun:
    (b0, w0), c0 = process_schedstat(broker.proc.pid), own_cpu_seconds()
    t0 = time.perf_counter()
    commits, t_end = fn()
    elapsed = t_end - t0
    b1, w1 = process_schedstat(broker.proc.pid)
    return CommitRun(elapsed, commits, (b1 - b0) / elapsed, (w1 - w0) / elapsed,
                     (own_cpu_seconds() - c0) / elapsed)


def client_commits(broker: Broker, partitions: int, base: int,
                   seconds: float = COMMIT_SECONDS) -> CommitRun:
    """confluent-kafka: one Consumer and thread per group, synchronous commits for `seconds`;
    commits answered before the deadline plus the ones in flight at it."""
    consumers = [Consumer({"bootstrap.servers": broker.bootstrap, "group.id": g,
                           "enable.auto.commit": False, "enable.auto.offset.store": False})
                 for g in _committer_groups()]
    counts = [0] * len(consumers)
    errors: list[str] = []
    try:
        for c in consumers:  # finds the coordinator; untimed
            c.commit(offsets=[TopicPartition(COMMIT_TOPIC, 0, base)], asynchronous=False)
        start = threading.Barrier(len(consumers) + 1)
        ends = [0.0] * len(consumers)

        def commit_loop(i: int) -> None:
            commit = consumers[i].commit
            start.wait()
            deadline = time.perf_counter() + seconds
            n = 0
            try:
                while time.perf_counter() < deadline:
                    n += 1
                    offset = base + n * partitions
                    done = commit(offsets=[TopicPartition(COMMIT_TOPIC, p, offset + p)
                                           for p in range(partitions)], asynchronous=False)
                    bad = [tp for tp in done if tp.error is not None]
                    if bad or len(done) != partitions:
                        errors.append(f"{len(done)} partitions answered, errors {bad[:3]}")
                        return
            except Exception as exc:  # KafkaException: the whole commit failed
                errors.append(str(exc))
                return
            finally:
                ends[i] = time.perf_counter()
            counts[i] = n

        threads = [threading.Thread(target=commit_loop, args=(i,)) for i in range(len(consumers))]
        for t in threads:
            t.start()

        def timed():
            start.wait()
            for t in threads:
                t.join()
            return sum(counts), max(ends)

        run = _measure(broker, timed)
    finally:
        for c in consumers:
            c.close()
    if errors:
        broker.check_alive()
        raise RuntimeError(f"{broker.name}: commits failed: {errors[:3]}")
    return run


@dataclass
class _Pipe:
    sock: socket.socket
    frames: list[bytearray]
    reference: bytes  # an answer without errors, from after its correlation id
    sent: int = 0
    received: int = 0
    buf: bytearray = field(default_factory=bytearray)

    def next_frames(self, n: int) -> bytes:
        out = []
        for _ in range(n):
            self.sent += 1
            frame = self.frames[self.sent % POOL]
            _SIZE.pack_into(frame, 8, self.sent)  # correlation id = sequence number
            out.append(bytes(frame))
        return b"".join(out)


def pipelined_commits(broker: Broker, partitions: int, base: int,
                      seconds: float = COMMIT_SECONDS) -> CommitRun:
    """Raw OffsetCommit requests, WINDOW in flight per connection, for `seconds`; commits sent
    before the deadline, timed until the last of them is answered."""
    pipes: list[_Pipe] = []
    sel = selectors.DefaultSelector()
    try:
        for g in _committer_groups():
            sock = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            frame, answer = _blocking_request(sock, _commit_body(g, partitions, base), 0)
            codes = {p.error_code for t in answer.topics for p in t.partitions}
            if codes != {ErrorCode.none} or len(answer.topics[0].partitions) != partitions:
                raise RuntimeError(f"{broker.name}: a commit of {g} was answered {codes}")
            frames = [bytearray(_frame(_commit_body(g, partitions, base + i * partitions), 0))
                      for i in range(1, POOL + 1)]
            pipes.append(_Pipe(sock, frames, frame[4:]))
            sock.setblocking(True)
            sel.register(sock, selectors.EVENT_READ, pipes[-1])

        def timed():
            for pipe in pipes:
                pipe.sock.sendall(pipe.next_frames(WINDOW))
            deadline = time.perf_counter() + seconds
            sending = True
            while True:
                for key, _ in sel.select(timeout=30):
                    _answers(key.data, sending)
                if sending and time.perf_counter() >= deadline:
                    sending = False
                if not sending and all(p.received == p.sent for p in pipes):
                    return sum(p.received for p in pipes), time.perf_counter()

        return _measure(broker, timed)
    finally:
        sel.close()
        for pipe in pipes:
            pipe.sock.close()


def _answers(pipe: _Pipe, sending: bool) -> None:
    """Read what arrived on a pipelined connection, check every whole answer, and send as many
    new requests as answers came (while still sending)."""
    data = pipe.sock.recv(1 << 20)
    if not data:
        raise ConnectionError("the broker closed a commit connection")
    buf = pipe.buf
    buf += data
    pos, n, end = 0, 0, len(buf)
    ref, expect = pipe.reference, pipe.received + 1
    while end - pos >= 4:
        size = _SIZE.unpack_from(buf, pos)[0]
        if end - pos - 4 < size:
            break
        if _SIZE.unpack_from(buf, pos + 4)[0] != expect or buf[pos + 8:pos + 4 + size] != ref:
            raise RuntimeError(f"commit answer {expect} is not a success in order: "
                               f"{bytes(buf[pos:pos + 4 + min(size, 60)])!r}")
        expect += 1
        n += 1
        pos += 4 + size
    del buf[:pos]
    pipe.received += n
    if sending and n:
        pipe.sock.sendall(pipe.next_frames(n))


def commit_throughput(brokers: list[Broker]) -> list[dict]:
    load_avg = _load_average()
    for b in brokers:
        b.create_topic(COMMIT_TOPIC, 100)
    runs: dict[tuple[str, int, str], list[CommitRun]] = {}
    base = 1_000
    for b in brokers:  # warm-up: coordinator lookups, __consumer_offsets, code paths
        for partitions in COMMIT_PARTITIONS:
            client_commits(b, partitions, base, WARMUP_SECONDS)
            pipelined_commits(b, partitions, base, WARMUP_SECONDS)
    flip = 0
    for rnd in range(COMMIT_ROUNDS):
        print(f"   commits: round {rnd + 1} of {COMMIT_ROUNDS}", file=sys.stderr, flush=True)
        for partitions in COMMIT_PARTITIONS:
            for kind, fn in (("confluent-kafka", client_commits), ("pipelined", pipelined_commits)):
                flip += 1
                for b in (brokers if (rnd + flip) % 2 == 0 else brokers[::-1]):
                    base += 10_000_000
                    runs.setdefault((kind, partitions, b.name), []).append(fn(b, partitions, base))
    results: list[dict] = []
    for kind in ("confluent-kafka", "pipelined"):
        for partitions in COMMIT_PARTITIONS:
            brook, tansu = runs[(kind, partitions, "brook")], runs[(kind, partitions, "Tansu")]
            rate_b = [r.commits / r.seconds for r in brook]
            rate_t = [r.commits / r.seconds for r in tansu]
            label = (f"offset commits, {kind}, {COMMITTERS} groups, {partitions} "
                     f"partition{'s' if partitions > 1 else ''} per commit")
            notes = (f"rounds brook {_list(rate_b)}, Tansu {_list(rate_t)} commits/s; per "
                     f"second of run, brook ran {_pct([r.broker_cpu for r in brook])} and waited "
                     f"for a core {_pct([r.broker_wait for r in brook])} (client CPU "
                     f"{_pct([r.client_cpu for r in brook])}), Tansu ran "
                     f"{_pct([r.broker_cpu for r in tansu])} and waited "
                     f"{_pct([r.broker_wait for r in tansu])} (client CPU "
                     f"{_pct([r.client_cpu for r in tansu])})")
            if not results:
                notes = f"{load_avg}; {notes}"
            results.append(dict(name=f"{label}, commits/s", value=_median(rate_b),
                                unit="commits/s", peer="Tansu (memory)", peer_value=_median(rate_t),
                                command=COMMAND, notes=notes))
            if partitions > 1:
                results.append(dict(name=f"{label}, offsets/s", value=_median(rate_b) * partitions,
                                    unit="offsets/s", peer="Tansu (memory)",
                                    peer_value=_median(rate_t) * partitions, command=COMMAND))
            if kind == "pipelined":
                cost_b = [r.broker_cpu * r.seconds / r.commits * 1e6 for r in brook]
                cost_t = [r.broker_cpu * r.seconds / r.commits * 1e6 for r in tansu]
                results.append(dict(
                    name=f"{label}, broker CPU time per commit", value=_median(cost_b), unit="µs",
                    peer="Tansu (memory)", peer_value=_median(cost_t), higher_is_better=False,
                    command=COMMAND,
                    notes=f"rounds brook {_list(cost_b)}, Tansu {_list(cost_t)} µs"))
    return results


# ---------------------------------------------------------------- 2. rebalance time


def _subscription() -> bytes:
    buf = io.BytesIO()
    buf.write(struct.pack(">h", 0))
    entity_writer(ConsumerProtocolSubscription)(
        buf, ConsumerProtocolSubscription(topics=(ASSIGNED_TOPIC,), user_data=None))
    return buf.getvalue()


def _range_assignment(member_ids: list[str]) -> dict[str, bytes]:
    """Kafka's range assignor over one topic: members sorted, consecutive partition ranges."""
    members = sorted(member_ids)
    per, extra = divmod(ASSIGNED_PARTITIONS, len(members))
    out, first = {}, 0
    for i, m in enumerate(members):
        n = per + (1 if i < extra else 0)
        buf = io.BytesIO()
        buf.write(struct.pack(">h", 0))
        entity_writer(ConsumerProtocolAssignment)(buf, ConsumerProtocolAssignment(
            assigned_partitions=(AssignedPartitions(topic=ASSIGNED_TOPIC,
                                                    partitions=tuple(range(first, first + n))),),
            user_data=None))
        out[m] = buf.getvalue()
        first += n
    return out


class Group:
    """The members the driver runs for one group id, and what tells when it is Stable."""

    def __init__(self, group_id: str, port: int) -> None:
        self.group_id = group_id
        self.port = port
        self.members: list[Member] = []
        self.assigned: dict[int, frozenset[str]] = {}  # generation -> members the leader assigned
        self.storm = False  # heartbeats back to back (the timed window)
        self.newcomer: Member | None = None  # the member whose join is timed
        self.unexpected: list[str] = []  # answers outside a plain rebalance, e.g. a fenced member
        self.wake = asyncio.Event()
        self.stable = asyncio.Event()
        self.stable_at = 0.0
        self.stable_generation = -1

    def start_storm(self) -> None:
        if not self.storm:
            self.storm = True
            self.wake.set()

    def synced(self) -> None:
        gens = {m.synced_generation for m in self.members}
        if len(gens) != 1:
            return
        gen = gens.pop()
        ids = frozenset(m.member_id for m in self.members)
        if gen >= 0 and self.assigned.get(gen) == ids and not self.stable.is_set():
            self.stable_at = time.perf_counter()
            self.stable_generation = gen
            self.stable.set()


class Member:
    """A consumer group member speaking the classic protocol over its own connection: joins
    (with KIP-394's second join), syncs (the leader sends a range assignment), heartbeats, and
    rejoins at once when a heartbeat or sync says REBALANCE_IN_PROGRESS."""

    def __init__(self, group: Group, index: int) -> None:
        self.group = group
        self.index = index
        self.member_id = ""
        self.synced_generation = -1
        self.joined_at = 0.0  # when the last JoinGroup answer arrived
        self.detected_at = 0.0  # when a heartbeat last said REBALANCE_IN_PROGRESS
        self.wire: Wire | None = None
        self.task: asyncio.Task | None = None

    async def run(self) -> None:
        self.wire = await Wire.open(self.group.port)
        while True:
            generation, leader, members = await self._join()
            if not await self._sync(generation, leader, members):
                continue
            await self._heartbeat(generation)

    async def _join(self):
        g = self.group
        cls = request_class(JOIN_GROUP, JOIN_VERSION)
        mod = sys.modules[cls.__module__]
        while True:
            if self.member_id and g.newcomer is self:
                g.start_storm()  # this join starts the rebalance: the others learn of it now
            answer = await self.wire.request(make(
                cls, group_id=g.group_id, session_timeout=_SESSION_TIMEOUT,
                rebalance_timeout=_SESSION_TIMEOUT, member_id=self.member_id,
                group_instance_id=None, protocol_type="consumer",
                protocols=(mod.JoinGroupRequestProtocol(name="range", metadata=_SUBSCRIPTION),),
                reason=None))
            code = answer.error_code
            if code == ErrorCode.member_id_required:
                self.member_id = answer.member_id
            elif code == ErrorCode.none:
                self.joined_at = time.perf_counter()
                return answer.generation_id, answer.leader, [m.member_id for m in answer.members]
            elif code in (ErrorCode.unknown_member_id, ErrorCode.rebalance_in_progress):
                self._unexpected("JoinGroup", code)
            else:
                raise RuntimeError(f"JoinGroup of {g.group_id} answered {code.name}")

    async def _sync(self, generation: int, leader: str, members: list[str]) -> bool:
        g = self.group
        cls = request_class(SYNC_GROUP, SYNC_VERSION)
        mod = sys.modules[cls.__module__]
        assignments = ()
        if leader == self.member_id:
            assigned = _range_assignment(members)
            assignments = tuple(mod.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                for m, a in assigned.items())
            g.assigned[generation] = frozenset(members)
        answer = await self.wire.request(make(
            cls, group_id=g.group_id, generation_id=generation, member_id=self.member_id,
            group_instance_id=None, protocol_type="consumer", protocol_name="range",
            assignments=assignments))
        code = answer.error_code
        if code == ErrorCode.none:
            self.synced_generation = generation
            g.synced()
            return True
        if code not in (ErrorCode.unknown_member_id, ErrorCode.rebalance_in_progress,
                        ErrorCode.illegal_generation):
            raise RuntimeError(f"SyncGroup of {g.group_id} answered {code.name}")
        self._unexpected("SyncGroup", code)
        return False

    async def _heartbeat(self, generation: int) -> None:
        g = self.group
        cls = request_class(HEARTBEAT, HEARTBEAT_VERSION)
        body = make(cls, group_id=g.group_id, generation_id=generation, member_id=self.member_id,
                    group_instance_id=None)
        while True:
            if not g.storm:
                try:
                    await asyncio.wait_for(g.wake.wait(), IDLE_HEARTBEAT)
                except TimeoutError:
                    pass
            code = (await self.wire.request(body)).error_code
            if code == ErrorCode.none:
                continue
            if code == ErrorCode.rebalance_in_progress:
                self.detected_at = time.perf_counter()
                return
            if code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
                self._unexpected("Heartbeat", code)
                return
            raise RuntimeError(f"Heartbeat of {g.group_id} answered {code.name}")

    def _unexpected(self, api: str, code: ErrorCode) -> None:
        """Note an answer a plain rebalance does not give; an unknown member joins anew."""
        self.group.unexpected.append(f"{api} {code.name.upper()}")
        if code == ErrorCode.unknown_member_id:
            self.member_id = ""

    def start(self) -> None:
        self.task = asyncio.create_task(self.run())


_SUBSCRIPTION = _subscription()
_SESSION_TIMEOUT = datetime.timedelta(milliseconds=SESSION_TIMEOUT_MS)


@dataclass
class RebalanceRun:
    stable: float  # seconds from the new member's JoinGroup to Stable
    detected: float  # ... to the last existing member's REBALANCE_IN_PROGRESS (0: none)
    joined: float  # ... to the last JoinGroup answer of the new generation
    broker_cpu: float  # CPU seconds the broker used in that time
    driver_cpu: float  # CPU seconds the driver (this process) used in that time
    unexpected: list[str]  # answers outside a plain rebalance in that time


async def _wait_stable(group: Group, timeout: float) -> None:
    """Wait for the group to be Stable; a member that failed fails the wait."""
    waiter = asyncio.create_task(group.stable.wait())
    tasks = {m.task for m in group.members}
    try:
        done, _ = await asyncio.wait({waiter, *tasks}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        if not done:
            raise TimeoutError(f"{group.group_id} of {len(group.members)} members not Stable in "
                               f"{timeout:.0f} s")
        for t in done:
            if t is not waiter:
                t.result()  # raises what the member raised
                raise RuntimeError(f"a member of {group.group_id} stopped")
    finally:
        waiter.cancel()


async def _describe(port: int, group_id: str):
    wire = await Wire.open(port)
    try:
        answer = await wire.request(make(request_class(DESCRIBE_GROUPS, DESCRIBE_VERSION),
                                         groups=(group_id,), include_authorized_operations=False))
        return answer.groups[0]
    finally:
        wire.close()


async def _leave(group: Group) -> None:
    for m in group.members:
        if m.task is not None:
            m.task.cancel()
    await asyncio.gather(*(m.task for m in group.members if m.task), return_exceptions=True)
    for m in group.members:
        if m.wire is not None:
            m.wire.close()
    wire = await Wire.open(group.port)
    try:
        cls = request_class(LEAVE_GROUP, LEAVE_VERSION)
        mod = sys.modules[cls.__module__]
        await wire.request(make(cls, group_id=group.group_id, members=tuple(
            mod.MemberIdentity(member_id=m.member_id, group_instance_id=None, reason=None)
            for m in group.members if m.member_id)))
    finally:
        wire.close()


async def _rebalance_round(broker: Broker, size: int, group_id: str) -> RebalanceRun:
    group = Group(group_id, broker.port)
    try:
        group.members = [Member(group, i) for i in range(size - 1)]
        for m in group.members:
            m.start()
        if group.members:
            await _wait_stable(group, REBALANCE_TIMEOUT)
        await asyncio.sleep(0.05)  # let the last answers settle; members idle
        group.stable = asyncio.Event()
        group.unexpected = []
        newcomer = group.newcomer = Member(group, size - 1)
        group.members.append(newcomer)
        cpu0, own0, t0 = _broker_cpu(broker), time.process_time(), time.perf_counter()
        newcomer.start()
        await _wait_stable(group, REBALANCE_TIMEOUT)
        cpu, own = _broker_cpu(broker) - cpu0, time.process_time() - own0
        group.storm = False
        group.wake.clear()
        gen = group.stable_generation
        joined = max(m.joined_at for m in group.members)
        detected = max((m.detected_at for m in group.members if m is not newcomer), default=t0)
        described = await _describe(broker.port, group_id)
        if described.group_state != "Stable" or len(described.members) != size:
            raise RuntimeError(f"{broker.name}: {group_id} is {described.group_state} with "
                               f"{len(described.members)} members after generation {gen}")
        return RebalanceRun(group.stable_at - t0, max(0.0, detected - t0), joined - t0, cpu, own,
                            list(group.unexpected))
    finally:
        await _leave(group)


async def _rebalances(broker: Broker, sizes: tuple[int, ...], rounds: int, tag: str,
                      budget: float | None = None) -> dict[int, list[RebalanceRun] | str]:
    """Rounds of every group size; with a budget (seconds), sizes not reached are skipped and a
    round that fails is recorded as the reason instead of failing the benchmark."""
    out: dict[int, list[RebalanceRun] | str] = {}
    started = time.perf_counter()
    await _rebalance_round(broker, 2, f"warmup-{tag}")
    for size in sizes:
        runs: list[RebalanceRun] = []
        for rnd in range(rounds):
            if budget is not None and time.perf_counter() - started > budget:
                out[size] = runs or f"not measured: the {budget:.0f} s budget was spent"
                break
            try:
                runs.append(await _rebalance_round(broker, size, f"rebalance-{tag}-{size}-{rnd}"))
            except Exception as exc:
                if budget is None:
                    raise
                out[size] = runs or f"not measured: {type(exc).__name__}: {exc}"
                break
        else:
            out[size] = runs
    return out


def rebalance_times(brooks: Broker, tansu: Broker) -> list[dict]:
    load_avg = _load_average()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        print("   rebalances: brook", file=sys.stderr, flush=True)
        mine = runner.run(_rebalances(brooks, GROUP_SIZES, REBALANCE_ROUNDS, "brook"))
        print("   rebalances: Tansu", file=sys.stderr, flush=True)
        theirs = runner.run(_rebalances(tansu, TANSU_GROUP_SIZES, TANSU_REBALANCE_ROUNDS,
                                        "tansu", budget=TANSU_REBALANCE_BUDGET))
    results = []
    for size in GROUP_SIZES:
        runs = mine[size]

        def ms(attr: str) -> str:
            return f"{_median([getattr(r, attr) * 1e3 for r in runs]):.1f} ms"

        stable = [r.stable * 1e3 for r in runs]
        told = (f"every existing member told of the rebalance after {ms('detected')}, "
                if size > 1 else "")
        notes = (f"rounds {_list(stable, 1)} ms; medians: {told}all JoinGroup answers (end of "
                 f"the join phase) after {ms('joined')}; CPU used meanwhile by the broker "
                 f"{ms('broker_cpu')}, by the driver {ms('driver_cpu')}")
        if not results:
            notes = f"{load_avg}; {notes}"
        odd = [f"round {i + 1}: {', '.join(r.unexpected)}" for i, r in enumerate(runs)
               if r.unexpected]
        if odd:
            notes += f"; answers outside a plain rebalance: {'; '.join(odd)}"
        other = theirs.get(size)
        if isinstance(other, list) and other:
            notes += (f"; Tansu (its join wait, see above) "
                      f"{_list([r.stable * 1e3 for r in other])} ms")
        elif isinstance(other, str):
            notes += f"; Tansu {other}"
        # Tansu's figure is its fixed join wait, not a speed: it stays out of the ratio column.
        results.append(dict(name=f"rebalance, a member joins a group of {size - 1} "
                                 f"(to {size} Stable)", value=_median(stable), unit="ms",
                            higher_is_better=False, command=COMMAND, notes=notes))
    return results


# ---------------------------------------------------------------- realistic groups


_SERVICES = ["billing", "checkout", "fraud", "inventory", "search", "shipping", "notifications",
             "analytics", "recommendations", "ledger", "pricing", "catalog", "identity",
             "payments", "support", "returns", "warehouse", "marketing", "risk", "reporting"]
_ROLES = ["projector", "indexer", "sink", "enricher", "aggregator", "replicator", "auditor",
          "consumer", "processor", "loader"]
_DOMAINS = ["orders", "payments", "users", "clicks", "sessions", "inventory", "shipments",
            "invoices", "refunds", "prices", "products", "carts", "searches", "reviews",
            "alerts", "ledger-entries", "accounts", "devices", "campaigns", "tickets"]
_KINDS = ["events", "changes", "commands", "snapshots", "dlq", "enriched", "transactions",
          "updates"]
_PARTITION_COUNTS = [6, 8, 12, 12, 16, 24, 24, 32, 48, 64]


def _topics(rng: random.Random) -> list[tuple[str, int]]:
    """A few hundred (topic, partitions), names shaped like production ones."""
    names = set()
    while len(names) < 300:
        d, k = rng.choice(_DOMAINS), rng.choice(_KINDS)
        style = rng.random()
        if style < 0.4:
            names.add(f"{rng.choice(['prod', 'eu', 'us'])}.{d}.{k}.v{rng.randint(1, 3)}")
        elif style < 0.8:
            names.add(f"{d}-{k}")
        else:
            names.add(f"{rng.choice(_SERVICES)}.{d}.{k}")
    return [(n, rng.choice(_PARTITION_COUNTS)) for n in sorted(names)]


def realistic_groups(total: int, seed: int = SEED):
    """(group id, [(topic, partitions)]) until `total` offsets: 1-4 topics per group."""
    rng = random.Random(seed)
    topics = _topics(rng)
    count, i = 0, 0
    while count < total:
        service = rng.choice(_SERVICES)
        style = rng.random()
        if style < 0.5:
            gid = f"{service}-service.{rng.choice(_DOMAINS)}-{rng.choice(_ROLES)}"
        elif style < 0.8:
            gid = f"{service}-{rng.choice(_ROLES)}-{rng.choice(['prod', 'staging', 'eu-west-1'])}"
        else:
            gid = f"connect-{service}-{rng.choice(['s3', 'jdbc', 'elasticsearch'])}-sink"
        gid = f"{gid}-{i:05d}"  # distinct ids
        i += 1
        chosen = rng.sample(topics, rng.choice([1, 1, 1, 2, 2, 3, 4]))
        group = []
        for name, partitions in chosen:
            partitions = min(partitions, total - count)
            if partitions <= 0:
                break
            group.append((name, partitions))
            count += partitions
        yield gid, group


def _value(rng: random.Random, partition: int) -> OffsetCommitValue:
    metadata = ""
    if rng.random() < 0.01:
        metadata = f"host=10.0.{rng.randint(0, 255)}.{rng.randint(0, 255)};gen={rng.randint(1, 99)}"
    return OffsetCommitValue(rng.randint(0, 5_000_000_000), rng.randint(0, 30), metadata,
                             NOW_MS - rng.randint(0, 7 * 86_400_000))


# ---------------------------------------------------------------- 3. offsets cache memory


def cache_memory() -> dict:
    load_avg = _load_average()
    # The records are encoded before tracing (tracemalloc slows every allocation); decoding and
    # replaying them, as loading does, is what is traced.
    rng = random.Random(SEED + 1)
    records, groups, topics = [], 0, 0
    for group_id, group in realistic_groups(CACHE_OFFSETS):
        groups += 1
        for topic, partitions in group:
            topics += 1
            for p in range(partitions):
                records.append((encode_key(OffsetCommitKey(group_id, topic, p)),
                                encode_value(_value(rng, p))))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        manager = OffsetsManager()
        t0 = time.perf_counter()
        replay = manager.replay
        for raw_key, raw_value in records:
            key = decode_key(raw_key)
            replay(key, decode_value(key, raw_value), NOW_MS)
        manager.loaded()
        fill = time.perf_counter() - t0
        key = raw_key = raw_value = None
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    offsets = len(manager.cache)
    if offsets != CACHE_OFFSETS:
        raise RuntimeError(f"{offsets:,} offsets cached, expected {CACHE_OFFSETS:,}")
    return dict(
        name=f"offsets cache, bytes per cached offset ({offsets:,} offsets)",
        value=used / offsets, unit="bytes", peer="target (offset storage requirements)",
        peer_value=TARGET_BYTES_PER_OFFSET, higher_is_better=False, command=COMMAND,
        notes=(f"{used / 1e6:.1f} MB for {offsets:,} offsets of {groups:,} groups, {topics:,} "
               f"(group, topic) pairs, {offsets / groups:.0f} partitions per group on average; "
               f"decoded and replayed in {fill:.1f} s under tracemalloc; {load_avg}"))


# ---------------------------------------------------------------- 4. load rate


def _offsets_log_broker(data: Path) -> BrookBroker:
    broker = BrookBroker(BrokerConfig.from_props({
        "log.dirs": str(data), "offsets.topic.num.partitions": "1",
        "listeners": "PLAINTEXT://127.0.0.1:0"}))
    broker.open()
    return broker


def own_load_rate(records: int) -> tuple[float, float, str]:
    """Write `records` offset commits into a one-partition __consumer_offsets of a real brook
    Broker (in this process, through the runtime's own writer), reopen it, and time the group
    runtime's loading of the partition. Returns (records/s, records per CPU second, notes)."""
    load_avg = _load_average()
    WORK_ROOT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="load-", dir=WORK_ROOT))
    try:
        broker = _offsets_log_broker(work)
        try:
            if not broker.ensure_offsets_topic():
                raise RuntimeError("__consumer_offsets could not be created")
            writer = PartitionOffsetsLog(broker)
            rng = random.Random(SEED + 2)
            # Each group commits all its partitions of a topic at once, several times over (a log
            # before compaction holds many commits of the same keys).
            written = batches = 0
            commits = list(realistic_groups(records // 4))
            distinct = sum(n for _, group in commits for _, n in group)
            t0 = time.perf_counter()
            while written < records:
                for group_id, group in commits:
                    for topic, partitions in group:
                        n = min(partitions, records - written)
                        if n <= 0:
                            break
                        writer.append(0, 0, [
                            CoordinatorRecord(OffsetCommitKey(group_id, topic, p), _value(rng, p))
                            for p in range(n)], NOW_MS)
                        written += n
                        batches += 1
            write = time.perf_counter() - t0
            size = broker.partition(OFFSETS_TOPIC, 0).log.size
        finally:
            broker.close()
        broker = _offsets_log_broker(work)  # a restart: the partition is loaded from disk
        try:
            async def load() -> tuple[float, float, int]:
                runtime = broker.coordinator
                cpu, t = time.process_time(), time.perf_counter()
                runtime.start()
                await runtime.wait_loaded()
                elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
                cached = len(runtime.contexts[0].shard.offsets.cache)
                await runtime.stop()
                return elapsed, cpu, cached

            elapsed, cpu, cached = asyncio.run(load())
            if cached != distinct:
                raise RuntimeError(f"{cached:,} offsets loaded, expected {distinct:,}")
        finally:
            broker.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    notes = (f"{records:,} offset commit records ({records // 4:,} distinct keys, each committed "
             f"about 4 times) in {batches:,} batches of one (group, topic)'s partitions, "
             f"{size / 1e6:.0f} MB in one partition of __consumer_offsets, written untimed in "
             f"{write:.0f} s by the runtime's writer (`PartitionOffsetsLog`) of a brook `Broker` "
             f"in this process; the broker is reopened and its `GroupRuntime` started, timed until "
             f"`wait_loaded()` (reading the log, decoding batches and records, replaying into the "
             f"classic coordinator and the offsets cache) in {elapsed:.2f} s, using {cpu:.2f} s "
             f"of CPU; page cache warm; {load_avg}")
    return records / elapsed, records / cpu, notes


def load_rate() -> list[dict]:
    """The load-path benchmark of benchmarks/load_rate.py when it exists, else this module's."""
    peer = dict(peer="Apache Kafka (goal, not measured here)", peer_value=KAFKA_LOAD_RATE)
    reference = ("; peer: the rate the project's issue states for Kafka's newest group "
                 "coordinator, a reference")
    if importlib.util.find_spec("load_rate") is not None:
        from load_rate import measure_load_rate

        load_avg = _load_average()
        rate = measure_load_rate(LOAD_RECORDS)
        return [dict(name="load rate, offset records replayed per CPU second", value=rate,
                     unit="records/s", command=COMMAND, **peer,
                     notes=f"`benchmarks/load_rate.py`'s `measure_load_rate({LOAD_RECORDS:,})`: "
                           "a realistic partition written into a `Log` by the runtime's encoder "
                           "(offset commits with group metadata rewrites and OffsetDelete "
                           "tombstones), loaded into a shard by `loader.replay_batches`; best of "
                           "three loads, records per CPU second of the process, page cache warm; "
                           + load_avg + reference)]
    rate, cpu_rate, notes = own_load_rate(LOAD_RECORDS)
    return [
        dict(name="load rate, offset records replayed per second (wall clock)", value=rate,
             unit="records/s", command=COMMAND, notes=notes),
        dict(name="load rate, offset records replayed per CPU second", value=cpu_rate,
             unit="records/s", command=COMMAND, **peer,
             notes="the same load, records divided by the CPU time the loading process used: "
                   "what one core of its own would give, as Kafka's figure is" + reference),
    ]


# ---------------------------------------------------------------- driver


def _load_average() -> str:
    return f"machine load average {os.getloadavg()[0]:.1f} when this part started"


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def _list(xs: list[float], digits: int = 0) -> str:
    return ", ".join(f"{x:,.{digits}f}" for x in xs)


def _pct(xs: list[float]) -> str:
    return f"{_median(xs) * 100:.0f} %"


def run() -> list[dict]:
    WORK_ROOT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="coordinator-", dir=WORK_ROOT))
    brooks = brook_broker(work, {"group.initial.rebalance.delay.ms": "0"})
    tansu = tansu_broker(work)
    results: list[dict] = []
    try:
        for b in (brooks, tansu):
            b.start()
        results += commit_throughput([brooks, tansu])
        results += rebalance_times(brooks, tansu)
    finally:
        for b in (brooks, tansu):
            b.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("   offsets cache memory", file=sys.stderr, flush=True)
    results.append(cache_memory())
    print("   load rate", file=sys.stderr, flush=True)
    results += load_rate()
    return results


if __name__ == "__main__":
    for r in run():
        peer = "" if r.get("peer_value") is None else f"  {r['peer']}: {r['peer_value']:,.1f}"
        print(f"{r['name']:<78} {r['value']:>12,.1f} {r['unit']}{peer}")
        if r.get("notes"):
            print(f"    {r['notes']}")
