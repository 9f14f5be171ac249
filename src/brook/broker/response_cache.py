"""Encoded answers kept for reuse while what they describe has not changed: Metadata for
5,000 partitions costs about 40 ms to build and encode and is asked again and again by every
client (and by 50 pipelining ones at once, which starved everyone else for 30 s).

An entry is the encoded response after its correlation id (the rest of the header and the
body), filed under a key the handler chooses and the metadata generation it was built at;
a lookup at another generation misses. Least recently used entries go first.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from typing import Hashable

_SIZE_AND_CORRELATION = struct.Struct(">ii")


class EncodedResponseCache:
    def __init__(self, max_entries: int = 64) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, tuple[int, bytes]] = OrderedDict()
        self.hits = 0

    def get(self, key: Hashable, generation: int, correlation_id: int) -> bytes | None:
        """The whole frame for this correlation id, or None."""
        entry = self._entries.get(key)
        if entry is None or entry[0] != generation:
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        rest = entry[1]
        return _SIZE_AND_CORRELATION.pack(len(rest) + 4, correlation_id) + rest

    def put(self, key: Hashable, generation: int, frame: bytes) -> None:
        """Keep an encoded frame (size, correlation id, then the rest) for `key`."""
        self._entries[key] = (generation, frame[8:])
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

