"""The CPU time Produce's record checks (`brook.records.validate.check_batch`) take a record,
on librdkafka's own batches as bench_broker's produce runs send them.

    .venv/bin/python benchmarks/record_checks_cost.py capture /tmp/batches.pickle
    PYTHONPATH=<a tree's src> .venv/bin/python benchmarks/record_checks_cost.py time /tmp/batches.pickle

`capture` runs bench_broker's produce() against a broker of this tree for each case of
produce_side_by_side.py (and 100 B records in zstd) and reads the batches back from its
segments (stored as received, but for the base offset and leader epoch, which the checks do
not read). `time` checks each batch with the tree on PYTHONPATH (`time.thread_time`, the
least of REPS=5 runs: the batch warm in the cache; REPS=1 reads each batch once) and prints
the cost a record by case and by batch size. librdkafka sends a batch uncompressed when
compressing does not make it smaller (random 1 KiB values in zstd).
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import tempfile
import time
from pathlib import Path

import bench_broker as bb
from produce_side_by_side import CASES, COMPRESSED_CASES, start

_COUNT = struct.Struct(">i")  # a batch's record count, at byte 57
_SIZES = ((48, "under 48"), (1000, "48 to 999"), (1 << 62, "1,000 or more"))


def capture(path: str) -> None:
    work = Path(tempfile.mkdtemp(prefix="record-checks-"))
    broker = start("capture", "src", work)
    cases = [(s, p, "none") for s, p in CASES] + COMPRESSED_CASES + [(100, 1, "zstd")]
    payloads = {s: bb._payloads(s, bb.POOL) for s in (100, 1024)}
    captured = {}
    try:
        bb.produce(broker, bb._topic(broker, "warmup", 1), 1, payloads[100][:bb.WARMUP_RECORDS], "1")
        for size, parts, codec in cases:
            n = bb.RECORDS[size] if codec == "none" else bb.RECORDS[size] // 4
            values = (payloads[size] * (n // len(payloads[size]) + 1))[:n]
            topic = bb._topic(broker, f"p{size}-{parts}-{codec}", parts)
            bb.PRODUCER_CONFIG["compression.type"] = codec
            try:
                bb.produce(broker, topic, parts, values, "1")
            finally:
                bb.PRODUCER_CONFIG["compression.type"] = "none"
            batches = []
            for p in range(parts):
                for segment in sorted((work / "capture-data" / f"{topic}-{p}").glob("*.log")):
                    data = segment.read_bytes()
                    pos = 0
                    while pos + 12 <= len(data):
                        end = pos + 12 + _COUNT.unpack_from(data, pos + 8)[0]
                        batches.append(data[pos:end])
                        pos = end
            captured[size, parts, codec] = batches
            print(f"{size} B, {parts} partition(s), {codec}: {len(batches)} batches", flush=True)
    finally:
        broker.stop()
    with open(path, "wb") as f:
        pickle.dump(captured, f)


def timed(path: str) -> None:
    from brook.records.batch import HEADER_STRUCT
    from brook.records.validate import Rules, check_batch, inflate_limit

    reps = int(os.environ.get("REPS", "5"))
    rules = Rules(inflate_limit=inflate_limit(1_048_588), after_max_ms=3_600_000)  # the defaults
    with open(path, "rb") as f:
        captured = pickle.load(f)
    for (size, parts, codec), batches in captured.items():
        by_size: dict[str, list[int]] = {}  # batches, records, ns
        for batch in batches:
            header = HEADER_STRUCT.unpack_from(batch)
            attributes, base_ts, max_ts, count = header[5], header[7], header[8], header[12]
            view = memoryview(batch)
            best = None
            for _ in range(reps):
                started = time.thread_time_ns()
                check_batch(view, 0, len(view), attributes, count, base_ts, rules, max_ts)
                took = time.thread_time_ns() - started
                best = took if best is None else min(best, took)
            label = next(name for bound, name in _SIZES if count < bound)
            row = by_size.setdefault(label, [0, 0, 0])
            row[0] += 1
            row[1] += count
            row[2] += best
        records = sum(r[1] for r in by_size.values())
        ns = sum(r[2] for r in by_size.values())
        print(f"{size} B, {parts} partition(s), {codec}: {ns / records:.0f} ns a record; "
              + "; ".join(f"batches of {name} records: {r[2] / r[1]:.0f} ns a record "
                          f"({r[0]} batches, {r[1] // r[0]:,} records on average)"
                          for bound, name in _SIZES if (r := by_size.get(name))))


if __name__ == "__main__":
    {"capture": capture, "time": timed}[sys.argv[1]](sys.argv[2])
