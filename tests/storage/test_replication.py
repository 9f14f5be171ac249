"""The log's part in replication: appending a leader's batches as a follower (offsets and
leader epochs kept, epochs noted in the leader-epoch-checkpoint), truncating to an offset,
starting over at a leader's log start, and the epoch cache surviving a restart."""

from __future__ import annotations

import os
import types
import time

from hypothesis import given, settings, strategies as st
from tests.support.examples import examples

from brook.replication.replica_fetcher import ReplicaFetcher
from brook.records import Record, encode_batch
from brook.storage.config import LogConfig
from brook.storage.leader_epoch import FILE_NAME, LeaderEpochCache, read_checkpoint
from brook.storage.log import Log

from tests.support.storage_helpers import read_all


def _batch(values, base=0, epoch=0):
    now = int(time.time() * 1000)
    return encode_batch([Record(base + i, now, None, v) for i, v in enumerate(values)], base_offset=base,
                        partition_leader_epoch=epoch)


def _log(tmp_path, name="t-0", **cfg) -> Log:
    return Log(str(tmp_path / name), LogConfig(segment_bytes=cfg.pop("segment_bytes", 1 << 20), **cfg))


def test_follower_append_keeps_offsets_and_epochs_and_notes_each_new_epoch(tmp_path):
    lg = _log(tmp_path)
    lg.append_as_follower(_batch([b"a", b"b"], base=0, epoch=0) + _batch([b"c"], base=2, epoch=0))
    lg.append_as_follower(_batch([b"d", b"e"], base=3, epoch=2))
    assert lg.log_end_offset == 5
    assert [r[3] for r in read_all(lg)] == [b"a", b"b", b"c", b"d", b"e"]
    assert [b.partition_leader_epoch for b in lg.read(0, 1 << 20).batches()] == [0, 0, 2]
    assert lg.epoch_cache.entries == [(0, 0), (2, 3)]
    assert read_checkpoint(os.path.join(lg.directory, FILE_NAME)) == [(0, 0), (2, 3)]
    lg.close()
    again = _log(tmp_path)
    assert again.epoch_cache.entries == [(0, 0), (2, 3)]
    again.close()


