"""A Spark standalone cluster of separate processes started from pip's pyspark: a master and
workers (``spark-class org.apache.spark.deploy.master.Master`` / ``...deploy.worker.Worker``),
each a JVM of its own bound to 127.0.0.1 on free ports; the workers start each application's
executors as JVMs of their own, which start their own Python workers.

    with StandaloneCluster(tmp_path, workers=2, cores=1) as cluster:
        cluster.url                 # spark://127.0.0.1:PORT, for SparkSession.builder.master
        cluster.executors()         # {pid: worker pid} of the executor JVMs running now

``ConnectServer`` is pyspark's Spark Connect server, a process of its own, for
``SparkSession.builder.remote(server.url)``.

Processes are started and stopped by their PIDs (process groups) only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

#: spark-class of the pyspark installed beside this interpreter
SPARK_CLASS = Path(sys.executable).parent / "spark-class"


def java_missing() -> str | None:
    """Why the cluster cannot start here, or None."""
    if not SPARK_CLASS.exists():
        return f"pyspark's spark-class is not at {SPARK_CLASS}"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Java is not installed (no java on PATH, no JAVA_HOME)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(proc: subprocess.Popen | None, timeout: float = 30.0) -> None:
    """SIGTERM to the process group a process leads (a JVM and what it started), SIGKILL if
    it has not ended within ``timeout``."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


class _Processes:
    def start(self):
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


class StandaloneCluster(_Processes):
    def __init__(self, base_dir: str | os.PathLike[str], workers: int = 2, cores: int = 1,
                 memory: str = "1g", start_timeout: float = 120.0) -> None:
        self.base = Path(base_dir)
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.start_timeout = start_timeout
        self.port = free_port()
        self.ui_port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.master: subprocess.Popen | None = None
        self.worker_procs: list[subprocess.Popen] = []

    # ------------------------------------------------------------------ processes

    def _env(self, name: str) -> dict[str, str]:
        # Nothing of this process's Python path: executors import brook from what the
        # application ships (spark.submit.pyFiles), as on machines of their own.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        import pyspark

        # pip's pyspark is a Spark distribution (jars, bin/, sbin/)
        env.setdefault("SPARK_HOME", str(Path(pyspark.__file__).parent))
        env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(self.base / "logs"),
                   SPARK_PID_DIR=str(self.base), SPARK_NO_DAEMONIZE="1",
                   SPARK_DAEMON_MEMORY="256m", SPARK_IDENT_STRING=name)
        return env

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.base / f"{name}.log", "ab")
        try:
            return subprocess.Popen([str(SPARK_CLASS), *args], env=self._env(name),
                                    stdout=log, stderr=subprocess.STDOUT, cwd=self.base,
                                    start_new_session=True)
        finally:
            log.close()

    def start(self) -> StandaloneCluster:
        self.base.mkdir(parents=True, exist_ok=True)
        self.master = self._start("master", "org.apache.spark.deploy.master.Master",
                                  "--host", "127.0.0.1", "--port", str(self.port),
                                  "--webui-port", str(self.ui_port))
        self._wait(lambda state: state.get("status") == "ALIVE", "the master")
        for i in range(self.workers):
            work = self.base / f"worker-{i}"
            work.mkdir(exist_ok=True)
            self.worker_procs.append(self._start(
                f"worker-{i}", "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1", "--port", str(free_port()),
                "--webui-port", str(free_port()), "--cores", str(self.cores),
                "--memory", self.memory, "--work-dir", str(work), self.url))
        self._wait(lambda state: len([w for w in state.get("workers", ())
                                      if w.get("state") == "ALIVE"]) == self.workers,
                   f"{self.workers} workers")
        return self

    def state(self) -> dict:
        """The master's JSON status (workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return json.load(r)

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            for proc in [self.master, *self.worker_procs]:
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"a Spark process exited ({proc.args[1]}, code "
                                       f"{proc.returncode}); logs in {self.base}")
            try:
                if ready(self.state()):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not come up in {self.start_timeout:.0f} s; "
                                   f"logs in {self.base}")
            time.sleep(0.5)

    def executors(self) -> dict[int, int]:
        """The executor JVMs running now (``CoarseGrainedExecutorBackend``), by PID, with the
        PID of the worker that started each."""
        workers = {p.pid for p in self.worker_procs}
        out = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    command = f.read()
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if parent in workers and b"CoarseGrainedExecutorBackend" in command:
                out[int(entry)] = parent
        return out

    def stop(self) -> None:
        for proc in [*self.worker_procs, self.master]:
            stop_group(proc)  # each JVM's group: a worker's holds its executors


class ConnectServer(_Processes):
    """pyspark's Spark Connect server (``SparkConnectServer`` through ``spark-submit``) on
    ``local[cores]``, bound to 127.0.0.1 on a free port: ``sc://127.0.0.1:PORT``."""

    def __init__(self, base_dir: str | os.PathLike[str], cores: int = 2,
                 start_timeout: float = 120.0, python_path: str | None = None) -> None:
        self.base = Path(base_dir)
        self.python_path = python_path  # the server's and its tasks' PYTHONPATH
        self.cores = cores
        self.start_timeout = start_timeout
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> ConnectServer:
        import pyspark

        self.base.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(SPARK_HOME=str(Path(pyspark.__file__).parent), SPARK_LOCAL_IP="127.0.0.1",
                   PYSPARK_PYTHON=sys.executable)
        if self.python_path:
            env["PYTHONPATH"] = self.python_path
        log = open(self.base / "connect-server.log", "ab")
        try:
            self.proc = subprocess.Popen(
                [str(SPARK_CLASS.parent / "spark-submit"),
                 "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                 "--name", "brook-connect", "--master", f"local[{self.cores},3]",
                 "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                 "--conf", f"spark.connect.grpc.binding.port={self.port}",
                 "--conf", "spark.ui.enabled=false",
                 "--conf", "spark.sql.session.timeZone=UTC",
                 "--conf", "spark.python.authenticate.socketTimeout=120s",
                 "spark-internal"],
                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.base,
                start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited ({self.proc.returncode}); "
                                   f"log in {self.base}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Spark Connect server did not listen in "
                                   f"{self.start_timeout:.0f} s; log in {self.base}")
            time.sleep(0.5)

    def stop(self) -> None:
        stop_group(self.proc)
