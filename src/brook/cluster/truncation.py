"""Where a follower cuts its log when it starts following a new leader (KIP-101, KIP-279):
pure, so the replica fetcher and the replication simulation decide it the same way."""

from __future__ import annotations

from ..storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache


def truncation_offset(cache: LeaderEpochCache, log_end_offset: int, high_watermark: int,
                      leader_epoch: int, leader_end_offset: int) -> int:
    """The offset to truncate to, given the leader's answer (`leader_epoch`,
    `leader_end_offset`) to "where does my latest epoch end?". The leader's end for our epoch,
    or, when it answers an older epoch (ours it never had), the end of that epoch in our own
    log if it comes first. Without an answer (a leader that knows no epoch, or a log without
    any): the high watermark, which every in-sync replica had."""
    if leader_end_offset == UNDEFINED_OFFSET or cache.latest_epoch == UNDEFINED_EPOCH:
        return min(high_watermark, log_end_offset)
    target = leader_end_offset
    if leader_epoch != cache.latest_epoch:
        _, ours = cache.end_offset_for(leader_epoch, log_end_offset)
        if ours != UNDEFINED_OFFSET:
            target = min(target, ours)
    return min(target, log_end_offset)
