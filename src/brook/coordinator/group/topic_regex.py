"""Topic subscriptions by regular expression (ConsumerGroupHeartbeat's SubscribedTopicRegex).

Kafka matches them with RE2/J; brook with Python's ``re``, on the subset both read alike:
literals, classes, ``.``, anchors, alternation, groups (``(?:...)``, ``(?P<name>...)``), greedy
and lazy quantifiers, and flags. What RE2 refuses is refused here too, with
INVALID_REGULAR_EXPRESSION: backreferences, lookahead and lookbehind, atomic groups, possessive
quantifiers, conditionals. RE2's ``\\z`` (end of text) is read as Python's ``\\Z``. A pattern
must match a whole topic name, as RE2/J's ``matches()``.
"""

from __future__ import annotations

import re

__all__ = ["InvalidRegex", "compile_regex"]


class InvalidRegex(ValueError):
    pass


# what RE2 has no way to run in linear time, and so refuses
_REFUSED = [
    (re.compile(r"\\[1-9]"), "backreferences"),
    (re.compile(r"\(\?P=|\\k<"), "backreferences"),
    (re.compile(r"\(\?<?[=!]"), "lookahead and lookbehind"),
    (re.compile(r"\(\?>"), "atomic groups"),
    (re.compile(r"\(\?\("), "conditionals"),
    (re.compile(r"(?<!\\)[*+?}]\+"), "possessive quantifiers"),
]


def compile_regex(pattern: str) -> re.Pattern[str]:
    """The compiled pattern, or ``InvalidRegex`` for one RE2 (or Python) refuses."""
    if not pattern:
        raise InvalidRegex("SubscribedTopicRegex must not be empty.")
    for check, what in _REFUSED:
        if check.search(pattern):
            raise InvalidRegex(f"SubscribedTopicRegex `{pattern}` is not a valid regular "
                               f"expression: RE2 has no {what}.")
    try:
        return re.compile(pattern.replace(r"\z", r"\Z"))
    except re.error as e:
        raise InvalidRegex(f"SubscribedTopicRegex `{pattern}` is not a valid regular "
                           f"expression: {e}.") from None
