"""Creating topics and partitions within bounds: partitions per request and per broker,
creation that leaves the event loop to others, a topic created whole or not at all, and the
open-files limit raised at start (real broker processes, hand-built requests)."""

from __future__ import annotations

import resource
import socket
import struct
import threading
import time
from datetime import timedelta

from kio.schema.errors import ErrorCode

from brook.protocol.messages import make
from tests.support.kafka_wire import WireClient, frame, request_class


def _create(w: WireClient, topics: dict[str, int], validate_only: bool = False):
    cls = request_class(19, 7)
    mod = __import__(cls.__module__, fromlist=["x"])
    answer = w.request(make(cls, topics=tuple(
        make(mod.CreatableTopic, name=n, num_partitions=p, replication_factor=1, assignments=(), configs=())
        for n, p in topics.items()), timeout=timedelta(seconds=60), validate_only=validate_only))
    return {t.name: t for t in answer.topics}


def _add_partitions(w: WireClient, topic: str, count: int):
    cls = request_class(37, 3)
    mod = __import__(cls.__module__, fromlist=["x"])
    answer = w.request(make(cls, topics=(make(mod.CreatePartitionsTopic, name=topic, count=count,
                                               assignments=None),),
                            timeout=timedelta(seconds=60), validate_only=False))
    return answer.results[0]


def _topics(w: WireClient) -> dict[str, int]:
    meta = w.request(make(request_class(3, 12), topics=None, allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False))
    return {t.name: len(t.partitions) for t in meta.topics}


def test_partitions_per_request_are_capped_across_its_topics(broker_factory):
    broker = broker_factory({"max.partitions.per.request": 100})
    with WireClient(broker.bootstrap) as w:
        for validate_only in (True, False):
            answer = _create(w, {"a": 40, "b": 40, "c": 40}, validate_only)
            assert {n: t.error_code for n, t in answer.items()} == dict.fromkeys("abc", ErrorCode.policy_violation)
            assert "120 partitions in all, more than max.partitions.per.request=100" in answer["a"].error_message
        assert _topics(w) == {}
        assert all(t.error_code == ErrorCode.none for t in _create(w, {"a": 40, "b": 60}).values())
        grown = _add_partitions(w, "a", 141)
        assert grown.error_code == ErrorCode.policy_violation
        assert _topics(w) == {"a": 40, "b": 60}


def test_partitions_per_broker_are_capped(broker_factory):
    broker = broker_factory({"max.broker.partitions": 50, "num.partitions": 4})
    with WireClient(broker.bootstrap) as w:
        assert _create(w, {"first": 30})["first"].error_code == ErrorCode.none
        answer = _create(w, {"second": 15, "third": 15})  # the second fits; then no room
        assert answer["second"].error_code == ErrorCode.none
        assert answer["third"].error_code == ErrorCode.invalid_partitions
        assert "over max.broker.partitions=50" in answer["third"].error_message
        assert _add_partitions(w, "first", 36).error_code == ErrorCode.invalid_partitions
        assert _add_partitions(w, "first", 35).error_code == ErrorCode.none
        # Auto-creation counts too: Metadata for a new topic of num.partitions=4 has no room.
        meta = w.request(make(request_class(3, 12), topics=(make(
            __import__(request_class(3, 12).__module__, fromlist=["x"]).MetadataRequestTopic,
            name="auto", topic_id=None),), allow_auto_topic_creation=True,
            include_topic_authorized_operations=False))
        assert meta.topics[0].error_code == ErrorCode.invalid_partitions
        assert _topics(w) == {"first": 35, "second": 15}
    broker.restart()
    with WireClient(broker.bootstrap) as w:
        assert _topics(w) == {"first": 35, "second": 15}


def test_a_topic_whose_partitions_cannot_all_be_made_leaves_no_trace(broker_factory):
    broker = broker_factory()
    (broker.log_dir / "half-7").write_text("in the way")  # partition 7's log dir cannot be made
    with WireClient(broker.bootstrap) as w:
        answer = _create(w, {"half": 20, "whole": 3})
        assert answer["half"].error_code == ErrorCode.kafka_storage_error
        assert answer["whole"].error_code == ErrorCode.none
        assert _topics(w) == {"whole": 3}  # not listed with partitions that do not exist
    assert sorted(p.name for p in broker.log_dir.glob("half-*")) == ["half-7"]  # its logs went
    broker.restart()  # and the broker starts
    (broker.log_dir / "half-7").unlink()
    with WireClient(broker.bootstrap) as w:
        assert _create(w, {"half": 20})["half"].error_code == ErrorCode.none
        assert _topics(w) == {"whole": 3, "half": 20}


API_VERSIONS = frame(make(request_class(18, 3), client_software_name="t", client_software_version="1"), 1)


def test_creating_10000_partitions_does_not_stall_other_clients(broker_factory):
    broker = broker_factory()
    latencies: list[float] = []
    done = threading.Event()

    def quiet() -> None:
        with socket.create_connection(("127.0.0.1", broker.port)) as s:
            s.settimeout(60)
            while not done.is_set():
                t0 = time.perf_counter()
                s.sendall(API_VERSIONS)
                size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
                s.recv(size, socket.MSG_WAITALL)
                latencies.append((time.perf_counter() - t0) * 1000)
                time.sleep(0.02)

    thread = threading.Thread(target=quiet, daemon=True)
    thread.start()
    time.sleep(0.3)
    with WireClient(broker.bootstrap, timeout=120) as w:
        t0 = time.monotonic()
        answer = _create(w, {"wide": 10_000})
        took = time.monotonic() - t0
    time.sleep(0.1)
    done.set()
    thread.join(30)
    assert answer["wide"].error_code == ErrorCode.none
    print(f"\n10,000 partitions created in {took:.1f} s; ApiVersions meanwhile: "
          f"max {max(latencies):.0f} ms over {len(latencies)} requests")
    assert len(latencies) > 10 and max(latencies) < 250, sorted(latencies)[-5:]


def test_the_soft_open_files_limit_is_raised_to_the_hard_one_at_start(broker_factory):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(soft, 1024)
    if low == hard:
        import pytest
        pytest.skip("the hard open files limit is 1024 or less here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))  # the broker inherits it
    try:
        broker = broker_factory()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    with open(f"/proc/{broker.proc.pid}/limits") as f:
        [line] = [line for line in f if line.startswith("Max open files")]
    broker_soft, broker_hard = line.split()[3:5]
    assert broker_soft == broker_hard == str(hard)
    assert f"open files limit raised from {low} to {hard}" in broker.stderr_tail()
