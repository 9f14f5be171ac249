"""The log manager's cleaner thread: the same passes as inline cleaning, swaps handed back to
the thread calling `tick`, and a swap dropped when retention changed the segments it
replaces; abandoned passes on shutdown and log deletion."""

import os
import shutil
import tempfile
import threading
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from brook.clock import FakeClock
from brook.records import Record, encode_batch
from brook.storage.config import LogConfig
from brook.storage.log import Log
from brook.storage.manager import LogManager, ManagerConfig

from tests.support.examples import examples
from tests.support.storage_helpers import read_all

HOUR = 3600 * 1000
COMPACT = LogConfig(segment_bytes=700, index_interval_bytes=100, cleanup_policy="compact",
                    min_cleanable_dirty_ratio=0.01, delete_retention_ms=1000)
MC = ManagerConfig(cleaner_backoff_ms=1000, retention_check_interval_ms=10 * HOUR)


def manager(path, clock, config=COMPACT):
    m = LogManager([str(path)], config, clock=clock, manager_config=MC)
    m.startup()
    return m


def append(lg, clock, pairs):
    now = clock.milliseconds()
    lg.append(encode_batch([Record(i, now, k, v) for i, (k, v) in enumerate(pairs)]))


def fill(lg, clock, batches, keys=5, per_batch=3):
    for i in range(batches):
        append(lg, clock, [(b"k%d" % ((i * per_batch + j) % keys), b"v%d-%d" % (i, j))
                           for j in range(per_batch)])
    lg.roll()


def cleaner_threads():
    return [t for t in threading.enumerate() if t.name.startswith("log-cleaner")]


def leftovers(directory):
    return [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap"))]


def clean_on_thread(m, now):
    """One pass on the cleaner thread, as the broker's ticks run it; its result (None if
    no log was due)."""
    m.clean_logs(now)
    if m.cleaning is None:
        return None
    assert m.wait_for_cleaner(30)
    result = m.drain_cleaner()
    assert m.cleaning is None
    return result


# ---------------------------------------------------------------- same result as inline


workloads = st.lists(
    st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=1, max_size=6),
    min_size=2, max_size=30)


@settings(max_examples=examples(30), deadline=None)
@given(workloads, st.integers(0, 3))
def test_a_pass_on_the_thread_leaves_what_an_inline_pass_leaves(batches, passes):
    with tempfile.TemporaryDirectory() as tmp:
        inline_dir, thread_dir = os.path.join(tmp, "inline"), os.path.join(tmp, "thread")
        clock = FakeClock()
        m = manager(inline_dir, clock)
        lg = m.get_or_create_log("t", 0)
        for n, batch in enumerate(batches):
            append(lg, clock, [(b"k%d" % key, None if tomb else b"v%d" % n) for key, tomb in batch])
            clock.advance(100)
        lg.roll()
        lg.flush()
        shutil.copytree(inline_dir, thread_dir)
        t = manager(thread_dir, clock)
        t.start_cleaner()
        try:
            for _ in range(passes + 1):
                now = clock.milliseconds()
                inline = m.clean_logs(now)
                threaded = clean_on_thread(t, now)
                assert (inline is None) == (threaded is None)
                if inline is not None:
                    assert (threaded.new_first_dirty_offset, threaded.records_kept, threaded.groups_cleaned) \
                        == (inline.new_first_dirty_offset, inline.records_kept, inline.groups_cleaned)
                assert read_all(t.get_log("t", 0)) == read_all(lg)
                assert t.cleaner.checkpoints == m.cleaner.checkpoints
                clock.advance(600)  # some tombstone horizons pass
        finally:
            t.shutdown()
            m.shutdown()


def test_the_broker_tick_hands_the_pass_to_the_thread_and_swaps_in_later(tmp_path):
    clock = FakeClock()
    m = manager(tmp_path, clock)
    lg = m.get_or_create_log("t", 0)
    fill(lg, clock, 30)
    before = lg.segments
    latest = {r[2]: r for r in read_all(lg)}
    m.start_cleaner()
    clock.advance(MC.cleaner_backoff_ms)
    m.tick()
    assert m.cleaning is lg  # handed to the thread: nothing swapped in by this tick
    assert m.next_due_ms() <= clock.milliseconds() + 100  # the next tick looks for the swaps
    assert m.wait_for_cleaner(30)
    assert lg.segments == before
    m.tick()
    assert m.cleaning is None
    after = read_all(lg)
    assert len(after) == 5 and {r[2]: r for r in after} == latest
    assert m.cleaner.checkpoints[("t", 0)] == lg.active_segment.base_offset
    assert not leftovers(lg.directory)
    m.shutdown()


