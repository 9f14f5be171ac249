"""Transactions in a partition log, against a simple model: random interleavings of
transactional and non-transactional producers, commits and aborts, segment rolls, clean and
unclean restarts, damaged `.txnindex` files and truncation; after every step the last stable
offset, the aborted-transaction index and what a read_committed consumer reads must be what
the model says."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from brook.clock import FakeClock
from brook.records import Record, encode_batch, read_header
from brook.records.control import ABORT, COMMIT, end_txn_marker_batch, parse_marker
from brook.storage.config import LogConfig
from brook.storage.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    OutOfOrderSequenceError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from brook.storage.log import Log
from brook.storage.producer_state import AppendOrigin
from brook.storage.txn_index import AbortedTxn

from tests.support.examples import examples

CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=64)
PRODUCERS = (10, 11, 12)


def data_batch(pid: int, seq: int, n: int, ts: int, *, transactional: bool, epoch: int = 0) -> bytes:
    return encode_batch([Record(i, ts, b"k%d" % pid, b"%d-%d" % (pid, seq + i)) for i in range(n)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        transactional=transactional)


def plain_batch(n: int, ts: int) -> bytes:
    return encode_batch([Record(i, ts, b"p", b"plain") for i in range(n)])


def crash(lg: Log) -> None:
    """Stop using a log the way a killed process does: no snapshot, no clean close."""
    for seg in lg.segments:
        seg.close_without_index()


# ---------------------------------------------------------------- the model


@dataclass(frozen=True)
class Batch:
    pid: int  # -1: no producer
    first: int
    last: int
    transactional: bool = False
    marker: int = -1  # ABORT or COMMIT for a marker


class Model:
    """The log as a list of batches; everything else is derived from it, from scratch."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []

    @property
    def end(self) -> int:
        return self.batches[-1].last + 1 if self.batches else 0

    def derive(self):
        """(open transactions pid -> first offset, aborted index entries, each data batch's
        fate: None visible, or the offset of its commit or abort decided it)"""
        ongoing: dict[int, int] = {}
        members: dict[int, list[Batch]] = {}
        aborted: list[AbortedTxn] = []
        fate: dict[Batch, bool] = {}  # transactional batch -> committed
        for b in self.batches:
            if b.marker >= 0:
                if b.pid in ongoing:
                    first = ongoing.pop(b.pid)
                    for m in members.pop(b.pid):
                        fate[m] = b.marker == COMMIT
                    if b.marker == ABORT:
                        lso = min(ongoing.values(), default=b.first + 1)
                        aborted.append(AbortedTxn(b.pid, first, b.first, lso))
            elif b.transactional:
                if b.pid not in ongoing:
                    ongoing[b.pid] = b.first
                members.setdefault(b.pid, []).append(b)
        return ongoing, aborted, fate

    def lso(self) -> int:
        ongoing, _, _ = self.derive()
        return min(ongoing.values(), default=self.end)

    def committed_offsets(self, upto: int) -> list[int]:
        """Offsets a read_committed consumer reads below `upto` (at most the LSO)."""
        _, _, fate = self.derive()
        out = []
        for b in self.batches:
            if b.marker >= 0 or b.first >= upto:
                continue
            if not b.transactional or fate.get(b, False):
                out.extend(range(b.first, b.last + 1))
        return out

    def next_seq(self, pid: int) -> int:
        return sum(b.last - b.first + 1 for b in self.batches if b.pid == pid and b.marker < 0)

    def has_open_txn(self, pid: int) -> bool:
        return pid in self.derive()[0]

    def truncate(self, offset: int) -> None:
        self.batches = [b for b in self.batches if b.last < offset]


