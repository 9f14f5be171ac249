"""BrokerMetrics and its scrape-time readers against an in-process Broker (real logs, the real
group runtime on a real __consumer_offsets topic), read through the metrics' own exposition."""

from __future__ import annotations

import asyncio
import collections
import gzip
import random
import re
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from brook.broker.broker import Broker
from brook.broker.config import BrokerConfig
from brook.broker.metrics import REQUEST_TIME_BUCKETS, SLICE_SECONDS, BrokerMetrics, LoopReader
from brook.coordinator.common.result import CoordinatorRecord, CoordinatorResult
from brook.coordinator.group.commit_runs import CommitRun
from brook.coordinator.group.schemas import OffsetCommitKey, OffsetCommitValue
from brook.protocol.fetch_response import PartitionResult, TopicResult
from brook.records import Record, encode_batch
from tests.support.broker_harness import free_port
from tests.support.examples import examples
from tests.support.runtime_ops import join_and_sync


def samples(metrics: BrokerMetrics) -> dict[tuple, float]:
    text = metrics.generate().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(metrics_or_samples, name: str, **labels) -> float | None:
    got = metrics_or_samples if isinstance(metrics_or_samples, dict) else samples(metrics_or_samples)
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
    got = samples(metrics)
    assert sample(got, "brook_log_end_offset", topic="t", partition=0) == 7
    assert sample(got, "brook_log_end_offset", topic="t", partition=1) == 0
    assert sample(got, "brook_log_start_offset", topic="t", partition=0) == 0
    assert sample(got, "brook_log_size_bytes", topic="t", partition=0) == len(a) + len(b)
    assert sample(got, "brook_log_segments", topic="t", partition=0) == 1
    broker.partition("t", 1).append(batch(2))  # read at scrape time: nothing counted per append
    assert sample(metrics, "brook_log_end_offset", topic="t", partition=1) == 2


def test_hot_path_counters(broker):
    metrics = BrokerMetrics(broker)
    broker.create_topic("t", 2)
    metrics.produced("t", 120, 3)
    metrics.produced("t", 80, 2)
    pr = PartitionResult(0, records=[b"abc", b"de"])
    empty = PartitionResult(1)
    metrics.fetched([TopicResult("t", None, [pr, empty])])
    metrics.fetched([TopicResult("t", None, [empty])])
    got = samples(metrics)
    assert sample(got, "brook_topic_bytes_in_total", topic="t") == 200
    assert sample(got, "brook_topic_messages_in_total", topic="t") == 5
    assert sample(got, "brook_topic_bytes_out_total", topic="t") == 5

    api = next(k for k, a in broker.apis.items() if a.name == "Fetch")
    metrics.request_done(api, time.perf_counter() - 0.012)  # in the (0.01, 0.025] bucket
    metrics.request_done(api, time.perf_counter() - 40)  # past the last bound
    got = samples(metrics)
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
        assert sample(metrics[0], "brook_topic_messages_in_total", topic="t") == 1
        assert sample(metrics[1], "brook_topic_messages_in_total", topic="t") is None
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


@settings(max_examples=examples(30))
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
    got = samples(metrics)
    for topic, (bytes_in, messages_in, bytes_out) in expected.items():
        assert (sample(got, "brook_topic_bytes_in_total", topic=topic) or 0) == bytes_in
        assert (sample(got, "brook_topic_messages_in_total", topic=topic) or 0) == messages_in
        assert (sample(got, "brook_topic_bytes_out_total", topic=topic) or 0) == bytes_out


def commit(group: str, topic: str, partition: int, offset: int):
    """An offset commit as the runtime writes it: appended to __consumer_offsets, then replayed."""
    record = CoordinatorRecord(OffsetCommitKey(group, topic, partition), OffsetCommitValue(offset))
    return lambda shard, now: CoordinatorResult(records=[record])


def tombstone(group: str, topic: str, partition: int):
    record = CoordinatorRecord(OffsetCommitKey(group, topic, partition), None)
    return lambda shard, now: CoordinatorResult(records=[record])


