from __future__ import annotations

import json
import os

import pytest

from brook.broker.config import BrokerConfig, ConfigError, Listener
from brook.broker.metadata import (
    InvalidConfigError,
    InvalidTopicError,
    MetadataError,
    MetadataStore,
    TopicExistsError,
    validate_topic_configs,
    validate_topic_name,
)
from brook.cluster.zk_data import new_cluster_id
from brook.properties import parse_properties
from brook.storage.config import LogConfig


def test_properties_file_format():
    text = "\n".join([
        "# a comment", "! another", "", "broker.id=3", "listeners = PLAINTEXT://h:1",
        "log.dirs: /a,/b", "spaced value here", "long.key=one\\", "    two", r"esc=a\=b\tc\u0041",
    ])
    assert parse_properties(text) == {
        "broker.id": "3", "listeners": "PLAINTEXT://h:1", "log.dirs": "/a,/b", "spaced": "value here",
        "long.key": "onetwo", "esc": "a=b\tcA",
    }


def test_broker_config_from_file_and_overrides(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text("broker.id=2\nnum.partitions=3\nlog.dirs=/tmp/x\nlog.retention.hours=1\n")
    cfg = BrokerConfig.from_file(str(f), {"listeners": "PLAINTEXT://127.0.0.1:19092", "num.partitions": "5"})
    assert cfg.broker_id == 2
    assert cfg.num_partitions == 5
    assert cfg.listeners == (Listener("PLAINTEXT", "127.0.0.1", 19092),)
    assert cfg.log_dirs == ("/tmp/x",)
    assert cfg.log_config.retention_ms == 3600 * 1000


def test_defaults_are_kafkas():
    cfg = BrokerConfig.from_props({})
    assert cfg.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    assert cfg.log_dirs == (os.path.abspath("./data"),)
    assert cfg.auto_create_topics_enable and cfg.num_partitions == 1
    assert cfg.socket_request_max_bytes == 104857600


@pytest.mark.parametrize("props", [{"listeners": "nohost"}, {"num.partitions": "x"},
                                   {"auto.create.topics.enable": "maybe"}, {"num.partitions": "0"},
                                   {"log.segment.bytes": "-1"}])
def test_bad_config_is_a_config_error(props):
    with pytest.raises(ConfigError):
        BrokerConfig.from_props(props)


def test_cluster_id_is_22_url_safe_chars():
    for _ in range(50):
        cid = new_cluster_id()
        assert len(cid) == 22 and not cid.startswith("-")
        assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "ümlaut", "a/b"])
def test_invalid_topic_names(name):
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


@pytest.mark.parametrize("name", ["a", "a.b_c-D9", "a" * 249, "__consumer_offsets"])
def test_valid_topic_names(name):
    validate_topic_name(name)


def test_topic_configs_validated():
    base = LogConfig()
    assert validate_topic_configs({"retention.ms": "5", "min.insync.replicas": "1"}, base).retention_ms == 5
    with pytest.raises(InvalidConfigError):
        validate_topic_configs({"no.such.key": "1"}, base)
    with pytest.raises(InvalidConfigError):
        validate_topic_configs({"segment.bytes": "abc"}, base)


def test_metadata_persists_and_cluster_id_is_stable(tmp_path):
    dirs = (str(tmp_path / "a"), str(tmp_path / "b"))
    m = MetadataStore(dirs, 1)
    m.load()
    t = m.create_topic("orders", 3, {"retention.ms": "100"})
    pid = m.allocate_producer_id()
    m2 = MetadataStore(dirs, 1)
    m2.load()
    assert m2.cluster_id == m.cluster_id
    assert m2.get("orders").topic_id == t.topic_id and m2.get("orders").partitions == 3
    assert m2.get("orders").configs == {"retention.ms": "100"}
    assert m2.allocate_producer_id() > pid  # ids are never reused across restarts
    for d in dirs:
        props = parse_properties(open(os.path.join(d, "meta.properties")).read())
        assert props["cluster.id"] == m.cluster_id and props["broker.id"] == "1"


def test_metadata_refuses_another_brokers_dir(tmp_path):
    d = (str(tmp_path / "a"),)
    MetadataStore(d, 1).load()
    with pytest.raises(MetadataError):
        MetadataStore(d, 2).load()


def test_topic_name_collision_and_duplicates(tmp_path):
    m = MetadataStore((str(tmp_path),), 1)
    m.load()
    m.create_topic("a.b", 1)
    with pytest.raises(InvalidTopicError):
        m.create_topic("a_b", 1)
    with pytest.raises(TopicExistsError):
        m.create_topic("a.b", 1)
    again = MetadataStore((str(tmp_path),), 1)
    again.load()
    assert list(again.topics) == ["a.b"]


def test_one_log_dir_named_twice_is_a_config_error(tmp_path):
    """Two names of one directory would be two log dirs sharing files (and its lock)."""
    d = tmp_path / "logs"
    d.mkdir()
    (tmp_path / "link").symlink_to(d)
    for dirs in (f"{d},{d}/", f"{d},{tmp_path / 'link'}", f"{d},{tmp_path}/./logs"):
        with pytest.raises(ConfigError, match="names one directory twice"):
            BrokerConfig.from_props({"log.dirs": dirs})
    assert len(BrokerConfig.from_props({"log.dirs": f"{d},{tmp_path / 'other'}"}).log_dirs) == 2
