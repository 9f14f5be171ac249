"""Writing transaction markers on a leader (brook.broker.txn_markers), in process as a
transaction coordinator on the broker would: acks=all semantics (answered once the high
watermark passed the marker, REQUEST_TIMED_OUT if it did not in time), leadership and
min.insync.replicas refusals, epoch checks; and who may send WriteTxnMarkers
(inter_broker_rules.txn_markers)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kio.schema.errors import ErrorCode as E

from brook.broker.txn_markers import TxnMarker, write_txn_markers
from brook.cluster import inter_broker_rules as rules
from brook.records import Record, encode_batch
from brook.replication.partition import Partition
from brook.storage.config import LogConfig
from brook.storage.log import Log
from brook.storage.txn_index import AbortedTxn

PID = 77


class Replicas:
    def leader_error(self, p):
        return E.none if p.tracker is not None else E.not_leader_or_follower


def cluster_broker(tmp_path, min_insync=2):
    p = Partition("t", 0, Log(str(tmp_path / "t-0"), LogConfig()))
    p.become_leader(1, leader_epoch=3, isr=(1, 2), replicas=(1, 2), zk_version=0, now_ms=0)
    broker = SimpleNamespace(partitions={("t", 0): p}, replicas=Replicas(), group_commit=None,
                             config=SimpleNamespace(request_timeout_ms=30_000),
                             min_insync_replicas=lambda topic: min_insync,
                             log_dir_failed=lambda *a: None)
    broker.partition = lambda topic, index: broker.partitions.get((topic, index))
    return broker, p


def open_txn(p: Partition) -> int:
    info = p.append(encode_batch([Record(0, 0, None, b"v")], producer_id=PID, producer_epoch=0,
                                 base_sequence=0, transactional=True))
    p.on_follower_fetch(2, info.last_offset + 1, now_ms=1)
    return info.last_offset + 1


def abort(partitions=(("t", 0),), epoch=0, coordinator_epoch=0):
    return TxnMarker(PID, epoch, coordinator_epoch, False, partitions)


def test_the_answer_waits_for_the_followers(tmp_path):
    async def run():
        broker, p = cluster_broker(tmp_path)
        open_txn(p)
        task = asyncio.ensure_future(write_txn_markers(broker, [abort()]))
        await asyncio.sleep(0.05)
        assert not task.done()  # the marker is appended, not replicated
        assert p.log.all_aborted_transactions() == [AbortedTxn(PID, 0, 1, 2)]
        assert p.last_stable_offset == 0  # the decision is not safe until the HW passes it
        p.on_follower_fetch(2, p.log_end_offset, now_ms=2)
        assert await task == {(PID, "t", 0): E.none}
        assert p.last_stable_offset == p.high_watermark == 2
        p.log.close()

    asyncio.run(run())


def test_a_marker_not_replicated_in_time_times_out_and_stops_waiting(tmp_path):
    async def run():
        broker, p = cluster_broker(tmp_path)
        open_txn(p)
        assert await write_txn_markers(broker, [abort()], timeout_ms=50) == {
            (PID, "t", 0): E.request_timed_out}
        await asyncio.sleep(0)
        assert [f for _, _, f in p._hw_waiters if not f.done()] == []
        p.log.close()

    asyncio.run(run())


def test_refusals_before_the_append(tmp_path):
    async def run():
        broker, p = cluster_broker(tmp_path, min_insync=3)
        end = open_txn(p)
        got = await write_txn_markers(broker, [abort((("t", 0), ("t", 1), ("u", 0)))])
        assert got == {(PID, "t", 0): E.not_enough_replicas,
                       (PID, "t", 1): E.unknown_topic_or_partition,
                       (PID, "u", 0): E.unknown_topic_or_partition}
        broker.min_insync_replicas = lambda topic: 1
        p.become_follower(2, 4, isr=(1, 2), replicas=(1, 2), zk_version=1)
        assert await write_txn_markers(broker, [abort()]) == {(PID, "t", 0): E.not_leader_or_follower}
        assert p.log_end_offset == end  # nothing written
        p.log.close()

    asyncio.run(run())


def test_epochs_are_checked(tmp_path):
    async def run():
        broker, p = cluster_broker(tmp_path, min_insync=1)
        p.update_leadership(isr=(1,), replicas=(1, 2), zk_version=1)
        open_txn(p)
        assert await write_txn_markers(broker, [abort(coordinator_epoch=4)]) == {(PID, "t", 0): E.none}
        assert await write_txn_markers(broker, [abort(coordinator_epoch=3)]) == {
            (PID, "t", 0): E.transaction_coordinator_fenced}
        assert await write_txn_markers(broker, [abort(epoch=1, coordinator_epoch=4)]) == {
            (PID, "t", 0): E.none}
        assert await write_txn_markers(broker, [abort(epoch=0, coordinator_epoch=4)]) == {
            (PID, "t", 0): E.invalid_producer_epoch}
        p.log.close()

    asyncio.run(run())


def test_who_may_send_write_txn_markers():
    def refused(peer, **kw):
        return rules.txn_markers(peer, **kw) is not None

    # a broker of the cluster, or a principal allowed ClusterAction (peer UNBOUND)
    assert not refused(3, cluster=True, authorizer=False, may_alter_cluster=False)
    assert not refused(rules.UNBOUND, cluster=True, authorizer=True, may_alter_cluster=False)
    # Cluster Alter (KIP-664's abort of a hanging transaction), with an authorizer
    assert not refused(None, cluster=True, authorizer=True, may_alter_cluster=True)
    assert refused(None, cluster=True, authorizer=True, may_alter_cluster=False)
    # a single node without an authorizer takes it from anyone, as Kafka without one...
    assert not refused(None, cluster=False, authorizer=False, may_alter_cluster=False)
    # ...a cluster without one only from its brokers
    assert rules.txn_markers(None, cluster=True, authorizer=False, may_alter_cluster=False).code == \
        E.cluster_authorization_failed