def test_truncation_cuts_records_epochs_and_producer_state_and_appends_go_on_there(tmp_path):
    lg = _log(tmp_path, segment_bytes=200)  # several segments
    for i in range(10):
        lg.append_as_follower(_batch([b"x" * 40, b"y" * 40], base=2 * i, epoch=i // 3))
    assert len(lg.segments) > 3 and lg.log_end_offset == 20
    removed = lg.truncate_to(7)
    assert removed > 0 and lg.log_end_offset == 6  # a batch is kept or cut whole: [6, 7] goes
    assert [r[0] for r in read_all(lg)] == list(range(6))
    assert lg.epoch_cache.entries == [(0, 0), (1, 6)][:1]  # epoch 1 started at 6: gone
    lg.append_as_follower(_batch([b"z"], base=6, epoch=5))
    assert lg.epoch_cache.entries == [(0, 0), (5, 6)]
    assert [r[3] for r in read_all(lg)][-1] == b"z"
    lg.close()
    again = _log(tmp_path)
    assert again.log_end_offset == 7 and [r[0] for r in read_all(again)] == list(range(7))
    again.close()


def test_truncating_past_the_end_changes_nothing(tmp_path):
    lg = _log(tmp_path)
    lg.append(_batch([b"a"]), leader_epoch=0)
    assert lg.truncate_to(5) == 0 and lg.log_end_offset == 1
    lg.close()


def test_a_follower_behind_the_leaders_start_starts_over_there(tmp_path):
    lg = _log(tmp_path)
    lg.append_as_follower(_batch([b"a", b"b"], base=0, epoch=0))
    lg.truncate_fully_and_start_at(100)
    assert (lg.log_start_offset, lg.log_end_offset) == (100, 100)
    assert lg.epoch_cache.entries == []
    lg.append_as_follower(_batch([b"c"], base=100, epoch=3))
    assert [r[:1] + r[3:4] for r in read_all(lg)] == [(100, b"c")]
    lg.close()
    again = _log(tmp_path)
    assert (again.log_start_offset, again.log_end_offset) == (100, 101)
    again.close()


def test_retention_moves_the_first_epochs_start(tmp_path):
    lg = _log(tmp_path, segment_bytes=150, retention_bytes=1)
    for i in range(6):
        lg.append_as_follower(_batch([b"x" * 60], base=i, epoch=0 if i < 4 else 1))
    assert lg.delete_old_segments() > 0
    start = lg.log_start_offset
    assert start > 0
    assert lg.epoch_cache.entries[0][1] == start
    lg.close()


# ---------------------------------------------------------------- the epoch cache as a model

_ops = st.lists(st.one_of(
    st.tuples(st.just("assign"), st.integers(0, 20), st.integers(0, 100)),
    st.tuples(st.just("end"), st.integers(0, 100)),
    st.tuples(st.just("start"), st.integers(0, 100)),
), max_size=40)


@settings(max_examples=examples(300), deadline=None)
@given(_ops, st.integers(-1, 25))
def test_epoch_cache_answers_as_a_list_of_epoch_starts_would(ops, asked):
    cache = LeaderEpochCache(None)
    model: list[tuple[int, int]] = []
    for op in ops:
        if op[0] == "assign":
            _, e, o = op
            if not model or e > model[-1][0]:
                model = [x for x in model if x[1] < o] + [(e, o)]
            cache.assign(e, o)
        elif op[0] == "end":
            model = [x for x in model if x[1] < op[1]]
            cache.truncate_from_end(op[1])
        else:
            s = op[1]
            if model and model[0][1] < s:
                kept = [x for x in model if x[1] > s]
                first = [x for x in model if x[1] <= s][-1][0]
                model = [(first, s)] + kept
            cache.truncate_from_start(s)
        assert cache.entries == model
        epochs = [e for e, _ in model]
        assert epochs == sorted(set(epochs))
    leo = max([o for _, o in model], default=0) + 10
    epoch, end = cache.end_offset_for(asked, leo)
    if not model or asked < 0:
        assert (epoch, end) == (-1, -1)
    elif asked < model[0][0]:  # older than every epoch here: it ends where the first starts
        assert (epoch, end) == (asked, model[0][1])
    else:
        below = [x for x in model if x[0] <= asked]
        assert epoch == below[-1][0]
        later = [o for e, o in model if e > asked]
        assert end == (later[0] if later else leo)


def test_high_watermarks_are_checkpointed_per_log_dir_and_read_back(tmp_path):
    """Kafka's replication-offset-checkpoint: a restarted replica starts from the high
    watermark it had, not from its log end."""
    from brook.storage.manager import HIGH_WATERMARK_CHECKPOINT, LogManager
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    lm = LogManager(dirs, LogConfig())
    lm.startup()
    for p in range(4):
        lm.get_or_create_log("t", p)
    lm.checkpoint_high_watermarks({("t", 0): 5, ("t", 1): 7, ("t", 2): 0})
    files = [os.path.join(d, HIGH_WATERMARK_CHECKPOINT) for d in dirs]
    assert all(os.path.exists(f) for f in files)
    assert lm.read_high_watermarks() == {("t", 0): 5, ("t", 1): 7, ("t", 2): 0}
    lm.shutdown()
    again = LogManager(dirs, LogConfig())
    again.startup()
    assert again.read_high_watermarks() == {("t", 0): 5, ("t", 1): 7, ("t", 2): 0}
    again.shutdown()


def _follower_part(lg: Log, high_watermark: int = 0):
    return types.SimpleNamespace(log=lg, high_watermark=high_watermark, topic="t", index=0)


def test_a_follower_told_of_an_epoch_it_skipped_cuts_and_asks_again(tmp_path):
    """The fetcher's side of KIP-279 on a real log: epochs 0 and 3 copied, then led epoch 5.
    The leader answers epoch 4 (which this log skipped) ending at 8: cut where epoch 3 ends
    here and ask about 3 again; then its answer (3 ends at 3) finishes the cut."""
    lg = _log(tmp_path)
    lg.append_as_follower(_batch([b"a", b"b"], base=0, epoch=0))
    for i, value in enumerate([b"c", b"d", b"e", b"f"]):
        lg.append_as_follower(_batch([value], base=2 + i, epoch=3))
    lg.append_as_follower(_batch([b"g"], base=6, epoch=5))
    part = _follower_part(lg, high_watermark=2)
    assert ReplicaFetcher._truncate_to_epoch_end(part, 4, 8) is False
    assert lg.log_end_offset == 6 and lg.epoch_cache.latest_epoch == 3
    assert ReplicaFetcher._truncate_to_epoch_end(part, 3, 3) is True
    assert lg.log_end_offset == 3 and [r[3] for r in read_all(lg)] == [b"a", b"b", b"c"]
    lg.close()


def test_an_epoch_without_records_the_leader_skipped_is_forgotten(tmp_path):
    """A former leader that wrote nothing in its epoch 5: the leader answers epoch 4, which ends
    here at the log end. Nothing to cut, but epoch 5 must go, or the next round would ask about
    it again for ever."""
    lg = _log(tmp_path)
    lg.append_as_follower(_batch([b"a", b"b"], base=0, epoch=3))
    lg.epoch_cache.assign(5, 2)
    part = _follower_part(lg, high_watermark=2)
    assert ReplicaFetcher._truncate_to_epoch_end(part, 4, 9) is False
    assert lg.log_end_offset == 2 and lg.epoch_cache.latest_epoch == 3
    assert ReplicaFetcher._truncate_to_epoch_end(part, 3, 9) is True
    assert lg.log_end_offset == 2
    lg.close()
