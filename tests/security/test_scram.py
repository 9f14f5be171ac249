"""SCRAM's server side: RFC 7677's exchange, Kafka's message grammar and stored credential,
and failures that end the exchange for good."""

from __future__ import annotations

import base64
import re
import secrets

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brook.security import scram
from brook.security.errors import SaslError
from brook.security.scram import (SHA_256, SHA_512, ClientFirst, ClientFinal, Credential,
                                  ScramServer, new_credential)
from tests.support.examples import examples
from tests.support.sasl_wire import ScramClient

# RFC 7677, section 3
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_server(users=None) -> ScramServer:
    users = users if users is not None else {"user": new_credential(SHA_256, "pencil", 4096, RFC_SALT)}
    return ScramServer(SHA_256, users.get, new_nonce=lambda: RFC_SERVER_NONCE)


def test_rfc_7677_exchange():
    server = rfc_server()
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not server.complete
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.user == "user"


def test_a_message_after_completion_fails():
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    server.evaluate(RFC_CLIENT_FINAL)
    with pytest.raises(SaslError, match="Unexpected challenge in Sasl server state COMPLETE"):
        server.evaluate(RFC_CLIENT_FINAL)


def test_the_final_message_first_fails_and_the_exchange_stays_failed():
    server = rfc_server()
    with pytest.raises(SaslError, match="Invalid SCRAM client first message format"):
        server.evaluate(RFC_CLIENT_FINAL)
    with pytest.raises(SaslError, match="state FAILED"):
        server.evaluate(RFC_CLIENT_FIRST)


def test_a_final_message_replayed_against_a_new_server_nonce_fails():
    server = ScramServer(SHA_256, {"user": new_credential(SHA_256, "pencil", 4096, RFC_SALT)}.get)
    server.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(SaslError, match="Invalid client nonce"):
        server.evaluate(RFC_CLIENT_FINAL)


def test_a_wrong_proof_fails_with_a_private_message():
    server = rfc_server({"user": new_credential(SHA_256, "not-pencil", 4096, RFC_SALT)})
    server.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(SaslError, match="Invalid client credentials") as info:
        server.evaluate(RFC_CLIENT_FINAL)
    assert not info.value.public


def test_an_unknown_user_is_challenged_like_a_known_one_and_fails_privately_at_the_proof():
    known = rfc_server({"user": new_credential(SHA_256, "pencil", 4096, secrets.token_bytes(32))})
    known_first = known.evaluate(RFC_CLIENT_FIRST).decode()
    unknown_first = rfc_server({}).evaluate(RFC_CLIENT_FIRST).decode()
    shape = re.compile(r"r=[^,]+,s=([A-Za-z0-9+/=]{44}),i=4096")
    assert shape.fullmatch(known_first) and shape.fullmatch(unknown_first)
    # the same unknown user gets the same salt every time; another unknown user another one
    again = rfc_server({}).evaluate(RFC_CLIENT_FIRST).decode()
    assert shape.fullmatch(again)[1] == shape.fullmatch(unknown_first)[1]
    other = rfc_server({}).evaluate(b"n,,n=someone-else,r=abc").decode()
    assert shape.fullmatch(other)[1] != shape.fullmatch(unknown_first)[1]
    server = rfc_server({})
    server.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(SaslError, match="Invalid user credentials") as info:
        server.evaluate(RFC_CLIENT_FINAL)
    assert not info.value.public


def test_an_authorization_id_other_than_the_user_is_refused_publicly():
    with pytest.raises(SaslError, match="authorization id that is different") as info:
        rfc_server().evaluate(b"n,a=admin,n=user,r=abc")
    assert info.value.public
    assert rfc_server().evaluate(b"n,a=user,n=user,r=abc").startswith(b"r=abc")


def test_too_few_iterations_are_refused():
    weak = {"user": new_credential(SHA_256, "pencil", 1000, RFC_SALT)}
    with pytest.raises(SaslError, match="Iterations 1000 is less than the minimum 4096"):
        rfc_server(weak).evaluate(RFC_CLIENT_FIRST)


@pytest.mark.parametrize("mechanism,hash_name", [(SHA_256, "sha256"), (SHA_512, "sha512")])
def test_an_independent_client_authenticates(mechanism, hash_name):
    server = ScramServer(mechanism, {"u=1,x": new_credential(mechanism, "pw", 4096)}.get)
    client = ScramClient(hash_name, "u=3D1=2Cx", "pw")  # the saslname of "u=1,x"
    reply = server.evaluate(client.final(server.evaluate(client.first())))
    assert reply == client.expected_server_final and server.user == "u=1,x"


def test_client_first_extensions_and_reserved_mext():
    first = ClientFirst.parse(b"n,,n=alice,r=nonce1,tokenauth=true,other=x")
    assert (first.saslname, first.nonce, first.extensions) == ("alice", "nonce1", {"tokenauth": "true", "other": "x"})
    assert first.bare == "n=alice,r=nonce1,tokenauth=true,other=x"
    assert ClientFirst.parse(b"n,,m=ext,n=bob,r=n2").saslname == "bob"


@pytest.mark.parametrize("message", [b"y,,n=a,r=b", b"n,,n=a", b"n,,n=a=b,r=c", b"p=tls,,n=a,r=b",
                                     b"n,,n=,r=b", b"n,,n=a,r=b c", b"\xff\xfe"])
def test_malformed_client_first_messages(message):
    with pytest.raises(SaslError, match="Invalid SCRAM client first message format"):
        ClientFirst.parse(message)


@pytest.mark.parametrize("message", [b"c=biws,r=x", b"c=b,r=x,p=AAAA", b"c=biws,r=x,p=A", b"r=x,c=biws,p=AAAA"])
def test_malformed_client_final_messages(message):
    with pytest.raises(SaslError, match="Invalid SCRAM client final message format"):
        ClientFinal.parse(message)


def test_credential_in_kafkas_text_form():
    cred = Credential(b"salt", b"stored", b"server", 4096)
    text = cred.to_kafka()
    assert text == "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=4096"
    assert Credential.from_kafka(text) == cred
    for bad in ("salt=c2FsdA==", text + ",extra=1", text.replace("iterations=4096", "iterations=x"),
                text.replace("c2FsdA==", "!!")):
        with pytest.raises(ValueError, match="Credentials not valid"):
            Credential.from_kafka(bad)


@settings(max_examples=examples(200))
@given(st.binary(min_size=1, max_size=64), st.binary(min_size=1, max_size=64),
       st.binary(min_size=1, max_size=64), st.integers(4096, 2**31 - 1))
def test_any_credential_round_trips_its_text(salt, stored, server, iterations):
    cred = Credential(salt, stored, server, iterations)
    assert Credential.from_kafka(cred.to_kafka()) == cred


@settings(max_examples=examples(500))
@given(st.binary(max_size=300), st.binary(max_size=300))
def test_any_bytes_fail_only_with_scram_error(first, final):
    server = ScramServer(SHA_512, {"user": new_credential(SHA_512, "pw", 4096)}.get)
    for message in (first, final):
        try:
            server.evaluate(message)
        except SaslError:
            return


_SAFE = st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters=",=")


@settings(max_examples=examples(300))
@given(st.text(st.characters(min_codepoint=1, max_codepoint=0x7F), min_size=1, max_size=30),
       st.text(_SAFE, min_size=1, max_size=30))
def test_any_user_and_nonce_survive_the_client_first_grammar(user, nonce):
    first = ClientFirst.parse(f"n,,n={scram.saslname(user)},r={nonce}".encode())
    assert scram.username(first.saslname) == user and first.nonce == nonce
