"""Prometheus metrics of a real broker process (`metrics.port`), scraped over HTTP and parsed
with prometheus_client's parser; traffic from exact wire requests and from confluent-kafka."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
from kio.schema.errors import ErrorCode
from prometheus_client.parser import text_string_to_metric_families

from brook.protocol.messages import make
from tests.support.broker_harness import BrokerProcess, free_port, port_accepts
from tests.support.kafka_wire import WireClient
from tests.support.wire_requests import batch, create_topic, delete_topic, fetch_request, produce, req_mod

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

METRICS_BROKER = {"num.partitions": 4, "group.initial.rebalance.delay.ms": 0,
                  "offsets.topic.num.partitions": 5}


class Scrape:
    """One scrape: sample (name, labels) -> value."""

    def __init__(self, port: int) -> None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            assert resp.status == 200
            self.text = resp.read().decode()
        self.samples = {}
        for family in text_string_to_metric_families(self.text):
            for s in family.samples:
                self.samples[(s.name, tuple(sorted(s.labels.items())))] = s.value

    def get(self, name: str, **labels) -> float | None:
        return self.samples.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))

    def value(self, name: str, **labels) -> float:
        """The sample's value, 0 for a labelled child not made yet (a counter never touched)."""
        v = self.get(name, **labels)
        return 0.0 if v is None else v

    def labelled(self, name: str) -> dict[tuple, float]:
        return {labels: v for (n, labels), v in self.samples.items() if n == name}


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory):
    overrides = dict(METRICS_BROKER, **{"metrics.port": free_port()})
    proc = BrokerProcess(tmp_path_factory.mktemp("broker-metrics"), overrides=overrides)
    proc.start()
    proc.metrics_port = overrides["metrics.port"]
    try:
        yield proc
    finally:
        proc.close()


@pytest.fixture
def client(mbroker):
    with WireClient(mbroker.bootstrap) as c:
        yield c


def scrape(broker) -> Scrape:
    return Scrape(broker.metrics_port)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_message_conversions_are_counted_in_records(mbroker, client):
    """Kafka's ProduceMessageConversionsPerSec and FetchMessageConversionsPerSec: records of
    Produce v0-v2 up-converted, records down-converted for Fetch v0-v3; current versions none."""
    from brook.records import Codec, LegacyMessage, encode_message_set
    topic = unique("conv")
    create_topic(client, topic, 1)
    old = encode_message_set([LegacyMessage(i, 1, timestamp=int(time.time() * 1000), value=b"v")
                              for i in range(3)], 1, Codec.GZIP)
    assert produce(client, topic, {0: old}, version=2)[0].error_code == ErrorCode.none
    assert produce(client, topic, {0: batch(2)})[0].error_code == ErrorCode.none
    client.request(fetch_request(topic, {0: 0}))  # current: no conversion
    s = scrape(mbroker)
    assert s.get("brook_topic_produce_message_conversions_total", topic=topic) == 3
    assert s.get("brook_topic_fetch_message_conversions_total", topic=topic) == 0
    client.request(fetch_request(topic, {0: 0}, version=3))
    client.request(fetch_request(topic, {0: 3}, version=0))
    assert scrape(mbroker).get("brook_topic_fetch_message_conversions_total", topic=topic) == 5 + 2