def test_lag_and_groups_per_state_from_the_coordinator(broker):
    metrics = BrokerMetrics(broker)
    broker.create_topic("t", 2)
    broker.partition("t", 0).append(batch(10))
    broker.partition("t", 1).append(batch(4))

    async def main():
        rt = await started_groups(broker)
        try:
            before = samples(metrics)
            await join_and_sync(rt, "members")  # a classic group with one member: Stable
            await rt.run("members", commit("members", "t", 0, 6))
            await rt.run("members", commit("members", "t", 1, 4))
            await rt.run("simple", commit("simple", "t", 0, 1))  # offsets only: Empty
            await rt.run("simple", commit("simple", "gone", 0, 5))  # no such partition: no lag
            got = samples(metrics)
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
            got = samples(metrics)
            assert sample(got, "brook_consumergroup_lag", group="members", topic="t", partition=1) == 3
            assert sample(got, "brook_consumergroup_lag", group="members", topic="t", partition=0) is None
            assert sample(got, "brook_coordinator_offsets") == 3
        finally:
            await rt.stop()

    asyncio.run(main())


@pytest.mark.parametrize("served", [False, True], ids=["read-from-the-thread", "read-on-the-loop"])
def test_scrapes_tolerate_the_event_loop_changing_what_they_read(broker, caplog, served):
    """Scrapes from another thread while offsets are committed and deleted (rows growing and
    shrinking, groups' offsets coming and going) and partitions are added: none fails or logs a
    failure, and once the changes stop a scrape shows exactly the final state. Without the
    event loop (the reads race its changes) and served over HTTP (the reads run on the loop,
    in slices between its callbacks)."""
    metrics = BrokerMetrics(broker)
    broker.create_topic("t", 1)
    errors: list[BaseException] = []
    collections = 0
    stop = threading.Event()

    def collect_forever():
        nonlocal collections
        while not stop.is_set():
            try:
                if served:
                    url = f"http://127.0.0.1:{metrics.port}/metrics"
                    text = urllib.request.urlopen(url, timeout=30).read().decode()
                else:
                    text = metrics.generate().decode()
                assert "brook_consumergroup_lag" in text
                list(text_string_to_metric_families(text))
                collections += 1
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    async def main():
        rt = await started_groups(broker)
        if served:
            metrics.start("127.0.0.1", 0)
        thread = threading.Thread(target=collect_forever)
        thread.start()
        try:
            start = time.monotonic()
            i = 0
            # At least 1.5 s of changes, and until a dozen scrapes raced them (slow on a busy
            # machine, with threads switching every microsecond)
            while not errors and (time.monotonic() < start + 1.5 or collections <= 10) \
                    and time.monotonic() < start + 60:
                group = f"g{i % 7}"
                shard = rt.contexts[rt.partition_for(group)].shard
                for p in range(0, 40, 3):
                    shard.replay(OffsetCommitKey(group, "t", p), OffsetCommitValue(i), 0)
                for p in range(39, 0, -1):  # partition 0 stays: the group stays
                    shard.replay(OffsetCommitKey(group, "t", p), None, 0)
                passing = f"passing{i % 5}"  # a group whose only offset comes and goes
                shard = rt.contexts[rt.partition_for(passing)].shard
                shard.replay(OffsetCommitKey(passing, "t", 0), OffsetCommitValue(i), 0)
                shard.replay(OffsetCommitKey(passing, "t", 0), None, 0)
                if i % 50 == 0:
                    broker.create_topic(f"more{i}", 1)
                i += 1
                if i % 20 == 0:
                    await asyncio.sleep(0)
        finally:
            stop.set()
            await asyncio.to_thread(thread.join, 30)
            metrics.stop()
            await rt.stop()
        return i

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show up
    try:
        rounds = asyncio.run(main())
    finally:
        sys.setswitchinterval(switch)
    assert not errors, errors
    assert "metrics failed" not in caplog.text
    assert rounds > 10 and collections > 10
    got = samples(metrics)
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
        rt = broker.coordinator
        rt.start()
        await rt.wait_loaded()
        try:
            rt.contexts[0].shard = None  # broken state: the coordinator's figures cannot be read
            return samples(metrics)
        finally:
            await rt.stop()

    got = asyncio.run(main())
    assert sample(got, "brook_log_end_offset", topic="t", partition=0) == 2
    assert sample(got, "brook_coordinator_rebalances_total") is None
    assert "collecting the groups metrics failed" in caplog.text