# ---------------------------------------------------------------- retention during a pass


def test_retention_deleting_segments_being_cleaned_drops_their_swap(tmp_path):
    clock = FakeClock()
    config = COMPACT.with_overrides({"cleanup.policy": "compact,delete", "retention.ms": str(HOUR),
                                     "file.delete.delay.ms": "0"})
    m = manager(tmp_path, clock, config)
    lg = m.get_or_create_log("t", 0)
    fill(lg, clock, 12)  # old: retention will delete these segments
    old_end = lg.log_end_offset
    clock.advance(HOUR // 2)
    fill(lg, clock, 12)
    written = {r[0]: r for r in read_all(lg)}
    m.start_cleaner()
    m.clean_logs(clock.milliseconds())
    assert m.wait_for_cleaner(30)  # the pass is done; its swaps wait for the next tick
    clock.advance(HOUR * 3 // 4)
    assert m.cleanup_logs(clock.milliseconds()) > 0  # retention, between the pass and its swaps
    start = lg.log_start_offset
    assert 0 < start <= old_end
    remaining = read_all(lg)

    result = m.drain_cleaner()
    assert result.swaps_aborted >= 1
    assert ("t", 0) not in m.cleaner.checkpoints  # the next pass cleans the range again
    assert lg.log_start_offset == start
    after = read_all(lg)
    assert all(r[0] >= start for r in after)  # nothing deleted came back
    assert all(written[r[0]] == r for r in after)  # what is left is what was written
    latest = {r[2]: r for r in remaining}
    assert {r[2]: r for r in after} == latest  # every key's latest record is still there
    assert not leftovers(lg.directory)

    # What is on disk is what the log shows, after a crash too.
    crashed = str(tmp_path / "crashed" / "t-0")
    shutil.copytree(lg.directory, crashed)
    assert read_all(Log(crashed, config, clock=clock, log_start_offset=start)) == after

    # The next pass starts at the next tick. It does not read the segments retention
    # deleted, so their files go at once, while it runs.
    m.tick()
    assert m.cleaning is lg
    assert not [n for n in os.listdir(lg.directory) if n.endswith(".log.deleted")]
    assert m.wait_for_cleaner(30)
    m.tick()
    assert m.cleaning is None
    assert not [n for n in os.listdir(lg.directory) if n.endswith(".deleted")]
    assert m.cleaner.checkpoints[("t", 0)] == lg.active_segment.base_offset  # this pass completed
    cleaned = read_all(lg)
    assert {r[2]: r for r in cleaned} == latest
    m.shutdown()
    m = manager(tmp_path, clock, config)
    assert read_all(m.get_log("t", 0)) == cleaned
    m.shutdown()


def test_files_of_deleted_segments_stay_open_only_while_a_pass_reads_them(tmp_path, monkeypatch):
    import brook.storage.cleaner as cleaner_module

    clock = FakeClock()
    config = COMPACT.with_overrides({"cleanup.policy": "compact,delete", "retention.ms": str(HOUR),
                                     "file.delete.delay.ms": "0"})
    m = manager(tmp_path, clock, config)
    lg = m.get_or_create_log("t", 0)
    fill(lg, clock, 12)  # old: retention will delete these
    clock.advance(HOUR // 2)
    fill(lg, clock, 12)
    release = threading.Event()
    real_run_clean = cleaner_module.run_clean

    def held_run_clean(job, swap):
        release.wait(30)  # the pass has started and holds its snapshot of the segments
        return real_run_clean(job, swap)

    monkeypatch.setattr(cleaner_module, "run_clean", held_run_clean)
    m.start_cleaner()
    m.clean_logs(clock.milliseconds())
    read = set(map(id, m.cleaner_thread.job.segments))
    clock.advance(HOUR * 3 // 4)
    assert m.cleanup_logs(clock.milliseconds()) > 0
    queued = [seg for _, seg in lg.pending_deletes]
    assert queued and all(id(seg) in read for seg in queued)  # the pass reads every one of them
    m.tick()
    assert [seg for _, seg in lg.pending_deletes] == queued  # kept while the pass may read them
    assert all(os.path.exists(seg.log_path) for seg in queued)
    release.set()
    assert m.wait_for_cleaner(30)
    m.tick()  # the pass is over: their files go (a next pass, if one starts, does not read them)
    assert all(seg.closed and not os.path.exists(seg.log_path) for seg in queued)
    m.shutdown()


# ---------------------------------------------------------------- abandoned passes


def test_shutdown_abandons_a_pass_and_ends_the_thread(tmp_path):
    clock = FakeClock()
    m = manager(tmp_path, clock)
    lg = m.get_or_create_log("t", 0)
    fill(lg, clock, 200)
    before = read_all(lg)
    m.start_cleaner()
    m.clean_logs(clock.milliseconds())
    assert cleaner_threads()
    m.shutdown()  # before any tick swapped anything in
    assert not cleaner_threads()
    assert not leftovers(lg.directory)
    m = manager(tmp_path, clock)
    assert read_all(m.get_log("t", 0)) == before
    assert ("t", 0) not in m.cleaner.checkpoints
    m.shutdown()


def test_deleting_a_log_being_cleaned_abandons_the_pass(tmp_path):
    clock = FakeClock()
    m = manager(tmp_path, clock)
    lg = m.get_or_create_log("t", 0)
    fill(lg, clock, 200)
    m.start_cleaner()
    m.clean_logs(clock.milliseconds())
    m.delete_log("t", 0)
    assert m.cleaning is None
    assert not os.path.exists(lg.directory)
    m.tick()
    lg = m.get_or_create_log("t", 0)  # the same name again: a new, empty log
    assert read_all(lg) == []
    assert ("t", 0) not in m.cleaner.checkpoints
    m.shutdown()


def test_a_log_with_invalid_records_is_set_aside_by_the_thread(tmp_path):
    clock = FakeClock()
    m = manager(tmp_path, clock)
    lg = m.get_or_create_log("t", 0)
    fill(lg, clock, 30)
    first = lg.segments[0]
    with open(first.log_path, "r+b") as f:  # a flipped bit in a record of the first batch
        f.seek(70)
        byte = f.read(1)
        f.seek(70)
        f.write(bytes([byte[0] ^ 1]))
    before = [n for n in os.listdir(lg.directory)]
    m.start_cleaner()
    assert clean_on_thread(m, clock.milliseconds()) is None
    assert ("t", 0) in m.cleaner.uncleanable
    assert sorted(os.listdir(lg.directory)) == sorted(before)
    m.shutdown()


def test_deleting_a_log_under_a_pass_that_does_not_stop(tmp_path, monkeypatch):
    import brook.storage.cleaner as cleaner_module
    import brook.storage.manager as manager_module

    clock = FakeClock()
    m = manager(tmp_path, clock)
    lg = m.get_or_create_log("t", 0)
    fill(lg, clock, 20)
    release = threading.Event()

    def stuck_run_clean(job, swap):
        release.wait(30)  # a step that does not look at the cancellation (a long write)
        raise cleaner_module.CleanAborted()

    monkeypatch.setattr(cleaner_module, "run_clean", stuck_run_clean)
    monkeypatch.setattr(manager_module, "DELETE_WAIT_FOR_CLEANER_S", 0.2)
    m.start_cleaner()
    m.clean_logs(clock.milliseconds())
    segments = list(lg.segments)
    m.delete_log("t", 0)
    # Gone at once under its name, so the topic can come back empty ...
    assert not [n for n in os.listdir(tmp_path) if n.startswith("t-0")]
    again = m.get_or_create_log("t", 0)
    assert read_all(again) == [] and os.listdir(again.directory) != []
    # ... while the thread may still read through the old descriptors: they stay open.
    assert not any(seg.closed for seg in segments)
    release.set()
    assert m.wait_for_cleaner(30)
    for _ in range(200):  # closed on the thread as the pass ends, just after its waiters wake
        if all(seg.closed for seg in segments):
            break
        time.sleep(0.01)
    assert all(seg.closed for seg in segments)
    assert not [n for n in os.listdir(again.directory) if n.endswith(".cleaned")]
    m.shutdown()


def test_a_deletion_interrupted_by_a_crash_is_finished_at_start(tmp_path):
    clock = FakeClock()
    m = manager(tmp_path, clock)
    fill(m.get_or_create_log("t", 0), clock, 3)
    m.shutdown()
    os.rename(tmp_path / "t-0", tmp_path / "t-0.0123abcd-delete")
    m = manager(tmp_path, clock)
    assert not [n for n in os.listdir(tmp_path) if n.endswith("-delete")]
    assert m.get_log("t", 0) is None
    m.shutdown()
