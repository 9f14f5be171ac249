"""The offsets files of `brook offsets export/import` (brook.cli.offsets_io), without a broker:
brook's JSON, and ZooKeeper's /consumers/<group>/offsets/<topic>/<partition> as a JSON or text
dump of those znodes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brook.cli.errors import CliError
from brook.cli.offsets import select
from brook.cli.offsets_io import Offset, export_document, parse


def test_brook_export_round_trip():
    doc = export_document("g", {("b", 1): (7, "m"), ("a", 0): (3, "")})
    assert doc == {"format": "brook-offsets", "version": 1, "group": "g", "offsets": [
        {"topic": "a", "partition": 0, "offset": 3, "metadata": ""},
        {"topic": "b", "partition": 1, "offset": 7, "metadata": "m"}]}
    assert parse(json.dumps(doc)) == {"g": {("a", 0): Offset(3, ""), ("b", 1): Offset(7, "m")}}


topics = st.text("abcxyz._-", min_size=1, max_size=10)
offsets_maps = st.dictionaries(st.tuples(topics, st.integers(0, 1000)),
                               st.tuples(st.integers(0, 2**62), st.text(max_size=20)),
                               min_size=1)


@given(st.text(min_size=1, max_size=20), offsets_maps)
def test_any_export_reads_back_the_same(group, offsets):
    text = json.dumps(export_document(group, offsets))
    assert parse(text) == {group: {tp: Offset(o, m) for tp, (o, m) in offsets.items()}}


ZK_JSON = {
    "/consumers": "",
    "/consumers/billing": "",
    "/consumers/billing/ids/billing_host-1": '{"version":1,"subscription":{"orders":1}}',
    "/consumers/billing/owners/orders/0": "billing_host-1-0",
    "/consumers/billing/offsets": "",
    "/consumers/billing/offsets/orders": "",
    "/consumers/billing/offsets/orders/0": "1200",
    "/consumers/billing/offsets/orders/1": 1187,
    "/consumers/audit/offsets/payments/3": "42",
    "/brokers/ids/0": '{"host":"kafka-0"}',
}


def test_zookeeper_json_dump():
    assert parse(json.dumps(ZK_JSON)) == {
        "billing": {("orders", 0): Offset(1200), ("orders", 1): Offset(1187)},
        "audit": {("payments", 3): Offset(42)},
    }


ZK_TEXT = """\
# zookeeper offsets of the old consumers
/consumers/billing/offsets/orders/0 1200
/consumers/billing/offsets/orders/1\t1187
/consumers/billing/offsets/orders

/consumers/billing/ids/billing_host-1 {"version":1}
/consumers/audit/offsets/payments/3 = 42
/consumers/audit/offsets/payments/4=7
"""


def test_zookeeper_text_dump():
    assert parse(ZK_TEXT) == {
        "billing": {("orders", 0): Offset(1200), ("orders", 1): Offset(1187)},
        "audit": {("payments", 3): Offset(42), ("payments", 4): Offset(7)},
    }


@pytest.mark.parametrize("text, message", [
    ("/consumers/g/offsets/t/x 5\n", "partition 'x' is not a number"),
    ("/consumers/g/offsets/t/0 five\n", "offset 'five' is not a number"),
    ("/consumers/g/offsets/t/0 -1\n", "negative"),
    ("/consumers/g/offsets/t/0 1\n/consumers/g/offsets/t/0 2\n", "t-0 is given twice"),
    ("/consumers/g/offsets/t/0\n", "expected '<path> <offset>'"),
    ('{"/consumers/g/offsets/t/0": [1]}', "must be a number"),
    ('{"/consumers/g/offsets/t/0": true}', "must be a number"),
    ("/brokers/ids/0 {}\n", "holds no offsets"),
    ("{not json", "not valid JSON"),
    ('{"format": "brook-offsets", "version": 9, "group": "g", "offsets": []}', "version 9"),
    ('{"format": "brook-offsets", "version": 1, "group": "g", "offsets": [{"topic": "t"}]}',
     "needs topic, partition and offset"),
    ('{"format": "brook-offsets", "version": 1, "group": "g", '
     '"offsets": [{"topic": "t", "partition": 0, "offset": -3}]}', "invalid"),
])
def test_bad_files_are_usage_errors_naming_the_place(text, message):
    with pytest.raises(CliError) as err:
        parse(text, "offsets.txt")
    assert message in err.value.message
    assert err.value.message.startswith("offsets.txt")
    assert err.value.code == 2


def test_line_numbers_in_text_errors():
    with pytest.raises(CliError, match=r"offsets.txt:3: partition 'p'"):
        parse("# a\n/consumers/g/offsets/t/0 1\n/consumers/g/offsets/t/p 2\n", "offsets.txt")


def test_select_and_rename_groups():
    data = parse(ZK_TEXT)
    assert set(select(data, None, None, "f")) == {"billing", "audit"}
    assert select(data, "audit", None, "f") == {"audit": data["audit"]}
    assert select(data, "audit", "audit-v2", "f") == {"audit-v2": data["audit"]}
    with pytest.raises(CliError, match="has no offsets of group 'nope'"):
        select(data, "nope", None, "f")
    with pytest.raises(CliError, match="choose one with --group"):
        select(data, None, "x", "f")
