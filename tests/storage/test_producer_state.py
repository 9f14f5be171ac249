"""Idempotent producer state: duplicates, sequence and epoch checks, several batches per
append, snapshots and replay across restarts, recovery truncation, expiry, and the
cleaner keeping each producer's last batch."""

import os
import struct

import pytest
from brook.records.crc import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from brook.clock import FakeClock
from brook.records import Record, encode_batch
from brook.records.batch import read_header
from brook.storage.cleaner import clean_log
from brook.storage.config import LogConfig
from brook.storage.errors import InvalidProducerEpochError, InvalidRecordError, OutOfOrderSequenceError
from brook.storage.log import Log
from brook.storage.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    AppendOrigin,
    BatchMetadata,
    CorruptSnapshotError,
    ProducerBatch,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    list_snapshot_offsets,
    snapshot_file_name,
)

from tests.support.examples import examples
from tests.support.storage_helpers import read_all

INT32_MAX = 2**31 - 1
PID = 4000
CONFIG = LogConfig(segment_bytes=1000, index_interval_bytes=100)


def idem(n, seq, *, pid=PID, epoch=0, ts=None, clock=None, key=b"k", value=b"v" * 20):
    """One idempotent batch of `n` records from base sequence `seq`."""
    ts = clock.milliseconds() if ts is None else ts
    records = [Record(i, ts + i, key + b"%d" % i, value) for i in range(n)]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def plain(n, ts, key=b"p"):
    return encode_batch([Record(i, ts + i, key + b"%d" % i, b"x") for i in range(n)])


def open_log(path, clock, config=CONFIG, name="t-0", **kw):
    return Log(str(path / name), config, clock=clock, **kw)


def crash(lg):
    """Stop using a log the way a killed process does: no snapshot, no clean close."""
    for seg in lg.segments:
        seg.close_without_index()


def states(lg):
    return dict(lg.producer_state.producers)


def log_bytes(lg):
    return b"".join(open(seg.log_path, "rb").read() for seg in lg.segments)


# ---------------------------------------------------------------- duplicates


