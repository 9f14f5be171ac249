"""Size-prefixed frames: a 4-byte big-endian length, then that many bytes.

`FrameDecoder` is fed bytes and yields complete frames. A length above the limit
(`socket.request.max.bytes`) is refused as soon as the 4 length bytes have arrived, before
any of the body is buffered, so one request can never make the broker allocate more.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameTooLargeError(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds socket.request.max.bytes={limit}")
        self.size = size
        self.limit = limit


class InvalidFrameError(Exception):
    pass


class FrameDecoder:
    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._need = -1  # body size of the frame being read, -1 while reading its length

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return every frame they complete (bodies, without lengths)."""
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        while True:
            if self._need < 0:
                if end - pos < 4:
                    break
                (size,) = _SIZE.unpack_from(buf, pos)
                if size < 0:
                    raise InvalidFrameError(f"negative frame size {size}")
                if size > self.max_frame_bytes:
                    raise FrameTooLargeError(size, self.max_frame_bytes)
                pos += 4
                self._need = size
            if end - pos < self._need:
                break
            frames.append(bytes(buf[pos:pos + self._need]))
            pos += self._need
            self._need = -1
        if pos:
            del buf[:pos]
        return frames


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload
