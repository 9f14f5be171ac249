"""Produce: append each partition's batches; errors are per partition and the rest of the
request is still applied. acks=0 gets no response; if any partition failed, the
connection is closed instead, which is how Kafka tells such a producer to refresh."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from ..errors import error_code_for
from ..metadata import MetadataError
from . import Api
from .common import NO_THROTTLE

log = logging.getLogger(__name__)

API_KEY = 0
_LOGGED_CODES = {ErrorCode.corrupt_message, ErrorCode.kafka_storage_error, ErrorCode.unknown_server_error}


class CloseConnection(Exception):
    pass


async def handle(broker, request, connection):
    body = request.body
    version = request.api_version
    mod = response_module(API_KEY, version)
    acks = body.acks
    any_error = False
    topics = []
    for td in body.topic_data:
        name = td.name
        if broker.metadata.get(name) is None and broker.config.auto_create_topics_enable:
            try:
                broker.create_topic(name, broker.config.num_partitions)
            except MetadataError:
                pass  # answered per partition below
        tm = broker.metadata.get(name)
        # Only the broker writes internal topics (Kafka allows its own admin client id too).
        internal = tm is not None and tm.internal and request.client_id != "__admin_client"
        parts = []
        for pd in td.partition_data:
            code, base_offset, append_time, start = ErrorCode.none, -1, -1, -1
            detail = None
            partition = broker.partition(name, pd.index)
            if acks not in (0, 1, -1):
                code = ErrorCode.invalid_required_acks
            elif partition is None:
                code = ErrorCode.unknown_topic_or_partition
            elif internal:
                code, detail = ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {name}"
            elif body.transactional_id is not None:
                code = ErrorCode.transactional_id_authorization_failed  # no transactions yet
            elif pd.records is None:
                code = ErrorCode.invalid_record
            else:
                try:
                    info = partition.append(pd.records)
                    base_offset, append_time = info.first_offset, info.log_append_time
                except Exception as exc:
                    code = error_code_for(exc)
                    detail = str(exc)
                    if code in _LOGGED_CODES:
                        log.warning("produce to %s-%d from %s failed: %s: %s", name, pd.index,
                                    connection.peer, code.name.upper(), exc)
                else:
                    if broker.metrics is not None:
                        broker.metrics.produced(name, len(pd.records), info.record_count)
                start = partition.log_start_offset
            if code != ErrorCode.none:
                any_error = True
            parts.append(make(mod.PartitionProduceResponse, index=pd.index, error_code=code,
                              base_offset=base_offset,
                              log_append_time=None if append_time < 0 else
                              datetime.fromtimestamp(append_time / 1000, timezone.utc),
                              log_start_offset=start, record_errors=(),
                              error_message=detail))
        topics.append(make(mod.TopicProduceResponse, name=name, partition_responses=tuple(parts)))
    if acks == 0:
        if any_error:
            raise CloseConnection("acks=0 produce failed")
        return None
    return make(response_class(API_KEY, version), responses=tuple(topics), throttle_time=NO_THROTTLE)


APIS = [Api(API_KEY, "Produce", 3, 9, handle)]
