"""The broker the console's page and browser tests run against (one per module), and an
AdminClient on it."""

import pytest
from confluent_kafka.admin import AdminClient

from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess
from tests.support.console_harness import OFFSETS_PARTITIONS


@pytest.fixture(scope="module")
def broker(tmp_path_factory, request):
    name = request.module.__name__.rsplit(".", 1)[-1]
    with BrokerProcess(tmp_path_factory.mktemp(f"broker-{name}"), overrides={
            **BROKER_DEFAULTS, "offsets.topic.num.partitions": OFFSETS_PARTITIONS}) as proc:
        yield proc


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})
