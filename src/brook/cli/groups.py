"""`brook groups`: list, describe, reset-offsets, delete, delete-offsets (kafka-consumer-groups.sh).

The row builders are pure functions of what the brokers said; the commands fetch and print.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping, Optional

import typer

from . import output
from .options import bootstrap_option, timeout_option
from .errors import CliError
from .output import Format, output_option
from .reset import Change, parse_topic_arg, plan, reset_spec

if TYPE_CHECKING:
    from .client import Cluster, Group

TP = tuple[str, int]

app = typer.Typer(no_args_is_help=True,
                  help="Consumer groups: list, describe, reset-offsets, delete, delete-offsets.")

OFFSET_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID")


# --- pure views -------------------------------------------------------------------------------


def offset_rows(group: "Group", committed: Mapping[TP, int],
                log_end: Mapping[TP, int]) -> list[dict[str, Any]]:
    """Kafka's describe rows: each member's assigned partitions (members with most partitions
    first), then committed partitions no member has; lag is log end minus committed offset."""

    def row(tp: TP, member) -> dict[str, Any]:
        current, end = committed.get(tp), log_end.get(tp)
        return {
            "topic": tp[0], "partition": tp[1], "current_offset": current,
            "log_end_offset": end,
            "lag": end - current if current is not None and end is not None else None,
            "consumer_id": member.member_id if member else None,
            "host": member.host if member else None,
            "client_id": member.client_id if member else None,
        }

    rows, assigned = [], set()
    members = sorted((m for m in group.members if m.partitions), key=lambda m: -len(m.partitions))
    for member in members:
        for tp in sorted(member.partitions):
            assigned.add(tp)
            rows.append(row(tp, member))
    rows.extend(row(tp, None) for tp in sorted(set(committed) - assigned))
    return rows


def member_rows(group: "Group") -> list[dict[str, Any]]:
    """The members; a KIP-848 consumer group's also with each one's epoch and target
    partitions (and the target assignment's epoch), as Kafka 4's tool shows them."""
    rows = []
    for m in group.members:
        row = {"consumer_id": m.member_id, "group_instance_id": m.group_instance_id,
               "host": m.host, "client_id": m.client_id,
               "partitions": [{"topic": t, "partition": p} for t, p in m.partitions]}
        if group.group_type == "consumer":
            row["member_epoch"] = m.member_epoch
            row["target_epoch"] = group.assignment_epoch
            row["target_partitions"] = [{"topic": t, "partition": p} for t, p in m.target or ()]
        rows.append(row)
    return rows


def assignment_text(partitions: list[dict[str, Any]]) -> str:
    """Kafka's --verbose ASSIGNMENT column: `topic(0,1), other(2)`."""
    by_topic: dict[str, list[int]] = {}
    for p in partitions:
        by_topic.setdefault(p["topic"], []).append(p["partition"])
    return ", ".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items()))


def state_view(group: "Group") -> dict[str, Any]:
    coordinator = None
    if group.coordinator:
        cid, host, port = group.coordinator
        coordinator = {"id": cid, "host": host, "port": port}
    view = {"group": group.group_id, "coordinator": coordinator,
            "assignment_strategy": group.assignor or None, "state": group.state,
            "members": len(group.members)}
    if group.group_type == "consumer":
        view.update(type="consumer", group_epoch=group.group_epoch,
                    target_assignment_epoch=group.assignment_epoch)
    return view


def change_rows(group_id: str, changes: list[Change]) -> list[dict[str, Any]]:
    return [{"group": group_id, "topic": c.topic, "partition": c.partition,
             "current_offset": c.current, "new_offset": c.new} for c in changes]


def expand_topics(cluster: "Cluster", topic_args: list[str]) -> list[TP]:
    """`--topic` arguments as partitions: named ones, or all partitions of the topic."""
    tps: list[TP] = []
    for arg in topic_args:
        topic, partitions = parse_topic_arg(arg)
        if partitions is None:
            partitions = cluster.partitions(topic)
        tps.extend((topic, p) for p in partitions)
    cluster.check_partitions(tps)
    return sorted(set(tps))


def require_inactive(group: "Group", action: str) -> None:
    """Kafka changes offsets only of groups without members (Empty, or Dead: no group yet)."""
    if group.active:
        n = len(group.members)
        raise CliError(f"cannot {action} of group '{group.group_id}' while it has active members "
                       f"(state {group.state}, {n} member{'s' if n != 1 else ''}); "
                       "stop its consumers first")


