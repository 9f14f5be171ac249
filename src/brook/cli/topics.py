"""`brook topics`: list, describe (partitions, log start/end offsets, configs), create, delete,
add-partitions, alter-config, delete-records, elect-leaders, reassign (kafka-topics.sh,
kafka-configs.sh for topics, kafka-delete-records.sh, kafka-leader-election.sh and
kafka-reassign-partitions.sh).

The operations are functions of a `Cluster` (topic_rows, create_topic, ...), which the web
console calls too; the commands parse options, call them and print."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import typer

from . import output
from .errors import CliError
from .options import bootstrap_option, timeout_option
from .output import Format, output_option

if TYPE_CHECKING:
    from .client import Cluster

app = typer.Typer(no_args_is_help=True,
                  help="Topics: list, describe, create, delete, add-partitions, alter-config, delete-records, "
                   "elect-leaders, reassign, reassignments.")


def parse_configs(items: list[str], option: str) -> dict[str, str]:
    """`key=value` items (values may contain `=`); a key given twice is an error."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CliError(f"invalid {option} {item!r}: expected key=value", code=2)
        if key in out:
            raise CliError(f"{option} {key} is given twice", code=2)
        out[key] = value
    return out


def topic_id_text(topic_id: Any) -> str | None:
    """A topic id as Kafka prints it: URL-safe base64 without padding."""
    if topic_id is None:
        return None
    return str(topic_id).replace("+", "-").replace("/", "_").rstrip("=")


def _cluster(bootstrap: str | None, timeout: float | None) -> "Cluster":
    from .client import Cluster

    return Cluster(bootstrap, timeout)


def _source_name(source: Any) -> str:
    """A config's source as Kafka names it (confluent-kafka gives its number)."""
    from confluent_kafka.admin import ConfigSource

    try:
        return ConfigSource(source).name
    except ValueError:
        return str(source)


def topic_configs(cluster: "Cluster", topic: str) -> list[dict[str, Any]]:
    from confluent_kafka.admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, topic)
    futures = cluster.admin.describe_configs([resource], request_timeout=cluster.timeout)
    entries = cluster.wait(futures[resource], f"cannot describe the configs of topic '{topic}'")
    return [{"name": name, "value": None if e.is_sensitive else e.value,
             "source": _source_name(e.source),
             "default": bool(e.is_default)}
            for name, e in sorted(entries.items())]


def partition_rows(cluster: "Cluster", topic: str, desc) -> list[dict[str, Any]]:
    """A described topic's partitions: leader, replicas, ISR, log start and end offsets."""
    start, end = cluster.log_start_end([(topic, p.id) for p in desc.partitions])
    return [{
        "partition": p.id,
        "leader": p.leader.id if p.leader is not None else None,
        "replicas": [r.id for r in p.replicas],
        "isr": [r.id for r in p.isr],
        "log_start_offset": start.get((topic, p.id)),
        "log_end_offset": end.get((topic, p.id)),
    } for p in sorted(desc.partitions, key=lambda p: p.id)]


def topic_view(cluster: "Cluster", topic: str, all_configs: bool) -> dict[str, Any]:
    """Everything `describe` shows of one topic, as plain values."""
    desc = cluster.describe_topic(topic)
    partitions = partition_rows(cluster, topic, desc)
    configs = topic_configs(cluster, topic)
    if not all_configs:  # the topic's own (not those inherited from the broker's settings)
        configs = [c for c in configs if c["source"] == "DYNAMIC_TOPIC_CONFIG"]
    return {
        "topic": topic,
        "topic_id": topic_id_text(desc.topic_id),
        "internal": bool(desc.is_internal),
        "partitions": partitions,
        "replication_factor": max((len(p["replicas"]) for p in partitions), default=0),
        "configs": {c["name"]: c["value"] for c in configs},
    }


# --- operations the command and the web console share ----------------------------------------