# --- the state families: the same text prometheus_client would write --------------------------

def families(text: str) -> dict[str, str]:
    """Exposition text cut into its families: name -> its HELP, TYPE and sample lines."""
    found: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.startswith("# HELP "):
            lines = found.setdefault(line.split()[2], [])
        if line != "# EOF\n":
            lines.append(line)
    return {name: "".join(lines) for name, lines in found.items()}


async def started_groups(broker):
    """The broker's group coordinator, started and loaded (the caller stops it)."""
    assert broker.ensure_offsets_topic()
    rt = broker.coordinator
    rt.start()
    await rt.wait_loaded()
    return rt


class One:
    def __init__(self, family) -> None:
        self.family = family

    def collect(self):
        return [self.family]


def reference_families(broker) -> dict[str, GaugeMetricFamily]:
    """The partition and lag families built with prometheus_client, a sample per series, from
    the broker's state read the slow way (a value object per committed offset)."""
    labels = ["topic", "partition"]
    end = GaugeMetricFamily("brook_log_end_offset", "The offset of the next record appended.",
                            labels=labels)
    start = GaugeMetricFamily("brook_log_start_offset", "The first offset still in the log.",
                              labels=labels)
    size = GaugeMetricFamily("brook_log_size_bytes", "Bytes in the partition's segment files.",
                             labels=labels)
    segments = GaugeMetricFamily("brook_log_segments", "Segments of the partition's log.",
                                 labels=labels)
    for (topic, index), partition in broker.partitions.items():
        segs = partition.log.segments
        end.add_metric([topic, str(index)], segs[-1].next_offset)
        start.add_metric([topic, str(index)], partition.log.log_start_offset)
        size.add_metric([topic, str(index)], sum(s.size for s in segs))
        segments.add_metric([topic, str(index)], len(segs))
    lag = GaugeMetricFamily("brook_consumergroup_lag",
                            "High watermark minus the group's committed offset.",
                            labels=["group", "topic", "partition"])
    for ctx in broker.coordinator.contexts.values():
        manager = ctx.shard.offsets
        for group in manager.cache.groups():
            for topic, index, value in manager.group_offsets(group):
                partition = broker.partitions.get((topic, index))
                if partition is not None:
                    lag.add_metric([group, topic, str(index)],
                                   partition.high_watermark - value.offset)
    return {f.name: f for f in (end, start, size, segments, lag)}


def test_partition_and_lag_lines_are_what_prometheus_client_writes(broker):
    """Byte for byte, in the text format and in OpenMetrics: label values that need escaping
    and non-ASCII ones, lags on both sides of every bound where the value's text changes form
    (1e6, where floatToGoString turns to exponents; 2**53, beyond which a float is not exact),
    offsets kept out of the rows (a partition far past the others, a leader epoch too large
    for a row), a deleted topic's offsets (no series), log sizes past 1e6, and a few thousand
    random offsets."""
    metrics = BrokerMetrics(broker)
    broker.create_topic("t", 3)
    broker.create_topic("wide", 100)
    for _ in range(3):
        broker.partition("t", 0).append(batch(1, b"x" * 600_000))  # 1.8 MB: size past 1e6
    broker.partition("t", 1).append(batch(7))
    hw = broker.partition("t", 0).high_watermark
    bounds = (-(2**53) - 1, -(2**53), -(2**53) + 1, -1_000_000, -1, 0, 1, 999_999, 1_000_000,
              1_000_001, 2**53 - 1, 2**53, 2**53 + 1, 2**62)
    rng = random.Random(7)

    async def main():
        rt = await started_groups(broker)
        try:
            def put(group, topic, index, value):
                rt.contexts[rt.partition_for(group)].shard.replay(OffsetCommitKey(group, topic, index),
                                                          value, 0)

            for i, lag in enumerate(bounds):
                put(f"edge{i}", "t", 0, OffsetCommitValue(hw - lag))
            for group in ('quo"te', "back\\slash", "new\nline", "ünïcødé ✓", "", "plain"):
                put(group, "t", 1, OffsetCommitValue(3))
            put("sparse", "wide", 90, OffsetCommitValue(5))  # far past the rows: kept apart
            put("sparse", "wide", 0, OffsetCommitValue(2))
            put("sparse", "wide", 1, OffsetCommitValue(1, leader_epoch=2**40))  # no row fits it
            put("gone", "deleted-topic", 0, OffsetCommitValue(1))
            for _ in range(3000):
                put(f"g{rng.randrange(200)}", rng.choice(["t", "wide"]), rng.randrange(100),
                    OffsetCommitValue(rng.randrange(-5, 50)))
            put("sparse", "wide", 1, None)  # a tombstone

            expected = reference_families(broker)
            assert len(expected["brook_consumergroup_lag"].samples) > 1000
            text = families(metrics.generate().decode())
            om = families(metrics.exposition("application/openmetrics-text; version=1.0.0")[0]
                          .decode())
            for name, family in expected.items():
                assert text[name] == generate_latest(One(family)).decode(), name
                assert om[name] == openmetrics_latest(One(family)).decode()[:-len("# EOF\n")], name
        finally:
            await rt.stop()

    asyncio.run(main())


