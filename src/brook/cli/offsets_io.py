"""The files of `brook offsets export` and `brook offsets import` (docs/cli.md defines them).

Three formats are read, recognised by their content:

- brook's own JSON (what `export` writes): an object with `"format": "brook-offsets"`, the
  `group` and a list of `offsets` (`topic`, `partition`, `offset`, optional `metadata`).
- A ZooKeeper JSON dump: an object of znode paths to their data. The znodes
  `/consumers/<group>/offsets/<topic>/<partition>`, where Kafka's ZooKeeper-based consumers kept
  the next offset to read, hold the offset as a decimal string (or a JSON integer).
- A ZooKeeper text dump: one znode per line, its path, then spaces, tabs or `=`, then the
  offset; blank lines and lines starting with `#` are skipped.

Znodes of other paths (`/consumers/<group>/ids/...`, `/brokers/...`, the parents of offsets)
are skipped in both dumps, so a dump of a whole ZooKeeper tree can be imported as it is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import CliError

TP = tuple[str, int]
FORMAT_NAME = "brook-offsets"
FORMAT_VERSION = 1

_ZK_OFFSET = re.compile(r"/consumers/([^/]+)/offsets/([^/]+)/([^/]+)")
_TEXT_LINE = re.compile(r"(\S+?)\s*(?:=|\s)\s*(\S+)")


@dataclass(frozen=True)
class Offset:
    offset: int
    metadata: str = ""


Offsets = dict[str, dict[TP, Offset]]  # group -> partition -> offset


def export_document(group: str, offsets: Mapping[TP, tuple[int, str]]) -> dict[str, Any]:
    """brook's JSON document of a group's committed offsets."""
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "group": group,
        "offsets": [{"topic": t, "partition": p, "offset": o, "metadata": m}
                    for (t, p), (o, m) in sorted(offsets.items())],
    }


def parse(text: str, source: str = "the file") -> Offsets:
    """The offsets in `text`, in whichever of the three formats it is."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CliError(f"{source} is not valid JSON: {exc}", code=2) from None
        if doc.get("format") == FORMAT_NAME:
            out = parse_brook(doc, source)
        else:
            out = parse_zookeeper_json(doc, source)
    else:
        out = parse_zookeeper_text(text, source)
    if not any(out.values()):
        raise CliError(f"{source} holds no offsets", code=2)
    return out


def parse_brook(doc: dict[str, Any], source: str) -> Offsets:
    if doc.get("version") != FORMAT_VERSION:
        raise CliError(f"{source}: unsupported {FORMAT_NAME} version {doc.get('version')!r}",
                       code=2)
    group = doc.get("group")
    if not isinstance(group, str) or not group:
        raise CliError(f"{source}: missing group", code=2)
    offsets: dict[TP, Offset] = {}
    for i, entry in enumerate(doc.get("offsets") or []):
        try:
            topic, partition, offset = entry["topic"], entry["partition"], entry["offset"]
            metadata = entry.get("metadata") or ""
        except (TypeError, KeyError):
            raise CliError(f"{source}: offsets[{i}] needs topic, partition and offset",
                           code=2) from None
        if not (isinstance(topic, str) and topic and _is_int(partition) and _is_int(offset)
                and isinstance(metadata, str)):
            raise CliError(f"{source}: offsets[{i}] has an invalid topic, partition or offset",
                           code=2)
        _put(offsets, (topic, partition), Offset(offset, metadata), f"{source}: offsets[{i}]")
    return {group: offsets}


def parse_zookeeper_json(doc: Any, source: str) -> Offsets:
    if not isinstance(doc, dict):
        raise CliError(f"{source}: a ZooKeeper JSON dump is an object of znode paths", code=2)
    out: Offsets = {}
    for path, data in doc.items():
        _zookeeper_znode(out, str(path), data, f"{source}: {path}")
    return out


def parse_zookeeper_text(text: str, source: str) -> Offsets:
    out: Offsets = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _TEXT_LINE.fullmatch(line)
        if not m:
            if _ZK_OFFSET.fullmatch(line.split()[0].rstrip("=")):
                raise CliError(f"{source}:{n}: expected '<path> <offset>'", code=2)
            continue  # a znode without data, e.g. a parent
        _zookeeper_znode(out, m.group(1), m.group(2), f"{source}:{n}")
    return out


def _zookeeper_znode(out: Offsets, path: str, data: Any, where: str) -> None:
    m = _ZK_OFFSET.fullmatch(path.rstrip("/"))
    if not m:
        return
    group, topic, partition_text = m.groups()
    try:
        partition = int(partition_text)
    except ValueError:
        raise CliError(f"{where}: partition {partition_text!r} is not a number", code=2) from None
    if isinstance(data, bool) or not isinstance(data, (int, str)):
        raise CliError(f"{where}: the offset must be a number", code=2)
    try:
        offset = int(data)
    except ValueError:
        raise CliError(f"{where}: offset {data!r} is not a number", code=2) from None
    if offset < 0 or partition < 0:
        raise CliError(f"{where}: negative offset or partition", code=2)
    _put(out.setdefault(group, {}), (topic, partition), Offset(offset), where)


def _put(offsets: dict[TP, Offset], tp: TP, value: Offset, where: str) -> None:
    if tp in offsets:
        raise CliError(f"{where}: {tp[0]}-{tp[1]} is given twice", code=2)
    offsets[tp] = value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
