"""Which partition of a coordinator's topic holds a key (a group id, a transactional id):
Kafka's rule, bit for bit, ``abs(key.hashCode()) % partitions``.

Kafka's ``hashCode`` is Java's ``String.hashCode`` and ``abs`` is Kafka's ``Utils.abs``. Both have
quirks that must be reproduced for brook to put a key where Kafka (and every tool that follows
Kafka) looks for it:

* ``String.hashCode`` runs over UTF-16 code units, not code points: a character outside the
  Basic Multilingual Plane counts as its two surrogates. The hash is ``h = 31 * h + unit`` with
  32-bit two's complement wrap-around.
* ``Utils.abs`` maps ``Integer.MIN_VALUE`` to 0, where Java's ``Math.abs`` would return
  ``Integer.MIN_VALUE`` itself; every other value gets its true absolute value (this is not
  ``n & 0x7fffffff``, which differs for every other negative hash).
"""

from __future__ import annotations

import struct
from functools import lru_cache

__all__ = ["java_string_hash", "java_abs", "partition_for"]

_MASK32 = 0xFFFFFFFF


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` of ``s``: a signed 32-bit int over its UTF-16 code units.

    Lone surrogates (possible in a Python ``str``) are hashed as the single code unit they are.
    """
    data = s.encode("utf-16-le", "surrogatepass")
    h = 0
    for unit in struct.unpack(f"<{len(data) // 2}H", data):
        h = (31 * h + unit) & _MASK32
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def java_abs(n: int) -> int:
    """Kafka's ``Utils.abs`` of a signed 32-bit int: ``Integer.MIN_VALUE`` becomes 0."""
    return 0 if n == -0x8000_0000 else abs(n)


@lru_cache(maxsize=65536)
def _partition_for(key: str, num_partitions: int) -> int:
    return java_abs(java_string_hash(key)) % num_partitions


def partition_for(key: str, num_partitions: int) -> int:
    """The partition of ``key`` in a coordinator's topic of ``num_partitions`` partitions."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    return _partition_for(key, num_partitions)
