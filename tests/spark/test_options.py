"""brook.spark.options: the options of format "brook" are read as Spark's Kafka source reads
them, and a wrong option fails with a message naming it. (tests/spark/test_source.py checks that
these messages reach the user of a Spark query.)"""

from __future__ import annotations

import pytest

from brook.spark.options import OptionError, SinkOptions, SourceOptions, Subscription

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def source(streaming=True, **options):
    return SourceOptions.parse({**BASE, **options}, streaming=streaming)


def test_defaults_follow_spark():
    s = source()
    assert s.client == {"bootstrap.servers": "127.0.0.1:9092"}
    assert s.subscription == Subscription(topics=("t",))
    assert s.starting == "latest" and s.ending == "latest"
    assert source(streaming=False).starting == "earliest"
    assert s.fail_on_data_loss is True and s.include_headers is False
    assert s.max_offsets_per_trigger is None and s.group_id is None
    assert s.poll_timeout_ms == 120_000 and s.fetch_retries == 3
    assert s.starting_fallback == "earliest"


def test_names_are_case_insensitive_and_kafka_settings_go_to_the_client():
    s = SourceOptions.parse({"Kafka.Bootstrap.Servers": "h:1", "SUBSCRIBEPATTERN": "page-.*",
                             "kafka.fetch.min.bytes": "10", "StartingOffsets": "Earliest",
                             "maxOffsetsPerTrigger": "500", "FAILONDATALOSS": "False",
                             "includeHeaders": "TRUE", "group.id": "g"}, streaming=True)
    assert s.client == {"bootstrap.servers": "h:1", "fetch.min.bytes": "10"}
    assert s.subscription == Subscription(pattern="page-.*")
    assert s.starting == "earliest" and s.max_offsets_per_trigger == 500
    assert s.fail_on_data_loss is False and s.include_headers is True and s.group_id == "g"


def test_subscriptions():
    assert source(subscribe=" a, b ,a,").subscription.topics == ("a", "b")
    pattern = SourceOptions.parse({"bootstrap.servers": "h:1", "subscribePattern": "t-[0-9]+"},
                                  streaming=True).subscription
    assert pattern.matches("t-12") and not pattern.matches("t-1x") and not pattern.matches("xt-1")
    assert not SourceOptions.parse({"bootstrap.servers": "h:1", "subscribePattern": ".*"},
                                   streaming=True).subscription.matches("__consumer_offsets")
    assigned = SourceOptions.parse({"bootstrap.servers": "h:1", "assign": '{"t": [1, 0]}'},
                                   streaming=True).subscription
    assert assigned.assigned == (("t", 0), ("t", 1))


def test_offsets_options():
    s = source(streaming=False, startingOffsets='{"t": {"0": 5, "1": -2}}',
               endingOffsets='{"t": {"0": 9, "1": -1}}')
    assert s.starting == {("t", 0): 5, ("t", 1): -2}
    assert s.ending == {("t", 0): 9, ("t", 1): -1}
    assert source(startingOffsets="group", **{"group.id": "g"}).starting == "group"
    assert source(**{"kafka.group.id": "g"}).group_id == "g"
    assert source(startingOffsets="group", startingOffsetsFallback="none",
                  **{"group.id": "g"}).starting_fallback == "none"


