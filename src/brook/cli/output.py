"""What commands print: rich tables for people, JSON for scripts, notes on stderr.

Tables have Kafka's upper-case column names and no borders, so they read like Kafka's tools and
stay easy to `grep`/`awk`; an absent value is `-`, as Kafka prints it. When stdout is not a
terminal, tables are as wide as their content instead of the terminal's 80 columns. No line
ends in spaces.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Any, Iterable, Sequence

import typer

MISSING = "-"


class Format(str, Enum):
    table = "table"
    json = "json"


def output_option() -> Any:
    return typer.Option(Format.table, "--output", help="table (for people) or json (for scripts).")


def _console(file) -> "Console":  # noqa: F821 - rich is imported lazily (see app.py)
    from rich.console import Console

    tty = file.isatty()
    return Console(file=file, markup=False, highlight=False, emoji=False,
                   width=None if tty else 100_000, no_color=not tty)


def cell(value: Any) -> str:
    return MISSING if value is None else str(value)


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None) -> None:
    """Print rows under `columns`; None cells show as `-`."""
    from rich import box
    from rich.table import Table

    t = Table(*columns, box=box.SIMPLE_HEAD if sys.stdout.isatty() else None, title=title,
              show_edge=False, pad_edge=False, header_style="bold", title_justify="left")
    for col in t.columns:
        col.no_wrap = True
    for row in rows:
        t.add_row(*(cell(v) for v in row))
    console = _console(sys.stdout)
    with console.capture() as captured:
        console.print(t)
    # rich pads the last column to its width: no line ends in spaces
    sys.stdout.write("".join(ln.rstrip(" ") + "\n" for ln in captured.get().splitlines()))


def line(text: str = "") -> None:
    """A line of plain output on stdout."""
    sys.stdout.write(text + "\n")


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def json_line(value: Any) -> None:
    """One JSON document per line (streams: consume, dump-log)."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n")


def note(text: str) -> None:
    """Something the user should read that is not the command's output (stderr)."""
    sys.stderr.write(text + "\n")


def warn(text: str) -> None:
    note(f"Warning: {text}")


def stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def progress():
    """A rich progress bar on stderr for long reads (bytes done / total, rate, time left)."""
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn,
                               TimeRemainingColumn, TransferSpeedColumn)

    return Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                    TransferSpeedColumn(), TimeRemainingColumn(),
                    console=Console(file=sys.stderr), transient=True)