@pytest.mark.parametrize("accept", [
    "application/openmetrics-text;version=1.0.0;escaping=dots",
    "text/plain;version=1.0.0;escaping=dots",
])
def test_partition_and_lag_lines_follow_the_name_escaping_a_scraper_asks_for(broker, accept):
    """With escaping=dots prometheus_client writes every ``_`` of a name as ``__``: the
    partition and lag families must carry the same names as the rest of the scrape."""
    metrics = BrokerMetrics(broker)
    broker.create_topic("t", 2)
    broker.partition("t", 0).append(batch(5))

    async def main():
        rt = await started_groups(broker)
        try:
            for group, index, offset in (("g", 0, 2), ("g", 1, 0), ("h_1", 0, 5)):
                rt.contexts[rt.partition_for(group)].shard.replay(OffsetCommitKey(group, "t", index),
                                                          OffsetCommitValue(offset), 0)
            body, content_type = metrics.exposition(accept)
            return body.decode(), content_type, reference_families(broker)
        finally:
            await rt.stop()

    text, content_type, expected = asyncio.run(main())
    assert "escaping=dots" in content_type
    found = families(text)
    om = accept.startswith("application/openmetrics-text")
    write = openmetrics_latest if om else generate_latest
    for name, family in expected.items():
        reference = write(One(family), escaping="dots").decode().replace("# EOF\n", "")
        assert found[name.replace("_", "__")] == reference, name
    assert '\nbrook__requests__total{request="Metadata"} ' in text  # prometheus_client's own
    assert not [line for line in text.splitlines() if re.match(r"brook_[^_]", line)]


# --- reading on the event loop -----------------------------------------------------------------

def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_read_runs_on_the_event_loop_in_short_slices_while_the_loop_serves():
    """From another thread, a walk runs on the loop's thread, in many callbacks none of which
    runs for much longer than SLICE_SECONDS, and the loop's other work goes on between them."""
    reader = LoopReader()
    seen: list[tuple[int, int]] = []
    ticks = 0

    def walk():
        for _ in range(2000):  # 40 ms of work
            busy(20e-6)
            seen.append((threading.get_ident(), ticks))
            yield
        return "read"

    async def main():
        nonlocal ticks
        reader.loop = asyncio.get_running_loop()
        scrape = asyncio.get_running_loop().run_in_executor(None, reader.read, walk)
        while not scrape.done():
            ticks += 1
            await asyncio.sleep(0)
        return threading.get_ident(), await scrape

    loop_thread, got = asyncio.run(main())
    assert got == "read" and len(seen) == 2000
    assert {thread for thread, _ in seen} == {loop_thread}
    per_slice = collections.Counter(tick for _, tick in seen)
    assert len(per_slice) >= 10  # the loop ran other callbacks between slices
    assert max(per_slice.values()) <= SLICE_SECONDS / 20e-6 + 5  # a step overshoots a slice


def test_a_read_runs_at_once_without_a_running_loop_or_on_the_loop_itself():
    reader = LoopReader()

    def walk():
        yield
        return threading.get_ident()

    assert reader.read(walk) == threading.get_ident()  # no loop

    async def main():
        reader.loop = asyncio.get_running_loop()
        return reader.read(walk), threading.get_ident()  # on the loop: no waiting for itself

    on_loop, loop_thread = asyncio.run(main())
    assert on_loop == loop_thread
    assert reader.read(walk) == threading.get_ident()  # the loop is gone


