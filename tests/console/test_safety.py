"""The console's logins and CSRF tokens (pure)."""

import base64

import pytest

from brook.console.safety import (AuthFileError, Users, csrf_token, csrf_valid, hash_password,
                                  same_origin)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_a_token_is_valid_only_for_its_nonce_and_secret():
    token = csrf_token(b"s" * 32, "nonce-1")
    assert csrf_valid(b"s" * 32, "nonce-1", token)
    assert not csrf_valid(b"s" * 32, "nonce-2", token)
    assert not csrf_valid(b"x" * 32, "nonce-1", token)
    assert not csrf_valid(b"s" * 32, None, token)
    assert not csrf_valid(b"s" * 32, "nonce-1", None)
    assert not csrf_valid(b"s" * 32, "nonce-1", "")


def test_origin_must_name_the_host_when_given():
    assert same_origin(None, "127.0.0.1:8080")
    assert same_origin("http://127.0.0.1:8080", "127.0.0.1:8080")
    assert not same_origin("http://evil.example", "127.0.0.1:8080")
    assert not same_origin("null", "127.0.0.1:8080")


def test_users_file_with_plain_and_hashed_passwords():
    stored = hash_password("s3cret", iterations=1000)
    users = Users.parse(f"# console users\n\nalice:wonder:land\nbob:{stored}\n")
    assert users.check(basic("alice", "wonder:land")) == "alice"
    assert users.check(basic("bob", "s3cret")) == "bob"
    assert users.check(basic("bob", "s3cret")) == "bob"  # the second time from the cache
    assert users.check(basic("alice", "wrong")) is None
    assert users.check(basic("carol", "x")) is None
    assert users.check("Bearer abc") is None
    assert users.check("Basic !!!") is None
    assert users.check(None) is None


@pytest.mark.parametrize("text", ["", "# nobody\n", "alice\n", ":pw\n", "bob:pbkdf2_sha256$x$y$z\n"])
def test_bad_users_files_are_refused_naming_the_line_not_the_password(text):
    with pytest.raises(AuthFileError) as info:
        Users.parse(text, "users.txt")
    assert "pw" not in str(info.value)


def test_a_users_file_readable_by_others_gets_a_warning(tmp_path):
    path = tmp_path / "users"
    path.write_text("alice:pw\n")
    path.chmod(0o644)
    users, warning = Users.from_file(path)
    assert users and "chmod 600" in warning
    path.chmod(0o600)
    assert Users.from_file(path)[1] is None
    with pytest.raises(AuthFileError):
        Users.from_file(tmp_path / "missing")


def test_the_users_repr_shows_no_password():
    assert "pw" not in repr(Users.parse("alice:pw\n"))
