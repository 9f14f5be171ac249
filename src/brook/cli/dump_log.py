"""`brook dump-log PATH...`: decode segment files offline (Kafka's kafka-dump-log.sh).

For a `.log`: every batch (Kafka's fields, CRC checked), its records (a control batch's
transaction marker decoded: `endTxnMarker: COMMIT coordinatorEpoch: 3`, as Kafka prints it),
then the checks of the segment's `.index`, `.timeindex` and `.txnindex` next to it. A `.index`,
`.timeindex` or `.txnindex` given itself is listed entry by entry and checked against its `.log`
(a `.txnindex` entry must name an ABORT marker of its producer there). Anything wrong (a bad
CRC, records that do not decode, bytes that are not a whole batch, an index entry the log
disagrees with) is printed where it is found, and the command exits with 1 after the last file.
`--offsets-decoder` and `--transaction-log-decoder` read the records as those of
`__consumer_offsets` and `__transaction_state`.
"""

from __future__ import annotations

import mmap
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

import typer

from ..records import CREATE_TIME
from . import output
from .errors import CliError
from .output import Format, output_option
from .segment_reader import (BatchResult, IndexCheck, InvalidBytes, LogSummary, TxnIndexCheck,
                             base_offset_of, check_offset_index, check_time_index, check_txn_index,
                             scan_log)

PROGRESS_MIN_BYTES = 16 << 20  # smaller segments are read before a bar would be seen
_TS_NAMES = {CREATE_TIME: "CreateTime"}


def show_progress(size: int, fmt: Format, stderr_tty: bool) -> bool:
    return stderr_tty and fmt is Format.table and size >= PROGRESS_MIN_BYTES


def display(data: bytes | None) -> str:
    """A key, value or header as one line of text."""
    if data is None:
        return "null"
    text = data.decode("utf-8", errors="backslashreplace")
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


@dataclass
class FileReport:
    batches: int = 0
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    problems: int = 0


