"""WriteTxnMarkers (API 27): a transaction coordinator's markers, written on the partitions
this broker leads (`brook.broker.txn_markers`) and answered once each is committed (acks=all)
or failed. Who may send it: `brook.cluster.inter_broker_rules.txn_markers` (a refusal answers
CLUSTER_AUTHORIZATION_FAILED for every partition, as Kafka does)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ...cluster import inter_broker_rules as rules
from ...protocol.messages import make, response_class, response_module
from ..auth import authz
from ..txn_markers import TxnMarker, write_txn_markers
from .api import Api
from .replication import refused

API_KEY = 27


async def handle(broker, request, connection):
    version = request.api_version
    mod = response_module(API_KEY, version)
    body = request.body
    with_authorizer = broker.authorizer is not None
    may_alter = with_authorizer and authz.cluster_allowed(broker, connection, authz.Op.ALTER,
                                                          log_denied=False)
    refusal = rules.txn_markers(authz.peer_broker(broker, connection),
                                cluster=broker.cluster is not None, authorizer=with_authorizer,
                                may_alter_cluster=may_alter)
    markers = [TxnMarker(m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result,
                         tuple((t.name, p) for t in m.topics for p in t.partition_indexes))
               for m in body.markers]
    if refusal is not None:
        code = refused(connection, refusal)
        results = {(m.producer_id, t, p): code for m in markers for t, p in m.partitions}
    else:
        results = await write_txn_markers(broker, markers)
    out = []
    for m in body.markers:
        topics = tuple(make(mod.WritableTxnMarkerTopicResult, name=t.name, partitions=tuple(
            make(mod.WritableTxnMarkerPartitionResult, partition_index=p,
                 error_code=results.get((m.producer_id, t.name, p), ErrorCode.unknown_server_error))
            for p in t.partition_indexes)) for t in m.topics)
        out.append(make(mod.WritableTxnMarkerResult, producer_id=m.producer_id, topics=topics))
    return make(response_class(API_KEY, version), markers=tuple(out))


APIS = [Api(API_KEY, "WriteTxnMarkers", 0, 1, handle)]
