"""The streaming sink's exactlyOnce mode against a real broker process and real Spark: the
output read with read_committed holds each input record once, when a micro-batch is replayed
(its commit-log entry removed) and when the driver is killed with SIGKILL at random points and
once between the tasks' transactions and the checkpoint's commit log, and when Python workers
running write tasks are killed with SIGKILL before, during and after their transactions (an
executor dying: Spark runs the task again).

BROOK_SPARK_EOS_KILLS=N runs the kill test with N random kills instead of 2 (each restart of
the driver costs Spark's start, 20-40 s on a loaded 2-core machine).
"""

from __future__ import annotations

import collections
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402

from brook.spark.options import OptionError  # noqa: E402
from tests.support.broker_harness import BrokerProcess, create_topic_confluent  # noqa: E402

pytestmark = pytest.mark.timeout(600)

ROOT = pathlib.Path(__file__).resolve().parents[2]


def eos_broker(data_dir) -> BrokerProcess:
    return BrokerProcess(data_dir, overrides={
        "num.partitions": 3, "offsets.topic.num.partitions": 3,
        "transaction.state.log.num.partitions": 3, "group.initial.rebalance.delay.ms": 0})


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with eos_broker(tmp_path_factory.mktemp("broker-spark-eos")) as proc:
        yield proc


@pytest.fixture
def own_kafka(tmp_path):
    """A broker of the test's own: the kill tests use no SparkSession of the run (their
    drivers are processes of their own), so they stay out of the xdist group that holds the
    session's tests and run on other workers beside them."""
    with eos_broker(tmp_path / "broker") as proc:
        yield proc


def fill(kafka, topic: str, n: int) -> list[bytes]:
    create_topic_confluent(kafka.bootstrap, topic, partitions=3)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5})
    values = [b"record-%05d" % i for i in range(n)]
    for v in values:
        producer.produce(topic, v, key=v)
    assert producer.flush(30) == 0
    return values