@pytest.mark.parametrize("options, streaming, message", [
    ({"subscribe": None}, True, "exactly one of the options subscribe, subscribePattern and assign"),
    ({"assign": '{"t": [0]}'}, True, r"exactly one .*\(given: subscribe, assign\)"),
    ({"subscribe": " , "}, True, "subscribe names no topic"),
    ({"kafka.bootstrap.servers": None}, True, "kafka.bootstrap.servers .* must be set"),
    ({"bootstrap.servers": "other:1"}, True, "disagree"),
    ({"startingOffsets": "newest"}, True, "startingOffsets must be earliest, latest, group or"),
    ({"startingOffsets": '{"t": {"0": -3}}'}, True, "only -2 \\(earliest\\), -1 \\(latest\\)"),
    ({"startingOffsets": "{}"}, True, "names no partition"),
    ({"startingOffsets": '{"t": {"0": "x"}}'}, True, "offset of t-0 must be an integer"),
    ({"startingOffsets": "latest"}, False, "cannot be latest .* for a batch query"),
    ({"startingOffsets": '{"t": {"0": -1}}'}, False, "cannot be latest"),
    ({"endingOffsets": "latest"}, True, "endingOffsets is for batch queries"),
    ({"endingOffsets": "earliest"}, False, "endingOffsets must be latest or a JSON"),
    ({"endingOffsets": '{"t": {"0": -2}}'}, False, "only -1 \\(latest\\) may be used"),
    ({"startingOffsets": "group"}, True, "startingOffsets=group needs the option group.id"),
    ({"startingOffsetsFallback": "middle"}, True, "startingOffsetsFallback must be"),
    ({"group.id": "a", "kafka.group.id": "b"}, True, "disagree"),
    ({"group.id": " "}, True, "group.id is empty"),
    ({"maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger must be a positive integer"),
    ({"maxOffsetsPerTrigger": "lots"}, True, "maxOffsetsPerTrigger must be an integer"),
    ({"minPartitions": "-1"}, True, "minPartitions must be a positive integer"),
    ({"failOnDataLoss": "yes"}, True, "failOnDataLoss must be true or false"),
    ({"includeHeaders": "1"}, True, "includeHeaders must be true or false"),
    ({"subscribePattern": "(", "subscribe": None}, True, "not a valid pattern"),
    ({"assign": '{"t": []}', "subscribe": None}, True, "non-empty list of partitions"),
    ({"kafka.auto.offset.reset": "earliest"}, True, "set the option startingOffsets instead"),
    ({"kafka.enable.auto.commit": "true"}, True, "kafka.enable.auto.commit cannot be set"),
    ({"startingTimestamp": "1000"}, True, "startingTimestamp of Spark's Kafka source is not"),
    ({"minOffsetsPerTrigger": "10"}, True, "minOffsetsPerTrigger .* is not supported"),
    ({"startingOffset": "earliest"}, True, "unknown option 'startingoffset'"),
    ({"topic": "x"}, True, "the option topic does not apply to a source"),
])
def test_invalid_source_options_are_refused_with_a_message(options, streaming, message):
    given = {**BASE, **options}
    given = {k: v for k, v in given.items() if v is not None}
    with pytest.raises(OptionError, match=message):
        SourceOptions.parse(given, streaming=streaming)


def test_mode_specific_checks_wait_for_the_mode():
    # Spark asks for the schema before it says whether the query is batch or streaming.
    assert source(streaming=None, startingOffsets="latest").starting == "latest"
    assert source(streaming=None, endingOffsets="latest").ending == "latest"
    assert source(streaming=False, maxOffsetsPerTrigger="5").warnings == (
        "maxOffsetsPerTrigger is ignored by batch queries",)


def test_sink_options():
    s = SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "Topic": " out ",
                           "kafka.linger.ms": "5", "checkpointLocation": "/tmp/x",
                           "subscribe": "ignored-by-a-sink"})
    assert s.topic == "out" and s.client == {"bootstrap.servers": "h:1", "linger.ms": "5"}
    assert SinkOptions.parse({"bootstrap.servers": "h:1"}).topic is None
    for options, message in [({}, "must be set"), ({"bootstrap.servers": "h:1", "topic": ""},
                                                   "topic is empty"),
                             ({"bootstrap.servers": "h:1", "kafka.value.serializer": "x"},
                              "cannot be set"),
                             ({"bootstrap.servers": "h:1", "tpoic": "x"}, "unknown option")]:
        with pytest.raises(OptionError, match=message):
            SinkOptions.parse(options)
