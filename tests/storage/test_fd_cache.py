"""Segment files opened lazily through a bounded cache of descriptors (storage.fd_cache): a
log of many more segments than the cache holds keeps at most that many open and still reads
every segment; a pinned descriptor (a fetched region, a reader) is never closed under its
user; deletion and retention close what they delete; and a model-checked property test of
the cache itself (pins, evictions, the bound, least recently used first)."""

from __future__ import annotations

import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brook.clock import FakeClock
from brook.storage.config import LogConfig
from brook.storage.fd_cache import SEGMENT_FILES, FdCache, capacity_for
from brook.storage.log import Log
from brook.storage.manager import LogManager, ManagerConfig
from tests.support.examples import examples
from tests.support.storage_helpers import make_batch, read_all

CAPACITY = 8
SEGMENTS = 60
SMALL_SEGMENTS = LogConfig(segment_bytes=1000, index_interval_bytes=200)
HOUR = 3600 * 1000


def open_fds() -> set[int]:
    """This process's open descriptors (less the one listing them used)."""
    listed = {int(n) for n in os.listdir("/proc/self/fd")}
    return {fd for fd in listed if _is_open(fd)}


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def files_open_under(directory) -> list[str]:
    """Paths of this process's descriptors that are files under `directory`."""
    out = []
    for n in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{n}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            out.append(target)
    return out


@pytest.fixture
def small_cache():
    """The process's cache of segment files, at CAPACITY for the test."""
    before = SEGMENT_FILES.capacity
    SEGMENT_FILES.resize(CAPACITY)
    try:
        yield SEGMENT_FILES
    finally:
        SEGMENT_FILES.resize(before)


def filled_log(path, clock=None, segments=SEGMENTS, config=SMALL_SEGMENTS) -> tuple[Log, list]:
    clock = clock or FakeClock()
    lg = Log(str(path), config, clock=clock)
    written = []
    while len(lg.segments) < segments:
        offset = lg.log_end_offset
        lg.append(make_batch(2, clock.milliseconds(), size=200, start=offset))
        written.append(offset)
    return lg, written


def test_a_log_of_many_segments_keeps_at_most_the_cache_open_and_reads_them_all(tmp_path,
                                                                                 small_cache):
    lg, _ = filled_log(tmp_path / "t-0")
    assert len(files_open_under(tmp_path)) <= CAPACITY
    records = read_all(lg)
    assert [r[0] for r in records] == list(range(lg.log_end_offset))
    for seg in lg.segments:  # every segment read on its own, in an order that evicts
        assert seg.read(seg.base_offset, 1 << 20).read()
        assert len(files_open_under(tmp_path)) <= CAPACITY
    lg.close()
    assert files_open_under(tmp_path) == []
    lg = Log(str(tmp_path / "t-0"), SMALL_SEGMENTS, clock=FakeClock())  # a load opens them lazily
    assert len(files_open_under(tmp_path)) <= CAPACITY
    assert read_all(lg) == records
    lg.close()


def test_a_segment_of_a_closed_log_without_a_clean_shutdown_recovers_within_the_cache(tmp_path,
                                                                                       small_cache):
    lg, _ = filled_log(tmp_path / "t-0")
    records = read_all(lg)
    lg.close()
    lg = Log(str(tmp_path / "t-0"), SMALL_SEGMENTS, clock=FakeClock(), had_clean_shutdown=False)
    assert len(files_open_under(tmp_path)) <= CAPACITY  # every segment scanned
    assert read_all(lg) == records
    lg.close()


def test_a_fetched_region_keeps_its_descriptor_while_reads_evict_all_the_others(tmp_path,
                                                                               small_cache):
    lg, _ = filled_log(tmp_path / "t-0")
    first = lg.segments[0]
    (region,) = lg.read(0, 1 << 20).regions  # a fetch response about to be sent
    expected = os.pread(os.open(first.log_path, os.O_RDONLY), region.length, region.position)
    inode = os.stat(first.log_path).st_ino
    for seg in lg.segments[1:]:  # other fetches meanwhile: far more files than the cache holds
        seg.read(seg.base_offset, 1 << 20).read()
    assert os.fstat(region.fd).st_ino == inode  # neither closed nor reused by another file
    assert region.read() == expected
    with open(os.devnull, "wb") as sink:
        assert os.sendfile(sink.fileno(), region.fd, region.position, region.length) == region.length
    assert first.file.pins == 1
    region.release()
    assert first.file.pins == 0
    for seg in lg.segments[1:CAPACITY + 2]:
        seg.read(seg.base_offset, 1 << 20).read()
    assert first.file.fd == -1  # evicted once nothing pinned it
    lg.close()


