"""Produce: append each partition's batch; errors are per partition and the rest of the
request is still applied. acks=0 gets no response; if any partition failed, the
connection is closed instead, which is how Kafka tells such a producer to refresh.

As in Kafka, a partition's records must be exactly one v2 batch from Produce v3 on
(INVALID_RECORD), and zstd needs Produce v7+ (UNSUPPORTED_COMPRESSION_TYPE). Produce v0-v2
carry legacy message sets (magic 0 from v0-v1 clients, magic 1 from v2 ones): they are validated
and up-converted into one v2 batch (`brook.records.legacy.produced_to_v2`) before the log sees
them, and counted as conversions in the metrics, as Kafka counts them.

Transactional batches (KIP-98) need the request's transactional id, which the principal may
Write: else every partition is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is
written, as Kafka refuses the request first (a flag of each partition's batch header is all
it reads). The producer's first transactional batch on a partition begins its transaction
there (storage.producer_state), once the transaction coordinator confirmed the partition is
in the transaction (KIP-890, `brook.broker.txn_verification`, with
`transaction.partition.verification.enable`).

Records are checked as Kafka's LogValidator checks them (`brook.records.validate`, from
`Log.append`); when only some records of a batch break a rule, the answer names them in
`record_errors` (KIP-467, v8+). A compressed batch is inflated for that, bounded by the topic's
limit (MESSAGE_TOO_LARGE past it): in a worker thread (`Log.check_records`), or by the append
itself when its headers say it inflates to at most 1 MiB (`records.validate.inflates_quickly`:
no gzip), which costs less than the thread's hop and takes about as long as an uncompressed
batch of that size."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
from datetime import datetime, timedelta, timezone

from kio.schema.errors import ErrorCode

from ...protocol.log_text import loggable
from ...protocol.messages import make, response_class, response_module
from ...records.batch import (ATTRIBUTES_OFFSET, HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET,
                              MAGIC_V2, TRANSACTIONAL_BIT)
from ...records.compression import CODEC_MASK, Codec
from ...records.legacy import produced_to_v2
from ...records.validate import inflates_quickly
from ..auth import authz
from ..errors import error_code_for
from ..metadata import INTERNAL_TOPICS, MetadataError
from ...replication.partition import NotEnoughReplicasAfterAppend
from ..quotas.throttling import produce_throttle
from ..leader_hints import HINTED, LeaderHints
from ..txn_verification import produce_error
from ...storage.producer_state import UNVERIFIED
from .api import Api, Deferred
from .common import NO_THROTTLE, CloseConnection, ms

log = logging.getLogger(__name__)

API_KEY = 0
_FIRST_ZSTD_VERSION = 7
_FIRST_BATCH_ONLY_VERSION = 3  # before it, legacy message sets (magic 0 and 1) too
_LEGACY_MAGICS = (0, 1)
_LENGTH = struct.Struct(">i")
_PRODUCER = struct.Struct(">qhi")  # a v2 batch's producer id, producer epoch, base sequence
_PRODUCER_ID_OFFSET = 43
_FIRST_HINTED_VERSION = 10  # KIP-951: the leader's id, epoch and endpoint with NOT_LEADER...
_CODEC_BYTE = ATTRIBUTES_OFFSET + 1  # the low byte of a batch's attributes
# Refusals logged with their reason: a client only sees the code (and librdkafka drops the
# message), so the broker's log is where a wrongly refused batch can be told from a bad one.
_LOGGED_CODES = {ErrorCode.corrupt_message, ErrorCode.invalid_record, ErrorCode.kafka_storage_error,
                 ErrorCode.unknown_server_error}


async def handle(broker, request, connection):
    body = request.body
    version = request.api_version
    mod = response_module(API_KEY, version)
    acks = body.acks
    refused = _transactions_refused(broker, connection, body)
    verified = {}  # (topic, partition) -> the verification's guard, or its error
    if not refused and broker.config.transaction_partition_verification_enable \
            and getattr(body, "transactional_id", None):
        verified = await _verify_transactions(broker, body, version)
    hints = LeaderHints(broker, connection) if version >= _FIRST_HINTED_VERSION else None
    any_error = False
    topics = []
    appended = []  # the logs written, when they must be on disk before the answer
    durable = broker.group_commit is not None and acks != 0
    replicas = broker.replicas  # a cluster: only leaders take records, acks=all waits for the ISR
    waiting = []  # (topic index, partition index, partition, offset the high watermark must reach)
    # Client quotas (producer_byte_rate): the wait this request earns, the connection muted.
    throttle = timedelta(milliseconds=produce_throttle(broker, request, connection)) \
        if broker.quotas.active else NO_THROTTLE
    checked = broker.authorizer is not None
    for td in body.topic_data:
        name = td.name
        if refused or (checked and not authz.allowed(broker, connection, authz.Op.WRITE,
                                                     authz.TOPIC, name)):
            # Transactional records without the transactional id's Write refuse the request
            # as a whole; then Topic Write, checked before anything that could tell whether
            # the topic exists.
            any_error = True
            code = ErrorCode.transactional_id_authorization_failed if refused \
                else ErrorCode.topic_authorization_failed
            topics.append(make(mod.TopicProduceResponse, name=name, partition_responses=tuple(
                make(mod.PartitionProduceResponse, index=pd.index, error_code=code, base_offset=-1,
                     log_append_time=None, log_start_offset=-1, record_errors=(), error_message=None)
                for pd in td.partition_data)))
            continue
        if broker.metadata.get(name) is None and broker.config.auto_create_topics_enable \
                and name not in INTERNAL_TOPICS \
                and (not checked or authz.may_create_topic(broker, connection, name)):
            try:
                broker.create_topic(name, broker.config.num_partitions)
            except MetadataError:
                pass  # answered per partition below
        tm = broker.metadata.get(name)
        # Only the broker's own writers write internal topics: no client id is exempt (Kafka
        # lets "__admin_client" through; one bad record there used to poison a partition).
        internal = name in INTERNAL_TOPICS or (tm is not None and tm.internal)
        parts = []
        for pd in td.partition_data:
            code, base_offset, append_time, start = ErrorCode.none, -1, -1, -1
            detail, record_errors = None, ()
            partition = broker.partition(name, pd.index)
            if acks not in (0, 1, -1):
                code = ErrorCode.invalid_required_acks
            elif internal:
                code, detail = ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {name}"
            elif partition is None:
                code = ErrorCode.unknown_topic_or_partition
            elif replicas is not None and (code := _leader_refusal(broker, replicas, partition, acks)):
                pass
            elif pd.records is None:
                code = ErrorCode.invalid_record
            elif (refusal := refuse_records(pd.records, version)) is not None:
                code, detail = refusal
            elif type(guard := verified.get((name, pd.index), UNVERIFIED)) is ErrorCode:
                code, guard = guard, UNVERIFIED
                detail = "the partition is not verified to be in the transaction"
            else:
                try:
                    records, converted = pd.records, 0
                    if version < _FIRST_BATCH_ONLY_VERSION and records[MAGIC_OFFSET] != MAGIC_V2:
                        # (the messages may be compressed: converted off the event loop)
                        records, converted = await asyncio.to_thread(produced_to_v2, records)
                    checked = None
                    if len(records) > _CODEC_BYTE and records[_CODEC_BYTE] & CODEC_MASK \
                            and not inflates_quickly(records):
                        # A compressed batch is inflated for its records to be checked: in a
                        # worker thread, so that other connections are served meanwhile,
                        # unless its headers say it inflates to little (append inflates it).
                        checked = await asyncio.to_thread(partition.log.check_records, records)
                    info = partition.append(records, checked=checked, guard=guard)
                    base_offset, append_time = info.first_offset, info.log_append_time
                except Exception as exc:
                    code = error_code_for(exc)
                    detail = str(exc)
                    if code == ErrorCode.kafka_storage_error:
                        broker.log_dir_failed(partition.log.directory, exc)
                    record_errors = _record_errors(mod, getattr(exc, "record_errors", ()))
                else:
                    if broker.metrics is not None:
                        broker.metrics.produced(name, len(pd.records), info.record_count, converted)
                    if durable:
                        appended.append((len(topics), len(parts), partition.log))
                    if acks == -1 and partition.tracker is not None \
                            and partition.high_watermark <= info.last_offset:
                        waiting.append((len(topics), len(parts), partition, info.last_offset + 1))
                start = partition.log_start_offset
            if code != ErrorCode.none:
                any_error = True
                if code in _LOGGED_CODES:
                    # (the topic name and the reason may quote the wire)
                    log.warning("produce to %s-%d from %s failed: %s: %s", loggable(name, 100),
                                pd.index, connection.peer, code.name.upper(),
                                loggable(detail if detail else "no records"))
            leader = {}  # KIP-951's hint (v10+), built only for an error that takes one
            if hints is not None and code in HINTED:
                leader_id, leader_epoch = hints.current_leader(code, name, pd.index)
                leader["current_leader"] = make(mod.LeaderIdAndEpoch, leader_id=leader_id,
                                                leader_epoch=leader_epoch)
            parts.append(make(mod.PartitionProduceResponse, index=pd.index, error_code=code,
                              base_offset=base_offset,
                              log_append_time=None if append_time < 0 else
                              datetime.fromtimestamp(append_time / 1000, timezone.utc),
                              log_start_offset=start, record_errors=record_errors,
                              error_message=detail, **leader))
        topics.append(make(mod.TopicProduceResponse, name=name, partition_responses=tuple(parts)))
    if acks == 0:
        if any_error:
            raise CloseConnection("acks=0 produce failed")
        return None
    endpoints = () if hints is None else tuple(
        make(mod.NodeEndpoint, node_id=n, host=h, port=port, rack=rack)
        for n, h, port, rack in hints.node_endpoints())
    if waiting:  # acks=all in a cluster: answered once every in-sync replica has the records
        return Deferred(_replicated(broker, waiting, ms(body.timeout)),
                        lambda done: _replicated_answer(done, version, topics, waiting, throttle,
                                                        endpoints))
    if appended:  # log.flush.before.ack: answered once fsynced, with the fsyncs of others
        written = broker.group_commit.durable(lg for _, _, lg in appended)
        return Deferred(written, lambda done: _durable_answer(done, version, topics, appended,
                                                              throttle, endpoints))
    return make(response_class(API_KEY, version), responses=tuple(topics), throttle_time=throttle,
                node_endpoints=endpoints)


def _transactions_refused(broker, connection, body) -> bool:
    """Kafka's first check of a Produce: a transactional batch needs the request's
    transactional id, and Write on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the whole
    request). The first batch's attributes of each partition are all that is read."""
    transactional_id = getattr(body, "transactional_id", None)  # v3+
    if transactional_id is not None and broker.authorizer is None:
        return False
    transactional = False
    for td in body.topic_data:
        for pd in td.partition_data:
            records = pd.records
            if records is not None and len(records) > _CODEC_BYTE \
                    and records[MAGIC_OFFSET] == MAGIC_V2 \
                    and records[_CODEC_BYTE] & TRANSACTIONAL_BIT:
                transactional = True
                break
        if transactional:
            break
    if not transactional:
        return False
    return transactional_id is None or not authz.allowed(broker, connection, authz.Op.WRITE,
                                                         authz.TRANSACTIONAL_ID, transactional_id)