def test_produce_counts_bytes_and_messages_in_exactly(mbroker, client):
    topic = unique("in")
    assert create_topic(client, topic, 2).error_code == ErrorCode.none
    b0, b1 = batch(5, value=b"x" * 100), batch(3, value=b"y" * 37)
    before = scrape(mbroker)
    answers = produce(client, topic, {0: b0, 1: b1, 7: batch(2)})  # partition 7 does not exist
    assert [answers[i].error_code for i in (0, 1, 7)] == [
        ErrorCode.none, ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    s = scrape(mbroker)
    assert s.get("brook_topic_bytes_in_total", topic=topic) == len(b0) + len(b1)
    assert s.get("brook_topic_messages_in_total", topic=topic) == 8

    b2 = batch(4, value=b"z" * 10)
    produce(client, topic, {1: b2}, acks=0)  # no answer: counted all the same
    deadline = time.monotonic() + 10
    while scrape(mbroker).value("brook_topic_messages_in_total", topic=topic) < 12:
        assert time.monotonic() < deadline, "the acks=0 produce was not counted"
        time.sleep(0.05)
    s = scrape(mbroker)
    assert s.get("brook_topic_bytes_in_total", topic=topic) == len(b0) + len(b1) + len(b2)
    assert s.get("brook_topic_messages_in_total", topic=topic) == 12
    assert (s.value("brook_requests_total", request="Produce")
            - before.value("brook_requests_total", request="Produce")) == 2


def test_a_refused_produce_counts_nothing(mbroker, client):
    topic = unique("refused")
    create_topic(client, topic, 1, configs=[("max.message.bytes", "200")])
    answers = produce(client, topic, {0: batch(3, value=b"v" * 300)})
    assert answers[0].error_code == ErrorCode.message_too_large
    s = scrape(mbroker)
    assert s.get("brook_topic_bytes_in_total", topic=topic) is None
    assert s.get("brook_topic_messages_in_total", topic=topic) is None


def test_fetch_counts_the_record_bytes_it_sends(mbroker, client):
    topic = unique("out")
    create_topic(client, topic, 2)
    b0, b1 = batch(6, value=b"a" * 80), batch(2, value=b"b" * 500)
    produce(client, topic, {0: b0, 1: b1})
    assert scrape(mbroker).value("brook_topic_bytes_out_total", topic=topic) == 0

    resp = client.request(fetch_request(topic, {0: 0, 1: 0}))
    sent = sum(len(p.records or b"") for p in resp.responses[0].partitions)
    assert sent == len(b0) + len(b1)
    assert scrape(mbroker).get("brook_topic_bytes_out_total", topic=topic) == sent

    # Nothing new to send, an offset out of range: no bytes.
    client.request(fetch_request(topic, {0: 6, 1: 2}))
    resp = client.request(fetch_request(topic, {0: 99}))
    assert resp.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
    assert scrape(mbroker).get("brook_topic_bytes_out_total", topic=topic) == sent

    # A fetch session (KIP-227): the full fetch that opens it sends the records; an incremental
    # one from the end has nothing to send, one back at partition 1's start sends only those.
    resp = client.request(dataclasses.replace(fetch_request(topic, {0: 0, 1: 0}), session_epoch=0))
    assert resp.error_code == ErrorCode.none and resp.session_id != 0
    assert scrape(mbroker).get("brook_topic_bytes_out_total", topic=topic) == 2 * sent
    session = resp.session_id
    resp = client.request(dataclasses.replace(fetch_request(topic, {0: 6, 1: 2}),
                                              session_id=session, session_epoch=1))
    assert resp.error_code == ErrorCode.none and not resp.responses
    assert scrape(mbroker).get("brook_topic_bytes_out_total", topic=topic) == 2 * sent
    resp = client.request(dataclasses.replace(fetch_request(topic, {1: 0}),
                                              session_id=session, session_epoch=2))
    assert [p.partition_index for p in resp.responses[0].partitions] == [1]
    assert scrape(mbroker).get("brook_topic_bytes_out_total", topic=topic) == 2 * sent + len(b1)


def test_requests_are_counted_per_api_with_their_time(mbroker, client):
    before = scrape(mbroker)
    m = req_mod(18, 3)
    for _ in range(7):
        client.request(make(m.ApiVersionsRequest, client_software_name="t", client_software_version="1"))
    m = req_mod(3, 12)
    for _ in range(3):
        client.request(make(m.MetadataRequest, topics=(), allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False))
    after = scrape(mbroker)

    def delta(name, **labels):
        return after.value(name, **labels) - before.value(name, **labels)

    assert delta("brook_requests_total", request="ApiVersions") == 7
    assert delta("brook_requests_total", request="Metadata") == 3
    assert delta("brook_requests_total", request="Produce") == 0
    assert after.get("brook_requests_total", request="OffsetCommit") is not None  # every API listed
    for api, n in (("ApiVersions", 7), ("Metadata", 3)):
        assert delta("brook_request_total_time_seconds_count", request=api) == n
        assert delta("brook_request_total_time_seconds_bucket", request=api, le="+Inf") == n
        assert 0 < delta("brook_request_total_time_seconds_sum", request=api) < n * 5


def test_partition_gauges_are_the_logs_offsets_and_sizes(mbroker, client):
    topic = unique("logs")
    create_topic(client, topic, 3)
    b0, b1 = batch(5), batch(2, value=b"q" * 1000)
    produce(client, topic, {0: b0})
    produce(client, topic, {0: b1, 2: b1})
    m = req_mod(2, 7)
    body = make(m.ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=(make(
        m.ListOffsetsTopic, name=topic, partitions=tuple(
            make(m.ListOffsetsPartition, partition_index=p, current_leader_epoch=-1, timestamp=-1)
            for p in range(3))),))
    ends = {p.partition_index: p.offset for p in client.request(body).topics[0].partitions}
    assert ends == {0: 7, 1: 0, 2: 2}
    s = scrape(mbroker)
    for p in range(3):
        assert s.get("brook_log_end_offset", topic=topic, partition=p) == ends[p]
        assert s.get("brook_log_start_offset", topic=topic, partition=p) == 0
        assert s.get("brook_log_segments", topic=topic, partition=p) == 1
    assert s.get("brook_log_size_bytes", topic=topic, partition=0) == len(b0) + len(b1)
    assert s.get("brook_log_size_bytes", topic=topic, partition=1) == 0
    assert s.get("brook_log_size_bytes", topic=topic, partition=2) == len(b1)


def test_a_deleted_topic_leaves_the_metrics(mbroker, client):
    topic = unique("gone")
    create_topic(client, topic, 1)
    produce(client, topic, {0: batch(2)})
    client.request(fetch_request(topic, {0: 0}))
    s = scrape(mbroker)
    assert s.get("brook_topic_bytes_in_total", topic=topic) and s.get("brook_topic_bytes_out_total", topic=topic)
    assert s.get("brook_log_end_offset", topic=topic, partition=0) == 2
    assert delete_topic(client, topic) == ErrorCode.none
    s = scrape(mbroker)
    assert not [k for k in s.samples if ("topic", topic) in k[1]], "metrics of a deleted topic"
    # Created again under the same name, it starts from zero.
    create_topic(client, topic, 1)
    produce(client, topic, {0: batch(1)})
    assert scrape(mbroker).get("brook_topic_messages_in_total", topic=topic) == 1


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 200})


