"""The metadata store on disk: a snapshot plus a journal of changes, one line each, folded
into a new snapshot at start and when it outgrows the topic count; replay is idempotent,
a torn last line is dropped, a corrupt one refuses to start."""

from __future__ import annotations

import os
import shutil

import pytest

from brook.broker import metadata as md
from brook.broker.metadata import MetadataError, MetadataStore


def open_store(path) -> MetadataStore:
    store = MetadataStore((str(path),), 1)
    store.load()
    return store


def state(store: MetadataStore) -> dict:
    return {"cluster": store.cluster_id, "block": store.producer_id_block_end,
            "topics": {n: (t.topic_id, t.partitions, t.configs, t.internal) for n, t in store.topics.items()}}


def journal_lines(store: MetadataStore) -> list[bytes]:
    with open(store.journal_path, "rb") as f:
        return f.read().splitlines()


def test_each_change_is_one_journal_line_and_survives_a_restart(tmp_path):
    store = open_store(tmp_path)
    store.create_topic("a", 3)
    store.create_topic("b", 1, {"cleanup.policy": "compact"})
    store.set_partitions("a", 5)
    store.set_configs("b", {"retention.ms": "1000"})
    store.delete_topic("a")
    store.allocate_producer_id()
    assert len(journal_lines(store)) == 6
    before = state(store)
    store.close()
    again = open_store(tmp_path)
    assert state(again) == before
    assert journal_lines(again) == []  # folded into the snapshot at start
    assert again.next_producer_id == before["block"]  # no id of the old block is reused
    again.close()


def test_a_change_does_not_rewrite_the_snapshot(tmp_path):
    store = open_store(tmp_path)
    for i in range(50):
        store.create_topic(f"t{i}", 1)
    snapshot = os.stat(store.path)
    store.create_topic("one-more", 1)
    assert os.stat(store.path).st_mtime_ns == snapshot.st_mtime_ns
    assert os.stat(store.path).st_size == snapshot.st_size
    store.close()


def test_the_journal_is_folded_once_it_outgrows_the_topics(tmp_path, monkeypatch):
    monkeypatch.setattr(md, "_MIN_RECORDS_TO_FOLD", 10)
    store = open_store(tmp_path)
    for i in range(3):
        store.create_topic(f"t{i}", 1)
    for n in range(2, 9):
        store.set_partitions("t0", n)
    assert len(journal_lines(store)) == 10  # not more than max(10, 3 topics)
    store.set_partitions("t0", 9)
    assert journal_lines(store) == []  # the 11th record: a new snapshot holds them all
    store.create_topic("t3", 1)
    assert len(journal_lines(store)) == 1
    store.close()
    again = open_store(tmp_path)
    assert sorted(again.topics) == ["t0", "t1", "t2", "t3"] and again.topics["t0"].partitions == 9


def test_a_journal_replayed_over_a_snapshot_that_holds_it_gives_the_same_state(tmp_path):
    """A crash after a new snapshot was written but before the journal was emptied."""
    store = open_store(tmp_path)
    store.create_topic("kept", 1)
    store.create_topic("gone", 1)
    store.delete_topic("gone")
    store.create_topic("again", 1)
    store.delete_topic("again")
    store.finish_deletion("again")  # its groups' offsets are gone: the name is free
    store.create_topic("again", 2)  # a new topic of the same name: a new id
    store.allocate_producer_id()
    journal = open(store.journal_path, "rb").read()
    expected = state(store)
    store.close()
    folded = open_store(tmp_path)  # snapshot now holds everything, journal empty
    folded.close()
    with open(folded.journal_path, "wb") as f:
        f.write(journal)
    assert state(open_store(tmp_path)) == expected


def test_a_torn_last_line_is_dropped(tmp_path, caplog):
    store = open_store(tmp_path)
    store.create_topic("whole", 1)
    store.close()
    with open(store.journal_path, "ab") as f:
        f.write(b'{"id":"0f0b')  # a crash in the middle of an append: never answered
    again = open_store(tmp_path)
    assert list(again.topics) == ["whole"]
    assert "dropping 11 bytes" in caplog.text
    again.create_topic("next", 1)
    again.close()
    assert sorted(open_store(tmp_path).topics) == ["next", "whole"]


def test_a_corrupt_line_inside_the_journal_refuses_to_start(tmp_path):
    store = open_store(tmp_path)
    store.create_topic("a", 1)
    store.close()
    with open(store.journal_path, "ab") as f:
        f.write(b"not json\n" + b'{"delete":"a"}\n')
    with pytest.raises(MetadataError, match="line 2"):
        open_store(tmp_path)


def test_a_batch_is_written_once_at_its_end(tmp_path):
    store = open_store(tmp_path)
    with store.batch():
        for i in range(20):
            store.create_topic(f"t{i}", 1)
        assert journal_lines(store) == []  # nothing written yet, all visible in memory
        assert len(store.topics) == 20
    assert len(journal_lines(store)) == 20
    store.close()
    assert len(open_store(tmp_path).topics) == 20


def test_an_older_store_without_a_journal_loads(tmp_path):
    store = open_store(tmp_path)
    store.create_topic("a", 4)
    store.close()
    open_store(tmp_path).close()  # snapshot holds "a"
    os.unlink(os.path.join(tmp_path, md.JOURNAL_FILE))
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path, copy, ignore=shutil.ignore_patterns("copy"))
    assert open_store(copy).topics["a"].partitions == 4


def test_topic_objects_keep_their_identity_across_changes(tmp_path):
    store = open_store(tmp_path)
    tm = store.create_topic("a", 1)
    store.set_partitions("a", 3)
    store.set_configs("a", {"retention.ms": "5"})
    assert tm is store.get("a") and tm.partitions == 3 and tm.configs == {"retention.ms": "5"}
    assert store.by_id[tm.topic_id] is tm
    store.close()


def test_a_change_whose_write_fails_is_not_applied(tmp_path):
    store = open_store(tmp_path)
    store.create_topic("before", 1)
    os.close(store._journal_fd)  # the journal cannot be written any more (as on a failed disk)
    with pytest.raises(OSError):
        store.create_topic("lost", 1)
    with pytest.raises(OSError):
        store.delete_topic("before")
    assert list(store.topics) == ["before"]
    store._journal_fd = -1
    assert list(open_store(tmp_path).topics) == ["before"]


def test_a_deleted_topic_keeps_its_name_reserved_until_its_deletion_is_finished(tmp_path):
    store = open_store(tmp_path)
    store.create_topic("t", 2)
    store.delete_topic("t")
    assert store.get("t") is None and set(store.deleting) == {"t"}
    with pytest.raises(md.TopicExistsError, match="marked for deletion"):
        store.create_topic("t", 1)
    store.close()
    again = open_store(tmp_path)  # a crash now: the mark survives, in the journal and snapshot
    assert again.get("t") is None and set(again.deleting) == {"t"}
    again.close()
    again = open_store(tmp_path)
    assert set(again.deleting) == {"t"}
    again.finish_deletion("t")
    assert again.deleting == {}
    again.create_topic("t", 1)
    again.close()
    again = open_store(tmp_path)
    assert again.deleting == {} and again.get("t").partitions == 1
    again.close()
