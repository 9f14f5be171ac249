"""A deterministic, seeded simulation of replication in a ZooKeeper cluster (issue 17).

The decisions are brook's own pure code: the controller's elections (`elections.on_brokers`,
`moved_away`), the leader's view of its followers (`ReplicaTracker`), the leader epoch cache
(`LeaderEpochCache`, in memory) and the follower's truncation rule (`truncation_offset`). Around
them, this file models the I/O wiring as `controller.py`, `partition.py`, `replica_manager.py`,
`replica_fetcher.py` and `handlers/produce.py` do it, on a fake clock (an event queue) and a
simulated network that delays, loses and reorders messages, all driven by one
`random.Random(seed)`:

- one ZooKeeper: sessions, ephemeral broker registrations (the czxid is the broker epoch),
  `/controller` and `/controller_epoch` (its version), partition states written conditionally
  on their zkVersion and on the controller epoch's version, and watches delivered late;
- 3 to 5 brokers, each with an in-memory log per partition (a list of (leader epoch, value);
  the index is the offset) and a real `LeaderEpochCache(None)`;
- a controller elected among the brokers with a live session, reconciling as `Controller` does
  and sending LeaderAndIsr / UpdateMetadata one at a time per broker, retried while it is live;
- leaders answering follower fetches and OffsetForLeaderEpoch, keeping the ISR through
  AlterPartition; followers truncating first, then fetching from their log end;
- clients producing with acks=all (answered once the high watermark passes the record,
  NOT_ENOUGH_REPLICAS below min.insync.replicas, REQUEST_TIMED_OUT) and acks=1;
- faults at random: crashes (losing a random tail of the log, but never records below the
  highest high watermark any leader reached nor below an offset the replica fetched from, which
  a leader counts on: as if what was acknowledged were on disk), restarts, pauses (a paused broker keeps its state, its session expires, and when
  resumed it acts on what it knew until it hears otherwise), ZooKeeper session expiry,
  `/controller` deleted (a new controller with a bumped epoch while the old one still runs),
  controlled shutdown, links between brokers cut, messages lost and delayed;
- Fetch answers cut by a byte limit drawn per seed (records weigh 1 to 8 units): an answer
  may end in a record cut short, as a byte limit ends a real one inside a batch.

Eight rules of brook's wiring are modeled with a switch each, and
`test_each_rule_of_the_wiring_is_needed` keeps a seed that fails without the rule (the simpler
rule brook's first wiring had): `reelect_restarted` (the
controller gives a partition a new leader epoch when its leader registered after the state was
written: `elections.on_brokers(reelect=...)`), and three as Kafka does them:
`maximal_isr` (a leader's high watermark counts the replicas an ISR change in flight adds, the
change is asked again after a lost answer, and the controller answers a repeat of an ISR it
already wrote with that state), `newer_state_only` (a LeaderAndIsr of the leader's own epoch
changes its ISR only with a newer partition epoch) and `hw_checkpoint` (a restarted broker's
high watermark is the one it had, not its log end), `after_append_check` (an acks=all produce
the high watermark reaches with fewer than min.insync.replicas in the ISR is answered
NOT_ENOUGH_REPLICAS_AFTER_APPEND), `partial_tail` (a follower appends the whole records
of a cut answer and fetches the cut one again) and `truncation_rounds` (a follower the leader
answers with an epoch it never had cuts to the end of its own older epoch and asks again,
KIP-279); and `fence_refusals`, brook's own against
a network that may deliver a request after its retry (the controller writes
a partition's state again under a new partition epoch when it refuses an ISR change as
INELIGIBLE_REPLICA, so that a late copy of the request cannot be applied after the leader
dropped the change). Seeds kept before answers were cut replay with `cut_responses` off.

After every step it checks: (1) every record acknowledged with acks=all is in the current
leader's log at the offset it was acknowledged at, so none is lost and they are in the order
of their offsets (a deposed leader may still acknowledge, late, a record its successor has:
Kafka's delayed produce does the same); (2) ISR members' logs
agree with the leader's below its high watermark; (3) one leader per partition and leader
epoch, across what every broker believes and what ZooKeeper holds; (4) leader epochs in
ZooKeeper only grow; (5) a leader's high watermark never goes back; (6) a record acknowledged
with acks=all is held, when acknowledged, by at least min.insync.replicas brokers (a crashed
one keeps on disk what it reported having). At the end it heals every
fault, lets the cluster settle, and checks that each partition has a leader, a full ISR and
the same log on every replica.

A failing seed prints itself and the command that replays it alone:
`BROOK_SIM_SEED=<seed> python -m pytest tests/cluster/test_replication_simulation.py -k replay`.
`BROOK_SIM_SEEDS=<n>` runs n seeds (500 by default, 2,000 where `CI` is set, a quarter of 500
in `make test-fast`, which sets BROOK_EXAMPLE_SCALE=0.25; `BROOK_SIM_FIRST` moves the first one); `BROOK_SIM_WIRING_TODAY=maximal_isr,...` replays with a rule switched off.
"""

from __future__ import annotations

import heapq
import os
import random
from dataclasses import dataclass, field, replace

import pytest

from brook.controller import elections
from brook.controller.assignment import assign_replicas
from brook.replication.replica_tracker import ReplicaTracker
from brook.replication.truncation import truncation_offset
from brook.cluster.zk_data import PartitionState
from brook.storage.leader_epoch import UNDEFINED_EPOCH, LeaderEpochCache
from tests.support.examples import SCALE

TOPIC = "t"

# Kafka's error names (strings here: the simulation speaks no wire protocol).
NONE = "NONE"
NOT_LEADER = "NOT_LEADER_OR_FOLLOWER"
FENCED = "FENCED_LEADER_EPOCH"
UNKNOWN_EPOCH = "UNKNOWN_LEADER_EPOCH"
OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
NOT_ENOUGH = "NOT_ENOUGH_REPLICAS"
NOT_ENOUGH_AFTER = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
TIMED_OUT = "REQUEST_TIMED_OUT"
STALE_CONTROLLER = "STALE_CONTROLLER_EPOCH"
INVALID_VERSION = "INVALID_UPDATE_VERSION"
INELIGIBLE = "INELIGIBLE_REPLICA"
INVALID_REQUEST = "INVALID_REQUEST"
NOT_CONTROLLER = "NOT_CONTROLLER"
UNKNOWN_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"

