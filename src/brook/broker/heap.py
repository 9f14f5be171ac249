"""Keeps the cycle collector's full passes short on a broker with a large, long-lived heap.

A full pass of CPython's cycle collector walks every tracked object and holds the event loop
meanwhile: on a broker with 10,000 partitions (some twenty objects each) that is hundreds of
milliseconds, and it comes back each time the heap has grown by a quarter. What survives a
full pass is, at that instant, reachable: moving it to the permanent generation
(`gc.freeze`) takes it out of later passes, which then walk only what was made since.

The price: a frozen object that later dies inside a reference cycle is never collected. The
broker's long-lived structures (logs, partitions, connections, groups) are released by
reference counting, which freezing does not affect; tests/broker/test_heap.py holds them
to it."""

from __future__ import annotations

import gc

_installed = False


def _after_collection(phase: str, info: dict) -> None:
    if phase == "stop" and info["generation"] == 2:
        gc.freeze()  # everything tracked just survived a full pass: it is live


def freeze_survivors_of_full_collections() -> None:
    """From now on, after each full pass the survivors are frozen (idempotent)."""
    global _installed
    if not _installed:
        _installed = True
        gc.callbacks.append(_after_collection)
        gc.collect()  # what startup loaded, frozen at once


def uninstall() -> None:
    """Stop freezing and give the frozen objects back to the collector (tests)."""
    global _installed
    if _installed:
        _installed = False
        gc.callbacks.remove(_after_collection)
        gc.unfreeze()