def test_a_read_does_not_wait_for_a_stalled_loop_for_ever(caplog):
    """A loop that does not get to the walk within LOOP_WAIT_SECONDS: the scrape reads from
    its own thread, and the loop, when it gets there, does not run the abandoned walk."""
    reader = LoopReader()
    reader.wait_seconds = 0.2
    ran_on: list[int] = []

    def walk():
        ran_on.append(threading.get_ident())
        yield
        return "read"

    async def main():
        reader.loop = asyncio.get_running_loop()
        scrape = asyncio.get_running_loop().run_in_executor(None, reader.read, walk)
        time.sleep(0.6)  # the loop stalls before it gets to the walk
        got = await scrape
        await asyncio.sleep(0.05)  # the abandoned walk's callback runs now
        return got, threading.get_ident()

    got, loop_thread = asyncio.run(main())
    assert got == "read"
    assert ran_on and loop_thread not in ran_on
    assert "has not read for the metrics for" in caplog.text


def test_a_read_waits_for_a_busy_loop_that_keeps_reading():
    """A walk that takes the loop many times LOOP_WAIT_SECONDS, slice after slice, is read on
    the loop to its end: only a loop that stops running slices is given up on."""
    reader = LoopReader()
    # 0.25 s: a loaded CI machine once left the loop unscheduled past 0.05 s between slices
    reader.wait_seconds = 0.25
    ran_on: set[int] = set()

    def walk():
        for _ in range(5000):  # 0.5 s of work, 1 s or more with the pauses
            busy(100e-6)
            ran_on.add(threading.get_ident())
            yield
        return "read"

    async def main():
        reader.loop = asyncio.get_running_loop()
        got = await asyncio.get_running_loop().run_in_executor(None, reader.read, walk)
        return got, threading.get_ident()

    got, loop_thread = asyncio.run(main())
    assert got == "read" and ran_on == {loop_thread}


# --- serving -----------------------------------------------------------------------------------

