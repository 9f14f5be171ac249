"""DescribeLogDirs against a real broker with two log dirs: each dir lists the partitions it
holds with their sizes on disk, filtered by topic and partition; v4 adds the volume's bytes."""

from __future__ import annotations

import os
import shutil

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType

from brook.protocol.messages import make
from tests.support.broker_harness import BrokerProcess, confluent_produce, create_topic_confluent, make_records
from tests.support.kafka_wire import WireClient


def request(version: int, topics):
    m = load_payload_module(35, version, EntityType.request)
    return make(m.DescribeLogDirsRequest, topics=None if topics is None else tuple(
        make(m.DescribableLogDirTopic, topic=t, partitions=tuple(ps)) for t, ps in topics.items()))


def on_disk(log_dir: str, topic: str, index: int) -> int:
    path = os.path.join(log_dir, f"{topic}-{index}")
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path) if n.endswith(".log"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("log-dirs")
    dirs = [str(data / "a"), str(data / "b")]
    with BrokerProcess(data, overrides={"log.dirs": ",".join(dirs), "num.partitions": 1}) as b:
        b.dirs = dirs
        create_topic_confluent(b.bootstrap, "sized", 4)
        for p in range(4):
            delivery = confluent_produce(b.bootstrap, "sized", make_records(20 * (p + 1), seed=p), partition=p)
            assert not delivery.errors
        yield b


def test_every_partition_in_the_dir_that_holds_it(broker):
    with WireClient(broker.bootstrap) as client:
        resp = client.request(request(4, None))
    assert resp.error_code == 0
    assert sorted(r.log_dir for r in resp.results) == sorted(broker.dirs)
    seen = {}
    for r in resp.results:
        assert r.error_code == 0
        usage = shutil.disk_usage(r.log_dir)
        assert r.total_bytes == usage.total and 0 < r.usable_bytes <= usage.total
        for t in r.topics:
            for p in t.partitions:
                seen[(t.name, p.partition_index)] = (r.log_dir, p.partition_size)
                assert p.offset_lag == 0 and not p.is_future_key
    sized = {k: v for k, v in seen.items() if k[0] == "sized"}
    assert sorted(sized) == [("sized", p) for p in range(4)]
    for (topic, index), (log_dir, size) in sized.items():
        assert size == on_disk(log_dir, topic, index) > 0
    assert len({log_dir for log_dir, _ in sized.values()}) == 2  # spread over both dirs


@pytest.mark.parametrize("version", [1, 2, 3])
def test_named_partitions_only_and_older_versions(broker, version):
    with WireClient(broker.bootstrap) as client:
        resp = client.request(request(version, {"sized": [1, 3, 9], "missing": [0]}))
    listed = sorted((t.name, p.partition_index) for r in resp.results for t in r.topics for p in t.partitions)
    assert listed == [("sized", 1), ("sized", 3)]


def test_kafka_python_describe_log_dirs(broker):
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        answer = admin.describe_log_dirs({"sized": [0, 1, 2, 3]})
    finally:
        admin.close()
    [per_broker] = answer
    sizes = {(t["name"], p["partition_index"]): (d["log_dir"], p["partition_size"])
             for d in per_broker["log_dirs"] for t in d["topics"] for p in t["partitions"]}
    assert sorted(sizes) == [("sized", p) for p in range(4)]
    for (topic, index), (log_dir, size) in sizes.items():
        assert size == on_disk(log_dir, topic, index)
