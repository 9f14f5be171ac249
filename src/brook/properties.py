"""Java `.properties` files, as Kafka's server.properties are written."""

from __future__ import annotations


def parse_properties(text: str) -> dict[str, str]:
    """Parse `key=value`, `key: value` or `key value` lines; `#`/`!` comments; a trailing
    backslash continues a line; `\\t \\n \\uXXXX` and escaped separators are unescaped."""
    out: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        key, value = _split(line)
        out[_unescape(key)] = _unescape(value)
    return out


def _split(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=: \t\f":
            key = line[:i]
            rest = line[i:].lstrip(" \t\f")
            if rest[:1] in ("=", ":") and c in " \t\f":
                rest = rest[1:].lstrip(" \t\f")
            elif c in "=:":
                rest = line[i + 1:].lstrip(" \t\f")
            return key, rest
        i += 1
    return line, ""


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and i + 6 <= len(s):
                try:
                    out.append(chr(int(s[i + 2:i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)