def _map(path: Path):
    """The file's bytes (mmap'ed; b"" for an empty file)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return b""
            return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from exc


def batch_view(b: BatchResult, decoder: ModuleType | None, records: bool) -> dict[str, Any]:
    """A batch's fields, and its records read by `decoder` (a module with `decode(key, value)`
    and `describe(decoded)`: offsets_decoder, transaction_log_decoder) or shown as text."""
    h = b.header
    view: dict[str, Any] = {
        "base_offset": h.base_offset, "last_offset": h.last_offset, "count": h.record_count,
        "base_sequence": h.base_sequence, "last_sequence": h.last_sequence,
        "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
        "partition_leader_epoch": h.partition_leader_epoch,
        "is_transactional": h.is_transactional, "is_control": h.is_control,
        "delete_horizon_ms": h.base_timestamp if h.has_delete_horizon else -1,
        "position": b.position,
        "timestamp_type": _TS_NAMES.get(h.timestamp_type, "LogAppendTime"),
        "max_timestamp": h.max_timestamp, "size": h.size, "magic": h.magic,
        "compression": h.compression.name.lower(), "crc": h.crc, "crc_valid": b.crc_valid,
    }
    if b.error is not None:
        view["error"] = b.error
    if b.marker is not None:
        view["end_txn_marker"] = _marker_view(b.marker)
    if records and b.records is not None:
        view["records"] = [_record_view(r, decoder, b.marker if h.is_control else None)
                           for r in b.records]
    return view


def _marker_view(marker) -> dict[str, Any]:
    return {"type": marker.control_type.name, "coordinator_epoch": marker.coordinator_epoch}


def _record_view(r, decoder: ModuleType | None, marker=None) -> dict[str, Any]:
    view: dict[str, Any] = {
        "offset": r.offset, "timestamp": r.timestamp,
        "key_size": -1 if r.key is None else len(r.key),
        "value_size": -1 if r.value is None else len(r.value),
        "headers": {k: None if v is None else display(v) for k, v in r.headers},
    }
    if marker is not None:
        view["end_txn_marker"] = _marker_view(marker)
    elif decoder is not None:
        view["decoded"] = decoder.decode(r.key, r.value)
    else:
        view["key"] = None if r.key is None else display(r.key)
        view["value"] = None if r.value is None else display(r.value)
    return view


def batch_line(v: dict[str, Any]) -> str:
    """Kafka's batch line (kafka-dump-log.sh's names and order)."""
    b = lambda x: "true" if x else "false"  # noqa: E731
    return (f"baseOffset: {v['base_offset']} lastOffset: {v['last_offset']} count: {v['count']} "
            f"baseSequence: {v['base_sequence']} lastSequence: {v['last_sequence']} "
            f"producerId: {v['producer_id']} producerEpoch: {v['producer_epoch']} "
            f"partitionLeaderEpoch: {v['partition_leader_epoch']} "
            f"isTransactional: {b(v['is_transactional'])} isControl: {b(v['is_control'])} "
            f"deleteHorizonMs: {v['delete_horizon_ms']} position: {v['position']} "
            f"{v['timestamp_type']}: {v['max_timestamp']} size: {v['size']} magic: {v['magic']} "
            f"compresscodec: {v['compression']} crc: {v['crc']} isvalid: {b(v['crc_valid'])}")


def record_line(r: dict[str, Any], timestamp_type: str, decoder: ModuleType | None = None) -> str:
    head = (f"| offset: {r['offset']} {timestamp_type}: {r['timestamp']} "
            f"keySize: {r['key_size']} valueSize: {r['value_size']} "
            f"headerKeys: [{','.join(r['headers'])}]")
    if "end_txn_marker" in r:
        m = r["end_txn_marker"]
        return f"{head} endTxnMarker: {m['type']} coordinatorEpoch: {m['coordinator_epoch']}"
    if "decoded" in r and decoder is not None:
        return f"{head} {decoder.describe(r['decoded'])}"
    return f"{head} key: {r['key'] if r['key'] is not None else 'null'} " \
           f"payload: {r['value'] if r['value'] is not None else 'null'}"


def _emit(fmt: Format, obj: dict[str, Any], text: str | None) -> None:
    if fmt is Format.json:
        output.json_line(obj)
    elif text is not None:
        output.line(text)


def dump_segment_log(path: Path, fmt: Format, records: bool, decoder: ModuleType | None,
                     progress: Callable[[int], None] | None = None) -> FileReport:
    report = FileReport()
    base = base_offset_of(path.name)
    _emit(fmt, {"type": "file", "path": str(path), "base_offset": base},
          f"Dumping {path}\nLog starting offset: {base if base is not None else '?'}")
    buf = _map(path)
    summary = LogSummary()
    try:
        for item in scan_log(buf, decode=records or decoder is not None):
            if isinstance(item, InvalidBytes):
                report.problems += 1
                _emit(fmt, {"type": "invalid_bytes", "position": item.position,
                            "size": item.size, "reason": item.reason},
                      f"Found {item.size} invalid bytes at position {item.position} of "
                      f"{path.name}: {item.reason}")
                break
            _account(report, item, summary)
            view = batch_view(item, decoder, records)
            _emit(fmt, {"type": "batch", **view}, None)
            if fmt is Format.table:
                output.line(batch_line(view))
                if item.error is not None:
                    output.line(f"  records cannot be decoded: {item.error}")
                for r in view.get("records", []):
                    output.line(record_line(r, view["timestamp_type"], decoder))
            if progress:
                progress(item.header.size)
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()
    for suffix, checker, label in ((".index", check_offset_index, "Offset index"),
                                   (".timeindex", check_time_index, "Time index")):
        sibling = path.with_suffix(suffix)
        if sibling.exists() and base is not None:
            check = checker(_read(sibling), base, summary)
            report.problems += _report_index(fmt, sibling, label, check, entries=False)
    sibling = path.with_suffix(".txnindex")
    if sibling.exists() and base is not None:
        check = check_txn_index(_read(sibling), base, summary)
        report.problems += _report_txn_index(fmt, sibling, check, entries=False)
    _emit(fmt, {"type": "summary", "path": str(path), "batches": report.batches,
                "records": report.records, "first_offset": report.first_offset,
                "last_offset": report.last_offset, "problems": report.problems},
          f"Summary: {report.batches} batches, {report.records} records"
          + (f", offsets {report.first_offset}-{report.last_offset}"
             if report.first_offset is not None else "")
          + ("; no problems" if not report.problems else f"; {report.problems} problem(s)"))
    return report


def _account(report: FileReport, item: BatchResult, summary: LogSummary) -> None:
    summary.add(item.position, item.header, item.marker)
    report.batches += 1
    report.records += item.header.record_count
    if report.first_offset is None:
        report.first_offset = item.header.base_offset
    report.last_offset = item.header.last_offset
    if not item.crc_valid:
        report.problems += 1
    if item.error is not None:
        report.problems += 1


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _report_index(fmt: Format, path: Path, label: str, check: IndexCheck, entries: bool) -> int:
    kind = "offset_index" if path.suffix == ".index" else "time_index"
    _emit(fmt, {"type": kind, "path": str(path), "entries": len(check.entries),
                "problems": check.problems, **({"entry_list": check.entries} if entries else {})},
          None)
    if fmt is Format.table:
        if entries:
            for a, b in check.entries:
                output.line(f"offset: {a} position: {b}" if kind == "offset_index"
                            else f"timestamp: {a} offset: {b}")
        verdict = "consistent with the log" if not check.problems else \
            f"{len(check.problems)} problem(s)"
        output.line(f"{label} {path.name}: {len(check.entries)} entries, {verdict}")
        for p in check.problems:
            output.line(f"  {p}")
    return len(check.problems)


def _report_txn_index(fmt: Format, path: Path, check: TxnIndexCheck, entries: bool) -> int:
    _emit(fmt, {"type": "txn_index", "path": str(path), "entries": len(check.entries),
                "problems": check.problems,
                **({"entry_list": [t._asdict() for t in check.entries]} if entries else {})}, None)
    if fmt is Format.table:
        if entries:
            for t in check.entries:  # Kafka's line (kafka-dump-log.sh)
                output.line(f"version: 0 producerId: {t.producer_id} firstOffset: {t.first_offset} "
                            f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}")
        verdict = "consistent with the log" if not check.problems else \
            f"{len(check.problems)} problem(s)"
        output.line(f"Transaction index {path.name}: {len(check.entries)} aborted transactions, "
                    f"{verdict}")
        for p in check.problems:
            output.line(f"  {p}")
    return len(check.problems)


def _summary_of(log_path: Path) -> LogSummary:
    summary = LogSummary()
    buf = _map(log_path)
    try:
        for item in scan_log(buf, decode=False):
            if isinstance(item, InvalidBytes):
                break
            summary.add(item.position, item.header, item.marker)
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()
    return summary


def dump_txn_index(path: Path, fmt: Format) -> FileReport:
    """A `.txnindex` entry by entry, checked against its `.log` when there is one (Kafka's
    dump lists it alone)."""
    base = base_offset_of(path.name)
    log_path = path.with_suffix(".log")
    _emit(fmt, {"type": "file", "path": str(path), "base_offset": base}, f"Dumping {path}")
    summary = _summary_of(log_path) if base is not None and log_path.exists() else None
    check = check_txn_index(_read(path), base if base is not None else -1, summary)
    return FileReport(problems=_report_txn_index(fmt, path, check, entries=True))


def dump_index(path: Path, fmt: Format) -> FileReport:
    base = base_offset_of(path.name)
    log_path = path.with_suffix(".log")
    _emit(fmt, {"type": "file", "path": str(path), "base_offset": base}, f"Dumping {path}")
    if base is None or not log_path.exists():
        raise CliError(f"{path}: no segment {log_path.name} next to it to check it against")
    summary = _summary_of(log_path)
    if path.suffix == ".index":
        check, label = check_offset_index(_read(path), base, summary), "Offset index"
    else:
        check, label = check_time_index(_read(path), base, summary), "Time index"
    return FileReport(problems=_report_index(fmt, path, label, check, entries=True))


@contextmanager
def _progress(path: Path, fmt: Format) -> Iterator[Callable[[int], None] | None]:
    size = path.stat().st_size
    if not show_progress(size, fmt, output.stderr_is_terminal()):
        yield None
        return
    with output.progress() as bar:
        task = bar.add_task(f"reading {path.name}", total=size)
        yield lambda n: bar.advance(task, n)


def _directory_message(path: Path) -> str:
    """What to say for a directory given as PATH: the files in it that can be dumped."""
    try:
        names = sorted(p.name for p in path.iterdir()
                       if p.suffix in (".log", ".index", ".timeindex", ".txnindex") and p.is_file())
    except OSError as exc:
        return f"{path}: is a directory ({exc.strerror or exc})"
    if not names:
        return f"{path}: is a directory, with no .log, .index, .timeindex or .txnindex file in it"
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    example = next((n for n in names if n.endswith(".log")), names[0])
    return f"{path}: is a directory; give files in it, e.g. {path / example} (it has {shown})"


def _decoder(offsets: bool, transaction_log: bool) -> ModuleType | None:
    if offsets:
        from . import offsets_decoder
        return offsets_decoder
    if transaction_log:
        from . import transaction_log_decoder
        return transaction_log_decoder
    return None


def dump_log(
    paths: list[Path] = typer.Argument(..., metavar="PATH...",
                                       help=".log, .index, .timeindex or .txnindex files."),
    offsets_decoder: bool = typer.Option(
        False, "--offsets-decoder", help="Decode records as __consumer_offsets commits and "
                                         "group metadata."),
    transaction_log_decoder: bool = typer.Option(
        False, "--transaction-log-decoder", help="Decode records as __transaction_state "
                                                 "transactional id states."),
    records: bool = typer.Option(True, "--records/--no-records",
                                 help="Print each record, not only each batch."),
    fmt: Format = output_option(),
) -> None:
    """Decode segment files offline: batches, records (transaction markers too), CRCs and
    index consistency, aborted transactions (JSON lines with --output json)."""
    if offsets_decoder and transaction_log_decoder:
        raise CliError("--offsets-decoder and --transaction-log-decoder read records two ways: "
                       "give one", code=2)
    decoder = _decoder(offsets_decoder, transaction_log_decoder)
    problems = 0
    for i, path in enumerate(paths):
        if path.is_dir():
            raise CliError(_directory_message(path), code=2)
        if not path.is_file():
            raise CliError(f"{path}: no such file")
        if i and fmt is Format.table:
            output.line()
        if path.suffix == ".log":
            with _progress(path, fmt) as progress:
                problems += dump_segment_log(path, fmt, records, decoder, progress).problems
        elif path.suffix in (".index", ".timeindex"):
            problems += dump_index(path, fmt).problems
        elif path.suffix == ".txnindex":
            problems += dump_txn_index(path, fmt).problems
        else:
            raise CliError(f"{path}: not a .log, .index, .timeindex or .txnindex file", code=2)
    if problems:
        raise CliError(f"{problems} problem(s) found in {len(paths)} file(s)")
