"""Live produce and fetch rates on the Cluster page, from brook brokers' Prometheus metrics:
the parsing and arithmetic (pure), then a real broker serving `metrics.port` while a
confluent-kafka producer and consumer run."""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from starlette.testclient import TestClient

from brook.console.app import ConsoleSettings, create_app
from brook.console.backend import Backend
from brook.console.metrics import BrokerRates, parse_metrics_urls, parse_totals
from brook.security.client_settings import ClientSecurity
from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess, free_port
from tests.support.group_offsets import unique_name

EXPOSITION = """# HELP brook_topic_bytes_in_total Record bytes appended by Produce requests.
# TYPE brook_topic_bytes_in_total counter
brook_topic_bytes_in_total{topic="a"} 100.0
brook_topic_bytes_in_total{topic="b"} 50.0
brook_topic_messages_in_total{topic="a"} 3.0
brook_topic_bytes_out_total{topic="a"} 1e3
brook_requests_total{request="Produce"} 7.0
brook_requests_total{request="Fetch"} 11.0
brook_requests_total{request="Metadata"} 99.0
brook_requests_created{request="Fetch"} 1.7e9
"""


def test_totals_sum_every_topic_and_pick_the_requests():
    assert parse_totals(EXPOSITION) == {"produce_bytes": 150.0, "produce_messages": 3.0,
                                        "fetch_bytes": 1000.0, "produce_requests": 7.0,
                                        "fetch_requests": 11.0}
    assert parse_totals("")["fetch_bytes"] == 0.0


def test_rates_are_the_counters_differences_over_time():
    now = [100.0]
    texts = [EXPOSITION, EXPOSITION.replace("100.0", "1100.0").replace("} 7.0", "} 9.0")]
    rates = BrokerRates(port=9404, clock=lambda: now[0])
    rates.read = lambda url: texts.pop(0)
    brokers = [{"id": 1, "host": "h1", "port": 9092}]
    first = rates.rates(brokers)[1]
    assert first == {"url": "http://h1:9404/metrics", "error": None, "rates": None}
    now[0] = 102.0
    second = rates.rates(brokers)[1]["rates"]
    assert second["produce_bytes"] == 500.0 and second["produce_requests"] == 1.0
    assert second["fetch_bytes"] == 0.0


def test_urls_per_broker_override_the_port_and_bad_ones_are_refused():
    rates = BrokerRates(port=9404, urls=parse_metrics_urls(["2=http://m2:1/metrics"]))
    assert rates.url({"id": 2, "host": "b2"}) == "http://m2:1/metrics"
    assert rates.url({"id": 3, "host": "::1"}) == "http://[::1]:9404/metrics"
    assert BrokerRates().url({"id": 3, "host": "b3"}) is None
    with pytest.raises(ValueError, match="BROKER_ID=http"):
        parse_metrics_urls(["two=http://x"])


@pytest.fixture(scope="module")
def metered(tmp_path_factory):
    port = free_port()
    proc = BrokerProcess(tmp_path_factory.mktemp("broker-rates"),
                         overrides={**BROKER_DEFAULTS, "metrics.port": port})
    proc.start()
    proc.metrics_port = port
    try:
        yield proc
    finally:
        proc.close()


def client(broker, rates: BrokerRates) -> TestClient:
    backend = Backend(broker.bootstrap, 10.0, ClientSecurity(), lag_interval=1.0, rates=rates)
    return TestClient(create_app(backend, ConsoleSettings(lag_interval=1.0)),
                      raise_server_exceptions=False)


def cell(html: str, cls: str) -> str:
    m = re.search(rf'class="num {cls}">([^<]*)<', html)
    assert m, html[-1500:]
    return m.group(1)


def test_the_cluster_page_shows_each_brokers_produce_and_fetch_rates(metered):
    topic = unique_name("rated")
    admin = AdminClient({"bootstrap.servers": metered.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    with client(metered, BrokerRates(port=metered.metrics_port)) as c:
        page = c.get("/cluster").text
        assert 'hx-get="/cluster/rates"' in page and "measuring" in page, page[-1500:]
        producer = Producer({"bootstrap.servers": metered.bootstrap})
        for i in range(200):
            producer.produce(topic, value=b"v" * 1000, partition=0)
        assert producer.flush(20) == 0
        consumer = Consumer({"bootstrap.servers": metered.bootstrap, "group.id": unique_name("g"),
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        got, deadline = 0, time.time() + 20
        while got < 200 and time.time() < deadline:
            got += len(consumer.consume(200, 0.5))
        consumer.close()
        assert got == 200
        rates = c.get("/cluster/rates").text
        assert cell(rates, "produce-bytes").endswith("/s") and cell(rates, "produce-bytes") != "0 B/s"
        assert float(cell(rates, "produce-messages").rstrip("/s").replace(",", "")) > 0
        assert cell(rates, "fetch-bytes") != "0 B/s", rates
        # nothing moves now: the next read's rates fall to zero
        time.sleep(0.3)
        idle = c.get("/cluster/rates").text
        assert cell(idle, "produce-bytes") == "0 B/s", idle


def test_brokers_without_reachable_metrics_show_why(metered):
    with client(metered, BrokerRates()) as c:
        page = c.get("/cluster").text
        assert 'id="rates-none"' in page and "--metrics-port" in page
        assert 'hx-get="/cluster/rates"' not in page
    with client(metered, BrokerRates(port=free_port(), timeout=1.0)) as c:
        page = c.get("/cluster").text
        assert "cannot read its metrics" in page and "Traceback" not in page
