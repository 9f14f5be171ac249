"""Coverage-guided fuzzing (atheris) of the request path, and what it found.

`fuzz_requests.py` is the harness; here it runs for FUZZ_SECONDS (ATHERIS_SECONDS; 45 in CI,
where the environment variable CI is set, 15 elsewhere) from a seed corpus of one valid request
per API and version, and must find nothing. Longer runs:

    .venv/bin/python tests/reliability/fuzz_requests.py -max_total_time=3600 <corpus dir> <seed dir>

The inputs it found are kept below as requests to a real broker process: each one either
killed the broker or failed a handler with a traceback before the fix that goes with it. So is
invalid UTF-8, which kio refuses while parsing (Kafka's parser decodes it with replacement
characters instead; closing the connection is the answer here).
"""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.broker_harness import BrokerProcess
from tests.support.kafka_wire import WireClient

pytest.importorskip("atheris")

HARNESS = Path(__file__).with_name("fuzz_requests.py")
FUZZ_SECONDS = int(os.environ.get("ATHERIS_SECONDS", "45" if os.environ.get("CI") else "15"))


def test_atheris_finds_nothing_in_the_request_path(tmp_path):
    seeds = tmp_path / "seeds"
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    subprocess.run([sys.executable, str(HARNESS), "--seeds", str(seeds)], check=True,
                   capture_output=True, timeout=300)
    assert len(list(seeds.iterdir())) > 100  # every API and version the broker serves
    run = subprocess.run(
        [sys.executable, str(HARNESS), f"-max_total_time={FUZZ_SECONDS}", "-rss_limit_mb=4096",
         "-seed=1", f"-artifact_prefix={tmp_path}/", str(corpus), str(seeds)],
        capture_output=True, text=True, timeout=FUZZ_SECONDS + 300, cwd=tmp_path)
    log = run.stderr
    crashes = list(tmp_path.glob("crash-*")) + list(tmp_path.glob("oom-*"))
    tail = "\n".join(line for line in log.splitlines()[-60:]
                     if not line.startswith("INFO: Instrumenting"))
    assert run.returncode == 0 and not crashes, f"atheris found {crashes}:\n{tail}"
    done = re.search(r"Done (\d+) runs", log)
    assert done and int(done.group(1)) > 1000, tail  # it really ran inputs through the broker


# ---------------------------------------------------------------- what it found


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("atheris-found")) as b:
        yield b


def send_and_read(broker, data: bytes) -> bytes:
    """Send ``data`` on a fresh connection; everything the broker answers before closing."""
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        sock.sendall(data)
        sock.settimeout(2)
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except (socket.timeout, ConnectionResetError):
            pass
        return got


def frame(header: bytes, body: bytes) -> bytes:
    return struct.pack(">i", len(header) + len(body)) + header + body


def header(key: int, version: int, flexible: bool) -> bytes:
    base = struct.pack(">hhih", key, version, 7, 4) + b"test"
    return base + (b"\x00" if flexible else b"")


def still_serving(broker) -> None:
    assert broker.running, broker.stderr_tail()
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    with WireClient(broker.bootstrap) as c:
        resp = c.request(ApiVersionsRequest(client_software_name="t",
                                            client_software_version="1"))
        assert resp.error_code == 0


@pytest.mark.parametrize("count", [b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x07"],
                         ids=["4-billion", "2-billion"])
def test_a_compact_array_count_of_billions_closes_the_connection(broker, count):
    # Metadata v9: topics is a compact array; kio reserved 8-24 bytes per announced element
    # before reading any, and a failed allocation aborted the broker.
    assert send_and_read(broker, frame(header(3, 9, True), count)) == b""
    still_serving(broker)


def test_a_classic_array_count_of_billions_closes_the_connection(broker):
    # Metadata v0: a 4-byte count of 2^31 - 1 topics with no topic after it (16 GiB reserved).
    assert send_and_read(broker, frame(header(3, 0, False), b"\x7f\xff\xff\xff")) == b""
    still_serving(broker)


def test_a_null_where_the_schema_allows_none_closes_the_connection(broker):
    # OffsetCommit v2 with a topic whose partitions array is null (-1): the handler failed
    # iterating it, with a traceback in the log.
    body = (struct.pack(">h", 1) + b"g" + struct.pack(">i", -1) + struct.pack(">h", 0)
            + struct.pack(">q", -1) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
            + struct.pack(">i", -1))
    assert send_and_read(broker, frame(header(8, 2, False), body)) == b""
    still_serving(broker)
    log = broker.stderr_path.read_text()
    assert "Traceback" not in log, log[-3000:]
    assert "null topics[0].partitions" in log


@pytest.mark.parametrize("where", ["client id", "topic name"])
def test_invalid_utf8_closes_only_that_connection(broker, where):
    bad = b"\xff\xfe\xc3"
    if where == "client id":
        head = struct.pack(">hhih", 3, 1, 7, len(bad)) + bad
        body = struct.pack(">i", 0)  # Metadata v1, no topics
    else:
        head = header(3, 1, False)
        body = struct.pack(">ih", 1, len(bad)) + bad
    with WireClient(broker.bootstrap) as bystander:
        assert send_and_read(broker, frame(head, body)) == b""
        from kio.schema.api_versions.v3.request import ApiVersionsRequest

        resp = bystander.request(ApiVersionsRequest(client_software_name="t",
                                                    client_software_version="1"))
        assert resp.error_code == 0  # a connection opened before is still served
    still_serving(broker)
    assert "malformed request (api key 3 v1)" in broker.stderr_path.read_text()


@pytest.mark.parametrize("name, topic_id", [(None, "00000000-0000-0000-0000-000000000000"),
                                            ("t", "5b3c3d1e-0000-4000-8000-000000000001")],
                         ids=["null-name", "topic-id"])
def test_metadata_v11_by_topic_id_closes_the_connection(broker, name, topic_id):
    # Versions 10 and 11 have a topic id field but no lookups by id (Kafka refuses such a
    # request as invalid); a null name could not even be answered in v11, whose response names
    # are not nullable: the handler answered it and encoding the response failed.
    import uuid

    from kio.schema.metadata.v11.request import MetadataRequest, MetadataRequestTopic

    body = MetadataRequest(topics=(MetadataRequestTopic(topic_id=uuid.UUID(topic_id),
                                                        name=name),),
                           allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)
    encoder = WireClient.__new__(WireClient)
    encoder.correlation_id = 0
    assert send_and_read(broker, encoder.encode(body)) == b""
    still_serving(broker)
    log = broker.stderr_path.read_text()
    assert "invalid Metadata v11 request: topic ids are not supported" in log
    assert "Traceback" not in log, log[-3000:]
