"""The nemesis run: three brokers and ZooKeeper in network namespaces, producers and a consumer
group working while faults of every kind come and go for CHAOS_SECONDS, then everything healed,
the log read back, and the history checked (tests/chaos/checker.py).

    make chaos                                   # one run, CHAOS_SEED and CHAOS_SECONDS
    CHAOS_SEED=7 CHAOS_SECONDS=300 make chaos    # replay seed 7 for five minutes
    CHAOS_FAULTS=kill,pause make chaos           # only some kinds
    CHAOS_OUT=/tmp/run7 make chaos               # keep the history and the brokers' logs there
    CHAOS_TRANSFORMERS=0 make chaos              # without the transactional consume-transform-produce

The test prints the checker's summary and the per-kind availability table.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import pytest

from tests.chaos import checker, history
from tests.chaos.cluster import ChaosCluster
from tests.chaos.faults import KINDS, Nemesis
from tests.chaos.net import missing_reason
from tests.chaos.workload import Workload, output_topic
from tests.support.zookeeper_harness import missing_reason as zookeeper_missing

pytestmark = pytest.mark.broker

CHAOS_SECONDS = float(os.environ.get("CHAOS_SECONDS", "60"))
CHAOS_SEED = int(os.environ.get("CHAOS_SEED", "1"))
CHAOS_FAULTS = [k for k in os.environ.get("CHAOS_FAULTS", "").split(",") if k]
CHAOS_TRANSFORMERS = int(os.environ.get("CHAOS_TRANSFORMERS", "1"))
PARTITIONS = 3
RECOVERY_SECONDS = 90


@pytest.fixture
def cluster(tmp_path):
    reason = missing_reason() or zookeeper_missing()
    if reason:
        pytest.skip(reason)
    unknown = set(CHAOS_FAULTS) - set(KINDS)
    assert not unknown, f"CHAOS_FAULTS names unknown kinds {unknown}; kinds: {sorted(KINDS)}"
    built = ChaosCluster(tmp_path / "cluster")
    try:
        built.up()
        yield built
    finally:
        out = os.environ.get("CHAOS_OUT")
        built.down(keep=Path(out) if out else None)
        if out:  # the brokers' and ZooKeeper's logs beside the history
            for b, proc in built.brokers.items():
                if proc.stderr_path.exists():
                    shutil.copy(proc.stderr_path, Path(out) / f"broker{b}.stderr.log")
            if built.zk.log_path.exists():
                shutil.copy(built.zk.log_path, Path(out) / "zookeeper.log")


def create_topics(bootstrap: str, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(t, PARTITIONS, 3, config={"min.insync.replicas": "2"}) for t in topics],
        operation_timeout=30, request_timeout=40)
    for future in futures.values():
        future.result(timeout=60)


def wait_until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.5)
    return False


# the faults, the recovery wait, the clients' stop and the final read
@pytest.mark.timeout(CHAOS_SECONDS + RECOVERY_SECONDS + 400)
def test_no_acknowledged_write_or_commit_is_lost_under_faults(cluster, tmp_path):
    out = Path(os.environ.get("CHAOS_OUT") or tmp_path / "history")
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.jsonl"):
        stale.unlink()
    topic = f"chaos-{uuid.uuid4().hex[:6]}"
    topics = [topic, output_topic(topic)] if CHAOS_TRANSFORMERS else [topic]
    create_topics(cluster.bootstrap, topics)
    assert wait_until(lambda: cluster.fully_replicated(topics, dict.fromkeys(topics, PARTITIONS)),
                      60), cluster.tails()

    workload = Workload(cluster, topic, PARTITIONS, out, transformers=CHAOS_TRANSFORMERS)
    nemesis = Nemesis(cluster, topic, CHAOS_SEED, out, kinds=CHAOS_FAULTS or None)
    workload.start()
    try:
        time.sleep(3)  # acknowledgements before the first fault
        nemesis.run(CHAOS_SECONDS)
        # healed: the clients go on until the cluster is whole again, then a little more
        recovered = wait_until(
            lambda: cluster.fully_replicated(topics, dict.fromkeys(topics, PARTITIONS)),
            RECOVERY_SECONDS)
        time.sleep(5)
    finally:
        workload.stop()
    workload.final_read()

    report = checker.check(history.load(out))
    summary = (f"seed {CHAOS_SEED}, {CHAOS_SECONDS:g} s, history in {out}\n"
               f"recovered to a full ISR: {recovered}\n{report.summary()}")
    print(summary)
    assert report.counts["acknowledged"] > 0, summary + "\n" + cluster.tails()
    assert report.valid, summary
    assert recovered, summary + "\n" + cluster.tails()
