"""Kafka's JAAS config syntax, as sasl.jaas.config values are written."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brook.security.jaas import JaasError, LoginModule, parse, parse_one
from tests.support.examples import examples

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def test_kafkas_documented_plain_example():
    text = (f'{PLAIN} required \\n username="admin" \\n password="admin-secret" \\n'
            ' user_admin="admin-secret" user_alice="alice-secret";').replace("\\n", "\n")
    assert parse_one(text) == LoginModule(PLAIN, "required", {
        "username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
        "user_alice": "alice-secret"})


def test_unquoted_and_single_quoted_values_escapes_and_comments():
    text = (f"{PLAIN} REQUIRED // a comment\n /* another */ username=admin password='a\\'b\"c'"
            ' user_x="back\\\\slash";')
    module = parse_one(text)
    assert module.flag == "required"
    assert module.options == {"username": "admin", "password": "a'b\"c", "user_x": "back\\slash"}


def test_several_modules_and_parse_one_refuses_them():
    text = f"{PLAIN} required a=1; org.x.Other optional;"
    assert [m.name for m in parse(text)] == [PLAIN, "org.x.Other"]
    with pytest.raises(JaasError, match="contains 2 login modules, should be 1"):
        parse_one(text)


@pytest.mark.parametrize("text,message", [
    ("", "Login module not specified in JAAS config"),
    ("   // only a comment", "Login module not specified in JAAS config"),
    (PLAIN, "Login module control flag not specified in JAAS config"),
    (f"{PLAIN} mandatory;", "Invalid login module control flag 'mandatory' in JAAS config"),
    (f"{PLAIN} required username;", "Value not specified for key 'username' in JAAS config"),
    (f"{PLAIN} required username=;", "Value not specified for key 'username' in JAAS config"),
    (f'{PLAIN} required username="a"', "JAAS config entry not terminated by semi-colon"),
    (f"{PLAIN} ;", "Login module control flag is not available in the JAAS config"),
])
def test_kafkas_errors(text, message):
    with pytest.raises(JaasError) as info:
        parse(text)
    assert str(info.value) == message


_KEY = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.$-]{0,20}", fullmatch=True)
_VALUE = st.text(st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)), max_size=40)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@settings(max_examples=examples(300))
@given(st.dictionaries(_KEY, _VALUE, max_size=6), st.sampled_from(["required", "Optional", "SUFFICIENT"]))
def test_any_options_written_quoted_read_back(options, flag):
    text = f"{PLAIN} {flag} " + " ".join(f"{k}={_quote(v)}" for k, v in options.items()) + ";"
    assert parse_one(text) == LoginModule(PLAIN, flag.lower(), options)


@settings(max_examples=examples(500))
@given(st.text(max_size=200))
def test_any_text_parses_or_raises_jaas_error_only(text):
    try:
        parse(text)
    except JaasError:
        pass
