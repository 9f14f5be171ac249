"""brook's Spark integration on a Spark standalone cluster of separate processes against a real
broker process: a master and two workers of one core each (tests/spark/standalone.py), whose
executors are JVMs of their own with Python workers of their own, and an application driver in
a process of its own (tests/spark/cluster_job.py). brook reaches the executors as users ship
it: a zip in ``spark.submit.pyFiles`` (the cluster's processes do not have this checkout on
their Python path).

- format("brook"), brook.spark.read / read_stream and the sink, batch and streaming, with
  group commits;
- an executor JVM killed with SIGKILL in the middle of a streaming micro-batch: Spark runs its
  tasks again on the other worker; the exactly-once output holds each input record once and
  the group's committed offsets reach the input's end;
- the same pipelines through Spark Connect: a client (tests/spark/connect_job.py) of pyspark's
  Spark Connect server, which has brook on its Python path (a streaming read's tasks do not see
  what the client ships with ``spark.addArtifacts``; batch tasks do).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer  # noqa: E402
from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

import brook  # noqa: E402
from tests.spark.standalone import ConnectServer, StandaloneCluster, java_missing  # noqa: E402
from tests.support.broker_harness import BrokerProcess, create_topic_confluent  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def brook_zip(tmp_path_factory) -> str:
    """brook's package as a zip, what ``spark.submit.pyFiles`` ships to executors."""
    package = Path(brook.__file__).parent
    path = tmp_path_factory.mktemp("pyfiles") / "brook.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for file in sorted(package.rglob("*.py")):
            z.write(file, file.relative_to(package.parent))
    return str(path)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = java_missing()
    if reason:
        pytest.skip(f"no Spark standalone cluster: {reason}")
    with StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), workers=2,
                           cores=1) as c:
        yield c


@pytest.fixture(scope="module")
def connect(tmp_path_factory):
    reason = java_missing()
    if reason:
        pytest.skip(f"no Spark Connect server: {reason}")
    pytest.importorskip("grpc", reason="Spark Connect's client needs grpcio (the spark extra)")
    # brook installed beside the server: Spark 4.3 gives a Python streaming source's tasks
    # none of the session's artifacts (docs/spark.md, Spark Connect)
    with ConnectServer(tmp_path_factory.mktemp("spark-connect"), cores=2,
                       python_path=str(Path(brook.__file__).parent.parent)) as server:
        yield server


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker-spark-cluster"), overrides={
            "num.partitions": 2, "offsets.topic.num.partitions": 3,
            "transaction.state.log.num.partitions": 3,
            "group.initial.rebalance.delay.ms": 0}) as proc:
        yield proc


def driver(cluster, brook_zip, kafka, work: Path, job: str, *args: str) -> subprocess.Popen:
    work.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark.cluster_job", cluster.url, brook_zip,
         kafka.bootstrap, str(work), job, *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=open(work / "driver.log", "wb"), text=True)


def result_of(proc: subprocess.Popen, work: Path, timeout: float = 600) -> dict:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    log = (work / "driver.log").read_text(errors="replace")[-4000:]
    assert proc.returncode == 0 and lines, f"the driver failed ({proc.returncode}):\n{log}"
    return json.loads(lines[-1][len("RESULT "):])


def produce(kafka, topic: str, n: int) -> set[bytes]:
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5})
    values = [b"%s-%06d" % (topic.encode(), i) for i in range(n)]
    for v in values:
        producer.produce(topic, key=v, value=v)
    assert producer.flush(30) == 0
    return set(values)


def read_all(kafka, topic: str) -> list[bytes]:
    """Every value of the topic, read_committed, from the beginning to the end."""
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"check-{time.time()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        partitions = c.list_topics(topic, timeout=10).topics[topic].partitions
        c.assign([TopicPartition(topic, p, 0) for p in partitions])
        done, values = set(), []
        deadline = time.monotonic() + 60
        while len(done) < len(partitions) and time.monotonic() < deadline:
            for m in c.consume(500, timeout=1):
                if m.error():
                    if m.error().code() == -191:  # _PARTITION_EOF
                        done.add(m.partition())
                    continue
                values.append(m.value())
        assert len(done) == len(partitions), f"could not read {topic} to its end"
        return values
    finally:
        c.close()


def committed(kafka, group: str) -> dict[str, dict[str, int]]:
    client = AdminClient({"bootstrap.servers": kafka.bootstrap})
    result = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[
        group].result(30)
    return {f"{tp.topic}-{tp.partition}": tp.offset for tp in result.topic_partitions
            if tp.offset >= 0}