def test_serving_formats_names_and_compression(broker):
    """What prometheus_client's server answers: OpenMetrics when asked for (parsed here by its
    strict parser), gzip when accepted, only the ``name[]`` families asked for, OPTIONS, an
    empty favicon, 405 for other methods."""
    metrics = BrokerMetrics(broker)
    broker.create_topic("t", 2)
    broker.partition("t", 0).append(batch(5))

    async def main():
        rt = await started_groups(broker)
        metrics.start("127.0.0.1", 0)
        try:
            shard = rt.contexts[rt.partition_for("g")].shard
            shard.replay(OffsetCommitKey("g", "t", 0), OffsetCommitValue(2), 0)
            return await asyncio.to_thread(requests, f"http://127.0.0.1:{metrics.port}")
        finally:
            metrics.stop()
            await rt.stop()

    def get(url, method="GET", **headers):
        req = urllib.request.Request(url, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers, exc.read()

    def requests(base):
        return {
            "plain": get(f"{base}/metrics"),
            "gzip": get(f"{base}/metrics", **{"Accept-Encoding": "gzip"}),
            "om": get(f"{base}/metrics", Accept="application/openmetrics-text;version=1.0.0,"
                                                "text/plain;version=0.0.4;q=0.5"),
            "names": get(f"{base}/metrics?name[]=brook_consumergroup_lag"
                         "&name[]=brook_requests_total&name[]=brook_log_end_offset"),
            "options": get(f"{base}/metrics", method="OPTIONS"),
            "post": get(f"{base}/metrics", method="POST"),
            "favicon": get(f"{base}/favicon.ico"),
        }

    got = asyncio.run(main())
    status, headers, plain = got["plain"]
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert 'brook_consumergroup_lag{group="g",partition="0",topic="t"} 3.0\n' in plain.decode()
    assert 'brook_log_end_offset{partition="0",topic="t"} 5.0\n' in plain.decode()

    status, headers, body = got["gzip"]
    assert headers["Content-Encoding"] == "gzip"
    assert families(gzip.decompress(body).decode()).keys() == families(plain.decode()).keys()

    status, headers, body = got["om"]
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    text = body.decode()
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1
    parsed = {f.name: f for f in openmetrics_families(text)}
    assert [(s.labels, s.value) for s in parsed["brook_consumergroup_lag"].samples] == [
        ({"group": "g", "partition": "0", "topic": "t"}, 3.0)]
    assert "brook_requests" in parsed and "process_cpu_seconds" in parsed

    status, headers, body = got["names"]
    assert status == 200
    assert set(families(body.decode())) == {"brook_consumergroup_lag", "brook_requests_total",
                                            "brook_log_end_offset"}

    assert got["options"][0] == 200 and got["options"][1]["Allow"] == "OPTIONS,GET"
    assert got["post"][0] == 405
    assert got["favicon"][0] == 200 and got["favicon"][2] == b""


# --- what a scrape reads: one instant per section, and reads racing the event loop -------------

def test_request_counts_and_their_histogram_are_read_at_one_instant(broker):
    """Scraped from another thread while the event loop answers requests: in every scrape an
    API's request count, its histogram's count, +Inf bucket and sum agree (they are read
    together on the loop, not one by one while the loop adds to them)."""
    metrics = BrokerMetrics(broker)
    api = next(k for k, a in broker.apis.items() if a.name == "Produce")
    stop = threading.Event()
    torn: list[tuple[float, float, float, float]] = []
    scrapes = 0

    def scrape_forever():
        nonlocal scrapes
        while not stop.is_set():
            got = samples(metrics)
            labels = {"request": "Produce"}
            total = sample(got, "brook_requests_total", **labels)
            count = sample(got, "brook_request_total_time_seconds_count", **labels)
            inf = sample(got, "brook_request_total_time_seconds_bucket", le="+Inf", **labels)
            seconds = sample(got, "brook_request_total_time_seconds_sum", **labels)
            # Each request took 1000 s and a little more: the sum tells how many it holds.
            if not total == count == inf or not count * 1000 <= seconds < (count + 0.5) * 1000:
                torn.append((total, count, inf, seconds))
            scrapes += 1

    async def main():
        metrics.start("127.0.0.1", 0)
        thread = threading.Thread(target=scrape_forever)
        thread.start()
        try:
            deadline, hard = time.monotonic() + 1.5, time.monotonic() + 30
            # at least 1.5 s and 20 scrapes (a loaded machine scrapes slowly)
            while (time.monotonic() < deadline or scrapes < 20) and not torn \
                    and time.monotonic() < hard:
                for _ in range(20):
                    metrics.request_done(api, time.perf_counter() - 1000)
                await asyncio.sleep(0)
        finally:
            stop.set()
            await asyncio.to_thread(thread.join, 30)
            metrics.stop()

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        asyncio.run(main())
    finally:
        sys.setswitchinterval(switch)
    assert not torn, torn[:3]
    assert scrapes > 5


def test_a_groups_lags_are_read_at_one_instant(broker):
    """A group commits two topics' offsets at once, again and again, while it is scraped in
    the smallest slices there are: every scrape shows both offsets from the same commit."""
    metrics = BrokerMetrics(broker)
    metrics.reader.slice_seconds = 0.0  # a slice per step of the walk
    broker.create_topic("a", 1)
    broker.create_topic("b", 1)
    stop = threading.Event()
    torn: list[tuple] = []
    scrapes = 0

    def scrape_forever():
        nonlocal scrapes
        while not stop.is_set():
            got = samples(metrics)
            a = sample(got, "brook_consumergroup_lag", group="g", topic="a", partition=0)
            b = sample(got, "brook_consumergroup_lag", group="g", topic="b", partition=0)
            if a != b:
                torn.append((a, b))
            scrapes += 1

    async def main():
        rt = await started_groups(broker)
        metrics.start("127.0.0.1", 0)
        shard = rt.contexts[rt.partition_for("g")].shard
        for i in range(5):  # other groups' offsets on the same shard: more steps to the walk
            other = next(f"o{j}" for j in range(i * 1000, 10**6)
                         if rt.partition_for(f"o{j}") == rt.partition_for("g"))
            shard.replay(OffsetCommitKey(other, "a", 0), OffsetCommitValue(0), 0)
        thread = threading.Thread(target=scrape_forever)
        try:
            i = 0
            shard.replay_records([CoordinatorRecord(OffsetCommitKey("g", t, 0), OffsetCommitValue(i))
                                  for t in ("a", "b")], 0)
            thread.start()
            deadline, hard = time.monotonic() + 1.5, time.monotonic() + 30
            # at least 1.5 s and 20 scrapes (a loaded machine scrapes slowly)
            while (time.monotonic() < deadline or scrapes < 20) and not torn \
                    and time.monotonic() < hard:
                i += 1
                shard.replay_records([CoordinatorRecord(OffsetCommitKey("g", t, 0),
                                                     OffsetCommitValue(i)) for t in ("a", "b")], 0)
                await asyncio.sleep(0)
        finally:
            stop.set()
            await asyncio.to_thread(thread.join, 30)
            metrics.stop()
            await rt.stop()

    asyncio.run(main())
    assert not torn, torn[:3]
    assert scrapes > 5


def test_a_groups_offsets_copied_while_they_move_are_each_read_once():
    """Read from another thread (a scrape that gave up on a stalled loop) while an offset
    moves between the cache's rows and its dict of values that fit no row: no partition is
    read twice."""
    from brook.coordinator.group.offsets_cache import OffsetsCache

    cache = OffsetsCache()
    for p in range(2000):
        cache.put("g", "t", p, OffsetCommitValue(p))
    stop = threading.Event()
    twice: list[int] = []

    def read_forever():
        while not stop.is_set() and not twice:
            partitions = [p for p, _ in cache.committed_offsets("g", "t")]
            twice.extend(p for p, n in collections.Counter(partitions).items() if n > 1)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=read_forever)
    thread.start()
    try:
        deadline = time.monotonic() + 1.5
        i = 0
        while time.monotonic() < deadline and not twice:
            cache.put("g", "t", 1000, OffsetCommitValue(i, leader_epoch=2**40))  # fits no row
            cache.put("g", "t", 1000, OffsetCommitValue(i))  # back in its row
            i += 1
    finally:
        stop.set()
        thread.join(30)
        sys.setswitchinterval(switch)
    assert not twice


