"""`brook transactions` against a real broker process: list, describe and describe-producers of
what confluent-kafka's transactional producers did, and a hanging transaction (transactional
batches produced by hand, as docs/transactions.md drives a partition's transaction, that no
coordinator knows) found by find-hanging and ended by abort, after which the partition's last
stable offset moves up and read_committed consumers read on. The hanging rule and the row
builders are tested without a broker at the end."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode as E
from typer.testing import CliRunner

from brook.cli import app
from brook.cli.transactions import abort_spec, hanging, open_transactions
from brook.cli.errors import CliError
from brook.cli.txn_wire import ProducerState, TransactionDescription
from brook.records import Record, encode_batch
from tests.clients.test_transactions import init_producer_id, list_latest
from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess, confluent_config
from tests.support.kafka_wire import WireClient
from tests.support.wire_build import request
from tests.support.wire_requests import create_topic

pytestmark = pytest.mark.broker

runner = CliRunner()
HOUR_MS = 3_600_000
READ_COMMITTED, READ_UNCOMMITTED = 1, 0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # Hanging transactions are made by hand, without a coordinator: a verifying leader
    # (KIP-890, the default) refuses them, as it refuses the late Produce that leaves one.
    with BrokerProcess(tmp_path_factory.mktemp("broker-cli-transactions"), overrides={
            **BROKER_DEFAULTS, "transaction.state.log.num.partitions": 3,
            "offsets.topic.num.partitions": 3,
            "transaction.partition.verification.enable": "false"}) as proc:
        yield proc


def brook(broker, *args):
    return runner.invoke(app, [*args, "--bootstrap-server", broker.bootstrap])


def rows(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines()[1:] if line.strip()]


def _producer(broker, tid: str):
    from confluent_kafka import Producer

    p = Producer(confluent_config(broker.bootstrap, **{"transactional.id": tid,
                                                       "transaction.timeout.ms": 60_000}))
    p.init_transactions(30)
    return p


@pytest.fixture(scope="module")
def transactions(broker):
    """cli-open: a transaction open on cli-t-0; cli-done: one committed on cli-t-1; cli-empty:
    initialized only. Their producer ids."""
    with WireClient(broker.bootstrap) as c:
        assert create_topic(c, "cli-t", partitions=2).error_code == E.none
    opened, done, empty = (_producer(broker, t) for t in ("cli-open", "cli-done", "cli-empty"))
    opened.begin_transaction()
    opened.produce("cli-t", b"open", partition=0)
    assert opened.flush(30) == 0
    done.begin_transaction()
    done.produce("cli-t", b"done", partition=1)
    done.commit_transaction(30)
    pids = {}
    for tid in ("cli-open", "cli-done", "cli-empty"):
        result = brook(broker, "transactions", "describe", "--transactional-id", tid,
                       "--output", "json")
        assert result.exit_code == 0, result.output
        pids[tid] = json.loads(result.stdout)["producer_id"]
    yield pids
    opened.abort_transaction(30)


def test_list(broker, transactions):
    result = brook(broker, "transactions", "list")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].split() == [
        "TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "TRANSACTION-STATE"]
    listed = {r[0]: r[1:] for r in rows(result.stdout)}
    assert listed["cli-open"] == ["1", str(transactions["cli-open"]), "Ongoing"]
    assert listed["cli-done"] == ["1", str(transactions["cli-done"]), "CompleteCommit"]
    assert listed["cli-empty"] == ["1", str(transactions["cli-empty"]), "Empty"]

    result = brook(broker, "transactions", "list", "--state", "Ongoing,CompleteCommit",
                   "--output", "json")
    assert result.exit_code == 0, result.output
    states = {t["transactional_id"]: t["state"] for t in json.loads(result.stdout)}
    assert states == {"cli-open": "Ongoing", "cli-done": "CompleteCommit"}

    result = brook(broker, "transactions", "list", "--producer-id",
                   str(transactions["cli-done"]))
    assert [r[0] for r in rows(result.stdout)] == ["cli-done"]

    result = brook(broker, "transactions", "list", "--state", "Bogus")
    assert result.exit_code == 0 and rows(result.stdout) == []
    assert "no broker knows the state 'Bogus'" in result.stderr


def test_describe(broker, transactions):
    before = int(time.time() * 1000)
    result = brook(broker, "transactions", "describe", "--transactional-id", "cli-open",
                   "--output", "json")
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert (d["coordinator"], d["state"], d["producer_id"], d["producer_epoch"],
            d["timeout_ms"]) == (1, "Ongoing", transactions["cli-open"], 0, 60_000)
    assert d["partitions"] == [{"topic": "cli-t", "partition": 0}]
    assert before - 60_000 < d["start_time_ms"] <= before
    assert d["duration_ms"] >= 0

    result = brook(broker, "transactions", "describe", "--transactional-id", "cli-open")
    assert result.stdout.splitlines()[0].split() == [
        "COORDINATOR-ID", "TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH",
        "TRANSACTION-STATE", "TRANSACTION-TIMEOUT-MS", "CURRENT-TRANSACTION-START-TIME-MS",
        "TRANSACTION-DURATION-MS", "TOPIC-PARTITIONS"]
    [row] = rows(result.stdout)
    assert row[:6] == ["1", "cli-open", str(transactions["cli-open"]), "0", "Ongoing", "60000"]
    assert row[8] == "cli-t-0"

    # no transaction began: the broker answers start time -1, which kio's own entity refuses
    result = brook(broker, "transactions", "describe", "--transactional-id", "cli-empty")
    assert result.exit_code == 0, result.output
    [row] = rows(result.stdout)
    assert row[4:] == ["Empty", "60000", "-", "-", "-"]

    result = brook(broker, "transactions", "describe", "--transactional-id", "cli-nobody")
    assert result.exit_code == 1
    assert "transactional id 'cli-nobody' does not exist" in result.stderr


def test_describe_producers(broker, transactions):
    result = brook(broker, "transactions", "describe-producers", "--topic", "cli-t",
                   "--partition", "0")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].split() == [
        "PRODUCER-ID", "PRODUCER-EPOCH", "LATEST-COORDINATOR-EPOCH", "LAST-SEQUENCE",
        "LAST-TIMESTAMP", "CURRENT-TRANSACTION-START-OFFSET"]
    [row] = rows(result.stdout)
    assert row[:4] == [str(transactions["cli-open"]), "0", "-", "0"] and row[5] == "0"

    result = brook(broker, "transactions", "describe-producers", "--topic", "cli-t",
                   "--partition", "1", "--output", "json")
    assert result.exit_code == 0, result.output
    [p] = json.loads(result.stdout)["producers"]
    assert (p["producer_id"], p["coordinator_epoch"], p["txn_start_offset"]) == \
        (transactions["cli-done"], 0, None)

    result = brook(broker, "transactions", "describe-producers", "--topic", "cli-t",
                   "--partition", "7")
    assert result.exit_code == 1 and "topic 'cli-t' has no partition 7 (it has 2)" in result.stderr
    result = brook(broker, "transactions", "describe-producers", "--topic", "cli-none",
                   "--partition", "0")
    assert result.exit_code == 1 and "unknown topic 'cli-none'" in result.stderr


def _hang(broker, topic: str, ts: int) -> tuple[int, int]:
    """A transaction left open on partition 0 that no coordinator knows (docs/transactions.md,
    driving a partition's transaction by hand), then a plain record after it; the producer id
    and the transaction's first offset."""
    with WireClient(broker.bootstrap) as c:
        pid = init_producer_id(c)
        for records, tid in ((encode_batch([Record(0, ts, None, b"hanging")], producer_id=pid,
                                           producer_epoch=0, base_sequence=0,
                                           transactional=True), "nobody's"),
                             (encode_batch([Record(0, ts, None, b"after")]), None)):
            r = c.request(request(0, 9, transactional_id=tid, acks=-1,
                                  timeout=timedelta(seconds=5), topic_data=[
                                      {"name": topic, "partition_data": [
                                          {"index": 0, "records": records}]}]))
            p = r.responses[0].partition_responses[0]
            assert p.error_code == E.none, p
            if tid is not None:
                first = p.base_offset
    return pid, first


def _last_stable_offset(broker, topic: str) -> tuple[int, int]:
    with WireClient(broker.bootstrap) as c:
        return list_latest(c, READ_COMMITTED, topic), list_latest(c, READ_UNCOMMITTED, topic)


def _read_committed(broker, topic: str, want: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(confluent_config(broker.bootstrap, **{
        "group.id": f"{topic}-reader", "isolation.level": "read_committed",
        "enable.auto.commit": False}))
    seen: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(seen) < want:
            m = c.poll(0.3)
            if m is not None and m.error() is None:
                seen.append(m.value())
    finally:
        c.close()
    return seen


def test_find_hanging_and_abort_by_start_offset(broker, transactions):
    with WireClient(broker.bootstrap) as c:
        assert create_topic(c, "cli-hang", partitions=1).error_code == E.none
    pid, first = _hang(broker, "cli-hang", int(time.time() * 1000) - HOUR_MS)
    assert _last_stable_offset(broker, "cli-hang") == (first, first + 2)  # stuck before it

    result = brook(broker, "transactions", "find-hanging", "--topic", "cli-hang")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].split() == [
        "TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH",
        "START-OFFSET", "LAST-TIMESTAMP", "DURATION(MIN)"]
    [row] = rows(result.stdout)
    assert row[:6] == ["cli-hang", "0", str(pid), "0", "-", str(first)]
    assert int(row[7]) >= 59
    # the whole broker: cli-open's transaction (its coordinator holds cli-t-0) does not hang,
    # however short the timeout looked at
    result = brook(broker, "transactions", "find-hanging", "--broker-id", "1",
                   "--max-transaction-timeout", "0", "--output", "json")
    assert result.exit_code == 0, result.output
    assert [(h["topic"], h["producer_id"]) for h in json.loads(result.stdout)] == \
        [("cli-hang", pid)]

    result = brook(broker, "transactions", "abort", "--topic", "cli-hang", "--partition", "0",
                   "--start-offset", str(first + 1))
    assert result.exit_code == 1
    assert f"no transaction open on cli-hang-0 starts at offset {first + 1}" in result.stderr

    result = brook(broker, "transactions", "abort", "--topic", "cli-hang", "--partition", "0",
                   "--start-offset", str(first))
    assert result.exit_code == 0, result.output
    assert result.stdout == (f"Aborted the transaction of producer {pid} (epoch 0, coordinator "
                             f"epoch 0) on cli-hang-0 starting at offset {first}.\n")
    assert _last_stable_offset(broker, "cli-hang") == (first + 3, first + 3)  # the marker's +1
    assert _read_committed(broker, "cli-hang", 1) == [b"after"]
    result = brook(broker, "transactions", "find-hanging", "--topic", "cli-hang",
                   "--partition", "0", "--max-transaction-timeout", "0")
    assert result.exit_code == 0 and rows(result.stdout) == []


def test_abort_by_producer_id(broker):
    with WireClient(broker.bootstrap) as c:
        assert create_topic(c, "cli-hang-pid", partitions=1).error_code == E.none
    pid, first = _hang(broker, "cli-hang-pid", int(time.time() * 1000))
    assert _last_stable_offset(broker, "cli-hang-pid") == (first, first + 2)
    result = brook(broker, "transactions", "abort", "--topic", "cli-hang-pid", "--partition", "0",
                   "--producer-id", str(pid), "--producer-epoch", "0", "--coordinator-epoch", "-1")
    assert result.exit_code == 0, result.output
    assert "coordinator epoch 0" in result.stdout  # -1 (no marker yet) asks with 0
    assert _last_stable_offset(broker, "cli-hang-pid") == (first + 3, first + 3)


@pytest.mark.parametrize("args,message", [
    (["abort", "--topic", "t", "--partition", "0"], "name the transaction with --start-offset"),
    (["abort", "--topic", "t", "--partition", "0", "--producer-id", "3"],
     "--producer-id needs --producer-epoch too"),
    (["abort", "--topic", "t", "--partition", "0", "--start-offset", "3", "--producer-id", "3"],
     "give one"),
    (["find-hanging"], "needs --topic or --broker-id"),
    (["find-hanging", "--broker-id", "1", "--partition", "0"], "--partition needs --topic"),
])
def test_usage_errors(broker, args, message):
    result = brook(broker, "transactions", *args)
    assert result.exit_code == 2 and message in result.stderr


# --- without a broker -----------------------------------------------------------------------


def _state(pid, start=None, last=0, coordinator_epoch=None):
    return ProducerState(pid, 0, coordinator_epoch, 0, last, start)


def test_open_transactions_are_those_older_than_the_longest_timeout():
    now = 10 * HOUR_MS
    producers = {("t", 0): [_state(1, start=5, last=now - 16 * 60_000), _state(2, last=0),
                            _state(3, start=9, last=now - 60_000)]}
    assert open_transactions(producers, now, 15 * 60_000) == [(("t", 0), producers[("t", 0)][0])]
    assert len(open_transactions(producers, now, 0)) == 2


def test_a_transaction_hangs_unless_its_coordinator_holds_the_partition():
    def described(*tps):
        return TransactionDescription("app", 1, "Ongoing", 1, 0, 60_000, 0, tuple(tps))

    unknown, unlisted, elsewhere, held = (_state(p, start=0) for p in (1, 2, 3, 4))
    candidates = [(("t", 0), s) for s in (unknown, unlisted, elsewhere, held)]
    tids = {1: "gone", 3: "other", 4: "app"}
    descriptions = {"gone": None, "other": described(("t", 1)), "app": described(("t", 0))}
    assert [s.producer_id for _, s in hanging(candidates, tids, descriptions)] == [1, 2, 3]


def test_abort_spec_finds_the_producer_by_its_start_offset():
    producers = [_state(7, start=4, coordinator_epoch=3), _state(8, start=9)]
    assert abort_spec(producers, ("t", 0), 4) == (7, 0, 3)
    assert abort_spec(producers, ("t", 0), 9) == (8, 0, 0)  # never a marker: epoch 0
    with pytest.raises(CliError):
        abort_spec(producers, ("t", 0), 5)
