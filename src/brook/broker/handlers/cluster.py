"""DescribeCluster: this broker, the cluster id and the controller (this broker)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from . import Api
from .common import INT32_MIN, NO_THROTTLE

API_KEY = 60


async def handle(broker, request, connection):
    mod = response_module(API_KEY, request.api_version)
    listener = broker.advertised_listener(connection)
    brokers = (make(mod.DescribeClusterBroker, broker_id=broker.broker_id, host=listener.host,
                    port=listener.port, rack=None),)
    return make(response_class(API_KEY, request.api_version), throttle_time=NO_THROTTLE,
                error_code=ErrorCode.none, error_message=None,
                endpoint_type=getattr(request.body, "endpoint_type", 1), cluster_id=broker.metadata.cluster_id,
                controller_id=broker.broker_id, brokers=brokers, cluster_authorized_operations=INT32_MIN)


APIS = [Api(API_KEY, "DescribeCluster", 0, 1, handle)]
