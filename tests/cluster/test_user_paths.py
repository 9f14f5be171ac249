"""/config/users/<user>: user names sanitized as Kafka's Sanitizer does (URL-encoding)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brook.cluster.zk_paths import desanitize, sanitize, user_config_path


@pytest.mark.parametrize("user,path", [
    ("alice", "alice"), ("a.b-c_d", "a.b-c_d"), ("user@example.com", "user%40example.com"),
    ("a b", "a%20b"), ("*", "%2A"), ("a+b", "a%2Bb"), ("~x/y", "%7Ex%2Fy"), ("é", "%C3%A9"),
])
def test_kafkas_sanitized_names(user, path):
    assert user_config_path(user) == f"/config/users/{path}"


@given(st.text(min_size=1, max_size=30))
def test_any_name_round_trips_and_makes_one_path_segment(user):
    s = sanitize(user)
    assert "/" not in s and desanitize(s) == user