# --- stopping ----------------------------------------------------------------------------------

def test_a_read_left_waiting_by_a_loop_that_stopped_ends_at_once():
    """The loop stops between two slices of a read (its broker stopped): the waiting scrape
    reads the rest from its own thread at once (nothing changes the state any more), not
    after LOOP_WAIT_SECONDS."""
    reader = LoopReader()
    # A wait six times the bound below: "at once" holds on a machine busy enough to stretch the
    # 0.2 s of work past a second (other test workers), and a read that waited fails it.
    reader.wait_seconds = 30.0
    threads: set[int] = set()
    started = threading.Event()
    got: dict[str, object] = {}

    def walk():
        for _ in range(400):  # 0.2 s of work: many slices
            busy(500e-6)
            threads.add(threading.get_ident())
            started.set()
            yield
        return "read"

    def scrape():
        got["value"] = reader.read(walk)
        got["at"] = time.monotonic()

    thread = threading.Thread(target=scrape)

    async def main():
        reader.loop = asyncio.get_running_loop()
        thread.start()
        while not started.is_set():
            await asyncio.sleep(0.001)
        return threading.get_ident()

    loop_thread = asyncio.run(main())  # returns with the read half done
    stopped = time.monotonic()
    thread.join(30)
    assert got["value"] == "read"
    waited = got["at"] - stopped
    assert waited < reader.wait_seconds / 6, f"the scrape waited {waited:.1f} s"
    assert threads == {loop_thread, thread.ident}


def test_a_scrape_after_stop_still_reads_on_the_running_loop(broker):
    """A scrape the HTTP server accepted before it stopped reads on the event loop as long as
    the loop runs (the broker closes its logs on it), not from its own thread."""
    metrics = BrokerMetrics(broker)

    def walk():
        yield
        return threading.get_ident()

    async def main():
        metrics.start("127.0.0.1", 0)
        metrics.stop()
        return await asyncio.to_thread(metrics.reader.read, walk), threading.get_ident()

    read_on, loop_thread = asyncio.run(main())
    assert read_on == loop_thread