async def _verify_transactions(broker, body, version: int) -> dict[tuple[str, int], object]:
    """KIP-890: for each partition this broker leads whose batch is transactional, the guard
    its append needs (None where the producer's transaction is open there already), or the
    coordinator's error, translated for a Produce, where it said the partition is not in the
    transaction."""
    out: dict[tuple[str, int], object] = {}
    producers = set()
    now = broker.clock.milliseconds()
    for td in body.topic_data:
        for pd in td.partition_data:
            r = pd.records
            if r is None or len(r) < HEADER_SIZE or r[MAGIC_OFFSET] != MAGIC_V2 \
                    or not r[_CODEC_BYTE] & TRANSACTIONAL_BIT:
                continue
            partition = broker.partition(td.name, pd.index)
            if partition is None or (broker.replicas is not None and partition.tracker is None):
                continue  # not led here: answered as such
            pid, epoch, sequence = _PRODUCER.unpack_from(r, _PRODUCER_ID_OFFSET)
            producers.add((pid, epoch))
            out[(td.name, pd.index)] = partition.log.producer_state.start_verification(
                pid, epoch, sequence, now)
    if len(producers) > 1:  # Kafka refuses such a request as a whole
        return dict.fromkeys(out, ErrorCode.invalid_producer_id_mapping)
    wanted = [tp for tp, guard in out.items() if guard is not None]
    if wanted:
        (pid, epoch), = producers
        answers = await broker.txn_verifier.verify(body.transactional_id, pid, epoch, wanted)
        for tp, code in answers.items():
            if code != ErrorCode.none:
                out[tp] = produce_error(code, version)
    return out