def end_offsets(kafka, topic: str, partitions: int = 2) -> dict[str, int]:
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "check-watermarks"})
    try:
        return {f"{topic}-{p}": c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        c.close()


def test_pipelines_run_on_a_standalone_cluster(cluster, brook_zip, kafka, tmp_path):
    create_topic_confluent(kafka.bootstrap, "in", partitions=2)
    values = produce(kafka, "in", 2000)
    got = result_of(driver(cluster, brook_zip, kafka, tmp_path, "pipelines"), tmp_path)
    # the executors imported the brook the application shipped, not one of their own
    assert_shipped(got["brook_files"])
    assert got["executors"] == 2
    check_pipelines(kafka, got, "in", values, "cluster-")


def assert_shipped(files: list[str]) -> None:
    assert files and all(f.endswith(os.path.join("brook.zip", "brook", "__init__.py"))
                         for f in files), files


def check_pipelines(kafka, got: dict, source: str, values: set[bytes], prefix: str) -> None:
    assert got["batch_format_rows"] == got["batch_read_rows"] == 2000
    assert got["batch_read_distinct"] == 2000
    for name in ("batch-out", "stream-out", "format-out"):
        out = read_all(kafka, prefix + name)
        assert len(out) == 2000 and set(out) == values, name
    for name in ("stream-out", "format-out"):
        assert got[f"{name}_input_rows"] == [700, 700, 600], got  # maxOffsetsPerTrigger 700
        behind = [int(lag["maxOffsetsBehindLatest"]) for lag in got[f"{name}_lag"]]
        assert behind == sorted(behind, reverse=True) and behind[-1] == 0, got
    for group in ("read-stream", "format"):
        assert committed(kafka, prefix + group) == end_offsets(kafka, source), group


def executor_of(cluster, pid: int) -> int | None:
    """The executor JVM a Python worker runs under."""
    executors = cluster.executors()
    while pid > 1:
        if pid in executors:
            return pid
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return None
    return None


def test_an_executor_killed_mid_batch(cluster, brook_zip, kafka, tmp_path):
    create_topic_confluent(kafka.bootstrap, "kin", partitions=2)
    create_topic_confluent(kafka.bootstrap, "kout", partitions=2)
    values = produce(kafka, "kin", 3000)
    events = tmp_path / "events"
    events.touch()
    proc = driver(cluster, brook_zip, kafka, tmp_path, "copy", "kin", "kout",
                  str(tmp_path / "checkpoint"), "1000", str(events))
    killed = None
    deadline = time.monotonic() + 300
    while killed is None and proc.poll() is None and time.monotonic() < deadline:
        for line in events.read_text().splitlines():
            _, pid, batch, partition, _attempt, executor = line.split()
            if batch == "1":  # a task of the second micro-batch is reading
                killed = executor_of(cluster, int(pid))
                if killed:
                    killed_task, killed_executor = partition, executor
                    os.kill(killed, signal.SIGKILL)
                    break
        time.sleep(0.1)
    assert killed, f"no task of micro-batch 1 seen: {events.read_text()}"
    got = result_of(proc, tmp_path)
    # the task that ran on the dead executor ran again, on another executor
    tasks = [line.split()[2:] for line in events.read_text().splitlines()]
    retries = [t for t in tasks if t[0] == "1" and t[1] == killed_task and t[2] != "0"]
    assert retries and all(t[3] != killed_executor for t in retries), tasks
    out = read_all(kafka, "kout")
    assert len(out) == 3000 and set(out) == values
    assert committed(kafka, "copy") == end_offsets(kafka, "kin")
    assert sum(got["input_rows"]) >= 3000


def test_pipelines_run_through_spark_connect(connect, brook_zip, kafka, tmp_path):
    create_topic_confluent(kafka.bootstrap, "cin", partitions=2)
    values = produce(kafka, "cin", 2000)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.spark.connect_job", connect.url, brook_zip,
         kafka.bootstrap, str(tmp_path)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=open(tmp_path / "driver.log", "wb"), text=True)
    got = result_of(proc, tmp_path)
    assert got["session"] == "pyspark.sql.connect.session"
    assert_shipped(got["brook_files"])  # batch tasks see the session's artifacts
    check_pipelines(kafka, got, "cin", values, "connect-")
