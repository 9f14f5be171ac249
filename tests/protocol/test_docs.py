"""docs/protocol.md's version table is what ApiVersions advertises."""

import os
import re

from brook.broker.handlers import registry


def test_protocol_doc_table_matches_the_handlers():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "protocol.md")
    text = open(path, encoding="utf-8").read()
    table = text.split("<!-- api-table:start -->")[1].split("<!-- api-table:end -->")[0]
    rows = re.findall(r"^\| (\w+) \| (\d+) \| (\d+) \| (\d+) \|$", table, re.M)
    documented = {int(k): (name, int(lo), int(hi)) for name, k, lo, hi in rows}
    served = {k: (a.name, a.min_version, a.max_version) for k, a in registry().items()}
    assert documented == served
