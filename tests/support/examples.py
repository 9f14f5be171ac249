"""How many examples a property test runs.

`make test` (and CI) runs each with the number it asks for, and the hypothesis profile's number
(40 where `CI` is set, 25 elsewhere) for tests that ask for none. `make test-fast`, for quick
feedback while working, sets BROOK_EXAMPLE_SCALE=0.25 and runs a quarter of each (at least
FLOOR, and never more than asked for), the profile's number included (tests/conftest.py)."""

from __future__ import annotations

import os

SCALE = float(os.environ.get("BROOK_EXAMPLE_SCALE", "1"))
FLOOR = 10


def examples(n: int) -> int:
    return n if SCALE >= 1 else min(n, max(FLOOR, int(n * SCALE)))
