"""Offsets-topic analytics on Spark: records of __consumer_offsets decoded and compacted per
second, on a local[2] session, against one Python process running the same decoder.

    .venv/bin/python benchmarks/bench_spark_offsets_analytics.py [records]
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone

import pyarrow as pa

from brook.coordinator.group.schemas import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

TITLE = "Offsets-topic analytics on Spark"
DESCRIPTION = """\
`brook.spark.offsets_analytics` on `local[2]` against one Python process that decodes the
same records with the same decoder (`brook.coordinator.group.schemas`) and keeps the latest value
per key in a dict. Records: offset commits as brook writes them (key version 1, value version 3) of
1,000 groups x 10 topics x 10 partitions, committed again and again, plus one group metadata
record per group every 100 commits; built as a pyarrow table with the rows of Spark's Kafka
source and cached in Spark before timing. *decode* writes every decoded row to Spark's `noop`
sink; *compacted view* computes `compacted_offsets` (latest commit per key, tombstones and
group states joined, expiry columns) into the `noop` sink. Median of 3 rounds each."""

DEFAULT_RECORDS = 1_000_000
ROUNDS = 3


def records(n: int) -> pa.Table:
    keys, values = [], []
    group_value = encode_value(GroupMetadataValue("consumer", 1, None, None, 1, ()))
    for i in range(n):
        if i % 100 == 99:
            group = f"group-{(i // 100) % 1000}"
            keys.append(encode_key(GroupMetadataKey(group)))
            values.append(group_value)
            continue
        group = f"group-{i % 1000}"
        topic, partition = f"topic-{(i // 1000) % 10}", (i // 10_000) % 10
        keys.append(encode_key(OffsetCommitKey(group, topic, partition)))
        values.append(encode_value(OffsetCommitValue(i, 0, "", 1_700_000_000_000 + i)))
    now = datetime.now(timezone.utc)
    return pa.table({
        "key": pa.array(keys, pa.binary()),
        "value": pa.array(values, pa.binary()),
        "partition": pa.array([i % 50 for i in range(n)], pa.int32()),
        "offset": pa.array(range(n), pa.int64()),
        "timestamp": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
    })


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def _direct(table: pa.Table) -> float:
    start = time.perf_counter()
    latest = {}
    for k, v in zip(table.column("key").to_pylist(), table.column("value").to_pylist()):
        key = decode_key(k)
        latest[key] = decode_value(key, v)
    return time.perf_counter() - start


def run(n: int = DEFAULT_RECORDS) -> list[dict]:
    from brook.spark import local_session
    from brook.spark.offsets_analytics import compacted_offsets, decode_offsets_topic

    table = records(n)
    spark = local_session("bench-offsets-analytics")
    source = spark.createDataFrame(table).cache()
    source.count()
    decoded = decode_offsets_topic(source)

    def timed(frame) -> float:
        start = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - start

    timed(decoded)  # warm-up: Python workers started, plans compiled
    direct, decode, view = [], [], []
    for _ in range(ROUNDS):
        direct.append(_direct(table))
        decode.append(timed(decoded))
        view.append(timed(compacted_offsets(decoded, 0)))
    source.unpersist()
    spark.stop()
    command = "python benchmarks/bench_spark_offsets_analytics.py"
    peer = "one Python process, same decoder"
    direct_rate = n / _median(direct)
    return [
        dict(name="decode, records/s", value=n / _median(decode), unit="records/s", peer=peer,
             peer_value=direct_rate, command=command, notes=f"{n:,} records"),
        dict(name="compacted view, records/s", value=n / _median(view), unit="records/s",
             peer=peer, peer_value=direct_rate, command=command, notes=f"{n:,} records"),
    ]


if __name__ == "__main__":
    for result in run(int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_RECORDS):
        print(f"{result['name']}: {result['value']:,.0f} {result['unit']}; "
              f"{result['peer']}: {result['peer_value']:,.0f} "
              f"({result['value'] / result['peer_value']:.2f}x), {result['notes']}")
