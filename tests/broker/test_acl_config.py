"""The authorizer's configuration: Kafka's class names select it, others are refused."""

from __future__ import annotations

import pytest

from brook.broker.config import BrokerConfig, ConfigError
from brook.broker.config_defs import KEYS


@pytest.mark.parametrize("name", ["kafka.security.authorizer.AclAuthorizer",
                                  "org.apache.kafka.metadata.authorizer.StandardAuthorizer"])
def test_kafkas_class_names_select_the_acl_authorizer(name):
    cfg = BrokerConfig.from_props({"authorizer.class.name": name, "super.users": "User:admin; User:broker",
                                   "allow.everyone.if.no.acl.found": "true"})
    assert cfg.acl_authorizer and cfg.allow_everyone_if_no_acl_found
    assert cfg.super_users == {"User:admin", "User:broker"}


def test_defaults_and_refusals():
    cfg = BrokerConfig.from_props({})
    assert not cfg.acl_authorizer and not cfg.allow_everyone_if_no_acl_found and not cfg.super_users
    assert not BrokerConfig.from_props({"authorizer.class.name": " "}).acl_authorizer
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        BrokerConfig.from_props({"authorizer.class.name": "com.example.MyAuthorizer"})
    assert KEYS["authorizer.class.name"].default == ""
    assert KEYS["allow.everyone.if.no.acl.found"].default == "false"
