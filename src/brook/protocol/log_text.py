"""Text taken from the wire, made fit for a log line: escaped and cut short.

A client chooses what it sends (a user name, a mechanism, a malformed message); logged as it
came, one failed login could write 400 KB, or forge lines with newlines and control
characters. Every log line that quotes the wire quotes it through `loggable`."""

from __future__ import annotations

LIMIT = 200


def loggable(text: object, limit: int = LIMIT) -> str:
    """`text` with non-printable characters escaped (as Python escapes them), cut after
    `limit` characters with a note of how many more there were."""
    s = str(text)
    cut = s[:limit]
    if not cut.isprintable():
        cut = cut.encode("unicode_escape").decode("ascii")
    if len(s) > limit:
        cut += f"... ({len(s) - limit} more characters)"
    return cut
