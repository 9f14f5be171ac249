"""The requests of `brook transactions` (KIP-664's tools), each sent to the broker that must
answer it, as Kafka's AdminClient sends them: ListTransactions to every broker, FindCoordinator
(key type 1) then DescribeTransactions to a transactional id's coordinator, DescribeProducers and
WriteTxnMarkers to a partition's leader (or to the broker named). confluent-kafka's Python
client has none of these calls; they go over brook's own connection (`wire.request`).

Answers become plain values; failures a one-line CliError. What Kafka's AdminClient retries
(a coordinator loading or moving, a leader moving) is asked again until `--timeout` runs out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, TypeVar

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from ..protocol.lenient import describe_transactions_response
from ..protocol.messages import request_class
from . import options, wire
from .errors import CliError

TP = tuple[str, int]
T = TypeVar("T")

DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
WRITE_TXN_MARKERS, API_VERSIONS = 27, 18
E = ErrorCode
#: Answers that change once a coordinator has loaded or moved, or a leader was elected.
RETRIABLE = frozenset({E.coordinator_load_in_progress, E.coordinator_not_available,
                       E.not_coordinator, E.not_leader_or_follower, E.leader_not_available})
RETRY_BACKOFF = 0.2  # seconds between two asks
MAX_PARTITIONS_PER_REQUEST = 500  # as Kafka's find-hanging asks: no giant request


class Retry(Exception):
    """An answer worth asking for again (RETRIABLE), with what to say if time runs out."""


def error_name(code: ErrorCode) -> str:
    return code.name.upper()


@dataclass(frozen=True)
class ProducerState:
    """A producer of a partition (DescribeProducers); None where Kafka's tool shows none."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int | None
    last_sequence: int
    last_timestamp: int
    txn_start_offset: int | None  # the first offset of its open transaction


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int | None  # None: no transaction open
    partitions: tuple[TP, ...]


