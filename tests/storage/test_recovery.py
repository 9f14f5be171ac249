"""Crash recovery: torn tails, garbage, flipped bytes, lost indexes, the clean-shutdown skip."""

import os
import shutil

import pytest

from brook.clock import FakeClock
from brook.records import Record, encode_batch
from brook.storage.config import LogConfig
from brook.storage.log import Log

from tests.support.storage_helpers import make_batch, read_all

CONFIG = LogConfig(segment_bytes=1200, index_interval_bytes=150)


def build_log(path, n_batches=25):
    """A log of several segments; returns (dir, expected records, base offset of last batch)."""
    d = str(path / "t-0")
    lg = Log(d, CONFIG, clock=FakeClock())
    for i in range(n_batches):
        lg.append(make_batch(1 + i % 3, 1000 + i, size=20 + i, start=lg.log_end_offset))
    expected = read_all(lg)
    last = lg.read(lg.log_end_offset - 1, 1 << 20).regions[0]
    lg.close()
    return d, expected, last


def reopen(d, **kw):
    return Log(d, CONFIG, clock=FakeClock(), **kw)


def active_log_file(d):
    return os.path.join(d, sorted(n for n in os.listdir(d) if n.endswith(".log"))[-1])


def test_torn_tail_at_every_byte_of_the_last_batch(tmp_path):
    d, expected, last = build_log(tmp_path)
    lg = reopen(d, had_clean_shutdown=True)
    last_base = lg.read(lg.log_end_offset - 1, 1 << 20).batches()[0].base_offset
    lg.close()
    keep = [r for r in expected if r[0] < last_base]
    for cut in range(last.position, last.position + last.length):
        work = str(tmp_path / f"cut{cut}" / "t-0")
        shutil.copytree(d, work)
        with open(active_log_file(work), "r+b") as f:
            f.truncate(cut)
        lg = reopen(work)
        assert lg.log_end_offset == last_base, cut
        assert read_all(lg) == keep
        assert lg.recovered_bytes_truncated == cut - last.position
        # the log takes appends again where it was cut
        info = lg.append(make_batch(1, 5000))
        assert info.first_offset == last_base
        lg.close()
        shutil.rmtree(str(tmp_path / f"cut{cut}"))


@pytest.mark.parametrize("garbage", [
    b"\x00" * 100,
    os.urandom(3),
    os.urandom(500),
    b"\xff" * 61,
    "valid-but-old",  # a well-formed batch whose offsets go backwards
    "bad-crc",
], ids=["zeros", "random-3", "random-500", "ff", "valid-but-old", "bad-crc"])  # one id each run
def test_garbage_after_the_last_batch_is_cut(tmp_path, garbage):
    d, expected, _ = build_log(tmp_path)
    if garbage == "valid-but-old":
        garbage = encode_batch([Record(0, 1, b"k", b"v")], base_offset=0)
    elif garbage == "bad-crc":
        bad = bytearray(encode_batch([Record(10_000, 1, b"k", b"v")]))
        bad[-1] ^= 1
        garbage = bytes(bad)
    path = active_log_file(d)
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(garbage)
    lg = reopen(d)
    assert read_all(lg) == expected
    assert os.path.getsize(path) == size
    assert lg.log_end_offset == expected[-1][0] + 1


def test_flipped_byte_truncates_at_that_batch_and_drops_later_segments(tmp_path):
    d, expected, _ = build_log(tmp_path)
    lg = reopen(d, had_clean_shutdown=True)
    second = lg.segments[1]
    victim = list(second.batches())[2]
    victim_base = int.from_bytes(victim[1][:8], "big")
    n_segments = len(lg.segments)
    lg.close()
    with open(os.path.join(d, f"{second.base_offset:020d}.log"), "r+b") as f:
        f.seek(victim[0] + 70)
        byte = f.read(1)
        f.seek(victim[0] + 70)
        f.write(bytes([byte[0] ^ 0x40]))
    lg = reopen(d, recovery_point=0)
    assert lg.log_end_offset == victim_base
    assert read_all(lg) == [r for r in expected if r[0] < victim_base]
    assert len(lg.segments) == 2 < n_segments
    assert len([n for n in os.listdir(d) if n.endswith(".log")]) == 2