def read_committed(lg: Log, upto: int, max_bytes: int) -> list[int]:
    """Offsets of the records a read_committed consumer keeps, fetching `max_bytes` at a time
    up to `upto` and dropping aborted batches with each response's aborted transactions, as
    Kafka's consumer does (CompletedFetch)."""
    out = []
    offset = lg.log_start_offset
    while offset < upto:
        info = lg.read(offset, max_bytes, max_offset=upto, aborted=True)
        batches = info.batches()
        if not batches:  # (the cleaner may have left no batch from here to `upto`)
            break
        pending = sorted(info.aborted_transactions, key=lambda a: a[1])
        aborted_pids: set[int] = set()
        for b in batches:
            if b.producer_id >= 0:
                while pending and pending[0][1] <= b.last_offset:
                    aborted_pids.add(pending.pop(0)[0])
                if b.is_control:
                    marker = parse_marker(b.records[0].key, b.records[0].value) if b.records else None
                    if marker is not None and marker.control_type == ABORT:
                        aborted_pids.discard(b.producer_id)
                elif b.is_transactional and b.producer_id in aborted_pids:
                    offset = b.last_offset + 1
                    continue
            if not b.is_control:
                out.extend(r.offset for r in b.records if r.offset >= offset)
            offset = b.last_offset + 1
    return out


# ---------------------------------------------------------------- the property

# One step: what it is by the first number (most often data and markers), then its details.
_KINDS = [("data", 40), ("marker", 25), ("plain", 8), ("roll", 8), ("reopen", 8), ("truncate", 5),
          ("damage-txnindex", 6)]
_KIND_OF = [kind for kind, weight in _KINDS for _ in range(weight)]
OPS = st.tuples(st.integers(0, len(_KIND_OF) - 1), st.integers(0, 5), st.booleans(),
                st.integers(1, 4), st.floats(0, 1)).map(lambda t: (_KIND_OF[t[0]],) + t[1:])


@settings(max_examples=examples(200), deadline=None)
@given(ops=st.lists(OPS, min_size=12, max_size=60), max_bytes=st.sampled_from([1, 200, 1 << 20]))
def test_lso_aborted_index_and_committed_reads_match_the_model(tmp_path_factory, ops, max_bytes):
    path = str(tmp_path_factory.mktemp("txn") / "t-0")
    clock = FakeClock()
    lg = Log(path, CONFIG, clock=clock)
    model = Model()
    try:
        for op in ops:
            kind, k, flag, n, fraction = op
            ts = clock.milliseconds()
            if kind == "data":
                pid, transactional = PRODUCERS[k % len(PRODUCERS)], flag
                batch = data_batch(pid, model.next_seq(pid), n, ts, transactional=transactional)
                if model.has_open_txn(pid) and not transactional:
                    with pytest.raises(InvalidTxnStateError):
                        lg.append(batch)
                    continue
                info = lg.append(batch)
                model.batches.append(Batch(pid, info.first_offset, info.last_offset, transactional))
            elif kind == "marker":
                # for a producer with a transaction open, mostly (the k-th of them), else any
                marker = ABORT if flag else COMMIT
                open_ = sorted(model.derive()[0])
                pid = open_[k % len(open_)] if open_ and k < 5 else PRODUCERS[k % len(PRODUCERS)]
                info = lg.append_as_marker(pid, 0, 0, marker == COMMIT)
                model.batches.append(Batch(pid, info.first_offset, info.last_offset, True, marker))
            elif kind == "plain":
                info = lg.append(plain_batch(n, ts))
                model.batches.append(Batch(-1, info.first_offset, info.last_offset))
            elif kind == "roll":
                lg.roll()
            elif kind == "reopen":
                how = ["clean", "crash", "crash-at-recovery-point"][k % 3]
                if how == "clean":
                    lg.close()
                    lg = Log(path, CONFIG, clock=clock, had_clean_shutdown=True)
                else:
                    point = lg.recovery_point if how == "crash-at-recovery-point" else 0
                    crash(lg)
                    lg = Log(path, CONFIG, clock=clock, recovery_point=point)
            elif kind == "truncate":
                offset = int(fraction * lg.log_end_offset)
                lg.truncate_to(offset)
                model.truncate(offset)
            elif kind == "damage-txnindex":
                damaged = [s for s in lg.segments if os.path.exists(s.txn_index.path)]
                if not damaged:
                    continue
                target = damaged[k % len(damaged)].txn_index.path
                lg.close()
                with open(target, "ab") as f:
                    f.write(b"\x01")  # no longer a whole number of entries
                lg = Log(path, CONFIG, clock=clock, had_clean_shutdown=True)
            check(lg, model, max_bytes)
            if kind in ("reopen", "truncate", "damage-txnindex") and model.derive()[1]:
                event(f"{kind} with aborted transactions")
            if len({s.txn_index.path for s in lg.segments if len(s.txn_index)}) > 1:
                event("aborted transactions in more than one segment")
            if model.derive()[1]:
                event("aborted transactions")
            if any(t.first_offset < s.base_offset for s in lg.segments for t in s.txn_index.entries):
                event("an aborted transaction spanning segments")
    finally:
        lg.close()


