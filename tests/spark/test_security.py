"""The Spark connector over SASL_SSL (SCRAM-SHA-512, a PEM truststore), with the client
settings as Spark's Kafka source takes them (``kafka.security.protocol``, ...): a batch read
through both paths, the sink, and a streaming query whose group commits go through the
secured listener."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import brook.spark  # noqa: E402
from tests.support.tls_broker import TlsBroker  # noqa: E402
from tests.support.tls_certs import TlsFiles  # noqa: E402

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    b = TlsBroker(tmp_path_factory.mktemp("spark-tls"), TlsFiles(tmp_path_factory.mktemp("certs")))
    b.proc.start()
    try:
        from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
        admin = AdminClient({"bootstrap.servers": b.plain})
        for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "spark", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"spark-secret")]).values():
            f.result(30)
        for f in admin.create_topics([NewTopic("secure-in", 2, 1), NewTopic("secure-out", 2, 1)]).values():
            f.result(30)
        yield b
    finally:
        b.proc.close()


def _client(b: TlsBroker) -> dict:
    return {"bootstrap.servers": b.sasl_ssl, "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "spark", "sasl.password": "spark-secret",
            "ssl.ca.location": str(b.files.ca)}


def _options(b: TlsBroker, **more) -> dict:
    return {f"kafka.{k}": v for k, v in _client(b).items()} | more


def test_reads_writes_and_group_commits_through_a_sasl_ssl_listener(spark, secured):
    p = Producer(_client(secured))
    for i in range(200):
        p.produce("secure-in", f"v{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0
    want = sorted(f"v{i}".encode() for i in range(200))

    bulk = brook.spark.read(spark, _options(secured, subscribe="secure-in"))
    assert sorted(bytes(r.value) for r in bulk.select("value").collect()) == want
    source = spark.read.format("brook").options(**_options(secured, subscribe="secure-in")).load()
    assert sorted(bytes(r.value) for r in source.select("value").collect()) == want

    bulk.select("value").write.format("brook").mode("append").options(
        **_options(secured, topic="secure-out")).save()
    c = Consumer({**_client(secured), "group.id": "check", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition("secure-out", p, 0) for p in range(2)])
    got = []
    for _ in range(60):
        got += [m.value() for m in c.consume(500, timeout=1) if m.error() is None]
        if len(got) >= 200:
            break
    c.close()
    assert sorted(got) == want

    query = (brook.spark.read_stream(spark, _options(secured, subscribe="secure-in",
                                                     startingOffsets="earliest", **{"group.id": "secure-group"}))
             .writeStream.format("noop").trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    admin = AdminClient(_client(secured))
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("secure-group")])[
        "secure-group"].result(30)
    assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(0, 100), (1, 100)]
    secured.wait_logged("authenticated User:spark from")
