"""Incremental fetch sessions (KIP-227), sans-I/O: the clock is injected, nothing here reads
logs or sockets.

A client that fetches the same partitions over and over can open a session with a *full*
fetch request (epoch 0). The broker remembers the session's partitions, in order, with each
one's fetch offset and partition max bytes, and what it last told the client about the
partition (high watermark, last stable offset, log start offset). Each later *incremental*
request (epoch 1, 2, ...) names only the partitions that were added or whose fetch position
changed, and those to forget; the broker reads every partition of the session and answers only
those with records, an error, or a watermark or log start that moved.

The request's (session id, epoch) selects one of four outcomes, as in Kafka:

=================================  =========================================================
session id 0, epoch -1 (FINAL)     sessionless full fetch (librdkafka, aiokafka, kcat)
any id, epoch 0 (INITIAL)          close that session if it exists; full fetch that opens a
                                   new session, or answers with id 0 when the cache is full
                                   and nothing can be evicted
id N, epoch -1                     close session N; sessionless full fetch
id N, any other epoch E            incremental fetch: FETCH_SESSION_ID_NOT_FOUND when N is
                                   unknown, INVALID_FETCH_SESSION_EPOCH when E is not the
                                   epoch the session expects, FETCH_SESSION_TOPIC_ID_ERROR when
                                   the request names topics differently (by id from Fetch v13,
                                   by name before) from the request that opened the session;
                                   sessionless if it forgets the session's last partition
=================================  =========================================================

Epochs go 1, 2, ... 2**31-1, then wrap to 1 (0 and -1 have their meanings above).

`max.incremental.fetch.session.cache.slots` counts sessions, as Kafka's does ("the maximum
number of total incremental fetch sessions"). Kafka splits it over 8 shards to spread lock
contention, so a session can only evict one of its own shard; brook handles requests on one
event loop and keeps a single cache, where every session is a candidate. When a new session
finds the cache full, it takes the place of

1. the least recently used session, if that has been idle for longer than two minutes, or else
2. the smallest of the sessions created over two minutes ago (of equal ones, the lowest id),
   if the new session has more partitions.

Otherwise no session is created and the full request is answered with session id 0, which
clients take as "keep sending full requests". Kafka's other rule, that a follower's session
may evict a consumer's, has no use on a broker without followers.
"""

from __future__ import annotations

import abc
import logging
import random
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, NamedTuple, Protocol, Sequence, Union

from kio.schema.errors import ErrorCode

from ..clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1
# How long a session is safe from eviction after it was created and after it was last used
# (Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS).
EVICTION_MS = 120_000

TopicKey = Union[str, uuid.UUID]  # a topic name (Fetch v4-12) or a topic id (v13+)


