"""InitProducerId for idempotent producers: a producer id never handed out before, epoch 0,
at `producer.ids.rate` per client (over it, the answer is throttled: `brook.broker.quotas.producer_id_quota`).

With a transactional id it is the transaction coordinator's (`transactions.init_producer_id`).
Producer ids come from one source either way (`Broker.new_producer_id`).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class
from ..auth import authz
from ..zookeeper_calls import ZooKeeperUnavailable
from . import transactions
from .api import Api
from .common import NO_THROTTLE

API_KEY = 22


async def handle(broker, request, connection):
    cls = response_class(API_KEY, request.api_version)
    if request.body.transactional_id is not None:
        return await transactions.init_producer_id(broker, request, connection)
    if broker.authorizer is not None and not (
            authz.cluster_allowed(broker, connection, authz.Op.IDEMPOTENT_WRITE, log_denied=False)
            or authz.any_allowed(broker, connection, authz.Op.WRITE, authz.TOPIC)):
        # an idempotent producer needs Cluster IdempotentWrite, or Write on some topic (KIP-679)
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    producer_id=-1, producer_epoch=-1)
    delay = broker.producer_id_quota.record(request.client_id, connection.peer.rpartition(":")[0])
    if delay > 0:
        await asyncio.sleep(delay)  # held back as Kafka mutes a throttled channel
    try:
        producer_id = await broker.new_producer_id()
    except ZooKeeperUnavailable:  # a new block of ids cannot be claimed now: the client asks again
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.coordinator_not_available,
                    producer_id=-1, producer_epoch=-1)
    return make(cls, throttle_time=timedelta(seconds=delay), error_code=ErrorCode.none,
                producer_id=producer_id, producer_epoch=0)


APIS = [Api(API_KEY, "InitProducerId", 0, 5, handle)]
