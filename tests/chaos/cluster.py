"""Three brokers and a ZooKeeper server, each in its own network namespace (tests/chaos/net.py),
built from the project's own launchers (BrokerProcess, ZooKeeperServer) with a command prefix
and an address.

Each broker's data directory is a small tmpfs of its own, so one broker's disk can be filled.
Each broker runs under libfaketime with an offset file of its own (``+0`` until a clock fault
writes a step into it): libfaketime 0.9.10 cannot leave the monotonic clock alone without
breaking Python's sleeps (EINVAL from clock_nanosleep), so a step moves both of the broker's
clocks, as a process suspended and resumed (forward) or a clock set back (backward) would.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from brook.cluster.local_zookeeper import ZooKeeperServer
from tests.chaos.net import Network, run
from tests.support.broker_harness import BrokerError, BrokerProcess

SESSION_TIMEOUT_MS = 6000
BROKER_PORT = 9092
ZK_PORT = 2181
DISK_BYTES = 256 << 20
BROKERS = (1, 2, 3)
BROKER_CONFIG = {
    "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
    "zookeeper.connection.timeout.ms": 3000,
    "min.insync.replicas": 2,
    "default.replication.factor": 3,
    "unclean.leader.election.enable": "false",
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": 3,
    "replica.lag.time.max.ms": 6000,
    "replica.fetch.wait.max.ms": 200,
    "replica.fetch.backoff.ms": 200,
    "replica.socket.timeout.ms": 5000,
    "request.timeout.ms": 10000,
    "group.initial.rebalance.delay.ms": 0,
    "controlled.shutdown.retry.backoff.ms": 200,
    "auto.create.topics.enable": "false",
}


def faketime_library() -> str | None:
    found = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
    return found[0] if found else None


def node(broker_id: int) -> str:
    return f"n{broker_id}"


class ChaosCluster:
    def __init__(self, base_dir: Path, extra_config: dict | None = None) -> None:
        self.base_dir = Path(base_dir)
        self.net = Network(["zk", *(node(b) for b in BROKERS)])
        self.zk = ZooKeeperServer(self.base_dir / "zookeeper", port=ZK_PORT,
                                  host=self.net.addresses["zk"], prefix=self.net.prefix("zk"))
        self.brokers: dict[int, BrokerProcess] = {}
        self.clock_files: dict[int, Path] = {}
        self.disks: dict[int, Path] = {}
        self.extra_config = dict(extra_config or {})

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.net.addresses[node(b)]}:{BROKER_PORT}" for b in BROKERS)

    def up(self) -> "ChaosCluster":
        self.net.up()
        self.zk.start()
        lib = faketime_library()
        for b in BROKERS:
            data = self.base_dir / f"broker{b}"
            disk = data / "disk"
            disk.mkdir(parents=True, exist_ok=True)
            run("mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(disk))
            self.disks[b] = disk
            clock = data / "clock"
            clock.write_text("+0\n")
            self.clock_files[b] = clock
            prefix = self.net.prefix(node(b))
            if lib:
                prefix += ["env", f"LD_PRELOAD={lib}", f"FAKETIME_TIMESTAMP_FILE={clock}",
                           "FAKETIME_CACHE_DURATION=1"]
            config = {**BROKER_CONFIG, **self.extra_config, "broker.id": b,
                      "zookeeper.connect": self.zk.connect, "log.dirs": str(disk / "logs")}
            self.brokers[b] = BrokerProcess(data, port=BROKER_PORT, overrides=config,
                                            host=self.net.addresses[node(b)], prefix=prefix,
                                            start_timeout=60)
        for b in BROKERS:
            self.brokers[b].start()
        return self

    def down(self, keep: Path | None = None) -> None:
        """Stop everything and remove the network, whatever state the run left it in; with
        ``keep``, the brokers' data directories are copied there first (for `brook dump-log`)."""
        for proc in self.brokers.values():
            try:
                if proc.proc is not None:
                    os.kill(proc.proc.pid, signal.SIGCONT)
            except OSError:
                pass
            try:
                proc.stop(signal.SIGKILL) if proc.proc is not None else None
            except (BrokerError, OSError):
                pass
        if keep is not None:
            for b, disk in self.disks.items():
                shutil.copytree(disk / "logs", keep / f"broker{b}-logs", dirs_exist_ok=True,
                                ignore_dangling_symlinks=True)
        try:
            self.zk.stop()
        finally:
            for disk in self.disks.values():
                subprocess.run(["umount", "-l", str(disk)], capture_output=True)
            self.net.down()

    # -- looking at it ------------------------------------------------------------------
    def zk_json(self, path: str, timeout: float = 3.0):
        """A znode's JSON, read through kazoo from the control namespace (None if unreadable)."""
        import json

        from kazoo.client import KazooClient

        kz = KazooClient(hosts=self.zk.connect, timeout=timeout)
        try:
            kz.start(timeout=timeout)
            data, _ = kz.get(path)
            return json.loads(data)
        except Exception:  # noqa: BLE001 - ZooKeeper down or partitioned: no answer
            return None
        finally:
            try:
                kz.stop()
                kz.close()
            except Exception:  # noqa: BLE001
                pass

    def leader(self, topic: str, partition: int = 0) -> int | None:
        state = self.zk_json(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return None if state is None else state.get("leader")

    def fully_replicated(self, topics: list[str], partitions: dict[str, int]) -> bool:
        for topic in topics:
            for p in range(partitions[topic]):
                state = self.zk_json(f"/brokers/topics/{topic}/partitions/{p}/state")
                if state is None or sorted(state["isr"]) != list(BROKERS) or state["leader"] < 0:
                    return False
        return True

    def tails(self) -> str:
        return "\n".join(p.stderr_tail(30) for p in self.brokers.values())

    # -- process faults -----------------------------------------------------------------
    def start_broker(self, b: int, timeout: float = 60.0) -> None:
        """Start a stopped broker, retrying while its old ZooKeeper session is still alive."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.brokers[b].start()
                return
            except BrokerError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