def _record_errors(mod, errors) -> tuple:
    """KIP-467's record_errors (Produce v8+): the records that failed the batch, by index."""
    entity = getattr(mod, "BatchIndexAndErrorMessage", None)
    if entity is None or not errors:
        return ()
    return tuple(make(entity, batch_index=i, batch_index_error_message=message)
                 for i, message in errors)


def _durable_answer(written, version: int, topics: list, appended: list, throttle=NO_THROTTLE,
                    endpoints=()):
    """The answer once the fsync of what the request appended has ended."""
    exc = written.exception()
    if exc is not None:
        topics = _failed(topics, appended, str(exc))
    return make(response_class(API_KEY, version), responses=tuple(topics), throttle_time=throttle,
                node_endpoints=endpoints)


def _failed(topics: list, appended: list, detail: str) -> list:
    """The answer with KAFKA_STORAGE_ERROR for the partitions whose fsync failed."""
    topics = list(topics)
    for t, p, _ in appended:
        parts = list(topics[t].partition_responses)
        parts[p] = dataclasses.replace(parts[p], error_code=ErrorCode.kafka_storage_error,
                                       base_offset=-1, error_message=detail)
        topics[t] = dataclasses.replace(topics[t], partition_responses=tuple(parts))
    return topics


def _leader_refusal(broker, replicas, partition, acks: int) -> ErrorCode:
    """In a cluster: NOT_LEADER_OR_FOLLOWER unless this broker leads the partition;
    NOT_ENOUGH_REPLICAS for acks=all while the ISR is below min.insync.replicas."""
    code = replicas.leader_error(partition)
    if code == ErrorCode.none and acks == -1 and len(partition.isr) < broker.min_insync_replicas(partition.topic):
        code = ErrorCode.not_enough_replicas
    return code


