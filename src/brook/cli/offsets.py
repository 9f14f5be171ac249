"""`brook offsets export GROUP` and `brook offsets import FILE`: a group's committed offsets to
and from a file, including the ZooKeeper layout of Kafka's old consumers (offsets_io.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from . import output
from .errors import CliError
from .groups import require_inactive
from .offsets_io import Offsets, export_document, parse
from .options import bootstrap_option, timeout_option
from .output import Format, output_option
from .reset import clamp

app = typer.Typer(no_args_is_help=True, help="Export and import committed offsets.")


@app.command("export")
def export(
    group_id: str = typer.Argument(..., metavar="GROUP"),
    file: Optional[Path] = typer.Option(None, "--file", "-f",
                                        help="Write here instead of stdout."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Write a group's committed offsets as JSON (brook-offsets format)."""
    from .client import Cluster

    cluster = Cluster(bootstrap, timeout)
    committed = cluster.committed(group_id)
    if not committed and not cluster.group(group_id).exists:
        raise CliError(f"consumer group '{group_id}' does not exist")
    text = json.dumps(export_document(group_id, committed), indent=2) + "\n"
    if file is None:
        sys.stdout.write(text)
        return
    try:
        file.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write {file}: {exc.strerror or exc}") from exc
    output.note(f"Exported {len(committed)} offsets of group '{group_id}' to {file}.")


def select(data: Offsets, group: str | None, to_group: str | None, source: str) -> Offsets:
    """The groups of the file to import (`--group`), renamed by `--to-group`."""
    if group is not None:
        if group not in data:
            known = ", ".join(sorted(data)) or "none"
            raise CliError(f"{source} has no offsets of group '{group}' (it has: {known})", code=2)
        data = {group: data[group]}
    if to_group is not None:
        if len(data) != 1:
            raise CliError(f"{source} has offsets of {len(data)} groups; choose one with --group "
                           "to import it under --to-group", code=2)
        data = {to_group: next(iter(data.values()))}
    return data


def _read(file: str) -> tuple[str, str]:
    if file == "-":
        return sys.stdin.read(), "stdin"
    try:
        return Path(file).read_text(encoding="utf-8"), file
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {file}: {getattr(exc, 'strerror', None) or exc}") from exc


@app.command("import")
def import_(
    file: str = typer.Argument(..., metavar="FILE", help="The offsets file; - reads stdin."),
    group: Optional[str] = typer.Option(None, "--group", help="Only this group of the file."),
    to_group: Optional[str] = typer.Option(None, "--to-group",
                                           help="Commit the offsets for this group instead."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be committed."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """Commit the offsets in FILE (brook's export, or a ZooKeeper dump of
    /consumers/GROUP/offsets/TOPIC/PARTITION); refused while a group has active members."""
    from .client import Cluster

    text, source = _read(file)
    data = select(parse(text, source), group, to_group, source)
    cluster = Cluster(bootstrap, timeout)
    for group_id in data:
        require_inactive(cluster.group(group_id), "import offsets")
    all_tps = [tp for offsets in data.values() for tp in offsets]
    cluster.check_partitions(all_tps)
    log_start, log_end = cluster.log_start_end(all_tps)
    rows, warnings = [], []
    for group_id, offsets in sorted(data.items()):
        current = cluster.committed(group_id)
        new = {tp: clamp(tp, o.offset, log_start[tp], log_end[tp], warnings)
               for tp, o in sorted(offsets.items())}
        if not dry_run:
            cluster.commit(group_id, new, {tp: o.metadata for tp, o in offsets.items()})
        rows += [{"group": group_id, "topic": t, "partition": p,
                  "current_offset": current[(t, p)][0] if (t, p) in current else None,
                  "new_offset": o} for (t, p), o in new.items()]
    if fmt is Format.json:
        output.print_json({"executed": not dry_run, "partitions": rows, "warnings": warnings})
        return
    for w in warnings:
        output.warn(w)
    output.table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"),
                 [(r["group"], r["topic"], r["partition"], r["current_offset"], r["new_offset"])
                  for r in rows])
    if dry_run:
        output.note("Dry run: nothing was changed.")
    else:
        output.note(f"Imported {len(rows)} offsets of {len(data)} group(s) from {source}.")