def topic_rows(cluster: "Cluster") -> list[dict[str, Any]]:
    """Every topic: its name, number of partitions and whether it is internal."""
    from confluent_kafka import TopicCollection

    metadata = cluster.topics()
    names = sorted(metadata)
    internal = set()
    if names:
        futures = cluster.admin.describe_topics(TopicCollection(names),
                                                request_timeout=cluster.timeout)
        for name in names:
            try:
                if cluster.wait(futures[name], f"cannot describe topic '{name}'").is_internal:
                    internal.add(name)
            except CliError:
                pass  # deleted since it was listed: shown as listed
    return [{"topic": n, "partitions": len(metadata[n].partitions), "internal": n in internal}
            for n in names]


def create_topic(cluster: "Cluster", topic: str, partitions: int, replication_factor: int,
                 configs: dict[str, str], if_not_exists: bool = False) -> bool:
    """Create a topic (-1: the broker's default count); False when it existed and
    `if_not_exists` says that is fine."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic

    from .client import kafka_error

    new = NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor,
                   config=configs)
    future = cluster.admin.create_topics([new], operation_timeout=cluster.timeout,
                                         request_timeout=cluster.timeout)[topic]
    try:
        future.result(timeout=cluster.timeout + 5)
    except Exception as exc:
        err = kafka_error(exc)
        if err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            if if_not_exists:
                return False
            raise CliError(f"topic '{topic}' already exists") from exc
        raise CliError(f"cannot create topic '{topic}': {cluster.reason(exc)}") from exc
    return True


def delete_topics(cluster: "Cluster", topics: list[str], if_exists: bool = False) -> list[str]:
    """Delete topics (internal ones are refused before any is deleted); the deleted ones."""
    from confluent_kafka import KafkaError

    from .client import kafka_error

    internal = _internal(cluster, topics)
    if internal:
        raise CliError(f"topic '{internal[0]}' is internal and cannot be deleted")
    futures = cluster.admin.delete_topics(topics, operation_timeout=cluster.timeout,
                                          request_timeout=cluster.timeout)
    deleted = []
    for topic in topics:
        try:
            futures[topic].result(timeout=cluster.timeout + 5)
        except Exception as exc:
            err = kafka_error(exc)
            if err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                if if_exists:
                    continue
                raise CliError(f"unknown topic '{topic}'") from exc
            raise CliError(f"cannot delete topic '{topic}': {cluster.reason(exc)}") from exc
        deleted.append(topic)
    return deleted


def add_partitions(cluster: "Cluster", topic: str, total: int) -> int:
    """Grow a topic to `total` partitions (a topic never shrinks); the count it had."""
    from confluent_kafka.admin import NewPartitions

    before = len(cluster.partitions(topic))
    if total <= before:
        raise CliError(f"topic '{topic}' has {before} partitions already; give more than that",
                       code=2)
    futures = cluster.admin.create_partitions([NewPartitions(topic, total)],
                                              operation_timeout=cluster.timeout,
                                              request_timeout=cluster.timeout)
    cluster.wait(futures[topic], f"cannot add partitions to topic '{topic}'")
    return before


def alter_topic_configs(cluster: "Cluster", topic: str, to_set: dict[str, str],
                        to_delete: list[str]) -> None:
    """Set and remove topic configs incrementally (others stay as they are)."""
    from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource,
                                       ResourceType)

    if not to_set and not to_delete:
        raise CliError("nothing to change: give --set key=value or --delete key", code=2)
    both = sorted(set(to_set) & set(to_delete))
    if both:
        raise CliError(f"{both[0]} is both set and deleted", code=2)
    cluster.describe_topic(topic)  # an unknown topic is named as such
    if to_delete:
        known = {c["name"] for c in topic_configs(cluster, topic)}
        unknown = [k for k in to_delete if k not in known]
        if unknown:  # the broker accepts deleting any key; refused as --set refuses it
            raise CliError(f"cannot alter the configs of topic '{topic}': "
                           f"unknown topic config '{unknown[0]}'")
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in to_set.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                for k in to_delete]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    futures = cluster.admin.incremental_alter_configs([resource], request_timeout=cluster.timeout)
    cluster.wait(futures[resource], f"cannot alter the configs of topic '{topic}'")


# --- commands ---------------------------------------------------------------------------------


@app.command("list")
def list_topics(
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """List the topics with their number of partitions."""
    rows = topic_rows(_cluster(bootstrap, timeout))
    if fmt is Format.json:
        output.print_json(rows)
        return
    output.table(("TOPIC", "PARTITIONS", "INTERNAL"),
                 [(r["topic"], r["partitions"], "yes" if r["internal"] else "no") for r in rows])


@app.command("describe")
def describe(
    topics: list[str] = typer.Argument(..., metavar="TOPIC..."),
    all_configs: bool = typer.Option(False, "--all-configs",
                                     help="Every config, not only those set on the topic."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """Partitions (leader, replicas, log start and end offsets) and configs of topics."""
    cluster = _cluster(bootstrap, timeout)
    views = [topic_view(cluster, t, all_configs) for t in topics]
    if fmt is Format.json:
        output.print_json(views)
        return
    for i, v in enumerate(views):
        if i:
            output.line()
        output.line(f"Topic: {v['topic']}  TopicId: {v['topic_id']}  "
                    f"PartitionCount: {len(v['partitions'])}  "
                    f"ReplicationFactor: {v['replication_factor']}  "
                    f"Internal: {'yes' if v['internal'] else 'no'}")
        output.table(("PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START-OFFSET",
                      "LOG-END-OFFSET"),
                     [(p["partition"], p["leader"], ",".join(map(str, p["replicas"])),
                       ",".join(map(str, p["isr"])), p["log_start_offset"], p["log_end_offset"])
                      for p in v["partitions"]])
        if v["configs"]:
            output.table(("CONFIG", "VALUE"), sorted(v["configs"].items()))


@app.command("create")
def create(
    topic: str = typer.Argument(..., metavar="TOPIC"),
    partitions: int = typer.Option(-1, "--partitions", "-p", show_default=False,
                                   help="Number of partitions (default: the broker's)."),
    replication_factor: int = typer.Option(-1, "--replication-factor", "-r", show_default=False,
                                           help="Replicas per partition (default: the broker's)."),
    config: list[str] = typer.Option([], "--config", help="key=value topic config; repeatable."),
    if_not_exists: bool = typer.Option(False, "--if-not-exists",
                                       help="Succeed if the topic exists already."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Create a topic."""
    if partitions == 0 or partitions < -1:
        raise CliError("--partitions must be at least 1", code=2)
    configs = parse_configs(config, "--config")
    if create_topic(_cluster(bootstrap, timeout), topic, partitions, replication_factor, configs,
                    if_not_exists):
        output.line(f"Created topic '{topic}'.")
    else:
        output.line(f"Topic '{topic}' exists already.")


