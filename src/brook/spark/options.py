"""The options of format "brook", read and checked once, with Spark's Kafka source's names.

Spark hands a data source its options with lower-cased names; the names below are written
the way users write them and compared lower-cased. ``kafka.``-prefixed options go to the
client (librdkafka) without the prefix, as Spark passes them to its Kafka clients. Options of
Spark's Kafka source that brook does not implement, and names nobody knows, are refused with
a message, so that a typo cannot silently change what a query reads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .offsets import EARLIEST, LATEST, Offsets, OffsetsError, TopicPartition, assign_from_json
from .offsets import from_json


class OptionError(ValueError):
    """An option of format "brook" that is missing, unknown or has a wrong value."""


# Internal topics are never matched by subscribePattern (Kafka's exclude.internal.topics).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

SOURCE_OPTIONS = (
    "kafka.bootstrap.servers", "bootstrap.servers", "subscribe", "subscribePattern", "assign",
    "startingOffsets", "endingOffsets", "startingOffsetsFallback", "maxOffsetsPerTrigger",
    "failOnDataLoss", "includeHeaders", "group.id", "kafka.group.id", "minPartitions",
    "maxRecordsPerPartition", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs", "groupIdPrefix", "maxTasks",
)
SINK_OPTIONS = ("kafka.bootstrap.servers", "bootstrap.servers", "topic", "includeHeaders",
                "exactlyOnce")
# Options Spark itself adds to a query's options.
SPARK_OPTIONS = ("checkpointLocation", "path")
# Spark's Kafka source options brook does not implement.
UNSUPPORTED = ("startingTimestamp", "startingOffsetsByTimestamp", "endingTimestamp",
               "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
               "minOffsetsPerTrigger", "maxTriggerDelay")
# Client settings the connector owns (as Spark's Kafka source refuses them).
FORBIDDEN_CLIENT_KEYS = {
    "auto.offset.reset": "set the option startingOffsets instead",
    "enable.auto.commit": "the source never auto-commits; set the option group.id to commit "
                          "each micro-batch's offsets to a group",
    "key.deserializer": "keys are always read as bytes",
    "value.deserializer": "values are always read as bytes",
    "key.serializer": "keys are written as bytes or UTF-8 strings",
    "value.serializer": "values are written as bytes or UTF-8 strings",
    "interceptor.classes": "interceptors are not supported",
}

_LOWER = {name.lower(): name for name in SOURCE_OPTIONS + SINK_OPTIONS + SPARK_OPTIONS}


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a query reads: topics by name, topics matching a pattern, or fixed partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        """Whether the partitions of ``topic`` belong to the subscription (not for assign)."""
        if self.pattern is not None:
            return topic not in INTERNAL_TOPICS and re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def describe(self) -> str:
        if self.pattern is not None:
            return f"subscribePattern {self.pattern!r}"
        if self.assigned:
            return "assign " + ", ".join(f"{t}-{p}" for t, p in self.assigned)
        return "subscribe " + ",".join(self.topics)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    client: dict[str, str]  # librdkafka settings: bootstrap.servers and the kafka.* options
    subscription: Subscription
    starting: str | Offsets  # "earliest", "latest", "group" or offsets (-2/-1 allowed)
    ending: str | Offsets  # "latest" or offsets (-1 allowed); batch reads only
    starting_fallback: str  # where startingOffsets=group starts partitions without a commit
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    group_id: str | None
    min_partitions: int | None
    max_records_per_partition: int | None
    max_tasks: int | None  # brook.spark.read/read_stream: ranges packed into at most this many tasks
    poll_timeout_ms: int
    fetch_retries: int
    fetch_retry_interval_ms: int
    group_id_prefix: str
    warnings: tuple[str, ...] = field(default=())

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool | None) -> "SourceOptions":
        """Check the options of a read; ``streaming`` is None while the kind of query is not
        known yet (Spark asks for the schema first)."""
        opts = _normalise(options, SOURCE_OPTIONS, "source")
        warnings: list[str] = []
        client = _client_settings(opts)
        subscription = _subscription(opts)
        group_id = _group_id(opts)

        default_start = "latest" if streaming else "earliest"
        starting = _offsets_option(opts, "startingOffsets", default_start,
                                   ("earliest", "latest", "group"), EARLIEST)
        if starting == "group" and group_id is None:
            raise OptionError("startingOffsets=group needs the option group.id: the group whose "
                              "committed offsets the query starts from")
        fallback = opts.get("startingoffsetsfallback", "earliest").strip().lower()
        if fallback not in ("earliest", "latest", "none"):
            raise OptionError(f"startingOffsetsFallback must be earliest, latest or none, "
                              f"not {opts['startingoffsetsfallback']!r}")
        ending: str | Offsets = "latest"
        if "endingoffsets" in opts:
            if streaming:
                raise OptionError("endingOffsets is for batch queries; a streaming query reads "
                                  "on as data arrives (use trigger(availableNow=True) to stop "
                                  "at the data there is when it starts)")
            ending = _offsets_option(opts, "endingOffsets", "latest", ("latest",), LATEST)
        if streaming is False:
            if starting == "latest" or (isinstance(starting, dict) and LATEST in starting.values()):
                raise OptionError("startingOffsets cannot be latest (or -1) for a batch query: it "
                                  "would read nothing; use earliest, group or explicit offsets")
            if "maxoffsetspertrigger" in opts:
                warnings.append("maxOffsetsPerTrigger is ignored by batch queries")

        fail_on_data_loss = _bool(opts, "failOnDataLoss", True)
        include_headers = _bool(opts, "includeHeaders", False)
        return cls(
            client=client,
            subscription=subscription,
            starting=starting,
            ending=ending,
            starting_fallback=fallback,
            max_offsets_per_trigger=_positive(opts, "maxOffsetsPerTrigger"),
            fail_on_data_loss=fail_on_data_loss,
            include_headers=include_headers,
            group_id=group_id,
            min_partitions=_positive(opts, "minPartitions"),
            max_records_per_partition=_positive(opts, "maxRecordsPerPartition"),
            max_tasks=_positive(opts, "maxTasks"),
            poll_timeout_ms=_positive(opts, "kafkaConsumer.pollTimeoutMs") or 120_000,
            fetch_retries=_non_negative(opts, "fetchOffset.numRetries", 3),
            fetch_retry_interval_ms=_non_negative(opts, "fetchOffset.retryIntervalMs", 10),
            group_id_prefix=opts.get("groupidprefix", "spark-kafka-source"),
            warnings=tuple(warnings),
        )


@dataclass(frozen=True, slots=True)
class SinkOptions:
    client: dict[str, str]  # librdkafka producer settings
    topic: str | None  # overrides a topic column, as in Spark's Kafka sink
    exactly_once: bool = False  # streaming only: one transaction per task and micro-batch

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SinkOptions":
        # A sink accepts the source's options too (ignored), so that one set of options can
        # serve both ends of a pipeline.
        opts = _normalise(options, SINK_OPTIONS + SOURCE_OPTIONS, "sink")
        client = _client_settings(opts)
        topic = opts.get("topic")
        if topic is not None and not topic.strip():
            raise OptionError("the option topic is empty")
        _bool(opts, "includeHeaders", False)
        exactly_once = _bool(opts, "exactlyOnce", False)
        if exactly_once:
            if topic is None or not topic.strip():
                raise OptionError("exactlyOnce needs the option topic: each task records the "
                                  "micro-batches it wrote on partition 0 of that topic")
            if "transactional.id" in client:
                raise OptionError("kafka.transactional.id cannot be set with exactlyOnce: each "
                                  "task has its own, brook-sink-<query id>-<partition>")
        return cls(client=client, topic=topic.strip() if topic else None,
                   exactly_once=exactly_once)


# ----------------------------------------------------------------- helpers


def _normalise(options: Mapping[str, str], known: tuple[str, ...], kind: str) -> dict[str, str]:
    opts = {str(k).lower(): "" if v is None else str(v) for k, v in options.items()}
    allowed = {n.lower() for n in known + SPARK_OPTIONS}
    for name in opts:
        if name.startswith("kafka.") or name in allowed:
            continue
        spelled = next((u for u in UNSUPPORTED if u.lower() == name), None)
        if spelled:
            raise OptionError(f"the option {spelled} of Spark's Kafka source is not supported by "
                              f"format brook")
        if name in _LOWER:  # a source option given to the sink, or the reverse
            raise OptionError(f"the option {_LOWER[name]} does not apply to a {kind}")
        raise OptionError(f"unknown option {name!r} for the brook {kind}; known options: "
                          f"{', '.join(known)}, and kafka.* client settings")
    return opts


def _client_settings(opts: dict[str, str]) -> dict[str, str]:
    servers = opts.get("kafka.bootstrap.servers", "").strip()
    plain = opts.get("bootstrap.servers", "").strip()
    if servers and plain and servers != plain:
        raise OptionError(f"kafka.bootstrap.servers ({servers!r}) and bootstrap.servers "
                          f"({plain!r}) disagree; set one of them")
    servers = servers or plain
    if not servers:
        raise OptionError("the option kafka.bootstrap.servers (host:port,...) must be set")
    client = {"bootstrap.servers": servers}
    for name, value in opts.items():
        if not name.startswith("kafka.") or name in ("kafka.bootstrap.servers", "kafka.group.id"):
            continue
        key = name[len("kafka."):]
        if key in FORBIDDEN_CLIENT_KEYS:
            raise OptionError(f"the client setting {name} cannot be set: "
                              f"{FORBIDDEN_CLIENT_KEYS[key]}")
        client[key] = value
    return client


def _subscription(opts: dict[str, str]) -> Subscription:
    given = [n for n in ("subscribe", "subscribepattern", "assign") if n in opts]
    if len(given) != 1:
        names = ", ".join(_LOWER[n] for n in given) if given else "none"
        raise OptionError("exactly one of the options subscribe, subscribePattern and assign "
                          f"must be set (given: {names})")
    name = given[0]
    value = opts[name].strip()
    if name == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise OptionError(f"subscribe names no topic: {opts[name]!r}")
        return Subscription(topics=topics)
    if name == "subscribepattern":
        if not value:
            raise OptionError("subscribePattern is empty")
        try:
            re.compile(value)
        except re.error as exc:
            raise OptionError(f"subscribePattern {value!r} is not a valid pattern: {exc}") from None
        return Subscription(pattern=value)
    try:
        return Subscription(assigned=tuple(assign_from_json(value)))
    except OffsetsError as exc:
        raise OptionError(str(exc)) from None


def _group_id(opts: dict[str, str]) -> str | None:
    group = opts.get("group.id")
    kafka_group = opts.get("kafka.group.id")
    if group is not None and kafka_group is not None and group != kafka_group:
        raise OptionError(f"group.id ({group!r}) and kafka.group.id ({kafka_group!r}) disagree")
    group = group if group is not None else kafka_group
    if group is not None and not group.strip():
        raise OptionError("group.id is empty")
    return group


def _offsets_option(opts: dict[str, str], name: str, default: str, words: tuple[str, ...],
                    lowest: int) -> str | Offsets:
    raw = opts.get(name.lower(), default).strip()
    if raw.lower() in words:
        return raw.lower()
    if not raw.startswith("{"):
        raise OptionError(f"{name} must be {', '.join(words)} or a JSON object like "
                          f'{{"topic": {{"0": 23}}}}, not {raw!r}')
    try:
        offsets = from_json(raw, name)
    except OffsetsError as exc:
        raise OptionError(str(exc)) from None
    if not offsets:
        raise OptionError(f"{name} names no partition: {raw!r}")
    for (topic, partition), offset in offsets.items():
        if offset < lowest:
            allowed = "-2 (earliest), -1 (latest)" if lowest == EARLIEST else "-1 (latest)"
            raise OptionError(f"{name}: offset {offset} of {topic}-{partition} is not an "
                              f"offset; besides offsets >= 0 only {allowed} may be used")
    return offsets


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"{name} must be true or false, not {raw!r}")
    return value == "true"


def _integer(opts: dict[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        return int(raw.strip())
    except ValueError:
        raise OptionError(f"{name} must be an integer, not {raw!r}") from None


def _positive(opts: dict[str, str], name: str) -> int | None:
    value = _integer(opts, name)
    if value is not None and value < 1:
        raise OptionError(f"{name} must be a positive integer, not {value}")
    return value


def _non_negative(opts: dict[str, str], name: str, default: int) -> int:
    value = _integer(opts, name)
    if value is None:
        return default
    if value < 0:
        raise OptionError(f"{name} must not be negative, not {value}")
    return value