def test_a_retried_batch_is_answered_with_its_original_offsets_and_not_written(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    lg.append(plain(2, clock.milliseconds()))
    first = idem(3, 0, clock=clock)
    info = lg.append(first)
    assert (info.first_offset, info.last_offset, info.duplicate) == (2, 4, False)
    lg.append(plain(1, clock.milliseconds()))
    before, end = log_bytes(lg), lg.log_end_offset
    clock.advance(10)
    retry = lg.append(first)
    assert retry.duplicate is True
    assert (retry.first_offset, retry.last_offset) == (2, 4)
    assert (retry.record_count, retry.valid_bytes) == (0, 0)
    assert retry.max_timestamp == read_header(first).max_timestamp
    assert lg.log_end_offset == end and log_bytes(lg) == before
    lg.close()


def test_each_of_the_last_five_batches_is_recognised_and_older_ones_are_not(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock, LogConfig())
    batches, offsets = [], []
    for i in range(NUM_BATCHES_TO_RETAIN + 1):
        batches.append(idem(2, 2 * i, clock=clock))
        info = lg.append(batches[-1])
        offsets.append((info.first_offset, info.last_offset))
    for batch, (first, last) in list(zip(batches, offsets))[1:]:
        info = lg.append(batch)
        assert info.duplicate and (info.first_offset, info.last_offset) == (first, last)
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(batches[0])  # no longer retained: just a sequence from the past
    lg.close()


def test_a_duplicate_must_match_the_whole_sequence_range(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    lg.append(idem(3, 0, clock=clock))
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(idem(2, 0, clock=clock))  # same first sequence, different last
    lg.close()


def test_a_duplicate_of_an_older_epoch_is_fenced_not_answered(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    old = idem(1, 0, epoch=0, clock=clock)
    lg.append(old)
    lg.append(idem(1, 0, epoch=1, clock=clock))
    with pytest.raises(InvalidProducerEpochError):
        lg.append(old)
    lg.close()


# ---------------------------------------------------------------- sequences and epochs


def test_sequences_must_follow_on_within_an_epoch(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    lg.append(idem(3, 0, clock=clock))  # 0..2
    end, before = lg.log_end_offset, log_bytes(lg)
    for bad_seq in (4, 2, 1, 100):
        with pytest.raises(OutOfOrderSequenceError):
            lg.append(idem(1, bad_seq, clock=clock))
    assert lg.log_end_offset == end and log_bytes(lg) == before
    assert lg.append(idem(2, 3, clock=clock)).first_offset == end
    assert lg.producer_state.last_entry(PID).last_seq == 4
    lg.close()


def test_an_older_epoch_is_fenced(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    lg.append(idem(1, 0, epoch=5, clock=clock))
    end = lg.log_end_offset
    with pytest.raises(InvalidProducerEpochError):
        lg.append(idem(1, 1, epoch=4, clock=clock))
    assert lg.log_end_offset == end
    lg.close()


def test_a_new_epoch_starts_at_sequence_zero(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    lg.append(idem(3, 0, epoch=0, clock=clock))
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(idem(1, 3, epoch=1, clock=clock))  # continuing the sequence is not enough
    lg.append(idem(1, 0, epoch=1, clock=clock))
    entry = lg.producer_state.last_entry(PID)
    assert entry.producer_epoch == 1 and len(entry.batches) == 1  # the old epoch's are forgotten
    lg.close()


def test_an_unknown_producer_may_start_at_any_sequence(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    lg.append(idem(2, 42, epoch=3, clock=clock))
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(idem(1, 42, epoch=3, clock=clock, value=b"other"))  # 42..43 is not 42..42
    lg.append(idem(1, 44, epoch=3, clock=clock))
    lg.close()


def test_sequences_wrap_from_int32_max_to_zero(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    lg.append(idem(2, INT32_MAX - 1, clock=clock))  # MAX-1, MAX
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(idem(1, 1, clock=clock))
    wrapped = idem(3, 0, clock=clock)  # 0..2
    lg.append(wrapped)
    assert lg.producer_state.last_entry(PID).last_seq == 2
    spanning = idem(3, INT32_MAX, pid=PID + 1, clock=clock)  # MAX, 0, 1
    lg.append(spanning)
    assert lg.producer_state.last_entry(PID + 1).last_seq == 1
    assert lg.append(spanning).duplicate
    lg.append(idem(1, 2, pid=PID + 1, clock=clock))
    lg.close()


def test_non_idempotent_batches_skip_producer_state(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    same = encode_batch([Record(0, clock.milliseconds(), b"k", b"v")], base_sequence=7)  # pid -1
    a, b = lg.append(same), lg.append(same)
    assert not a.duplicate and not b.duplicate and b.first_offset == a.first_offset + 1
    assert len(lg.producer_state) == 0
    lg.close()


# ---------------------------------------------------------------- several batches per call


def test_several_batches_in_one_call_are_checked_against_each_other(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock, LogConfig())
    info = lg.append(idem(3, 0, clock=clock) + idem(2, 3, clock=clock) + idem(1, 0, pid=PID + 1, clock=clock))
    assert (info.first_offset, info.last_offset) == (0, 5)
    assert lg.producer_state.last_entry(PID).last_seq == 4
    assert lg.producer_state.last_entry(PID + 1).last_seq == 0
    end, before = lg.log_end_offset, log_bytes(lg)
    for bad in (idem(1, 5, clock=clock) + idem(1, 7, clock=clock),  # gap after the first
                idem(1, 5, clock=clock) + idem(1, 5, clock=clock),  # a repeat within the call
                idem(1, 5, clock=clock) + idem(1, 0, epoch=1, clock=clock) + idem(1, 1, epoch=0, clock=clock)):
        with pytest.raises((OutOfOrderSequenceError, InvalidProducerEpochError)):
            lg.append(bad)
        assert lg.log_end_offset == end and log_bytes(lg) == before  # all or nothing
    assert lg.producer_state.last_entry(PID).last_seq == 4
    lg.close()


def test_an_unknown_producer_is_known_from_its_first_batch_of_a_call(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(idem(1, 10, clock=clock) + idem(1, 20, clock=clock))
    assert len(lg.producer_state) == 0
    lg.close()


def test_a_call_holding_a_duplicate_is_answered_as_that_duplicate(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock, LogConfig())
    first = idem(2, 0, clock=clock)
    lg.append(plain(1, clock.milliseconds()))
    lg.append(first)  # offsets 1..2
    end = lg.log_end_offset
    info = lg.append(idem(1, 2, pid=PID + 1, clock=clock) + first)
    assert info.duplicate and (info.first_offset, info.last_offset) == (1, 2)
    assert lg.log_end_offset == end and lg.producer_state.last_entry(PID + 1) is None
    lg.close()


# ---------------------------------------------------------------- header checks for clients


def test_client_batches_must_have_base_offset_zero(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    batch = encode_batch([Record(7, clock.milliseconds(), b"k", b"v")])
    with pytest.raises(InvalidRecordError):
        lg.append(batch)
    assert lg.append(batch, origin=AppendOrigin.COORDINATOR).first_offset == 0
    lg.close()


def test_a_client_batch_with_a_producer_id_needs_a_sequence(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    batch = idem(1, -1, clock=clock)
    with pytest.raises(InvalidRecordError):
        lg.append(batch)
    lg.append(batch, origin=AppendOrigin.COORDINATOR)  # a coordinator's epoch-only write
    assert lg.producer_state.last_entry(PID).producer_epoch == 0
    lg.close()


def test_coordinator_appends_check_epochs_but_not_sequences(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    lg.append(idem(1, 0, epoch=2, clock=clock))
    lg.append(idem(1, 9, epoch=2, clock=clock), origin=AppendOrigin.COORDINATOR)
    with pytest.raises(InvalidProducerEpochError):
        lg.append(idem(1, 10, epoch=1, clock=clock), origin=AppendOrigin.COORDINATOR)
    lg.close()


# ---------------------------------------------------------------- the sans-I/O core


def pb(seq, n=1, *, pid=PID, epoch=0, first=0, ts=1000):
    return ProducerBatch(pid, epoch, seq, first, first + n - 1, ts)


def test_prepare_changes_nothing_and_apply_stores_the_plan():
    psm = ProducerStateManager()
    plan = psm.prepare([pb(0, 2, first=0), pb(2, 1, first=2)])
    assert len(psm) == 0
    psm.apply(plan)
    entry = psm.last_entry(PID)
    assert [(m.first_seq, m.last_seq, m.first_offset, m.last_offset) for m in entry.batches] == [(0, 1, 0, 1), (2, 2, 2, 2)]
    dup = psm.prepare([pb(0, 2, first=10)])
    assert dup.duplicate == BatchMetadata(0, 1, 0, 1, 1000)
    psm.apply(dup)
    assert psm.last_entry(PID) is entry


def test_replay_checks_nothing():
    psm = ProducerStateManager()
    psm.replay([pb(5, epoch=3), pb(9, epoch=1, first=1), pb(0, epoch=1, first=2)])
    entry = psm.last_entry(PID)
    assert entry.producer_epoch == 1 and entry.last_seq == 0


def test_sequence_and_epoch_checks_in_the_core():
    psm = ProducerStateManager()
    psm.apply(psm.prepare([pb(INT32_MAX - 1, 2, epoch=1)]))  # unknown: any sequence; ends at MAX
    with pytest.raises(OutOfOrderSequenceError):
        psm.prepare([pb(1, epoch=1)])
    with pytest.raises(OutOfOrderSequenceError):
        psm.prepare([pb(0, epoch=1), pb(2, epoch=1, first=1)])  # checked against the earlier one
    with pytest.raises(InvalidProducerEpochError):
        psm.prepare([pb(0, epoch=0)])
    with pytest.raises(OutOfOrderSequenceError):
        psm.prepare([pb(5, epoch=2)])
    psm.prepare([pb(9, epoch=1)], AppendOrigin.COORDINATOR)  # epochs only
    psm.apply(psm.prepare([pb(0, epoch=1)]))  # wraps
    assert psm.last_entry(PID).last_seq == 0


def test_expiry_in_the_core():
    psm = ProducerStateManager(producer_id_expiration_ms=100)
    psm.apply(psm.prepare([pb(0, ts=1000), pb(0, pid=PID + 1, ts=1050)]))
    assert psm.remove_expired_producers(1099) == []
    assert psm.remove_expired_producers(1100) == [PID]
    assert list(psm.producers) == [PID + 1]


# ---------------------------------------------------------------- restarts


def build(tmp_path, clock, n=12):
    """A log of several segments with two idempotent producers and plain batches."""
    lg = open_log(tmp_path, clock)
    sent = []
    for i in range(n):
        pid = PID + i % 2
        batch = idem(2, 2 * (i // 2), pid=pid, clock=clock)
        info = lg.append(batch)
        sent.append((batch, info))
        lg.append(plain(1, clock.milliseconds()))
        clock.advance(5)
    assert len(lg.segments) > 2
    return lg, sent


def test_clean_restart_loads_the_snapshot_without_replaying(tmp_path, monkeypatch):
    clock = FakeClock()
    lg, sent = build(tmp_path, clock)
    before, end = states(lg), lg.log_end_offset
    lg.close()
    assert end in list_snapshot_offsets(lg.directory)
    monkeypatch.setattr(Log, "_producer_batches", lambda self, start: pytest.fail("replayed"))
    lg = open_log(tmp_path, clock, had_clean_shutdown=True)
    assert states(lg) == before
    batch, info = sent[-1]
    assert lg.append(batch).first_offset == info.first_offset  # still a duplicate
    lg.close()


@pytest.mark.parametrize("snapshots", ["kept", "removed"])
def test_unclean_restart_replays_the_log_after_the_last_snapshot(tmp_path, monkeypatch, snapshots):
    clock = FakeClock()
    lg, sent = build(tmp_path, clock)
    before, end = states(lg), lg.log_end_offset
    crash(lg)
    offsets = list_snapshot_offsets(lg.directory)
    assert offsets and end not in offsets  # only the ones taken at rolls
    if snapshots == "removed":
        for off in offsets:
            os.unlink(os.path.join(lg.directory, snapshot_file_name(off)))
    replayed_from = []
    real = Log._producer_batches
    monkeypatch.setattr(Log, "_producer_batches", lambda self, start: (replayed_from.append(start), real(self, start))[1])
    lg = open_log(tmp_path, clock)
    assert replayed_from == [offsets[-1] if snapshots == "kept" else 0]
    assert states(lg) == before
    for batch, info in sent[-2:]:
        assert lg.append(batch).duplicate
    assert end in list_snapshot_offsets(lg.directory)  # the rebuilt state is saved
    lg.close()


def test_a_corrupt_snapshot_falls_back_to_an_older_one_or_the_log_start(tmp_path, monkeypatch):
    clock = FakeClock()
    lg, _ = build(tmp_path, clock)
    before = states(lg)
    crash(lg)
    offsets = list_snapshot_offsets(lg.directory)
    newest = os.path.join(lg.directory, snapshot_file_name(offsets[-1]))
    data = bytearray(open(newest, "rb").read())
    data[len(data) // 2] ^= 0x40
    open(newest, "wb").write(data)
    replayed_from = []
    real = Log._producer_batches
    monkeypatch.setattr(Log, "_producer_batches", lambda self, start: (replayed_from.append(start), real(self, start))[1])
    lg = open_log(tmp_path, clock)
    assert replayed_from == [offsets[-2]]
    assert offsets[-1] not in list_snapshot_offsets(lg.directory)
    assert states(lg) == before
    lg.close()
    # every snapshot damaged (here: emptied): the state comes from the whole log
    for off in list_snapshot_offsets(lg.directory):
        open(os.path.join(lg.directory, snapshot_file_name(off)), "wb").close()
    replayed_from.clear()
    lg = open_log(tmp_path, clock)
    assert replayed_from == [0] and states(lg) == before
    lg.close()


def test_recovery_truncation_drops_the_state_of_lost_batches(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock, LogConfig(segment_bytes=2000))
    infos = [lg.append(idem(2, 2 * i, clock=clock)) for i in range(6)]
    assert len(lg.segments) == 1
    lg.roll()
    roll_offset = lg.log_end_offset
    lost = idem(2, 12, clock=clock)
    lg.append(lost)
    keep = lg.read(infos[2].first_offset, 1).regions[0].position
    crash(lg)
    assert roll_offset in list_snapshot_offsets(lg.directory)
    # damage the third batch: recovery keeps the first two only
    first_segment = lg.segments[0].log_path
    with open(first_segment, "r+b") as f:
        f.seek(keep + 70)
        byte = f.read(1)
        f.seek(keep + 70)
        f.write(bytes([byte[0] ^ 1]))
    lg = open_log(tmp_path, clock)
    assert lg.log_end_offset == infos[2].first_offset
    assert roll_offset not in list_snapshot_offsets(lg.directory)  # beyond the new end
    entry = lg.producer_state.last_entry(PID)
    assert entry.last_seq == 3 and entry.last_data_offset == infos[1].last_offset
    retry = lg.append(idem(2, 4, clock=clock))  # the lost batch's sequence is next again
    assert not retry.duplicate and retry.first_offset == infos[2].first_offset
    lg.close()


def test_snapshots_go_with_the_segments_retention_deletes(tmp_path):
    clock = FakeClock()
    lg, _ = build(tmp_path, clock)
    bases = [seg.base_offset for seg in lg.segments]
    assert set(bases[1:]) <= set(list_snapshot_offsets(lg.directory))
    lg.config = LogConfig(segment_bytes=1000, retention_bytes=1)
    lg.delete_old_segments()
    assert list_snapshot_offsets(lg.directory) == [bases[-1]]
    lg.close()


# ---------------------------------------------------------------- expiry


def test_producers_expire_after_producer_id_expiration_ms(tmp_path):
    clock = FakeClock()
    config = LogConfig(producer_id_expiration_ms=60_000)
    lg = open_log(tmp_path, clock, config)
    lg.append(idem(1, 0, clock=clock))  # last timestamp: now
    lg.append(idem(1, 0, pid=PID + 1, clock=clock))
    clock.advance(30_000)
    lg.append(idem(1, 1, pid=PID + 1, clock=clock))
    clock.advance(29_999)
    assert lg.remove_expired_producers() == []
    clock.advance(1)
    assert lg.remove_expired_producers() == [PID]
    assert lg.producer_state.last_entry(PID + 1) is not None
    lg.append(idem(1, 77, clock=clock))  # forgotten: any sequence is welcome again
    lg.close()


def test_expired_producers_are_not_loaded_from_a_snapshot(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock, LogConfig(producer_id_expiration_ms=60_000))
    lg.append(idem(1, 0, clock=clock))
    lg.close()
    clock.advance(60_000)
    lg = open_log(tmp_path, clock, LogConfig(producer_id_expiration_ms=60_000), had_clean_shutdown=True)
    assert len(lg.producer_state) == 0
    lg.close()


def test_producer_id_expiration_is_a_broker_key_not_a_topic_key():
    assert LogConfig.from_broker_props({"producer.id.expiration.ms": "5000"}).producer_id_expiration_ms == 5000
    assert LogConfig().producer_id_expiration_ms == 86_400_000
    assert "producer.id.expiration.ms" not in LogConfig().to_topic_props()
    with pytest.raises(ValueError):
        LogConfig().with_overrides({"producer.id.expiration.ms": "5000"})


# ---------------------------------------------------------------- snapshot format

entries_st = st.lists(
    st.builds(
        lambda pid, epoch, metas, ts: ProducerStateEntry(pid, epoch, tuple(metas), ts),
        st.integers(0, 2**63 - 1), st.integers(-1, 2**15 - 1),
        st.lists(st.builds(BatchMetadata, st.integers(-1, INT32_MAX), st.integers(-1, INT32_MAX),
                           st.integers(0, 2**62), st.integers(0, 2**62), st.integers(-1, 2**62)),
                 max_size=NUM_BATCHES_TO_RETAIN),
        st.integers(-1, 2**62)),
    max_size=6, unique_by=lambda e: e.producer_id)


@given(entries_st, st.integers(0, 2**62))
def test_snapshot_round_trip(entries, offset):
    data = encode_snapshot(offset, entries)
    assert decode_snapshot(data, offset) == sorted(entries, key=lambda e: e.producer_id)


@given(entries_st, st.data())
def test_any_damage_to_a_snapshot_is_detected(entries, data):
    raw = bytearray(encode_snapshot(100, entries))
    kind = data.draw(st.sampled_from(["flip", "cut", "extend"]))
    if kind == "flip":
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= data.draw(st.integers(1, 255))
    elif kind == "cut":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    else:
        raw += b"\x00"
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(raw), 100)


@pytest.mark.parametrize("damage", ["trailing byte", "six batches", "short"])
def test_a_snapshot_whose_crc_matches_but_whose_contents_do_not_add_up_is_refused(damage):
    meta = BatchMetadata(0, 0, 0, 0, 0)
    body = bytearray(encode_snapshot(9, [ProducerStateEntry(1, 0, (meta,) * 5, 0)])[6:])
    if damage == "trailing byte":
        body += b"\x00"
    elif damage == "six batches":
        body[12 + 30] = 6  # the batch count of the only producer
    else:
        body[11] = 2  # two producers announced, one present
    data = struct.pack(">hI", 1, crc32c(bytes(body))) + bytes(body)
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(data, 9)


def test_a_snapshot_under_the_wrong_name_is_refused():
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(encode_snapshot(5, []), 6)


# ---------------------------------------------------------------- live state == reloaded state

op_st = st.one_of(
    st.tuples(st.just("send"), st.integers(0, 2), st.integers(0, 2), st.integers(1, 3), st.integers(-2, 2)),
    st.tuples(st.just("retry"), st.integers(0, 2)),
    st.tuples(st.just("plain")),
    st.tuples(st.just("roll")),
)


@settings(max_examples=examples(30))
@given(st.lists(op_st, min_size=1, max_size=40), st.booleans())
def test_state_after_reload_equals_state_before(tmp_path_factory, ops, clean):
    """Whatever a mix of producers, epochs, gaps, retries and rolls does, the state a load
    rebuilds (from a clean snapshot, or from roll snapshots plus replay) is the live one."""
    path = tmp_path_factory.mktemp("reload")
    clock = FakeClock()
    lg = open_log(path, clock, LogConfig(segment_bytes=800))
    sent = {}  # pid -> batches sent
    next_seq = {}
    for op in ops:
        clock.advance(3)
        if op[0] == "send":
            _, p, epoch, n, skew = op
            pid = PID + p
            seq = max(next_seq.get((pid, epoch), 0) + skew, 0)
            batch = idem(n, seq, pid=pid, epoch=epoch, clock=clock)
            try:
                lg.append(batch)
                next_seq[(pid, epoch)] = seq + n
                sent.setdefault(pid, []).append(batch)
            except (OutOfOrderSequenceError, InvalidProducerEpochError):
                pass
        elif op[0] == "retry" and sent.get(PID + op[1]):
            try:
                lg.append(sent[PID + op[1]][-1])
            except (OutOfOrderSequenceError, InvalidProducerEpochError):
                pass
        elif op[0] == "plain":
            lg.append(plain(1, clock.milliseconds()))
        elif op[0] == "roll":
            lg.roll()
    before = states(lg)
    if clean:
        lg.close()
    else:
        crash(lg)
    lg = open_log(path, clock, LogConfig(segment_bytes=800), had_clean_shutdown=clean)
    assert states(lg) == before
    lg.close()


# ---------------------------------------------------------------- the cleaner


COMPACT = LogConfig(segment_bytes=600, index_interval_bytes=100, cleanup_policy="compact",
                    min_cleanable_dirty_ratio=0.01)


def producer_headers(lg):
    return [(h.producer_id, h.base_offset, h.record_count, h.base_sequence)
            for h in (read_header(raw) for seg in lg.segments for _, raw in seg.batches())
            if h.producer_id >= 0]


def overwrite_and_clean(lg, clock):
    for _ in range(8):
        lg.append(plain(1, clock.milliseconds(), key=b"shared"))  # every producer's key again
    lg.roll()
    clean_log(lg, None, clock.milliseconds())


def test_the_cleaner_keeps_an_empty_last_batch_of_each_active_producer(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock, COMPACT)
    a = idem(1, 0, clock=clock, key=b"shared")
    a_info = lg.append(a)
    lg.append(idem(1, 0, pid=PID + 1, clock=clock, key=b"shared"))
    b_info = lg.append(idem(1, 1, pid=PID + 1, clock=clock, key=b"shared"))
    overwrite_and_clean(lg, clock)
    # records all compacted away; the producers' last batches stay as empty headers
    assert producer_headers(lg) == [(PID, a_info.first_offset, 0, 0), (PID + 1, b_info.first_offset, 0, 1)]
    # a load that rebuilds the state from the whole log still knows both producers
    crash(lg)
    for off in list_snapshot_offsets(lg.directory):
        os.unlink(os.path.join(lg.directory, snapshot_file_name(off)))
    lg = open_log(tmp_path, clock, COMPACT)
    again = lg.append(a)
    assert again.duplicate and again.first_offset == a_info.first_offset
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(idem(1, 5, pid=PID + 1, clock=clock))
    lg.append(idem(1, 2, pid=PID + 1, clock=clock))
    lg.close()


def test_the_cleaner_drops_the_emptied_batches_of_expired_producers(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock, COMPACT)
    lg.append(idem(1, 0, clock=clock, key=b"shared"))
    clock.advance(COMPACT.producer_id_expiration_ms)
    lg.remove_expired_producers()
    overwrite_and_clean(lg, clock)
    assert producer_headers(lg) == []
    lg.close()


def test_producers_may_not_write_control_batches(tmp_path):
    clock = FakeClock(1_000_000)
    lg = open_log(tmp_path, clock)
    marker = encode_batch([Record(0, clock.milliseconds(), b"\x00\x00\x00\x00", b"\x00" * 6)],
                          control=True, transactional=True, producer_id=PID, producer_epoch=0)
    with pytest.raises(InvalidRecordError):
        lg.append(marker)
    assert lg.log_end_offset == 0
    lg.append(marker, origin=AppendOrigin.COORDINATOR)  # the coordinator writes markers
    assert lg.log_end_offset == 1
    lg.close()


def test_the_log_manager_expires_idle_producers_on_its_schedule(tmp_path):
    from brook.storage.manager import LogManager, ManagerConfig

    clock = FakeClock(1_000_000)
    config = LogConfig(producer_id_expiration_ms=60_000)
    manager = LogManager([str(tmp_path)], config, clock=clock,
                         manager_config=ManagerConfig(producer_expiration_check_interval_ms=10_000))
    manager.startup()
    lg = manager.get_or_create_log("t", 0)
    lg.append(idem(2, 0, clock=clock))
    assert PID in states(lg)
    clock.advance(30_000)
    manager.tick()
    assert PID in states(lg)  # idle for less than producer.id.expiration.ms
    clock.advance(40_000)
    manager.tick()
    assert PID not in states(lg)
    manager.shutdown()