def test_a_region_dropped_unsent_lets_its_descriptor_go(tmp_path, small_cache):
    lg, _ = filled_log(tmp_path / "t-0", segments=3)
    seg = lg.segments[0]
    info = lg.read(0, 1 << 20)
    assert seg.file.pins == 1
    del info  # a fetch whose answer was dropped (the connection closed)
    assert seg.file.pins == 0
    lg.close()


def test_a_region_collected_inside_an_operation_on_the_cache_does_not_wait_for_it(tmp_path,
                                                                                    small_cache):
    """The garbage collector may finalize a region (one held by a cycle, a traceback's frame)
    on a thread in the middle of an operation on the cache, its lock held: waiting for the lock
    there would wait for ever. The unpin is left to the next operation."""
    lg, _ = filled_log(tmp_path / "t-0", segments=3)
    seg = lg.segments[0]
    region = lg.read(0, 1 << 20).regions[0]
    with small_cache.lock:  # as if the collector ran inside pin()
        del region
        assert seg.file.pins == 1
    lg.read(lg.segments[1].base_offset, 1 << 20).read()  # any next operation
    assert seg.file.pins == 0
    lg.close()


def test_retention_and_deletion_close_the_descriptors_of_what_they_delete(tmp_path, small_cache):
    clock = FakeClock()
    config = LogConfig(segment_bytes=1000, index_interval_bytes=200, retention_ms=HOUR,
                       file_delete_delay_ms=0)
    lg, _ = filled_log(tmp_path / "t-0", clock, segments=2 * CAPACITY, config=config)
    for seg in lg.segments[-CAPACITY:]:
        seg.read(seg.base_offset, 1 << 20).read()  # the newest ones cached
    doomed, active = lg.segments[:-1], lg.active_segment
    assert sum(1 for s in doomed if s.file.fd >= 0) >= CAPACITY - 1
    sending = doomed[-1].read(doomed[-1].base_offset, 1 << 20)  # a fetch being sent
    expected = sending.read()
    clock.advance(2 * HOUR)
    assert lg.delete_old_segments() == len(doomed)
    lg.delete_pending_files(clock.milliseconds())
    assert [s for s in doomed if s.file.fd >= 0] == [doomed[-1]]  # only the pinned one is open
    assert sorted(files_open_under(tmp_path)) == sorted(
        [doomed[-1].log_path + " (deleted)"] + ([active.log_path] if active.file.fd >= 0 else []))
    assert sending.read() == expected  # still its own (unlinked) file
    sending.release()
    assert doomed[-1].file.fd == -1  # closed at its last unpin
    assert files_open_under(tmp_path) in ([], [active.log_path])
    lg.delete()
    assert files_open_under(tmp_path) == []


def test_the_cleaner_thread_reads_pinned_segments_while_the_log_evicts(tmp_path, small_cache):
    """Reads on another thread (as the cleaner thread's) and on this one, all through the
    cache at a capacity far below the segment count: every read gets its own segment's
    bytes (a descriptor closed or reused under a reader would fail or mix them)."""
    lg, _ = filled_log(tmp_path / "t-0")
    expected = {seg.base_offset: [raw for _, raw in seg.batches()] for seg in lg.segments}
    errors = []

    def reader(segments):
        try:
            for _ in range(20):
                for seg in segments:
                    assert [raw for _, raw in seg.batches()] == expected[seg.base_offset]
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(lg.segments[i::2],)) for i in (0, 1)]
    for t in threads:
        t.start()
    for _ in range(20):
        for seg in reversed(lg.segments):
            region = seg.read(seg.base_offset, 1 << 20)
            assert region.read() == b"".join(expected[seg.base_offset])[:region.length]
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len(files_open_under(tmp_path)) <= CAPACITY
    lg.close()


def test_the_log_manager_sizes_the_cache_from_its_config(tmp_path):
    before = SEGMENT_FILES.capacity
    try:
        manager = LogManager([str(tmp_path)], SMALL_SEGMENTS, clock=FakeClock(),
                             manager_config=ManagerConfig.from_broker_props(
                                 {"log.segment.fd.cache.size": "20"}))
        manager.startup()
        assert SEGMENT_FILES.capacity == capacity_for(20) == 20
        manager.shutdown()
    finally:
        SEGMENT_FILES.resize(before)
    with pytest.raises(ValueError):
        ManagerConfig.from_broker_props({"log.segment.fd.cache.size": "0"})


