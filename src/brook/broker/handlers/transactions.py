"""Transaction APIs: InitProducerId with a transactional id, AddPartitionsToTxn (v0-v3, and
v4's batched form between brokers), AddOffsetsToTxn, EndTxn, DescribeTransactions and
ListTransactions (TransactionalId Describe; those it may not describe are left out). Each
checks the ACLs (TransactionalId Write; topics' Write; the group's Read), runs the transaction
coordinator's shard (``brook.coordinator.transaction.shard``) through its runtime
(``broker.txn_coordinator``), and answers with Kafka's error codes for the request's version
(PRODUCER_FENCED is INVALID_PRODUCER_EPOCH to clients older than KIP-588)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from kio.schema.errors import ErrorCode

from ...coordinator.common.runtime import CoordinatorError, CoordinatorNotAvailable
from ...coordinator.group.partitioner import OFFSETS_TOPIC
from ...coordinator.transaction.metadata import TransactionState
from ...coordinator.transaction.shard import NEED_PRODUCER_ID, InitProducerIdAnswer
from ...protocol.messages import make, response_class, response_module
from ..zookeeper_calls import ZooKeeperUnavailable
from ..auth import authz
from .api import Api
from .common import NO_THROTTLE, ms

ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26

E = ErrorCode


def _fenced_for(code: ErrorCode, version: int, first: int) -> ErrorCode:
    """PRODUCER_FENCED as a client of ``version`` knows it (from ``first`` on)."""
    if code == E.producer_fenced and version < first:
        return E.invalid_producer_epoch
    return code


def _runtime(broker):
    if broker.txn_coordinator is None or not broker.ensure_transaction_topic():
        raise CoordinatorNotAvailable("the transaction state topic is not available")
    return broker.txn_coordinator


def _may_write(broker, connection, tid: str) -> bool:
    return authz.allowed(broker, connection, authz.Op.WRITE, authz.TRANSACTIONAL_ID, tid)


async def _run(broker, tid: str, op, read: bool = False):
    """The shard's answer to the operation ``op`` (with ``read``, to the read-only ``op``), or
    the CoordinatorError's code."""
    try:
        runtime = _runtime(broker)
        return await (runtime.read(tid, op) if read else runtime.run(tid, op))
    except CoordinatorError as exc:
        return exc.code


# --- InitProducerId -----------------------------------------------------------------------------


async def init_producer_id(broker, request, connection):
    """InitProducerId with a transactional id (called by ``producer_ids.handle``)."""
    body, version = request.body, request.api_version
    cls = response_class(22, version)

    def answer(code, pid=-1, epoch=-1):
        return make(cls, throttle_time=NO_THROTTLE, error_code=_fenced_for(code, version, 4),
                    producer_id=pid, producer_epoch=epoch)

    tid = body.transactional_id
    if not _may_write(broker, connection, tid):
        return answer(E.transactional_id_authorization_failed)
    timeout = ms(body.transaction_timeout)
    expected_pid = getattr(body, "producer_id", -1)
    expected_epoch = getattr(body, "producer_epoch", -1)

    def op(new_pid):
        return lambda shard, now: shard.init_producer_id(
            tid, timeout, now, expected_producer_id=expected_pid, expected_epoch=expected_epoch,
            new_producer_id=new_pid)

    result = await _run(broker, tid, op(None))
    if result is NEED_PRODUCER_ID:
        try:
            pid = await broker.new_producer_id()
        except ZooKeeperUnavailable:  # a new block of ids cannot be claimed now: asked again
            return answer(E.coordinator_not_available)
        result = await _run(broker, tid, op(pid))
        if result is NEED_PRODUCER_ID:  # (cannot happen: the id was given)
            return answer(E.unknown_server_error)
    if isinstance(result, InitProducerIdAnswer):
        return answer(result.error, result.producer_id, result.producer_epoch)
    return answer(result)


# --- AddPartitionsToTxn -----------------------------------------------------------------------