def _poll_until_assigned(c: Consumer, partitions: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while len(c.assignment()) < partitions:
        assert time.monotonic() < deadline, f"no assignment within {timeout}s"
        c.poll(0.05)


def test_consumer_group_lag_states_and_the_offsets_cache(mbroker, client):
    """A subscribed group (Stable) and a simple consumer's group (offsets only, Empty), each
    with committed offsets: the exact lag per partition, groups per state, cached offsets."""
    topic = unique("lag")
    create_topic(client, topic, 2)
    produce(client, topic, {0: batch(5), 1: batch(3)})
    produce(client, topic, {0: batch(4)})  # ends: p0 = 9, p1 = 3
    group, simple = unique("grp"), unique("simple")
    before = scrape(mbroker)

    member = _consumer(mbroker.bootstrap, group)
    member.subscribe([topic])
    try:
        _poll_until_assigned(member, 2)
        member.commit(offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 3)],
                      asynchronous=False)
        loner = _consumer(mbroker.bootstrap, simple)  # assign() and commit: no group membership
        try:
            loner.commit(offsets=[TopicPartition(topic, 1, 1)], asynchronous=False)
        finally:
            loner.close()
        s = scrape(mbroker)
        # Ends 9 and 3; committed: the group 2 and 3, the simple consumer 1 of partition 1.
        expected = {(group, 0): 7, (group, 1): 0, (simple, 1): 2}
        for (g, p), lag in expected.items():
            assert s.get("brook_consumergroup_lag", group=g, topic=topic, partition=p) == lag
        assert s.get("brook_consumergroup_lag", group=simple, topic=topic, partition=0) is None

        def state_delta(snapshot, state):
            return (snapshot.value("brook_coordinator_groups", state=state)
                    - before.value("brook_coordinator_groups", state=state))

        assert state_delta(s, "Stable") == 1
        assert state_delta(s, "Empty") == 1  # the simple consumer's group, known by its offsets
        assert state_delta(s, "PreparingRebalance") == state_delta(s, "CompletingRebalance") == 0
        assert (s.value("brook_coordinator_offsets")
                - before.value("brook_coordinator_offsets")) == 3
        assert s.value("brook_coordinator_rebalances_total") >= 1 + before.value(
            "brook_coordinator_rebalances_total")

        produce(client, topic, {1: batch(2)})  # the high watermark moves on: so does the lag
        assert scrape(mbroker).get("brook_consumergroup_lag", group=group, topic=topic,
                                   partition=1) == 2
    finally:
        member.close()  # LeaveGroup: the group is Empty, its offsets stay
    s = scrape(mbroker)
    assert s.value("brook_coordinator_groups", state="Stable") - before.value(
        "brook_coordinator_groups", state="Stable") == 0
    assert s.value("brook_coordinator_groups", state="Empty") - before.value(
        "brook_coordinator_groups", state="Empty") == 2
    assert s.get("brook_consumergroup_lag", group=group, topic=topic, partition=0) == 7