def check(lg: Log, model: Model, max_bytes: int) -> None:
    assert lg.log_end_offset == model.end
    ongoing, aborted, _ = model.derive()
    lso = model.lso()
    assert lg.last_stable_offset(lg.log_end_offset) == lso
    assert lg.all_aborted_transactions() == aborted
    assert {first: pid for pid, first in ongoing.items()} == lg.producer_state.ongoing
    assert read_committed(lg, lso, max_bytes) == model.committed_offsets(lso)


# ---------------------------------------------------------------- the rules, one by one


def new_log(tmp_path, clock=None):
    return Log(str(tmp_path / "t-0"), CONFIG, clock=clock or FakeClock())


def test_a_transactional_batch_begins_the_transaction_and_a_commit_ends_it(tmp_path):
    lg = new_log(tmp_path)
    ts = lg.clock.milliseconds()
    lg.append(plain_batch(2, ts))
    info = lg.append(data_batch(10, 0, 3, ts, transactional=True))
    assert lg.producer_state.producers[10].current_txn_first_offset == 2
    assert lg.last_stable_offset(lg.log_end_offset) == 2
    assert lg.read(0, 1 << 20, max_offset=2).size > 0
    marker = lg.append_as_marker(10, 0, 5, committed=True)
    assert marker.first_offset == info.last_offset + 1
    assert lg.producer_state.producers[10].current_txn_first_offset == -1
    assert lg.producer_state.producers[10].coordinator_epoch == 5
    assert lg.last_stable_offset(lg.log_end_offset) == lg.log_end_offset
    assert lg.all_aborted_transactions() == []  # a commit is no aborted transaction
    lg.close()


def test_the_lso_waits_for_the_high_watermark_to_pass_the_marker(tmp_path):
    """Kafka's unreplicated transactions: decided, but the decision may still be lost."""
    lg = new_log(tmp_path)
    ts = lg.clock.milliseconds()
    lg.append(data_batch(10, 0, 2, ts, transactional=True))
    lg.append_as_marker(10, 0, 0, committed=False)
    assert lg.last_stable_offset(2) == 0  # the marker (offset 2) is not below the HW
    assert lg.last_stable_offset(3) == 3
    assert lg.last_stable_offset(2) == 2  # forgotten once passed: the HW never goes back
    lg.close()


def test_a_non_transactional_batch_in_an_open_transaction_is_refused(tmp_path):
    lg = new_log(tmp_path)
    ts = lg.clock.milliseconds()
    lg.append(data_batch(10, 0, 1, ts, transactional=True))
    with pytest.raises(InvalidTxnStateError):
        lg.append(data_batch(10, 1, 1, ts, transactional=False))
    lg.append_as_marker(10, 0, 0, committed=True)
    lg.append(data_batch(10, 1, 1, ts, transactional=False))  # fine once it ended
    lg.close()