# Times in ms: Kafka's defaults scaled down by about 10, in the same proportions.
SESSION_TIMEOUT = 1800        # zookeeper.session.timeout.ms
LAG_MAX = 3000                # replica.lag.time.max.ms
ISR_TICK = min(LAG_MAX // 2, 1000)  # ReplicaManager._maintain_isr
REQUEST_TIMEOUT = 3000        # the producer's request timeout (acks=all)
CHANNEL_TIMEOUT = 1000        # a broker-to-broker request unanswered: the channel gives up
CONTROLLER_RETRY = 500        # controller.RETRY_S
FETCH_BACKOFF = 100           # replica.fetch.backoff.ms
FETCH_WAIT = 200              # an empty fetch waits at the leader (replica.fetch.wait.max.ms)
FETCH_MAX_RECORDS = 20
RECORD_UNITS = 8  # a record's size is 1 to 8 units (a Fetch's byte limit counts units)

STEP_MS = 50
STEPS = 300
SETTLE_MS = 20_000


class SimulationError(AssertionError):
    pass


class ControllerMoved(Exception):
    pass


class SessionExpired(Exception):
    pass


# ---------------------------------------------------------------------------------- ZooKeeper


class ZooKeeper:
    """The znodes replication uses; every operation is instant and atomic, watches are late."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.sessions: dict[int, int] = {}  # live session id -> broker id
        self._next_session = 1
        self.registrations: dict[int, tuple[int, int]] = {}  # broker -> (session, czxid)
        self._zxid = 100
        self.controller: tuple[int, int] | None = None  # (broker, session)
        self.controller_epoch = 0
        self.controller_epoch_version = 0
        self.assignment: dict[int, tuple[int, ...]] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.state_zxid: dict[tuple[str, int], int] = {}
        self.leader_of_epoch: dict[tuple[tuple[str, int], int], int] = {}

    def open_session(self, broker: int) -> int:
        sid = self._next_session
        self._next_session += 1
        self.sessions[sid] = broker
        return sid

    def alive(self, sid: int | None) -> bool:
        return sid in self.sessions

    def register(self, broker: int, sid: int) -> bool:
        owner = self.registrations.get(broker)
        if owner is not None and owner[0] != sid and owner[0] in self.sessions:
            return False  # another live session holds /brokers/ids/<id>
        self._zxid += 1
        self.registrations[broker] = (sid, self._zxid)
        self.sim.trace(f"zk: broker {broker} registered (session {sid}, epoch {self._zxid})")
        self.changed()
        return True

    def expire(self, sid: int, why: str) -> None:
        broker = self.sessions.pop(sid, None)
        if broker is None:
            return
        self.sim.trace(f"zk: session {sid} of broker {broker} ends ({why})")
        if self.registrations.get(broker, (None,))[0] == sid:
            del self.registrations[broker]
        if self.controller is not None and self.controller[1] == sid:
            self.controller = None
        self.changed()
        self.sim.tell_session_lost(broker, sid)

    def delete_controller(self) -> None:
        if self.controller is not None:
            self.sim.trace(f"zk: /controller of broker {self.controller[0]} deleted")
            self.controller = None
            self.changed()

    def elect(self, broker: int, sid: int) -> tuple[int, int] | None:
        """Create /controller and bump /controller_epoch in one transaction."""
        if self.controller is not None or sid not in self.sessions:
            return None
        self.controller = (broker, sid)
        self.controller_epoch += 1
        self.controller_epoch_version += 1
        self.sim.trace(f"zk: broker {broker} is the controller, epoch {self.controller_epoch}")
        self.changed()
        return self.controller_epoch, self.controller_epoch_version

    def write_states(self, sid: int, writes, epoch_version: int) -> list[PartitionState | None]:
        """ZkClient.write_partition_states: each write conditional on the state's zkVersion
        (None: created) and on /controller_epoch's version."""
        if sid not in self.sessions:
            raise SessionExpired()
        if epoch_version != self.controller_epoch_version:
            raise ControllerMoved()
        out: list[PartitionState | None] = []
        for tp, state, expected in writes:
            current = self.states.get(tp)
            if (expected is None) != (current is None) or \
                    (current is not None and current.zk_version != expected):
                out.append(None)
                continue
            if current is not None and state.leader_epoch < current.leader_epoch:
                raise SimulationError(f"(4) leader epoch of {tp} goes back in ZooKeeper: "
                                      f"{current.leader_epoch} -> {state.leader_epoch}")
            if current is not None and state.leader_epoch == current.leader_epoch \
                    and state.leader != current.leader:
                raise SimulationError(f"(3) ZooKeeper gives {tp} epoch {state.leader_epoch} to "
                                      f"{state.leader} after {current.leader}")
            written = replace(state, zk_version=0 if current is None else current.zk_version + 1)
            self.states[tp] = written
            self._zxid += 1
            self.state_zxid[tp] = self._zxid  # the znode's mzxid
            if written.leader >= 0:
                known = self.leader_of_epoch.setdefault((tp, written.leader_epoch), written.leader)
                if known != written.leader:
                    raise SimulationError(f"(3) ZooKeeper: {tp} epoch {written.leader_epoch} led "
                                          f"by {known} and {written.leader}")
            self.sim.trace(f"zk: {tp[1]} <- leader {written.leader} epoch {written.leader_epoch} "
                           f"isr {list(written.isr)} v{written.zk_version}")
            out.append(written)
        return out

    def changed(self) -> None:
        """Watches on /brokers/ids and /controller fire, late, on every broker with a session."""
        for b in self.sim.brokers:
            if b.session in self.sessions:
                self.sim.later(b, self.sim.rng.randint(1, 30), b.on_zk_change)


# ---------------------------------------------------------------------------------- partitions


@dataclass
class FetchState:
    leader_epoch: int
    truncating: bool = True


class Replica:
    """A broker's partition: `Partition` with an in-memory log of (leader epoch, value)."""

    def __init__(self, broker: Broker, tp) -> None:
        self.broker = broker
        self.tp = tp
        self.log: list[tuple[int, int]] = []
        self.cache = LeaderEpochCache(None)
        self.leader_epoch = -1
        self.leader_id = -1
        self.high_watermark = 0
        self.isr: tuple[int, ...] = ()
        self.replicas: tuple[int, ...] = ()
        self.zk_version = -1
        self.tracker: ReplicaTracker | None = None
        self.epoch_start_offset = 0
        self.waiters: list[tuple[int, int, int]] = []  # (offset + 1, value, deadline)
        #: the highest offset this replica told a leader it has (a fetch offset): a crash never
        #: loses what a leader may count on
        self.reported = 0
        self.truncations = 0  # how many times the log was cut (checks redone after each)
        self.checkpointed_hw = 0  # Kafka's replication-offset-checkpoint, as of the last stop

    @property
    def leo(self) -> int:
        return len(self.log)

    def become_leader(self, epoch: int, isr, replicas, zk_version: int, now: int) -> None:
        b = self.broker
        self.leader_id = b.id
        self.leader_epoch = epoch
        self.isr, self.replicas, self.zk_version = tuple(isr), tuple(replicas), zk_version
        self.cache.assign(epoch, self.leo)
        self.epoch_start_offset = self.leo
        self.tracker = ReplicaTracker(b.id, self.replicas, self.isr, now)
        b.sim.became_leader(b, self)
        self.maybe_advance_high_watermark()

    def update_leadership(self, isr, replicas, zk_version: int) -> None:
        self.isr, self.replicas, self.zk_version = tuple(isr), tuple(replicas), zk_version
        if self.tracker is not None:
            self.tracker.set_isr(self.isr)
            self.maybe_advance_high_watermark()

    def become_follower(self, leader: int, epoch: int, isr, replicas, zk_version: int) -> None:
        self.leader_id = leader
        self.leader_epoch = epoch
        self.isr, self.replicas, self.zk_version = tuple(isr), tuple(replicas), zk_version
        self.tracker = None
        waiters, self.waiters = self.waiters, []
        for _, value, _ in waiters:
            self.broker.sim.answered(value, NOT_LEADER)

    def maybe_advance_high_watermark(self) -> None:
        hw = self.tracker.high_watermark(self.leo)
        if hw > self.high_watermark:
            self.high_watermark = hw
            self.broker.sim.committed(self)
            if self.waiters:
                waiting = []
                sim = self.broker.sim
                enough = (not sim.after_append_check
                          or len(self.tracker.maximal_isr) >= sim.min_isr)
                for end, value, deadline in self.waiters:
                    if end > hw:
                        waiting.append((end, value, deadline))
                    elif enough:
                        sim.acked(self, end - 1, value)
                    else:  # the ISR shrank below min.insync.replicas while it waited
                        sim.answered(value, NOT_ENOUGH_AFTER)
                self.waiters = waiting

    def append_as_follower(self, base: int, records) -> None:
        if base != self.leo:
            raise SimulationError(f"broker {self.broker.id} {self.tp}: records from {base} "
                                  f"appended at log end {self.leo}")
        for i, (epoch, value) in enumerate(records):
            if epoch > self.cache.latest_epoch:
                self.cache.assign(epoch, base + i)
            self.log.append((epoch, value))

    def truncate_to(self, offset: int) -> None:
        self.truncations += 1
        if offset < self.leo:
            del self.log[offset:]
            self.cache.truncate_from_end(offset)


# ---------------------------------------------------------------------------------- brokers


def record_units(value: int) -> int:
    return 1 + value * 7919 % RECORD_UNITS


def fetch_slice(log: list, offset: int, max_units: int | None) -> tuple[tuple, bool]:
    """What a leader's log read from `offset` within `max_units` gives: whole records, and
    maybe a last one cut short by the limit (True), as a byte limit cuts a batch. The first
    record is sent whole whatever its size (Kafka's leaders do the same from Fetch v3)."""
    out, used = [], 0
    for entry in log[offset:offset + FETCH_MAX_RECORDS]:
        size = record_units(entry[1])
        if out and max_units is not None and used + size > max_units:
            return tuple(out) + (entry,), True
        out.append(entry)
        used += size
    return tuple(out), False


class Fetcher:
    """ReplicaFetcher: one per leader, one request in flight, truncating before fetching."""

    def __init__(self, broker: Broker, leader: int) -> None:
        self.broker = broker
        self.leader = leader
        self.partitions: dict[tuple[str, int], FetchState] = {}
        self.inflight: int | None = None
        self.scheduled = False

    def add(self, tp, epoch: int) -> None:
        self.partitions[tp] = FetchState(epoch)
        self.wake(0)

    def remove(self, tp) -> None:
        self.partitions.pop(tp, None)

    def wake(self, delay: int) -> None:
        if not self.scheduled and self.inflight is None:
            self.scheduled = True
            self.broker.sim.later(self.broker, delay, self.run)

    def run(self) -> None:
        self.scheduled = False
        if self.inflight is not None or not self.partitions:
            return
        b = self.broker
        if any(st.truncating for st in self.partitions.values()):
            asks = []
            for tp, st in list(self.partitions.items()):
                if not st.truncating:
                    continue
                p = b.replicas[tp]
                epoch = p.cache.latest_epoch
                if epoch == UNDEFINED_EPOCH:
                    p.truncate_to(p.high_watermark)
                    st.truncating = False
                    continue
                asks.append((tp, st.leader_epoch, epoch))
            if asks:
                self.inflight = b.request(self.leader, ("OffsetForLeaderEpoch", tuple(asks)),
                                          self.on_epochs, self.on_error)
                return
        self.fetch()

    def fetch(self) -> None:
        b = self.broker
        asks = tuple((tp, st.leader_epoch, b.replicas[tp].leo)
                     for tp, st in self.partitions.items() if not st.truncating)
        for tp, _, offset in asks:
            p = b.replicas[tp]
            p.reported = max(p.reported, offset)
        if not asks:
            self.wake(FETCH_BACKOFF)
            return
        self.inflight = b.request(self.leader, ("Fetch", asks), self.on_fetched, self.on_error)

    def on_error(self) -> None:  # ChannelError: back off
        self.inflight = None
        self.wake(FETCH_BACKOFF)

    def on_epochs(self, answers) -> None:
        self.inflight = None
        again = False
        for tp, code, epoch, end in answers:
            st = self.partitions.get(tp)
            p = self.broker.replicas.get(tp)
            if st is None or p is None or not st.truncating or code != NONE:
                continue
            target, finished = truncation_offset(p.cache, p.leo, p.high_watermark, epoch, end)
            if not self.broker.sim.truncation_rounds:  # one round, at whichever end is first
                target, finished = min(target, end), True
            if target < p.leo:
                self.broker.sim.trace(f"broker {self.broker.id} {tp[1]}: truncates {p.leo} -> "
                                      f"{target} (leader {self.leader} epoch {epoch} end {end})")
                p.truncate_to(target)
                p.high_watermark = min(p.high_watermark, p.leo)
            elif not finished:
                p.cache.truncate_from_end(target)
            st.truncating = not finished
            again = again or not finished
        if again:
            self.run()  # the next round of questions
        else:
            self.fetch()

    def on_fetched(self, answers) -> None:
        if not self.broker.sim.partial_tail and any(a[5] for a in answers):
            # brook's first fetcher appended the cut batch too, failed, and dropped the answer
            self.on_error()
            return
        self.inflight = None
        got = False
        for tp, code, base, records, hw, cut in answers:
            st = self.partitions.get(tp)
            p = self.broker.replicas.get(tp)
            if st is None or p is None or st.truncating:
                continue
            if code == NONE:
                if cut:
                    records = records[:-1]  # the whole batches; the cut one is fetched again
                if records:
                    p.append_as_follower(base, records)
                    got = True
                hw = min(hw, p.leo)
                p.high_watermark = max(p.high_watermark, hw)
            elif code == OUT_OF_RANGE:
                st.truncating = True
        self.wake(0 if got else FETCH_WAIT)


class Controller:
    """`controller.Controller` while its broker is the controller."""

    def __init__(self, broker: Broker, epoch: int, epoch_version: int) -> None:
        self.broker = broker
        self.sim = broker.sim
        self.epoch = epoch
        self.epoch_version = epoch_version
        zk = self.sim.zk
        self.live: dict[int, int] = {b: czxid for b, (_, czxid) in zk.registrations.items()}
        self.assignments = {TOPIC: dict(zk.assignment)}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.new_brokers = set(self.live)
        self.outbox: dict[int, list] = {}
        self.sending: dict[int, int | None] = {}  # broker -> request in flight
        self.dirty_scheduled = False
        self.stopped = False
        self.moved = False
        self.dirty(0)

    def stop(self) -> None:
        self.stopped = True
        self.outbox.clear()

    def dirty(self, delay: int = 0) -> None:
        if not self.dirty_scheduled and not self.stopped:
            self.dirty_scheduled = True
            self.sim.later(self.broker, delay, self.reconcile)

    def on_brokers(self, registrations: dict[int, tuple[int, int]]) -> None:
        before = self.live
        self.live = {b: czxid for b, (_, czxid) in registrations.items()}
        for b, epoch in self.live.items():
            if before.get(b) != epoch:
                self.new_brokers.add(b)
        for b in set(before) - set(self.live):
            self.outbox.pop(b, None)
            self.sending.pop(b, None)
        self.dirty()

    def write(self, changes) -> list[PartitionState | None] | None:
        writes = [((c.topic, c.partition), replace(c.after, zk_version=-1),
                   None if c.before is None else c.before.zk_version) for c in changes]
        try:
            return self.sim.zk.write_states(self.broker.session, writes, self.epoch_version)
        except ControllerMoved:
            self.sim.trace(f"controller {self.broker.id} epoch {self.epoch}: moved, stops")
            self.moved = True
            self.stop()
        except SessionExpired:
            self.dirty(CONTROLLER_RETRY)
        return None

    def reconcile(self) -> None:
        self.dirty_scheduled = False
        if self.stopped:
            return
        for tp in [(TOPIC, p) for p in self.assignments[TOPIC]]:
            if tp not in self.states and tp in self.sim.zk.states:
                self.states[tp] = self.sim.zk.states[tp]
        live = frozenset(self.live)
        reelect = ()
        if self.sim.reelect_restarted:  # leaders registered after their state was written
            zk = self.sim.zk
            reelect = {tp for tp, st in self.states.items()
                       if self.live.get(st.leader, 0) > zk.state_zxid.get(tp, 0)}
        changes = elections.on_brokers(self.assignments, self.states, live, self.epoch,
                                       unclean=None, reelect=reelect)
        changed = set()
        if changes:
            written = self.write(changes)
            if written is None:
                return
            for change, state in zip(changes, written):
                tp = (change.topic, change.partition)
                if state is None:
                    self.states.pop(tp, None)
                    self.dirty()
                    continue
                self.states[tp] = state
                changed.add(tp)
        self.tell_brokers(changed)

    def alter_partition(self, broker: int, tp, leader_epoch: int, new_isr, partition_epoch: int):
        if self.stopped:
            return NOT_CONTROLLER, None
        state = self.states.get(tp)
        if state is None:
            return UNKNOWN_PARTITION, None
        if state.leader != broker:
            return NOT_LEADER, state
        if leader_epoch != state.leader_epoch:
            return FENCED, state
        if self.sim.maximal_isr and tuple(new_isr) == state.isr:
            return NONE, state  # asked again after a lost answer (Kafka's processAlterIsr)
        if partition_epoch != state.zk_version:
            return INVALID_VERSION, state
        replicas = self.assignments[TOPIC][tp[1]]
        if any(r not in replicas for r in new_isr) or broker not in new_isr:
            return INVALID_REQUEST, state
        if any(r not in self.live for r in new_isr if r not in state.isr):
            if not self.sim.fence_refusals:
                return INELIGIBLE, state
            # The same state written again, under a new partition epoch: a copy of this
            # request still on its way (sent before a retry) can no longer be applied.
            after, code = replace(state, controller_epoch=self.epoch, zk_version=-1), INELIGIBLE
        else:
            after = replace(state, isr=tuple(new_isr), controller_epoch=self.epoch, zk_version=-1)
            code = NONE
        written = self.write([elections.Change(tp[0], tp[1], state, after)])
        if written is None:
            return NOT_CONTROLLER, None
        if written[0] is None:
            self.states.pop(tp, None)
            self.dirty()
            return INVALID_VERSION, None
        self.states[tp] = written[0]
        # a refusal tells the leader too: its answer may be lost
        self.tell_brokers({tp}, leader_too=code != NONE)
        return code, written[0]

    def controlled_shutdown(self, leaving: int):
        if self.stopped:
            return None
        live = frozenset(self.live)
        remaining, changes = [], []
        for tp, state in self.states.items():
            if state.leader != leaving:
                continue
            after = elections.moved_away(self.assignments[TOPIC][tp[1]], state, leaving, live,
                                         self.epoch)
            if after is None:
                remaining.append(tp)
            else:
                changes.append(elections.Change(tp[0], tp[1], state, after))
        if changes:
            written = self.write(changes)
            if written is None:
                return None
            changed = set()
            for change, state in zip(changes, written):
                tp = (change.topic, change.partition)
                if state is None:
                    self.states.pop(tp, None)
                    remaining.append(tp)
                    continue
                self.states[tp] = state
                changed.add(tp)
            self.tell_brokers(changed)
            self.dirty()
        return remaining

    def tell_brokers(self, changed, leader_too: bool = True) -> None:
        new, self.new_brokers = self.new_brokers & set(self.live), set()
        by_broker: dict[int, set] = {b: set() for b in self.live}
        for tp in changed:
            for r in self.assignments[TOPIC][tp[1]]:
                if r in by_broker and (leader_too or r != self.states[tp].leader):
                    by_broker[r].add(tp)
        for b in new:
            by_broker[b] |= {tp for tp in self.states if b in self.assignments[TOPIC][tp[1]]}
        for b, tps in by_broker.items():
            if tps:
                parts = tuple((tp, self.states[tp], self.assignments[TOPIC][tp[1]])
                              for tp in sorted(tps))
                self.send(b, ("LeaderAndIsr", self.broker.id, self.epoch, parts))
        if changed or new:
            for b in self.live:
                self.send(b, ("UpdateMetadata", self.broker.id, self.epoch))

    def send(self, b: int, request) -> None:
        self.outbox.setdefault(b, []).append(request)
        if self.sending.get(b) is None:
            self.send_next(b)

    def send_next(self, b: int) -> None:
        self.sending[b] = None
        if self.stopped or b not in self.live or not self.outbox.get(b):
            return
        request = self.outbox[b][0]
        rid = self.sim.next_id()
        self.sending[b] = rid

        def retry():
            if self.sending.get(b) == rid:
                self.send_next(b)
        self.broker.request(b, request, lambda answer: self.sent(b, rid, request),
                            lambda: self.sim.later(self.broker, CONTROLLER_RETRY, retry))

    def sent(self, b: int, rid: int, request) -> None:
        if self.sending.get(b) != rid:
            return
        queue = self.outbox.get(b)
        if queue and queue[0] is request:
            queue.pop(0)
        self.send_next(b)


class Broker:
    def __init__(self, sim: Simulation, broker_id: int) -> None:
        self.sim = sim
        self.id = broker_id
        self.incarnation = 0
        self.state = "running"  # running | paused | crashed
        self.deferred: list = []
        self.session: int | None = None
        self.controller: Controller | None = None
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.start()

    def start(self) -> None:
        self.incarnation += 1
        self.state = "running"
        self.controller_epoch = -1  # ReplicaManager's
        self.known_controller: int | None = None  # MetadataCache.controller_id
        self.fetchers: dict[int, Fetcher] = {}
        self.following: dict[tuple[str, int], int] = {}
        self.altering: dict = {}  # partition -> (tracker, token) of the ISR change in flight
        self.pending: dict[int, tuple] = {}  # request id -> (on_answer, on_error)
        for p in self.replicas.values():  # what a restart reads back from disk
            p.cache.truncate_from_end(p.leo)
            p.leader_epoch, p.leader_id, p.tracker, p.waiters = -1, -1, None, []
            p.isr, p.replicas, p.zk_version = (), (), -1
            # brook's Partition starts at the log end; Kafka at its replication-offset-checkpoint
            p.high_watermark = min(p.checkpointed_hw, p.leo) if self.sim.hw_checkpoint else p.leo
        self.session = self.sim.zk.open_session(self.id)
        if not self.sim.zk.register(self.id, self.session):
            raise SimulationError(f"broker {self.id} restarted before its session ended")
        self.sim.later(self, ISR_TICK, self.maintain_isr)

    @property
    def running(self) -> bool:
        return self.state == "running"

    # --------------------------------------------------------------- requests and answers

    def request(self, dest: int, body, on_answer, on_error) -> int:
        rid = self.sim.next_id()
        self.pending[rid] = (on_answer, on_error)
        self.sim.send(self.id, dest, ("req", self.id, self.incarnation, rid, body))
        self.sim.later(self, CHANNEL_TIMEOUT, lambda: self.timed_out(rid))
        return rid

    def timed_out(self, rid: int) -> None:
        handlers = self.pending.pop(rid, None)
        if handlers is not None:
            handlers[1]()

    def receive(self, message) -> None:
        kind = message[0]
        if kind == "ans":
            _, rid, answer = message
            handlers = self.pending.pop(rid, None)
            if handlers is not None:
                handlers[0](answer)
            return
        if kind == "produce":
            self.produce(*message[1:])
            return
        _, src, src_incarnation, rid, body = message
        answer = self.handle(src, body)
        if answer is not None:
            self.sim.send(self.id, src, ("ans", rid, answer), incarnation=src_incarnation)

    def handle(self, src: int, body):
        kind = body[0]
        if kind == "LeaderAndIsr":
            return self.leader_and_isr(*body[1:])
        if kind == "UpdateMetadata":
            _, controller_id, epoch = body
            if epoch < self.controller_epoch:
                return STALE_CONTROLLER
            self.controller_epoch = epoch
            self.known_controller = controller_id
            return NONE
        if kind == "Fetch":
            return self.serve_fetch(src, body[1])
        if kind == "OffsetForLeaderEpoch":
            out = []
            for tp, current, epoch in body[1]:
                p = self.replicas.get(tp)
                code = self.leader_error(p, current)
                if code != NONE:
                    out.append((tp, code, -1, -1))
                else:
                    out.append((tp, NONE, *p.cache.end_offset_for(epoch, p.leo)))
            return tuple(out)
        if kind == "AlterPartition":
            c = self.controller
            if c is None:
                return NOT_CONTROLLER, None
            _, broker, tp, epoch, isr, version = body
            return c.alter_partition(broker, tp, epoch, isr, version)
        if kind == "ControlledShutdown":
            c = self.controller
            return None if c is None else c.controlled_shutdown(body[1])
        raise AssertionError(kind)

    # --------------------------------------------------------------- from the controller

    def leader_and_isr(self, controller_id: int, epoch: int, parts):
        if epoch < self.controller_epoch:
            return STALE_CONTROLLER
        self.controller_epoch = epoch
        now = self.sim.now
        for tp, ps, replicas in parts:
            p = self.replicas.get(tp)
            if p is None:
                p = self.replicas[tp] = Replica(self, tp)
            if ps.leader_epoch < p.leader_epoch:
                continue  # FENCED_LEADER_EPOCH
            same_epoch = ps.leader_epoch == p.leader_epoch and ps.leader == p.leader_id
            if ps.leader == self.id:
                if same_epoch and p.tracker is not None:
                    if self.sim.newer_state_only and ps.zk_version <= p.zk_version:
                        continue  # an older (or the same) ISR than this leader has
                    p.update_leadership(ps.isr, replicas, ps.zk_version)
                    if self.sim.maximal_isr:
                        self.altering.pop(tp, None)  # the ISR is known again
                    continue
                self.stop_following(tp)
                p.become_leader(ps.leader_epoch, ps.isr, replicas, ps.zk_version, now)
            else:
                if same_epoch and p.tracker is None and (ps.leader < 0 or tp in self.following):
                    p.update_leadership(ps.isr, replicas, ps.zk_version)
                    continue
                p.become_follower(ps.leader, ps.leader_epoch, ps.isr, replicas, ps.zk_version)
                self.stop_following(tp)
                if ps.leader >= 0:
                    f = self.fetchers.get(ps.leader)
                    if f is None:
                        f = self.fetchers[ps.leader] = Fetcher(self, ps.leader)
                    f.add(tp, ps.leader_epoch)
                    self.following[tp] = ps.leader
        return NONE

    def stop_following(self, tp) -> None:
        leader = self.following.pop(tp, None)
        if leader is not None and leader in self.fetchers:
            self.fetchers[leader].remove(tp)

    def fence(self) -> None:
        for p in self.replicas.values():
            if p.tracker is not None:
                p.become_follower(-1, p.leader_epoch, p.isr, p.replicas, p.zk_version)

    # --------------------------------------------------------------- as a leader

    def leader_error(self, p: Replica | None, current: int = -1) -> str:
        if p is None:
            return UNKNOWN_PARTITION
        if p.tracker is None:
            return NOT_LEADER
        if current >= 0:
            if current < p.leader_epoch:
                return FENCED
            if current > p.leader_epoch:
                return UNKNOWN_EPOCH
        return NONE

    def serve_fetch(self, follower: int, asks):
        out = []
        for tp, current, offset in asks:
            p = self.replicas.get(tp)
            code = self.leader_error(p, current)
            if code != NONE:
                out.append((tp, code, offset, (), -1, False))
                continue
            p.tracker.on_fetch(follower, offset, p.leo, self.sim.now)
            p.maybe_advance_high_watermark()
            if offset > p.leo:
                out.append((tp, OUT_OF_RANGE, offset, (), p.high_watermark, False))
                continue
            records, cut = fetch_slice(p.log, offset, self.sim.fetch_max_units)
            out.append((tp, NONE, offset, records, p.high_watermark, cut))
        return tuple(out)

    def produce(self, tp, value: int, acks: int) -> None:
        p = self.replicas.get(tp)
        code = self.leader_error(p)
        if code == NONE and acks == -1 and len(p.isr) < self.sim.min_isr:
            code = NOT_ENOUGH
        if code != NONE:
            self.sim.answered(value, code)
            return
        offset = p.leo
        p.log.append((p.leader_epoch, value))
        p.maybe_advance_high_watermark()
        if acks == 1:
            self.sim.answered(value, NONE, offset)
        elif p.high_watermark > offset:
            self.sim.acked(p, offset, value)
        else:
            deadline = self.sim.now + REQUEST_TIMEOUT
            p.waiters.append((offset + 1, value, deadline))
            self.sim.later(self, REQUEST_TIMEOUT, lambda: self.produce_timeout(p, value))

    def produce_timeout(self, p: Replica, value: int) -> None:
        for i, (_, v, _) in enumerate(p.waiters):
            if v == value:
                del p.waiters[i]
                self.sim.answered(value, TIMED_OUT)
                return

    def maintain_isr(self) -> None:
        self.sim.later(self, ISR_TICK, self.maintain_isr)
        now = self.sim.now
        for tp, p in self.replicas.items():
            if p.tracker is None or self.altering.get(tp, (None,))[0] is p.tracker:
                continue
            out = p.tracker.out_of_sync(now, LAG_MAX)
            # brook's leader also leaves out brokers its metadata lists as dead; here they
            # are asked for too, and refused by the controller: more refusals, not fewer
            back = p.tracker.caught_up(p.high_watermark, p.epoch_start_offset)
            if out or back:
                isr = tuple(r for r in p.isr if r not in out) + tuple(back)
                if isr and isr != p.isr:
                    self.alter_isr(tp, p, isr)

    def alter_isr(self, tp, p: Replica, isr) -> None:
        """ReplicaManager._send_alter_partition: one change in flight per partition, dropped on
        a lost answer or a refusal. With `sim.maximal_isr`, as Kafka 2.8 does it instead: the
        change is pending (counted in the high watermark), asked again after a lost answer or
        NOT_CONTROLLER, dropped when refused as not applicable (INELIGIBLE_REPLICA), and
        otherwise left pending until a LeaderAndIsr says what the ISR is."""
        controller = self.known_controller
        if controller is None:
            return
        epoch, tracker, version = p.leader_epoch, p.tracker, p.zk_version
        token = (tracker, object())  # this change, until answered or superseded
        self.altering[tp] = token
        maximal = self.sim.maximal_isr
        if maximal:
            tracker.propose_isr(isr)

        def current() -> bool:
            return self.altering.get(tp) is token and p.tracker is tracker

        def done():
            if self.altering.get(tp) is token:
                del self.altering[tp]

        def answered(answer):
            code, state = answer
            if code == NONE and p.tracker is not None and p.leader_epoch == state.leader_epoch:
                p.update_leadership(state.isr, p.replicas, state.zk_version)
                done()
            elif not maximal or not current():
                done()
            elif code == NOT_CONTROLLER:
                failed()
            elif code == INELIGIBLE and self.sim.fence_refusals:
                # not applied, and fenced: the state that came with it is the ISR for good
                if p.tracker is not None and p.leader_epoch == state.leader_epoch:
                    p.update_leadership(state.isr, p.replicas, state.zk_version)
                else:
                    tracker.set_isr(p.isr)
                done()
            elif code in (INELIGIBLE, INVALID_REQUEST, UNKNOWN_PARTITION):
                tracker.set_isr(p.isr)  # not applied, and the ISR is still p.isr
                done()
            # else (a newer leader epoch or partition epoch than this leader knows): given up,
            # still pending, until a LeaderAndIsr says what the ISR is

        def failed():
            if maximal and current():
                self.sim.later(self, FETCH_BACKOFF, ask)
            else:
                done()

        def ask():
            if not current() or self.known_controller is None:
                done()
                return
            self.request(self.known_controller, ("AlterPartition", self.id, tp, epoch, isr,
                                                 version), answered, failed)
        ask()

    # --------------------------------------------------------------- ZooKeeper

    def on_zk_change(self) -> None:
        zk = self.sim.zk
        if not zk.alive(self.session):
            return  # told separately (on_session_lost)
        if self.controller is not None and zk.controller != (self.id, self.session):
            self.resign()
        if self.controller is not None:
            self.controller.on_brokers(dict(zk.registrations))
        elif zk.controller is None:
            won = zk.elect(self.id, self.session)
            if won is not None:
                self.controller = Controller(self, *won)

    def resign(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None

    def on_session_lost(self, sid: int) -> None:
        if sid != self.session:
            return
        self.sim.trace(f"broker {self.id}: session {sid} lost: fenced, registers again")
        self.resign()
        self.fence()
        self.session = self.sim.zk.open_session(self.id)
        self.sim.zk.register(self.id, self.session)


# ---------------------------------------------------------------------------------- the simulation


@dataclass
class Outcome:
    acked: int = 0
    acked_one: int = 0
    refused: dict = field(default_factory=dict)
    faults: dict = field(default_factory=dict)


class Simulation:
    def __init__(self, seed: int, *, trace: bool = False, maximal_isr: bool = True,
                 hw_checkpoint: bool = True, newer_state_only: bool = True,
                 fence_refusals: bool = True, after_append_check: bool = True,
                 partial_tail: bool = True, cut_responses: bool = True,
                 reelect_restarted: bool = True, truncation_rounds: bool = True) -> None:
        self.seed = seed
        self.truncation_rounds = truncation_rounds
        self.reelect_restarted = reelect_restarted
        self.newer_state_only = newer_state_only
        self.maximal_isr = maximal_isr
        self.fence_refusals = fence_refusals
        self.after_append_check = after_append_check
        self.partial_tail = partial_tail
        self.hw_checkpoint = hw_checkpoint
        self.rng = random.Random(seed)
        rng = self.rng
        self.tracing = trace
        self.lines: list[str] = []
        self.now = 0
        self._queue: list = []
        self._seq = 0
        self._ids = 0
        self.outcome = Outcome()
        n = rng.choice((3, 3, 4, 5))
        self.rf = rng.choice((2, 3, 3))
        self.min_isr = rng.choice((1, 2, 2)) if self.rf > 1 else 1
        self.loss = rng.choice((0.0, 0.01, 0.05))
        self.spikes = rng.choice((0.0, 0.02, 0.05))
        self.fault_rate = rng.choice((0.02, 0.05, 0.1))
        # drawn apart, so the schedules of the seeds kept below stay as they were
        self.fetch_max_units = (random.Random(~seed).choice((RECORD_UNITS, 20, 60, None))
                                if cut_responses else None)
        partitions = rng.choice((1, 2))
        self.zk = ZooKeeper(self)
        self.zk.assignment = assign_replicas(list(range(1, n + 1)), partitions, self.rf, rng=rng)
        self.tps = [(TOPIC, p) for p in range(partitions)]
        self.cut: set[frozenset] = set()
        self.brokers: list[Broker] = []
        self.by_id: dict[int, Broker] = {}
        for i in range(1, n + 1):
            self.by_id[i] = b = Broker(self, i)
            self.brokers.append(b)
        # the oracle
        self.acks: dict[tuple, list[tuple[int, int]]] = {tp: [] for tp in self.tps}
        self.max_hw: dict[tuple, int] = {tp: 0 for tp in self.tps}
        self.epoch_leader: dict[tuple, tuple[int, int]] = {}  # (tp, epoch) -> (broker, incarnation)
        self.leader_hw: dict[tuple, int] = {}  # (broker, incarnation, tp, epoch) -> last HW seen
        self.verified: dict[tuple, int] = {}  # what check() compared already
        self.value = 0

    # --------------------------------------------------------------- time and events

    def trace(self, line: str) -> None:
        if self.tracing:
            self.lines.append(f"{self.now:>7} {line}")

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def at(self, delay: int, fn) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (self.now + delay, self._seq, fn))

    def later(self, b: Broker, delay: int, fn) -> None:
        """`fn` on broker `b` after `delay`: dropped if it crashed or restarted meanwhile,
        held back while it is paused."""
        incarnation = b.incarnation

        def run():
            if b.incarnation != incarnation or b.state == "crashed":
                return
            if b.state == "paused":
                b.deferred.append(fn)
            else:
                fn()
        self.at(delay, run)

    def send(self, src: int, dest: int, message, incarnation: int | None = None) -> None:
        if frozenset((src, dest)) in self.cut or self.rng.random() < self.loss:
            return
        b = self.by_id[dest]
        if incarnation is not None and incarnation != b.incarnation:
            return  # the connection it came on is gone
        delay = self.rng.randint(1, 20)
        if self.rng.random() < self.spikes:
            delay += self.rng.randint(100, 1500)
        self.later(b, delay, lambda: b.receive(message))

    def run_until(self, t: int) -> None:
        while self._queue and self._queue[0][0] <= t:
            when, _, fn = heapq.heappop(self._queue)
            self.now = when
            fn()
        self.now = t

    def tell_session_lost(self, broker: int, sid: int) -> None:
        b = self.by_id[broker]
        self.later(b, self.rng.randint(1, 50), lambda: b.on_session_lost(sid))

    # --------------------------------------------------------------- the oracle

    def became_leader(self, b: Broker, p: Replica) -> None:
        key = (p.tp, p.leader_epoch)
        known = self.epoch_leader.setdefault(key, (b.id, b.incarnation))
        if known[0] != b.id:
            raise SimulationError(f"(3) {p.tp} epoch {p.leader_epoch}: broker {b.id} leads it "
                                  f"after broker {known[0]}")
        self.trace(f"broker {b.id} {p.tp[1]}: leader epoch {p.leader_epoch} from {p.leo} "
                   f"hw {p.high_watermark} isr {list(p.isr)}")

    def committed(self, p: Replica) -> None:
        key = (p.broker.id, p.broker.incarnation, p.tp, p.leader_epoch)
        if p.high_watermark < self.leader_hw.get(key, 0):
            raise SimulationError(f"(5) {key}: high watermark back to {p.high_watermark}")
        self.leader_hw[key] = p.high_watermark
        self.max_hw[p.tp] = max(self.max_hw[p.tp], p.high_watermark)

    def acked(self, p: Replica, offset: int, value: int) -> None:
        acks = self.acks[p.tp]
        if p.log[offset][1] != value:
            raise SimulationError(f"(1) {p.tp}: acknowledged {value} at {offset} but the log "
                                  f"has {p.log[offset]}")
        # a crashed broker keeps on disk what it reported having (see `crash`)
        holders = sum(1 for b in self.brokers if (r := b.replicas.get(p.tp)) is not None and len(r.log) > offset
                      and r.log[offset] == p.log[offset])
        if holders < self.min_isr:
            raise SimulationError(f"(6) {p.tp}: acknowledged {value} at {offset} held by "
                                  f"{holders} brokers, min.insync.replicas is {self.min_isr}")
        acks.append((offset, value))
        self.outcome.acked += 1
        self.trace(f"broker {p.broker.id} {p.tp[1]}: acks=all {value} at {offset}")

    def answered(self, value: int, code: str, offset: int = -1) -> None:
        if code == NONE:
            self.outcome.acked_one += 1
        else:
            self.outcome.refused[code] = self.outcome.refused.get(code, 0) + 1

    def current_leader(self, tp) -> tuple[Replica | None, PartitionState | None]:
        """The leader ZooKeeper names, if it leads at that epoch (else None)."""
        state = self.zk.states.get(tp)
        if state is None or state.leader < 0:
            return None, state
        b = self.by_id[state.leader]
        p = b.replicas.get(tp)
        if b.state == "crashed" or p is None or p.tracker is None \
                or p.leader_epoch != state.leader_epoch:
            return None, state
        return p, state

    def check(self) -> None:
        for b in self.brokers:
            if b.state == "crashed":
                continue
            for tp, p in b.replicas.items():
                if p.tracker is not None:
                    key = (b.id, b.incarnation, tp, p.leader_epoch)
                    if p.high_watermark < self.leader_hw.get(key, 0):
                        raise SimulationError(f"(5) broker {b.id} {tp}: the high watermark of "
                                              f"leader epoch {p.leader_epoch} went back to "
                                              f"{p.high_watermark}")
                    self.leader_hw[key] = p.high_watermark
        for tp in self.tps:
            leader, _ = self.current_leader(tp)
            if leader is None:
                continue
            log = leader.log
            # A leader's log only grows: what was checked against it need not be again.
            lkey = (leader.broker.id, leader.broker.incarnation, tp, leader.leader_epoch,
                    leader.truncations)
            acks = self.acks[tp]
            start = self.verified.get(lkey, 0)
            self.verified[lkey] = len(acks)
            for offset, value in acks[start:]:
                if offset >= len(log) or log[offset][1] != value:
                    raise SimulationError(
                        f"(1) {tp}: acknowledged {value} at {offset} is not in the log of leader "
                        f"{leader.broker.id} (epoch {leader.leader_epoch}, log end {len(log)}, "
                        f"there: {log[offset] if offset < len(log) else None})")
            hw = leader.high_watermark
            for r in leader.isr:
                if r == leader.broker.id:
                    continue
                other = self.by_id[r].replicas.get(tp)
                okey = (lkey, r, self.by_id[r].incarnation,
                        None if other is None else other.truncations)
                start = min(self.verified.get(okey, 0), hw)
                theirs = [] if other is None else other.log[start:hw]
                if theirs != log[start:hw]:
                    diff = start + next((i for i in range(hw - start) if i >= len(theirs)
                                         or theirs[i] != log[start + i]), hw - start)
                    theirs = other.log if other is not None else []
                    raise SimulationError(
                        f"(2) {tp}: ISR member {r} differs from leader {leader.broker.id} "
                        f"(epoch {leader.leader_epoch}) at offset {diff} below the high "
                        f"watermark {hw}: {theirs[diff] if diff < len(theirs) else None} "
                        f"!= {log[diff]}")
                self.verified[okey] = hw

    def check_settled(self) -> None:
        for tp in self.tps:
            leader, state = self.current_leader(tp)
            if leader is None:
                raise SimulationError(f"settled: {tp} has no leader (ZooKeeper: {state})")
            replicas = self.zk.assignment[tp[1]]
            if sorted(state.isr) != sorted(replicas):
                raise SimulationError(f"settled: {tp} ISR {state.isr}, replicas {replicas}")
            for r in replicas:
                p = self.by_id[r].replicas.get(tp)
                if p is None or p.log != leader.log:
                    raise SimulationError(f"settled: {tp} replica {r} differs from leader "
                                          f"{leader.broker.id}")
            if leader.high_watermark != leader.leo:
                raise SimulationError(f"settled: {tp} high watermark {leader.high_watermark} "
                                      f"!= log end {leader.leo}")

    # --------------------------------------------------------------- clients and faults

    def produce(self) -> None:
        tp = self.rng.choice(self.tps)
        state = self.zk.states.get(tp)
        if state is not None and state.leader >= 0 and self.rng.random() < 0.85:
            target = state.leader
        else:  # stale metadata
            target = self.rng.choice(self.zk.assignment[tp[1]])
        self.value += 1
        acks = -1 if self.rng.random() < 0.75 else 1
        b = self.by_id[target]
        if self.rng.random() < self.loss:
            return
        message = ("produce", tp, self.value, acks)
        self.later(b, self.rng.randint(1, 10), lambda: b.receive(message))

    def fault(self) -> None:
        rng = self.rng
        b = rng.choice(self.brokers)
        kind = rng.choice(("crash", "pause", "expire", "controller", "shutdown", "cut", "cut"))
        self.outcome.faults[kind] = self.outcome.faults.get(kind, 0) + 1
        if kind == "crash" and b.state != "crashed":  # a paused one too (SIGKILL after SIGSTOP)
            self.crash(b, clean=False)
        elif kind == "pause" and b.running:
            self.trace(f"broker {b.id}: paused")
            b.state = "paused"
            b.paused_session = b.session
            self.at(SESSION_TIMEOUT, lambda: self.pause_expires(b))
            self.at(rng.randint(100, 3 * SESSION_TIMEOUT), lambda: self.resume(b))
        elif kind == "expire" and b.running and b.session is not None:
            self.zk.expire(b.session, "expired by ZooKeeper")
        elif kind == "controller":
            self.zk.delete_controller()
        elif kind == "shutdown" and b.running:
            self.controlled_shutdown(b)
        elif kind == "cut":
            other = rng.choice([x for x in self.brokers if x is not b])
            link = frozenset((b.id, other.id))
            self.cut.add(link)
            self.at(rng.randint(100, 3 * LAG_MAX), lambda: self.cut.discard(link))

    def pause_expires(self, b: Broker) -> None:
        if b.state == "paused" and b.session == b.paused_session:
            self.zk.expire(b.session, "paused past the session timeout")

    def resume(self, b: Broker) -> None:
        if b.state != "paused":
            return
        self.trace(f"broker {b.id}: resumed")
        b.state = "running"
        deferred, b.deferred = b.deferred, []
        for i, fn in enumerate(deferred):
            self.later(b, i, fn)

    def crash(self, b: Broker, clean: bool) -> None:
        self.trace(f"broker {b.id}: {'stopped' if clean else 'crashed'}")
        b.state = "crashed"
        b.deferred = []
        b.resign()
        for p in b.replicas.values():
            p.checkpointed_hw = p.high_watermark
        if not clean:
            for tp, p in b.replicas.items():
                keep = min(max(self.max_hw[tp], p.reported), p.leo)
                if p.leo > keep and self.rng.random() < 0.5:
                    p.truncate_to(self.rng.randint(keep, p.leo))
        sid = b.session
        if clean:
            self.zk.expire(sid, "closed")
            delay = self.rng.randint(50, 2 * SESSION_TIMEOUT)
        else:
            self.at(SESSION_TIMEOUT, lambda: self.zk.expire(sid, "crashed"))
            delay = SESSION_TIMEOUT + self.rng.randint(50, 2 * SESSION_TIMEOUT)
        self.at(delay, lambda: self.restart(b))

    def restart(self, b: Broker) -> None:
        if b.state == "crashed":
            if self.zk.alive(b.session):
                self.zk.expire(b.session, "crashed")
            self.trace(f"broker {b.id}: restarts")
            b.start()

    def controlled_shutdown(self, b: Broker) -> None:
        self.trace(f"broker {b.id}: controlled shutdown")
        incarnation = b.incarnation

        def stop(_answer=None):
            if b.incarnation == incarnation and b.state != "crashed":
                self.crash(b, clean=True)
        target = b.known_controller
        if target is None:
            stop()
            return
        if target == b.id and b.controller is not None:
            b.controller.controlled_shutdown(b.id)
            stop()
            return
        b.request(target, ("ControlledShutdown", b.id), stop, stop)

    def heal(self) -> None:
        self.loss = 0.0
        self.spikes = 0.0
        self.cut.clear()
        for b in self.brokers:
            if b.state == "paused":
                self.resume(b)

    # --------------------------------------------------------------- running

    def step(self) -> None:
        self.run_until(self.now + STEP_MS)
        if self.rng.random() < self.fault_rate:
            self.fault()
        for _ in range(self.rng.choice((0, 1, 1, 2))):
            self.produce()
        self.check()

    def run(self) -> Outcome:
        for _ in range(STEPS):
            self.step()
        self.heal()
        end = self.now + SETTLE_MS
        while self.now < end:
            self.run_until(self.now + STEP_MS)
            for b in self.brokers:
                if b.state == "paused":
                    self.resume(b)
            self.check()
        # Anything still down comes back; then one more quiet period.
        for b in self.brokers:
            if b.state == "crashed":
                self.restart(b)
        self.run_until(self.now + SETTLE_MS)
        self.check()
        self.check_settled()
        return self.outcome


def replay_command(seed: int) -> str:
    return (f"BROOK_SIM_SEED={seed} python -m pytest "
            f"tests/cluster/test_replication_simulation.py -k replay -s")


def run_seed(seed: int, trace: bool = False) -> Outcome:
    sim = Simulation(seed, trace=trace)
    try:
        return sim.run()
    except SimulationError as exc:
        raise SimulationError(f"seed {seed} at {sim.now} ms: {exc}\nreplay: "
                              f"{replay_command(seed)}") from None


# ---------------------------------------------------------------------------------- the tests

FIRST_SEED = int(os.environ.get("BROOK_SIM_FIRST", "0"))
SEED_COUNT = int(os.environ.get("BROOK_SIM_SEEDS", 2000 if os.environ.get("CI")
                                else int(500 * min(1.0, SCALE))))
BLOCK = 50
BLOCKS = [(s, min(s + BLOCK, FIRST_SEED + SEED_COUNT))
          for s in range(FIRST_SEED, FIRST_SEED + SEED_COUNT, BLOCK)]


@pytest.mark.parametrize("first,end", BLOCKS, ids=[f"seeds-{a}-{b - 1}" for a, b in BLOCKS])
def test_replication_simulation(first, end):
    failures = []
    for seed in range(first, end):
        try:
            run_seed(seed)
        except SimulationError as exc:
            failures.append(str(exc))
    assert not failures, "\n\n".join(failures)


def wiring_bug(seed: int, wiring: dict, why: str):
    mark = pytest.mark.xfail(strict=True, raises=SimulationError,
                             reason=f"the simpler rule: {why}")
    return pytest.param(seed, wiring, id=f"seed-{seed}-" + "-".join(wiring), marks=mark)


# Rules of the wiring (partition.py, replica_manager.py, controller.py, broker.py), the
# first three as Kafka has them, that brook's first wiring did without. Each switch turns one
# back into the simpler rule; with it, the seed breaks an invariant: the rule is needed.
WIRING_TODAY = [
    wiring_bug(19, {"maximal_isr": False},
               "(1) an acks=all record is lost: the ISR grows in ZooKeeper while the leader's "
               "high watermark ignores the joining follower (no maximal ISR), and a lost "
               "AlterPartition answer leaves the leader's ISR behind ZooKeeper's for good"),
    wiring_bug(34, {"maximal_isr": False},
               "(2) a follower joins the ISR lacking records below the high watermark, which "
               "moved on while the ISR change was in flight"),
    wiring_bug(307, {"newer_state_only": False},
               "(1) an acks=all record is lost: a late LeaderAndIsr of the leader's own epoch "
               "with an older partition epoch puts back the ISR before its last expansion; the "
               "leader acknowledges without the follower ZooKeeper has in the ISR, which then "
               "leads"),
    wiring_bug(5580, {"reelect_restarted": False, "cut_responses": False},
               "(2) a leader crashed losing a tail a follower had fetched, and restarted while "
               "no controller ran; the next controller finds it alive and leading, so the "
               "epoch stays, the follower never truncates and keeps the lost records under "
               "the new ones the leader writes at the same offsets"),
    wiring_bug(60825, {"fence_refusals": False, "cut_responses": False},
               "(2) a follower joins the ISR lacking records below the high watermark: an "
               "AlterPartition refused (the follower's broker not yet registered again) drops "
               "the change while a copy of it sent before a retry, still on its way, is "
               "applied later; the leader's high watermark then passes what the follower has"),
    wiring_bug(84, {"hw_checkpoint": False, "cut_responses": False},
               "(2) a restarted broker takes its log end for its high watermark, and as leader "
               "makes records committed that an ISR member lacks"),
    wiring_bug(3, {"after_append_check": False},
               "(6) an acks=all record is acknowledged while one broker holds it: the ISR "
               "shrank to the leader alone while the produce waited, which moved the high "
               "watermark past it (Kafka answers NOT_ENOUGH_REPLICAS_AFTER_APPEND)"),
    wiring_bug(101826, {"truncation_rounds": False},
               "(2) an ISR member keeps records its leader does not have: it copied epoch 3 "
               "from a leader past where the next one (epoch 4) took over, then led epoch 5; "
               "the leader of epoch 6 answers epoch 4 to its question about 5, and one cut "
               "at the first end leaves its epoch-3 records where the leader holds epoch 4's "
               "(KIP-279: cut to the end of its own older epoch and ask again)"),
    wiring_bug(0, {"partial_tail": False},
               "settled: followers never catch up: a Fetch answer cut inside a batch by its "
               "byte limit fails the follower's append every time it is asked again"),
]


@pytest.mark.parametrize("seed,wiring", WIRING_TODAY)
def test_each_rule_of_the_wiring_is_needed(seed, wiring):
    Simulation(seed, **wiring).run()


@pytest.mark.skipif("BROOK_SIM_SEED" not in os.environ, reason="set BROOK_SIM_SEED to replay one")
def test_replay():
    seed = int(os.environ["BROOK_SIM_SEED"])
    wiring = {k: False for k in os.environ.get("BROOK_SIM_WIRING_TODAY", "").split(",") if k}
    sim = Simulation(seed, trace=True, **wiring)
    try:
        sim.run()
    finally:
        print("\n".join(sim.lines[-400:]))
        print(f"seed {seed}: {sim.outcome}")


def test_the_same_seed_runs_the_same_schedule():
    a, b = Simulation(7, trace=True), Simulation(7, trace=True)
    a.run(), b.run()
    assert a.lines == b.lines and a.outcome == b.outcome
    assert a.outcome.acked > 0


def test_the_simulation_exercises_what_it_claims():
    """Across a few seeds: acks=all answered, refused for too small an ISR, every fault seen,
    leaders moved and followers truncated."""
    total = Outcome()
    truncations = elections_seen = 0
    for seed in range(40):
        sim = Simulation(seed, trace=True)
        out = sim.run()
        total.acked += out.acked
        for k, v in out.refused.items():
            total.refused[k] = total.refused.get(k, 0) + v
        for k, v in out.faults.items():
            total.faults[k] = total.faults.get(k, 0) + v
        truncations += sum(" truncates " in line for line in sim.lines)
        elections_seen += len({(tp, e) for tp, e in sim.epoch_leader if e > 0})
    assert total.acked > 1000
    assert {NOT_ENOUGH, NOT_LEADER} <= set(total.refused)
    assert set(total.faults) == {"crash", "pause", "expire", "controller", "shutdown", "cut"}
    assert truncations > 0 and elections_seen > 40
