"""DescribeCluster: the cluster id, the controller, and the brokers: this one alone on the
embedded single node; in a cluster, the live brokers registered in ZooKeeper (each at its
endpoint for the listener the request came in on, as Kafka answers) and the elected
controller."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from ..auth import authz
from .api import Api
from .common import INT32_MIN, NO_THROTTLE

API_KEY = 60


async def handle(broker, request, connection):
    mod = response_module(API_KEY, request.api_version)
    listener = broker.advertised_listener(connection)
    cluster = broker.cluster
    if cluster is None:
        brokers = (make(mod.DescribeClusterBroker, broker_id=broker.broker_id, host=listener.host,
                        port=listener.port, rack=None),)
    else:
        brokers = []
        for broker_id, live in sorted(cluster.view.brokers.items()):
            endpoint = live.registration.endpoint(listener.name)
            if endpoint is not None:  # a broker without this listener is unreachable through it
                brokers.append(make(mod.DescribeClusterBroker, broker_id=broker_id, host=endpoint.host,
                                    port=endpoint.port, rack=live.registration.rack))
        brokers = tuple(brokers)
    ops = INT32_MIN
    if request.body.include_cluster_authorized_operations:
        ops = (authz.authorized_operations(broker, connection, authz.CLUSTER, authz.CLUSTER_NAME)
               if authz.cluster_allowed(broker, connection, authz.Op.DESCRIBE) else 0)
    return make(response_class(API_KEY, request.api_version), throttle_time=NO_THROTTLE,
                error_code=ErrorCode.none, error_message=None,
                endpoint_type=getattr(request.body, "endpoint_type", 1), cluster_id=broker.metadata.cluster_id,
                controller_id=broker.controller_id, brokers=brokers, cluster_authorized_operations=ops)


APIS = [Api(API_KEY, "DescribeCluster", 0, 1, handle)]
