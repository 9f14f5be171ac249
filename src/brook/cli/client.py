"""The brokers as the commands see them: confluent-kafka's AdminClient with short timeouts, its
answers turned into plain values, its errors into one-line `CliError`s.

Partitions are `(topic, partition)` tuples here and in the pure modules; confluent-kafka's own
types stay inside this module.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from confluent_kafka import (ConsumerGroupState, ConsumerGroupTopicPartitions, ConsumerGroupType,
                             IsolationLevel, KafkaError, KafkaException, TopicCollection,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, OffsetSpec

from . import options
from .errors import CliError
from .wire import consumer_group_describe

TP = tuple[str, int]

PROBE_TIMEOUT = 5.0  # a refused or unroutable address fails within this, before any client starts

# Kafka's names for the group states, as kafka-consumer-groups.sh prints them.
_STATE_NAMES = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}
_STATES_BY_NAME = {name.lower(): state for state, name in _STATE_NAMES.items()}
INACTIVE_STATES = ("Empty", "Dead")  # the states in which a group's offsets may be changed


def group_state(name: str) -> ConsumerGroupState:
    try:
        return _STATES_BY_NAME[name.strip().lower()]
    except KeyError:
        names = ", ".join(n for n in _STATE_NAMES.values() if n != "Unknown")
        raise CliError(f"unknown group state {name!r} (one of {names})", code=2) from None


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise CliError(f"invalid --bootstrap-server {item.strip()!r}: expected host:port",
                           code=2)
        out.append((host.strip("[]"), int(port)))
    return out


def probe(bootstrap: str, timeout: float) -> None:
    """Fail fast, and clearly, when no bootstrap address accepts a TCP connection."""
    reason = ""
    for host, port in _addresses(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
    raise CliError(f"cannot connect to a broker at {bootstrap}: {reason}")


def _librdkafka_logger() -> logging.Logger:
    """librdkafka's own log lines go to stderr only with `--debug`."""
    logger = logging.getLogger("brook.cli.librdkafka")
    logger.propagate = False
    logger.handlers.clear()
    if options.current.debug:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    else:
        logger.addHandler(logging.NullHandler())
    return logger


def error_text(err: KafkaError) -> str:
    """`Broker: Unknown topic or partition (UNKNOWN_TOPIC_OR_PART)` style text of an error."""
    text = err.str() or ""
    if text == "(null)":  # librdkafka's text of an error the broker gave no message for
        text = ""
    name = err.name()
    return f"{text} ({name})" if text and name not in text else text or name


