"""Storage engine throughput: brook's Log against plain system calls on the same bytes.

Run alone with `.venv/bin/python benchmarks/run_all.py bench_storage`, or directly
(`.venv/bin/python benchmarks/bench_storage.py`) to print the figures without touching docs.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import struct
import tempfile
import time
from functools import partial
from pathlib import Path

from brook.records.crc import crc32c

from brook.records.batch import Record, encode_batch
from brook.storage.config import LogConfig
from brook.storage.log import Log
from brook.storage.reserve import ahead, reserve

REPO = Path(__file__).resolve().parent.parent
WORK_ROOT = REPO / "bench-data"  # git-ignored, on the same file system as the repository
COMMAND = ".venv/bin/python benchmarks/run_all.py bench_storage"

RECORD_SIZE = 1024
RECORDS_PER_BATCH = 16
BATCHES = 32 * 1024  # batches of 16,589 B: 544 MB (518 MiB) per side per append round
ROUNDS = 5  # measured append rounds (after one warm-up round)
READ_ROUNDS = 5  # measured read passes over the whole data (after one warm-up pass)
BIG_APPEND = 16  # batches per call in the informational "larger appends" row
STEPS = 32  # each round interleaves the two sides in this many slices
READ_CHUNK = 1 << 20
RANDOM_READS = 20_000
RANDOM_MAX_BYTES = 16 * 1024
MB = 1e6

TITLE = "Storage engine (Log append and read)"
DESCRIPTION = f"""\
One `Log` with the default `LogConfig` against the plain system calls that move the same
bytes, in a fresh directory under `bench-data/` on the repository's file system. MB = 10^6 bytes.

- **Data**: batches of {RECORDS_PER_BATCH} records × {RECORD_SIZE} B values (uncompressed, no keys),
  built once with `encode_batch`, so encoding is not measured; {BATCHES:,} batches per side per round.
- **Append**: `Log.append(batch)` once per batch (header check, CRC-32C check, offset
  assignment, index upkeep, one `os.writev` into disk blocks the log reserves ahead of its
  active segment with `fallocate`) against `os.write` of the same bytes to a file opened
  with `O_APPEND`. In each round a new log and a new file grow side by side: the sides take
  turns in {STEPS} slices of the work (rotating which goes first), so all see the same
  page-cache and writeback state and the same load from other processes. No side
  fsyncs (the default flush policy never does); `os.sync()` runs, untimed, before each round,
  and each round's files are deleted after it. One warm-up round, then {ROUNDS} measured
  rounds; the table gives the median round. The *{BIG_APPEND} batches per call* row appends the
  same batches {BIG_APPEND} at a time ({BIG_APPEND} × 16 KiB per `Log.append` and per `os.write`), to
  separate per-call from per-batch costs. The *validated write* row is a third side of the
  one-batch rounds doing only what no validating, copy-free append can skip (the CRC-32C
  check and one `os.writev` of a rewritten 16-byte prefix plus the rest of the batch): the
  gap between it and `os.write` is not brook's bookkeeping. The *reserved blocks* row is a
  fourth side: `os.write` alone into blocks reserved ahead as the log reserves them, the
  fastest a plain write gets here; brook's bookkeeping is the gap to it.
- **Sequential read**: the data of the last append round, from the page cache:
  `Log.read(offset, max_bytes=1 MiB)` and the bytes of its region (`os.pread`, or `os.sendfile`
  to `/dev/null` as the network path does), moving the offset past the whole batches of each
  region, against `os.pread` / `os.sendfile` of the plain file in 1 MiB chunks; `pread`s go into
  one reused buffer (`os.preadv`) on both sides so that allocating 1 MiB objects is not what is
  measured. Interleaved in {STEPS} slices; one warm-up pass, then the median of {READ_ROUNDS} passes.
