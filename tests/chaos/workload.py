"""The workload: client processes (tests/chaos/client.py) in the control namespace and one
producer inside each broker's namespace, then, once the cluster is healed, the final read of
every partition and of the group's committed offsets; with transformers, also the final
read_committed read of the output topic and the committed offsets of their group.
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
EOS_GROUP = f"{GROUP}-eos"  # the transformers' group (client.py)


def output_topic(topic: str) -> str:
    """Where the transformers write (client.py)."""
    return f"{topic}-out"


class Workload:
    def __init__(self, cluster: ChaosCluster, topic: str, partitions: int, history_dir: Path,
                 control_producers: int = 2, consumers: int = 2, transformers: int = 0,
                 rate: float = 20.0) -> None:
        self.cluster, self.topic, self.partitions = cluster, topic, partitions
        self.dir = history_dir
        self.stop_file = history_dir / "stop"
        self.stop_file.unlink(missing_ok=True)  # an earlier run's in the same CHAOS_OUT
        self.plan: list[tuple[str, str, list[str]]] = []  # (role, name, command prefix)
        self.plan += [("producer", f"p{i}", []) for i in range(control_producers)]
        self.plan += [("producer", f"p-{node(b)}", cluster.net.prefix(node(b))) for b in BROKERS]
        self.plan += [("consumer", f"c{i}", []) for i in range(consumers)]
        self.plan += [("transformer", f"t{i}", []) for i in range(transformers)]
        self.transformers = transformers
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
        checker reports them). With transformers, the output topic read_committed up to its
        last stable offset too, and their group's committed offsets."""
        record = Recorder(self.dir / "final.jsonl", "final")
        conf = {"bootstrap.servers": self.cluster.bootstrap, "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "enable.partition.eof": True}
        try:
            for p, low, high, records in self._read_all(conf, self.topic, "read_uncommitted",
                                                        record, timeout):
                record("final", partition=p, records=[[o, v] for o, _, v in records], low=low,
                       high=high)
                record("final-producers", partition=p, records=self._producers_of(p, high))
            self._committed(conf, GROUP, self.topic, "final-commit", record, timeout)
            if self.transformers:
                for p, _, _, records in self._read_all(conf, output_topic(self.topic),
                                                       "read_committed", record, timeout):
                    record("final-out", partition=p, records=records)
                self._committed(conf, EOS_GROUP, self.topic, "final-eos-commit", record, timeout)
        finally:
            record.close()

    def _read_all(self, conf: dict, topic: str, isolation: str, record: Recorder,
                  timeout: float):
        """(partition, low, high, [[offset, key, value], ...]) of each partition of `topic` read whole
        (to the high watermark, or the LSO with read_committed); a partition that cannot be
        read is recorded as a final-error instead."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        reader = Consumer({**conf, "group.id": "chaos-final-reader",
                           "isolation.level": isolation})
        try:
            for p in range(self.partitions):
                tp = TopicPartition(topic, p)
                try:
                    low, high = reader.get_watermark_offsets(tp, timeout=timeout)
                except Exception as exc:  # noqa: BLE001 - recorded as missing
                    record("final-error", topic=topic, partition=p, error=repr(exc))
                    continue
                # the end of a read_committed read is the LSO, signalled by the EOF event
                records, done = [], high <= low
                reader.assign([TopicPartition(topic, p, low)])
                deadline = time.monotonic() + timeout
                while not done and time.monotonic() < deadline:
                    for m in reader.consume(500, timeout=1.0):
                        if m.error():
                            done = (m.error().code() == KafkaError._PARTITION_EOF
                                    and (m.topic(), m.partition()) == (topic, p))
                            continue
                        key = m.key().decode() if m.key() is not None else None
                        records.append([m.offset(), key, m.value().decode()])
                        done = m.offset() + 1 >= high
                reader.unassign()
                if done:
                    yield p, low, high, records
                else:
                    record("final-error", topic=topic, partition=p,
                           error=f"read {len(records)} of {low}..{high}")
        finally:
            reader.close()

    def _committed(self, conf: dict, group: str, topic: str, event: str, record: Recorder,
                   timeout: float) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({**conf, "group.id": group})
        try:
            got = consumer.committed([TopicPartition(topic, p) for p in range(self.partitions)],
                                     timeout=timeout)
            record(event, offsets={str(tp.partition): tp.offset for tp in got})
        except Exception as exc:  # noqa: BLE001
            record("final-error", error=f"committed offsets of {group}: {exc!r}")
        finally:
            consumer.close()
