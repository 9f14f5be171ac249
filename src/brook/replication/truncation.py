"""Where a follower cuts its log when it starts following a new leader (KIP-101, KIP-279):
pure, so the replica fetcher and the replication simulation decide it the same way."""

from __future__ import annotations

from typing import NamedTuple

from ..storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache


class Truncation(NamedTuple):
    offset: int
    #: False: cut to `offset`, then ask the leader again about the (older) latest epoch left
    finished: bool


def truncation_offset(cache: LeaderEpochCache, log_end_offset: int, high_watermark: int,
                      leader_epoch: int, leader_end_offset: int) -> Truncation:
    """Where to cut, given the leader's answer (`leader_epoch`, `leader_end_offset`) to "where
    does my latest epoch end?".

    - The leader answers our own latest epoch: cut at its end for it.
    - It answers an older epoch, which this log also has: both logs hold that epoch's records
      (one leader wrote them), so cut at whichever end comes first.
    - It answers an older epoch this log never had (our log skipped it, as the leader's skipped
      ours): what we hold after our largest epoch below it may differ from the leader's at any
      offset, so cut at that epoch's end here and ask again about it (KIP-279). Each round
      drops at least one epoch, so the rounds end.
    - Without an answer (a leader that knows no epoch, or a log without any): the high
      watermark, which every in-sync replica had.
    """
    if leader_end_offset == UNDEFINED_OFFSET or cache.latest_epoch == UNDEFINED_EPOCH:
        return Truncation(min(high_watermark, log_end_offset), True)
    if leader_epoch == cache.latest_epoch:
        return Truncation(min(leader_end_offset, log_end_offset), True)
    ours, our_end = cache.end_offset_for(leader_epoch, log_end_offset)
    if our_end == UNDEFINED_OFFSET:
        return Truncation(min(leader_end_offset, log_end_offset), True)
    if ours == leader_epoch:
        return Truncation(min(leader_end_offset, our_end, log_end_offset), True)
    return Truncation(min(our_end, log_end_offset), False)
