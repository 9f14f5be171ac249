"""A KIP-848 consumer group across the death of its coordinator: how long until every member
heartbeats successfully to the new coordinator, for groups of 10 and 50 members on 900
partitions, three brokers on ZooKeeper.

    .venv/bin/python benchmarks/run_all.py bench_consumer_failover
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from kio.schema.consumer_group_heartbeat.v0.request import TopicPartitions  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402

from bench_coordinator_failover import OffsetsCluster, _coordinator, _wait  # noqa: E402
from brook.protocol.messages import make  # noqa: E402
from tests.support.kafka_wire import WireClient, request_class  # noqa: E402

TITLE = "Consumer group failover, KIP-848 (three brokers on ZooKeeper)"
SESSION_MS = 6_000  # zookeeper.session.timeout.ms: how soon the controller learns of a SIGKILL
PARTITIONS = 900
MEMBERS = tuple(int(n) for n in os.environ.get("BENCH_MEMBERS", "10,50").split(","))
HEARTBEAT_MS = 500
COMMAND = ".venv/bin/python benchmarks/run_all.py bench_consumer_failover"
DESCRIPTION = f"""\
Three brokers, `__consumer_offsets` with one partition (replication factor 3, so every group is
in it), a topic of {PARTITIONS} partitions. N members (this process's threads speaking
ConsumerGroupHeartbeat v0 over their own connections, every {HEARTBEAT_MS} ms, each acknowledging
the partitions it is given) join one group and reach a stable assignment; the coordinator's
broker is then sent SIGKILL. Timed from the signal: the first and the last member's first
successful heartbeat to the new coordinator (a member that gets NOT_COORDINATOR or loses its
connection looks the coordinator up again every 100 ms). The controller learns of the kill when
the broker's ZooKeeper session expires (`zookeeper.session.timeout.ms` {SESSION_MS:,} ms), which
bounds both figures from below; the new coordinator then loads the group from the log, and every
member carries on at its epoch (none is fenced: the group epoch is the same before and after).
The rest is the controller electing new leaders for every partition the killed broker led
(hundreds of the {PARTITIONS} here, likely more in the second round, whose killed broker
probably led half of them since the first round's came back without leaderships: not verified) before the offsets partition's
turn: the size of the group changes little (the first and the last member are within 0.1 s).
"""


class Member(threading.Thread):
    def __init__(self, cluster: OffsetsCluster, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.group, self.topic = cluster, group, topic
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.owned: tuple = ()
        self.stop = threading.Event()
        self.node = -1
        self.last_ok: tuple[float, int] = (0.0, -1)  # (when, on which node)
        self.fenced = False

    def _heartbeat(self, client: WireClient):
        first = self.epoch == 0
        body = make(request_class(68, 0), group_id=self.group, member_id=self.member_id,
                    member_epoch=self.epoch,
                    rebalance_timeout=timedelta(milliseconds=30_000 if first else -1),
                    subscribed_topic_names=(self.topic,) if first else None,
                    topic_partitions=tuple(TopicPartitions(topic_id=t, partitions=ps)
                                           for t, ps in self.owned))
        return client.request(body)

    def run(self) -> None:
        client = None
        while not self.stop.is_set():
            try:
                if client is None:
                    self.node = _coordinator(self.cluster, self.group)
                    if self.node < 0:
                        time.sleep(0.1)
                        continue
                    client = WireClient(self.cluster.brokers[self.node].bootstrap, 5)
                r = self._heartbeat(client)
            except (OSError, EOFError, ConnectionError):
                client = None
                time.sleep(0.1)
                continue
            if r.error_code == ErrorCode.none:
                self.epoch = r.member_epoch
                if r.assignment is not None:
                    self.owned = tuple((tp.topic_id, tuple(tp.partitions))
                                       for tp in r.assignment.topic_partitions)
                self.last_ok = (time.monotonic(), self.node)
                self.stop.wait(HEARTBEAT_MS / 1000)
            elif r.error_code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                                  ErrorCode.coordinator_load_in_progress):
                client.close()
                client = None
                time.sleep(0.1)
            else:
                self.fenced = True
                return
        if client is not None:
            client.close()


def _group_epoch(cluster: OffsetsCluster, group: str) -> tuple[int, int, int] | None:
    """(group epoch, target epoch, members at the target epoch) from the coordinator."""
    node = _coordinator(cluster, group)
    if node < 0:
        return None
    try:
        with WireClient(cluster.brokers[node].bootstrap, 5) as w:
            g = w.request(make(request_class(69, 0), group_ids=(group,),
                               include_authorized_operations=False)).groups[0]
    except (OSError, EOFError, ConnectionError):
        return None
    if g.error_code != ErrorCode.none:
        return None
    return g.group_epoch, g.assignment_epoch, sum(m.member_epoch == g.assignment_epoch
                                                  for m in g.members)


def failover(cluster: OffsetsCluster, n: int) -> tuple[float, float, int, int, bool]:
    group = f"failover-{n}-{uuid.uuid4().hex[:6]}"
    members = [Member(cluster, group, "wide") for _ in range(n)]
    for m in members:
        m.start()
    try:
        _wait(lambda: (e := _group_epoch(cluster, group)) and e[0] == e[1] and e[2] == n
              and all(m.owned for m in members if n <= PARTITIONS), 120, "a stable group")
        before = _group_epoch(cluster, group)[0]
        node = _coordinator(cluster, group)
        from confluent_kafka.admin import AdminClient
        controller = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
            timeout=10).controller_id
        killed = time.monotonic()
        cluster.brokers[node].proc.send_signal(signal.SIGKILL)
        cluster.brokers[node].proc.wait()
        _wait(lambda: all(m.last_ok[1] not in (node, -1) and m.last_ok[0] > killed
                          or m.fenced for m in members), 120, "every member on the new node")
        assert not any(m.fenced for m in members), "a member was fenced"
        firsts = sorted(m.last_ok[0] - killed for m in members)
        after = _group_epoch(cluster, group)[0]
        return firsts[0], firsts[-1], before, after, node == controller
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(10)


def run() -> list[dict]:
    results = []
    work = Path(tempfile.mkdtemp(prefix="bench-consumer-failover-"))
    cluster = OffsetsCluster(work, SESSION_MS)
    try:
        cluster.start()
        cluster.create("wide", PARTITIONS, 3)
        for n in MEMBERS:
            first, last, before, after, was_controller = failover(cluster, n)
            notes = (f"group epoch {before} before, {after} after"
                     + ("; the coordinator's broker was the controller too (a new controller "
                        "is elected first)" if was_controller else ""))
            results.append(dict(name=f"{n} members: first member on the new coordinator",
                                value=round(first, 2), unit="s", higher_is_better=False,
                                command=COMMAND, notes=notes))
            results.append(dict(name=f"{n} members: every member on the new coordinator",
                                value=round(last, 2), unit="s", higher_is_better=False,
                                command=COMMAND, notes=notes))
            # the killed broker back, and the offsets partition's ISR full, for the next round
            dead = [i for i, b in cluster.brokers.items() if b.proc.poll() is not None]
            for i in dead:
                cluster.brokers[i].start()
            time.sleep(SESSION_MS / 1000)
    finally:
        cluster.stop()
    return results


if __name__ == "__main__":
    for r in run():
        print(r)