def _internal(cluster: "Cluster", topics: list[str]) -> list[str]:
    """Those of `topics` that exist and are internal (`__consumer_offsets`)."""
    out = []
    for topic in topics:
        try:
            if cluster.describe_topic(topic).is_internal:
                out.append(topic)
        except CliError:
            pass  # unknown: the delete itself says so (or skips it with --if-exists)
    return out


@app.command("delete")
def delete(
    topics: list[str] = typer.Argument(..., metavar="TOPIC..."),
    if_exists: bool = typer.Option(False, "--if-exists",
                                   help="Succeed for topics that do not exist."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Delete topics and their data."""
    for topic in delete_topics(_cluster(bootstrap, timeout), topics, if_exists):
        output.line(f"Deleted topic '{topic}'.")


@app.command("elect-leaders")
def elect_leaders(
    partitions: list[str] = typer.Argument(None, metavar="[TOPIC[:PARTITION]]...",
                                           help="Partitions (a topic alone: all of its); none: every partition."),
    unclean: bool = typer.Option(False, "--unclean",
                                 help="Elect a live replica outside the ISR where no in-sync one is alive "
                                      "(it may lose acknowledged records)."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Give partitions back to their preferred replica (the first of their replicas), as
    kafka-leader-election.sh does; or, with --unclean, elect a leader for offline partitions."""
    from confluent_kafka import ElectionType, TopicPartition

    cluster = _cluster(bootstrap, timeout)
    wanted = None
    if partitions:
        wanted = []
        metadata = cluster.topics()
        for item in partitions:
            topic, sep, number = item.rpartition(":")
            if not sep or not number.isdigit():
                topic, number = item, ""
            if topic not in metadata:
                raise CliError(f"unknown topic '{topic}'")
            indexes = [int(number)] if number else sorted(metadata[topic].partitions)
            wanted += [TopicPartition(topic, i) for i in indexes]
    kind = ElectionType.UNCLEAN if unclean else ElectionType.PREFERRED
    # No timeouts passed: confluent-kafka 2.16's elect_leaders fails on any keyword argument;
    # cluster.wait bounds the wait instead.
    future = cluster.admin.elect_leaders(kind, wanted)
    results = cluster.wait(future, "cannot elect leaders")
    rows = []
    for tp, err in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        error = None
        if err is not None:  # a KafkaError (or an exception carrying one)
            kerr = err.args[0] if isinstance(err, Exception) and err.args else err
            error = f"{kerr.name()}: {kerr.str()}" if hasattr(kerr, "name") else str(err)
        rows.append((tp.topic, tp.partition, "elected" if err is None else error))
    if not rows:
        output.line("Every partition is led by its preferred replica.")
        return
    output.table(("TOPIC", "PARTITION", "RESULT"), rows)


def _controller_address(cluster: "Cluster") -> tuple[str, int]:
    md = cluster.admin.list_topics(timeout=cluster.timeout)
    broker = md.brokers.get(md.controller_id)
    if broker is None:
        raise CliError("no controller is known to the cluster right now; try again")
    return broker.host, broker.port


@app.command("reassign")
def reassign(
    moves: list[str] = typer.Argument(..., metavar="TOPIC:PARTITION=BROKER,BROKER...",
                                      help="Each partition's new replicas, the preferred leader first."),
    cancel: bool = typer.Option(False, "--cancel", help="Cancel the partitions' moves (give TOPIC:PARTITION)."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Move partitions to other brokers (KIP-455, as kafka-reassign-partitions.sh): the new
    replicas copy the partition, then the old ones are removed."""
    from . import wire

    cluster = _cluster(bootstrap, timeout)
    targets: dict[tuple[str, int], list[int] | None] = {}
    for item in moves:
        where, sep, replicas = item.partition("=")
        topic, colon, number = where.rpartition(":")
        if not colon or not number.isdigit() or (bool(sep) == cancel):
            raise CliError(f"invalid move {item!r}: expected TOPIC:PARTITION=1,2,3"
                           + (" (or TOPIC:PARTITION with --cancel)" if cancel else ""), code=2)
        try:
            targets[(topic, int(number))] = None if cancel else [int(b) for b in replicas.split(",")]
        except ValueError:
            raise CliError(f"invalid broker list in {item!r}", code=2) from None
    host, port = _controller_address(cluster)
    results = wire.alter_reassignments(host, port, targets, cluster.timeout)
    failed = False
    for (topic, p), (code, text) in sorted(results.items()):
        if code == 0:
            output.line(f"{'Cancelled' if cancel else 'Reassigning'} {topic}-{p}.")
        else:
            failed = True
            output.line(f"{topic}-{p}: {code.name.upper()}{': ' + text if text else ''}")
    if failed:
        raise CliError("some partitions could not be reassigned")


@app.command("reassignments")
def reassignments(
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """Partition moves in progress: replicas, adding, removing."""
    from . import wire

    cluster = _cluster(bootstrap, timeout)
    host, port = _controller_address(cluster)
    ongoing = wire.list_reassignments(host, port, cluster.timeout)
    rows = [{"topic": t, "partition": p, "replicas": r, "adding": a, "removing": rm}
            for (t, p), (r, a, rm) in sorted(ongoing.items())]
    if fmt is Format.json:
        output.print_json(rows)
        return
    if not rows:
        output.line("No partition is being reassigned.")
        return
    output.table(("TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"),
                 [(r["topic"], r["partition"], ",".join(map(str, r["replicas"])),
                   ",".join(map(str, r["adding"])), ",".join(map(str, r["removing"]))) for r in rows])


@app.command("delete-records")
def delete_records(
    topic: str = typer.Argument(..., metavar="TOPIC"),
    offset: int = typer.Option(..., "--offset", min=-1,
                               help="Delete the records below this offset; -1: every record."),
    partitions: list[int] = typer.Option([], "--partition", "-p", min=0,
                                         help="A partition; repeatable. Default: every partition."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """Delete a topic's records below an offset (its log start offset moves there)."""
    from confluent_kafka import TopicPartition

    cluster = _cluster(bootstrap, timeout)
    if partitions:
        cluster.check_partitions((topic, p) for p in partitions)
        partitions = sorted(set(partitions))
    else:
        partitions = cluster.partitions(topic)
    futures = cluster.admin.delete_records([TopicPartition(topic, p, offset) for p in partitions],
                                           operation_timeout=cluster.timeout,
                                           request_timeout=cluster.timeout)
    rows = []
    for tp, fut in sorted(futures.items(), key=lambda kv: kv[0].partition):
        deleted, error = cluster.outcome(fut)
        rows.append({"topic": topic, "partition": tp.partition,
                     "low_watermark": None if deleted is None else deleted.low_watermark,
                     "error": error})
    if fmt is Format.json:
        output.print_json(rows)
    else:
        output.table(("TOPIC", "PARTITION", "LOW-WATERMARK", "ERROR"),
                     [(r["topic"], r["partition"], r["low_watermark"], r["error"]) for r in rows])
    failed = [r for r in rows if r["error"] is not None]
    if failed:
        first = failed[0]
        raise CliError(f"could not delete records of {len(failed)} of {len(rows)} partition(s) "
                       f"of '{topic}', e.g. partition {first['partition']}: {first['error']}")


@app.command("alter-config")
def alter_config(
    topic: str = typer.Argument(..., metavar="TOPIC"),
    set_: list[str] = typer.Option([], "--set", help="key=value to set; repeatable."),
    delete_: list[str] = typer.Option([], "--delete",
                                      help="Key to reset to the default; repeatable."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Set or remove topic configs (incrementally: other configs stay as they are)."""
    to_set = parse_configs(set_, "--set")
    to_delete = [k.strip() for k in delete_]
    alter_topic_configs(_cluster(bootstrap, timeout), topic, to_set, to_delete)
    for k, v in to_set.items():
        output.line(f"Set {k}={v} on topic '{topic}'.")
    for k in to_delete:
        output.line(f"Removed {k} from topic '{topic}' (the default applies).")


@app.command("add-partitions")
def add_partitions_command(
    topic: str = typer.Argument(..., metavar="TOPIC"),
    partitions: int = typer.Option(..., "--partitions", "-p", min=1,
                                   help="The topic's new number of partitions (more than now)."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Grow a topic to more partitions (kafka-topics.sh --alter --partitions); keyed records
    written before map to other partitions than those written after."""
    before = add_partitions(_cluster(bootstrap, timeout), topic, partitions)
    output.line(f"Topic '{topic}' has {partitions} partitions (had {before}).")