def _cluster(bootstrap: str | None, timeout: float | None) -> "Cluster":
    from .client import Cluster  # confluent-kafka is imported only by commands that use it

    return Cluster(bootstrap, timeout)


def _partitions_or_committed(cluster: "Cluster", topic: str, committed: set[TP]) -> list[int]:
    """The topic's partitions; for a topic that no longer exists, those the group has offsets
    of (an unknown topic is an error when it has none)."""
    try:
        return cluster.partitions(topic)
    except CliError:
        left = sorted(p for t, p in committed if t == topic)
        if not left:
            raise
        return left


def _existing_group(cluster: "Cluster", group_id: str) -> "Group":
    group = cluster.group(group_id)
    if not group.exists:
        raise CliError(f"consumer group '{group_id}' does not exist")
    return group


# --- operations the command and the web console share ----------------------------------------


def group_offsets(cluster: "Cluster", group: "Group") -> list[dict[str, Any]]:
    """offset_rows of a group from what the brokers say now: its committed offsets, and the
    log end offsets of those partitions and of the ones its members are assigned."""
    committed = {tp: o for tp, (o, _) in cluster.committed(group.group_id).items()}
    tps = set(committed) | {tp for m in group.members for tp in m.partitions}
    ends = cluster.log_offsets(tps, "latest", missing_ok=True)
    return offset_rows(group, committed, {tp: o for tp, (o, _) in ends.items()})


def reset_plan(cluster: "Cluster", group_id: str, spec, topic_args: list[str],
               all_topics: bool) -> tuple[list[Change], list[str]]:
    """Where a reset would move the group's offsets (the dry run), and the warnings of clamped
    or fallen-back partitions; refused while the group has active members."""
    require_inactive(cluster.group(group_id), "reset offsets")
    committed = {tp: o for tp, (o, _) in cluster.committed(group_id).items()}
    if all_topics:
        tps = sorted(committed)
        if not tps:
            raise CliError(f"group '{group_id}' has no committed offsets; "
                           "name the partitions with --topic")
    else:
        tps = expand_topics(cluster, topic_args)
    log_start, log_end = cluster.log_start_end(tps)
    by_time = None
    if spec.kind == "timestamp":
        by_time = {tp: o for tp, (o, _) in cluster.log_offsets(tps, spec.value).items()}
    return plan(spec, tps, committed, log_start, log_end, by_time)


def execute_reset(cluster: "Cluster", group_id: str, changes: list[Change]) -> None:
    """Commit a plan's offsets, checking again that no member joined since it was made."""
    require_inactive(cluster.group(group_id), "reset offsets")
    cluster.commit(group_id, {(c.topic, c.partition): c.new for c in changes})


def delete_reason(reason: str) -> str:
    """Why a group could not be deleted, in words (from the broker's error text)."""
    if "GROUP_ID_NOT_FOUND" in reason:
        return "it does not exist"
    if "NON_EMPTY_GROUP" in reason:
        return "it has active members"
    return reason


def delete_group_offsets(cluster: "Cluster", group_id: str,
                         topic_args: list[str]) -> list[dict[str, Any]]:
    """OffsetDelete of the partitions of `topic_args` (TOPIC or TOPIC:P,...): one row per
    partition with its error (None when deleted); CliError when the group refuses it whole."""
    from kio.schema.errors import ErrorCode

    from .wire import offset_delete

    group = _existing_group(cluster, group_id)
    committed = set(cluster.committed(group_id))
    tps: dict[str, list[int]] = {}
    for arg in topic_args:
        name, partitions = parse_topic_arg(arg)
        if partitions is None:
            partitions = _partitions_or_committed(cluster, name, committed)
        for p in partitions:
            if p not in tps.setdefault(name, []):
                tps[name].append(p)
    # Refused before anything is deleted, as reset-offsets refuses them; the group's offsets of
    # a topic deleted since (or of partitions it no longer has) may still be deleted.
    cluster.check_partitions((t, p) for t, ps in tps.items() for p in ps
                             if (t, p) not in committed)
    if group.coordinator is None:
        raise CliError(f"no coordinator known for group '{group_id}'")
    _, host, port = group.coordinator
    code, errors = offset_delete(host, port, group_id, tps, cluster.timeout, cluster.security)
    if code == ErrorCode.group_id_not_found:
        raise CliError(f"consumer group '{group_id}' does not exist")
    if code == ErrorCode.non_empty_group:
        raise CliError(f"cannot delete offsets of group '{group_id}' while it has active members")
    if code != ErrorCode.none:
        raise CliError(f"cannot delete offsets of group '{group_id}': {code.name.upper()}")
    return [{"topic": t, "partition": p, "error": None if e == ErrorCode.none else e.name.upper()}
            for (t, p), e in sorted(errors.items())]


