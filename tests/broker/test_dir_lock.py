"""One broker per log dir: a second broker on a dir another one uses refuses to start, with one
line and without touching the dir (a clean-shutdown marker it left would make the first
broker's next crash look clean), and a listener port already in use stops a start with one
line naming it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.support.broker_harness import BrokerProcess
from brook.broker.broker import Broker
from brook.broker.config import BrokerConfig
from brook.storage.dir_lock import LOCK_FILE, LogDirInUseError, LogDirLocks
from brook.storage.manager import CLEAN_SHUTDOWN_MARKER
from tests.support.kafka_wire import WireClient
from tests.support.wire_requests import batch, create_topic, fetch_request, produce


def _run(log_dirs: str, port: int | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "brook", "broker", "-o", f"log.dirs={log_dirs}",
           "-o", f"listeners=PLAINTEXT://127.0.0.1:{port or 0}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_locks_are_exclusive_across_holders_and_given_back(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    first = LogDirLocks([a, b])
    first.acquire()
    assert first.held and os.path.exists(os.path.join(b, LOCK_FILE))
    second = LogDirLocks([b])
    with pytest.raises(LogDirInUseError, match="in use by another broker"):
        second.acquire()
    assert not second.held
    partial = LogDirLocks([str(tmp_path / "c"), a])  # c is free, a is not: neither is kept
    with pytest.raises(LogDirInUseError):
        partial.acquire()
    third = LogDirLocks([str(tmp_path / "c")])
    third.acquire()  # c was given back when a could not be had
    third.release()
    with pytest.raises(RuntimeError, match="locked already"):
        first.acquire()  # a second acquire keeps what the first took
    assert first.held
    with pytest.raises(LogDirInUseError):
        LogDirLocks([a]).acquire()
    first.release()
    second.acquire()
    second.release()


def test_a_second_broker_in_one_process_cannot_open_the_same_dirs(tmp_path):
    config = BrokerConfig.from_props({"log.dirs": str(tmp_path)})
    first = Broker(config)
    first.open()
    try:
        second = Broker(config)
        with pytest.raises(LogDirInUseError):
            second.open()
    finally:
        first.close()
    again = Broker(config)
    again.open()  # closed: the dir is free again
    again.close()


def test_a_second_broker_process_on_a_dir_in_use_refuses_and_leaves_it_as_it_was(tmp_path):
    """The second broker exits 1 with one line; the first one's next crash is still recovered
    (the second left no clean-shutdown marker), and its acknowledged records are there."""
    with BrokerProcess(tmp_path / "broker") as first:
        log_dir = first.log_dir
        with WireClient(first.bootstrap) as client:
            create_topic(client, "t", 1)
            assert produce(client, "t", {0: batch(10)})[0].error_code == 0
        done = _run(str(log_dir))
        assert done.returncode == 1, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.startswith("brook:")]
        assert lines == [f"brook: log dir {log_dir} is in use by another broker (its .lock file "
                         f"is locked): stop that broker, or give this one other log.dirs"]
        assert "Traceback" not in done.stderr and "stopped cleanly" not in done.stderr
        assert not (log_dir / CLEAN_SHUTDOWN_MARKER).exists()
        first.stop(signal.SIGKILL)
        first.start()  # the kernel dropped the killed broker's lock
        with WireClient(first.bootstrap) as client:
            answer = client.request(fetch_request("t", {0: 0}))
            part = answer.responses[0].partitions[0]
            assert part.error_code == 0 and part.high_watermark == 10  # acknowledged, kept
        assert "unclean shutdown" in first.stderr_path.read_text()


def test_a_listener_port_in_use_stops_the_start_with_a_line_naming_it(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = _run(str(tmp_path / "data"), port)
    assert done.returncode == 1
    assert (f"brook: cannot listen on PLAINTEXT://127.0.0.1:{port}: Address already in use"
            in done.stderr.splitlines())
    assert "Traceback" not in done.stderr and "[Errno" not in done.stderr
    assert "stopped cleanly" not in done.stderr
    again = _run_until_started(tmp_path / "data")  # the failed start released its lock
    assert again


def _run_until_started(log_dir) -> bool:
    listeners = f"{log_dir}.listeners"
    proc = subprocess.Popen([sys.executable, "-m", "brook", "broker", "-o", f"log.dirs={log_dir}",
                             "-o", "listeners=PLAINTEXT://127.0.0.1:0",
                             "--listeners-file", listeners],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with open(listeners) as f:
                    port = int(f.read().rsplit(":", 1)[1])
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
