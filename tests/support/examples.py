"""How many examples a property test that sets its own number runs.

`make test` (and CI) runs each with the number it asks for. `make test-fast`, for quick
feedback while working, sets BROOK_EXAMPLE_SCALE=0.25 and runs a quarter of them (at least
25, the dev profile's number for tests that ask for none)."""

from __future__ import annotations

import os

SCALE = float(os.environ.get("BROOK_EXAMPLE_SCALE", "1"))


def examples(n: int) -> int:
    return n if SCALE >= 1 else max(25, int(n * SCALE))
