"""Kafka's JAAS configuration syntax (``sasl.jaas.config`` values)::

    <loginModuleClass> <controlFlag> (<optionName>=<optionValue>)*;

Options are words or quoted strings ("..." or '...', backslash escapes the next character);
``//`` and ``/* */`` comments are skipped, as Java's StreamTokenizer does for Kafka. Errors
use Kafka's messages. Unquoted values may also start with a digit (Kafka would read those as
numbers and refuse them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class LoginModule:
    name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _word_char(c: str) -> bool:
    return c.isalnum() or c in "-_$." or ord(c) >= 128


def tokenize(text: str) -> list[tuple[str, str]]:
    """(kind, value) pairs: kind "word", "quoted" or the ordinary character itself."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c <= " ":
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c in "\"'":
            i += 1
            chars = []
            while i < n and text[i] != c and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                chars.append(text[i])
                i += 1
            i += 1  # the closing quote (an unclosed one ends at the line's end, as Java's)
            out.append(("quoted", "".join(chars)))
        elif _word_char(c):
            start = i
            while i < n and _word_char(text[i]):
                i += 1
            out.append(("word", text[start:i]))
        else:
            out.append((c, c))
            i += 1
    return out


def parse(text: str) -> list[LoginModule]:
    """Every login module of a JAAS config value; JaasError with Kafka's message if bad."""
    tokens = tokenize(text)
    modules: list[LoginModule] = []
    i = 0

    def value(k: int) -> str | None:
        return tokens[k][1] if k < len(tokens) and tokens[k][0] in ("word", "quoted") else None

    while i < len(tokens):
        name = value(i)
        if name is None:
            raise JaasError("Login module not specified in JAAS config")
        i += 1
        if i >= len(tokens):
            raise JaasError("Login module control flag not specified in JAAS config")
        flag = value(i)
        if flag is None:
            raise JaasError("Login module control flag is not available in the JAAS config")
        if flag.lower() not in FLAGS:
            raise JaasError(f"Invalid login module control flag '{flag}' in JAAS config")
        i += 1
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            key = tokens[i][1]
            if i + 2 >= len(tokens) or tokens[i + 1][0] != "=" or value(i + 2) is None:
                raise JaasError(f"Value not specified for key '{key}' in JAAS config")
            options[key] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise JaasError("JAAS config entry not terminated by semi-colon")
        i += 1  # the ';'
        modules.append(LoginModule(name, flag.lower(), options))
    if not modules:
        raise JaasError("Login module not specified in JAAS config")
    return modules


def parse_one(text: str) -> LoginModule:
    """A ``sasl.jaas.config`` value, which Kafka allows one login module in."""
    modules = parse(text)
    if len(modules) != 1:
        raise JaasError(f"JAAS config property contains {len(modules)} login modules, should be 1 "
                        "module")
    return modules[0]
