"""`make demo`: the broker with real Kafka clients (brook.demo_broker), then the log engine
underneath it, end to end, in temporary data directories.

The log-engine part produces a stream of page views into a 4-partition topic, reads it back by offset and by
time, crashes the log mid-write and recovers it, applies retention, and compacts a topic of
user profiles with tombstones. Later issues grow this into broker + Spark pipeline.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
import time
import zlib

from .clock import FakeClock
from .records import Codec, Record, encode_batch
from .storage.config import LogConfig
from .storage.log import Log
from .storage.manager import LogManager

URLS = ["/", "/pricing", "/docs", "/blog", "/signup", "/login"]
PARTITIONS = 4
HOUR = 3600 * 1000


def say(text: str) -> None:
    print(f"\n== {text}")


def read_records(lg: Log, start: int | None = None):
    offset = lg.log_start_offset if start is None else start
    while offset < lg.log_end_offset:
        batches = lg.read(offset, 1 << 20).batches()
        if not batches:
            return
        for batch in batches:
            for rec in batch.records:
                if rec.offset >= offset:
                    yield rec
            offset = batch.last_offset + 1


def produce_page_views(manager: LogManager, clock: FakeClock, n: int) -> dict[str, int]:
    rng = random.Random(7)
    counts: dict[str, int] = {}
    pending: dict[int, list[Record]] = {p: [] for p in range(PARTITIONS)}
    for i in range(n):
        user = f"user-{rng.randrange(500)}"
        url = rng.choice(URLS)
        counts[url] = counts.get(url, 0) + 1
        event = json.dumps({"user": user, "url": url, "ts": clock.milliseconds()}).encode()
        partition = zlib.crc32(user.encode()) % PARTITIONS
        batch = pending[partition]
        batch.append(Record(len(batch), clock.milliseconds(), user.encode(), event, (("source", b"demo"),)))
        if len(batch) == 100:
            manager.get_log("page-views", partition).append(encode_batch(batch, codec=Codec.LZ4))
            batch.clear()
        clock.advance(37)
    for partition, batch in pending.items():
        if batch:
            manager.get_log("page-views", partition).append(encode_batch(batch, codec=Codec.LZ4))
    return counts


def main() -> None:
    from . import demo_broker

    started = time.perf_counter()
    demo_broker.run()
    say("and underneath: the log engine on its own, with a fake clock")
    logging.basicConfig(level=logging.WARNING, format="  [brook log] %(message)s")
    data_dir = tempfile.mkdtemp(prefix="brook-demo-")
    clock = FakeClock()
    defaults = LogConfig(segment_bytes=64 * 1024, retention_ms=2 * HOUR)
    profiles_config = defaults.with_overrides({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1",
                                               "delete.retention.ms": str(HOUR), "segment.bytes": "4096"})
    configs = {"user-profiles": profiles_config}
    manager = LogManager([data_dir], defaults, clock=clock, topic_config=lambda t: configs.get(t, defaults))
    try:
        manager.startup()
        say(f"data dir {data_dir}")
        for p in range(PARTITIONS):
            manager.get_or_create_log("page-views", p)

        say("produce 40,000 page views (LZ4 batches of 100) into page-views, 4 partitions")
        counts = produce_page_views(manager, clock, 40_000)
        for p in range(PARTITIONS):
            lg = manager.get_log("page-views", p)
            print(f"  page-views-{p}: offsets [{lg.log_start_offset}, {lg.log_end_offset}), "
                  f"{len(lg.segments)} segments, {lg.size:,} bytes")

        say("consume everything back by offset and count views per URL")
        seen: dict[str, int] = {}
        for p in range(PARTITIONS):
            for rec in read_records(manager.get_log("page-views", p)):
                url = json.loads(rec.value)["url"]
                seen[url] = seen.get(url, 0) + 1
        for url in URLS:
            print(f"  {url:10s} {seen[url]:6d}")
        assert seen == counts, "every produced record is read back once"

        say("find the first offset at or after a timestamp (ListOffsets by time)")
        lg0 = manager.get_log("page-views", 0)
        first_ts = next(read_records(lg0)).timestamp
        target = first_ts + 15 * 60 * 1000
        offset, ts = lg0.fetch_offset_by_timestamp(target)
        print(f"  page-views-0: first record at or after +15 min is offset {offset} (timestamp +{(ts - first_ts) // 1000} s)")

        say("crash mid-write: tear the last batch of page-views-1 and append garbage, then recover")
        lg1 = manager.get_log("page-views", 1)
        end_before = lg1.log_end_offset
        active = lg1.active_segment.log_path
        for lg in manager.all_logs():
            for seg in lg.segments:
                seg.close_without_index()  # the process dies: nothing is flushed or closed
        size = os.path.getsize(active)
        with open(active, "r+b") as f:
            f.truncate(size - 50)
            f.seek(0, os.SEEK_END)
            f.write(os.urandom(200))
        manager = LogManager([data_dir], defaults, clock=clock, topic_config=lambda t: configs.get(t, defaults))
        manager.startup()
        lg1 = manager.get_log("page-views", 1)
        print(f"  page-views-1: log end offset {end_before} before the crash, {lg1.log_end_offset} after recovery "
              f"({lg1.recovered_bytes_truncated} bytes of torn batch and garbage truncated)")
        print(f"  {sum(1 for _ in read_records(lg1)):,} records readable, every one CRC-checked")

        say("retention: two hours later, segments older than retention.ms=2h are deleted")
        clock.advance(2 * HOUR + 20 * 60 * 1000)
        before = {p: manager.get_log("page-views", p).log_start_offset for p in range(PARTITIONS)}
        deleted = manager.cleanup_logs(clock.milliseconds())
        for p in range(PARTITIONS):
            lg = manager.get_log("page-views", p)
            print(f"  page-views-{p}: log start offset {before[p]} -> {lg.log_start_offset}")
        print(f"  {deleted} segments deleted; the active segments stay")

        say("compaction: user-profiles keeps the latest value per key, tombstones expire")
        profiles = manager.get_or_create_log("user-profiles", 0)
        rng = random.Random(11)
        latest: dict[bytes, bytes | None] = {}
        for round_ in range(30):
            records = []
            for i in range(20):
                key = f"user-{rng.randrange(40)}".encode()
                value = None if rng.random() < 0.1 else json.dumps({"plan": rng.choice(["free", "pro"]), "v": round_}).encode()
                latest[key] = value
                records.append(Record(i, clock.milliseconds(), key, value))
            profiles.append(encode_batch(records, codec=Codec.ZSTD))
            clock.advance(1000)
        profiles.roll()
        records_before = sum(1 for _ in read_records(profiles))
        manager.clean_logs(clock.milliseconds())
        after = {r.key: r.value for r in read_records(profiles)}
        print(f"  {records_before} records -> {sum(1 for _ in read_records(profiles))} after compaction "
              f"({sum(v is None for v in after.values())} tombstones kept for delete.retention.ms)")
        assert {k: v for k, v in after.items()} == latest, "the latest value of every key survives"
        clock.advance(HOUR + 1)
        for round_ in range(30):  # an hour later, more updates (no deletes) make the log dirty again
            records = [Record(i, clock.milliseconds(), f"user-{rng.randrange(40, 80)}".encode(), b'{"plan": "pro"}')
                       for i in range(20)]
            profiles.append(encode_batch(records, codec=Codec.ZSTD))
        profiles.roll()
        manager.clean_logs(clock.milliseconds())
        final = {r.key: r.value for r in read_records(profiles)}
        print(f"  an hour later, after more updates and another clean: {len(final)} keys, "
              f"{sum(v is None for v in final.values())} tombstones left (past their delete horizon)")
        assert all(v is not None for v in final.values())
        assert {k: v for k, v in final.items() if k in latest} == {k: v for k, v in latest.items() if v is not None}

        manager.shutdown()
        say(f"clean shutdown; demo finished in {time.perf_counter() - started:.1f} s")
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
