"""Consistent committed offsets across a cluster's failures (issue 35), on three real brokers and
a real ZooKeeper:

- a commit is not served before it is replicated, and a commit whose client was told it failed
  (its followers paused past offsets.commit.timeout.ms) is never served, neither by the broker
  that answered it nor, after a failover, by the next coordinator (the old value was written
  back);
- a coordinator frozen (SIGSTOP) past its ZooKeeper session, while another broker takes over and
  acknowledges newer commits, answers no OffsetFetch with its old offsets and acknowledges no
  commit when it resumes, even to requests waiting on its sockets the moment it wakes;
- the cleaner of `__consumer_offsets` stays below the high watermark, so a commit replicated
  before unreplicated newer ones piled up survives on the coordinator that held them, and
  after a failover every replica ends with the same last value;
- a coordinator load that failed (a segment it cannot open) is tried again until it succeeds,
  answering NOT_COORDINATOR meanwhile."""

from __future__ import annotations

import signal
import threading
import time

from kio.schema.errors import ErrorCode

from brook.protocol.messages import make
from tests.cluster.test_coordinator import SETTINGS, _coordinator
from tests.support.cluster_harness import SESSION_TIMEOUT_MS, brokers, wait_for, zk, zookeeper  # noqa: F401
from tests.support.commit_frames import commit
from tests.support.kafka_wire import WireClient, request_class

OFFSET_FETCH = 9


def fetch_request(group: str):
    cls = request_class(OFFSET_FETCH, 8)
    m = __import__(cls.__module__, fromlist=["x"])
    return make(cls, require_stable=False, groups=(m.OffsetFetchRequestGroup(
        group_id=group, topics=(m.OffsetFetchRequestTopics(name="t", partition_indexes=(0,)),)),))


def fetched(answer) -> tuple[ErrorCode, int | None]:
    """(error, committed offset of t-0) of an OffsetFetch v8 answer for one group."""
    [g] = answer.groups
    if g.error_code != ErrorCode.none:
        return g.error_code, None
    [p] = [p for t in g.topics for p in t.partitions]
    return p.error_code, p.committed_offset if p.error_code == ErrorCode.none else None


def commit_code(answer) -> ErrorCode:
    return answer.topics[0].partitions[0].error_code


def start_cluster(brokers, zk, settings: dict) -> str:
    for i in (1, 2, 3):
        brokers(i, settings)
    bootstrap = brokers.wait_ready(zk, [1, 2, 3])
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("t", 1, 3)], operation_timeout=20)["t"].result(30)
    return bootstrap


