"""`brook transactions`: list, describe, describe-producers, abort, find-hanging (Kafka's
kafka-transactions.sh, KIP-664): what the transaction coordinators know of transactional ids,
what the partitions know of their producers, and the way out of a hanging transaction (one left
open on a partition that no coordinator will end: its ABORT marker written by hand).

The row builders and the hanging-transaction rule are pure functions of what the brokers said;
the commands fetch (`txn_wire`) and print.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Iterable, Optional

import typer

from . import output
from .errors import CliError
from .options import bootstrap_option, timeout_option
from .output import Format, output_option

if TYPE_CHECKING:  # txn_wire (kio's index, brook.client and with it pandas and pyarrow) is
    # imported by the commands that use it: the `brook` command imports this module, and
    # `brook broker` (started for every integration test) should not pay seconds for it
    from .txn_wire import TP, Brokers, ProducerState, TransactionDescription

app = typer.Typer(no_args_is_help=True, help="Transactions: list, describe, describe-producers, "
                                             "abort, find-hanging (kafka-transactions.sh).")

#: Kafka's transaction states (what ListTransactions' --state filter names).
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
          "Dead", "PrepareEpochFence")
PRODUCER_COLUMNS = ("PRODUCER-ID", "PRODUCER-EPOCH", "LATEST-COORDINATOR-EPOCH",
                    "LAST-SEQUENCE", "LAST-TIMESTAMP", "CURRENT-TRANSACTION-START-OFFSET")
HANGING_COLUMNS = ("TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH",
                   "START-OFFSET", "LAST-TIMESTAMP", "DURATION(MIN)")
MINUTE_MS = 60_000


def _now_ms() -> int:
    return int(time.time() * 1000)


# --- pure views ---------------------------------------------------------------------------------


def producer_rows(producers: Iterable[ProducerState]) -> list[tuple]:
    return [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
             p.last_timestamp, p.txn_start_offset) for p in producers]


def description_view(d: TransactionDescription, now_ms: int) -> dict[str, Any]:
    """A transactional id's state, with how long its transaction has run (None: none open)."""
    return {"coordinator": d.coordinator, "transactional_id": d.transactional_id,
            "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
            "state": d.state, "timeout_ms": d.timeout_ms, "start_time_ms": d.start_ms,
            "duration_ms": None if d.start_ms is None else now_ms - d.start_ms,
            "partitions": [{"topic": t, "partition": p} for t, p in d.partitions]}


def open_transactions(producers: dict[TP, list[ProducerState]], now_ms: int,
                      max_timeout_ms: int) -> list[tuple[TP, ProducerState]]:
    """The transactions open on the partitions whose producer last wrote longer ago than any
    transaction may run (`transaction.max.timeout.ms` at most): the candidates for hanging."""
    return [(tp, p) for tp, states in sorted(producers.items()) for p in states
            if p.txn_start_offset is not None and now_ms - p.last_timestamp > max_timeout_ms]


def hanging(candidates: list[tuple[TP, ProducerState]], transactional_ids: dict[int, str],
            descriptions: dict[str, TransactionDescription | None]
            ) -> list[tuple[TP, ProducerState]]:
    """Kafka's rule: a candidate hangs when no coordinator lists its producer id, when its
    transactional id's coordinator does not know it, or when that coordinator's transaction
    does not hold the partition (it would write no marker there)."""
    out = []
    for tp, p in candidates:
        tid = transactional_ids.get(p.producer_id)
        description = descriptions.get(tid) if tid is not None else None
        if description is None or tp not in description.partitions:
            out.append((tp, p))
    return out


def hanging_view(found: list[tuple[TP, ProducerState]], now_ms: int) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": i, "producer_id": p.producer_id,
             "producer_epoch": p.producer_epoch, "coordinator_epoch": p.coordinator_epoch,
             "start_offset": p.txn_start_offset, "last_timestamp": p.last_timestamp,
             "duration_minutes": (now_ms - p.last_timestamp) // MINUTE_MS}
            for (t, i), p in found]


