"""Fairness between connections: connections that pipeline heavy requests do not starve a
quiet client (real broker process, raw sockets)."""

from __future__ import annotations

import socket
import statistics
import struct
import threading
import time

from brook.protocol.messages import make
from tests.support.broker_harness import create_topic_confluent
from tests.support.kafka_wire import frame, request_class

PARTITIONS = 5000
BUSY_CONNECTIONS = 20
PIPELINE = 16

API_VERSIONS = frame(make(request_class(18, 3), client_software_name="t", client_software_version="1"), 1)


def _metadata_request(topic: str) -> bytes:
    cls = request_class(3, 12)
    mod = __import__(cls.__module__, fromlist=["x"])
    return frame(make(cls, topics=(make(mod.MetadataRequestTopic, name=topic, topic_id=None),),
                      allow_auto_topic_creation=False, include_topic_authorized_operations=False), 7)


def _recv_frame(s: socket.socket) -> bytes:
    head = s.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        raise ConnectionError("closed")
    size = struct.unpack(">i", head)[0]
    return s.recv(size, socket.MSG_WAITALL)


def test_a_quiet_client_is_answered_in_a_median_100_ms_while_others_pipeline_big_metadata(broker_factory):
    broker = broker_factory()
    create_topic_confluent(broker.bootstrap, "wide", PARTITIONS, timeout=120)
    request = _metadata_request("wide")
    stop = threading.Event()
    answers = [0] * BUSY_CONNECTIONS

    def busy(i: int) -> None:
        with socket.create_connection(("127.0.0.1", broker.port)) as s:
            try:
                while not stop.is_set():
                    s.sendall(request * PIPELINE)
                    for _ in range(PIPELINE):
                        _recv_frame(s)
                        answers[i] += 1
            except OSError:
                pass

    threads = [threading.Thread(target=busy, args=(i,), daemon=True) for i in range(BUSY_CONNECTIONS)]
    for t in threads:
        t.start()
    try:
        time.sleep(2.0)  # every busy connection has requests queued
        latencies = []
        with socket.create_connection(("127.0.0.1", broker.port)) as quiet:
            quiet.settimeout(60)
            for _ in range(20):
                t0 = time.perf_counter()
                quiet.sendall(API_VERSIONS)
                _recv_frame(quiet)
                latencies.append((time.perf_counter() - t0) * 1000)
                time.sleep(0.1)
        busy_answers = sum(answers)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    latencies.sort()
    print(f"\nApiVersions under {BUSY_CONNECTIONS} connections pipelining Metadata of {PARTITIONS} "
          f"partitions: median {statistics.median(latencies):.0f} ms, max {latencies[-1]:.0f} ms; "
          f"{busy_answers} Metadata answers meanwhile")
    assert busy_answers > BUSY_CONNECTIONS * PIPELINE  # the load was there
    # Starvation costs seconds (it was 29.7 s with 50 connections; 17 s with 3). On a loaded
    # CI machine the quiet client's own thread waits for the GIL behind the 20 busy ones, so
    # single samples of 110 ms were seen: the median carries the 100 ms bound, the tail a
    # bound that still fails by two orders of magnitude without fairness.
    assert statistics.median(latencies) < 100, latencies
    assert latencies[-2] < 500, latencies