def read_committed(kafka, topic: str, partitions: int = 3) -> collections.Counter:
    """Every value of ``topic`` a read_committed consumer sees, with its count."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "eos-checker",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: collections.Counter = collections.Counter()
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise RuntimeError(msg.error())
            seen[msg.value()] += 1
    finally:
        consumer.close()
    assert len(at_end) == partitions, "the output's read did not reach its end"
    return seen


def copy_query(spark, kafka, source: str, out: str, checkpoint, exactly_once: bool):
    return (spark.readStream.format("brook").option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("subscribe", source).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "100").load()
            .selectExpr("key", "value")
            .writeStream.format("brook").option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("topic", out).option("exactlyOnce", str(exactly_once).lower())
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())


def run_to_end(query) -> None:
    assert query.awaitTermination(180), "the query did not finish"
    assert query.exception() is None, query.exception()


def test_exactly_once_query_copies_each_record_once(spark, kafka, tmp_path):
    values = fill(kafka, "eos-in", 300)
    create_topic_confluent(kafka.bootstrap, "eos-out", partitions=3)
    run_to_end(copy_query(spark, kafka, "eos-in", "eos-out", tmp_path / "ck", True))
    assert read_committed(kafka, "eos-out") == collections.Counter(values)


@pytest.mark.parametrize("exactly_once", [True, False])
def test_a_replayed_micro_batch_is_written_once(spark, kafka, tmp_path, exactly_once):
    """Removing the last commits/<B> makes Spark run batch B again on restart, as after a
    driver dying between the tasks' transactions and the commit log. Without exactlyOnce the
    batch is written twice (at least once), which shows the test sees a replay."""
    source, out = f"replay-in-{exactly_once}", f"replay-out-{exactly_once}"
    values = fill(kafka, source, 300)
    create_topic_confluent(kafka.bootstrap, out, partitions=3)
    checkpoint = tmp_path / "ck"
    run_to_end(copy_query(spark, kafka, source, out, checkpoint, exactly_once))
    last = max(int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)

    query = copy_query(spark, kafka, source, out, checkpoint, exactly_once)
    run_to_end(query)
    assert [p["batchId"] for p in query.recentProgress][:1] == [last]  # B ran again
    seen = read_committed(kafka, out)
    if exactly_once:
        assert seen == collections.Counter(values)
    else:
        assert set(seen) == set(values) and sum(seen.values()) > len(values)


def test_exactly_once_refuses_batch_writes_and_needs_the_topic_option(spark, kafka):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="exactlyOnce is for streaming writes"):
        (df.write.format("brook").mode("append").option("kafka.bootstrap.servers",
                                                          kafka.bootstrap)
         .option("topic", "eos-out").option("exactlyOnce", "true").save())
    from brook.spark.options import SinkOptions

    with pytest.raises(OptionError, match="exactlyOnce needs the option topic"):
        SinkOptions.parse({"kafka.bootstrap.servers": "x:1", "exactlyOnce": "true"})


# ---------------------------------------------------------------- the driver killed


class Driver:
    """tests/spark/eos_driver.py as a process group of its own (Python and Spark's JVM)."""

    def __init__(self, kafka, source, out, checkpoint, exactly_once=True,
                 slow_tasks=False) -> None:
        self.stderr = open(pathlib.Path(checkpoint).parent / "driver.stderr", "a")
        self.events = pathlib.Path(checkpoint).parent / "driver.events"
        self.events.write_text("")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.spark.eos_driver", kafka.bootstrap, source, out,
             str(checkpoint), "100", str(exactly_once).lower(), str(self.events),
             str(slow_tasks).lower()],
            cwd=ROOT, env=env, stdout=self.stderr, stderr=self.stderr,
            start_new_session=True)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self.stderr.close()

    def wait_for_line(self, prefix: str, timeout: float) -> str | None:
        """The first line of the driver's events starting with ``prefix``, polled for."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.events.read_text().splitlines():
                if line.startswith(prefix):
                    return line
            if self.proc.poll() is not None:
                return None
            time.sleep(0.02)
        return None


@pytest.mark.spark
def test_driver_killed_at_random_points_and_in_the_commit_window(own_kafka, tmp_path):
    kafka = own_kafka
    kills = int(os.environ.get("BROOK_SPARK_EOS_KILLS", "2"))
    values = fill(kafka, "killed-in", 600)  # 100 per trigger: 6 micro-batches
    create_topic_confluent(kafka.bootstrap, "killed-out", partitions=3)
    checkpoint = tmp_path / "ck"
    rng = random.Random(29)

    # In the window: the tasks' transactions are committed, commits/<B> is not written yet.
    driver = Driver(kafka, "killed-in", "killed-out", checkpoint)
    try:
        line = driver.wait_for_line("committed-tasks", 180)
        assert line is not None, "the driver never finished a micro-batch"
        batch = int(line.split()[1])
        driver.kill()
    finally:
        driver.kill()
    assert not (checkpoint / "commits" / str(batch)).exists()

    for _ in range(kills):
        driver = Driver(kafka, "killed-in", "killed-out", checkpoint)
        try:
            time.sleep(rng.uniform(4, 14))
        finally:
            driver.kill()

    driver = Driver(kafka, "killed-in", "killed-out", checkpoint)
    try:
        assert driver.wait_for_line("done", 300) == "done", "the last run did not finish"
        assert driver.proc.wait(60) == 0
    finally:
        driver.kill()
    assert read_committed(kafka, "killed-out") == collections.Counter(values)


def _running_tasks(events: pathlib.Path) -> list[tuple[int, str]]:
    """(pid, stage) of the write tasks started and not finished: stage "start" before the
    transaction, "txn" inside it, "written" after its commit."""
    state: dict[int, str] = {}
    for line in events.read_text().splitlines():
        kind, _, pid = line.partition(" ")
        if kind in ("task-start", "task-txn", "task-written"):
            state[int(pid)] = kind.removeprefix("task-")
        elif kind == "task-end":
            state.pop(int(pid), None)
    return list(state.items())


@pytest.mark.spark
def test_python_workers_killed_in_their_tasks(own_kafka, tmp_path):
    """Each kill fails a task attempt (local[2,3] tries a task three times); the next attempt
    fences the killed one's open transaction, or finds its batch committed and writes nothing.
    After each kill two tasks end before the next, so no task is killed three times."""
    kafka = own_kafka
    values = fill(kafka, "workers-in", 600)  # 100 per trigger: 6 micro-batches
    create_topic_confluent(kafka.bootstrap, "workers-out", partitions=3)
    rng = random.Random(31)
    stages = ["start", "txn", "written", "txn", "written"]
    driver = Driver(kafka, "workers-in", "workers-out", tmp_path / "ck", slow_tasks=True)
    killed: list[tuple[int, str]] = []
    try:
        deadline = time.monotonic() + 240
        ends_before = 0
        while (len(killed) < len(stages) and time.monotonic() < deadline
               and driver.proc.poll() is None):
            time.sleep(rng.uniform(0.05, 0.3))
            if driver.events.read_text().count("task-end") < ends_before + 2:
                continue
            stage = stages[len(killed)]
            chosen = [pid for pid, s in _running_tasks(driver.events)
                      if s == stage and pid not in {k for k, _ in killed}]
            if not chosen:
                continue
            pid = rng.choice(chosen)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.append((pid, stage))
            ends_before = driver.events.read_text().count("task-end")
        assert len(killed) == len(stages), f"only {killed} killed before the query ended"
        assert driver.wait_for_line("done", 300) == "done", "the query did not finish"
        assert driver.proc.wait(60) == 0
    finally:
        driver.kill()
    assert read_committed(kafka, "workers-out") == collections.Counter(values)
