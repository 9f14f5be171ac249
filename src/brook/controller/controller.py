"""The controller, while this broker is it: it keeps every partition led by a live in-sync
replica and tells the brokers.

One task reconciles whenever something changed (brokers came or went, a topic appeared, a
leader asked for an ISR change): it reads what it does not know yet from ZooKeeper, decides
with `elections` (pure), writes the new partition states conditionally on its controller
epoch (a deposed controller writes nothing), and then sends LeaderAndIsr to the replicas of
every changed partition and UpdateMetadata to every live broker. A broker that joins or
bounces gets all of its partitions. Requests to a broker are sent in order, one at a time,
and tried again while the broker is alive: the broker applies only what is newer than what
it has (leader epochs), so a repeat changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import replace

from kio.schema.errors import ErrorCode

from ..protocol import inter_broker as ib
from ..cluster import zk_data
from ..cluster.channel import BrokerChannel, ChannelError
from ..cluster.errors import ControllerMovedError
from ..cluster.view import ClusterView, LiveBroker
from ..cluster.zk_client import TRANSIENT_ERRORS, ZkClient
from ..cluster.zk_data import PartitionState, TopicAssignment
from . import elections, reassignment

log = logging.getLogger(__name__)

RETRY_S = 0.5


def topic_uuid(topic_id: str | None) -> uuid.UUID | None:
    """Kafka's base64 topic id as a UUID."""
    if not topic_id:
        return None
    import base64
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4)))
    except ValueError:
        return None


def topic_id_text(value: uuid.UUID) -> str:
    import base64
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