class Brokers:
    """The cluster as the transaction tools see it: its brokers (DescribeCluster, from the first
    bootstrap address that answers) and its partitions' leaders (Metadata)."""

    def __init__(self, bootstrap: str | None = None, timeout: float | None = None,
                 security=None) -> None:
        from .client import PROBE_TIMEOUT, probe
        from .cluster import cluster_view

        self.bootstrap = options.bootstrap(bootstrap)
        self.timeout = options.timeout(timeout)
        self.security = options.security() if security is None else security
        probe(self.bootstrap, min(self.timeout, PROBE_TIMEOUT))
        view = cluster_view(self.bootstrap, self.timeout, self.security)
        self.nodes = {b["id"]: (b["host"], b["port"]) for b in view["brokers"]}

    def send(self, node: int, body, response_cls: type | None = None):
        if node not in self.nodes:
            known = ", ".join(map(str, sorted(self.nodes))) or "none"
            raise CliError(f"no broker {node} in the cluster (brokers: {known})")
        host, port = self.nodes[node]
        try:
            return wire.request(host, port, body, self.timeout, self.security, response_cls)
        except CliError:
            # a broker closes the connection on an API it does not serve: say which
            key = int(type(body).__api_key__)
            if key not in self._api_keys(host, port):
                raise CliError(f"broker {node} ({host}:{port}) does not serve "
                               f"{type(body).__name__.removesuffix('Request')} (API key {key})"
                               ) from None
            raise

    def _api_keys(self, host: str, port: int) -> set[int]:
        response = wire.request(host, port, request_class(API_VERSIONS, 0)(), self.timeout,
                                self.security)
        return {int(k.api_key) for k in response.api_keys}

    def any_node(self) -> int:
        return min(self.nodes)

    def topics(self, names: list[str] | None = None) -> list[dict]:
        """wire.topic_metadata of `names` (None: every topic), asked of any broker; a topic
        that does not exist is an error."""
        host, port = self.nodes[self.any_node()]
        topics = wire.topic_metadata(host, port, self.timeout, self.security, names)
        for t in topics:
            if t["error"] == "UNKNOWN_TOPIC_OR_PARTITION":
                raise CliError(f"unknown topic '{t['topic']}'")
            if t["error"] is not None and t["error"] != "LEADER_NOT_AVAILABLE":
                raise CliError(f"cannot describe topic '{t['topic']}': {t['error']}")
        return topics

    def leaders(self, tps: Iterable[TP]) -> dict[TP, int]:
        """The leader of each partition (-1 while it has none); a partition that does not
        exist is an error."""
        tps = sorted(set(tps))
        leaders = {(t["topic"], p["partition"]): p["leader"]
                   for t in self.topics(sorted({t for t, _ in tps})) for p in t["partitions"]}
        for topic, partition in tps:
            if (topic, partition) not in leaders:
                count = sum(1 for t, _ in leaders if t == topic)
                raise CliError(f"topic '{topic}' has no partition {partition} (it has {count})")
        return {tp: leaders[tp] for tp in tps}

    def until_done(self, attempt: Callable[[], T]) -> T:
        """`attempt()`, asked again while it raises Retry, until the timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return attempt()
            except Retry as exc:
                if time.monotonic() >= deadline:
                    raise CliError(f"{exc} (still so after {self.timeout:g} s)") from None
                time.sleep(RETRY_BACKOFF)


# --- DescribeProducers ---------------------------------------------------------------------


def describe_producers(brokers: Brokers, tps: Iterable[TP],
                       broker_id: int | None = None) -> dict[TP, list[ProducerState]]:
    """The producers of each partition, from its leader or from broker `broker_id`."""
    found: dict[TP, list[ProducerState]] = {}
    todo = set(tps)

    def attempt():
        if broker_id is not None:
            targets = {broker_id: sorted(todo)}
        else:
            targets = {}
            for tp, leader in brokers.leaders(todo).items():
                if leader < 0:
                    raise Retry(f"partition {tp[0]}-{tp[1]} has no leader")
                targets.setdefault(leader, []).append(tp)
        retry = None
        answers = {}
        for node, group in targets.items():
            for i in range(0, len(group), MAX_PARTITIONS_PER_REQUEST):
                chunk = group[i:i + MAX_PARTITIONS_PER_REQUEST]
                answers.update({tp: (node, a) for tp, a in
                                _describe_producers(brokers, node, chunk).items()})
        for tp, (node, answer) in sorted(answers.items()):
            if isinstance(answer, list):
                found[tp] = answer
                todo.discard(tp)
            elif answer in RETRIABLE and broker_id is None:
                retry = f"describing the producers of {tp[0]}-{tp[1]}: {error_name(answer)}"
            else:
                where = f"broker {node}" if broker_id is not None else "its leader"
                raise CliError(f"cannot describe the producers of {tp[0]}-{tp[1]} on "
                               f"{where}: {error_name(answer)}")
        if retry:
            raise Retry(retry)

    brokers.until_done(attempt)
    return found


def _describe_producers(brokers: Brokers, node: int,
                        tps: list[TP]) -> dict[TP, list[ProducerState] | ErrorCode]:
    mod = load_payload_module(DESCRIBE_PRODUCERS, 0, EntityType.request)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    response = brokers.send(node, request_class(DESCRIBE_PRODUCERS, 0)(topics=tuple(
        mod.TopicRequest(name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items())))
    out: dict[TP, list[ProducerState] | ErrorCode] = {}
    for t in response.topics:
        for p in t.partitions:
            tp = (t.name, int(p.partition_index))
            if p.error_code != E.none:
                out[tp] = p.error_code
                continue
            out[tp] = [ProducerState(
                producer_id=int(s.producer_id), producer_epoch=int(s.producer_epoch),
                coordinator_epoch=int(s.coordinator_epoch) if s.coordinator_epoch >= 0 else None,
                last_sequence=int(s.last_sequence), last_timestamp=int(s.last_timestamp),
                txn_start_offset=int(s.current_txn_start_offset)
                if s.current_txn_start_offset >= 0 else None) for s in p.active_producers]
    return out


# --- ListTransactions, DescribeTransactions ------------------------------------------------------


def list_transactions(brokers: Brokers, states: list[str] = (), producer_ids: list[int] = (),
                      duration_ms: int = -1) -> tuple[list[TransactionListing], list[str]]:
    """Every broker's transactional ids (filtered by state names, producer ids and, if not -1,
    how long their transaction has run), and the state names no broker knows."""
    listed: list[TransactionListing] = []
    unknown: set[str] = set()
    for node in sorted(brokers.nodes):
        response = brokers.until_done(lambda node=node: _list_transactions(
            brokers, node, states, producer_ids, duration_ms))
        unknown.update(response.unknown_state_filters)
        listed.extend(TransactionListing(t.transactional_id, node, int(t.producer_id),
                                         t.transaction_state)
                      for t in response.transaction_states)
    return sorted(listed, key=lambda t: t.transactional_id), sorted(unknown)


def _list_transactions(brokers: Brokers, node: int, states, producer_ids, duration_ms: int):
    response = brokers.send(node, request_class(LIST_TRANSACTIONS, 1)(
        state_filters=tuple(states), producer_id_filters=tuple(producer_ids),
        duration_filter=duration_ms))
    if response.error_code in RETRIABLE:
        raise Retry(f"listing the transactions of broker {node}: "
                    f"{error_name(response.error_code)}")
    if response.error_code != E.none:
        raise CliError(f"cannot list the transactions of broker {node}: "
                       f"{error_name(response.error_code)}")
    return response


def transaction_coordinator(brokers: Brokers, transactional_id: str) -> int:
    """The broker coordinating `transactional_id` (FindCoordinator, key type 1)."""
    def attempt() -> int:
        host, port = brokers.nodes[brokers.any_node()]
        found = wire.find_coordinators(host, port, wire.TRANSACTION_KEY, [transactional_id],
                                       brokers.timeout, brokers.security)[transactional_id]
        if isinstance(found, tuple):
            return found[0]
        if ErrorCode[found.lower()] in RETRIABLE:
            raise Retry(f"finding the coordinator of '{transactional_id}': {found}")
        raise CliError(f"cannot find the coordinator of transactional id "
                       f"'{transactional_id}': {found}")
    return brokers.until_done(attempt)


def describe_transaction(brokers: Brokers, transactional_id: str) -> TransactionDescription | None:
    """The state of `transactional_id` at its coordinator; None if the coordinator does not
    know it (TRANSACTIONAL_ID_NOT_FOUND)."""
    def attempt():
        node = transaction_coordinator(brokers, transactional_id)
        response = brokers.send(node, request_class(DESCRIBE_TRANSACTIONS, 0)(
            transactional_ids=(transactional_id,)), describe_transactions_response(0))
        (state,) = response.transaction_states
        if state.error_code == E.transactional_id_not_found:
            return None
        if state.error_code in RETRIABLE:
            raise Retry(f"describing '{transactional_id}': {error_name(state.error_code)}")
        if state.error_code != E.none:
            raise CliError(f"cannot describe transactional id '{transactional_id}': "
                           f"{error_name(state.error_code)}")
        return TransactionDescription(
            transactional_id, node, state.transaction_state, int(state.producer_id),
            int(state.producer_epoch), int(state.transaction_timeout.total_seconds() * 1000),
            int(state.transaction_start_time) if state.transaction_start_time >= 0 else None,
            tuple(sorted((t.topic, int(p)) for t in state.topics for p in t.partitions)))
    return brokers.until_done(attempt)


# --- WriteTxnMarkers -----------------------------------------------------------------------------


def abort_transaction(brokers: Brokers, tp: TP, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int) -> None:
    """An ABORT marker for the producer's transaction on `tp`, written by its leader
    (WriteTxnMarkers: what Kafka's AdminClient.abortTransaction sends)."""
    mod = load_payload_module(WRITE_TXN_MARKERS, 1, EntityType.request)
    body = request_class(WRITE_TXN_MARKERS, 1)(markers=(mod.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
        coordinator_epoch=coordinator_epoch,
        topics=(mod.WritableTxnMarkerTopic(name=tp[0], partition_indexes=(tp[1],)),)),))

    def attempt() -> None:
        leader = brokers.leaders([tp])[tp]
        if leader < 0:
            raise Retry(f"partition {tp[0]}-{tp[1]} has no leader")
        response = brokers.send(leader, body)
        code = response.markers[0].topics[0].partitions[0].error_code
        if code in RETRIABLE:
            raise Retry(f"aborting on {tp[0]}-{tp[1]}: {error_name(code)}")
        if code != E.none:
            raise CliError(f"cannot abort the transaction of producer {producer_id} on "
                           f"{tp[0]}-{tp[1]}: {error_name(code)}")
    brokers.until_done(attempt)