async def _add_partitions(broker, connection, tid, pid, epoch, topics, version):
    """{(topic, partition): error} for one transaction's partitions."""
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    if not _may_write(broker, connection, tid):
        return {tp: E.transactional_id_authorization_failed for tp in wanted}
    errors = {}
    names = {t for t, _ in wanted}
    writable = authz.allowed_names(broker, connection, authz.Op.WRITE, authz.TOPIC, names) \
        if broker.authorizer is not None else names
    for t, p in wanted:
        if t not in writable:
            errors[(t, p)] = E.topic_authorization_failed
        elif not 0 <= p < _partitions_of(broker, t):
            errors[(t, p)] = E.unknown_topic_or_partition
    if errors:
        return {tp: errors.get(tp, E.operation_not_attempted) for tp in wanted}
    code = await _run(broker, tid, lambda shard, now: shard.add_partitions(
        tid, pid, epoch, wanted, now))
    return {tp: _fenced_for(code, version, 2) for tp in wanted}


def _partitions_of(broker, topic: str) -> int:
    if broker.replicas is not None:
        cache = broker.replicas.cache
        return len(cache.topics.get(topic, ()))
    return broker.partition_count(topic)


def _topic_results(mod, results: dict):
    by_topic: dict[str, list] = {}
    for (t, p), code in results.items():
        by_topic.setdefault(t, []).append(make(mod.AddPartitionsToTxnPartitionResult,
                                               partition_index=p, partition_error_code=code))
    return tuple(make(mod.AddPartitionsToTxnTopicResult, name=t, results_by_partition=tuple(rs))
                 for t, rs in by_topic.items())


async def handle_add_partitions(broker, request, connection):
    body, version = request.body, request.api_version
    cls = response_class(ADD_PARTITIONS_TO_TXN, version)
    mod = response_module(ADD_PARTITIONS_TO_TXN, version)
    if version < 4:
        results = await _add_partitions(
            broker, connection, body.v3_and_below_transactional_id,
            body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
            body.v3_and_below_topics, version)
        return make(cls, throttle_time=NO_THROTTLE,
                    results_by_topic_v3_and_below=_topic_results(mod, results))
    # v4: batched, from brokers only (KIP-890)
    if not authz.cluster_allowed(broker, connection, authz.Op.CLUSTER_ACTION):
        return make(cls, throttle_time=NO_THROTTLE, error_code=E.cluster_authorization_failed,
                    results_by_transaction=())
    out = []
    for txn in body.transactions:
        if txn.verify_only:
            wanted = [(t.name, p) for t in txn.topics for p in t.partitions]
            results = await _run(broker, txn.transactional_id, lambda shard, now, txn=txn,
                                 w=wanted: shard.verify_partitions(
                                     txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                     w), read=True)
            if type(results) is ErrorCode:  # the coordinator's own error
                results = dict.fromkeys(wanted, results)
        else:
            results = await _add_partitions(broker, connection, txn.transactional_id,
                                             txn.producer_id, txn.producer_epoch, txn.topics,
                                             version)
        out.append(make(mod.AddPartitionsToTxnResult, transactional_id=txn.transactional_id,
                        topic_results=_topic_results(mod, results)))
    return make(cls, throttle_time=NO_THROTTLE, error_code=E.none,
                results_by_transaction=tuple(out))


# --- AddOffsetsToTxn ----------------------------------------------------------------------------


async def handle_add_offsets(broker, request, connection):
    body, version = request.body, request.api_version
    cls = response_class(ADD_OFFSETS_TO_TXN, version)

    def answer(code):
        return make(cls, throttle_time=NO_THROTTLE, error_code=_fenced_for(code, version, 2))

    tid, group = body.transactional_id, body.group_id
    if not _may_write(broker, connection, tid):
        return answer(E.transactional_id_authorization_failed)
    if not authz.allowed(broker, connection, authz.Op.READ, authz.GROUP, group):
        return answer(E.group_authorization_failed)
    if broker.coordinator is None or not broker.ensure_offsets_topic():
        return answer(E.coordinator_not_available)
    offsets = (OFFSETS_TOPIC, broker.coordinator.partition_for(group))
    return answer(await _run(broker, tid, lambda shard, now: shard.add_partitions(
        tid, body.producer_id, body.producer_epoch, [offsets], now)))


# --- EndTxn -------------------------------------------------------------------------------------


async def handle_end_txn(broker, request, connection):
    body, version = request.body, request.api_version
    cls = response_class(END_TXN, version)

    def answer(code):
        return make(cls, throttle_time=NO_THROTTLE, error_code=_fenced_for(code, version, 2))

    tid = body.transactional_id
    if not _may_write(broker, connection, tid):
        return answer(E.transactional_id_authorization_failed)
    return answer(await _run(broker, tid, lambda shard, now: shard.end_txn(
        tid, body.producer_id, body.producer_epoch, bool(body.committed), now)))


