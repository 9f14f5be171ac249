"""What serving an old consumer costs: reading a topic through Fetch v3 (records down-converted
to magic 1 in Python) against Fetch v12 (stored batches sent with sendfile), same broker, same
topic, same run.

Run alone with `.venv/bin/python benchmarks/run_all.py bench_down_conversion`, or directly
(`.venv/bin/python benchmarks/bench_down_conversion.py`) to print the figures without touching
docs.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from confluent_kafka import Producer
from kio.serial import entity_reader, entity_writer

from brokers import WORK_ROOT, Broker, brook_broker

from brook.protocol.messages import make, request_class, response_class

COMMAND = ".venv/bin/python benchmarks/run_all.py bench_down_conversion"

VALUE_SIZE = 100  # bytes, no keys, no headers
RECORDS = 300_000  # records in each topic, read whole by every run
CODECS = ("none", "lz4")
ROUNDS = 3
PARTITION_MAX_BYTES = 1 << 20
FILL_CONFIG = {"linger.ms": 1000, "batch.size": 1_048_576, "batch.num.messages": 10_000,
               "enable.idempotence": False, "queue.buffering.max.messages": 1_000_000,
               "queue.buffering.max.kbytes": 1_048_576}
CURRENT, OLD = 12, 3  # the Fetch versions compared

TITLE = "Down-conversion (Fetch v3 against Fetch v12)"
DESCRIPTION = f"""\
One brook broker (`python -m brook broker`, its log under `bench-data/`) holds a one-partition
topic per codec ({", ".join(CODECS)}) of {RECORDS:,} records of {VALUE_SIZE} B values, written
once by confluent-kafka with full batches (`linger.ms=1000`, 10,000 records or 1 MiB a batch).
A client of the benchmark's own (one blocking socket, kio entities) reads each topic from
offset 0 to its end with one Fetch after another (`partition_max_bytes` 1 MiB, `max_wait` 0),
once at v{CURRENT} (the stored batches, sent with `sendfile`) and once at v{OLD} (every record
decoded and re-encoded as a magic-1 message; a compressed batch decompressed and recompressed),
in turn, alternating which goes first, {ROUNDS} rounds. The client does the same small work for
both: it walks the entry headers of each answer to find the next offset. Rates are the median
round; the notes give the broker's CPU per record (its process CPU time over the run), which is
what conversion costs whoever else the broker serves.
"""


class Wire:
    """Fetch requests over one blocking socket."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.correlation_id = 0

    def fetch(self, version: int, topic: str, offset: int) -> bytes:
        """The records of partition 0 from `offset`, as the broker answered them."""
        req_cls = request_class(1, version)
        mod = sys.modules[req_cls.__module__]
        body = make(req_cls, cluster_id=None, replica_id=-1, max_wait=timedelta(0), min_bytes=1,
                    max_bytes=50 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                    topics=(make(mod.FetchTopic, topic=topic, partitions=(make(
                        mod.FetchPartition, partition=0, current_leader_epoch=-1,
                        fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                        partition_max_bytes=PARTITION_MAX_BYTES),)),),
                    forgotten_topics_data=(), rack_id="")
        self.correlation_id += 1
        buf = io.BytesIO()
        header_cls = req_cls.__header_schema__
        entity_writer(header_cls)(buf, make(header_cls, request_api_key=1, request_api_version=version,
                                            correlation_id=self.correlation_id, client_id="bench"))
        entity_writer(req_cls)(buf, body)
        data = buf.getvalue()
        self.sock.sendall(struct.pack(">i", len(data)) + data)
        frame = self._recv(struct.unpack(">i", self._recv(4))[0])
        resp_cls = response_class(1, version)
        _, pos = entity_reader(resp_cls.__header_schema__)(frame, 0)
        resp, _ = entity_reader(resp_cls)(frame, pos)
        p = resp.responses[0].partitions[0]
        if p.error_code:
            raise RuntimeError(f"Fetch v{version} of {topic} at {offset}: error {p.error_code}")
        return p.records or b""

    def _recv(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(min(n - len(out), 1 << 20))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()


def next_offset(records: bytes, version: int, offset: int) -> int:
    """The offset after the last whole entry: a v2 batch's last offset (base + delta), or a
    magic-1 message's offset (a wrapper's is its last inner message's)."""
    pos, end = 0, len(records)
    while end - pos >= 12:
        base, size = struct.unpack_from(">qi", records, pos)
        if pos + 12 + size > end:
            break
        last = base + struct.unpack_from(">i", records, pos + 23)[0] if version >= 4 else base
        offset = last + 1
        pos += 12 + size
    return offset


def read_all(broker: Broker, wire: Wire, version: int, topic: str) -> dict:
    cpu0, t0 = broker.cpu(), time.perf_counter()
    offset = 0
    while offset < RECORDS:
        offset = next_offset(wire.fetch(version, topic, offset), version, offset)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rate": RECORDS / seconds, "cpu_per_record": (broker.cpu() - cpu0) / RECORDS}


def fill(broker: Broker, topic: str, codec: str) -> None:
    broker.create_topic(topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, **FILL_CONFIG})
    pool = [os.urandom(VALUE_SIZE // 2).hex().encode() for _ in range(1024)]  # lz4 has work to do
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(topic, pool[i % len(pool)], partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120):
        raise RuntimeError(f"{topic}: records still queued after 120 s")


def run() -> list[dict]:
    WORK_ROOT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="downconv-", dir=WORK_ROOT))
    broker = brook_broker(work)
    runs: dict[tuple[str, int], list[dict]] = {}
    try:
        broker.start()
        for codec in CODECS:
            fill(broker, f"conv-{codec}", codec)
        wire = Wire(broker.bootstrap)
        for codec in CODECS:  # warm-up: page cache, code paths
            for version in (CURRENT, OLD):
                read_all(broker, wire, version, f"conv-{codec}")
        for rnd in range(ROUNDS):
            print(f"   round {rnd + 1} of {ROUNDS}", file=sys.stderr, flush=True)
            for codec in CODECS:
                order = (CURRENT, OLD) if rnd % 2 == 0 else (OLD, CURRENT)
                for version in order:
                    runs.setdefault((codec, version), []).append(
                        read_all(broker, wire, version, f"conv-{codec}"))
        wire.close()
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    results = []
    for codec in CODECS:
        old, cur = runs[(codec, OLD)], runs[(codec, CURRENT)]
        rate_old = statistics.median(r["rate"] for r in old)
        rate_cur = statistics.median(r["rate"] for r in cur)
        cpu_old = statistics.median(r["cpu_per_record"] for r in old) * 1e6
        cpu_cur = statistics.median(r["cpu_per_record"] for r in cur) * 1e6
        results.append(dict(
            name=f"consume {VALUE_SIZE} B, {codec}, through Fetch v{OLD} (down-converted), records/s",
            value=rate_old, unit="records/s", peer=f"Fetch v{CURRENT} (sendfile)", peer_value=rate_cur,
            command=COMMAND,
            notes=(f"{RECORDS:,} records per run; rounds v{OLD} {_rates(old)}, v{CURRENT} "
                   f"{_rates(cur)} records/s; broker CPU per record v{OLD} {cpu_old:.3f} µs, "
                   f"v{CURRENT} {cpu_cur:.3f} µs")))
        results.append(dict(
            name=f"broker CPU per record, {codec}, Fetch v{OLD} (down-converted)", value=cpu_old,
            unit="µs", peer=f"Fetch v{CURRENT} (sendfile)", peer_value=cpu_cur,
            higher_is_better=False, command=COMMAND))
    return results


def _rates(runs: list[dict]) -> str:
    return ", ".join(f"{r['rate']:,.0f}" for r in runs)


if __name__ == "__main__":
    for r in run():
        print(f"{r['name']:<75} {r['value']:>14,.2f} {r['unit']:<10} {r['peer']}: "
              f"{r['peer_value']:,.2f}  {r.get('notes', '')}")