def offsets_failure(group_id: str, rows: list[dict[str, Any]]) -> str | None:
    """The message for rows of delete_group_offsets some of which failed (None if none did)."""
    failed = [r for r in rows if r["error"]]
    if not failed:
        return None
    first = failed[0]
    why = ("the group's members subscribe to the topic"
           if first["error"] == "GROUP_SUBSCRIBED_TO_TOPIC" else first["error"])
    return (f"could not delete {len(failed)} offset(s) of group '{group_id}', e.g. "
            f"{first['topic']}-{first['partition']}: {why}")


# --- commands ---------------------------------------------------------------------------------


@app.command("list")
def list_groups(
    state: Optional[str] = typer.Option(
        None, "--state", help="Only groups in these states, comma-separated (e.g. Stable,Empty)."),
    show_type: bool = typer.Option(
        False, "--type", help="With each group's type: classic, or consumer (KIP-848)."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """List the consumer groups with their state, protocol and number of members."""
    cluster = _cluster(bootstrap, timeout)
    states = [s for s in (state or "").split(",") if s.strip()]
    ids = [g for g, _ in cluster.group_ids(states)]
    groups = cluster.groups(ids)
    rows = [{"group": g.group_id, "type": g.group_type, "state": g.state,
             "protocol": g.assignor or None, "members": len(g.members)} for g in groups]
    if fmt is Format.json:
        output.print_json(rows)
        return
    if show_type:
        output.table(("GROUP", "TYPE", "STATE", "PROTOCOL", "MEMBERS"),
                     [(r["group"], r["type"], r["state"], r["protocol"], r["members"])
                      for r in rows])
        return
    output.table(("GROUP", "STATE", "PROTOCOL", "MEMBERS"),
                 [(r["group"], r["state"], r["protocol"], r["members"]) for r in rows])


@app.command("describe")
def describe(
    group_id: str = typer.Argument(..., metavar="GROUP"),
    members: bool = typer.Option(False, "--members",
                                 help="The group's members instead of offsets."),
    state: bool = typer.Option(False, "--state", help="The group's state and coordinator."),
    verbose: bool = typer.Option(False, "--verbose", help="With --members: each one's assignment."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """Offsets and lag of a group's partitions (Kafka's columns), or its members, or its state."""
    if members and state:
        raise CliError("choose one of --members and --state", code=2)
    cluster = _cluster(bootstrap, timeout)
    group = _existing_group(cluster, group_id)
    if state:
        view = state_view(group)
        if fmt is Format.json:
            output.print_json(view)
            return
        coord = view["coordinator"]
        coord_text = f"{coord['host']}:{coord['port']} ({coord['id']})" if coord else None
        if group.group_type == "consumer":
            output.table(("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
                          "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"),
                         [(group_id, coord_text, view["assignment_strategy"], group.state,
                           group.group_epoch, group.assignment_epoch, view["members"])])
            return
        output.table(("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
                     [(group_id, coord_text, view["assignment_strategy"], group.state,
                       view["members"])])
        return
    if members:
        rows = member_rows(group)
        if fmt is Format.json:
            output.print_json({"group": group_id, "state": group.state, "members": rows})
            return
        _state_note(group)
        static = any(r["group_instance_id"] for r in rows)
        epochs = verbose and group.group_type == "consumer"  # Kafka 4's columns
        columns = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if static else []) + [
            "HOST", "CLIENT-ID", "#PARTITIONS"] + (
            ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
            if epochs else ["ASSIGNMENT"] if verbose else [])
        table_rows = []
        for r in rows:
            cells = [group_id, r["consumer_id"]] + ([r["group_instance_id"]] if static else []) + [
                r["host"], r["client_id"], len(r["partitions"])]
            if epochs:
                cells += [r["member_epoch"], assignment_text(r["partitions"]) or None,
                          r["target_epoch"], assignment_text(r["target_partitions"]) or None]
            elif verbose:
                cells.append(assignment_text(r["partitions"]) or None)
            table_rows.append(cells)
        output.table(columns, table_rows)
        return
    rows = group_offsets(cluster, group)
    if fmt is Format.json:
        output.print_json({"group": group_id, "state": group.state, "partitions": rows})
        return
    _state_note(group)
    output.table(OFFSET_COLUMNS, [(group_id, r["topic"], r["partition"], r["current_offset"],
                                   r["log_end_offset"], r["lag"], r["consumer_id"], r["host"],
                                   r["client_id"]) for r in rows])


def _state_note(group: "Group") -> None:
    if group.state == "Empty":
        output.note(f"Consumer group '{group.group_id}' has no active members.")
    elif group.state in ("PreparingRebalance", "CompletingRebalance"):
        output.warn(f"consumer group '{group.group_id}' is rebalancing.")


@app.command("reset-offsets")
def reset_offsets(
    group_id: str = typer.Argument(..., metavar="GROUP"),
    topic: list[str] = typer.Option([], "--topic", help="TOPIC or TOPIC:P[,P...]; repeatable."),
    all_topics: bool = typer.Option(False, "--all-topics",
                                    help="Every partition the group has an offset for."),
    to_earliest: bool = typer.Option(False, "--to-earliest", help="To the log start offset."),
    to_latest: bool = typer.Option(False, "--to-latest", help="To the log end offset."),
    to_offset: Optional[int] = typer.Option(None, "--to-offset", help="To this offset."),
    shift_by: Optional[int] = typer.Option(None, "--shift-by",
                                           help="Move the committed offset by N (may be < 0)."),
    to_datetime: Optional[str] = typer.Option(
        None, "--to-datetime",
        help="To the first record at or after YYYY-MM-DDTHH:mm:SS.sss[zone]."),
    by_duration: Optional[str] = typer.Option(
        None, "--by-duration", help="To the first record at or after now minus PnDTnHnMnS."),
    execute: bool = typer.Option(False, "--execute", help="Apply the change (default: dry run)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only show the change (the default)."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """Reset a group's offsets (kafka-consumer-groups.sh --reset-offsets): a dry run unless
    --execute; refused while the group has active members."""
    if execute and dry_run:
        raise CliError("choose one of --execute and --dry-run", code=2)
    if bool(topic) == all_topics:
        raise CliError("choose the partitions: --topic TOPIC[:P,...] or --all-topics", code=2)
    spec = reset_spec(to_earliest=to_earliest, to_latest=to_latest, to_offset=to_offset,
                      shift_by=shift_by, to_datetime=to_datetime, by_duration=by_duration,
                      now_ms=int(time.time() * 1000))
    cluster = _cluster(bootstrap, timeout)
    changes, warnings = reset_plan(cluster, group_id, spec, topic, all_topics)
    if execute:
        execute_reset(cluster, group_id, changes)
    rows = change_rows(group_id, changes)
    if fmt is Format.json:
        output.print_json({"group": group_id, "executed": execute, "partitions": rows,
                           "warnings": warnings})
        return
    for w in warnings:
        output.warn(w)
    output.table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"),
                 [(r["group"], r["topic"], r["partition"], r["current_offset"], r["new_offset"])
                  for r in rows])
    if not execute:
        output.note("Dry run: nothing was changed. Add --execute to apply these offsets.")


@app.command("delete")
def delete(
    group_ids: list[str] = typer.Argument(..., metavar="GROUP..."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Delete groups without members, with all their offsets."""
    cluster = _cluster(bootstrap, timeout)
    results = cluster.delete_groups(group_ids)
    failed = []
    for group_id in group_ids:
        reason = results[group_id]
        if reason is None:
            output.line(f"Deleted consumer group '{group_id}'.")
        else:
            failed.append(f"cannot delete consumer group '{group_id}': {delete_reason(reason)}")
    if failed:
        for message in failed[:-1]:
            output.note(f"brook: {message}")
        raise CliError(failed[-1])


@app.command("delete-offsets")
def delete_offsets(
    group_id: str = typer.Argument(..., metavar="GROUP"),
    topic: list[str] = typer.Option(..., "--topic", help="TOPIC or TOPIC:P[,P...]; repeatable."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """Delete a group's committed offsets of topics its members do not consume (KIP-496)."""
    cluster = _cluster(bootstrap, timeout)
    rows = delete_group_offsets(cluster, group_id, topic)
    if fmt is Format.json:
        output.print_json({"group": group_id, "partitions": rows})
    else:
        output.table(("TOPIC", "PARTITION", "STATUS"),
                     [(r["topic"], r["partition"], "Successful" if r["error"] is None
                       else f"Error: {r['error']}") for r in rows])
    failure = offsets_failure(group_id, rows)
    if failure:
        raise CliError(failure)
