"""TxnOffsetCommit (API 28, v0-v4): a transactional producer commits a consumer group's offsets
in its transaction (KIP-98; the group's generation, member id and instance id from v3, KIP-447).

Checked as Kafka 3.9 checks it, in this order: Write on the TransactionalId (else every partition
is TRANSACTIONAL_ID_AUTHORIZATION_FAILED), Read on the group (GROUP_AUTHORIZATION_FAILED), Read on
each topic (TOPIC_AUTHORIZATION_FAILED for that topic's partitions), an empty group id
(INVALID_GROUP_ID). Then, with ``transaction.partition.verification.enable`` (KIP-890), the
transaction coordinator is asked whether the group's partition of ``__consumer_offsets`` is in
the producer's transaction (``brook.broker.txn_verification``), after a verification is started
in that partition's producer state, whose guard the append carries: a commit that comes after
its transaction ended is refused instead of beginning a transaction no coordinator will end.
The rest is the group coordinator's, on the group's shard through the runtime
(``broker.coordinator``): unknown partitions, the group's fencing, metadata too large
(``CoordinatorShard.commit_transactional_offsets``), and the producer's transactional batch written
to the group's partition, its offsets pending until the producer's marker
(docs/transactions.md). Versions 0-1 get COORDINATOR_NOT_AVAILABLE for
COORDINATOR_LOAD_IN_PROGRESS, which clients before Kafka 2.0 did not expect (as Kafka answers
them).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ...coordinator.common.runtime import CoordinatorError, CoordinatorNotAvailable
from ...coordinator.group.offsets import CommitPartition, CommitTopic, TxnOffsetCommit
from ...coordinator.group.partitioner import OFFSETS_TOPIC
from ...protocol.messages import make, response_class, response_module
from ...records.batch import NO_SEQUENCE
from ...storage.producer_state import UNVERIFIED
from ..auth import authz
from .api import Api
from .common import NO_THROTTLE

TXN_OFFSET_COMMIT = 28

NO_EPOCH = -1


def txn_commit_request(body, version: int) -> TxnOffsetCommit:
    """The coordinator's TxnOffsetCommit for a request body of ``version`` (0-4): leader epochs
    from v2, the group's generation, member id and instance id from v3."""
    epochs = version >= 2
    fenced = version >= 3
    return TxnOffsetCommit(
        body.transactional_id, body.group_id, body.producer_id, body.producer_epoch,
        tuple(CommitTopic(t.name, tuple(
            CommitPartition(p.partition_index, p.committed_offset,
                            p.committed_leader_epoch if epochs else NO_EPOCH,
                            p.committed_metadata)
            for p in t.partitions)) for t in body.topics),
        body.generation_id if fenced else -1,
        body.member_id if fenced else "",
        body.group_instance_id if fenced else None,
    )


def _all(req: TxnOffsetCommit, code: ErrorCode) -> list:
    return [(t.name, p.partition, code) for t in req.topics for p in t.partitions]


def _authorized(broker, connection, req: TxnOffsetCommit) -> tuple[TxnOffsetCommit, list]:
    """The request with the topics the principal may commit, and the errors of the rest."""
    if not authz.allowed(broker, connection, authz.Op.WRITE, authz.TRANSACTIONAL_ID,
                         req.transactional_id):
        return req._replace(topics=()), _all(req, ErrorCode.transactional_id_authorization_failed)
    if not authz.allowed(broker, connection, authz.Op.READ, authz.GROUP, req.group_id):
        return req._replace(topics=()), _all(req, ErrorCode.group_authorization_failed)
    if broker.authorizer is None:
        return req, []
    may = authz.allowed_names(broker, connection, authz.Op.READ, authz.TOPIC,
                              (t.name for t in req.topics))
    denied = [(t.name, p.partition, ErrorCode.topic_authorization_failed)
              for t in req.topics if t.name not in may for p in t.partitions]
    return req._replace(topics=tuple(t for t in req.topics if t.name in may)), denied


async def handle(broker, request, connection):
    version = request.api_version
    req = txn_commit_request(request.body, version)
    req, errors = _authorized(broker, connection, req)
    if req.topics:
        errors += await _commit(broker, req, version)
    if version < 2:
        errors = [(t, p, ErrorCode.coordinator_not_available
                   if code == ErrorCode.coordinator_load_in_progress else code)
                  for t, p, code in errors]
    return _answer(version, errors)


