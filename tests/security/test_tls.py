"""TLS settings: principal mapping rules, distinguished names, and the configuration errors a
broker stops on at start."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brook.broker.config import BrokerConfig, ConfigError
from brook.security.tls import (NoMatchingRule, PrincipalMapper, TlsConfigError, client_context,
                                distinguished_name, server_tls)
from tests.support.examples import examples
from tests.support.tls_certs import TlsFiles

SUBJECT = ((("countryName", "GB"),), (("organizationName", "example"),),
           (("organizationalUnitName", "eng"),), (("commonName", "alice"),))


def test_the_subject_is_written_most_specific_first_as_rfc_2253_does():
    assert distinguished_name(SUBJECT) == "CN=alice,OU=eng,O=example,C=GB"


def test_special_characters_are_escaped_and_multi_valued_rdns_joined_with_plus():
    subject = ((("organizationName", 'a,b+c"d\\e<f>g;h'),),
               (("commonName", " x "), ("userId", "7")))
    assert distinguished_name(subject) == 'CN=\\ x\\ +UID=7,O=a\\,b\\+c\\"d\\\\e\\<f\\>g\\;h'


def test_attributes_without_an_rfc_2253_keyword_keep_their_oid():
    assert distinguished_name(((("emailAddress", "a@b"),),)) == "1.2.840.113549.1.9.1=a@b"


@pytest.mark.parametrize("rules,name", [
    (None, "CN=alice,OU=eng,O=example,C=GB"),
    ("DEFAULT", "CN=alice,OU=eng,O=example,C=GB"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),C=(.*?)$/$1@$3/", "alice@example"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),C=(.*?)$/$1/U", "ALICE"),
    ("RULE:^CN=([a-z]+),.*$/$1/L, DEFAULT", "alice"),
    # the first rule does not match: the next one is tried
    ("RULE:^CN=bob,(.*)$/bob/,RULE:^CN=(.*?),(.*)$/$1 in $2/", "alice in OU=eng,O=example,C=GB"),
    ("RULE:^CN=(.*?),.*$/x\\/$1/", "x/alice"),  # an escaped slash
])
def test_mapping_rules_as_kafka_applies_them(rules, name):
    assert PrincipalMapper.parse(rules).name("CN=alice,OU=eng,O=example,C=GB") == name


def test_a_name_no_rule_matches_is_refused():
    mapper = PrincipalMapper.parse("RULE:^CN=bob,.*$/bob/")
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=alice"):
        mapper.name("CN=alice,O=x")


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*$/$1/", "RULE:abc", "NOT A RULE", "RULE:a/b/X"])
def test_rules_that_do_not_parse_are_configuration_errors(rules):
    with pytest.raises(TlsConfigError, match="ssl.principal.mapping.rules"):
        PrincipalMapper.parse(rules)


@given(st.text(alphabet=st.characters(codec="ascii", exclude_characters="\0"), min_size=1,
               max_size=30))
@settings(max_examples=examples(200))
def test_default_mapping_gives_back_any_distinguished_name(cn):
    dn = distinguished_name(((("commonName", cn),),))
    assert dn.startswith("CN=")
    assert PrincipalMapper.parse("DEFAULT").name(dn) == dn


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return TlsFiles(tmp_path_factory.mktemp("tls"))


def _config(tmp_path, **props) -> BrokerConfig:
    return BrokerConfig.from_props({"log.dirs": str(tmp_path / "logs"), **props})


def test_an_ssl_listener_without_a_keystore_stops_the_broker_at_start(tmp_path):
    with pytest.raises(ConfigError, match="listener SSL uses TLS: set ssl.keystore.location"):
        _config(tmp_path, listeners="SSL://127.0.0.1:0")


def test_an_unreadable_keystore_names_its_key(tmp_path):
    with pytest.raises(ConfigError, match="cannot load the key and certificates of ssl.keystore.location="):
        _config(tmp_path, listeners="SSL://127.0.0.1:0", **{"ssl.keystore.location": str(tmp_path / "none.pem")})


def test_jks_keystores_are_refused_with_what_to_do(tmp_path, files):
    with pytest.raises(ConfigError, match="brook reads PEM keystores only"):
        _config(tmp_path, listeners="SSL://127.0.0.1:0", **{
            "ssl.keystore.type": "JKS", "ssl.keystore.location": str(files.broker_keystore)})


def test_protocols_other_than_tls_1_2_and_1_3_are_refused(tmp_path, files):
    with pytest.raises(ConfigError, match="TLSv1.1 not supported"):
        _config(tmp_path, listeners="SSL://127.0.0.1:0", **{
            "ssl.keystore.location": str(files.broker_keystore), "ssl.enabled.protocols": "TLSv1.1,TLSv1.2"})


def test_inline_pem_keystore_and_per_listener_settings(tmp_path, files):
    cfg = _config(tmp_path, listeners="SSL://127.0.0.1:0,INTERNAL://127.0.0.1:0", **{
        "listener.security.protocol.map": "SSL:SSL,INTERNAL:SSL",
        "ssl.keystore.location": str(files.broker_keystore),
        "listener.name.internal.ssl.keystore.key": files.broker_key_pem.decode(),
        "listener.name.internal.ssl.keystore.certificate.chain": files.broker_cert_pem.decode(),
        "listener.name.internal.ssl.client.auth": "required",
        "listener.name.internal.ssl.truststore.location": str(files.ca),
    })
    assert cfg.listener_security["SSL"].tls.client_auth == "none"
    assert cfg.listener_security["INTERNAL"].tls.client_auth == "required"
    assert not any(p.name.startswith("brook-tls-") for p in tmp_path.parent.iterdir())


def test_the_keystore_key_is_a_secret_in_describe_configs():
    from brook.broker.config_defs import is_sensitive
    assert is_sensitive("listener.name.internal.ssl.keystore.key")
    assert is_sensitive("ssl.key.password")


def test_client_context_checks_host_names_unless_told_not_to(files):
    props = {"ssl.truststore.location": str(files.ca)}
    assert client_context(props, "SSL").check_hostname is True
    props["ssl.endpoint.identification.algorithm"] = ""
    assert client_context(props, "SSL").check_hostname is False


def test_client_auth_must_be_one_of_kafkas_values(files):
    with pytest.raises(TlsConfigError, match="ssl.client.auth=sometimes"):
        server_tls({"ssl.keystore.location": str(files.broker_keystore), "ssl.client.auth": "sometimes"}, "SSL")