def test_a_verified_append_needs_the_standing_guard_to_begin_a_transaction(tmp_path):
    """KIP-890: the leader starts a verification, asks the coordinator, then appends with the
    guard; a marker written meanwhile (the transaction aborted) drops the guard, so the
    delayed append cannot begin a transaction nobody would end."""
    lg = new_log(tmp_path)
    ts = lg.clock.milliseconds()
    state = lg.producer_state
    with pytest.raises(InvalidTxnStateError):  # no verification started
        lg.append(data_batch(10, 0, 1, ts, transactional=True), guard=None)
    with pytest.raises(InvalidTxnStateError):  # another verification's guard
        state.start_verification(10, 0, 0, ts)
        lg.append(data_batch(10, 0, 1, ts, transactional=True), guard=object())
    guard = state.start_verification(10, 0, 0, ts)
    assert state.start_verification(10, 0, 0, ts) is guard  # one standing per producer
    lg.append(data_batch(10, 0, 1, ts, transactional=True), guard=guard)
    assert 10 not in state.verifications  # served
    # the transaction is open: the next batches need no verification
    assert state.start_verification(10, 0, 1, ts) is None
    lg.append(data_batch(10, 1, 1, ts, transactional=True), guard=None)
    lg.append_as_marker(10, 0, 0, committed=False)

    stale = state.start_verification(10, 0, 2, ts)  # verified, then the abort came first
    lg.append_as_marker(10, 0, 0, committed=False)
    with pytest.raises(InvalidTxnStateError):
        lg.append(data_batch(10, 2, 1, ts, transactional=True), guard=stale)
    assert state.producers[10].current_txn_first_offset == -1
    # without verification (it is off, or not a client's append) the batch begins it
    lg.append(data_batch(10, 2, 1, ts, transactional=True))
    assert state.producers[10].current_txn_first_offset >= 0
    lg.close()


def test_a_coordinators_transactional_batch_is_verified_when_it_carries_a_guard(tmp_path):
    """A group coordinator's TxnOffsetCommit (the coordinator origin, no sequence) is verified
    as a client's batch is when it comes with a guard: a marker between the verification and
    the append drops it; without one (verification off) only the epoch is checked."""
    lg = new_log(tmp_path)
    ts = lg.clock.milliseconds()
    state = lg.producer_state
    coordinator = AppendOrigin.COORDINATOR
    guard = state.start_verification(10, 0, -1, ts)
    lg.append_as_marker(10, 0, 0, committed=True)  # the transaction ended meanwhile
    with pytest.raises(InvalidTxnStateError):
        lg.append(data_batch(10, -1, 1, ts, transactional=True), origin=coordinator, guard=guard)
    with pytest.raises(InvalidTxnStateError):  # a transaction open when verified, ended since
        lg.append(data_batch(10, -1, 1, ts, transactional=True), origin=coordinator, guard=None)
    guard = state.start_verification(10, 0, -1, ts)
    lg.append(data_batch(10, -1, 1, ts, transactional=True), origin=coordinator, guard=guard)
    assert state.producers[10].current_txn_first_offset >= 0 and 10 not in state.verifications
    lg.append_as_marker(10, 0, 0, committed=True)
    lg.append(data_batch(10, -1, 1, ts, transactional=True), origin=coordinator)
    assert state.producers[10].current_txn_first_offset >= 0
    lg.close()


def test_a_standing_verification_holds_back_higher_sequences_and_expires(tmp_path):
    clock = FakeClock()
    lg = new_log(tmp_path, clock)
    ts = clock.milliseconds()
    state = lg.producer_state
    state.start_verification(10, 0, 5, ts)
    guard = state.start_verification(10, 0, 3, ts)  # a lower sequence's retry came
    assert state.verifications[10].lowest_sequence == 3
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(data_batch(10, 5, 1, ts, transactional=True), guard=guard)
    state.start_verification(10, 1, 0, ts)  # a bumped epoch starts its sequences again
    assert (state.verifications[10].epoch, state.verifications[10].lowest_sequence) == (1, 0)
    state.remove_expired_producers(ts + state.producer_id_expiration_ms - 1)
    assert 10 in state.verifications
    state.remove_expired_producers(ts + state.producer_id_expiration_ms)
    assert state.verifications == {}
    lg.close()


