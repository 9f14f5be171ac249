"""Connection limits: connections.max.idle.ms and max.connections (real broker processes)."""

from __future__ import annotations

import time

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from brook.protocol.messages import make
from tests.support.kafka_wire import WireClient


def api_versions(client: WireClient):
    m = load_payload_module(18, 3, EntityType.request)
    return client.request(make(m.ApiVersionsRequest, client_software_name="t", client_software_version="1"))


def test_idle_connections_are_closed_and_busy_ones_are_not(broker_factory):
    broker = broker_factory({"connections.max.idle.ms": 600})
    with WireClient(broker.bootstrap) as idle, WireClient(broker.bootstrap) as active:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:  # one keeps talking, the other says nothing
            assert api_versions(active).error_code == ErrorCode.none
            time.sleep(0.1)
        assert idle.closed_by_peer(timeout=0.5)
        assert api_versions(active).error_code == ErrorCode.none


def test_connections_beyond_max_connections_are_refused(broker_factory):
    broker = broker_factory({"max.connections": 2})
    time.sleep(0.3)  # the harness's readiness probe has been closed and forgotten
    with WireClient(broker.bootstrap) as a, WireClient(broker.bootstrap) as b:
        assert api_versions(a).error_code == ErrorCode.none
        assert api_versions(b).error_code == ErrorCode.none
        with WireClient(broker.bootstrap) as c:
            assert c.closed_by_peer()
        assert "max.connections=2 reached" in broker.stderr_tail()
    time.sleep(0.3)  # the first two are gone: a new one is served again
    with WireClient(broker.bootstrap) as d:
        assert api_versions(d).error_code == ErrorCode.none
