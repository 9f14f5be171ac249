"""The Spark part of `make demo` (brook.demo_spark) runs end to end in its own process: it
checks its own results (the counts read back equal the page views produced, the group's lag
reaches zero) and fails otherwise, so running it is the test."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("pyspark")


@pytest.mark.timeout(420)
def test_spark_demo_runs_end_to_end():
    done = subprocess.run([sys.executable, "-m", "brook.demo_spark"], capture_output=True,
                          text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "lag 0: the group's committed offsets are the end of page-views" in out
    assert "equal to what was produced: yes" in out
    assert "Spark demo finished" in out