class Controller:
    def __init__(self, zk: ZkClient, broker_id: int, epoch: int, epoch_zk_version: int,
                 view: ClusterView, *, listener: str, unclean: bool = False, sasl=None,
                 tls=None, control_listener: str | None = None) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.epoch = epoch
        self.epoch_zk_version = epoch_zk_version
        self.listener = listener  # the inter-broker listener's name
        #: Where the controller's own requests go (control.plane.listener.name, else the
        #: inter-broker listener).
        self.control_listener = control_listener or listener
        self.sasl = sasl  # ClientCredentials (or a function giving them) brokers log in with
        self.tls = tls  # an ssl.SSLContext on a TLS inter-broker listener
        self.unclean = unclean
        self.live: dict[int, LiveBroker] = dict(view.brokers)
        self.assignments: dict[str, TopicAssignment] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        #: what UpdateMetadata last said of each partition: a state dropped to be read again
        #: (a refused write) is still told as it was, never left out (a broker would take the
        #: partition for deleted, and a transaction's marker owed to it for not owed)
        self._told: dict[tuple[str, int], PartitionState] = {}
        self._channels: dict[int, BrokerChannel] = {}
        self._senders: dict[int, asyncio.Task] = {}
        self._outbox: dict[int, asyncio.Queue] = {}
        self._dirty = asyncio.Event()
        self._dirty.set()
        self._new_brokers: set[int] = set(self.live)  # owed a full LeaderAndIsr
        self._task: asyncio.Task | None = None
        self._rebalancer: asyncio.Task | None = None
        self.moved = False  # another controller took over: this one stopped
        #: /admin/reassign_partitions: the moves it asks for, and those started from it.
        self._zk_request: dict[tuple[str, int], tuple[int, ...]] = {}
        self._zk_started: dict[tuple[str, int], tuple[int, ...]] = {}

    # ------------------------------------------------------------ lifecycle

    def start(self, rebalance_interval_s: float | None = None, max_imbalance: float = 0.1) -> None:
        self._task = asyncio.create_task(self._run(), name=f"controller-{self.epoch}")
        if rebalance_interval_s:
            self._rebalancer = asyncio.create_task(
                self._rebalance_every(rebalance_interval_s, max_imbalance), name="leader-rebalance")

    async def _rebalance_every(self, interval_s: float, max_imbalance: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                moved = await self.rebalance_leaders(max_imbalance)
            except ControllerMovedError:
                return
            except Exception:  # noqa: BLE001 - tried again at the next interval
                log.exception("controller: leader rebalance failed")
                continue
            if moved:
                log.info("auto leader rebalance: %d partition(s) back on their preferred replica", moved)

    async def stop(self) -> None:
        tasks = [t for t in (self._task, self._rebalancer, *self._senders.values()) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ch in self._channels.values():
            ch.close()

    def on_brokers(self, view: ClusterView) -> None:
        before = self.live
        self.live = dict(view.brokers)
        for bid, b in self.live.items():
            if bid not in before or before[bid].epoch != b.epoch:
                self._new_brokers.add(bid)
        for bid in set(before) - set(self.live):
            self._drop_broker(bid)
        self._dirty.set()

    def on_topics_changed(self) -> None:
        self._dirty.set()

    # ------------------------------------------------------------ reconciling

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self._reconcile()
            except ControllerMovedError as exc:
                log.info("Controller %d (epoch %d) stops: %s", self.broker_id, self.epoch, exc)
                self.moved = True
                return
            except TRANSIENT_ERRORS as exc:
                log.warning("controller: ZooKeeper failed (%s: %s); trying again", type(exc).__name__, exc)
                await asyncio.sleep(RETRY_S)
                self._dirty.set()
            except Exception:  # noqa: BLE001 - a bug must not end the controller
                log.exception("controller: reconciling failed; trying again")
                await asyncio.sleep(RETRY_S)
                self._dirty.set()

    async def _reconcile(self) -> None:
        deleting = await asyncio.to_thread(self._read_topics)
        if deleting:
            await self._delete_topics(deleting)
        live = frozenset(self.live)
        # A leader registered after its partition's state was written (it restarted or lost
        # its session since it was elected) may have lost the tail of its log that followers
        # had fetched: a new leader epoch makes them truncate it before fetching what comes
        # next. Registrations and states are compared by zxid (czxid, mzxid).
        reelect = {tp for tp, st in self.states.items()
                   if st.leader in self.live and self.live[st.leader].epoch > st.zxid >= 0}
        changes = elections.on_brokers(
            {t: a.partitions for t, a in self.assignments.items()}, self.states, live, self.epoch,
            unclean={t: self.unclean for t in self.assignments} if self.unclean else None,
            reelect=reelect)
        changed: set[tuple[str, int]] = set()
        if changes:
            done, _ = await self._commit(changes)
            for change in done:
                tp = (change.topic, change.partition)
                changed.add(tp)
                if change.leader_changed:
                    state = self.states[tp]
                    log.info("partition %s-%d: leader %d, leader epoch %d, ISR %s", change.topic,
                             change.partition, state.leader, state.leader_epoch, list(state.isr))
        self._tell_brokers(changed)
        await self._start_requested_reassignments()
        await self._complete_reassignments()
        await self._finish_requested_reassignments()

    def _read_topics(self) -> list[str]:
        """In a worker thread: new topics' assignments and the states of partitions not known;
        returns the topics marked for deletion."""
        deleting = self.zk.watch_deletions()
        try:
            self._zk_request = self.zk.watch_reassignment_request()
        except zk_data.ZkDataError as exc:
            log.warning("controller: ignoring %s", exc)
            self.zk.remove_from_reassignment_request(set(), self.epoch_zk_version)
            self._zk_request = {}
        names = set(self.zk.watch_topics())
        for gone in set(self.assignments) - names:
            del self.assignments[gone]
            for tp in [tp for tp in self.states if tp[0] == gone]:
                del self.states[tp]
        changed, self.zk.changed_topics = self.zk.changed_topics, set()
        for name in (names - set(self.assignments)) | (changed & names):
            assignment = self.zk.read_topic(name, watch=True)
            if assignment is not None:
                self.assignments[name] = assignment
        for name, assignment in self.assignments.items():
            for p in assignment.partitions:
                if (name, p) not in self.states:
                    state = self.zk.read_partition_state(name, p)
                    if state is not None:
                        self.states[(name, p)] = state
        return deleting

    async def _commit(self, changes: list[elections.Change]) -> tuple[list[elections.Change], set]:
        """Write `changes` and take the states as written; a state changed under us (a
        leader's ISR change) is forgotten and read again at the next reconcile. Returns the
        changes written and the partitions whose write was refused."""
        written = await asyncio.to_thread(self._write, changes)
        done, refused = [], set()
        for change, state in zip(changes, written):
            tp = (change.topic, change.partition)
            if state is None:
                self.states.pop(tp, None)
                self._dirty.set()
                refused.add(tp)
            else:
                self.states[tp] = state
                done.append(change)
        return done, refused

    def _write(self, changes: list[elections.Change]) -> list[PartitionState | None]:
        writes = [(c.topic, c.partition, replace(c.after, zk_version=-1),
                   None if c.before is None else c.before.zk_version) for c in changes]
        return self.zk.write_partition_states(writes, self.epoch_zk_version)

    async def _delete_topics(self, names: list[str]) -> None:
        """Each replica is told to stop and delete its partitions (StopReplica), then the
        topic's znodes go and every broker learns it is gone (UpdateMetadata). A replica that
        is down deletes its logs of the topic when it comes back (at its start it drops logs of
        topics ZooKeeper no longer has)."""
        for name in names:
            assignment = self.assignments.get(name)
            if assignment is not None:
                by_broker: dict[int, list[int]] = {}
                for p, replicas in assignment.partitions.items():
                    for r in replicas:
                        if r in self.live:
                            by_broker.setdefault(r, []).append(p)
                for b, parts in by_broker.items():
                    self._send(b, ib.StopReplicaRequest(
                        controller_id=self.broker_id, controller_epoch=self.epoch,
                        broker_epoch=self.live[b].epoch, topic_states=(ib.StopReplicaTopicState(
                            topic_name=name, partition_states=tuple(ib.StopReplicaPartitionState(
                                partition_index=p, leader_epoch=-2, delete_partition=True)
                                for p in sorted(parts))),)))
            await asyncio.to_thread(self.zk.remove_topic, name, self.epoch_zk_version)
            self.assignments.pop(name, None)
            for tp in [tp for tp in self.states if tp[0] == name]:
                del self.states[tp]
            log.info("Deletion of topic %s successfully completed", name)
        update = self._update_metadata()
        for b, live in self.live.items():
            self._send(b, replace(update, broker_epoch=live.epoch))

    # ------------------------------------------------------------ ISR changes asked by leaders

    async def alter_partition(self, broker_id: int, topic: str, partition: int, leader_epoch: int,
                              new_isr: tuple[int, ...], partition_epoch: int
                              ) -> tuple[ErrorCode, PartitionState | None]:
        """A leader's ISR change (AlterPartition): applied if it comes from the current leader
        at the current leader epoch and state version, refused otherwise with Kafka's codes."""
        state = self.states.get((topic, partition))
        if state is None:
            return ErrorCode.unknown_topic_or_partition, None
        if state.leader != broker_id:
            return ErrorCode.not_leader_or_follower, state
        if leader_epoch != state.leader_epoch:
            return ErrorCode.fenced_leader_epoch, state
        if tuple(new_isr) == state.isr:
            return ErrorCode.none, state  # asked again after a lost answer: it is written
        if partition_epoch != state.zk_version:
            return ErrorCode.invalid_update_version, state
        replicas = self.assignments[topic].partitions.get(partition, ())
        if any(r not in replicas for r in new_isr) or broker_id not in new_isr:
            return ErrorCode.invalid_request, state
        if any(r not in self.live for r in new_isr if r not in state.isr):
            # Refused, and fenced: the same state written again under a new partition epoch,
            # so that a copy of this request still on its way (sent before the leader's
            # retry) cannot be applied after the leader has dropped the change on this answer.
            after = replace(state, controller_epoch=self.epoch, zk_version=-1)
            code = ErrorCode.ineligible_replica
        else:
            after = replace(state, isr=tuple(new_isr), controller_epoch=self.epoch, zk_version=-1)
            code = ErrorCode.none
        try:
            written = await asyncio.to_thread(
                self.zk.write_partition_states, [(topic, partition, after, state.zk_version)],
                self.epoch_zk_version)
        except (ControllerMovedError, *TRANSIENT_ERRORS) as exc:
            # ZooKeeper away, or another controller now: whether the write was made is not
            # known. The leader asks again (of the controller it finds next); the state is
            # read again before this controller decides anything else on it.
            log.warning("partition %s-%d: ISR change asked by leader %d not written: %s: %s",
                        topic, partition, broker_id, type(exc).__name__, exc)
            self.states.pop((topic, partition), None)
            self._dirty.set()
            return ErrorCode.not_controller, None
        if written[0] is None:
            self.states.pop((topic, partition), None)
            self._dirty.set()
            return ErrorCode.invalid_update_version, None
        self.states[(topic, partition)] = written[0]
        if code != ErrorCode.none:
            self._tell_brokers({(topic, partition)})  # the leader too: the answer may be lost
            return code, written[0]
        log.info("partition %s-%d: ISR %s -> %s (asked by leader %d)", topic, partition,
                 list(state.isr), list(new_isr), broker_id)
        self._tell_brokers({(topic, partition)}, leader_too=False)
        if (topic, partition) in self.ongoing_reassignments():
            self._dirty.set()  # a reassignment may be ready to complete
        return ErrorCode.none, written[0]

    # ------------------------------------------------------------ leader elections on request

    async def elect_leaders(self, partitions: list[tuple[str, int]] | None,
                            election_type: int) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """ElectLeaders (preferred or unclean) for `partitions` (None: every partition): each
        partition's error and message, as Kafka answers."""
        live = frozenset(self.live)
        wanted = sorted(self.states) if partitions is None else partitions
        out: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        changes = []
        for tp in wanted:
            state = self.states.get(tp)
            assignment = self.assignments.get(tp[0])
            if state is None or assignment is None or tp[1] not in assignment.partitions:
                out[tp] = (ErrorCode.unknown_topic_or_partition, "no such partition")
                continue
            outcome, after = elections.elected_on_request(assignment.partitions[tp[1]], state, live,
                                                          election_type, self.epoch)
            if outcome == "not needed":
                out[tp] = (ErrorCode.election_not_needed, "Leader election not needed for topic partition.")
            elif outcome == "not available":
                out[tp] = ((ErrorCode.preferred_leader_not_available, "Failed to elect leader: the "
                            "preferred replica is not alive or not in the ISR.")
                           if election_type == elections.PREFERRED else
                           (ErrorCode.eligible_leaders_not_available, "No live replica to elect."))
            else:
                changes.append(elections.Change(tp[0], tp[1], state, after))
        if changes:
            done, refused = await self._commit(changes)
            changed = {(c.topic, c.partition) for c in done}
            for tp in refused:
                out[tp] = (ErrorCode.not_controller, "the partition changed meanwhile; try again")
            for tp in changed:
                out[tp] = (ErrorCode.none, None)
                log.info("partition %s-%d: leader %d by election (epoch %d)", *tp,
                         self.states[tp].leader, self.states[tp].leader_epoch)
            self._tell_brokers(changed)
        return out

    async def rebalance_leaders(self, max_ratio: float) -> int:
        """auto.leader.rebalance.enable's check: preferred replicas take their leadership back
        where a broker's imbalance is over `max_ratio`. Returns how many moved."""
        todo = elections.imbalanced({t: a.partitions for t, a in self.assignments.items()},
                                    self.states, frozenset(self.live), max_ratio)
        if not todo:
            return 0
        results = await self.elect_leaders(todo, elections.PREFERRED)
        return sum(1 for code, _ in results.values() if code == ErrorCode.none)

    # ------------------------------------------------------------ reassignment (KIP-455)

    def ongoing_reassignments(self) -> dict[tuple[str, int], reassignment.Moving]:
        out = {}
        for topic, a in self.assignments.items():
            for p, replicas in a.partitions.items():
                adding, removing = a.adding.get(p, ()), a.removing.get(p, ())
                if adding or removing:
                    out[(topic, p)] = reassignment.Moving(replicas, adding, removing)
        return out

    async def alter_reassignments(self, wanted: dict[tuple[str, int], tuple[int, ...] | None]
                                  ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments: start moving each partition to its target replicas,
        or cancel its move (target None)."""
        out: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        ongoing = self.ongoing_reassignments()
        by_topic: dict[str, dict[int, reassignment.Moving | None]] = {}
        for tp, target in wanted.items():
            topic, p = tp
            a = self.assignments.get(topic)
            if a is None or p not in a.partitions or tp not in self.states:
                out[tp] = (ErrorCode.unknown_topic_or_partition, "no such partition")
                continue
            moving = ongoing.get(tp)
            if target is None:
                if moving is None:
                    out[tp] = (ErrorCode.no_reassignment_in_progress,
                               f"no reassignment of {topic}-{p} to cancel")
                    continue
                by_topic.setdefault(topic, {})[p] = reassignment.begin(moving.replicas, moving.original)
                out[tp] = (ErrorCode.none, None)
                continue
            if not target or len(set(target)) != len(target):
                out[tp] = (ErrorCode.invalid_replica_assignment, f"replicas {list(target)} are not a set")
                continue
            dead = [r for r in target if r not in self.live]
            if dead:
                out[tp] = (ErrorCode.invalid_replica_assignment, f"brokers {dead} are not alive")
                continue
            current = moving.original if moving is not None else a.partitions[p]
            by_topic.setdefault(topic, {})[p] = reassignment.begin(current, tuple(target))
            out[tp] = (ErrorCode.none, None)
        for topic, moves in by_topic.items():
            a = self.assignments[topic]
            partitions, adding, removing = dict(a.partitions), dict(a.adding), dict(a.removing)
            for p, m in moves.items():
                partitions[p], adding[p], removing[p] = m.replicas, m.adding, m.removing
                log.info("reassigning %s-%d: replicas %s (adding %s, removing %s)", topic, p,
                         list(m.replicas), list(m.adding), list(m.removing))
            grown = zk_data.TopicAssignment(a.topic_id, partitions, adding, removing)
            await asyncio.to_thread(self.zk.write_assignment, topic, grown, self.epoch_zk_version)
            self.assignments[topic] = grown
            # A new leader epoch with the new replicas (as Kafka's controller does): the leader
            # tracks the replicas being added, which learn of the partition and follow.
            changes = [elections.Change(topic, p, self.states[(topic, p)], replace(
                self.states[(topic, p)], leader_epoch=self.states[(topic, p)].leader_epoch + 1,
                controller_epoch=self.epoch)) for p in moves if (topic, p) in self.states]
            await self._commit(changes)
            self._tell_brokers({(topic, p) for p in moves if (topic, p) in self.states})
        self._dirty.set()
        return out

    async def _start_requested_reassignments(self) -> None:
        """Start the moves /admin/reassign_partitions asks for that are not started yet, as
        AlterPartitionReassignments would; those refused (no such partition, a dead or
        repeated broker) are taken out of the node with a warning, as Kafka's controller
        does."""
        new = {tp: r for tp, r in self._zk_request.items() if self._zk_started.get(tp) != r}
        if not new:
            return
        results = await self.alter_reassignments(new)
        refused = set()
        for tp, (code, message) in results.items():
            if code == ErrorCode.none:
                self._zk_started[tp] = new[tp]
            else:
                refused.add(tp)
                log.warning("controller: /admin/reassign_partitions asks to move %s-%d to %s: "
                            "refused (%s: %s)", *tp, list(new[tp]), code.name.upper(), message)
        if refused:
            await asyncio.to_thread(self.zk.remove_from_reassignment_request, refused,
                                    self.epoch_zk_version)

    async def _finish_requested_reassignments(self) -> None:
        """Moves asked in /admin/reassign_partitions that are done leave the node (which goes
        once empty)."""
        ongoing = self.ongoing_reassignments()
        done = {tp for tp, target in self._zk_started.items() if tp not in ongoing
                and ((a := self.assignments.get(tp[0])) is None  # the topic was deleted
                     or a.partitions.get(tp[1]) == target)}
        if done:
            await asyncio.to_thread(self.zk.remove_from_reassignment_request, done,
                                    self.epoch_zk_version)
            for tp in done:
                del self._zk_started[tp]

    async def _complete_reassignments(self) -> None:
        live = frozenset(self.live)
        for tp, moving in self.ongoing_reassignments().items():
            state = self.states.get(tp)
            if state is None or not reassignment.ready(state, moving):
                continue
            if not moving.removing and not moving.adding:
                continue
            after = reassignment.complete(state, moving, live, self.epoch)
            if after is None:
                continue
            done, _ = await self._commit([elections.Change(*tp, state, after)])
            if not done:
                continue
            new_state = self.states[tp]
            topic, p = tp
            a = self.assignments[topic]
            partitions, adding, removing = dict(a.partitions), dict(a.adding), dict(a.removing)
            partitions[p] = moving.target
            adding.pop(p, None)
            removing.pop(p, None)
            done = zk_data.TopicAssignment(a.topic_id, partitions, adding, removing)
            await asyncio.to_thread(self.zk.write_assignment, topic, done, self.epoch_zk_version)
            self.assignments[topic] = done
            self._tell_brokers({tp})
            for r in moving.removing:
                if r in self.live:
                    self._send(r, ib.StopReplicaRequest(
                        controller_id=self.broker_id, controller_epoch=self.epoch,
                        broker_epoch=self.live[r].epoch, topic_states=(ib.StopReplicaTopicState(
                            topic_name=topic, partition_states=(ib.StopReplicaPartitionState(
                                partition_index=p, leader_epoch=new_state.leader_epoch,
                                delete_partition=True),)),)))
            log.info("reassignment of %s-%d done: replicas %s, leader %d", topic, p,
                     list(moving.target), new_state.leader)

    # ------------------------------------------------------------ controlled shutdown

    async def controlled_shutdown(self, broker_id: int) -> list[tuple[str, int]]:
        """Move every leadership `broker_id` holds to another in-sync replica; the partitions
        whose leadership could not move (no other live ISR member) are returned."""
        live = frozenset(self.live)
        remaining: list[tuple[str, int]] = []
        changes = []
        for (topic, p), state in self.states.items():
            if state.leader != broker_id:
                continue
            after = elections.moved_away(self.assignments[topic].partitions.get(p, ()), state,
                                         broker_id, live, self.epoch)
            if after is None:
                remaining.append((topic, p))
            else:
                changes.append(elections.Change(topic, p, state, after))
        if changes:
            done, refused = await self._commit(changes)
            remaining += sorted(refused)
            self._tell_brokers({(c.topic, c.partition) for c in done})
            self._dirty.set()
        return remaining

    # ------------------------------------------------------------ telling the brokers

    def _tell_brokers(self, changed: set[tuple[str, int]], leader_too: bool = True) -> None:
        new, self._new_brokers = self._new_brokers & set(self.live), set()
        by_broker: dict[int, set[tuple[str, int]]] = {b: set() for b in self.live}
        for tp in changed:
            assignment = self.assignments.get(tp[0])
            replicas = assignment.partitions.get(tp[1], ()) if assignment else ()
            for r in replicas:
                if r in by_broker and (leader_too or r != self.states[tp].leader):
                    by_broker[r].add(tp)
        for b in new:
            by_broker[b] |= {tp for tp in self.states
                             if b in self.assignments[tp[0]].partitions.get(tp[1], ())}
        for b, tps in by_broker.items():
            if tps:
                self._send(b, self._leader_and_isr(b, tps, full=b in new))
        if changed or new:
            update = self._update_metadata()
            for b, live in self.live.items():  # each addressed to the broker's registration
                self._send(b, replace(update, broker_epoch=live.epoch))

    def _leader_and_isr(self, broker: int, tps: set[tuple[str, int]], full: bool):
        topics: dict[str, list] = {}
        for topic, p in sorted(tps):
            state = self.states[(topic, p)]
            replicas = self.assignments[topic].partitions.get(p, ())
            topics.setdefault(topic, []).append(ib.LeaderAndIsrPartitionState(
                partition_index=p, controller_epoch=state.controller_epoch, leader=state.leader,
                leader_epoch=state.leader_epoch, isr=state.isr, partition_epoch=state.zk_version,
                replicas=replicas, adding_replicas=self.assignments[topic].adding.get(p, ()),
                removing_replicas=self.assignments[topic].removing.get(p, ()), is_new=False))
        leaders = {self.states[tp].leader for tp in tps} & set(self.live)
        return ib.LeaderAndIsrRequest(
            controller_id=self.broker_id, controller_epoch=self.epoch,
            broker_epoch=self.live[broker].epoch, type_=ib.FULL if full else ib.INCREMENTAL,
            topic_states=tuple(ib.LeaderAndIsrTopicState(
                topic_name=t, topic_id=topic_uuid(self.assignments[t].topic_id),
                partition_states=tuple(ps)) for t, ps in topics.items()),
            live_leaders=tuple(self._live_leader(b) for b in sorted(leaders)))

    def _live_leader(self, b: int):
        ep = self._endpoint(b)
        return ib.LeaderAndIsrLiveLeader(broker_id=b, host_name=ep.host if ep else "",
                                         port=ep.port if ep else -1)

    def _endpoint(self, b: int, listener: str | None = None):
        reg = self.live[b].registration
        return reg.endpoint(listener or self.listener) or (reg.endpoints[0] if reg.endpoints else None)

    def _update_metadata(self):
        live = frozenset(self.live)
        topics = []
        told: dict[tuple[str, int], PartitionState] = {}
        for topic, assignment in sorted(self.assignments.items()):
            parts = []
            for p, replicas in sorted(assignment.partitions.items()):
                state = self.states.get((topic, p)) or self._told.get((topic, p))
                if state is None:
                    continue  # a new partition, not elected yet
                told[(topic, p)] = state
                parts.append(ib.UpdateMetadataPartitionState(
                    partition_index=p, controller_epoch=state.controller_epoch,
                    leader=state.leader if state.leader in live else elections.NO_LEADER,
                    leader_epoch=state.leader_epoch, isr=state.isr, zk_version=state.zk_version,
                    replicas=replicas, offline_replicas=tuple(r for r in replicas if r not in live)))
            topics.append(ib.UpdateMetadataTopicState(
                topic_name=topic, topic_id=topic_uuid(assignment.topic_id),
                partition_states=tuple(parts)))
        brokers = []
        for b in sorted(self.live):
            reg = self.live[b].registration
            brokers.append(ib.UpdateMetadataBroker(
                id_=b, rack=reg.rack, endpoints=tuple(ib.UpdateMetadataEndpoint(
                    port=e.port, host=e.host, listener=e.listener, security_protocol=0)
                    for e in reg.endpoints)))
        self._told = told
        return ib.UpdateMetadataRequest(controller_id=self.broker_id, controller_epoch=self.epoch,
                                        broker_epoch=-1, topic_states=tuple(topics),
                                        live_brokers=tuple(brokers))

    def _send(self, broker: int, request) -> None:
        queue = self._outbox.get(broker)
        if queue is None:
            queue = self._outbox[broker] = asyncio.Queue()
            self._senders[broker] = asyncio.create_task(self._sender(broker, queue),
                                                        name=f"controller-to-{broker}")
        queue.put_nowait(request)

    def _drop_broker(self, broker: int) -> None:
        task = self._senders.pop(broker, None)
        if task is not None:
            task.cancel()
        self._outbox.pop(broker, None)
        ch = self._channels.pop(broker, None)
        if ch is not None:
            ch.close()

    async def _sender(self, broker: int, queue: asyncio.Queue) -> None:
        while True:
            request = await queue.get()
            while broker in self.live:
                ep = self._endpoint(broker, self.control_listener)
                ch = self._channels.get(broker)
                if ch is None:
                    ch = self._channels[broker] = BrokerChannel(
                        broker, ep.host, ep.port, client_id=f"broker-{self.broker_id}-controller",
                        sasl=self.sasl, tls=self.tls)
                else:
                    ch.retarget(ep.host, ep.port)
                try:
                    response = await ch.request(request)
                except ChannelError as exc:
                    log.warning("controller: %s; trying again", exc)
                    await asyncio.sleep(RETRY_S)
                    continue
                if response.error_code == ErrorCode.stale_controller_epoch:
                    # The broker's view of /controller may be a moment behind this epoch, or
                    # this controller is stale and about to learn it: asked again until one
                    # of the two is over (a request dropped here left a broker without the
                    # controller's metadata for good, asking a controller that was not one).
                    log.info("controller: broker %d refused epoch %d as stale; asking again",
                             broker, self.epoch)
                    await asyncio.sleep(RETRY_S)
                    continue
                break


def start_controller(client: ZkClient, broker_id: int, election, view: ClusterView, config, *,
                     listener: str, sasl) -> Controller:
    """The controller's work, made and started for a broker just elected (`election`, a
    brook.cluster.zk_client.Election): what `ZkCluster` is given to call."""
    controller = Controller(client, broker_id, election.epoch, election.epoch_zk_version, view,
                            listener=listener, unclean=config.unclean_leader_election_enable,
                            sasl=sasl, tls=config.inter_broker_tls,
                            control_listener=config.control_plane_listener_name)
    controller.start(
        config.leader_imbalance_check_interval_seconds if config.auto_leader_rebalance_enable
        else None, config.leader_imbalance_per_broker_percentage / 100)
    return controller
