"""BrokerMetrics and its scrape-time collector against an in-process Broker (real logs, the real
group runtime on a real __consumer_offsets topic), read through the metrics' own registry."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import urllib.request

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from brook.broker.broker import Broker
from brook.broker.config import BrokerConfig
from brook.broker.metrics import REQUEST_TIME_BUCKETS, BrokerMetrics
from brook.coordinator import classic
from brook.coordinator.records import OffsetCommitKey, OffsetCommitValue
from brook.protocol.fetch_response import PartitionResult, TopicResult
from brook.records import Record, encode_batch
from broker_harness import free_port
from test_group_runtime import join_and_sync


def samples(registry) -> dict[tuple, float]:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(registry_or_samples, name: str, **labels) -> float | None:
    got = registry_or_samples if isinstance(registry_or_samples, dict) else samples(registry_or_samples)
    return got.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))


def batch(n: int, value: bytes = b"v") -> bytes:
    return encode_batch([Record(i, 1_700_000_000_000, None, value, ()) for i in range(n)])


def open_broker(path, **props) -> Broker:
    broker = Broker(BrokerConfig.from_props({"log.dirs": str(path), "offsets.topic.num.partitions": "3",
                                             **{k.replace("_", "."): str(v) for k, v in props.items()}}))
    broker.open()
    return broker


@pytest.fixture
def broker(tmp_path):
    b = open_broker(tmp_path)
    try:
        yield b
    finally:
        b.close()


def test_partition_gauges_are_read_from_the_logs(broker):
    metrics = BrokerMetrics(broker)
    broker.create_topic("t", 2)
    a, b = batch(3, b"x" * 50), batch(4)
    broker.partition("t", 0).append(a)
    broker.partition("t", 0).append(b)
    got = samples(metrics.registry)
    assert sample(got, "brook_log_end_offset", topic="t", partition=0) == 7
    assert sample(got, "brook_log_end_offset", topic="t", partition=1) == 0
    assert sample(got, "brook_log_start_offset", topic="t", partition=0) == 0
    assert sample(got, "brook_log_size_bytes", topic="t", partition=0) == len(a) + len(b)
    assert sample(got, "brook_log_segments", topic="t", partition=0) == 1
    broker.partition("t", 1).append(batch(2))  # read at scrape time: nothing counted per append
    assert sample(metrics.registry, "brook_log_end_offset", topic="t", partition=1) == 2


def test_hot_path_counters(broker):
    metrics = BrokerMetrics(broker)
    broker.create_topic("t", 2)
    metrics.produced("t", 120, 3)
    metrics.produced("t", 80, 2)
    pr = PartitionResult(0, records=[b"abc", b"de"])
    empty = PartitionResult(1)
    metrics.fetched([TopicResult("t", None, [pr, empty])])
    metrics.fetched([TopicResult("t", None, [empty])])
    got = samples(metrics.registry)
    assert sample(got, "brook_topic_bytes_in_total", topic="t") == 200
    assert sample(got, "brook_topic_messages_in_total", topic="t") == 5
    assert sample(got, "brook_topic_bytes_out_total", topic="t") == 5

    api = next(k for k, a in broker.apis.items() if a.name == "Fetch")
    metrics.request_done(api, time.perf_counter() - 0.012)  # in the (0.01, 0.025] bucket
    metrics.request_done(api, time.perf_counter() - 40)  # past the last bound
    got = samples(metrics.registry)
    assert sample(got, "brook_requests_total", request="Fetch") == 2
    assert sample(got, "brook_requests_total", request="Produce") == 0
    assert 40.012 <= sample(got, "brook_request_total_time_seconds_sum", request="Fetch") < 41
    buckets = {le: sample(got, "brook_request_total_time_seconds_bucket", request="Fetch", le=le)
               for le in ("0.0001", "0.01", "0.025", "30.0", "+Inf")}
    assert buckets == {"0.0001": 0, "0.01": 0, "0.025": 1, "30.0": 1, "+Inf": 2}
    assert sample(got, "brook_request_total_time_seconds_count", request="Fetch") == 2
    assert len([k for k in got if k[0] == "brook_request_total_time_seconds_bucket"
                and ("request", "Fetch") in k[1]]) == len(REQUEST_TIME_BUCKETS) + 1


def test_each_broker_has_its_own_registry(tmp_path):
    brokers = [open_broker(tmp_path / "a"), open_broker(tmp_path / "b")]
    try:
        metrics = [BrokerMetrics(b) for b in brokers]
        for b in brokers:
            b.create_topic("t", 1)
        metrics[0].produced("t", 10, 1)
        assert sample(metrics[0].registry, "brook_topic_messages_in_total", topic="t") == 1
        assert sample(metrics[1].registry, "brook_topic_messages_in_total", topic="t") is None
        assert b"brook_" not in generate_latest(REGISTRY)
        # Both serve at once, each its own numbers.
        ports = [free_port(), free_port()]
        for m, port in zip(metrics, ports):
            m.start("127.0.0.1", port)
        try:
            bodies = [urllib.request.urlopen(f"http://127.0.0.1:{p}/metrics", timeout=10).read().decode()
                      for p in ports]
            assert 'brook_topic_messages_in_total{topic="t"} 1.0' in bodies[0]
            assert "brook_topic_messages_in_total{" not in bodies[1]
            assert [m.port for m in metrics] == ports
        finally:
            for m in metrics:
                m.stop()
        assert [m.port for m in metrics] == [None, None]
    finally:
        for b in brokers:
            b.close()


@pytest.fixture(scope="module")
def topics_broker(tmp_path_factory):
    b = open_broker(tmp_path_factory.mktemp("metrics-property"))
    for name in ("a", "b", "c"):
        b.create_topic(name, 1)
    try:
        yield b
    finally:
        b.close()


@settings(max_examples=30)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(["in", "out"]),
                          st.integers(0, 10_000), st.integers(0, 50)), max_size=40))
def test_counters_are_the_sums_of_what_was_counted(topics_broker, ops):
    metrics = BrokerMetrics(topics_broker)
    expected = {t: [0, 0, 0] for t in "abc"}
    for topic, kind, nbytes, messages in ops:
        if kind == "in":
            metrics.produced(topic, nbytes, messages)
            expected[topic][0] += nbytes
            expected[topic][1] += messages
        else:
            metrics.fetched([TopicResult(topic, None, [PartitionResult(0, records=[b"x" * nbytes])])])
            expected[topic][2] += nbytes
    got = samples(metrics.registry)
    for topic, (bytes_in, messages_in, bytes_out) in expected.items():
        assert (sample(got, "brook_topic_bytes_in_total", topic=topic) or 0) == bytes_in
        assert (sample(got, "brook_topic_messages_in_total", topic=topic) or 0) == messages_in
        assert (sample(got, "brook_topic_bytes_out_total", topic=topic) or 0) == bytes_out


def commit(group: str, topic: str, partition: int, offset: int):
    """An offset commit as the runtime writes it: appended to __consumer_offsets, then replayed."""
    record = classic.Record(OffsetCommitKey(group, topic, partition), OffsetCommitValue(offset))
    return lambda shard, now: classic.Result(records=[record])


def tombstone(group: str, topic: str, partition: int):
    record = classic.Record(OffsetCommitKey(group, topic, partition), None)
    return lambda shard, now: classic.Result(records=[record])


def test_lag_and_groups_per_state_from_the_coordinator(broker):
    metrics = BrokerMetrics(broker)
    broker.create_topic("t", 2)
    broker.partition("t", 0).append(batch(10))
    broker.partition("t", 1).append(batch(4))

    async def main():
        assert broker.ensure_offsets_topic()
        rt = broker.groups
        rt.start()
        await rt.wait_loaded()
        try:
            before = samples(metrics.registry)
            await join_and_sync(rt, "members")  # a classic group with one member: Stable
            await rt.run("members", commit("members", "t", 0, 6))
            await rt.run("members", commit("members", "t", 1, 4))
            await rt.run("simple", commit("simple", "t", 0, 1))  # offsets only: Empty
            await rt.run("simple", commit("simple", "gone", 0, 5))  # no such partition: no lag
            got = samples(metrics.registry)
            lags = {k[1]: v for k, v in got.items() if k[0] == "brook_consumergroup_lag"}
            assert lags == {
                (("group", "members"), ("partition", "0"), ("topic", "t")): 4,
                (("group", "members"), ("partition", "1"), ("topic", "t")): 0,
                (("group", "simple"), ("partition", "0"), ("topic", "t")): 9,
            }
            states = {k[1][0][1]: v for k, v in got.items() if k[0] == "brook_coordinator_groups"}
            assert states == {"Empty": 1, "PreparingRebalance": 0, "CompletingRebalance": 0,
                              "Stable": 1, "Dead": 0}
            assert sample(got, "brook_coordinator_offsets") == 4
            assert sample(got, "brook_coordinator_rebalances_total") == 1 + sample(
                before, "brook_coordinator_rebalances_total")
            broker.partition("t", 1).append(batch(3))
            await rt.run("members", tombstone("members", "t", 0))
            got = samples(metrics.registry)
            assert sample(got, "brook_consumergroup_lag", group="members", topic="t", partition=1) == 3
            assert sample(got, "brook_consumergroup_lag", group="members", topic="t", partition=0) is None
            assert sample(got, "brook_coordinator_offsets") == 3
        finally:
            await rt.stop()

    asyncio.run(main())


def test_scrapes_tolerate_the_event_loop_changing_what_they_read(broker):
    """Collections on another thread while offsets are committed and deleted (rows growing and
    shrinking, groups' offsets coming and going) and partitions are added: none fails, and once
    the changes stop a scrape shows exactly the final state."""
    metrics = BrokerMetrics(broker)
    broker.create_topic("t", 1)
    errors: list[BaseException] = []
    collections = 0
    stop = threading.Event()

    def collect_forever():
        nonlocal collections
        while not stop.is_set():
            try:
                list(metrics.collector.collect())
                collections += 1
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    async def main():
        assert broker.ensure_offsets_topic()
        rt = broker.groups
        rt.start()
        await rt.wait_loaded()
        thread = threading.Thread(target=collect_forever)
        thread.start()
        try:
            deadline = time.monotonic() + 1.5
            i = 0
            while time.monotonic() < deadline and not errors:
                group = f"g{i % 7}"
                shard = rt.shards[rt.partition_for(group)]
                for p in range(0, 40, 3):
                    shard.replay(OffsetCommitKey(group, "t", p), OffsetCommitValue(i), 0)
                for p in range(39, 0, -1):  # partition 0 stays: the group stays
                    shard.replay(OffsetCommitKey(group, "t", p), None, 0)
                passing = f"passing{i % 5}"  # a group whose only offset comes and goes
                shard = rt.shards[rt.partition_for(passing)]
                shard.replay(OffsetCommitKey(passing, "t", 0), OffsetCommitValue(i), 0)
                shard.replay(OffsetCommitKey(passing, "t", 0), None, 0)
                if i % 50 == 0:
                    broker.create_topic(f"more{i}", 1)
                i += 1
                if i % 20 == 0:
                    await asyncio.sleep(0)
        finally:
            stop.set()
            thread.join(10)
            await rt.stop()
        return i

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show up
    try:
        rounds = asyncio.run(main())
    finally:
        sys.setswitchinterval(switch)
    assert not errors, errors
    assert rounds > 10 and collections > 10
    got = samples(metrics.registry)
    assert sample(got, "brook_coordinator_offsets") == 7
    lags = {k[1]: v for k, v in got.items() if k[0] == "brook_consumergroup_lag"}
    assert lags == {(("group", f"g{g}"), ("partition", "0"), ("topic", "t")):  # the log is empty
                    -max(i for i in range(rounds) if i % 7 == g) for g in range(7)}
    assert len([k for k in got if k[0] == "brook_log_end_offset"]) == len(broker.partitions)


def test_a_failing_section_costs_the_scrape_only_its_own_metrics(broker, caplog):
    """A bug in reading one part of the broker is logged; the other metrics are still served."""
    metrics = BrokerMetrics(broker)
    broker.create_topic("t", 1)
    broker.partition("t", 0).append(batch(2))

    async def main():
        rt = broker.groups
        rt.start()
        await rt.wait_loaded()
        try:
            rt.shards[0].core = None  # broken state: the coordinator's figures cannot be read
            return samples(metrics.registry)
        finally:
            await rt.stop()

    got = asyncio.run(main())
    assert sample(got, "brook_log_end_offset", topic="t", partition=0) == 2
    assert sample(got, "brook_coordinator_rebalances_total") is None
    assert "collecting the groups metrics failed" in caplog.text