def test_an_interrupt_in_a_slice_stops_the_loop_and_fails_the_read():
    """KeyboardInterrupt (or SystemExit) raised in a slice ends the event loop as it would
    anywhere else on the loop, and the waiting scrape gets it rather than waiting."""
    reader = LoopReader()
    errors: list[BaseException] = []

    def walk():
        yield
        raise KeyboardInterrupt

    def scrape():
        try:
            reader.read(walk)
        except BaseException as exc:  # noqa: BLE001 - checked below
            errors.append(exc)

    thread = threading.Thread(target=scrape)

    async def main():
        reader.loop = asyncio.get_running_loop()
        thread.start()
        await asyncio.sleep(2)
        return "not interrupted"

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(main())
    thread.join(10)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], KeyboardInterrupt)


# --- memory ------------------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_a_large_scrape_holds_its_text_about_once(broker, encoding):
    """Serving 50,000 lag series (about 3.5 MB of text): the server's allocations at their
    peak come to little more than the text itself (not the series' chunks plus their join,
    twice the text), whether it is sent as it is or compressed."""
    import socket
    import tracemalloc

    metrics = BrokerMetrics(broker)
    for t in range(10):
        broker.create_topic(f"t{t}", 10)

    def scrape(port: int) -> tuple[int, int]:
        """(peak bytes allocated while serving, bytes of text), the body read into one
        buffer over and over (the client allocates nothing per chunk)."""
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            sock.sendall(b"GET /metrics HTTP/1.0\r\nAccept-Encoding: " + encoding.encode()
                         + b"\r\n\r\n")
            buf = bytearray(65536)
            head = b""
            total = 0
            while True:
                n = sock.recv_into(buf)
                if not n:
                    break
                if len(head) < 4096:
                    head += bytes(buf[:n])
                total += n
            peak = tracemalloc.get_traced_memory()[1] - before
            tracemalloc.stop()
        return peak, total

    async def main():
        rt = await started_groups(broker)
        for g in range(500):
            shard = rt.contexts[rt.partition_for(f"g{g}")].shard
            for t in range(10):
                shard.replay_commits(CommitRun(f"g{g}", f"t{t}",
                                               [(p, 1, -1, 0) for p in range(10)]), 0)
        metrics.start("127.0.0.1", 0)
        try:
            text = len(metrics.generate())
            peak, _ = await asyncio.to_thread(scrape, metrics.port)
            return peak, text
        finally:
            metrics.stop()
            await rt.stop()

    peak, text = asyncio.run(main())
    assert text > 3_000_000
    assert peak < 1.4 * text, f"{peak / 1e6:.1f} MB at the peak for {text / 1e6:.1f} MB of text"


def test_consumer_groups_per_state_and_their_rebalances(broker):
    from brook.coordinator.group.consumer import ConsumerHeartbeat

    metrics = BrokerMetrics(broker)
    broker.create_topic("t", 2)
    topics = {"t": (broker.metadata.get("t").topic_id, 2)}

    def heartbeat(member):
        req = ConsumerHeartbeat("kip848", member, 0, rebalance_timeout_ms=30_000,
                                subscribed_topic_names=("t",))
        return lambda shard, now: shard.consumer_group_heartbeat(req, topics, now)

    async def main():
        rt = await started_groups(broker)
        try:
            before = samples(metrics)
            await rt.run("kip848", heartbeat("a"))
            got = samples(metrics)
            states = {k[1][0][1]: v for k, v in got.items()
                      if k[0] == "brook_coordinator_consumer_groups"}
            assert states == {"Empty": 0, "Assigning": 0, "Reconciling": 0, "Stable": 1}
            await rt.run("kip848", heartbeat("b"))  # a waits to revoke: Reconciling
            got = samples(metrics)
            assert sample(got, "brook_coordinator_consumer_groups", state="Reconciling") == 1
            assert sample(got, "brook_coordinator_consumer_group_rebalances_total") == 2 + sample(
                before, "brook_coordinator_consumer_group_rebalances_total")
            assert sample(got, "brook_coordinator_consumer_group_reconciliations_total") == 2 + \
                sample(before, "brook_coordinator_consumer_group_reconciliations_total")
        finally:
            await rt.stop()

    asyncio.run(main())
