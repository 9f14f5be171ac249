"""The log cleaner's rules for transactional data, as Kafka's: aborted records are removed and
never shadow a committed record of their key; a marker stays while its transaction has
batches, then gets a delete horizon (delete.retention.ms) and goes after it, unless it is its
producer's last record; records of open transactions are not cleaned (the pass stops at the
last stable offset); the `.txnindex` entry of an ABORT marker goes where the marker goes."""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from brook.clock import FakeClock
from brook.records import Record, decode_batch, encode_batch
from brook.records.batch import read_header
from brook.records.control import ABORT, COMMIT
from brook.storage.cleaner import cleanable_stats, clean_log
from brook.storage.config import LogConfig
from brook.storage.log import Log
from brook.storage.txn_index import AbortedTxn

from tests.storage.test_transactions import read_committed
from tests.support.examples import examples

CONFIG = LogConfig(segment_bytes=400, cleanup_policy="compact", delete_retention_ms=1000,
                   index_interval_bytes=64)


class Writer:
    """Batches of keyed records from transactional producers, one sequence per producer."""

    def __init__(self, lg: Log) -> None:
        self.lg = lg
        self.seqs: dict[int, int] = {}

    def txn(self, pid: int, *pairs: tuple[bytes, bytes]) -> None:
        seq = self.seqs.get(pid, 0)
        ts = self.lg.clock.milliseconds()
        self.lg.append(encode_batch([Record(i, ts, k, v) for i, (k, v) in enumerate(pairs)],
                                    producer_id=pid, producer_epoch=0, base_sequence=seq,
                                    transactional=True))
        self.seqs[pid] = seq + len(pairs)

    def plain(self, *pairs: tuple[bytes, bytes]) -> None:
        ts = self.lg.clock.milliseconds()
        self.lg.append(encode_batch([Record(i, ts, k, v) for i, (k, v) in enumerate(pairs)]))

    def end(self, pid: int, committed: bool) -> None:
        self.lg.append_as_marker(pid, 0, 0, committed)


def new_log(tmp_path) -> tuple[Log, Writer]:
    lg = Log(str(tmp_path / "t-0"), CONFIG, clock=FakeClock())
    return lg, Writer(lg)


def values(lg: Log, upto: int | None = None) -> list[tuple[bytes, bytes]]:
    """What a read_committed consumer reads, as (key, value)."""
    upto = lg.last_stable_offset(lg.log_end_offset) if upto is None else upto
    offsets = set(read_committed(lg, upto, 1 << 20))
    return [(r.key, r.value) for seg in lg.segments for _, raw in seg.batches()
            if not read_header(raw).is_control
            for r in decode_batch(raw).records if r.offset in offsets]


def markers(lg: Log) -> list[tuple[int, bool]]:
    """(offset, delete horizon set) of every control batch left."""
    out = []
    for seg in lg.segments:
        for _, raw in seg.batches():
            h = read_header(raw)
            if h.is_control:
                out.append((h.base_offset, h.has_delete_horizon))
    return out


def test_aborted_records_go_and_shadow_no_committed_one(tmp_path):
    lg, w = new_log(tmp_path)
    w.txn(1, (b"a", b"committed"))
    w.end(1, committed=True)
    w.txn(2, (b"a", b"aborted"), (b"b", b"aborted"))
    w.end(2, committed=False)
    w.plain((b"c", b"1"))
    lg.roll()
    w.plain((b"d", b"1"))
    before = values(lg)
    assert before == [(b"a", b"committed"), (b"c", b"1"), (b"d", b"1")]
    result = clean_log(lg, None, lg.clock.milliseconds())
    assert result.aborted_batches_removed == 1
    assert values(lg) == before
    # read_uncommitted sees no aborted record any more
    assert all(r.value != b"aborted" for seg in lg.segments for _, raw in seg.batches()
               for r in decode_batch(raw).records)
    lg.close()


def test_markers_stay_until_their_horizon_after_their_transaction_is_cleaned(tmp_path):
    lg, w = new_log(tmp_path)
    w.txn(1, (b"a", b"x"))
    w.end(1, committed=False)  # offset 1
    w.txn(2, (b"b", b"y"))
    w.end(2, committed=True)  # offset 3
    w.txn(1, (b"c", b"z"))  # producer 1's last data batch from here on
    w.end(1, committed=True)  # offset 5
    lg.roll()
    w.plain((b"d", b"1"))
    clock = lg.clock
    clean_log(lg, None, clock.milliseconds())
    # The first pass saw every transaction's batches: the markers stay as they were, and the
    # ABORT keeps its entry in the cleaned segment.
    assert markers(lg) == [(1, False), (3, False), (5, False)]
    assert lg.all_aborted_transactions() == [AbortedTxn(1, 0, 1, 2)]
    clean_log(lg, None, clock.milliseconds())
    # The aborted transaction has no batch left: its marker gets its delete horizon (and
    # keeps its entry while it stays); the committed ones still have their records.
    assert markers(lg) == [(1, True), (3, False), (5, False)]
    assert lg.all_aborted_transactions() == [AbortedTxn(1, 0, 1, 2)]
    clean_log(lg, None, clock.milliseconds())
    assert markers(lg) == [(1, True), (3, False), (5, False)]  # not yet
    clock.advance(CONFIG.delete_retention_ms + 1)
    clean_log(lg, None, clock.milliseconds())
    assert markers(lg) == [(3, False), (5, False)]
    assert lg.all_aborted_transactions() == []
    assert values(lg) == [(b"b", b"y"), (b"c", b"z"), (b"d", b"1")]
    lg.close()


