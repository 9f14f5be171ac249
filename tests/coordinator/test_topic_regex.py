"""Topic regexes of consumer groups are RE2's: what RE2 refuses is refused, what it takes
matches whole topic names."""

import pytest

from brook.coordinator.group.topic_regex import InvalidRegex, compile_regex


@pytest.mark.parametrize("pattern", ["(a)\\1", "(?=x)", "(?!x)", "(?<=x)y", "a++", "(?>a)",
                                     "[", "", "(?P=n)"])
def test_what_re2_refuses_is_refused(pattern):
    with pytest.raises(InvalidRegex):
        compile_regex(pattern)


@pytest.mark.parametrize("pattern, name, matches", [
    ("orders-.*", "orders-eu", True),
    ("orders-.*", "xorders-eu", False),  # whole names, as RE2/J's matches()
    ("orders", "orders-eu", False),
    ("t|u", "u", True),
    ("[[:alpha:]]+", "topic", True),  # POSIX classes, which Python's re lacks
    ("\\pL+", "topic", True),  # Unicode classes
    ("a\\z", "a", True),
    ("(?i)ORDERS", "orders", True),
])
def test_matching_is_of_whole_names(pattern, name, matches):
    assert (compile_regex(pattern).fullmatch(name) is not None) is matches