def committed_by_client(bootstrap: str, group: str) -> int:
    """The group's committed offset of t-0 as confluent-kafka reads it (OffsetFetch from the
    coordinator it finds)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return c.committed([TopicPartition("t", 0)], timeout=20)[0].offset
    finally:
        c.close()


def test_a_commit_is_not_served_before_it_is_replicated_nor_ever_after_it_failed(zk, brokers):
    settings = {**SETTINGS, "offsets.commit.timeout.ms": 1500, "replica.lag.time.max.ms": 60_000,
                "zookeeper.session.timeout.ms": 30_000}
    bootstrap = start_cluster(brokers, zk, settings)
    group = "g-unreplicated"
    _, node = wait_for(lambda: (r := _coordinator(bootstrap, group))[0] == 0 and r, 30,
                       "a coordinator", brokers)
    followers = [i for i in (1, 2, 3) if i != node]
    with WireClient(brokers[node].bootstrap, 30) as w, \
            WireClient(brokers[node].bootstrap, 30) as reader:
        wait_for(lambda: commit_code(w.request(commit(group, 5))) == ErrorCode.none, 30,
                 "a first commit", brokers)
        assert fetched(reader.request(fetch_request(group))) == (ErrorCode.none, 5)
        for i in followers:
            brokers[i].proc.send_signal(signal.SIGSTOP)
        try:
            corr = w.send(commit(group, 6))  # appended; its replicas cannot fetch it
            seen = set()
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:  # waiting for its replicas: not served
                seen.add(fetched(reader.request(fetch_request(group))))
                time.sleep(0.02)
            answer = w.recv(8, 9, corr)
            assert commit_code(answer) == ErrorCode.coordinator_not_available
            seen.add(fetched(reader.request(fetch_request(group))))
            assert seen == {(ErrorCode.none, 5)}, seen
        finally:
            for i in followers:
                brokers[i].proc.send_signal(signal.SIGCONT)
        # The followers catch up with the failed commit's records and with the old value
        # written back after them.
        wait_for(lambda: zk.in_sync(["__consumer_offsets", "t"]), 30, "the replicas back", brokers)
        time.sleep(1)
        assert fetched(reader.request(fetch_request(group))) == (ErrorCode.none, 5)
    # Failover: the next coordinator loads the partition from its own log.
    assert brokers[node].stop() == 0
    rest = ",".join(brokers[i].bootstrap for i in followers)
    wait_for(lambda: (r := _coordinator(rest, group))[0] == 0 and r[1] != node, 30,
             "a new coordinator", brokers)
    assert committed_by_client(rest, group) == 5


ROUNDS = 2
QUEUED = 20  # OffsetFetch requests waiting on the paused broker's sockets when it resumes


def test_a_paused_coordinator_that_resumes_serves_no_stale_offsets_and_acknowledges_no_commit(zk, brokers):
    """Each round: commits acknowledged by the group's coordinator; it is frozen (SIGSTOP)
    past its ZooKeeper session; another broker takes over and acknowledges a newer commit;
    OffsetFetch requests (and a commit) are already waiting on the frozen broker's sockets, and
    more are sent in a tight loop the moment it resumes (SIGCONT). It must answer none of them
    with the offset from before the freeze, nor acknowledge the commit."""
    bootstrap = start_cluster(brokers, zk, SETTINGS)
    group = "g-paused"
    offset = 0
    for round_ in range(ROUNDS):
        _, old = wait_for(lambda: (r := _coordinator(bootstrap, group))[0] == 0 and r, 60,
                          "the group's coordinator", brokers)
        offset += 100
        stale = offset
        with WireClient(brokers[old].bootstrap, 30) as w:
            wait_for(lambda: commit_code(w.request(commit(group, stale))) == ErrorCode.none, 30,
                     "a commit to the coordinator", brokers)
        queued = [WireClient(brokers[old].bootstrap, 60) for _ in range(4)]
        committer = WireClient(brokers[old].bootstrap, 60)
        answers: list[tuple[int, tuple]] = []  # (round, fetched) of every answer from the old one
        brokers[old].proc.send_signal(signal.SIGSTOP)
        try:
            others = ",".join(brokers[i].bootstrap for i in (1, 2, 3) if i != old)
            _, new = wait_for(lambda: (r := _coordinator(others, group))[0] == 0 and r[1] != old
                              and r, SESSION_TIMEOUT_MS / 1000 + 30, "another coordinator", brokers)
            offset += 100
            newer = offset
            with WireClient(brokers[new].bootstrap, 30) as w:
                wait_for(lambda: commit_code(w.request(commit(group, newer))) == ErrorCode.none,
                         30, "a commit acknowledged by the new coordinator", brokers)
            sent = [[c.send(fetch_request(group)) for _ in range(QUEUED // len(queued))]
                    for c in queued]
            zombie_commit = committer.send(commit(group, newer + 50))
        except BaseException:
            brokers[old].proc.send_signal(signal.SIGCONT)
            raise
        stop = threading.Event()

        def hammer() -> None:  # new connections, one request each, as fast as they go
            while not stop.is_set():
                try:
                    with WireClient(brokers[old].bootstrap, 5) as c:
                        answers.append((round_, fetched(c.request(fetch_request(group)))))
                except (OSError, ConnectionError):
                    time.sleep(0.01)

        brokers[old].proc.send_signal(signal.SIGCONT)
        loop = threading.Thread(target=hammer, daemon=True)
        loop.start()
        try:
            for c, corrs in zip(queued, sent):
                for corr in corrs:
                    answers.append((round_, fetched(c.recv(OFFSET_FETCH, 8, corr))))
            zombie = commit_code(committer.recv(8, 9, zombie_commit))
            time.sleep(2)
        finally:
            stop.set()
            loop.join(10)
            for c in [*queued, committer]:
                c.close()
        served = [a for r, a in answers if r == round_ and a[0] == ErrorCode.none]
        assert (ErrorCode.none, stale) not in served, (
            f"round {round_}: the resumed coordinator served the offset from before its freeze "
            f"{sum(a == (ErrorCode.none, stale) for a in served)} time(s)")
        assert all(off >= newer for _, off in served), served
        assert zombie != ErrorCode.none, "the resumed coordinator acknowledged a commit"
        assert len(answers) > QUEUED
        # The group is served by whoever coordinates it now, with the newer commit.
        wait_for(lambda: zk.broker_ids() == [1, 2, 3], 30, "the paused broker back", brokers)
        assert committed_by_client(bootstrap, group) == newer
    for i in (1, 2, 3):
        assert "Traceback" not in brokers[i].stderr_path.read_text()


def _commits_of(broker, group: str) -> list[int]:
    """The offsets of t-0 committed for `group` that a stopped broker's __consumer_offsets-0
    still holds, in log order (None for a tombstone)."""
    from tests.broker.test_offsets_loading import read_offsets_log
    return [value.offset if value is not None else None
            for key, value in read_offsets_log(broker, 0)
            if getattr(key, "group", None) == group and getattr(key, "partition", None) == 0]


def test_compaction_of_the_offsets_topic_never_passes_the_high_watermark(zk, brokers):
    """The coordinator's followers paused: commits pile up on its log above the high watermark
    in small, rolled segments while its cleaner runs. Cleaning them would drop the replicated
    commit below the high watermark (newer values of its key sit above), and the truncation
    after a failover would then take the newer values too: the old coordinator's replica
    would lose the key that the others keep. The cleaner stays below the high watermark, so
    the replicated commit survives on the killed coordinator and every replica ends alike."""
    settings = {**SETTINGS, "offsets.topic.num.partitions": 1, "offsets.topic.segment.bytes": 1024,
                "log.cleaner.backoff.ms": 100, "offsets.commit.timeout.ms": 60_000,
                "replica.lag.time.max.ms": 60_000, "zookeeper.session.timeout.ms": 10_000}
    bootstrap = start_cluster(brokers, zk, settings)
    group = "g-cleaned"
    _, node = wait_for(lambda: (r := _coordinator(bootstrap, group))[0] == 0 and r, 30,
                       "a coordinator", brokers)
    followers = [i for i in (1, 2, 3) if i != node]
    with WireClient(brokers[node].bootstrap, 30) as w:
        wait_for(lambda: commit_code(w.request(commit(group, 5))) == ErrorCode.none, 30,
                 "a replicated commit", brokers)
        for i in followers:
            brokers[i].proc.send_signal(signal.SIGSTOP)
        try:
            for offset in range(6, 66):  # appended, never replicated: several segments
                w.send(commit(group, offset))
            time.sleep(3)  # the cleaner's turns (every 100 ms) over the rolled segments
            brokers[node].kill()
        finally:
            for i in followers:
                brokers[i].proc.send_signal(signal.SIGCONT)
    held = _commits_of(brokers[node], group)
    # commits one connection keeps waiting: a few dozen, over several 1 KB segments
    assert held[-1] >= 30 and 5 in held, held  # without the bound, 5 is cleaned away
    rest = ",".join(brokers[i].bootstrap for i in followers)
    wait_for(lambda: (r := _coordinator(rest, group))[0] == 0 and r[1] != node, 60,
             "a new coordinator", brokers)
    # Never acknowledged, the piled-up commits may still be on the new coordinator's replica
    # (a fetch answered as the followers froze is read when they resume): 5 or one of them.
    now = committed_by_client(rest, group)
    assert now in held[held.index(5):], (now, held)
    brokers[node].start()  # truncates what it alone held and catches up
    wait_for(lambda: zk.in_sync(["__consumer_offsets"]), 60, "the old coordinator back", brokers)
    for i in (1, 2, 3):
        assert brokers[i].stop() == 0
    last = {i: (_commits_of(brokers[i], group) or [None])[-1] for i in (1, 2, 3)}
    assert last == {1: now, 2: now, 3: now}, last


def test_a_load_that_failed_on_an_unreadable_segment_is_tried_again_and_serves(zk, brokers):
    """The followers' first segment of __consumer_offsets-0 is made unreadable (its descriptor
    long evicted from the small segment-file cache, a directory stands at its path, so opening
    it fails); the coordinator is killed; the follower that takes over cannot load the
    partition and answers NOT_COORDINATOR, logging why. The segment comes back: a later try
    loads it, and the group's acknowledged offset is served again."""
    settings = {**SETTINGS, "offsets.topic.num.partitions": 1, "offsets.topic.segment.bytes": 512,
                "log.segment.fd.cache.size": 16, "log.cleaner.enable": False}
    bootstrap = start_cluster(brokers, zk, settings)
    group = "g-unreadable"
    _, node = wait_for(lambda: (r := _coordinator(bootstrap, group))[0] == 0 and r, 30,
                       "a coordinator", brokers)
    followers = [i for i in (1, 2, 3) if i != node]
    with WireClient(brokers[node].bootstrap, 30) as w:
        for offset in range(1, 201):  # one acknowledged commit each: 50 segments, beyond 16
            wait_for(lambda: commit_code(w.request(commit(group, offset))) == ErrorCode.none, 30,
                     "a commit", brokers)
    wait_for(lambda: zk.in_sync(["__consumer_offsets"]), 30, "the followers in sync", brokers)
    moved = {}
    for i in followers:
        first = min((brokers[i].log_dir / "__consumer_offsets-0").glob("*.log"))
        moved[first] = first.with_name(first.name + ".away")
        first.rename(moved[first])
        first.mkdir()  # open() of it now fails: IsADirectoryError
    try:
        brokers[node].kill()
        wait_for(lambda: any("loading failed" in brokers[i].stderr_path.read_text()
                             for i in followers), 60, "a failed load", brokers)
        rest = ",".join(brokers[i].bootstrap for i in followers)
        new = _coordinator(rest, group)[1]
        assert new in followers
        time.sleep(1)  # a retry or two in the meantime: still failing
        with WireClient(brokers[new].bootstrap, 10) as c:
            answer = fetched(c.request(fetch_request(group)))
        assert answer[0] in (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress), answer
    finally:
        for path, away in moved.items():
            path.rmdir()
            away.rename(path)
    # tried again with a growing backoff (0.5 s, 1 s, 2 s, ...): served once a try succeeds
    with WireClient(brokers[new].bootstrap, 10) as c:
        wait_for(lambda: fetched(c.request(fetch_request(group))) == (ErrorCode.none, 200), 30,
                 "the partition loaded at a later try", brokers)
    assert committed_by_client(rest, group) == 200