def _replicated(broker, waiting: list, timeout_ms: int):
    """One future for every partition's high watermark to reach its records, bounded by the
    request's timeout; each partition's own outcome is read from its future afterwards."""
    loop = asyncio.get_running_loop()
    futures = [p.wait_for_high_watermark(offset, broker.min_insync_replicas(p.topic))
               for _, _, p, offset in waiting]
    done = loop.create_future()
    state = {"left": len(futures)}

    def one_done(_):
        state["left"] -= 1
        if state["left"] == 0 and not done.done():
            done.set_result(futures)

    for fut in futures:
        fut.add_done_callback(one_done)

    def expire():
        if not done.done():
            done.set_result(futures)

    loop.call_later(max(timeout_ms, 0) / 1000, expire)
    return done


def _replicated_answer(done, version: int, topics: list, waiting: list, throttle=NO_THROTTLE,
                       endpoints=()):
    """The answer once replicated, or REQUEST_TIMED_OUT / NOT_LEADER_OR_FOLLOWER for the
    partitions whose records did not reach the ISR in time (they may still: Kafka's answer
    says the same), and NOT_ENOUGH_REPLICAS_AFTER_APPEND where the high watermark reached
    them only because the ISR shrank below min.insync.replicas."""
    futures = done.result()
    topics = list(topics)
    for (t, p, partition, _), fut in zip(waiting, futures):
        if fut.done() and fut.exception() is None:
            continue
        if not fut.done():
            fut.cancel()
            code = ErrorCode.request_timed_out
        elif isinstance(fut.exception(), NotEnoughReplicasAfterAppend):
            code = ErrorCode.not_enough_replicas_after_append
        else:
            code = ErrorCode.not_leader_or_follower
        parts = list(topics[t].partition_responses)
        parts[p] = dataclasses.replace(parts[p], error_code=code, base_offset=-1)
        topics[t] = dataclasses.replace(topics[t], partition_responses=tuple(parts))
    return make(response_class(API_KEY, version), responses=tuple(topics), throttle_time=throttle,
                node_endpoints=endpoints)


def refuse_records(records: bytes, version: int) -> tuple[ErrorCode, str] | None:
    """Kafka's checks of one partition's records before the log sees them: one batch, of
    magic 2, not zstd before v7; before v3, a legacy message set instead (checked as it is
    converted). A torn or corrupt batch is the log's to refuse (CORRUPT_MESSAGE)."""
    if len(records) <= MAGIC_OFFSET:
        return ErrorCode.invalid_record, f"Produce v{version} needs one record batch per partition"
    if version < _FIRST_BATCH_ONLY_VERSION and records[MAGIC_OFFSET] in _LEGACY_MAGICS:
        return None
    if records[MAGIC_OFFSET] != MAGIC_V2:
        return (ErrorCode.invalid_record,
                f"Produce v{version} takes record batches of magic 2, not {records[MAGIC_OFFSET]}")
    if len(records) > ATTRIBUTES_OFFSET + 1 and version < _FIRST_ZSTD_VERSION \
            and records[ATTRIBUTES_OFFSET + 1] & CODEC_MASK == Codec.ZSTD:
        return (ErrorCode.unsupported_compression_type,
                f"zstd needs Produce v{_FIRST_ZSTD_VERSION} or later, not v{version}")
    (length,) = _LENGTH.unpack_from(records, 8)
    if len(records) > LOG_OVERHEAD + length >= LOG_OVERHEAD:
        return ErrorCode.invalid_record, f"Produce v{version} takes exactly one record batch per partition"
    return None


APIS = [Api(API_KEY, "Produce", 0, 11, handle)]