def test_metrics_off_by_default(tmp_path):
    from brook.broker.config import BrokerConfig
    from brook.broker.server import BrokerServer

    assert BrokerServer(BrokerConfig.from_props({"log.dirs": str(tmp_path)})).broker.metrics is None
    server = BrokerServer(BrokerConfig.from_props({"log.dirs": str(tmp_path), "metrics.port": "9404"}))
    assert server.broker.metrics is not None and server.broker.metrics.port is None  # not serving yet


@pytest.mark.parametrize("value", ["abc", "", "0", "-1", "65536", "9404.5"])
def test_an_invalid_metrics_port_is_a_config_error(value):
    from brook.broker.config import BrokerConfig, ConfigError

    with pytest.raises(ConfigError, match="metrics.port"):
        BrokerConfig.from_props({"metrics.port": value})


def _run_broker(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "brook", "broker", "-o", f"log.dirs={tmp_path / 'data'}",
           "-o", "listeners=PLAINTEXT://127.0.0.1:0"]
    for o in overrides:
        cmd += ["-o", o]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_the_broker_refuses_to_start_with_an_invalid_metrics_port(tmp_path):
    done = _run_broker(tmp_path, "metrics.port=abc")
    assert done.returncode == 2
    assert "invalid configuration" in done.stderr and "metrics.port" in done.stderr


def test_a_metrics_port_in_use_stops_the_start_with_a_clear_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = _run_broker(tmp_path, f"metrics.port={port}")
    assert done.returncode == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_serving_starts_and_stops_with_the_broker(broker_factory):
    port = free_port()
    broker = broker_factory({"metrics.port": port})
    with WireClient(broker.bootstrap) as c:
        create_topic(c, "t", 1)
        produce(c, "t", {0: batch(3)})
    assert Scrape(port).get("brook_topic_messages_in_total", topic="t") == 3
    broker.stop()
    assert not port_accepts(port)
    broker.start()  # the same port again, the counters from zero, the logs as they were
    s = Scrape(port)
    assert s.get("brook_topic_messages_in_total", topic="t") is None
    assert s.get("brook_log_end_offset", topic="t", partition=0) == 3
    assert s.get("process_resident_memory_bytes") > 0


def test_two_brokers_count_apart(broker_factory):
    ports = [free_port(), free_port()]
    brokers = [broker_factory({"metrics.port": p}) for p in ports]
    for i, b in enumerate(brokers):
        with WireClient(b.bootstrap) as c:
            create_topic(c, "t", 1)
            produce(c, "t", {0: batch(i + 1)})
    assert [Scrape(p).get("brook_topic_messages_in_total", topic="t") for p in ports] == [1, 2]


def test_offsets_partition_load_time_after_a_restart(broker_factory):
    port = free_port()
    broker = broker_factory({**METRICS_BROKER, "metrics.port": port})
    topic, group = "loaded", "reloaded-group"
    with WireClient(broker.bootstrap) as c:
        create_topic(c, topic, 1)
        produce(c, topic, {0: batch(4)})
    loner = _consumer(broker.bootstrap, group)
    try:
        loner.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        loner.close()
    broker.restart()
    deadline = time.monotonic() + 30
    while True:
        s = Scrape(port)
        loaded = s.labelled("brook_coordinator_partition_records_loaded")
        if sum(loaded.values()) >= 1:
            break
        assert time.monotonic() < deadline, "the offsets partitions were not loaded"
        time.sleep(0.1)
    times = s.labelled("brook_coordinator_partition_load_time_seconds")
    assert len(times) == 5 and all(t >= 0 for t in times.values())
    assert s.get("brook_consumergroup_lag", group=group, topic=topic, partition=0) == 3
    assert s.get("brook_coordinator_offsets") == 1
    assert s.get("brook_coordinator_offsets_cache_bytes") > 0


def test_brook_broker_metrics_port_option(tmp_path):
    """`brook broker --metrics-port N` (the command line's name for metrics.port) serves them."""
    port, metrics_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "brook", "broker", "--metrics-port", str(metrics_port),
           "-o", f"listeners=PLAINTEXT://127.0.0.1:{port}", "-o", f"log.dirs={tmp_path / 'data'}"]
    with open(tmp_path / "stderr.log", "wb") as err:
        proc = subprocess.Popen(cmd, stdout=err, stderr=err, stdin=subprocess.DEVNULL, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while not (port_accepts(port) and port_accepts(metrics_port)):
            assert proc.poll() is None, (tmp_path / "stderr.log").read_text()
            assert time.monotonic() < deadline, "the broker did not start"
            time.sleep(0.05)
        assert Scrape(metrics_port).get("brook_requests_total", request="Produce") == 0
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