def test_clean_shutdown_skips_the_scan(tmp_path):
    d, expected, last = build_log(tmp_path)
    path = active_log_file(d)
    with open(path, "r+b") as f:  # corrupt the CRC-covered body of the last batch
        f.seek(last.position + last.length - 1)
        f.write(b"\xaa")
    lg = reopen(d, had_clean_shutdown=True)
    assert lg.log_end_offset == expected[-1][0] + 1  # not scanned, so not noticed
    lg.close()
    lg = reopen(d, had_clean_shutdown=False, recovery_point=0)
    assert lg.log_end_offset < expected[-1][0] + 1


def test_segments_before_the_recovery_point_are_not_scanned(tmp_path):
    d, expected, _ = build_log(tmp_path)
    lg = reopen(d, had_clean_shutdown=True)
    first, third = lg.segments[0], lg.segments[2]
    lg.close()
    with open(os.path.join(d, f"{first.base_offset:020d}.log"), "r+b") as f:
        f.seek(first.size - 1)
        f.write(b"\x55")  # damage that only a scan would see
    lg = reopen(d, recovery_point=third.base_offset)
    assert lg.log_end_offset == expected[-1][0] + 1
    assert lg.recovered_bytes_truncated == 0


@pytest.mark.parametrize("damage", ["delete", "truncate", "garbage"])
@pytest.mark.parametrize("which", ["index", "timeindex"])
def test_lost_or_damaged_index_is_rebuilt(tmp_path, damage, which):
    d, expected, _ = build_log(tmp_path)
    lg = reopen(d, had_clean_shutdown=True)
    seg = lg.segments[1]
    entries = (len(seg.index), len(seg.time_index))
    lg.close()
    path = os.path.join(d, f"{seg.base_offset:020d}.{which}")
    if damage == "delete":
        os.unlink(path)
    elif damage == "truncate":
        with open(path, "r+b") as f:
            f.truncate(max(os.path.getsize(path) - 3, 0))
    else:
        with open(path, "wb") as f:
            f.write(os.urandom(48))
    lg = reopen(d, had_clean_shutdown=True)
    rebuilt = lg.segments[1]
    assert (len(rebuilt.index), len(rebuilt.time_index)) == entries
    assert read_all(lg) == expected
    for start in range(0, len(expected), 5):
        assert read_all(lg, start=start)[0] == expected[start]
    lg.close()
    assert os.path.getsize(path) > 0


def test_empty_segment_and_empty_log_reload(tmp_path):
    d = str(tmp_path / "t-3")
    lg = Log(d, CONFIG, clock=FakeClock())
    lg.close()
    lg = Log(d, CONFIG, clock=FakeClock())
    assert (lg.log_start_offset, lg.log_end_offset) == (0, 0)
    lg.append(make_batch(2, 1))
    lg.roll()
    lg.close()
    lg = Log(d, CONFIG, clock=FakeClock(), had_clean_shutdown=True)
    assert lg.log_end_offset == 2 and [s.base_offset for s in lg.segments] == [0, 2]
    assert lg.append(make_batch(1, 1)).first_offset == 2


def test_damaged_active_segment_after_a_clean_shutdown_is_recovered_not_fatal(tmp_path):
    d, expected, last = build_log(tmp_path)
    lg = reopen(d, had_clean_shutdown=True)
    indexed = lg.active_segment.index.last_entry[1]
    lg.close()
    with open(active_log_file(d), "r+b") as f:  # a batch length of 0 after the last index entry
        f.seek(last.position + 8)
        f.write(b"\x00\x00\x00\x00")
    assert last.position >= indexed
    lg = reopen(d, had_clean_shutdown=True)
    assert lg.recovered_bytes_truncated == last.length
    assert read_all(lg) == [r for r in expected if r[0] < lg.log_end_offset]
    assert lg.log_end_offset < expected[-1][0] + 1


def test_damaged_old_segment_after_a_clean_shutdown_does_not_stop_the_log(tmp_path):
    d, expected, _ = build_log(tmp_path)
    lg = reopen(d, had_clean_shutdown=True)
    second = lg.segments[1]
    last_pos = list(second.batches())[-1][0]
    lg.close()
    with open(os.path.join(d, f"{second.base_offset:020d}.log"), "r+b") as f:
        f.seek(last_pos + 8)
        f.write(b"\x00\x00\x00\x00")
    lg = reopen(d, had_clean_shutdown=True)
    assert lg.log_end_offset == expected[-1][0] + 1  # the active segment is fine
    assert read_all(lg, start=lg.segments[2].base_offset) == [r for r in expected if r[0] >= lg.segments[2].base_offset]
