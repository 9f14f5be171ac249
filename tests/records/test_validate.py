"""Record-level checks of a producer's batch (brook.records.validate): what decodes, what is
refused as a whole, and which records are named when only some break a rule."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.records.test_compression import zstd_rle_bomb
from tests.support.examples import examples

from brook.records import Codec, Record, encode_batch, read_header
from brook.records import runs, validate
from brook.records.batch import HEADER_SIZE
from brook.records.compression import compress
from brook.records.errors import InflationLimitError, InvalidRecordError, InvalidTimestampError
from brook.records.validate import Rules, check_batch, check_records

NOW = 1_700_000_000_000
RULES = Rules(inflate_limit=8 << 20, where="t-0")
KEYED = Rules(inflate_limit=8 << 20, keys_required=True, where="t-0")


def _records(n: int, key=b"k", ts=NOW, value=b"value", headers=()) -> list[Record]:
    return [Record(i, ts + i % 7, key, value, headers) for i in range(n)]


def _check(batch: bytes, rules: Rules = RULES, now: int = NOW) -> int:
    h = read_header(batch)
    return check_batch(batch, 0, h.size, h.attributes, h.record_count, h.base_timestamp, rules, now)


def _body(batch: bytes) -> bytes:
    return batch[HEADER_SIZE:]


def _every_way(body: bytes, count: int, base_ts: int, rules: Rules = RULES, now: int = NOW):
    """The outcome of each way of checking the same records: record by record, a column at a
    time, and runs of one layout first (`brook.records.runs`), then the rest either way."""
    outcomes = []
    never = 1 << 40
    for small, run in ((never, never), (0, never), (0, runs.RUN), (never, runs.RUN)):
        try:
            outcomes.append(("ok", _with(small, run, body, count, base_ts, rules, now)))
        except InvalidRecordError as exc:  # InvalidTimestampError included
            outcomes.append((type(exc).__name__, exc.record_errors and tuple(i for i, _ in exc.record_errors)))
    return outcomes


def _with(small, run, body, count, base_ts, rules, now):
    saved = validate.SMALL, validate.RUN
    validate.SMALL, validate.RUN = small, run
    try:
        return check_records(body, count, base_ts, rules, now)
    finally:
        validate.SMALL, validate.RUN = saved


def _alike(outcomes: list) -> bool:
    return all(outcome == outcomes[0] for outcome in outcomes)


@pytest.mark.parametrize("n", [1, 15, 16, 300, 70_000])
@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.ZSTD])
def test_good_batches_pass_and_give_their_largest_timestamp(n, codec):
    batch = encode_batch(_records(n, headers=(("h", b"1"),) if n == 300 else ()), codec=codec)
    assert _check(batch) == NOW + min(n - 1, 6)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=20)),
                            st.one_of(st.none(), st.binary(max_size=300)),
                            st.integers(-5000, 5000),
                            st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))),
                                     max_size=2)),
                  min_size=1, max_size=40),
    flips=st.lists(st.tuples(st.integers(0), st.integers(0, 255)), max_size=3),
    count_change=st.sampled_from([0, 0, 0, -1, 1]),
    keyed=st.booleans(),
)
def test_every_way_of_checking_agrees(recs, flips, count_change, keyed):
    records = [Record(i, NOW + dt, k, v, tuple(h)) for i, (k, v, dt, h) in enumerate(recs)]
    body = bytearray(_body(encode_batch(records)))
    for pos, value in flips:
        body[pos % len(body)] = value
    count = max(len(records) + count_change, 1)
    rules = Rules(inflate_limit=1 << 20, keys_required=keyed, before_max_ms=2000, after_max_ms=2000)
    assert _alike(_every_way(bytes(body), count, NOW, rules))


# Runs of records of one size, as producers send them (a counter's values, keys of one
# width), then a change of size: the columnar walk guesses record starts along a run, and a
# guess may land on the batch's last byte. Sound batches of every such shape must pass.
_RUN = st.tuples(st.integers(1, 40),  # records in the run
                 st.one_of(st.none(), st.integers(0, 3)),  # key: null or its length
                 st.one_of(st.none(), st.integers(0, 200)),  # value: null or its length
                 st.integers(0, 1),  # headers
                 st.sampled_from([0, 1, 60, 9000]))  # ms between records' timestamps


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=st.lists(_RUN, min_size=1, max_size=6), codec=st.sampled_from(list(Codec)))
# The shape Produce refused of librdkafka: a run of records of 18 bytes, then 17 of 17 bytes
# (as when a key counter wraps from two digits to one), so that the run's last guess is the
# body's last byte and its read of the byte after it went past the end.
@example(runs=[(20, 1, 10, 0, 0), (17, 1, 9, 0, 0)], codec=Codec.NONE)
def test_sound_batches_of_runs_of_one_record_size_pass_every_way(runs, codec):
    records = _runs_batch(runs)
    top = max(r.timestamp for r in records)
    body = _body(encode_batch(records))
    assert _every_way(body, len(records), NOW) == [("ok", top)] * 4
    assert _check(encode_batch(records, codec=codec)) == top


@settings(max_examples=examples(300), deadline=None)
@given(body=st.binary(min_size=1, max_size=400), count=st.integers(1, 60), keyed=st.booleans())
def test_any_bytes_pass_or_are_refused_alike_every_way(body, count, keyed):
    """Reads past the body (it is read in place, unpadded) or fields past their record end in
    INVALID_RECORD, never another exception, and every way agrees."""
    rules = Rules(inflate_limit=1 << 20, keys_required=keyed, before_max_ms=2000, after_max_ms=2000)
    assert _alike(_every_way(body, count, NOW, rules))


def _runs_batch(runs) -> list[Record]:
    records, ts = [], NOW
    for n, key, value, n_headers, step in runs:
        for _ in range(n):
            records.append(Record(len(records), ts, None if key is None else b"k" * key,
                                  None if value is None else b"v" * value,
                                  (("h", b"1"),) * n_headers))
            ts += step
    return records


# Runs long enough to be checked as runs (brook.records.runs), across the offset deltas'
# change of width at 64, with timestamps that grow, stay or go back.
_LONG_RUN = st.tuples(st.integers(1, 90),  # records in the run
                      st.one_of(st.none(), st.integers(0, 12)),  # key: null or its length
                      st.one_of(st.none(), st.integers(0, 300)),  # value: null or its length
                      st.sampled_from([0, 0, 0, 1]),  # headers
                      st.sampled_from([0, 1, 60, 9000, -1]))  # ms between records' timestamps


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=st.lists(_LONG_RUN, min_size=1, max_size=4),
       flips=st.lists(st.tuples(st.integers(0), st.integers(0, 255)), max_size=3),
       count_change=st.sampled_from([0, 0, 0, -1, 1]), keyed=st.booleans(),
       bound=st.sampled_from([None, 40, 2000]), late=st.sampled_from([0, 0, 100]))
# librdkafka's shape: null keys, values of one size, timestamps a millisecond apart at most
@example(runs=[(200, None, 100, 0, 0)], flips=[], count_change=0, keyed=False, bound=None, late=0)
def test_runs_damaged_or_breaking_a_rule_are_judged_alike_every_way(runs, flips, count_change,
                                                                    keyed, bound, late):
    """A run's records are checked together, a field in a word of all of them at once: damage
    anywhere, a count that lies, keyless records on a compacted topic and timestamps out of
    range are refused as the other ways refuse them, naming the same records."""
    body = bytearray(_body(encode_batch(_runs_batch(runs))))
    for pos, value in flips:
        body[pos % len(body)] = value
    count = max(sum(n for n, *_ in runs) + count_change, 1)
    limit = validate.UNBOUNDED if bound is None else bound
    rules = Rules(inflate_limit=1 << 20, keys_required=keyed, before_max_ms=limit, after_max_ms=limit)
    assert _alike(_every_way(bytes(body), count, NOW, rules, NOW + late))


def test_garbage_records_fail_the_whole_batch():
    batch = bytearray(encode_batch(_records(100)))
    batch[HEADER_SIZE:] = b"\xff" * (len(batch) - HEADER_SIZE)
    body = bytes(batch[HEADER_SIZE:])
    for outcome in _every_way(body, 100, NOW):
        assert outcome == ("InvalidRecordError", ())


def test_a_count_that_lies_is_refused_before_any_walk():
    body = _body(encode_batch(_records(5)))
    started = time.perf_counter()
    with pytest.raises(InvalidRecordError, match="counts 2147483647 records"):
        check_records(body, 2**31 - 1, NOW, RULES, NOW)
    # a walk (or arrays) of 2^31 records would take minutes: a second is far from both, and
    # far from a busy machine's scheduling delays
    assert time.perf_counter() - started < 1.0
    for count in (4, 6):  # one record left over, one missing
        assert _every_way(body, count, NOW) == [("InvalidRecordError", ())] * 4
    body = _body(encode_batch(_records(40)))
    for count in (39, 41):
        assert _every_way(body, count, NOW) == [("InvalidRecordError", ())] * 4


def test_bytes_after_the_last_record_fail_the_batch():
    for n in (3, 40):
        body = _body(encode_batch(_records(n))) + b"\x00"
        assert _every_way(body, n, NOW) == [("InvalidRecordError", ())] * 4


@pytest.mark.parametrize("n", [10, 100])
def test_offset_deltas_out_of_order_name_those_records(n):
    records = _records(n)
    records[3].offset, records[4].offset = 4, 3
    body = _body(encode_batch(records, base_offset=0, last_offset_delta=n - 1))
    assert _every_way(body, n, NOW) == [("InvalidRecordError", (3, 4))] * 4


@pytest.mark.parametrize("n", [10, 100])
@pytest.mark.parametrize("codec", [Codec.NONE, Codec.LZ4])
def test_a_compacted_topic_names_each_record_without_a_key(n, codec):
    records = _records(n)
    for r in records[::10]:
        r.key = None
    for i, r in enumerate(records):  # record lengths of one, two and three varint bytes
        r.value = (b"", b"x" * 70, b"y" * 300)[i % 3]
    batch = encode_batch(records, codec=codec)
    body = _body(encode_batch(records))
    expected = tuple(range(0, n, 10))
    with pytest.raises(InvalidRecordError) as refused:
        _check(batch, KEYED)
    assert tuple(i for i, _ in refused.value.record_errors) == expected
    assert _every_way(body, n, NOW, KEYED) == [("InvalidRecordError", expected)] * 4
    assert _every_way(body, n, NOW, RULES)[0][0] == "ok"
    with pytest.raises(InvalidRecordError) as refused:
        check_records(body, n, NOW, KEYED, NOW)
    assert "Compacted topic cannot accept message without key in topic partition t-0" \
        in refused.value.record_errors[0][1]


def test_timestamps_out_of_range_name_those_records_as_invalid_timestamp():
    rules = Rules(inflate_limit=1 << 20, keys_required=True, before_max_ms=1000, after_max_ms=1000)
    records = _records(50)
    records[5].timestamp = NOW - 5000
    records[6].timestamp = NOW + 5000
    records[7].key = None  # a key error is the record's one error
    records[7].timestamp = NOW + 5000
    body = _body(encode_batch(records, base_timestamp=NOW))
    assert _every_way(body, 50, NOW, rules) == [("InvalidTimestampError", (5, 6, 7))] * 4
    with pytest.raises(InvalidTimestampError) as refused:
        check_records(body, 50, NOW, rules, NOW)
    messages = dict(refused.value.record_errors)
    assert "Compacted topic" in messages[7] and "Timestamp" in messages[5]
    # A LogAppendTime topic does not look at them.
    stamped = Rules(inflate_limit=1 << 20, before_max_ms=1000, after_max_ms=1000, check_timestamps=False)
    assert _every_way(body, 50, NOW, stamped)[0][0] == "ok"


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.ZSTD])
def test_compressed_garbage_with_a_valid_header_is_refused(codec):
    good = encode_batch(_records(100), codec=codec)
    h = read_header(good)
    garbage = compress(codec, b"\x17" * 5000)
    with pytest.raises(InvalidRecordError):
        check_batch(good[:HEADER_SIZE] + garbage, 0, HEADER_SIZE + len(garbage), h.attributes,
                    100, h.base_timestamp, RULES, NOW)


@pytest.mark.parametrize("codec", list(Codec))
def test_a_batch_inflates_quickly_when_its_headers_bound_it_to_a_mebibyte(codec):
    """Produce inflates such a batch on the event loop (a worker thread's hop costs more)."""
    small = encode_batch(_records(100), codec=codec)
    large = encode_batch(_records(1000, value=bytes(1100)), codec=codec)  # ~1.1 MB inflated
    assert validate.inflates_quickly(small) is (codec != Codec.GZIP)
    assert validate.inflates_quickly(large) is False
    if codec in (Codec.ZSTD, Codec.LZ4):  # not a frame: the check answers, in a worker thread
        assert validate.inflates_quickly(small[:HEADER_SIZE] + b"\x17" * 40) is False


def test_a_zstd_bomb_is_refused_without_inflating():
    good = encode_batch(_records(1), codec=Codec.ZSTD)
    h = read_header(good)
    bomb = zstd_rle_bomb(8192)
    started = time.perf_counter()
    with pytest.raises(InflationLimitError):
        check_batch(good[:HEADER_SIZE] + bomb, 0, HEADER_SIZE + len(bomb), h.attributes, 1,
                    h.base_timestamp, RULES, NOW)
    assert time.perf_counter() - started < 0.05
