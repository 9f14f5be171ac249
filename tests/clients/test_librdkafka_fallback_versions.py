"""librdkafka (confluent-kafka and kcat) told not to ask for API versions and to assume an old
broker (``api.version.request=false``, ``broker.version.fallback``), against a real broker.

With fallback 0.9.0 it produces legacy message sets of magic 0 (Produce v1) and fetches them
(Fetch v1), which brook converts to and from its v2 log: each codec librdkafka has for that
format is produced, consumed in a group with commits, and read back equal, and what it wrote is
read by a current client and the reverse; the broker's conversion counts show the old versions
were used. With fallback 0.10.0 or 0.11.0 librdkafka asks for API versions all the same (its
documentation: any fallback from 0.10 on enables ApiVersionRequest, which 0.10.0 brokers
answer), so it then speaks current versions and nothing is converted: held here too."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import BROKER_DEFAULTS
from tests.support.broker_harness import BrokerProcess, free_port

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

FALLBACKS = ["0.9.0", "0.10.0", "0.11.0"]
CONVERTED = {"0.9.0": True, "0.10.0": False, "0.11.0": False}  # see the module's docstring
CODECS = ["none", "gzip", "snappy", "lz4"]  # zstd needs a 2.1 broker
KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """The module's broker, with metrics: its conversion counts show the old versions in use."""
    overrides = dict(BROKER_DEFAULTS, **{"metrics.port": free_port()})
    proc = BrokerProcess(tmp_path_factory.mktemp("broker-fallback"), overrides=overrides)
    proc.start()
    proc.metrics_port = overrides["metrics.port"]
    try:
        yield proc
    finally:
        proc.close()


def conversions(broker, topic: str) -> tuple[float, float]:
    """(records up-converted from Produce v0-v2, records down-converted for Fetch v0-v3)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("topic") == topic:
                found[sample.name] = sample.value
    return (found.get("brook_topic_produce_message_conversions_total", 0),
            found.get("brook_topic_fetch_message_conversions_total", 0))


def fallback(broker, version: str) -> dict:
    return {"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4",
            "api.version.request": False, "broker.version.fallback": version}


def produce(config: dict, topic: str, records: list[tuple[bytes, bytes]], codec: str) -> None:
    producer = Producer({**config, "compression.codec": codec, "linger.ms": 20})
    for key, value in records:
        producer.produce(topic, value, key=key, partition=0)
    assert producer.flush(30) == 0


def consume(config: dict, topic: str, n: int, group: str | None = None) -> list:
    consumer = Consumer({**config, "group.id": group or f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    if group is None:
        consumer.assign([TopicPartition(topic, 0, 0)])
    else:
        consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        m = consumer.poll(1.0)
        if m is not None:
            assert m.error() is None, m.error()
            got.append(m)
    if group is not None and got:
        consumer.commit(asynchronous=False)
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        assert committed.offset == got[-1].offset() + 1
    consumer.close()
    return got


def records(prefix: str, n: int) -> list[tuple[bytes, bytes]]:
    # values long and alike enough that librdkafka does compress them
    return [(f"{prefix}-{i}".encode(), f"value {i} ".encode() * 20) for i in range(n)]


@pytest.mark.parametrize("version", FALLBACKS)
def test_fallback_produces_each_codec_and_consumes_in_a_group(broker, version):
    config = fallback(broker, version)
    topic = f"rf-{uuid.uuid4().hex[:6]}"
    Producer({"bootstrap.servers": broker.bootstrap}).list_topics(topic, timeout=10)  # creates it
    sent = []
    for codec in CODECS:
        batch = records(codec, 25)
        produce(config, topic, batch, codec)
        sent += batch
    got = consume(config, topic, len(sent), group=f"g-{uuid.uuid4().hex[:6]}")
    assert [(m.key(), m.value()) for m in got] == sent
    assert [m.offset() for m in got] == list(range(len(sent)))
    produced, fetched = conversions(broker, topic)
    if CONVERTED[version]:
        assert produced == len(sent) and fetched >= len(sent)  # (a wrapper may be sent twice)
    else:
        assert (produced, fetched) == (0, 0)
    ts_type, ts = got[0].timestamp()
    if version == "0.9.0":  # magic 0 has no timestamps
        assert ts_type == confluent_kafka.TIMESTAMP_NOT_AVAILABLE
    else:
        assert ts_type == confluent_kafka.TIMESTAMP_CREATE_TIME and ts > 0


@pytest.mark.parametrize("version", FALLBACKS)
def test_fallback_and_current_clients_read_each_other(broker, version):
    old = fallback(broker, version)
    current = {"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4"}
    old_topic, new_topic = f"rx-{uuid.uuid4().hex[:6]}", f"rx-{uuid.uuid4().hex[:6]}"
    for topic in (old_topic, new_topic):
        Producer(current).list_topics(topic, timeout=10)
    sent = records("x", 40)
    produce(old, old_topic, sent, "lz4")
    assert [(m.key(), m.value()) for m in consume(current, old_topic, len(sent))] == sent
    assert conversions(broker, old_topic) == ((len(sent) if CONVERTED[version] else 0), 0)
    produce(current, new_topic, sent, "lz4")
    assert [(m.key(), m.value()) for m in consume(old, new_topic, len(sent))] == sent
    produced, fetched = conversions(broker, new_topic)
    assert produced == 0 and (fetched >= len(sent) if CONVERTED[version] else fetched == 0)


# --- kcat ---------------------------------------------------------------------------------------


def kcat(broker, version: str, *args: str, input: str | None = None) -> str:
    cmd = [KCAT, "-b", broker.bootstrap, "-X", "broker.address.family=v4",
           "-X", "api.version.request=false", "-X", f"broker.version.fallback={version}", *args]
    proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{' '.join(cmd)}: {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make tools)")
@pytest.mark.parametrize("version", FALLBACKS)
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_with_a_fallback_version_produces_and_consumes(broker, version, codec):
    topic = f"rk-{codec}-{version.replace('.', '')}"
    Producer({"bootstrap.servers": broker.bootstrap}).list_topics(topic, timeout=10)
    lines = [f"key-{i}:value {i} " + "abc" * (i % 7) for i in range(300)]
    kcat(broker, version, "-P", "-t", topic, "-p", "0", "-K:", "-z", codec, "-X", "linger.ms=5",
         input="\n".join(lines) + "\n")
    out = kcat(broker, version, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J", "-q")
    got = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [f"{m['key']}:{m['payload']}" for m in got] == lines
    assert [m["offset"] for m in got] == list(range(len(lines)))
    produced, fetched = conversions(broker, topic)
    if CONVERTED[version]:
        assert produced == len(lines) and fetched >= len(lines)
    else:
        assert (produced, fetched) == (0, 0)
