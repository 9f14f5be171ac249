"""kcat (librdkafka's command-line client) against a brook broker process."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import defaultdict

import pytest

from tests.support.broker_harness import CODECS, create_topic_confluent

KCAT = shutil.which("kcat") or shutil.which("kafkacat")

pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make tools)")


def kcat(broker, *args: str, input: str | None = None, timeout: float = 60.0) -> str:
    cmd = [KCAT, "-b", broker.bootstrap, "-X", "broker.address.family=v4", *args]
    proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited with {proc.returncode}\nstdout: {proc.stdout[-2000:]}\n"
        f"stderr: {proc.stderr[-4000:]}"
    )
    return proc.stdout


def test_metadata_lists_broker_topic_and_partitions(broker):
    create_topic_confluent(broker.bootstrap, "kcat-metadata", partitions=4)

    text = kcat(broker, "-L")
    assert re.search(rf"^\s*1 brokers:\s*$", text, re.M), text
    assert re.search(rf"^\s*broker \d+ at 127\.0\.0\.1:{broker.port}\b", text, re.M), text
    assert re.search(r'^\s*topic "kcat-metadata" with 4 partitions:\s*$', text, re.M), text

    meta = json.loads(kcat(broker, "-L", "-J", "-t", "kcat-metadata"))
    assert [(b["name"]) for b in meta["brokers"]] == [f"127.0.0.1:{broker.port}"], meta
    broker_id = meta["brokers"][0]["id"]
    (topic,) = meta["topics"]
    assert topic["topic"] == "kcat-metadata" and "error" not in topic, topic
    parts = sorted(topic["partitions"], key=lambda p: p["partition"])
    assert [p["partition"] for p in parts] == [0, 1, 2, 3], topic
    for p in parts:
        assert "error" not in p, p
        assert p["leader"] == broker_id, p
        assert [r["id"] for r in p["replicas"]] == [broker_id], p
        assert [r["id"] for r in p["isrs"]] == [broker_id], p


@pytest.mark.parametrize("codec", CODECS)
def test_produce_keyed_lines_and_consume_them_back(broker, codec):
    topic = f"kcat-lines-{codec}"
    create_topic_confluent(broker.bootstrap, topic, partitions=4)
    lines = [f"key-{i}:value {i}: with a colon, spaces and \u00fcnicode" for i in range(2000)]
    lines += ["empty-value:", "k:" + "x" * 5000]

    kcat(broker, "-P", "-t", topic, "-K:", "-z", codec, "-X", "linger.ms=5",
         input="\n".join(lines) + "\n")

    out = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-q")
    consumed = [json.loads(line) for line in out.splitlines() if line.strip()]
    by_partition = defaultdict(list)
    for m in consumed:
        assert m["topic"] == topic
        by_partition[m["partition"]].append(m)
    for p, msgs in by_partition.items():
        offsets = [m["offset"] for m in msgs]
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets {offsets[:20]}..."

    def split(line):
        key, _, value = line.partition(":")
        return key, value

    want = [split(line) for line in lines]
    got_pairs = [(m["key"], m["payload"] if m["payload"] is not None else "") for m in consumed]
    assert sorted(got_pairs) == sorted(want)
    # Within a partition the lines come back in the order they were written.
    index = {pair: i for i, pair in enumerate(want)}
    for p, msgs in by_partition.items():
        order = [index[(m["key"], m["payload"] or "")] for m in msgs]
        assert order == sorted(order), f"partition {p} is out of order"
    assert len(by_partition) > 1, "all lines landed in one partition of four"

    # The plain formatter prints each line exactly as it was written.
    out = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k:%s\\n")
    assert sorted(out.splitlines()) == sorted(lines)