def test_the_capacity_is_at_most_a_quarter_of_the_open_files_limit():
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert capacity_for(10**9) <= max(16, soft // 4)
    assert capacity_for(20) == min(20, max(16, soft // 4))


# ---------------------------------------------------------------- the cache, model-checked

FILES = 6


class Model:
    """What the cache should hold: the clock's ring of open files, their bits and pins."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.ring: list[int] = []  # open files, in the order the hand meets them
        self.used: dict[int, bool] = {}
        self.pins = [0] * FILES
        self.closed = [False] * FILES

    def evict(self) -> None:
        turns = 2 * len(self.ring)
        while len(self.ring) > self.capacity and turns:
            turns -= 1
            j = self.ring[0]
            if self.pins[j] or self.used[j]:
                self.used[j] = False
                self.ring.append(self.ring.pop(0))
            else:
                self.ring.pop(0)

    def pin(self, i: int) -> None:
        self.pins[i] += 1
        if i in self.ring:
            self.used[i] = True
        else:
            self.ring.append(i)
            self.used[i] = False
            self.evict()

    def unpin(self, i: int) -> None:
        self.pins[i] -= 1
        if not self.pins[i]:
            if self.closed[i]:
                if i in self.ring:
                    self.ring.remove(i)
            elif len(self.ring) > self.capacity:
                self.evict()

    def close(self, i: int) -> None:
        self.closed[i] = True
        if not self.pins[i] and i in self.ring:
            self.ring.remove(i)

    def resize(self, n: int) -> None:
        self.capacity = n
        self.evict()


@settings(max_examples=examples(60), deadline=None)
@given(capacity=st.integers(1, 4),
       ops=st.lists(st.tuples(st.sampled_from(["pin", "pin", "unpin", "close", "resize"]),
                              st.integers(0, FILES - 1), st.integers(1, 4)), max_size=80))
def test_cache_pins_evictions_and_bound_against_a_model(tmp_path_factory, capacity, ops):
    directory = tmp_path_factory.mktemp("fd-cache")
    paths = []
    for i in range(FILES):
        path = directory / f"{i}.log"
        path.write_bytes(b"%d" % i * 10)
        paths.append(str(path))
    inodes = [os.stat(p).st_ino for p in paths]
    baseline = open_fds()
    cache = FdCache(capacity)
    files = [cache.file(p, os.O_RDONLY) for p in paths]
    model = Model(capacity)
    held: dict[int, int] = {}  # a descriptor number a pin handed out -> the file it must be
    try:
        for op, i, n in ops:
            f = files[i]
            if op == "pin":
                if model.closed[i] and i not in model.ring:
                    with pytest.raises(ValueError):
                        f.pin()
                    continue
                held[f.pin()] = i
                model.pin(i)
            elif op == "unpin":
                if not model.pins[i]:
                    continue
                f.unpin()
                model.unpin(i)
            elif op == "close":
                f.close()
                model.close(i)
            else:
                cache.resize(n)
                model.resize(n)
            # the cache is the model
            assert list(cache._open) == [files[j] for j in model.ring]
            assert [files[j].pins for j in range(FILES)] == model.pins
            # the bound: over capacity only while pins hold it
            pinned = sum(1 for j in model.ring if model.pins[j])
            assert cache.open_count == len(model.ring) <= max(model.capacity, pinned)
            # exactly these descriptors are open, and each is its own file's
            assert open_fds() - baseline == {files[j].fd for j in model.ring}
            for j in model.ring:
                assert os.fstat(files[j].fd).st_ino == inodes[j]
            for fd, j in list(held.items()):
                if model.pins[j]:
                    assert files[j].fd == fd  # a pinned descriptor never changes
                else:
                    del held[fd]
    finally:
        for j in range(FILES):
            for _ in range(model.pins[j]):
                files[j].unpin()
            files[j].close()
    assert open_fds() == baseline


def test_the_least_recently_used_file_goes_first(tmp_path):
    paths = []
    for name in "abcd":
        (tmp_path / name).write_bytes(b"x")
        paths.append(str(tmp_path / name))
    cache = FdCache(3)
    a, b, c, d = (cache.file(p, os.O_RDONLY) for p in paths)
    for f in (a, b, c):
        f.pin()
        f.unpin()
    for f in (a, c):  # used again: b is the least recently used
        f.pin()
        f.unpin()
    d.pin()
    d.unpin()
    assert [f.fd >= 0 for f in (a, b, c, d)] == [True, False, True, True]
    assert cache.evictions == 1
    for f in (a, b, c, d):
        f.close()