# --- DescribeTransactions, ListTransactions -------------------------------------------------------

DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
_STATES = {s.display: s for s in TransactionState}


#: The instant kio writes as -1 (Kafka's "none" of a timestamp that is not nullable in the schema).
_NO_TIME = datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc)


def _start_time(ms_: int) -> datetime:
    return _NO_TIME if ms_ < 0 else datetime.fromtimestamp(ms_ / 1000, timezone.utc)


async def handle_describe_transactions(broker, request, connection):
    body, version = request.body, request.api_version
    mod = response_module(DESCRIBE_TRANSACTIONS, version)
    out = []
    for tid in body.transactional_ids:
        m = None
        if not authz.allowed(broker, connection, authz.Op.DESCRIBE, authz.TRANSACTIONAL_ID, tid):
            code = E.transactional_id_authorization_failed
        else:
            try:
                m = await _runtime(broker).read(
                    tid, lambda shard, now, tid=tid: shard.describe(tid))
                code = E.none if m is not None and m.state is not TransactionState.DEAD \
                    else E.transactional_id_not_found
            except CoordinatorError as exc:
                code = exc.code
        if code != E.none:
            out.append(make(mod.TransactionState, error_code=code, transactional_id=tid,
                            transaction_state="", transaction_timeout=timedelta(0),
                            transaction_start_time=_NO_TIME, producer_id=-1, producer_epoch=-1,
                            topics=()))
            continue
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(m.partitions):
            by_topic.setdefault(t, []).append(p)
        out.append(make(mod.TransactionState, error_code=E.none, transactional_id=tid,
                        transaction_state=m.state.display,
                        transaction_timeout=timedelta(milliseconds=m.timeout_ms),
                        transaction_start_time=_start_time(m.start_ms),
                        producer_id=m.producer_id, producer_epoch=m.producer_epoch,
                        topics=tuple(make(mod.TopicData, topic=t, partitions=tuple(ps))
                                     for t, ps in by_topic.items())))
    return make(response_class(DESCRIBE_TRANSACTIONS, version), throttle_time=NO_THROTTLE,
                transaction_states=tuple(out))


async def handle_list_transactions(broker, request, connection):
    body, version = request.body, request.api_version
    mod = response_module(LIST_TRANSACTIONS, version)
    cls = response_class(LIST_TRANSACTIONS, version)
    unknown = tuple(s for s in body.state_filters if s not in _STATES)
    states = frozenset(_STATES[s] for s in body.state_filters if s in _STATES)
    if unknown and not states:  # only states that do not exist: nothing can match
        return make(cls, throttle_time=NO_THROTTLE, error_code=E.none,
                    unknown_state_filters=unknown, transaction_states=())
    pids = frozenset(body.producer_id_filters)
    duration = getattr(body, "duration_filter", -1)
    runtime = broker.txn_coordinator
    if runtime is None or runtime.loop is None:
        return make(cls, throttle_time=NO_THROTTLE, error_code=E.coordinator_not_available,
                    unknown_state_filters=unknown, transaction_states=())
    found, loading = await runtime.read_all(
        lambda shard, now: shard.list_transactions(states, pids, duration, now))
    listed = [m for ms_ in found for m in ms_]
    allowed = authz.allowed_names(broker, connection, authz.Op.DESCRIBE, authz.TRANSACTIONAL_ID,
                                  (m.transactional_id for m in listed), log_denied=False)
    return make(cls, throttle_time=NO_THROTTLE,
                error_code=E.coordinator_load_in_progress if loading else E.none,
                unknown_state_filters=unknown, transaction_states=tuple(
                    make(mod.TransactionState, transactional_id=m.transactional_id,
                         producer_id=m.producer_id, transaction_state=m.state.display)
                    for m in sorted(listed, key=lambda m: m.transactional_id)
                    if m.transactional_id in allowed))


APIS = [
    Api(ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", 0, 5, handle_add_partitions),
    Api(ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", 0, 4, handle_add_offsets),
    Api(END_TXN, "EndTxn", 0, 4, handle_end_txn),
    Api(DESCRIBE_TRANSACTIONS, "DescribeTransactions", 0, 0, handle_describe_transactions),
    Api(LIST_TRANSACTIONS, "ListTransactions", 0, 1, handle_list_transactions),
]