- **Random read** (informational): {RANDOM_READS:,} random offsets, `Log.read(offset, 16 KiB)` +
  `pread` of the region (one whole batch), against `pread` of that batch at a position computed
  by arithmetic (what a perfect index would give). Interleaved likewise, median of {READ_ROUNDS}.
"""


def _batch() -> bytes:
    now = int(time.time() * 1000)  # recent timestamps: old ones would trigger time-based rolls
    rng = random.Random(1)
    records = [Record(i, now + i, None, rng.randbytes(RECORD_SIZE)) for i in range(RECORDS_PER_BATCH)]
    return encode_batch(records)


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def _interleaved(*sides) -> tuple[float, ...]:
    """Run the i-th step of each side back to back, rotating which side goes first.

    Each step times itself and returns seconds; the sums are returned, one per side.
    Interleaving small steps (tens of milliseconds) makes every side see the same machine:
    the same page-cache and writeback state, the same load from other processes.
    """
    totals = [0.0] * len(sides)
    order = list(range(len(sides)))
    for i, steps in enumerate(zip(*sides, strict=True)):
        for k in order[i % len(order):] + order[:i % len(order)]:
            totals[k] += steps[k]()
    return tuple(totals)


# ---------------------------------------------------------------- append


def _append_round(work: str, data: bytes, calls: int, tag: str, keep: bool = False,
                  validated: bool = False):
    """A new Log and new O_APPEND files grow side by side by `calls` appends of `data`.

    Returns (brook seconds, os.write seconds, (validated-write seconds, reserved-write
    seconds) or None, log, path); the files are deleted unless `keep`. With `validated`
    (`data` must be one batch), a third side does what any append that checks batches and
    rewrites their offsets without copying them cannot avoid: a memoryview, the CRC-32C check,
    a new 16-byte prefix and one `os.writev` of it with the rest of the batch; and a fourth
    does only `os.write`, into blocks reserved ahead as the log reserves them.
    """
    os.sync()  # no dirty pages of an earlier round are being written back
    lg = Log(os.path.join(work, f"bench{tag}-0"), LogConfig())
    path = os.path.join(work, f"plain{tag}.log")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    checked_path = os.path.join(work, f"checked{tag}.log")
    checked_fd = os.open(checked_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644) \
        if validated else -1
    reserved_path = os.path.join(work, f"reserved{tag}.log")
    reserved_fd = os.open(reserved_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644) \
        if validated else -1
    reserved = [0, 0]  # bytes written, bytes reserved
    append, write, clock = lg.append, os.write, time.perf_counter
    writev, prefix, crc = os.writev, struct.Struct(">qii").pack, struct.unpack_from(">I", data, 17)[0]

    def brook(n: int) -> float:
        t0 = clock()
        for _ in range(n):
            append(data)
        return clock() - t0

    def plain(n: int) -> float:
        t0 = clock()
        for _ in range(n):
            write(fd, data)
        return clock() - t0

    def checked(n: int) -> float:
        t0 = clock()
        for i in range(n):
            view = memoryview(data)
            if crc32c(view[21:]) != crc:
                raise AssertionError("bad CRC")
            writev(checked_fd, (prefix(i, len(data) - 12, -1), view[16:]))
        return clock() - t0

    def plain_reserved(n: int) -> float:
        size = len(data)
        written, reserved_to = reserved
        t0 = clock()
        for _ in range(n):
            if written + size > reserved_to:
                end = written + size
                reserved_to = end + ahead(end)
                if not reserve(reserved_fd, written, reserved_to - written):
                    raise RuntimeError("this file system cannot reserve blocks")
            write(reserved_fd, data)
            written += size
        elapsed = clock() - t0
        reserved[:] = written, reserved_to
        return elapsed

    block = max(1, calls // STEPS)
    sizes = [min(block, calls - done) for done in range(0, calls, block)]
    sides = [[partial(brook, n) for n in sizes], [partial(plain, n) for n in sizes]]
    if validated:
        sides.append([partial(checked, n) for n in sizes])
        sides.append([partial(plain_reserved, n) for n in sizes])
    try:
        tb, to, *tc = _interleaved(*sides)
    finally:
        os.close(fd)
        if validated:
            os.close(checked_fd)
            os.close(reserved_fd)
    assert lg.size == os.path.getsize(path) == calls * len(data)
    tc = tuple(tc) if tc else None
    if validated:
        for extra in (checked_path, reserved_path):
            assert os.path.getsize(extra) == calls * len(data)
            os.unlink(extra)
    if keep:
        return tb, to, tc, lg, path
    lg.delete()
    os.unlink(path)
    return tb, to, tc, None, None


# ---------------------------------------------------------------- sequential read


class _LogReader:
    """A consumer reading the log by offset ranges of up to READ_CHUNK bytes."""

    def __init__(self, lg: Log, batch_size: int, use_sendfile: bool, sink: int) -> None:
        self.lg, self.batch_size, self.use_sendfile, self.sink = lg, batch_size, use_sendfile, sink
        self.buf = memoryview(bytearray(READ_CHUNK))
        self.offset = lg.log_start_offset
        self.consumed = 0

    def until(self, limit: int) -> float:
        """Read on until the next offset is at least `limit`; return seconds."""
        read, preadv, sendfile = self.lg.read, os.preadv, os.sendfile
        offset, buf, sink, batch_size = self.offset, self.buf, self.sink, self.batch_size
        consumed = 0
        t0 = time.perf_counter()
        while offset < limit:
            region = read(offset, READ_CHUNK).regions[0]
            if self.use_sendfile:
                got = sendfile(sink, region.fd, region.position, region.length)
            else:
                got = preadv(region.fd, [buf[:region.length]], region.position)
            # Every batch holds RECORDS_PER_BATCH records: move past the whole ones; the partial
            # batch at the end of the region is read again by the next fetch, as consumers do.
            whole = got // batch_size
            offset += whole * RECORDS_PER_BATCH
            consumed += whole * batch_size
        elapsed = time.perf_counter() - t0
        self.offset = offset
        self.consumed += consumed
        return elapsed


class _FileReader:
    """The peer: the plain file in READ_CHUNK pieces."""

    def __init__(self, fd: int, use_sendfile: bool, sink: int) -> None:
        self.fd, self.use_sendfile, self.sink = fd, use_sendfile, sink
        self.buf = [memoryview(bytearray(READ_CHUNK))]
        self.pos = 0

    def until(self, limit: int) -> float:
        preadv, sendfile = os.preadv, os.sendfile
        fd, pos, buf, sink = self.fd, self.pos, self.buf, self.sink
        t0 = time.perf_counter()
        while pos < limit:
            if self.use_sendfile:
                pos += sendfile(sink, fd, pos, READ_CHUNK)
            else:
                pos += preadv(fd, buf, pos)
        elapsed = time.perf_counter() - t0
        self.pos = pos
        return elapsed


def _read_round(lg: Log, fd: int, batch_size: int, use_sendfile: bool, sink: int) -> tuple[float, float]:
    """Both sides read everything once, in STEPS interleaved slices."""
    log_reader = _LogReader(lg, batch_size, use_sendfile, sink)
    file_reader = _FileReader(fd, use_sendfile, sink)
    batches = lg.log_end_offset // RECORDS_PER_BATCH
    cuts = [batches * (i + 1) // STEPS for i in range(STEPS)]
    tb, to = _interleaved([partial(log_reader.until, c * RECORDS_PER_BATCH) for c in cuts],
                          [partial(file_reader.until, c * batch_size) for c in cuts])
    assert log_reader.consumed == lg.size and file_reader.pos == lg.size
    return tb, to


# ---------------------------------------------------------------- random read


def _random_round(lg: Log, fd: int, batch_size: int, offsets: list[int]) -> tuple[float, float]:
    read, pread, clock = lg.read, os.pread, time.perf_counter

    def brook(chunk: list[int]) -> float:
        t0 = clock()
        for off in chunk:
            region = read(off, RANDOM_MAX_BYTES).regions[0]
            pread(region.fd, region.length, region.position)
        return clock() - t0

    def plain(chunk: list[int]) -> float:
        t0 = clock()
        for off in chunk:
            pread(fd, batch_size, off // RECORDS_PER_BATCH * batch_size)
        return clock() - t0

    step = max(1, len(offsets) // STEPS)
    chunks = [offsets[i:i + step] for i in range(0, len(offsets), step)]
    return _interleaved([partial(brook, c) for c in chunks], [partial(plain, c) for c in chunks])


# ---------------------------------------------------------------- driver


def _list(xs: list[float], fmt: str = "{:.0f}") -> str:
    return ", ".join(fmt.format(x) for x in xs)


def run() -> list[dict]:
    batch = _batch()
    size = len(batch)
    total = size * BATCHES
    WORK_ROOT.mkdir(exist_ok=True)
    work = tempfile.mkdtemp(prefix="storage-", dir=WORK_ROOT)
    sink = os.open(os.devnull, os.O_WRONLY)
    lg, fd = None, -1
    results: list[dict] = []
    peer_append = "os.write, O_APPEND"
    try:
        # ---- append: a warm-up round faults in page-cache memory, then measured rounds;
        # the last round's files are kept for the reads
        load_before = os.getloadavg()[0]  # the machine may be shared: say how busy it was
        _append_round(work, batch, BATCHES, "w")
        tags = (str(i) for i in range(1000))
        for per_call in (1, BIG_APPEND):
            data, calls = batch * per_call, BATCHES // per_call
            tb, to, tc = [], [], []
            for r in range(ROUNDS):
                keep = per_call == 1 and r == ROUNDS - 1
                b, o, c, kept_log, kept_path = _append_round(work, data, calls, next(tags), keep,
                                                             validated=per_call == 1)
                tb.append(b)
                to.append(o)
                tc.append(c)
                if keep:
                    lg, path = kept_log, kept_path
            mb_b = [total / t / MB for t in tb]
            mb_o = [total / t / MB for t in to]
            b_mb, o_mb = _median(mb_b), _median(mb_o)
            notes = (f"{BATCHES:,} batches of {size:,} B ({total / MB:.0f} MB) per side per round; "
                     f"rounds brook {_list(mb_b)} MB/s, os.write {_list(mb_o)} MB/s; "
                     f"per call brook {_median(tb) / calls * 1e6:.1f} µs, "
                     f"os.write {_median(to) / calls * 1e6:.1f} µs; load average "
                     f"{load_before:.1f} before the append rounds, {os.getloadavg()[0]:.1f} after")
            if per_call == 1:
                results.append(dict(name="append (16 KiB batches of 1 KiB records)", value=b_mb,
                                    unit="MB/s", peer=peer_append, peer_value=o_mb, command=COMMAND,
                                    notes=notes))
                results.append(dict(name="append, batches/s", value=b_mb * MB / size, unit="batches/s",
                                    peer=peer_append, peer_value=o_mb * MB / size, command=COMMAND))
                mb_c = [total / t / MB for t, _ in tc]
                mb_r = [total / t / MB for _, t in tc]
                results.append(dict(
                    name="append vs the validated write (informational)", value=b_mb, unit="MB/s",
                    peer="CRC-32C check + os.writev", peer_value=_median(mb_c), command=COMMAND,
                    notes=(f"the third side of the same rounds: per batch a memoryview, the CRC-32C "
                           f"check, a new 16-byte prefix and one os.writev of it with the rest, "
                           f"without offsets, indexes or checks of the header; rounds "
                           f"{_list(mb_c)} MB/s, {_median([t for t, _ in tc]) / calls * 1e6:.1f} µs "
                           f"per batch; it reaches {_median(mb_c) / o_mb:.2f} of os.write")))
                results.append(dict(
                    name="append vs os.write into reserved blocks (informational)", value=b_mb,
                    unit="MB/s", peer="os.write, O_APPEND, blocks reserved ahead", peer_value=_median(mb_r),
                    command=COMMAND,
                    notes=(f"the fourth side of the same rounds: os.write alone, into blocks reserved "
                           f"ahead with brook.storage.reserve as the log's active segment does; rounds "
                           f"{_list(mb_r)} MB/s, {_median([t for _, t in tc]) / calls * 1e6:.1f} µs per "
                           f"batch; it reaches {_median(mb_r) / o_mb:.2f} of plain os.write")))
            else:
                results.append(dict(name=f"append, {per_call} batches per call (informational)",
                                    value=b_mb, unit="MB/s", peer=peer_append, peer_value=o_mb,
                                    command=COMMAND, notes=notes))

        # ---- sequential reads of the kept data, from the page cache
        fd = os.open(path, os.O_RDONLY)
        for use_sendfile, label, peer in ((False, "os.pread", "os.pread 1 MiB chunks"),
                                          (True, "os.sendfile to /dev/null", "os.sendfile 1 MiB chunks")):
            _read_round(lg, fd, size, use_sendfile, sink)  # warm-up
            times = [_read_round(lg, fd, size, use_sendfile, sink) for _ in range(READ_ROUNDS)]
            mb_b = [total / tb / MB for tb, _ in times]
            mb_o = [total / to / MB for _, to in times]
            per_fetch = _median([tb for tb, _ in times]) / (BATCHES / (READ_CHUNK // size))
            results.append(dict(
                name=f"sequential read, Log.read(1 MiB) + {label}", value=_median(mb_b), unit="MB/s",
                peer=peer, peer_value=_median(mb_o), command=COMMAND,
                notes=(f"{total / MB:.0f} MB from the page cache; rounds brook {_list(mb_b)} MB/s, "
                       f"peer {_list(mb_o)} MB/s; {READ_CHUNK // size} whole batches per fetch, "
                       f"{per_fetch * 1e6:.1f} µs per fetch; the partial batch at a region's end is "
                       f"read again by the next fetch")))

        # ---- random reads by offset
        rng = random.Random(7)
        offsets = [rng.randrange(lg.log_end_offset) for _ in range(RANDOM_READS)]
        # one whole batch per fetch (min_one_message); the consumer gets its records at or
        # after the offset asked for
        records = sum(RECORDS_PER_BATCH - off % RECORDS_PER_BATCH for off in offsets)
        _random_round(lg, fd, size, offsets)  # warm-up
        times = [_random_round(lg, fd, size, offsets) for _ in range(READ_ROUNDS)]
        tb, to = _median([t for t, _ in times]), _median([t for _, t in times])
        results.append(dict(
            name="random read by offset (max_bytes 16 KiB), records/s", value=records / tb,
            unit="records/s", peer="os.pread of the batch", peer_value=records / to, command=COMMAND,
            notes=(f"informational; {RANDOM_READS:,} random offsets, one batch per fetch; "
                   f"brook {tb / RANDOM_READS * 1e6:.1f} µs per fetch (Log.read + pread), "
                   f"pread alone {to / RANDOM_READS * 1e6:.1f} µs")))
        results.append(dict(
            name="random read by offset, fetches/s", value=RANDOM_READS / tb, unit="fetches/s",
            peer="os.pread of the batch", peer_value=RANDOM_READS / to, command=COMMAND))
    finally:
        os.close(sink)
        if fd >= 0:
            os.close(fd)
        if lg is not None:
            lg.close()
        shutil.rmtree(work, ignore_errors=True)
    return results


if __name__ == "__main__":
    for r in run():
        print(f"{r['name']:<60} {r['value']:>14,.1f} {r['unit']:<10} {r['peer']}: "
              f"{r['peer_value']:,.1f}  ratio {r['value'] / r['peer_value']:.2f}")
