"""`make console` (python -m brook.demo_console): a broker with sample traffic and the console,
for a first look: its pages show the sample topics, groups and transactions, and SIGTERM stops
it all."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

from tests.support.broker_harness import free_port


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = condition()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_make_console_serves_the_console_over_sample_traffic(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "demo.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "brook.demo_console"], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "CONSOLE_LISTEN": f"127.0.0.1:{port}"})
    try:
        wait_for(lambda: "dashboard" in get(url + "/groups") and "billing" in get(url + "/groups"),
                 60, "the sample groups")
        topics = get(url + "/topics")
        for topic in ("page-views", "orders", "sensor-readings", "payments"):
            assert f">{topic}<" in topics
        wait_for(lambda: "kind-json" in get(url + "/topics/orders/messages"), 30,
                 "an order, pretty-printed")
        wait_for(lambda: re.search(r'data-control="ABORT"', get(
            url + "/topics/payments/messages?limit=100")), 60, "an aborted payment")
        page = get(url + "/topics/payments/messages?limit=100")
        assert 'data-control="COMMIT"' in page and 'data-transaction="aborted"' in page
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(40) == 0 or proc.returncode is not None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            log.close()
    assert "Traceback" not in (tmp_path / "demo.log").read_text(errors="replace")