def abort_spec(producers: list[ProducerState], tp: TP, start_offset: int) -> tuple[int, int, int]:
    """(producer id, epoch, coordinator epoch) of the transaction open on `tp` from
    `start_offset`; a producer that never had a marker gets coordinator epoch 0, which no
    coordinator's epoch is below (as Kafka's tool does)."""
    for p in producers:
        if p.txn_start_offset == start_offset:
            return p.producer_id, p.producer_epoch, max(p.coordinator_epoch or 0, 0)
    raise CliError(f"no transaction open on {tp[0]}-{tp[1]} starts at offset {start_offset}")


# --- commands -----------------------------------------------------------------------------------


@app.command("list")
def list_cmd(
    state: Optional[str] = typer.Option(
        None, "--state", help="Only ids in these states, comma-separated (e.g. Ongoing,Empty)."),
    producer_id: list[int] = typer.Option(
        [], "--producer-id", help="Only ids of this producer id (repeatable)."),
    duration_filter: int = typer.Option(
        -1, "--duration-filter", help="Only transactions running longer than this many ms "
                                      "(-1: all)."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """List the transactional ids every coordinator knows, with their state."""
    from .txn_wire import Brokers, list_transactions

    states = [s.strip() for s in (state or "").split(",") if s.strip()]
    listed, unknown = list_transactions(Brokers(bootstrap, timeout), states, producer_id,
                                        duration_filter)
    for name in unknown:
        output.warn(f"no broker knows the state '{name}' (Kafka's states: {', '.join(STATES)})")
    if fmt is Format.json:
        output.print_json([asdict(t) for t in listed])
        return
    output.table(("TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "TRANSACTION-STATE"),
                 [(t.transactional_id, t.coordinator, t.producer_id, t.state) for t in listed])


@app.command("describe")
def describe_cmd(
    transactional_id: str = typer.Option(..., "--transactional-id", help="The transactional id."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """Describe a transactional id at its coordinator.

    Its state, producer id and epoch, timeout, and the open transaction's start time, duration
    and partitions."""
    from .txn_wire import Brokers, describe_transaction

    found = describe_transaction(Brokers(bootstrap, timeout), transactional_id)
    if found is None:
        raise CliError(f"transactional id '{transactional_id}' does not exist")
    view = description_view(found, _now_ms())
    if fmt is Format.json:
        output.print_json(view)
        return
    output.table(("COORDINATOR-ID", "TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH",
                  "TRANSACTION-STATE", "TRANSACTION-TIMEOUT-MS",
                  "CURRENT-TRANSACTION-START-TIME-MS", "TRANSACTION-DURATION-MS",
                  "TOPIC-PARTITIONS"),
                 [(view["coordinator"], view["transactional_id"], view["producer_id"],
                   view["producer_epoch"], view["state"], view["timeout_ms"],
                   view["start_time_ms"], view["duration_ms"],
                   ",".join(f"{t}-{p}" for t, p in found.partitions) or None)])


@app.command("describe-producers")
def describe_producers_cmd(
    topic: str = typer.Option(..., "--topic", help="The topic."),
    partition: int = typer.Option(..., "--partition", min=0, help="The partition."),
    broker_id: Optional[int] = typer.Option(
        None, "--broker-id", help="Ask this broker (a replica of the partition) instead of the "
                                  "leader."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """The producers of a partition and their open transactions.

    What the partition's producer state holds (DescribeProducers): each producer's epoch, the
    coordinator epoch of its last marker, its last sequence and timestamp, and the first
    offset of its open transaction."""
    from .txn_wire import Brokers, describe_producers

    tp = (topic, partition)
    producers = describe_producers(Brokers(bootstrap, timeout), [tp], broker_id)[tp]
    if fmt is Format.json:
        output.print_json({"topic": topic, "partition": partition,
                           "producers": [asdict(p) for p in producers]})
        return
    output.table(PRODUCER_COLUMNS, producer_rows(producers))


@app.command("abort")
def abort_cmd(
    topic: str = typer.Option(..., "--topic", help="The topic."),
    partition: int = typer.Option(..., "--partition", min=0, help="The partition."),
    start_offset: Optional[int] = typer.Option(
        None, "--start-offset", help="The first offset of the transaction to abort (its "
                                     "producer is found with DescribeProducers)."),
    producer_id: Optional[int] = typer.Option(None, "--producer-id", help="Or: its producer id,"),
    producer_epoch: Optional[int] = typer.Option(None, "--producer-epoch",
                                                 help="its producer epoch,"),
    coordinator_epoch: Optional[int] = typer.Option(
        None, "--coordinator-epoch", help="and the coordinator epoch of its last marker."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Abort a hanging transaction on one partition.

    Its ABORT marker, written by the partition's leader (WriteTxnMarkers; needs Cluster Alter
    with an authorizer). Only for a transaction no coordinator will end: a live producer's
    transaction aborted here may still commit on its other partitions."""
    tp = (topic, partition)
    if start_offset is None and producer_id is None:
        raise CliError("name the transaction with --start-offset, or with --producer-id, "
                       "--producer-epoch and --coordinator-epoch", code=2)
    if start_offset is not None and producer_id is not None:
        raise CliError("--start-offset and --producer-id name the transaction two ways: "
                       "give one", code=2)
    from .txn_wire import Brokers, abort_transaction, describe_producers

    brokers = Brokers(bootstrap, timeout)
    if start_offset is not None:
        producers = describe_producers(brokers, [tp])[tp]
        producer_id, producer_epoch, coordinator_epoch = abort_spec(producers, tp, start_offset)
    else:
        for name, value in (("--producer-epoch", producer_epoch),
                            ("--coordinator-epoch", coordinator_epoch)):
            if value is None:
                raise CliError(f"--producer-id needs {name} too", code=2)
        coordinator_epoch = max(coordinator_epoch, 0)  # (-1: never had a marker)
    abort_transaction(brokers, tp, producer_id, producer_epoch, coordinator_epoch)
    where = f" starting at offset {start_offset}" if start_offset is not None else ""
    output.line(f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}, "
                f"coordinator epoch {coordinator_epoch}) on {topic}-{partition}{where}.")


@app.command("find-hanging")
def find_hanging_cmd(
    broker_id: Optional[int] = typer.Option(
        None, "--broker-id", help="Search the partitions this broker holds a replica of."),
    topic: Optional[str] = typer.Option(None, "--topic", help="Search this topic's partitions."),
    partition: Optional[int] = typer.Option(None, "--partition", min=0,
                                            help="Only this partition (with --topic)."),
    max_transaction_timeout: int = typer.Option(
        15, "--max-transaction-timeout", min=0,
        help="Minutes: transactions whose producer wrote more recently are not looked at "
             "(transaction.max.timeout.ms: none may run longer)."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """Find hanging transactions (`abort` ends one).

    Transactions open on a partition for longer than any transaction may run, and unknown to
    their coordinator (or whose transaction there does not hold the partition), so that
    nothing will ever end them."""
    if topic is None and broker_id is None:
        raise CliError("find-hanging needs --topic or --broker-id to limit the search", code=2)
    if partition is not None and topic is None:
        raise CliError("--partition needs --topic", code=2)
    from .txn_wire import Brokers, describe_producers

    brokers = Brokers(bootstrap, timeout)
    tps = _partitions_to_search(brokers, topic, partition, broker_id)
    now = _now_ms()
    candidates = open_transactions(describe_producers(brokers, tps, broker_id), now,
                                   max_transaction_timeout * MINUTE_MS)
    found = _hanging_of(brokers, candidates)
    rows = hanging_view(found, _now_ms())
    if fmt is Format.json:
        output.print_json(rows)
        return
    output.table(HANGING_COLUMNS, [tuple(r.values()) for r in rows])


def _partitions_to_search(brokers: Brokers, topic: str | None, partition: int | None,
                          broker_id: int | None) -> list[TP]:
    if topic is not None and partition is not None:
        return [(topic, partition)]
    return [(t["topic"], p["partition"])
            for t in brokers.topics([topic] if topic is not None else None)
            for p in t["partitions"] if broker_id is None or broker_id in p["replicas"]]


def _hanging_of(brokers: Brokers, candidates: list[tuple[TP, ProducerState]]
                ) -> list[tuple[TP, ProducerState]]:
    """hanging() of the candidates, with what the coordinators say of their producers."""
    if not candidates:
        return []
    from .txn_wire import describe_transaction, list_transactions

    pids = sorted({p.producer_id for _, p in candidates})
    listed, _ = list_transactions(brokers, producer_ids=pids)
    tids = {t.producer_id: t.transactional_id for t in listed if t.producer_id in pids}
    descriptions = {tid: describe_transaction(brokers, tid) for tid in set(tids.values())}
    return hanging(candidates, tids, descriptions)
