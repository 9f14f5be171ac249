"""Topic subscriptions by regular expression (ConsumerGroupHeartbeat's SubscribedTopicRegex).

Kafka compiles them with RE2/J and matches whole topic names (``Matcher.matches``); brook with
RE2 itself (the ``google-re2`` bindings), so the syntax is RE2's and what RE2 refuses
(backreferences, lookaround, atomic groups, possessive quantifiers, ...) is refused with
INVALID_REGULAR_EXPRESSION. RE2/J follows RE2's syntax; the one difference Kafka users could
meet is RE2/J's Java-style Unicode classes (``\\p{javaLowerCase}``), which RE2 refuses.
"""

from __future__ import annotations

import re2

__all__ = ["InvalidRegex", "compile_regex"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is an answer to the member, not a log line


class InvalidRegex(ValueError):
    pass


def compile_regex(pattern: str):
    """The compiled pattern (``fullmatch`` matches a whole topic name), or ``InvalidRegex``."""
    if not pattern:
        raise InvalidRegex("SubscribedTopicRegex must not be empty.")
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as e:
        reason = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
        raise InvalidRegex(f"SubscribedTopicRegex `{pattern}` is not a valid regular "
                           f"expression: {reason}.") from None
