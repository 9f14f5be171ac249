"""The faults and the seeded scheduler that starts and heals them, overlapping, at random.

Every fault is a small class: ``start()`` returns what it did (recorded in the history), ``stop()``
undoes it. ``resources`` keeps two faults from fighting over one thing (two faults that would
each SIGCONT or restart the same broker); partitions take none, because their cuts add up.

The seed fixes the sequence of decisions (which kind, which broker or side, how long, how far);
which broker is the leader when a fault asks comes from the cluster, so a replay takes the same
decisions on a cluster that may have moved differently, as with Jepsen's nemeses.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

from tests.chaos.cluster import BROKERS, SESSION_TIMEOUT_MS, ChaosCluster, node
from tests.chaos.history import Recorder

PAST_SESSION = SESSION_TIMEOUT_MS / 1000 + 1.0
MAX_ACTIVE = 3  # faults in force at once


class Fault:
    kind = ""
    seconds = (5.0, 20.0)  # how long it stays, drawn from this range

    def __init__(self, ctx: "Nemesis") -> None:
        self.ctx, self.rng, self.cluster = ctx, ctx.rng, ctx.cluster
        self.resources: set[str] = set()
        self.prepare()

    def prepare(self) -> None:
        """Draw the fault's targets (before start, so that resources can be checked)."""

    def start(self) -> dict:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def broker(self, leader_share: float = 0.5) -> int:
        """A broker: the topic's first partition's leader at ``leader_share`` odds, else any."""
        pick = self.rng.choice(BROKERS)
        if self.rng.random() < leader_share:
            return self.ctx.leader() or pick
        return pick


# -- partitions ----------------------------------------------------------------------------
class Partition(Fault):
    def start(self) -> dict:
        self.cuts = self.cuts_now()
        self.ctx.cuts.append(self.cuts)
        self.ctx.apply_cuts()
        return {"cut": {a: sorted(bs) for a, bs in self.cuts.items()}}

    def stop(self) -> None:
        self.ctx.cuts.remove(self.cuts)
        self.ctx.apply_cuts()

    def cuts_now(self) -> dict[str, set[str]]:
        raise NotImplementedError

    def others(self, *names: str) -> set[str]:
        return {n for n in self.cluster.net.nodes if n not in names}


class LeaderFromZooKeeper(Partition):
    """The leader keeps its clients and followers but loses ZooKeeper."""
    kind = "partition-leader-zk"

    def cuts_now(self):
        return {node(self.broker(leader_share=1.0)): {"zk"}}


class LeaderFromFollowers(Partition):
    """The leader keeps ZooKeeper and its clients but loses the other brokers."""
    kind = "partition-leader-followers"

    def cuts_now(self):
        leader = node(self.broker(leader_share=1.0))
        return {leader: self.others(leader, "zk")}


class Isolate(Partition):
    """One broker cut from every other node (the control clients still reach it)."""
    kind = "partition-isolate"

    def cuts_now(self):
        lone = node(self.broker())
        return {lone: self.others(lone)}


class MajorityMinority(Partition):
    """The brokers split two against one, ZooKeeper on a side drawn at random."""
    kind = "partition-majority-minority"

    def cuts_now(self):
        brokers = [node(b) for b in BROKERS]
        self.rng.shuffle(brokers)
        minority, majority = {brokers[0]}, set(brokers[1:])
        (minority if self.rng.random() < 0.5 else majority).add("zk")
        return {a: set(majority) for a in minority}


class Bridge(Partition):
    """Two sides that cannot talk, and one node that talks to both."""
    kind = "partition-bridge"

    def cuts_now(self):
        nodes = list(self.cluster.net.nodes)
        self.rng.shuffle(nodes)
        left, _bridge, right = nodes[:1], nodes[1], nodes[2:]
        return {a: set(right) for a in left}


# -- a slow or lossy network ------------------------------------------------------------
class Shaping(Fault):
    def prepare(self):
        everyone = self.rng.random() < 0.3
        self.targets = list(self.cluster.net.nodes) if everyone else [
            self.rng.choice(self.cluster.net.nodes)]
        self.resources = {f"{self.kind}:{t}" for t in self.targets}


