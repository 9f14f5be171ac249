"""The group coordinator's failover on three brokers: how long a group waits when the broker
coordinating it dies (SIGKILL) or stops (SIGTERM, a controlled shutdown), with 10 k, 100 k and
1 M committed offsets in the group's partition of __consumer_offsets.

    .venv/bin/python benchmarks/run_all.py bench_coordinator_failover
"""

from __future__ import annotations

import re
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from kio.schema.errors import ErrorCode  # noqa: E402

from bench_cluster import Cluster  # noqa: E402
from brokers import brook_broker  # noqa: E402
from brook.protocol.messages import make  # noqa: E402
from tests.support.kafka_wire import WireClient, request_class  # noqa: E402
from tests.support.offsets_wire import OffsetsWire  # noqa: E402

COMMAND = ".venv/bin/python benchmarks/run_all.py bench_coordinator_failover"
TITLE = "Group coordinator failover (three brokers on ZooKeeper)"
SESSION_MS = 3_000
SIZES = (10_000, 100_000, 1_000_000)
PARTITIONS = 1000  # of the topic the offsets are committed for: a group commits all of them
KAFKA_LOAD_RATE = 4_400_000
GROUP = "failover-group"
PROBE = "failover-probe"
DESCRIPTION = f"""\
Three brokers on one ZooKeeper (`zookeeper.session.timeout.ms` {SESSION_MS:,} ms), with one
partition of `__consumer_offsets` (`offsets.topic.num.partitions=1`, replication factor 3) so
that every group below lives in it. The partition is filled with distinct committed offsets
(groups of {PARTITIONS:,} partitions each, pipelined OffsetCommit requests, acks=all), then
the broker leading it, the coordinator, is sent SIGKILL (the controller learns it when the
ZooKeeper session expires) or SIGTERM (a controlled shutdown moves leadership first). Timed
from the signal: (a) the group {GROUP!r} (one member joined and synced beforehand, its session
longer than the test) answering DescribeGroups Stable on the new coordinator, restored from
the log; (b) the first OffsetCommit accepted by the new coordinator (a client looking the
coordinator up and committing every 10 ms). The load rate is the new coordinator's own log
line (records replayed per second of loading, wall time on a machine the other processes
share), beside Apache Kafka's figure for its coordinator. The killed broker is restarted
between runs and the partition's ISR waited for; sizes grow by committing more groups.
"""


class OffsetsCluster(Cluster):
    def _broker(self, i: int):
        d = self.work / f"broker{i}"
        d.mkdir(exist_ok=True)
        return brook_broker(d, {"broker.id": str(i), "zookeeper.connect": self.zk.connect,
                                "zookeeper.session.timeout.ms": str(self.session_ms),
                                "controlled.shutdown.retry.backoff.ms": "200",
                                "offsets.topic.num.partitions": "1",
                                "replica.fetch.wait.max.ms": "100",
                                "group.initial.rebalance.delay.ms": "0"})

    def alive(self) -> list[int]:
        return [i for i, b in self.brokers.items() if b.proc and b.proc.poll() is None]


def _coordinator(cluster: OffsetsCluster, group: str) -> int:
    for i in cluster.alive():
        try:
            with WireClient(cluster.brokers[i].bootstrap, 2) as w:
                r = w.request(make(request_class(10, 4), key_type=0, coordinator_keys=(group,)))
        except (OSError, EOFError, ConnectionError):
            continue
        c = r.coordinators[0]
        if c.error_code == ErrorCode.none:
            return c.node_id
    return -1


