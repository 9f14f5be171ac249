"""brook.protocol.lenient: DescribeTransactions' answer as Kafka writes it for an id with no
transaction open (start time -1), which kio's own entity cannot read, read into a copy of that
entity whose start time is a plain int64; every other field as kio reads it."""

from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from brook.protocol.lenient import describe_transactions_response
from brook.protocol.messages import response_class, response_module

MINUS_ONE = datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc)  # kio writes -1


def _answer(start: datetime) -> bytes:
    mod = response_module(65, 0)
    body = response_class(65, 0)(throttle_time=timedelta(0), transaction_states=(
        mod.TransactionState(error_code=ErrorCode.none, transactional_id="app",
                             transaction_state="Empty", transaction_timeout=timedelta(seconds=60),
                             transaction_start_time=start, producer_id=7, producer_epoch=2,
                             topics=(mod.TopicData(topic="t", partitions=(0, 3)),)),))
    buf = io.BytesIO()
    entity_writer(type(body))(buf, body)
    return buf.getvalue()


def test_a_start_time_of_minus_one_is_read():
    data = _answer(MINUS_ONE)
    with pytest.raises(Exception):
        entity_reader(response_class(65, 0))(data, 0)
    read, end = entity_reader(describe_transactions_response(0))(data, 0)
    assert end == len(data)
    (state,) = read.transaction_states
    assert state.transaction_start_time == -1
    assert (state.transactional_id, state.producer_id, state.producer_epoch) == ("app", 7, 2)
    assert state.transaction_timeout == timedelta(seconds=60)
    assert [(t.topic, t.partitions) for t in state.topics] == [("t", (0, 3))]


def test_a_start_time_is_read_in_milliseconds():
    start = datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
    read, _ = entity_reader(describe_transactions_response(0))(_answer(start), 0)
    assert read.transaction_states[0].transaction_start_time == int(start.timestamp() * 1000)
