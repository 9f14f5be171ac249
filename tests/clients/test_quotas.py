"""Client quotas against a broker process: set with AlterClientQuotas (neither confluent-kafka
2.16 nor kafka-python 3.0 has an admin call for it, so the requests are sent as they are on the
wire), enforced on real clients.

The acceptance test of issue 20: a producer over its byte-rate quota is throttled to within
10% of the quota over 10 s while an unthrottled client on the same broker is not slowed.
Checked over every 10 s window from the first byte (in steps of half a second) through two
window spans (22 s): brook measures a new client over the one window it has been in, where
Kafka's ten would let it through ten seconds' worth at once every 11 s (see
brook.broker.quotas.client_quotas and docs/security.md).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode

from brook.protocol.messages import make
from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess, free_port
from tests.support.kafka_wire import WireClient, frame
from tests.support.sasl_wire import authenticate, handshake
from tests.support.wire_requests import create_topic, req_mod

QUOTA = 1_000_000  # bytes/s: 16 KiB requests are 1.6% of a second's worth
SPAN = 11.0  # s: quota.window.num samples of quota.window.size.seconds
RUN = 2 * SPAN + 1.0
VALUE = b"x" * 1000
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


class Client(WireClient):
    """A wire client with a client id of its own."""

    def __init__(self, bootstrap: str, client_id: str = "wire-test", timeout: float = 10.0) -> None:
        super().__init__(bootstrap, timeout)
        self.client_id = client_id

    def encode(self, body) -> bytes:
        self.correlation_id += 1
        return frame(body, self.correlation_id, self.client_id)


def alter_quotas(bootstrap: str, entries, validate_only: bool = False):
    """entries: [({"client-id": "slow"}, {"producer_byte_rate": 1000.0 or None to remove})]."""
    m = req_mod(49, 1)
    body = make(m.AlterClientQuotasRequest, validate_only=validate_only, entries=tuple(
        make(m.EntryData,
             entity=tuple(make(m.EntityData, entity_type=t, entity_name=n) for t, n in entity.items()),
             ops=tuple(make(m.OpData, key=k, value=0.0 if v is None else float(v), remove=v is None)
                       for k, v in ops.items()))
        for entity, ops in entries))
    with WireClient(bootstrap) as client:
        response = client.request(body)
    assert [e.error_code for e in response.entries] == [ErrorCode.none] * len(entries)


def describe_quotas(bootstrap: str) -> dict:
    m = req_mod(48, 1)
    with WireClient(bootstrap) as client:
        response = client.request(make(m.DescribeClientQuotasRequest, components=(), strict=False))
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity):
            {v.key: v.value for v in entry.values} for entry in response.entries}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    sasl_port, plain_port = free_port(), free_port()
    proc = BrokerProcess(tmp_path_factory.mktemp("quotas"), port=plain_port, overrides={
        **BROKER_DEFAULTS, "num.partitions": 1,
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    })
    proc.sasl = f"127.0.0.1:{sasl_port}"
    proc.start()
    try:
        yield proc
    finally:
        proc.close()


def _producer(bootstrap: str, client_id: str):
    from confluent_kafka import Producer
    # Small requests (16 KiB batches), so the rate moves in small steps against the quota.
    return Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "acks": 1,
                     "linger.ms": 5, "batch.size": 16384, "queue.buffering.max.messages": 2000,
                     "enable.idempotence": False})


def _produce_for(bootstrap: str, client_id: str, topic: str, seconds: float, acked: list) -> None:
    """Produce as fast as the producer takes records; `acked` gets (time, bytes) per delivery."""
    producer = _producer(bootstrap, client_id)

    def delivered(err, msg):
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            producer.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(30)


def _rate(acked: list, start: float, end: float) -> float:
    return sum(n for t, n in acked if start <= t < end) / (end - start)


#: Kafka's quota counts a request's (or a Fetch answer's) bytes on the wire: 16 records of
#: 1000-byte values with their records', batch's and request's headers are about 2% more.
WIRE = 1.02


def _check_held_to_quota(events: list, what: str) -> None:
    """`events`: (time, value bytes) of what the client got through, in time order."""
    t0 = events[0][0]
    print(what, "per second:", [round(_rate(events, t0 + i, t0 + i + 1) / QUOTA, 2) for i in range(23)])
    tens = [_rate(events, t0 + a / 2, t0 + a / 2 + 10) * WIRE / QUOTA for a in range(25)]
    mean = _rate(events, t0, t0 + 2 * SPAN) * WIRE / QUOTA
    print(f"{what}: quota {QUOTA} B/s; over the first two spans (22 s) {mean:.3f} of it; "
          f"10 s windows from 0 to 12 s: {min(tens):.3f} to {max(tens):.3f}")
    assert 0.9 <= mean <= 1.1
    assert 0.9 <= min(tens) and max(tens) <= 1.1


def _wire_produce_rate(bootstrap: str, topic: str, seconds: float, throttles: list) -> float:
    """Bytes/s a plain client gets with one 16 KiB produce at a time; every throttle time
    it is given goes to `throttles`."""
    from tests.support.wire_requests import batch
    records = batch(16, value=VALUE)
    m = req_mod(0, 9)
    body = make(m.ProduceRequest, transactional_id=None, acks=1, timeout=timedelta(seconds=5),
                topic_data=(make(m.TopicProduceData, name=topic, partition_data=(
                    make(m.PartitionProduceData, index=0, records=records),)),))
    sent = 0
    with Client(bootstrap, "fast") as client:
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            response = client.request(body)
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
            throttles.append(response.throttle_time)
            sent += len(records)
        return sent / (time.monotonic() - start)


def test_a_producer_over_its_quota_is_held_to_it_and_others_are_not_slowed(broker):
    with WireClient(broker.bootstrap) as c:
        create_topic(c, "quota-slow")
        create_topic(c, "quota-fast")
    alter_quotas(broker.bootstrap, [({"client-id": "slow"}, {"producer_byte_rate": QUOTA})])
    baseline = _wire_produce_rate(broker.bootstrap, "quota-fast", 2.0, [])

    acked: list = []
    slow = threading.Thread(target=_produce_for, args=(broker.bootstrap, "slow", "quota-slow", RUN, acked))
    slow.start()
    time.sleep(1.0)
    throttles: list = []
    during = _wire_produce_rate(broker.bootstrap, "quota-fast", RUN - 3, throttles)
    slow.join(60)

    print(f"unthrottled client: {during:.0f} B/s beside the throttled one, {baseline:.0f} B/s alone")
    _check_held_to_quota(sorted(acked), "producer")
    assert set(throttles) == {timedelta(0)}
    assert during > 3 * QUOTA
    assert during > 0.4 * baseline  # the machine is shared: only a starved client fails this


def test_a_consumer_over_its_quota_is_held_to_it(broker):
    from confluent_kafka import Consumer
    with WireClient(broker.bootstrap) as c:
        create_topic(c, "quota-read")
    filled = int(QUOTA * RUN * 1.3)
    producer = _producer(broker.bootstrap, "filler")
    for _ in range(filled // len(VALUE)):
        while True:
            try:
                producer.produce("quota-read", VALUE)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    alter_quotas(broker.bootstrap, [({"client-id": "slow-reader"}, {"consumer_byte_rate": QUOTA})])

    # Small fetches (16 KiB), as the producer's requests: the rate moves in small steps.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "slow-reader",
                         "group.id": "quota-readers", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "max.partition.fetch.bytes": 16384,
                         "fetch.max.bytes": 16384, "message.max.bytes": 16384,
                         "fetch.wait.max.ms": 100})
    consumer.subscribe(["quota-read"])
    got: list = []
    try:
        while not got or time.monotonic() < got[0][0] + RUN:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append((time.monotonic(), len(msg.value())))
    finally:
        consumer.close()
    assert sum(n for _, n in got) < filled  # it never caught up
    _check_held_to_quota(got, "consumer")


def _alice(broker, client_id: str) -> Client:
    client = Client(broker.sasl, client_id)
    assert handshake(client, "PLAIN").error_code == ErrorCode.none
    assert authenticate(client, b"\0alice\0alice-secret").error_code == ErrorCode.none
    return client


def test_the_quota_is_found_by_precedence(broker):
    """One 1 MB request from alice (SASL) as client "app" on a new connection: a rate of 1 MB
    over its first window, 1 MB/s, so the throttle time says which quota applied:
    (1 MB/s - q) / q * 1 s."""
    with WireClient(broker.bootstrap) as c:
        create_topic(c, "quota-precedence")
    from tests.support.wire_requests import batch
    records = batch(1000, value=VALUE)
    m = req_mod(0, 9)
    body = make(m.ProduceRequest, transactional_id=None, acks=1, timeout=timedelta(seconds=5),
                topic_data=(make(m.TopicProduceData, name="quota-precedence", partition_data=(
                    make(m.PartitionProduceData, index=0, records=records),)),))

    def throttle_ms() -> float:
        with _alice(broker, "app") as client:
            response = client.request(body)
            size = len(client.encode(body))  # the request's bytes, as the broker counts them
        return response.throttle_time.total_seconds() * 1000, size

    def expected(rate, quota):
        return (rate - quota) / quota * 1_000

    alter_quotas(broker.bootstrap, [({"user": "alice", "client-id": "app"}, {"producer_byte_rate": 10_000}),
                                    ({"user": "alice"}, {"producer_byte_rate": 20_000}),
                                    ({"client-id": "app"}, {"producer_byte_rate": 50_000})])
    got, rate = throttle_ms()
    assert got == pytest.approx(expected(rate, 10_000), abs=20)  # user and client id
    alter_quotas(broker.bootstrap, [({"user": "alice", "client-id": "app"}, {"producer_byte_rate": None})])
    got, rate = throttle_ms()
    assert got == pytest.approx(expected(rate, 20_000), abs=20)  # user
    alter_quotas(broker.bootstrap, [({"user": "alice"}, {"producer_byte_rate": None})])
    got, rate = throttle_ms()
    assert got == pytest.approx(expected(rate, 50_000), abs=20)  # client id
    alter_quotas(broker.bootstrap, [({"client-id": "app"}, {"producer_byte_rate": None})])
    assert throttle_ms()[0] == 0


def test_a_throttled_connection_is_muted(broker):
    """The answer comes at once with its throttle time; the next request on that connection
    is read only once the time is over."""
    with WireClient(broker.bootstrap) as c:
        create_topic(c, "quota-mute")
    alter_quotas(broker.bootstrap, [({"client-id": "muted"}, {"producer_byte_rate": 100_000})])
    from tests.support.wire_requests import batch
    m = req_mod(0, 9)

    def body(n):
        return make(m.ProduceRequest, transactional_id=None, acks=1, timeout=timedelta(seconds=5),
                    topic_data=(make(m.TopicProduceData, name="quota-mute", partition_data=(
                        make(m.PartitionProduceData, index=0, records=batch(n, value=VALUE)),)),))

    with Client(broker.bootstrap, "muted") as client:
        start = time.monotonic()
        first = client.request(body(120))  # 120 kB in the first 1 s window: throttled ~0.2 s
        answered = time.monotonic() - start
        throttle = first.throttle_time.total_seconds()
        assert 0.15 < throttle < 0.3 and answered < 0.15
        second = client.request(body(1))
        waited = time.monotonic() - start
        assert waited >= throttle - 0.05
        assert second.responses[0].partition_responses[0].error_code == ErrorCode.none
    alter_quotas(broker.bootstrap, [({"client-id": "muted"}, {"producer_byte_rate": None})])


def test_request_time_over_request_percentage_is_throttled(broker):
    """request_percentage 0.01: 0.1 ms of handler time in the first window; Metadata
    requests soon pass it, and their answers carry a wait of at most one window (1 s)."""
    alter_quotas(broker.bootstrap, [({"client-id": "chatty"}, {"request_percentage": 0.01})])
    m = req_mod(3, 12)
    body = make(m.MetadataRequest, topics=None, allow_auto_topic_creation=False,
                include_topic_authorized_operations=False)
    try:
        with Client(broker.bootstrap, "chatty") as client:
            for _ in range(2000):
                throttle = client.request(body).throttle_time
                if throttle > timedelta(0):
                    break
            assert timedelta(0) < throttle <= timedelta(seconds=1)
            start = time.monotonic()
            client.request(body)
            assert time.monotonic() - start >= throttle.total_seconds() - 0.05  # muted meanwhile
        with Client(broker.bootstrap, "other") as client:  # another client id has no quota
            assert all(client.request(body).throttle_time == timedelta(0) for _ in range(200))
    finally:
        alter_quotas(broker.bootstrap, [({"client-id": "chatty"}, {"request_percentage": None})])


def test_a_fetch_in_a_session_over_its_quota_keeps_its_data_and_gets_the_wait(broker):
    """A Fetch that opens a session (KIP-227) is answered with its records and the wait: the
    session has moved on to them."""
    from tests.support.wire_requests import batch, fetch_request, produce
    with WireClient(broker.bootstrap) as c:
        create_topic(c, "quota-session")
        produce(c, "quota-session", {0: batch(600, value=VALUE)})
    alter_quotas(broker.bootstrap, [({"client-id": "session-reader"}, {"consumer_byte_rate": 10_000})])
    try:
        request = dataclasses.replace(fetch_request("quota-session", {0: 0}), session_epoch=0)
        with Client(broker.bootstrap, "session-reader") as client:
            response = client.request(request)
        assert response.session_id != 0
        assert response.throttle_time > timedelta(seconds=1)  # 600 kB in 1 s against 10 kB/s
        assert len(response.responses[0].partitions[0].records) > 500_000
        with Client(broker.bootstrap, "session-reader") as client:  # sessionless: answered empty
            response = client.request(fetch_request("quota-session", {0: 0}))
        assert response.throttle_time > timedelta(seconds=1)
        assert response.responses == ()
    finally:
        alter_quotas(broker.bootstrap, [({"client-id": "session-reader"}, {"consumer_byte_rate": None})])


def test_quotas_survive_a_restart(broker):
    alter_quotas(broker.bootstrap, [({"user": None, "client-id": "kept"}, {"consumer_byte_rate": 4096,
                                                                          "request_percentage": 25})])
    broker.restart()
    found = describe_quotas(broker.bootstrap)
    assert found[(("user", None), ("client-id", "kept"))] == {"consumer_byte_rate": 4096.0,
                                                              "request_percentage": 25.0}
    alter_quotas(broker.bootstrap, [({"user": None, "client-id": "kept"},
                                     {"consumer_byte_rate": None, "request_percentage": None})])
