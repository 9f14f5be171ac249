"""Idempotent producer state, the sans-I/O core: checks return a plan, apply stores it,
replay checks nothing; the snapshot format."""

import struct

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from brook.storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError
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
)

INT32_MAX = 2**31 - 1
PID = 4000


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
