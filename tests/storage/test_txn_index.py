"""The aborted-transaction index (`.txnindex`) byte for byte as Kafka lays it out (AbortedTxn:
version int16, producerId int64, firstOffset int64, lastOffset int64, lastStableOffset int64,
34 bytes, big-endian), its search (TransactionIndex.collectAbortedTxns), and its life with its
segment: written at an abort, truncated, renamed and deleted with it, rebuilt when damaged."""

from __future__ import annotations

import os
import struct

import pytest

from brook.clock import FakeClock
from brook.records import Record, encode_batch
from brook.storage.config import LogConfig
from brook.storage.index import CorruptIndexError
from brook.storage.log import Log
from brook.storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex, decode_entries

CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=64)


def test_an_entry_is_kafkas_34_bytes():
    txn = AbortedTxn(producer_id=0x0102030405060708, first_offset=10, last_offset=42,
                     last_stable_offset=43)
    data = txn.encode()
    assert ENTRY_SIZE == len(data) == 34
    # Kafka's offsets within an entry: version 0, producerId 2, firstOffset 10, lastOffset 18,
    # lastStableOffset 26 (AbortedTxn.*_OFFSET)
    assert data == (b"\x00\x00" + bytes(range(1, 9)) + (10).to_bytes(8, "big")
                    + (42).to_bytes(8, "big") + (43).to_bytes(8, "big"))
    assert decode_entries(data * 2) == [txn, txn]


def test_an_index_written_as_kafka_writes_it_is_read(tmp_path):
    path = str(tmp_path / "00000000000000000100.txnindex")
    with open(path, "wb") as f:
        for pid, first, last, lso in [(7, 90, 100, 101), (8, 95, 120, 121), (7, 130, 150, 140)]:
            f.write(struct.pack(">hqqqq", 0, pid, first, last, lso))
    index = TransactionIndex(path, 100)
    index.load(next_offset=151)
    assert [t.producer_id for t in index.entries] == [7, 8, 7]
    assert index.entries[2] == AbortedTxn(7, 130, 150, 140)


@pytest.mark.parametrize("damage", ["short", "version", "order", "before the segment", "past its end"])
def test_a_damaged_index_is_refused(tmp_path, damage):
    path = str(tmp_path / "00000000000000000100.txnindex")
    entries = {"short": b"\x00" * 33,
               "version": struct.pack(">hqqqq", 1, 7, 100, 101, 102),
               "order": AbortedTxn(7, 100, 110, 111).encode() + AbortedTxn(8, 100, 105, 106).encode(),
               "before the segment": AbortedTxn(7, 10, 99, 100).encode(),
               "past its end": AbortedTxn(7, 100, 200, 201).encode()}[damage]
    with open(path, "wb") as f:
        f.write(entries)
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, 100).load(next_offset=150)


def test_collect_stops_at_an_entry_whose_last_stable_offset_covers_the_range(tmp_path):
    """Kafka's collectAbortedTxns: entries overlapping [fetch, upper), complete once an
    entry's last stable offset reaches the upper bound."""
    index = TransactionIndex(str(tmp_path / "x.txnindex"), 0)
    for txn in [AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 3, 10, 11), AbortedTxn(3, 12, 20, 21),
                AbortedTxn(4, 30, 40, 41)]:
        index.append(txn)
    assert index.collect(6, 15) == ([AbortedTxn(2, 3, 10, 11), AbortedTxn(3, 12, 20, 21)], True)
    assert index.collect(0, 4) == ([AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 3, 10, 11)], True)
    assert index.collect(41, 50) == ([], False)  # maybe in the next segment
    with pytest.raises(ValueError):
        index.append(AbortedTxn(5, 30, 40, 41))  # markers only grow


def test_no_file_until_the_first_abort_and_truncation_and_reset_follow_the_file(tmp_path):
    path = str(tmp_path / "x.txnindex")
    index = TransactionIndex(path, 0)
    assert len(index) == 0 and not os.path.exists(path)
    index.append(AbortedTxn(1, 0, 5, 6))
    index.append(AbortedTxn(2, 1, 9, 10))
    assert os.path.getsize(path) == 2 * ENTRY_SIZE
    index.truncate_to(9)
    assert os.path.getsize(path) == ENTRY_SIZE and index.entries == [AbortedTxn(1, 0, 5, 6)]
    again = TransactionIndex(path, 0)
    assert again.entries == [AbortedTxn(1, 0, 5, 6)]
    index.truncate_to(5)
    assert not os.path.exists(path) and index.entries == []


def txn_batch(pid, seq, ts):
    return encode_batch([Record(0, ts, b"k", b"v")], producer_id=pid, producer_epoch=0,
                        base_sequence=seq, transactional=True)


def aborted_log(tmp_path):
    """A log whose first segment holds an aborted transaction, then two more segments."""
    lg = Log(str(tmp_path / "t-0"), CONFIG, clock=FakeClock())
    ts = lg.clock.milliseconds()
    lg.append(txn_batch(7, 0, ts))
    lg.append(txn_batch(8, 0, ts))
    lg.append_as_marker(7, 0, 0, committed=False)
    lg.roll()
    lg.append_as_marker(8, 0, 0, committed=False)
    lg.roll()
    lg.append(encode_batch([Record(0, ts, b"k", b"v")]))
    return lg


def test_the_index_lives_and_dies_with_its_segment(tmp_path):
    lg = aborted_log(tmp_path)
    first, second, _ = lg.segments
    assert first.txn_index.entries == [AbortedTxn(7, 0, 2, 1)]
    assert second.txn_index.entries == [AbortedTxn(8, 1, 3, 4)]
    name = os.path.basename(first.txn_index.path)
    assert name == "00000000000000000000.txnindex"
    lg.truncate_to(3)  # a follower cutting its log: the second segment goes, its index too
    assert not os.path.exists(second.txn_index.path)
    assert lg.all_aborted_transactions() == [AbortedTxn(7, 0, 2, 1)]
    lg.append_as_marker(8, 0, 0, committed=False)  # into the first segment, active again
    assert len(first.txn_index) == 2
    lg.truncate_to(3)  # within the segment: the entry of the marker cut goes
    assert first.txn_index.entries == [AbortedTxn(7, 0, 2, 1)] and lg.log_end_offset == 3
    assert os.path.getsize(first.txn_index.path) == 34
    lg.roll()
    lg.increase_log_start_offset(3)
    lg.delete_old_segments()
    assert os.path.exists(os.path.join(lg.directory, name + ".deleted"))
    lg.delete_pending_files(force=True)
    assert not any(n.endswith(".txnindex") or n.endswith(".deleted") for n in os.listdir(lg.directory))
    lg.close()


@pytest.mark.parametrize("how", ["damaged", "crash"])
def test_the_index_is_rebuilt_from_the_log(tmp_path, how):
    lg = aborted_log(tmp_path)
    before = lg.all_aborted_transactions()
    path = lg.segments[0].txn_index.path
    if how == "damaged":
        lg.close()
        with open(path, "r+b") as f:
            f.write(b"\x00\x07")  # version 7
        lg = Log(lg.directory, CONFIG, clock=FakeClock(), had_clean_shutdown=True)
    else:
        for seg in lg.segments:
            seg.close_without_index()
        os.unlink(path)
        lg = Log(lg.directory, CONFIG, clock=FakeClock(), recovery_point=0)
    assert lg.all_aborted_transactions() == before
    assert open(path, "rb").read() == before[0].encode()
    lg.close()
