"""How fast a broker loads a partition of __consumer_offsets: records replayed per second.

    .venv/bin/python benchmarks/load_rate.py [records]      # default 1,000,000

``measure_load_rate(records)`` writes a realistic partition into a real log (``storage.Log`` in a
temporary directory, batches written by the coordinator's batch writer, as a broker writes them),
then times the broker's own loading path over it: reading the log's batches
(``offsets_log.read_batches``), decoding them (``RecordsDecoder`` in bulk: blocks of commits
to consecutive partitions, batches like ones read before by their templates, runs of plain
commits and single records) and replaying them into a coordinator shard
(``GroupBatchReplayer``, the replay functions the live path uses). It returns the best of
three loads, in records per second of CPU time (the process's, which is the wall time of a
load on an idle machine, and is not stretched when other processes share the CPU); the page
cache is warm.

The partition: consumer groups reading 1 to 3 topics (of 200) with 8 to 48 partitions each,
committing all their partitions at once in rounds (so each key is committed many times, as in
a log before compaction); a group's metadata is rewritten (a rebalance) every tenth commit;
one group in twenty stores metadata strings with its offsets; one commit in a hundred is
followed by the tombstones of an OffsetDelete of a topic. Offsets, leader epochs and
timestamps grow as a live group's do.

``measure_record_by_record_rate`` times the same partition loaded the way brook loaded it
before ``RecordsDecoder``: every record decoded to key and value objects (``decode_batch``,
``decode_key``, ``decode_value``) and replayed one by one; for comparison.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))

from brook.broker.offsets_log import read_batches  # noqa: E402
from brook.coordinator.common.loader import replay_batches  # noqa: E402
from brook.coordinator.common.result import CoordinatorRecord as Record  # noqa: E402
from brook.coordinator.group.batch_writer import encode_records  # noqa: E402
from brook.coordinator.group.schemas import (  # noqa: E402
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_key,
    decode_value,
)
from brook.coordinator.group.shard import CoordinatorShard  # noqa: E402
from brook.records import decode_batch  # noqa: E402
from brook.records.batch import read_header  # noqa: E402
from brook.storage.config import LogConfig  # noqa: E402
from brook.storage.log import Log  # noqa: E402
from brook.storage.producer_state import AppendOrigin  # noqa: E402

SEED = 4
T0 = 1_700_000_000_000
TOPICS = [f"orders-events-{i:03d}" for i in range(200)]
OFFSETS_LOG = LogConfig(cleanup_policy="compact", segment_bytes=100 * 1024 * 1024)


def realistic_partition(records: int, seed: int = SEED) -> Iterator[list[Record]]:
    """Batches of ``CoordinatorRecord``s, as a coordinator writes them, ``records`` in all."""
    rng = random.Random(seed)
    groups = []
    for g in range(max(1, records // 600)):
        topics = rng.sample(TOPICS, rng.randint(1, 3))
        groups.append({
            "id": f"consumer-group-{g:06d}",
            "topics": [(t, rng.randint(8, 48)) for t in topics],
            "metadata": g % 20 == 0,
            "generation": 0,
            "commits": 0,
            "offset": rng.randrange(1 << 30),
            "members": [f"consumer-{g}-{m}-{rng.getrandbits(64):016x}"
                        for m in range(rng.randint(1, 5))],
        })
    now = T0
    written = 0
    while written < records:
        for group in groups:
            if written >= records:
                break
            now += rng.randint(1, 50)
            if group["commits"] % 10 == 0:
                group["generation"] += 1
                yield [Record(GroupMetadataKey(group["id"]), _metadata(group, now))]
                written += 1
            group["commits"] += 1
            group["offset"] += rng.randint(100, 5000)
            epoch = group["generation"] // 3
            batch = []
            for topic, partitions in group["topics"]:
                for p in range(partitions):
                    metadata = f"checkpoint-{group['commits']}" if group["metadata"] else ""
                    value = OffsetCommitValue(group["offset"] + p * 7, epoch, metadata, now)
                    batch.append(Record(OffsetCommitKey(group["id"], topic, p), value))
            yield batch
            written += len(batch)
            if rng.random() < 0.01:
                topic, partitions = rng.choice(group["topics"])
                yield [Record(OffsetCommitKey(group["id"], topic, p), None)
                       for p in range(partitions)]
                written += partitions


def _metadata(group: dict, now: int) -> GroupMetadataValue:
    members = tuple(
        MemberMetadata(m, None, "rdkafka", "/10.0.0.1", 300_000, 45_000,
                       b"\x00\x03" + b"subscription" * 4, b"\x00\x03" + b"assignment" * 6)
        for m in group["members"])
    return GroupMetadataValue("consumer", group["generation"], "range", members[0].member_id,
                              now, members)


def write_partition(directory: Path, records: int) -> tuple[Log, int]:
    """A log holding the realistic partition; (the log, how many records it holds)."""
    lg = Log(str(directory / "__consumer_offsets-0"), OFFSETS_LOG)
    count = 0
    for batch in realistic_partition(records):
        lg.append(encode_records(batch, T0), origin=AppendOrigin.COORDINATOR)
        count += len(batch)
    lg.flush()
    return lg, count


def _load(lg: Log) -> tuple[float, int]:
    shard = CoordinatorShard()
    started = time.process_time()
    replay_batches(shard.batch_replayer(T0), read_batches(lg))
    return time.process_time() - started, shard.offsets.cached_offsets


def _load_record_by_record(lg: Log) -> tuple[float, int]:
    shard = CoordinatorShard()
    core, offsets = shard.classic, shard.offsets
    started = time.process_time()
    for data in read_batches(lg):
        pos = 0
        while pos < len(data):
            for record in decode_batch(data, pos, verify=False).records:
                key = decode_key(record.key)
                if type(key) is UnknownKey:
                    continue
                value = decode_value(key, record.value)
                core.replay(key, value, T0)
                offsets.replay(key, value, T0)
            pos += read_header(data, pos).size
    return time.process_time() - started, offsets.cached_offsets


def _measure(records: int, load, rounds: int) -> float:
    work = Path(tempfile.mkdtemp(prefix="brook-load-rate-"))
    try:
        lg, count = write_partition(work, records)
        try:
            best = min(load(lg)[0] for _ in range(rounds))
        finally:
            lg.close()
        return count / best
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure_load_rate(records: int) -> float:
    """Records per second the broker's loader replays from a realistic partition of
    ``records`` records (best of three loads)."""
    return _measure(records, _load, 3)


def measure_record_by_record_rate(records: int) -> float:
    """The same, decoding and replaying every record as an object of its own."""
    return _measure(records, _load_record_by_record, 3)


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    rate = measure_load_rate(records)
    print(f"load rate: {rate:,.0f} records/s ({records:,} records, best of 3)")
    slow = measure_record_by_record_rate(records)
    print(f"record by record: {slow:,.0f} records/s ({rate / slow:.1f}x slower)")


if __name__ == "__main__":
    main()