async def _commit(broker, req: TxnOffsetCommit, version: int) -> list:
    """(topic, partition, error) of each partition of ``req``, as the coordinator answers."""
    if not req.group_id:
        return _all(req, ErrorCode.invalid_group_id)
    try:
        if broker.coordinator is None or not broker.ensure_offsets_topic():
            raise CoordinatorNotAvailable("the offsets topic is not available")
        runtime = broker.coordinator
        runtime.context_for(req.group_id)  # not coordinated here, or loading: nothing to verify
        guard = UNVERIFIED
        if broker.config.transaction_partition_verification_enable and _any_known(broker, req):
            guard = await _verify(broker, req, runtime.partition_for(req.group_id))
            if type(guard) is ErrorCode:
                code = _verification_error(guard, version)
                return [(t.name, p.partition, code if _known(broker, t.name, p.partition)
                         else ErrorCode.unknown_topic_or_partition)
                        for t in req.topics for p in t.partitions]

        def commit(shard, now: int):
            return shard.commit_transactional_offsets(req, now, broker.partition_count, guard)

        return await runtime.run(req.group_id, commit)
    except CoordinatorError as exc:
        return _all(req, exc.code)


def _known(broker, topic: str, partition: int) -> bool:
    return 0 <= partition < broker.partition_count(topic)


def _any_known(broker, req: TxnOffsetCommit) -> bool:
    """Whether some partition of the commit exists (else the coordinator answers them all
    UNKNOWN_TOPIC_OR_PARTITION, and there is nothing to verify)."""
    return any(_known(broker, t.name, p.partition) for t in req.topics for p in t.partitions)


async def _verify(broker, req: TxnOffsetCommit, index: int) -> object:
    """KIP-890 for the group's partition of ``__consumer_offsets``: the guard its append needs
    (None where the producer's transaction is open there already), or the coordinator's
    error."""
    partition = broker.partition(OFFSETS_TOPIC, index)
    if partition is None:
        return ErrorCode.not_coordinator
    guard = partition.log.producer_state.start_verification(
        req.producer_id, req.producer_epoch, NO_SEQUENCE, broker.clock.milliseconds())
    if guard is None:
        return None
    answers = await broker.txn_verifier.verify(req.transactional_id, req.producer_id,
                                               req.producer_epoch, [(OFFSETS_TOPIC, index)])
    code = answers.get((OFFSETS_TOPIC, index), ErrorCode.unknown_server_error)
    return guard if code == ErrorCode.none else code


#: the verification's answers as a TxnOffsetCommit gives them (Kafka 3.9's translations)
_VERIFICATION = {ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
                 ErrorCode.network_exception: ErrorCode.coordinator_load_in_progress}


def _verification_error(code: ErrorCode, version: int) -> ErrorCode:
    """TRANSACTION_ABORTABLE (the partition is not in the transaction) is itself from v4 (the
    first version whose clients know it) and INVALID_TXN_STATE before; a fenced producer gets
    INVALID_PRODUCER_EPOCH; the coordinator unreachable, COORDINATOR_LOAD_IN_PROGRESS (retried
    without looking the coordinator up again); the rest as it is."""
    if code == ErrorCode.transaction_abortable and version < 4:
        return ErrorCode.invalid_txn_state
    return _VERIFICATION.get(code, code)


def _answer(version: int, errors: list):
    mod = response_module(TXN_OFFSET_COMMIT, version)
    by_topic: dict[str, list] = {}
    for topic, partition, code in errors:
        by_topic.setdefault(topic, []).append(
            make(mod.TxnOffsetCommitResponsePartition, partition_index=partition, error_code=code))
    return make(response_class(TXN_OFFSET_COMMIT, version), throttle_time=NO_THROTTLE,
                topics=tuple(make(mod.TxnOffsetCommitResponseTopic, name=t, partitions=tuple(ps))
                             for t, ps in by_topic.items()))


APIS = [Api(TXN_OFFSET_COMMIT, "TxnOffsetCommit", 0, 4, handle)]