def kafka_error(exc: BaseException | KafkaError) -> KafkaError | None:
    """The KafkaError of a KafkaException (some results hold KafkaErrors themselves)."""
    if isinstance(exc, KafkaError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


@dataclass(frozen=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    partitions: tuple[TP, ...]
    #: KIP-848 consumer groups only: the member's epoch and target partitions.
    member_epoch: int | None = None
    target: tuple[TP, ...] | None = None


@dataclass(frozen=True)
class Group:
    group_id: str
    state: str  # Kafka's name: Stable, Empty, Dead, PreparingRebalance, ...
    assignor: str
    simple: bool
    coordinator: tuple[int, str, int] | None  # (id, host, port)
    members: tuple[Member, ...] = field(default=())
    group_type: str = "classic"  # or "consumer" (KIP-848)
    #: KIP-848 consumer groups only: the group epoch and the target assignment's epoch.
    group_epoch: int | None = None
    assignment_epoch: int | None = None

    @property
    def exists(self) -> bool:
        return self.state != "Dead"

    @property
    def active(self) -> bool:
        return self.state not in INACTIVE_STATES


class Cluster:
    """One AdminClient on a bootstrap address (the command's -b, the root's, the environment's
    or the default); every call waits at most `timeout` (the command's, else the root's).

    A long-lived client (the web console) passes its `security` and a `client_id` of its own
    instead of reading them from the command line's options."""

    def __init__(self, bootstrap: str | None, timeout: float | None = None, security=None,
                 client_id: str = "brook-cli") -> None:
        self.bootstrap = options.bootstrap(bootstrap)
        self.timeout = options.timeout(timeout)
        self.security = options.security() if security is None else security
        self.client_id = client_id
        probe(self.bootstrap, min(self.timeout, PROBE_TIMEOUT))
        self.admin = AdminClient(self.config())

    def config(self, **extra: Any) -> dict[str, Any]:
        """Settings for any confluent-kafka client of this command (producers and consumers too)."""
        conf = {
            "bootstrap.servers": self.bootstrap,
            "client.id": self.client_id,
            "socket.timeout.ms": int(self.timeout * 1000),
            "logger": _librdkafka_logger(),
            **self.security.librdkafka(),
        }
        conf.update(extra)
        return conf

    # -- waiting and errors ----------------------------------------------------------------

    def wait(self, future, what: str):
        """The result of an admin future; a failure becomes `CliError("<what>: <reason>")`."""
        try:
            return future.result(timeout=self.timeout + 5)
        except KafkaException as exc:
            raise CliError(f"{what}: {self.reason(exc)}") from exc
        except TimeoutError:
            raise CliError(f"{what}: {self._no_answer()}") from None

    def outcome(self, future) -> tuple[Any, str | None]:
        """(result, None) of an admin future, or (None, the reason it failed): for commands
        that report every partition's outcome instead of stopping at the first failure."""
        try:
            return future.result(timeout=self.timeout + 5), None
        except KafkaException as exc:
            return None, self.reason(exc)
        except TimeoutError:
            return None, self._no_answer()

    def _no_answer(self) -> str:
        return f"no answer from {self.bootstrap} within {self.timeout:g} s"

    def reason(self, exc: BaseException | KafkaError) -> str:
        err = kafka_error(exc)
        if err is None:
            return str(exc)
        if err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
                          KafkaError._ALL_BROKERS_DOWN, KafkaError.REQUEST_TIMED_OUT):
            return f"no answer from {self.bootstrap} within {self.timeout:g} s ({err.name()})"
        return error_text(err)

    # -- topics ----------------------------------------------------------------------------

    def metadata(self, topic: str | None = None):
        """confluent-kafka's ClusterMetadata: brokers, controller id, and every topic (or only
        `topic`: far less to send and read on a cluster of many partitions)."""
        try:
            return self.admin.list_topics(topic, timeout=self.timeout)
        except KafkaException as exc:
            raise CliError(f"cannot list topics: {self.reason(exc)}") from exc

    def topics(self) -> dict[str, Any]:
        """Topic name -> confluent-kafka's TopicMetadata, for every topic."""
        return self.metadata().topics

    def describe_topic(self, topic: str):
        """confluent-kafka's TopicDescription; CliError for a topic that does not exist."""
        fut = self.admin.describe_topics(TopicCollection([topic]),
                                         request_timeout=self.timeout)[topic]
        try:
            return fut.result(timeout=self.timeout + 5)
        except KafkaException as exc:
            err = kafka_error(exc)
            if err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise CliError(f"unknown topic '{topic}'") from exc
            raise CliError(f"cannot describe topic '{topic}': {self.reason(exc)}") from exc

    def partitions(self, topic: str) -> list[int]:
        return sorted(p.id for p in self.describe_topic(topic).partitions)

    def check_partitions(self, tps: Iterable[TP]) -> None:
        """CliError naming the first partition that does not exist."""
        known: dict[str, set[int]] = {}
        for topic, partition in sorted(set(tps)):
            if topic not in known:
                known[topic] = set(self.partitions(topic))
            if partition not in known[topic]:
                raise CliError(f"topic '{topic}' has no partition {partition} "
                               f"(it has {len(known[topic])})")

    def log_offsets(self, tps: Iterable[TP], spec: str | int, missing_ok: bool = False,
                    isolation: str = "read_uncommitted") -> dict[TP, tuple[int, int]]:
        """(offset, timestamp) per partition for "earliest", "latest" or a timestamp in ms.

        For a timestamp the offset is that of the first record at or after it, -1 if none.
        With `isolation` "read_committed", latest is the last stable offset (KIP-98).
        With `missing_ok`, partitions the broker cannot answer for (a deleted topic) are left
        out instead of failing the command.
        """
        tps = sorted(set(tps))
        if not tps:
            return {}
        if spec == "earliest":
            offset_spec = OffsetSpec.earliest()
        elif spec == "latest":
            offset_spec = OffsetSpec.latest()
        else:
            offset_spec = OffsetSpec.for_timestamp(int(spec))
        level = (IsolationLevel.READ_COMMITTED if isolation == "read_committed"
                 else IsolationLevel.READ_UNCOMMITTED)
        futures = self.admin.list_offsets({TopicPartition(t, p): offset_spec for t, p in tps},
                                          isolation_level=level, request_timeout=self.timeout)
        out = {}
        for tp, fut in futures.items():
            try:
                info = self.wait(fut, f"cannot list offsets of {tp.topic}-{tp.partition}")
            except CliError:
                if missing_ok:
                    continue
                raise
            out[(tp.topic, tp.partition)] = (info.offset, info.timestamp)
        return out

    def log_start_end(self, tps: Iterable[TP], isolation: str = "read_uncommitted"
                      ) -> tuple[dict[TP, int], dict[TP, int]]:
        tps = list(tps)
        start = {tp: o for tp, (o, _) in self.log_offsets(tps, "earliest").items()}
        end = {tp: o for tp, (o, _) in self.log_offsets(tps, "latest",
                                                          isolation=isolation).items()}
        return start, end

    # -- groups ----------------------------------------------------------------------------

    def group_ids(self, states: Iterable[str] = ()) -> list[tuple[str, str]]:
        """(group id, state) of the groups, optionally only those in `states` (Kafka's names)."""
        kwargs: dict[str, Any] = {"request_timeout": self.timeout}
        wanted = {group_state(s) for s in states}
        if wanted:
            kwargs["states"] = wanted
        result = self.wait(self.admin.list_consumer_groups(**kwargs), "cannot list groups")
        if result.errors:
            raise CliError(f"cannot list groups: {self.reason(result.errors[0])}")
        return sorted((g.group_id, _STATE_NAMES.get(g.state, "Unknown")) for g in result.valid)

    def groups(self, group_ids: list[str]) -> list[Group]:
        if not group_ids:
            return []
        futures = self.admin.describe_consumer_groups(group_ids, request_timeout=self.timeout)
        groups = [_group(self.wait(futures[g], f"cannot describe group '{g}'")) for g in group_ids]
        return [self._with_epochs(g) if g.group_type == "consumer" else g for g in groups]

    def _with_epochs(self, group: Group) -> Group:
        """A consumer group with its epochs and its own state name, asked of its coordinator."""
        if group.coordinator is None:
            return group
        _, host, port = group.coordinator
        described = consumer_group_describe(host, port, group.group_id, self.timeout,
                                            self.security)
        if described is None:
            return group
        state, epoch, assignment_epoch, member_epochs = described
        members = tuple(replace(m, member_epoch=member_epochs.get(m.member_id))
                        for m in group.members)
        return replace(group, state=state, group_epoch=epoch,
                       assignment_epoch=assignment_epoch, members=members)

    def group(self, group_id: str) -> Group:
        return self.groups([group_id])[0]

    def committed(self, group_id: str) -> dict[TP, tuple[int, str]]:
        """(offset, metadata) of every partition the group has committed an offset for."""
        return self.committed_many([group_id])[group_id]

    def committed_many(self, group_ids: list[str]) -> dict[str, dict[TP, tuple[int, str]]]:
        """committed() of several groups, their requests in flight together (the client
        takes one group a request)."""
        futures = {g: self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(g)], request_timeout=self.timeout)[g] for g in group_ids}
        out: dict[str, dict[TP, tuple[int, str]]] = {}
        for group_id, future in futures.items():
            result = self.wait(future, f"cannot fetch the offsets of group '{group_id}'")
            offsets = out[group_id] = {}
            for tp in result.topic_partitions:
                if tp.error is not None:
                    raise CliError(f"cannot fetch the offset of {tp.topic}-{tp.partition} of "
                                   f"group '{group_id}': {error_text(tp.error)}")
                if tp.offset >= 0:
                    offsets[(tp.topic, tp.partition)] = (tp.offset, tp.metadata or "")
        return out

    def commit(self, group_id: str, offsets: dict[TP, int],
               metadata: dict[TP, str] | None = None) -> None:
        """Commit `offsets` (with their metadata strings, if given) for the group, as a simple
        consumer does: outside any generation, so only while the group has no members."""
        if not offsets:
            return
        metadata = metadata or {}
        tps = [TopicPartition(t, p, o, metadata=metadata[(t, p)]) if metadata.get((t, p))
               else TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        futures = self.admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id, tps)], request_timeout=self.timeout)
        result = self.wait(futures[group_id], f"cannot commit offsets of group '{group_id}'")
        for tp in result.topic_partitions:
            if tp.error is not None:
                raise CliError(f"cannot commit the offset of {tp.topic}-{tp.partition} for group "
                               f"'{group_id}': {error_text(tp.error)}")

    def delete_groups(self, group_ids: list[str]) -> dict[str, str | None]:
        """Group id -> None when deleted, else the reason it was not."""
        futures = self.admin.delete_consumer_groups(group_ids, request_timeout=self.timeout)
        out: dict[str, str | None] = {}
        for group_id in group_ids:
            try:
                futures[group_id].result(timeout=self.timeout + 5)
                out[group_id] = None
            except KafkaException as exc:
                out[group_id] = self.reason(exc)
        return out


def _group(desc) -> Group:
    coordinator = desc.coordinator
    consumer = getattr(desc, "type", None) == ConsumerGroupType.CONSUMER
    members = tuple(
        Member(m.member_id, m.group_instance_id, m.client_id, m.host,
               tuple(sorted((tp.topic, tp.partition) for tp in
                            (m.assignment.topic_partitions if m.assignment else []))),
               target=tuple(sorted((tp.topic, tp.partition) for tp in
                                   (m.target_assignment.topic_partitions
                                    if getattr(m, "target_assignment", None) else [])))
               if consumer else None)
        for m in desc.members)
    return Group(
        group_id=desc.group_id,
        state=_STATE_NAMES.get(desc.state, "Unknown"),
        assignor=desc.partition_assignor or "",
        simple=bool(desc.is_simple_consumer_group),
        coordinator=(coordinator.id, coordinator.host, coordinator.port) if coordinator else None,
        members=members,
        group_type="consumer" if consumer else "classic",
    )