def _wait(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _fill(cluster: OffsetsCluster, first_group: int, groups: int) -> None:
    node = _wait(lambda: (n := _coordinator(cluster, GROUP)) > 0 and n, 60, "a coordinator")
    with OffsetsWire(cluster.brokers[node].bootstrap, timeout=300) as wire:
        wire.commit_all(wire.commit_request(f"g{g:05d}", {"wide": [(p, g * 1000 + p, 1, "")
                                                                   for p in range(PARTITIONS)]})
                        for g in range(first_group, first_group + groups))


def _committing(cluster: OffsetsCluster, stop: threading.Event) -> list:
    """A thread committing for PROBE every 10 ms to whichever broker is the coordinator; the
    (time, broker) of its accepted commits go into the returned list."""
    accepted: list[tuple[float, int]] = []
    request = None

    def run() -> None:
        nonlocal request
        while not stop.is_set():
            node = _coordinator(cluster, PROBE)
            if node < 0:
                time.sleep(0.01)
                continue
            try:
                with OffsetsWire(cluster.brokers[node].bootstrap, timeout=10) as wire:
                    request = request or wire.commit_request(PROBE, {"wide": [(0, 1, 1, "")]})
                    while not stop.is_set():
                        answer = wire.client.request(request)
                        if answer.topics[0].partitions[0].error_code == ErrorCode.none:
                            accepted.append((time.monotonic(), node))
                        else:
                            break
                        time.sleep(0.01)
            except (OSError, EOFError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.01)

    threading.Thread(target=run, daemon=True).start()
    return accepted


def _stable_on(cluster: OffsetsCluster, node: int) -> bool:
    if node not in cluster.alive():
        return False
    try:
        with OffsetsWire(cluster.brokers[node].bootstrap, timeout=2) as wire:
            error, state, *_ = wire.describe_groups([GROUP])[GROUP]
    except (OSError, EOFError, ConnectionError, TimeoutError):
        return False
    return error == ErrorCode.none and state == "Stable"


def _load_rate(cluster: OffsetsCluster, node: int, after_line: int) -> float | None:
    text = cluster.brokers[node].log_path.read_text().splitlines()[after_line:]
    for line in reversed(text):
        m = re.search(r"__consumer_offsets-0: loaded (\d+) record\(s\) in (\d+) ms", line)
        if m and int(m.group(2)):
            return int(m.group(1)) / (int(m.group(2)) / 1000)
    return None


def failover(cluster: OffsetsCluster, sig: int) -> tuple[float, float, float | None]:
    old = _wait(lambda: (n := _coordinator(cluster, GROUP)) > 0 and n, 60, "the coordinator")
    lines = {i: len(cluster.brokers[i].log_path.read_text().splitlines()) for i in cluster.alive()}
    stop = threading.Event()
    accepted = _committing(cluster, stop)
    _wait(lambda: accepted, 30, "a first commit")
    t_signal = time.monotonic()
    cluster.brokers[old].proc.send_signal(sig)
    try:
        new = _wait(lambda: (n := _coordinator(cluster, GROUP)) not in (-1, old) and n, 120,
                    "a new coordinator")
        _wait(lambda: _stable_on(cluster, new), 120, "the group Stable")
        stable = time.monotonic() - t_signal
        _wait(lambda: [t for t, n in accepted if n == new], 60, "a commit on the new coordinator")
        first = min(t for t, n in accepted if n == new) - t_signal
    finally:
        stop.set()
    cluster.brokers[old].proc.wait(60)
    rate = _load_rate(cluster, new, lines.get(new, 0))
    cluster.brokers[old].start()
    _wait(lambda: len(cluster.alive()) == 3, 60, "the broker back")
    _wait(lambda: _full_isr(cluster), 120, "the offsets partition's ISR whole again")
    return stable, first, rate


def _full_isr(cluster: OffsetsCluster) -> bool:
    from confluent_kafka.admin import AdminClient
    try:
        md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
            "__consumer_offsets", timeout=5)
    except Exception:  # noqa: BLE001 - not yet
        return False
    parts = md.topics.get("__consumer_offsets")
    return bool(parts and parts.partitions) and all(
        p.leader >= 0 and len(p.isrs) == 3 for p in parts.partitions.values())


def run() -> list[dict]:
    results = []
    work = Path(tempfile.mkdtemp(prefix="bench-coordinator-failover-"))
    cluster = OffsetsCluster(work, SESSION_MS)
    try:
        cluster.start()
        node = _wait(lambda: (n := _coordinator(cluster, GROUP)) > 0 and n, 60, "a coordinator")
        with OffsetsWire(cluster.brokers[node].bootstrap, timeout=60) as wire:
            wire.create_topics(wide=PARTITIONS)
            _wait(lambda: wire.client.request(wire.commit_request(PROBE, {"wide": [(0, 0, 1, "")]}))
                  .topics[0].partitions[0].error_code == ErrorCode.none, 60, "the topic known")
            wire.join_and_sync(GROUP, b"", b"", session_timeout_ms=300_000)
        _wait(lambda: _full_isr(cluster), 60, "the offsets partition's ISR")
        groups = 0
        for size in SIZES:
            want = size // PARTITIONS
            started = time.monotonic()
            _fill(cluster, groups, want - groups)
            filled = time.monotonic() - started
            groups = want
            for sig, label in ((signal.SIGKILL, "SIGKILL"), (signal.SIGTERM, "controlled shutdown")):
                stable, first, rate = failover(cluster, sig)
                rate_note = f"{rate:,.0f} records/s" if rate else "no load line found"
                notes = (f"{size:,} offsets (committed in {filled:.1f} s); group Stable after "
                         f"{stable:.2f} s; the new coordinator's load: {rate_note}")
                results.append(dict(name=f"failover, {size:,} offsets, {label}: first commit "
                                         "on the new coordinator, s",
                                    value=first, unit="s", higher_is_better=False,
                                    command=COMMAND, notes=notes))
                results.append(dict(name=f"failover, {size:,} offsets, {label}: group Stable "
                                         "on the new coordinator, s",
                                    value=stable, unit="s", higher_is_better=False,
                                    command=COMMAND))
                if rate:
                    results.append(dict(name=f"failover, {size:,} offsets, {label}: load rate, "
                                             "records/s", value=rate, unit="records/s",
                                        peer="Apache Kafka (its figure, not measured here)",
                                        peer_value=KAFKA_LOAD_RATE, command=COMMAND))
    finally:
        cluster.stop()
    return results


if __name__ == "__main__":
    for r in run():
        print(r)
