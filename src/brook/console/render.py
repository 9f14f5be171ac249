"""How the console shows bytes and numbers, pure: a record's key, value and headers as text,
pretty-printed JSON or a hex dump; the filters of the message browser; sizes and times."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

FORMATS = ("auto", "text", "json", "hex")
HEX_WIDTH = 16
MAX_SHOWN_BYTES = 64 * 1024  # a larger value is cut where shown (the page says so)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Kafka's rule for topic names: these characters, 249 at most (and not "." or "..")
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def topic_name_problem(name: str) -> str | None:
    """Why `name` cannot be a topic's name, or None when it can."""
    if not name:
        return "a topic name is empty"
    if name in (".", ".."):
        return f"'{name}' cannot be a topic name"
    if not _TOPIC.fullmatch(name):
        return (f"{name!r} is not a topic name: use letters, digits, '.', '_' and '-', "
                "249 at most")
    return None


def _as_text(data: bytes) -> str | None:
    """The bytes as text when they are UTF-8 without control characters (tabs and newlines
    allowed), else None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if _CONTROL.search(text) else text


def _as_json(text: str | None) -> str | None:
    if text is None or not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return json.dumps(value, indent=2, ensure_ascii=False)


def hex_dump(data: bytes) -> str:
    """Offset, 16 bytes in hex, and their printable ASCII, a line each."""
    lines = []
    for i in range(0, len(data), HEX_WIDTH):
        chunk = data[i:i + HEX_WIDTH]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{i:08x}  {hexes:<{HEX_WIDTH * 3 - 1}}  {ascii_}")
    return "\n".join(lines)


def show_bytes(data: bytes | None, fmt: str = "auto") -> dict[str, Any]:
    """How a key or value is shown: {"kind": null|text|json|hex, "text", "size", "cut"}.

    auto: a JSON object or array pretty-printed, other UTF-8 text as it is, anything else as a
    hex dump. json: any JSON (a bare string or number too) pretty-printed, the rest as auto.
    text: as UTF-8, undecodable bytes as \\x escapes. hex: always a hex dump.
    """
    if data is None:
        return {"kind": "null", "text": "null", "size": -1, "cut": False}
    size = len(data)
    cut = size > MAX_SHOWN_BYTES
    shown = data[:MAX_SHOWN_BYTES] if cut else data
    if fmt == "hex":
        return {"kind": "hex", "text": hex_dump(shown), "size": size, "cut": cut}
    text = _as_text(shown)
    if fmt == "text":
        return {"kind": "text", "text": shown.decode("utf-8", errors="backslashreplace"),
                "size": size, "cut": cut}
    pretty = None if cut else _as_json(text)
    structured = text is not None and text.lstrip()[:1] in ("{", "[")
    if pretty is not None and (fmt == "json" or structured):
        return {"kind": "json", "text": pretty, "size": size, "cut": cut}
    if text is not None:
        return {"kind": "text", "text": text, "size": size, "cut": cut}
    return {"kind": "hex", "text": hex_dump(shown), "size": size, "cut": cut}


def matches(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]],
            key_filter: str, contains: str) -> bool:
    """The browser's filters: the key contains `key_filter`, and the key, value or a header
    contains `contains` (each as UTF-8 bytes, case-sensitive; empty filters match all)."""
    if key_filter:
        if key is None or key_filter.encode() not in key:
            return False
    if contains:
        needle = contains.encode()
        if not ((key is not None and needle in key) or (value is not None and needle in value)
                or any(needle in k.encode() or (v is not None and needle in v)
                       for k, v in headers)):
            return False
    return True


def timestamp_text(ms: int | None) -> str:
    """A record timestamp as UTC ISO 8601 with milliseconds; `-` for none."""
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def parse_time(text: str) -> int:
    """Milliseconds since the epoch of `YYYY-MM-DDTHH:MM[:SS[.sss]]` (UTC unless a zone is
    given, as the page's datetime-local field sends it) or of a number of milliseconds."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not a time: give YYYY-MM-DDTHH:MM[:SS] (UTC) or "
                         "milliseconds since the epoch") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


def size_text(n: int | None) -> str:
    if n is None or n < 0:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def rate_text(value: float | None, unit: str = "") -> str:
    """A rate per second for a person: 1.2 MiB/s (unit "B"), 35/s, 0.4/s; "-" for none."""
    if value is None:
        return "-"
    if unit == "B":
        return f"{size_text(int(round(value)))}/s"
    return f"{value:.1f}/s" if value < 10 else f"{value:,.0f}/s"