def test_a_marker_that_is_its_producers_last_record_stays_emptied(tmp_path):
    """A producer fenced by an abort at a bumped epoch: the marker holds the epoch a replay of
    the log needs, so past its horizon it stays as an empty control batch (Kafka's "retain
    empty"), which a replay passes over, and its entry goes."""
    lg, w = new_log(tmp_path)
    w.txn(1, (b"a", b"x"))
    lg.append_as_marker(1, 1, 0, False)  # offset 1, epoch 1
    lg.roll()
    w.plain((b"z", b"1"))
    clock = lg.clock
    for _ in range(2):
        clean_log(lg, None, clock.milliseconds())
    assert markers(lg) == [(1, True)]
    clock.advance(CONFIG.delete_retention_ms + 1)
    clean_log(lg, None, clock.milliseconds())
    empty = [read_header(raw) for seg in lg.segments for _, raw in seg.batches()
             if read_header(raw).is_control]
    assert [(h.base_offset, h.record_count, h.producer_epoch) for h in empty] == [(1, 0, 1)]
    assert lg.all_aborted_transactions() == []
    assert values(lg) == [(b"z", b"1")]
    lg.close()


def test_open_transactions_are_not_cleaned(tmp_path):
    lg, w = new_log(tmp_path)
    w.plain((b"a", b"1"))
    w.txn(1, (b"a", b"open"))  # offset 1: the LSO
    lg.roll()
    w.plain((b"a", b"2"))
    lg.roll()
    w.plain((b"z", b"1"))
    stats = cleanable_stats(lg, None, lg.clock.milliseconds())
    assert stats.first_uncleanable_offset == 0  # the segment holding the open transaction
    w.end(1, committed=False)
    stats = cleanable_stats(lg, None, lg.clock.milliseconds())
    assert stats.first_uncleanable_offset == lg.segments[-1].base_offset
    lg.close()


# ---------------------------------------------------------------- a property

_KINDS = [("txn", 30), ("end", 20), ("plain", 10), ("roll", 10), ("clean", 15), ("wait", 10)]
_KIND_OF = [kind for kind, weight in _KINDS for _ in range(weight)]
STEPS = st.lists(st.tuples(st.integers(0, len(_KIND_OF) - 1).map(_KIND_OF.__getitem__),
                           st.integers(1, 2), st.integers(0, 3), st.booleans()),
                 min_size=20, max_size=80)


@settings(max_examples=examples(100), deadline=None)
@given(steps=STEPS)
def test_cleaning_keeps_the_committed_view(tmp_path_factory, steps):
    """Whatever the interleaving of transactions and passes: after each pass a read_committed
    consumer sees no aborted record, every key's latest committed value below the last stable
    offset, and only records it saw before (compaction removes, never adds)."""
    lg = Log(str(tmp_path_factory.mktemp("clean") / "t-0"), CONFIG, clock=FakeClock())
    w = Writer(lg)
    open_: set[int] = set()
    n = 0
    try:
        for kind, pid, key, flag in steps:
            n += 1
            value = b"%s-%d" % (kind.encode(), n)
            if kind == "txn":
                w.txn(pid, (b"k%d" % key, value))
                open_.add(pid)
            elif kind == "end" and pid in open_:
                w.end(pid, committed=flag)
                open_.discard(pid)
            elif kind == "plain":
                w.plain((b"k%d" % key, value))
            elif kind == "roll":
                lg.roll()
            elif kind == "wait":
                lg.clock.advance(CONFIG.delete_retention_ms // 2 + 1)
            elif kind == "clean":
                lso = lg.last_stable_offset(lg.log_end_offset)
                before = values(lg, lso)
                latest = dict(before)
                result = clean_log(lg, None, lg.clock.milliseconds())
                if result.aborted_batches_removed:
                    event("aborted batches removed")
                if result.markers_removed:
                    event("markers removed")
                after = values(lg, lso)
                assert set(after) <= set(before)
                assert dict(after) == latest
                committed = {v for _, v in before}
                assert all(v in committed for _, v in after)
        lg.roll()
        clean_log(lg, None, lg.clock.milliseconds())
    finally:
        lg.close()
