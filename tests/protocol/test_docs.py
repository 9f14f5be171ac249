"""docs/protocol.md's version table is what ApiVersions advertises, with Kafka 3.9's versions
and those Kafka 4.0 dropped (kio follows Kafka 4's schemas: what it lacks, 4.0 dropped)."""

import os
import re

from kio.schema.index import api_key_map, schema_name_map

from brook.broker.handlers import registry
from brook.protocol.legacy import KAFKA_39_VERSIONS


def _range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def _dropped(key: int) -> str:
    lo = KAFKA_39_VERSIONS[key][0]
    name = api_key_map.get(key)
    if name not in schema_name_map:
        return "all"
    kafka4_min = min(schema_name_map[name])
    if kafka4_min <= lo:
        return "-"
    return str(lo) if kafka4_min - 1 == lo else f"{lo}-{kafka4_min - 1}"


def test_protocol_doc_table_matches_the_handlers():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "protocol.md")
    text = open(path, encoding="utf-8").read()
    table = text.split("<!-- api-table:start -->")[1].split("<!-- api-table:end -->")[0]
    rows = re.findall(r"^\| (\w+) \| (\d+) \| (\d+) \| (\d+) \| ([\d-]+) \| ([\w-]+) \|$",
                      table, re.M)
    documented = {int(k): (name, int(lo), int(hi), _range(k39), dropped)
                  for name, k, lo, hi, k39, dropped in rows}
    served = {k: (a.name, a.min_version, a.max_version, KAFKA_39_VERSIONS[k], _dropped(k))
              for k, a in registry().items()}
    assert documented == served


def test_every_api_serves_down_to_kafka_39_but_the_inter_broker_ones():
    """The ZooKeeper inter-broker APIs (and AlterPartition) are served at the one version brook
    brokers speak to each other; every other API from Kafka 3.9's minimum (Produce and Fetch
    from v0, with message-format conversion)."""
    not_yet = {4: 5, 5: 3, 6: 7, 7: 3, 56: 2}
    for key, api in registry().items():
        assert api.min_version == not_yet.get(key, KAFKA_39_VERSIONS[key][0]), api.name
