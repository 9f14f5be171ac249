"""A real ZooKeeper server (Debian's `zookeeper` package, which `make tools` installs) as a
process on a free loopback port, in a directory of its own: for `make demo-cluster`, the
cluster benchmarks and the cluster tests. Not for production: run ZooKeeper as ZooKeeper.

Started standalone with ``java -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar
org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg``; ready when it answers ``ruok``.
``restart()`` keeps its port and data (sessions and znodes survive, as in production);
``restart(wipe=True)`` starts it empty, as a ZooKeeper that lost its disk. Its output goes to
``zookeeper.log`` in its directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
ZOOKEEPER_CONF_DIR = "/etc/zookeeper/conf"  # Debian's log configuration, on the classpath
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
TICK_MS = 200  # session expiry is checked per tick: short ticks make expiry prompt
MIN_SESSION_TIMEOUT_MS = 1000
MAX_SESSION_TIMEOUT_MS = 60_000
# A small JVM that starts fast: the tests share two cores with everything else.
JVM_OPTIONS = ["-Xms32m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Xshare:auto"]


def missing_reason() -> str | None:
    """Why a ZooKeeper server cannot be started here, or None."""
    if not os.path.exists(ZOOKEEPER_JAR):
        return (f"ZooKeeper is not installed ({ZOOKEEPER_JAR} is missing): `make tools` installs "
                "Debian's zookeeper package")
    if shutil.which("java") is None:
        return "java is not installed (Debian's zookeeper package brings it)"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def four_letter_word(port: int, word: bytes = b"ruok", timeout: float = 1.0,
                     host: str = "127.0.0.1") -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word)
        chunks = []
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


class ZooKeeperError(AssertionError):
    """The server did not start or stop as expected (the message has its log's tail)."""


class ZooKeeperServer:
    def __init__(self, base_dir: str | os.PathLike[str], port: int | None = None,
                 start_timeout: float = 60.0, host: str = "127.0.0.1",
                 prefix: list[str] | tuple[str, ...] = ()) -> None:
        self.base_dir = Path(base_dir)
        self.data_dir = self.base_dir / "data"
        self.config_path = self.base_dir / "zoo.cfg"
        self.log_path = self.base_dir / "zookeeper.log"
        self.port = port or free_port()
        self.start_timeout = start_timeout
        # The address it listens on, and what its command runs under (``ip netns exec NS``
        # for a server in a network namespace of its own)
        self.host = host
        self.prefix = list(prefix)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def connect(self) -> str:
        """The `zookeeper.connect` of this server (add a /chroot to share it)."""
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _write_config(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("\n".join([
            f"tickTime={TICK_MS}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "admin.enableServer=false",
            f"minSessionTimeout={MIN_SESSION_TIMEOUT_MS}",
            f"maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}",
            "4lw.commands.whitelist=ruok,srvr,cons",
            "maxClientCnxns=0",
            "",
        ]))

    def command(self) -> list[str]:
        return [*self.prefix, "java", *JVM_OPTIONS, "-cp", f"{ZOOKEEPER_CONF_DIR}:{ZOOKEEPER_JAR}",
                f"-Dzookeeper.log.dir={self.base_dir}", MAIN_CLASS, str(self.config_path)]

    def start(self) -> "ZooKeeperServer":
        if self.running:
            raise ZooKeeperError(f"ZooKeeper on {self.connect} is already running")
        reason = missing_reason()
        if reason:
            raise ZooKeeperError(reason)
        self._write_config()
        self.starts += 1
        with open(self.log_path, "ab") as out:
            out.write(f"\n===== start #{self.starts}: {' '.join(self.command())}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=out, cwd=self.base_dir, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise ZooKeeperError(f"ZooKeeper exited with code {code} at start\n{self.log_tail()}")
            try:
                if four_letter_word(self.port, host=self.host) == b"imok":
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop(signal.SIGKILL)
                raise ZooKeeperError(f"ZooKeeper did not answer on {self.connect} within "
                                     f"{self.start_timeout:.0f} s\n{self.log_tail()}")
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGKILL) -> None:
        """Stop the server (SIGKILL by default: what clients see is the same, and it is
        quicker) and wait until its port is closed."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.host, self.port), timeout=0.2).close()
            except OSError:
                return
            time.sleep(0.05)

    def restart(self, wipe: bool = False, down_for: float = 0.0) -> "ZooKeeperServer":
        """Stop, stay down `down_for` seconds, and start again on the same port (with the
        same data, or none with `wipe`)."""
        self.stop()
        if wipe:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        time.sleep(down_for)
        return self.start()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no ZooKeeper log)"
        tail = text.splitlines()[-lines:]
        return f"--- ZooKeeper log (last {len(tail)} lines of {self.log_path}) ---\n" + "\n".join(tail)

    def __enter__(self) -> "ZooKeeperServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ZooKeeperServer({self.connect}, running={self.running})"
