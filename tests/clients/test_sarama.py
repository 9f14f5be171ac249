"""sarama (Shopify's Go client, as Debian packages it) against a broker process, told the broker
runs Kafka 2.0: it produces with each codec, reads the records back, commits through
its offset manager, reads the commits back and asks for the oldest and newest offsets. A
current confluent-kafka consumer then reads the same records. Told a Kafka from before 0.11, it
produces and consumes legacy message sets, which brook converts.

The program is tests/clients/sarama/main.go; `make tools` installs Go and sarama from Debian
and builds it into .tools/sarama-check (GOPATH mode, against the source tree the package
installs: no module download)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.broker_harness import confluent_consume, create_topic_confluent

SARAMA_CHECK = Path(__file__).resolve().parents[2] / ".tools" / "sarama-check"

pytestmark = pytest.mark.skipif(
    not SARAMA_CHECK.exists(),
    reason="sarama-check is not built: make tools installs golang-go and "
           "golang-github-shopify-sarama-dev from Debian and builds it (skipped where it cannot)")

PARTITIONS = 2
RECORDS = 120


def sarama(broker, topic: str, version: str, codec: str = "none", records: int = RECORDS,
           read: int = -1, group: str = "sarama-group") -> dict:
    cmd = [str(SARAMA_CHECK), "-bootstrap", broker.bootstrap, "-topic", topic,
           "-partitions", str(PARTITIONS), "-group", group, "-version", version,
           "-records", str(records), "-read", str(read), "-codec", codec]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


def expected(i: int) -> tuple[str, str]:
    """The key and value sarama-check gives its record i."""
    return f"k-{i}", f"v-{i}-" + "0" * max(i % 40, 1)


@pytest.mark.parametrize("version,codec", [
    ("2.0.0", "none"), ("2.0.0", "gzip"), ("2.0.0", "snappy"), ("2.0.0", "lz4"),
])
def test_sarama_produces_consumes_commits_and_lists_offsets(broker, version, codec):
    topic = f"sarama-{version}-{codec}"
    create_topic_confluent(broker.bootstrap, topic, PARTITIONS)
    out = sarama(broker, topic, version, codec, group=f"g-{topic}")

    produced = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in out["produced"])
    assert sorted((k, v) for _, _, k, v in produced) == sorted(expected(i) for i in range(RECORDS))
    for p in range(PARTITIONS):  # offsets 0.. in each partition, in the order sent
        offsets = [o for q, o, _, _ in produced if q == p]
        assert offsets == list(range(RECORDS // PARTITIONS))
    consumed = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in out["consumed"])
    assert consumed == produced
    ends = {str(p): RECORDS // PARTITIONS for p in range(PARTITIONS)}
    assert out["newest"] == ends and out["oldest"] == {str(p): 0 for p in range(PARTITIONS)}
    assert out["committed"] == ends
    assert all(r["timestamp_ms"] > 0 for r in out["consumed"])

    # The same records, read by a current confluent-kafka consumer.
    theirs = confluent_consume(broker.bootstrap, topic, {p: RECORDS // PARTITIONS
                                                         for p in range(PARTITIONS)})
    assert sorted((m.partition, m.offset, m.key.decode(), m.value.decode()) for m in theirs) == produced


@pytest.mark.parametrize("version", ["2.0.0", "2.1.0"])
def test_zstd_in_a_produce_below_v7_is_refused(broker, version):
    """Produce below v7 may not carry zstd: Kafka answers UNSUPPORTED_COMPRESSION_TYPE. This
    sarama sends Produce v3 whatever the version it is told, so its zstd never worked with
    Kafka either."""
    topic = f"sarama-zstd-{version}"
    create_topic_confluent(broker.bootstrap, topic, PARTITIONS)
    cmd = [str(SARAMA_CHECK), "-bootstrap", broker.bootstrap, "-topic", topic, "-partitions",
           str(PARTITIONS), "-version", version, "-records", "4", "-codec", "zstd"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "does not support the compression type" in proc.stderr, proc.stderr


# Told a Kafka from before 0.11, sarama produces and fetches legacy message sets (Produce and
# Fetch v0 for 0.8.2, v1 for 0.9, v2 for 0.10.0, and Fetch v3 for 0.10.1), which brook converts
# to and from its v2 log. (sarama has lz4 only from 0.10.)
LEGACY = ([(v, c) for v in ("0.8.2.0", "0.9.0.0") for c in ("none", "gzip", "snappy")]
          + [(v, c) for v in ("0.10.0.0", "0.10.1.0") for c in ("none", "gzip", "snappy", "lz4")])


@pytest.mark.parametrize("version,codec", LEGACY)
def test_sarama_before_kafka_0_11_through_message_format_conversion(broker, version, codec):
    topic = f"sarama-{version}-{codec}"
    create_topic_confluent(broker.bootstrap, topic, PARTITIONS)
    out = sarama(broker, topic, version, codec, group=f"g-{topic}")
    produced = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in out["produced"])
    consumed = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in out["consumed"])
    assert sorted((k, v) for _, _, k, v in produced) == sorted(expected(i) for i in range(RECORDS))
    assert consumed == produced
    assert out["committed"] == {str(p): RECORDS // PARTITIONS for p in range(PARTITIONS)}
    if version.startswith("0.10"):  # magic 1 carries sarama's timestamps
        assert all(r["timestamp_ms"] > 0 for r in out["consumed"])
