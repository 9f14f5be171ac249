"""The handlers' side of quotas: a handler's time counts only while it runs, and a throttle
time is written where each encoded answer holds it."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import timedelta

import pytest
from kio.serial import entity_reader
from kio.schema.errors import ErrorCode

from brook.broker.quotas.throttling import _patched, _Timed, user_of
from brook.protocol.messages import encode_response, make, response_class


def test_only_the_time_a_handler_runs_is_counted_not_its_waits():
    async def handler():
        await asyncio.sleep(0.2)  # parked (a long-polling Fetch): free
        end = time.perf_counter() + 0.03
        while time.perf_counter() < end:  # working: counted
            pass
        return "answer"

    async def main():
        timed = _Timed(handler())
        assert await timed.run() == "answer"
        return timed.seconds

    seconds = asyncio.run(main())
    assert 0.03 <= seconds < 0.1


def test_a_cancelled_handler_is_cancelled_through_the_timer():
    async def main():
        cancelled = []

        async def handler():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        task = asyncio.ensure_future(_Timed(handler()).run())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return cancelled

    assert asyncio.run(main()) == [True]


@pytest.mark.parametrize("key, version", [(3, 3), (3, 9), (3, 12), (1, 4), (1, 12), (8, 8), (15, 5)])
def test_the_throttle_time_is_patched_where_kio_reads_it(key, version):
    cls = response_class(key, version)
    values = {}
    for f in dataclasses.fields(cls):
        kafka_type = f.metadata.get("kafka_type", "")
        values[f.name] = (timedelta(0) if f.name == "throttle_time" else
                          ErrorCode.none if kafka_type == "error_code" else
                          0 if kafka_type.startswith("int") else
                          "" if kafka_type == "string" else
                          False if kafka_type == "bool" else ())  # arrays: empty
    frame = encode_response(key, version, 7, make(cls, **values))
    patched = _patched([frame], key, version, 1234)[0]
    header, offset = entity_reader(cls.__header_schema__)(patched[4:], 0)
    decoded, _ = entity_reader(cls)(patched[4:], offset)
    assert header.correlation_id == 7
    assert decoded.throttle_time == timedelta(milliseconds=1234)


def test_produce_answers_hold_their_throttle_time_at_the_end_and_are_not_patched():
    assert _patched([b"x" * 40], 0, 9, 100) == [b"x" * 40]


def test_the_quota_user_is_the_principals_name():
    class Conn:
        principal = "User:alice"
    assert user_of(Conn()) == "alice"
    assert user_of(None) == "ANONYMOUS"


def test_a_throttled_produce_mutes_its_connection_and_is_counted_in_the_metrics(tmp_path):
    from brook.broker.metrics import BrokerMetrics
    from brook.broker.quotas.client_quotas import Entity
    from brook.broker.quotas.throttling import produce_throttle
    from brook.protocol.messages import Request
    from tests.metrics.test_collector import sample, samples
    from tests.support.socketpair_broker import run_broker

    async def test(broker, conn, ours, theirs):
        metrics = BrokerMetrics(broker)
        await broker.set_client_quotas({Entity(client_set=True, client_id="p"): {"producer_byte_rate": 100}})
        request = Request(0, 9, 1, "p", None, 2000)  # 2000 bytes in the first 1 s window: 19 s over
        assert produce_throttle(broker, request, conn) == 19_000
        assert conn.muted_until == pytest.approx(conn.loop.time() + 19, abs=0.5)
        assert produce_throttle(broker, Request(0, 9, 2, "q", None, 2000), conn) == 0  # no quota
        got = samples(metrics)
        assert sample(got, "brook_quota_throttled_responses_total", quota_type="Produce") == 1
        assert sample(got, "brook_quota_throttle_time_seconds_total", quota_type="Produce") == 19
        assert sample(got, "brook_quota_throttle_time_seconds_total", quota_type="Fetch") == 0
        conn.muted_until = 0.0

    run_broker(tmp_path, {}, test)