class Delay(Shaping):
    kind = "delay"

    def start(self):
        ms = self.rng.choice([20, 50, 100, 250, 500])
        for t in self.targets:
            self.cluster.net.set_delay(t, ms)
        return {"nodes": self.targets, "ms": ms, "netem": self.cluster.net.netem}

    def stop(self):
        for t in self.targets:
            self.cluster.net.set_delay(t, 0)


class Loss(Shaping):
    kind = "loss"

    def start(self):
        share = self.rng.choice([0.05, 0.2, 0.5])
        for t in self.targets:
            self.cluster.net.set_loss(t, share)
        return {"nodes": self.targets, "share": share}

    def stop(self):
        for t in self.targets:
            self.cluster.net.set_loss(t, 0.0)


# -- processes ------------------------------------------------------------------------------
class Kill(Fault):
    """SIGKILL a broker; restart it past its ZooKeeper session (a restart within it is refused
    while the old registration lives)."""
    kind = "kill"
    seconds = (PAST_SESSION, PAST_SESSION + 10)

    def prepare(self):
        self.b = self.broker()
        self.resources = {f"proc:{self.b}"}

    def start(self):
        self.cluster.brokers[self.b].kill()
        return {"broker": self.b}

    def stop(self):
        # in the background: ZooKeeper may be down now (a start waits for it), and the other
        # faults' heals must not wait; the broker stays busy for other faults until it is up
        self.ctx.background(self.resources, lambda: self.cluster.start_broker(self.b, 120))


class Pause(Fault):
    """SIGSTOP a broker past its ZooKeeper session, then SIGCONT."""
    kind = "pause"
    seconds = (PAST_SESSION, PAST_SESSION + 10)

    def prepare(self):
        self.b = self.broker()
        self.resources = {f"proc:{self.b}"}

    def start(self):
        proc = self.cluster.brokers[self.b].proc
        if proc is not None:
            os.kill(proc.pid, signal.SIGSTOP)
        return {"broker": self.b}

    def stop(self):
        proc = self.cluster.brokers[self.b].proc
        if proc is not None:
            os.kill(proc.pid, signal.SIGCONT)


class ZooKeeperRestart(Fault):
    """ZooKeeper killed, down for a while, started again on its data."""
    kind = "zk-restart"
    seconds = (1.0, 10.0)

    def prepare(self):
        self.resources = {"zk"}

    def start(self):
        self.cluster.zk.stop()
        return {}

    def stop(self):
        self.cluster.zk.start()


class ClockStep(Fault):
    """One broker's clocks stepped (libfaketime), forward or back; set right at the heal."""
    kind = "clock"

    def prepare(self):
        self.b = self.broker()
        self.resources = {f"clock:{self.b}"}

    def start(self):
        step = self.rng.choice([-1, 1]) * self.rng.randint(5, 60)
        self.cluster.clock_files[self.b].write_text(f"{step:+d}\n")
        return {"broker": self.b, "seconds": step}

    def stop(self):
        self.cluster.clock_files[self.b].write_text("+0\n")


class DiskFull(Fault):
    """One broker's data disk filled to the last byte."""
    kind = "disk-full"

    def prepare(self):
        self.b = self.broker()
        self.resources = {f"disk:{self.b}"}

    def start(self):
        disk = self.cluster.disks[self.b]
        st = os.statvfs(disk)
        free = st.f_bavail * st.f_frsize
        with open(disk / "ballast", "wb") as f:
            try:
                os.posix_fallocate(f.fileno(), 0, free)
            except OSError:
                pass  # filled as far as it goes
        return {"broker": self.b, "bytes": free}

    def stop(self):
        (self.cluster.disks[self.b] / "ballast").unlink(missing_ok=True)
        # A broker whose write failed took its log dir offline and stopped (exit 1, its
        # leaderships moved first): its supervisor starts it again once the disk has room.
        self.ctx.background(self.resources, self._restart_if_stopped)

    def _restart_if_stopped(self):
        proc = self.cluster.brokers[self.b].proc
        if proc is None:
            return
        try:
            proc.wait(15)  # one stopping after a failed write has its moment to finish
        except subprocess.TimeoutExpired:
            return  # still serving: its disk never refused a write
        if "is offline" not in self.cluster.brokers[self.b].stderr_tail(20):
            return  # stopped for another reason (a kill): that fault restarts it
        self.cluster.brokers[self.b].proc = None
        self.cluster.start_broker(self.b, 120)