def test_markers_are_checked_for_producer_and_coordinator_epochs(tmp_path):
    lg = new_log(tmp_path)
    ts = lg.clock.milliseconds()
    lg.append(data_batch(10, 0, 1, ts, transactional=True, epoch=3))
    with pytest.raises(InvalidProducerEpochError):
        lg.append_as_marker(10, 2, 0, committed=True)
    lg.append_as_marker(10, 3, 7, committed=False)
    with pytest.raises(TransactionCoordinatorFencedError):
        lg.append_as_marker(10, 3, 6, committed=False)
    lg.append_as_marker(10, 4, 7, committed=False)  # a bumped epoch (a fenced producer's abort)
    with pytest.raises(InvalidProducerEpochError):
        lg.append(data_batch(10, 1, 1, ts, transactional=True, epoch=3))
    assert lg.all_aborted_transactions() == [AbortedTxn(10, 0, 1, 2)]
    lg.close()


def test_a_follower_takes_what_its_leader_wrote_without_checks(tmp_path):
    """REPLICATION appends the leader's batches and markers as they are and tracks the
    transactions the same way (the same plan and apply as the leader's append)."""
    leader = new_log(tmp_path / "a")
    ts = leader.clock.milliseconds()
    leader.append(data_batch(10, 0, 2, ts, transactional=True))
    leader.append(data_batch(11, 0, 1, ts, transactional=True))
    leader.append_as_marker(10, 0, 1, committed=False)
    leader.append_as_marker(11, 0, 1, committed=True)
    data = leader.read(0, 1 << 20).read()
    follower = new_log(tmp_path / "b")
    follower.append_as_follower(data)
    assert follower.all_aborted_transactions() == leader.all_aborted_transactions() == [
        AbortedTxn(10, 0, 3, 2)]
    assert follower.producer_state.producers == leader.producer_state.producers
    leader.close()
    follower.close()


def test_a_client_may_not_write_markers(tmp_path):
    lg = new_log(tmp_path)
    with pytest.raises(InvalidRecordError):
        lg.append(end_txn_marker_batch(10, 0, 0, True, lg.clock.milliseconds()))
    lg.close()


def test_an_abort_in_a_later_segment_is_found_from_the_first(tmp_path):
    """A transaction spanning segments: the fetch of its first segment collects the entry in
    the segment of its marker."""
    lg = new_log(tmp_path)
    ts = lg.clock.milliseconds()
    lg.append(data_batch(10, 0, 2, ts, transactional=True))
    lg.roll()
    lg.append(plain_batch(1, ts))
    lg.roll()
    lg.append_as_marker(10, 0, 0, committed=False)
    assert [len(s.txn_index) for s in lg.segments] == [0, 0, 1]
    info = lg.read(0, 1 << 20, max_offset=lg.log_end_offset, aborted=True)
    assert info.aborted_transactions == [(10, 0)]
    # The data is behind offset 2, the marker not: Kafka's rule (the entry's last offset is in
    # the range) names it all the same; past the marker it is not named.
    assert lg.read(2, 1 << 20, aborted=True).aborted_transactions == [(10, 0)]
    lg.append(plain_batch(1, ts))
    assert lg.read(4, 1 << 20, aborted=True).aborted_transactions == []
    lg.close()


def test_coordinator_appends_are_the_markers_only_origin_besides_replication(tmp_path):
    lg = new_log(tmp_path)
    batch = end_txn_marker_batch(10, 0, 0, False, lg.clock.milliseconds())
    info = lg.append(batch, origin=AppendOrigin.COORDINATOR)
    assert info.first_offset == 0 and lg.all_aborted_transactions() == []  # no transaction open
    lg.close()


