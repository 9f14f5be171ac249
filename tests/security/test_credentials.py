"""AlterUserScramCredentials and DescribeUserScramCredentials: Kafka's checks; PLAIN."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from brook.broker.metadata import MetadataStore
from brook.security.credentials import Deletion, Upsertion, alter, describe, lookup
from brook.security.errors import SaslError
from brook.security.plain import PlainServer
from brook.security.scram import SHA_256, SHA_512, credential_from_salted, salted_password


def upsert(user, mechanism=1, iterations=4096, salt=b"salt", password="pw"):
    m = SHA_256 if mechanism == 1 else SHA_512
    return Upsertion(user, mechanism, iterations, salt, salted_password(m, password, salt, iterations)
                     if mechanism in (1, 2) else b"x")


def test_an_upsertion_stores_keys_from_the_salted_password_never_the_password():
    results, changes = alter({}, [], [upsert("alice", 2, 8192)])
    assert results == [("alice", ErrorCode.none, None)]
    text = changes["alice"]["SCRAM-SHA-512"]
    assert "pw" not in text and text.endswith("iterations=8192")
    expected = credential_from_salted(SHA_512, salted_password(SHA_512, "pw", b"salt", 8192), b"salt", 8192)
    assert lookup(changes, "alice", SHA_512) == expected
    assert lookup(changes, "alice", SHA_256) is None


@pytest.mark.parametrize("op,code,message", [
    (upsert("a", iterations=4095), ErrorCode.unacceptable_credential, "Too few iterations"),
    (upsert("a", iterations=16385), ErrorCode.unacceptable_credential, "Too many iterations"),
    (upsert("", 1), ErrorCode.unacceptable_credential, "Username must not be empty"),
    (upsert("a", 3), ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
    (Upsertion("a", 1, 4096, b"", b"x"), ErrorCode.unacceptable_credential,
     "Salt and salted password must not be empty"),
    (Deletion("a", 1), ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
])
def test_refusals(op, code, message):
    deletions = [op] if isinstance(op, Deletion) else []
    upsertions = [op] if isinstance(op, Upsertion) else []
    results, changes = alter({}, deletions, upsertions)
    assert results == [(op.user, code, message)] and changes == {}


def test_a_user_altered_twice_for_one_mechanism_fails_whole_others_go_through():
    users = {"b": {"SCRAM-SHA-256": "x"}}
    results, changes = alter(users, [Deletion("b", 1)], [upsert("a"), upsert("a"), upsert("c", 2)])
    assert results == [("b", ErrorCode.none, None),
                       ("a", ErrorCode.duplicate_resource,
                        "A user credential cannot be altered twice in the same request"),
                       ("c", ErrorCode.none, None)]
    assert changes["b"] == {} and set(changes) == {"b", "c"}


def test_describe_every_user_named_unknown_and_repeated():
    _, users = alter({}, [], [upsert("a", 1), upsert("a", 2, 5000), upsert("b", 2)])
    assert describe(users, None) == [("a", ErrorCode.none, None, [(1, 4096), (2, 5000)]),
                                     ("b", ErrorCode.none, None, [(2, 4096)])]
    assert describe(users, ["b", "x", "b"]) == [
        ("b", ErrorCode.duplicate_resource,
         "Cannot describe SCRAM credentials for the same user twice in a single request", []),
        ("x", ErrorCode.resource_not_found, "Attempt to describe a user credential that does not exist: x", [])]


def test_credentials_persist_in_the_metadata_across_a_reload_and_a_fold(tmp_path):
    store = MetadataStore((str(tmp_path),), 1)
    store.load()
    _, changes = alter({}, [], [upsert("alice", 2)])
    store.set_user_scram("alice", changes["alice"])
    store.set_user_scram("gone", changes["alice"])
    store.set_user_scram("gone", {})
    store.close()
    again = MetadataStore((str(tmp_path),), 1)  # replays the journal, then folds it in
    again.load()
    assert again.user_scram == {"alice": changes["alice"]}
    again.close()
    third = MetadataStore((str(tmp_path),), 1)  # from the snapshot alone
    third.load()
    assert third.user_scram == {"alice": changes["alice"]}
    third.close()


def test_plain():
    assert PlainServer({"alice": "s"}).evaluate(b"\0alice\0s") == b""
    for token, message in [(b"\0alice\0wrong", "Invalid username or password"),
                           (b"\0bob\0s", "Invalid username or password"),
                           (b"\0\0s", "username not specified"), (b"\0alice\0", "password not specified"),
                           (b"alice\0s", "expected 3 tokens, got 2"),
                           (b"x\0alice\0s", "authorization id that is different")]:
        with pytest.raises(SaslError, match=message) as info:
            PlainServer({"alice": "s"}).evaluate(token)
        assert info.value.public
    server = PlainServer({"alice": "s"})
    server.evaluate(b"alice\0alice\0s")
    assert server.complete and server.user == "alice"
    with pytest.raises(SaslError, match="state COMPLETE"):
        server.evaluate(b"\0alice\0s")