def next_epoch(epoch: int) -> int:
    """The epoch that follows `epoch` in a session's sequence."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == INT32_MAX:
        return 1
    return epoch + 1


class RequestedPartition(Protocol):
    """What a Fetch request says about one partition (kio's FetchPartition has these)."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int


class PartitionAnswer(Protocol):
    """What the broker found for one partition (brook.protocol.fetch_response.PartitionResult)."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: Sequence[Any]


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: how the client last asked for it, and what it was last
    told about it."""

    topic: TopicKey
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    @property
    def key(self) -> tuple[TopicKey, int]:
        return self.topic, self.partition

    def update_request(self, req: RequestedPartition) -> None:
        self.fetch_offset = req.fetch_offset
        self.partition_max_bytes = req.partition_max_bytes

    def must_respond(self, answer: PartitionAnswer, update: bool = True) -> bool:
        """Whether an incremental response must carry this partition: it has records or an
        error, or its high watermark, last stable offset or log start offset changed since
        the client last heard of it. With `update`, remember what the client is now told (an
        error forgets the high watermark, so the partition is sent again once it clears)."""
        respond = bool(answer.records) or answer.error_code != 0
        if self.high_watermark != answer.high_watermark:
            respond = True
            if update:
                self.high_watermark = answer.high_watermark
        if self.last_stable_offset != answer.last_stable_offset:
            respond = True
            if update:
                self.last_stable_offset = answer.last_stable_offset
        if self.log_start_offset != answer.log_start_offset:
            respond = True
            if update:
                self.log_start_offset = answer.log_start_offset
        if answer.error_code != 0 and update:
            self.high_watermark = -1
        return respond


class FetchSession:
    """A client's partitions, in the order they are read, and the epoch it must send next."""

    __slots__ = ("id", "uses_topic_ids", "partitions", "epoch", "created_ms", "last_used_ms")

    def __init__(self, session_id: int, uses_topic_ids: bool, partitions: Iterable[CachedPartition],
                 now: int) -> None:
        self.id = session_id
        self.uses_topic_ids = uses_topic_ids
        self.partitions: dict[tuple[TopicKey, int], CachedPartition] = {
            p.key: p for p in partitions}
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.created_ms = now
        self.last_used_ms = now

    def __len__(self) -> int:
        return len(self.partitions)

    def update(self, fetch: Sequence[tuple[TopicKey, RequestedPartition]],
               forgotten: Iterable[tuple[TopicKey, int]]) -> tuple[int, int, int]:
        """Apply an incremental request: add new partitions at the end, take the new fetch
        position of known ones, drop forgotten ones. Returns (added, updated, removed)."""
        added = updated = removed = 0
        for topic, req in fetch:
            cached = self.partitions.get((topic, req.partition))
            if cached is None:
                self.partitions[(topic, req.partition)] = CachedPartition(
                    topic, req.partition, req.fetch_offset, req.partition_max_bytes)
                added += 1
            else:
                cached.update_request(req)
                updated += 1
        for key in forgotten:
            if self.partitions.pop(key, None) is not None:
                removed += 1
        return added, updated, removed

    def __repr__(self) -> str:
        return (f"FetchSession(id={self.id}, epoch={self.epoch}, "
                f"partitions={len(self.partitions)}, uses_topic_ids={self.uses_topic_ids})")


class Completion(NamedTuple):
    """How to answer: the response's error code and session id, and which of the read
    partitions go in it (None: all of them; ignored when there is an error)."""

    error_code: int
    session_id: int
    include: list[bool] | None = None


class FetchContext(abc.ABC):
    """One Fetch request's view of its session: `partitions` to read, in order, then
    `complete(answers)` (one answer per partition, same order) to shape the response. A
    request with a session error has nothing to read and is answered with its `error_code`."""

    error_code: int = ErrorCode.none
    partitions: list[tuple[TopicKey, RequestedPartition]]

    @abc.abstractmethod
    def complete(self, answers: Sequence[PartitionAnswer]) -> Completion:
        """Shape the response from one answer per partition of `partitions`."""


class SessionErrorContext(FetchContext):
    def __init__(self, error_code: int) -> None:
        self.error_code = error_code
        self.partitions = []

    def complete(self, answers: Sequence[PartitionAnswer]) -> Completion:
        return Completion(self.error_code, INVALID_SESSION_ID)


class SessionlessContext(FetchContext):
    def __init__(self, partitions: list[tuple[TopicKey, RequestedPartition]]) -> None:
        self.partitions = partitions

    def complete(self, answers: Sequence[PartitionAnswer]) -> Completion:
        return Completion(ErrorCode.none, INVALID_SESSION_ID)


class FullContext(FetchContext):
    """A full request that asks for a session: it is created, when the cache has room, with
    what this response tells the client."""

    def __init__(self, cache: FetchSessionCache,
                 partitions: list[tuple[TopicKey, RequestedPartition]],
                 uses_topic_ids: bool) -> None:
        self.cache = cache
        self.partitions = partitions
        self.uses_topic_ids = uses_topic_ids

    def complete(self, answers: Sequence[PartitionAnswer]) -> Completion:
        cached = [CachedPartition(topic, req.partition, req.fetch_offset, req.partition_max_bytes,
                                  a.high_watermark, a.last_stable_offset, a.log_start_offset)
                  for (topic, req), a in zip(self.partitions, answers)]
        session_id = self.cache._create(cached, self.uses_topic_ids)
        return Completion(ErrorCode.none, session_id)


class IncrementalContext(FetchContext):
    """An incremental request: every partition of the session is read; the response carries
    only those that changed, and partitions that returned records move to the end of the
    session's order so that the others come first next time (fairness under max_bytes)."""

    def __init__(self, session: FetchSession, request_epoch: int) -> None:
        self.session = session
        self.expected_epoch = next_epoch(request_epoch)
        self._cached = list(session.partitions.values())
        self.partitions = [(cp.topic, cp) for cp in self._cached]

    def complete(self, answers: Sequence[PartitionAnswer]) -> Completion:
        session = self.session
        if session.epoch != self.expected_epoch:
            # Another request of this session was accepted while this one waited: the client
            # sent a duplicate, and only the newer one may change what the session remembers.
            log.info("fetch session %d expected epoch %d but is at %d: a duplicate request",
                     session.id, self.expected_epoch, session.epoch)
            return Completion(ErrorCode.invalid_fetch_session_epoch, session.id)
        include = []
        moved = []
        for cp, answer in zip(self._cached, answers):
            include.append(cp.must_respond(answer))
            if answer.records:
                moved.append(cp.key)
        for key in moved:
            cp = session.partitions.pop(key, None)
            if cp is not None:
                session.partitions[key] = cp
        return Completion(ErrorCode.none, session.id, include)


class FetchSessionCache:
    """The broker's fetch sessions, at most `max_sessions` of them (see the module docstring
    for eviction)."""

    def __init__(self, max_sessions: int = 1000, clock: Clock = SYSTEM_CLOCK,
                 eviction_ms: int = EVICTION_MS, rng: random.Random | None = None) -> None:
        self.max_sessions = max_sessions
        self.clock = clock
        self.eviction_ms = eviction_ms
        self.rng = rng or random.Random()
        # In order of last use, least recent first.
        self._sessions: dict[int, FetchSession] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: int) -> bool:
        return session_id in self._sessions

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    @property
    def total_partitions(self) -> int:
        return sum(len(s) for s in self._sessions.values())

    def new_context(self, session_id: int, epoch: int,
                    fetch: Iterable[tuple[TopicKey, RequestedPartition]],
                    forgotten: Iterable[tuple[TopicKey, int]] = (),
                    uses_topic_ids: bool = False) -> FetchContext:
        """The context for a Fetch request with this session id and epoch, partitions to
        fetch (topic name or id, partition data) and partitions to forget."""
        fetch = list(fetch)
        if epoch == INITIAL_EPOCH or epoch == FINAL_EPOCH:
            if session_id != INVALID_SESSION_ID and self.remove(session_id) is not None:
                log.debug("closed fetch session %d", session_id)
            if epoch == FINAL_EPOCH:
                return SessionlessContext(fetch)
            return FullContext(self, fetch, uses_topic_ids)
        session = self._sessions.get(session_id)
        if session is None:
            log.debug("fetch session %d not found", session_id)
            return SessionErrorContext(ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            log.debug("fetch session %d expects epoch %d, got %d", session_id, session.epoch, epoch)
            return SessionErrorContext(ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != uses_topic_ids:
            log.debug("fetch session %d %s topic ids, the request does not", session_id,
                      "uses" if session.uses_topic_ids else "does not use")
            return SessionErrorContext(ErrorCode.fetch_session_topic_id_error)
        added, updated, removed = session.update(fetch, forgotten)
        if not session.partitions:
            self.remove(session_id)
            log.debug("closed fetch session %d: no partitions left", session_id)
            return SessionlessContext(fetch)
        self._touch(session, self.clock.milliseconds())
        session.epoch = next_epoch(session.epoch)
        log.debug("incremental fetch in session %d, epoch %d: added %d, updated %d, removed %d, "
                  "%d partitions", session_id, epoch, added, updated, removed, len(session))
        return IncrementalContext(session, epoch)

    def remove(self, session_id: int) -> FetchSession | None:
        return self._sessions.pop(session_id, None)

    # ------------------------------------------------------------ internals

    def _touch(self, session: FetchSession, now: int) -> None:
        session.last_used_ms = now
        self._sessions.pop(session.id, None)
        self._sessions[session.id] = session

    def _new_id(self) -> int:
        while True:
            session_id = self.rng.randint(1, INT32_MAX)
            if session_id not in self._sessions:
                return session_id

    def _create(self, partitions: list[CachedPartition], uses_topic_ids: bool) -> int:
        now = self.clock.milliseconds()
        if len(self._sessions) >= self.max_sessions and not self._try_evict(len(partitions), now):
            log.debug("no fetch session created for %d partitions: the cache is full",
                      len(partitions))
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), uses_topic_ids, partitions, now)
        self._sessions[session.id] = session
        log.debug("created fetch session %d with %d partitions", session.id, len(session))
        return session.id

    def _try_evict(self, size: int, now: int) -> bool:
        if not self._sessions:
            return False
        lru = next(iter(self._sessions.values()))
        if now - lru.last_used_ms > self.eviction_ms:
            victim = lru
        else:
            settled = [s for s in self._sessions.values() if now - s.created_ms > self.eviction_ms]
            if not settled:
                return False
            victim = min(settled, key=lambda s: (len(s), s.id))
            if size <= len(victim):
                return False
        self.remove(victim.id)
        self.evictions += 1
        log.debug("evicted fetch session %d (%d partitions, idle %d ms)", victim.id, len(victim),
                  now - victim.last_used_ms)
        return True
