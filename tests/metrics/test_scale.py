"""Metrics of a real broker process holding 100,000 committed offsets (1,000 groups committing
10 topics x 10 partitions over the wire), scraped over HTTP: every lag series is there with its
exact value in both formats, a scrape costs the broker a small part of a second of CPU (it took
over a second when each series was a prometheus_client sample), and clients are answered while
it is scraped."""

from __future__ import annotations

import gzip
import os
import threading
import time
import urllib.request

import pytest
from kio.schema.errors import ErrorCode
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from brook.protocol.messages import make
from tests.support.broker_harness import BrokerProcess, free_port
from tests.support.kafka_wire import WireClient
from tests.support.wire_requests import batch, create_topic, produce, req_mod
from tests.support.offsets_wire import OffsetsWire

GROUPS, TOPICS, PARTITIONS = 1000, 10, 10
OFFSETS = GROUPS * TOPICS * PARTITIONS
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def records_in(t: int, p: int) -> int:
    return 1 + (t * PARTITIONS + p) % 17


def committed(g: int, t: int, p: int) -> int:
    """Group g's offset of partition p of topic t: 0..17, past the end for some (lag < 0)."""
    return (g * 7 + t * 3 + p) % 18


def expected_lags() -> dict[tuple[str, str, str], float]:
    return {(f"g{g}", f"t{t}", str(p)): records_in(t, p) - committed(g, t, p)
            for g in range(GROUPS) for t in range(TOPICS) for p in range(PARTITIONS)}


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    port = free_port()
    proc = BrokerProcess(tmp_path_factory.mktemp("metrics-scale"), overrides={"metrics.port": port})
    proc.start()
    proc.metrics_port = port
    try:
        with WireClient(proc.bootstrap) as client:
            for t in range(TOPICS):
                assert create_topic(client, f"t{t}", PARTITIONS).error_code == ErrorCode.none
                answers = produce(client, f"t{t}",
                                  {p: batch(records_in(t, p)) for p in range(PARTITIONS)})
                assert all(a.error_code == ErrorCode.none for a in answers.values())
        with OffsetsWire(proc.bootstrap) as wire:
            assert wire.commit_all(
                wire.commit_request(f"g{g}", {f"t{t}": [(p, committed(g, t, p), -1, "")
                                                       for p in range(PARTITIONS)]
                                              for t in range(TOPICS)})
                for g in range(GROUPS)) == GROUPS
        yield proc
    finally:
        proc.close()


def get(port: int, **headers) -> bytes:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200
        body = resp.read()
        return gzip.decompress(body) if resp.headers.get("Content-Encoding") == "gzip" else body


def lags_of(families) -> dict[tuple[str, str, str], float]:
    return {(s.labels["group"], s.labels["topic"], s.labels["partition"]): s.value
            for f in families if f.name == "brook_consumergroup_lag" for s in f.samples}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_every_lag_series_is_exact_in_both_formats(big):
    text = get(big.metrics_port).decode()
    families = list(text_string_to_metric_families(text))
    assert lags_of(families) == expected_lags()
    offsets = [s.value for f in families if f.name == "brook_coordinator_offsets"
               for s in f.samples]
    assert offsets == [OFFSETS]
    # As Prometheus asks: OpenMetrics, gzip; read by the strict OpenMetrics parser.
    text = get(big.metrics_port, Accept=PROMETHEUS_ACCEPT, **{"Accept-Encoding": "gzip"}).decode()
    assert text.endswith("# EOF\n")
    assert lags_of(openmetrics_families(text)) == expected_lags()


def test_a_scrape_costs_the_broker_a_fraction_of_a_second_of_cpu(big):
    get(big.metrics_port)
    pid = big.proc.pid
    before = cpu_seconds(pid)
    scrapes = 4
    for _ in range(scrapes):
        assert len(get(big.metrics_port)) > OFFSETS * 50
    per_scrape = (cpu_seconds(pid) - before) / scrapes
    assert per_scrape < 0.5, f"{per_scrape:.2f} s of broker CPU per scrape of {OFFSETS:,} offsets"


def test_clients_are_answered_while_the_broker_is_scraped(big):
    """ApiVersions and OffsetCommit round trips, back to back on two connections, during three
    scrapes: all answered, none waiting long."""
    m = req_mod(18, 3)
    versions = make(m.ApiVersionsRequest, client_software_name="t", client_software_version="1")
    stop = threading.Event()
    trips: list[tuple[float, float]] = []
    errors: list[BaseException] = []

    def client() -> None:
        try:
            with WireClient(big.bootstrap, timeout=30) as c, OffsetsWire(big.bootstrap) as wire:
                i = 0
                while not stop.is_set():
                    t0 = time.monotonic()
                    c.request(versions)
                    trips.append((t0, time.monotonic() - t0))
                    t0 = time.monotonic()
                    wire.commit("latency-probe", {"t0": [(0, i % 5, -1, "")]})
                    trips.append((t0, time.monotonic() - t0))
                    i += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=client)
    thread.start()
    windows = []
    try:
        time.sleep(0.3)
        for _ in range(3):
            t0 = time.monotonic()
            get(big.metrics_port)
            windows.append((t0, time.monotonic()))
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors
    during = [seconds for t, seconds in trips if any(a <= t <= b for a, b in windows)]
    assert len(during) >= 3
    assert max(during) < 1.0, f"a round trip took {max(during):.2f} s during a scrape"
