"""Size-prefixed frames: a 4-byte big-endian length, then that many bytes.

`FrameDecoder` turns received bytes into complete frames. A length above the limit
(`socket.request.max.bytes`) is refused as soon as the 4 length bytes have arrived, before
any of the body is buffered, so one request can never make the broker allocate more.

The network layer receives straight into the decoder (`recv_buffer()` then `received(n)`):
small frames share one reusable buffer, and a frame too large for it gets a buffer of its
own size that the socket fills directly, so a large Produce request is not copied on its
way in. `feed(data)` is the same machinery for callers that already hold bytes.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")
BUFFER_BYTES = 64 * 1024


class FrameTooLargeError(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds socket.request.max.bytes={limit}")
        self.size = size
        self.limit = limit


class InvalidFrameError(Exception):
    pass


class FrameDecoder:
    def __init__(self, max_frame_bytes: int, buffer_bytes: int = BUFFER_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray(buffer_bytes)
        self._view = memoryview(self._buf)
        self._start = 0  # unparsed bytes are _buf[_start:_end]
        self._end = 0
        self._body: bytearray | None = None  # a large frame being received into its own buffer
        self._filled = 0

    @property
    def buffered(self) -> int:
        return (self._end - self._start) + (self._filled if self._body is not None else 0)

    def recv_buffer(self) -> memoryview:
        """Where the next received bytes should be written."""
        if self._body is not None:
            return memoryview(self._body)[self._filled:]
        if self._end == len(self._buf):  # full: move the unparsed tail to the front
            tail = self._end - self._start
            self._buf[:tail] = self._buf[self._start:self._end]
            self._start, self._end = 0, tail
        return self._view[self._end:]

    def received(self, n: int) -> list[bytes | memoryview]:
        """`n` bytes were written into `recv_buffer()`: return the frames now complete
        (`bytes`, or a read-only view of a large frame's own buffer)."""
        if self._body is not None:
            self._filled += n
            if self._filled < len(self._body):
                return []
            frames: list[bytes | memoryview] = [memoryview(self._body).toreadonly()]
            self._body = None
            return frames
        self._end += n
        return self._parse()

    def _parse(self) -> list[bytes | memoryview]:
        frames: list[bytes | memoryview] = []
        buf, start, end = self._buf, self._start, self._end
        while end - start >= 4:
            (size,) = _SIZE.unpack_from(buf, start)
            if size < 0:
                raise InvalidFrameError(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                self._start = start
                raise FrameTooLargeError(size, self.max_frame_bytes)
            if end - start - 4 >= size:
                frames.append(bytes(buf[start + 4:start + 4 + size]))
                start += 4 + size
                continue
            if size + 4 > len(buf) - start:  # will not fit: receive it into its own buffer
                have = end - start - 4
                body = bytearray(size)
                body[:have] = buf[start + 4:end]
                self._body, self._filled = body, have
                start = end = 0
            break
        if start == end:
            start = end = 0
        self._start, self._end = start, end
        return frames

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | memoryview]:
        """Add received bytes; return every frame they complete (bodies, without lengths)."""
        frames: list[bytes | memoryview] = []
        data = memoryview(data)
        while data:
            target = self.recv_buffer()
            k = min(len(target), len(data))
            target[:k] = data[:k]
            data = data[k:]
            frames += self.received(k)
        return frames


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload
