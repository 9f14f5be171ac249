"""freeze_worker_heap: Spark's daemon collects garbage after every task of a reused Python
worker; the readers take the worker's long-lived heap out of those collections, once, and
only inside a Spark task."""

from __future__ import annotations

import gc

from pyspark import TaskContext

from brook.spark import reader


def test_outside_a_spark_task_nothing_is_frozen(monkeypatch):
    monkeypatch.setattr(reader, "_frozen", False)
    before = gc.get_freeze_count()
    reader.freeze_worker_heap()
    assert gc.get_freeze_count() == before
    assert not reader._frozen


def test_in_a_task_the_heap_is_frozen_once(monkeypatch):
    monkeypatch.setattr(reader, "_frozen", False)
    monkeypatch.setattr(TaskContext, "get", classmethod(lambda cls: object()))
    freezes = []
    real_freeze = gc.freeze
    monkeypatch.setattr(gc, "freeze", lambda: (freezes.append(1), real_freeze()))
    try:
        reader.freeze_worker_heap()
        assert reader._frozen and freezes == [1] and gc.get_freeze_count() > 0
        reader.freeze_worker_heap()
        assert freezes == [1]
    finally:
        gc.unfreeze()


def test_reads_freeze_the_heap_first(monkeypatch):
    calls = []
    monkeypatch.setattr(reader, "freeze_worker_heap", lambda: calls.append(1))
    assert list(reader.read_ranges([])) == []
    assert calls == [1]