KINDS = {f.kind: f for f in (LeaderFromZooKeeper, LeaderFromFollowers, Isolate, MajorityMinority,
                             Bridge, Delay, Loss, Kill, Pause, ZooKeeperRestart, ClockStep,
                             DiskFull)}


class Nemesis:
    def __init__(self, cluster: ChaosCluster, topic: str, seed: int, history_dir: Path,
                 kinds: list[str] | None = None) -> None:
        self.cluster, self.topic = cluster, topic
        self.rng = random.Random(seed)
        self.kinds = sorted(kinds or KINDS)
        self.record = Recorder(history_dir / "nemesis.jsonl", "nemesis")
        self.cuts: list[dict[str, set[str]]] = []
        self.active: list[tuple[float, int, Fault]] = []  # (heal at, id, fault)
        self.ids = 0
        self._leader: int | None = None
        self.pending: list[tuple[set[str], threading.Thread]] = []  # heals still running

    def background(self, resources: set[str], heal) -> None:
        def run():
            try:
                heal()
            except Exception as exc:  # noqa: BLE001 - heal_all tries again
                self.record("nemesis-error", kind="heal", error=repr(exc))
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.pending.append((set(resources), thread))

    def leader(self) -> int | None:
        found = self.cluster.leader(self.topic)
        if found is not None and found >= 0:
            self._leader = found
        return self._leader

    def apply_cuts(self) -> None:
        merged: dict[str, set[str]] = {}
        for cuts in self.cuts:
            for a, bs in cuts.items():
                merged.setdefault(a, set()).update(bs)
        self.cluster.net.partition(merged)

    def run(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        next_start = time.monotonic() + self.rng.uniform(1, 3)
        try:
            while time.monotonic() < end:
                self._heal_due(time.monotonic())
                if time.monotonic() >= next_start and len(self.active) < MAX_ACTIVE:
                    self._start_one()
                    next_start = time.monotonic() + self.rng.uniform(1, 6)
                time.sleep(0.1)
        finally:
            self.heal_all()

    def _start_one(self) -> None:
        fault = KINDS[self.rng.choice(self.kinds)](self)
        self.pending = [(r, t) for r, t in self.pending if t.is_alive()]
        busy = set().union(*(f.resources for _, _, f in self.active), *(r for r, _ in self.pending))
        duration = self.rng.uniform(*fault.seconds)
        if fault.resources & busy:
            return
        self.ids += 1
        try:
            detail = fault.start()
        except Exception as exc:  # noqa: BLE001 - recorded, and the run goes on
            self.record("nemesis-error", kind=fault.kind, fault=self.ids, error=repr(exc))
            return
        self.record("nemesis-start", kind=fault.kind, fault=self.ids, detail=detail)
        self.active.append((time.monotonic() + duration, self.ids, fault))

    def _heal_due(self, t: float) -> None:
        for item in [a for a in self.active if a[0] <= t]:
            self._stop(item)

    def _stop(self, item) -> None:
        _, fid, fault = item
        self.active.remove(item)
        try:
            fault.stop()
        except Exception as exc:  # noqa: BLE001 - heal_all tries again
            self.record("nemesis-error", kind=fault.kind, fault=fid, error=repr(exc))
        self.record("nemesis-stop", kind=fault.kind, fault=fid)

    def heal_all(self) -> None:
        """Undo every fault in force, then make sure that nothing is left broken."""
        for item in list(reversed(self.active)):
            self._stop(item)
        for _, thread in self.pending:
            thread.join(150)
        self.cuts.clear()
        self.cluster.net.heal()
        for b in BROKERS:
            self.cluster.clock_files[b].write_text("+0\n")
            (self.cluster.disks[b] / "ballast").unlink(missing_ok=True)
            proc = self.cluster.brokers[b].proc
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
        if not self.cluster.zk.running:
            self.cluster.zk.start()
        for b in BROKERS:
            if not self.cluster.brokers[b].running:
                # killed by a fault whose restart failed, or dead of its own accord: the
                # brokers' stderr says which
                self.record("nemesis-restart", broker=b)
                self.cluster.brokers[b].proc = None
                self.cluster.start_broker(b, timeout=90)
        self.record("nemesis-healed")