# ---------------------------------------------------------------- replicas and leadership

REPLICA_OPS = st.tuples(
    st.sampled_from(["data", "data", "data", "marker", "marker", "replicate", "replicate", "switch",
                     "reopen"]),
    st.integers(0, 5), st.booleans(), st.integers(1, 3), st.floats(0, 1))


def replicate(leader: Log, follower: Log, upto: int) -> None:
    """The follower fetches the leader's whole batches from its log end below `upto`."""
    pieces = []
    for seg in leader.segments:
        for _, raw in seg.batches():
            h = read_header(raw)
            if h.base_offset >= follower.log_end_offset and h.last_offset < upto:
                pieces.append(raw)
    if pieces:
        follower.append_as_follower(b"".join(pieces))


@settings(max_examples=examples(150), deadline=None)
@given(ops=st.lists(REPLICA_OPS, min_size=10, max_size=50))
def test_replicas_track_transactions_alike_through_leadership_changes(tmp_path_factory, ops):
    """Two replicas: the leader takes producers' batches and markers, the follower copies them
    (the same plan and apply as the leader's appends), leadership moves and the old leader
    truncates to where its successor's log ended; each replica's transactions, LSO and
    aborted transactions are always those of its own log, and the same where the logs agree."""
    base = tmp_path_factory.mktemp("replicas")
    paths = [str(base / "a" / "t-0"), str(base / "b" / "t-0")]
    clock = FakeClock()
    logs = [Log(p, CONFIG, clock=clock) for p in paths]
    models = [Model(), Model()]
    leader, term = 0, 0
    try:
        for kind, k, flag, n, fraction in ops:
            lead, model = logs[leader], models[leader]
            if kind == "data":
                pid = PRODUCERS[k % len(PRODUCERS)]
                if model.has_open_txn(pid) and not flag:
                    continue
                info = lead.append(data_batch(pid, model.next_seq(pid), n, clock.milliseconds(),
                                              transactional=flag), leader_epoch=term)
                model.batches.append(Batch(pid, info.first_offset, info.last_offset, flag))
            elif kind == "marker":
                open_ = sorted(model.derive()[0])
                pid = open_[k % len(open_)] if open_ else PRODUCERS[k % len(PRODUCERS)]
                info = lead.append_as_marker(pid, 0, 0, flag, leader_epoch=term)
                model.batches.append(Batch(pid, info.first_offset, info.last_offset, True,
                                           COMMIT if flag else ABORT))
            elif kind == "replicate":
                f = 1 - leader
                behind = lead.log_end_offset - logs[f].log_end_offset
                upto = logs[f].log_end_offset + int(fraction * behind)
                replicate(lead, logs[f], upto)
                models[f].batches = [b for b in model.batches if b.last < logs[f].log_end_offset]
            elif kind == "switch":
                # The follower leads from its log end; the old leader drops what it had past it.
                leader, term = 1 - leader, term + 1
                old = 1 - leader
                cut = logs[leader].log_end_offset
                before = len(logs[old].all_aborted_transactions())
                logs[old].truncate_to(cut)
                models[old].truncate(cut)
                if len(logs[old].all_aborted_transactions()) < before:
                    event("an abort truncated away at a leadership change")
                if logs[leader].producer_state.ongoing:
                    event("a new leader with open transactions")
            elif kind == "reopen":
                i = k % 2
                logs[i].close()
                logs[i] = Log(paths[i], CONFIG, clock=clock, had_clean_shutdown=flag)
            for lg, m in zip(logs, models):
                check(lg, m, 1 << 20)
            common = min(lg.log_end_offset for lg in logs)
            assert [t for t in logs[0].all_aborted_transactions() if t.last_offset < common] == \
                [t for t in logs[1].all_aborted_transactions() if t.last_offset < common]
    finally:
        for lg in logs:
            lg.close()
