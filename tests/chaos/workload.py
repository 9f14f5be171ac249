"""The workload: client processes (tests/chaos/client.py) in the control namespace and one
producer inside each broker's namespace, then, once the cluster is healed, the final read of
every partition and of the group's committed offsets.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.chaos.cluster import BROKERS, ChaosCluster, node
from tests.chaos.history import Recorder

REPO = Path(__file__).resolve().parents[2]
GROUP = "chaos"


class Workload:
    def __init__(self, cluster: ChaosCluster, topic: str, partitions: int, history_dir: Path,
                 control_producers: int = 2, consumers: int = 2, rate: float = 20.0) -> None:
        self.cluster, self.topic, self.partitions = cluster, topic, partitions
        self.dir = history_dir
        self.stop_file = history_dir / "stop"
        self.stop_file.unlink(missing_ok=True)  # an earlier run's in the same CHAOS_OUT
        self.plan: list[tuple[str, str, list[str]]] = []  # (role, name, command prefix)
        self.plan += [("producer", f"p{i}", []) for i in range(control_producers)]
        self.plan += [("producer", f"p-{node(b)}", cluster.net.prefix(node(b))) for b in BROKERS]
        self.plan += [("consumer", f"c{i}", []) for i in range(consumers)]
        self.rate = rate
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
        for role, name, prefix in self.plan:
            err = open(self.dir / f"{name}.stderr", "wb")
            self.procs.append(subprocess.Popen(
                [*prefix, sys.executable, "-m", "tests.chaos.client", role, "--name", name,
                 "--bootstrap", self.cluster.bootstrap, "--topic", self.topic,
                 "--partitions", str(self.partitions), "--group", GROUP, "--rate", str(self.rate),
                 "--out", str(self.dir / f"{name}.jsonl"), "--stop", str(self.stop_file)],
                cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err))
            err.close()

    def stop(self, timeout: float = 40.0) -> None:
        """Ask every client to stop (producers wait for what is in flight) and wait."""
        self.stop_file.touch()
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _producers_of(self, partition: int, high: int) -> list[list[int]]:
        """[offset, producer id, producer epoch] of every record below `high`, read from the
        leader's segment files (a consumer does not see them): the checker tells a client
        that sent a value again under a new epoch from a broker that wrote a retry twice."""
        from brook.cli.segment_reader import BatchResult, scan_log

        leader = self.cluster.leader(self.topic, partition)
        if leader is None or leader < 0:
            return []
        out = []
        directory = self.cluster.disks[leader] / "logs" / f"{self.topic}-{partition}"
        for path in sorted(directory.glob("*.log")):
            for item in scan_log(path.read_bytes(), decode=False):
                if isinstance(item, BatchResult):
                    h = item.header
                    out += [[o, h.producer_id, h.producer_epoch]
                            for o in range(h.base_offset, min(h.last_offset + 1, high))]
        return out

    def final_read(self, timeout: float = 60.0) -> None:
        """Read every partition from its start to its high watermark, and the group's
        committed offsets; partitions that cannot be read are left out of the history (the
        checker reports them)."""
        from confluent_kafka import Consumer, TopicPartition

        record = Recorder(self.dir / "final.jsonl", "final")
        conf = {"bootstrap.servers": self.cluster.bootstrap, "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "enable.partition.eof": True}
        reader = Consumer({**conf, "group.id": "chaos-final-reader"})
        try:
            for p in range(self.partitions):
                tp = TopicPartition(self.topic, p)
                try:
                    low, high = reader.get_watermark_offsets(tp, timeout=timeout)
                except Exception as exc:  # noqa: BLE001 - recorded as missing
                    record("final-error", partition=p, error=repr(exc))
                    continue
                records, done = [], high <= low
                reader.assign([TopicPartition(self.topic, p, low)])
                deadline = time.monotonic() + timeout
                while not done and time.monotonic() < deadline:
                    for m in reader.consume(500, timeout=1.0):
                        if m.error():
                            continue
                        records.append([m.offset(), m.value().decode()])
                        done = m.offset() + 1 >= high
                reader.unassign()
                if done:
                    record("final", partition=p, records=records, low=low, high=high)
                    record("final-producers", partition=p, records=self._producers_of(p, high))
                else:
                    record("final-error", partition=p, error=f"read {len(records)} of {low}..{high}")
        finally:
            reader.close()
        group = Consumer({**conf, "group.id": GROUP})
        try:
            got = group.committed([TopicPartition(self.topic, p) for p in range(self.partitions)],
                                  timeout=timeout)
            record("final-commit", offsets={str(tp.partition): tp.offset for tp in got})
        except Exception as exc:  # noqa: BLE001
            record("final-error", error=f"committed offsets: {exc!r}")
        finally:
            group.close()
            record.close()
