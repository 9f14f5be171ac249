"""Size-prefixed frames: a 4-byte big-endian length, then that many bytes.

`FrameDecoder` turns received bytes into complete frames. A length above the limit
(`socket.request.max.bytes`) is refused as soon as the 4 length bytes have arrived, before
any of the body is buffered, so one request can never make the broker allocate more.

The network layer receives straight into the decoder (`recv_buffer()` then `received(n)`):
small frames go through a receive buffer, and a frame too large for it gets a buffer of its
own that the socket fills directly, so a large Produce request is not copied on its way in.
That buffer grows (doubling) as the bytes arrive, up to the announced size: announcing a
100 MB frame costs a connection nothing until it sends the bytes. `feed(data)` is the same machinery for callers that already hold bytes.

The receive buffer is taken from a pool when bytes arrive and given back by `release()`
once the frames it held are out (a few bytes of a frame not yet complete are kept in a
small copy of their own): an idle connection holds none. (Each connection used to keep
its own 64 KiB buffer for life: 21,000 idle sockets pinned 1.37 GB, which malloc kept after
they closed.)
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")
BUFFER_BYTES = 64 * 1024
_KEEP_PARTIAL_BYTES = 4096  # a partial frame up to this is copied out so the buffer can go back


class FrameTooLargeError(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds socket.request.max.bytes={limit}")
        self.size = size
        self.limit = limit


class InvalidFrameError(Exception):
    pass


class BufferPool:
    """Receive buffers of one size, shared by the connections: a few are kept for reuse,
    the rest freed."""

    def __init__(self, buffer_bytes: int = BUFFER_BYTES, max_free: int = 64) -> None:
        self.buffer_bytes = buffer_bytes
        self.max_free = max_free
        self._free: list[bytearray] = []

    def acquire(self) -> bytearray:
        return self._free.pop() if self._free else bytearray(self.buffer_bytes)

    def release(self, buf: bytearray) -> None:
        if len(self._free) < self.max_free and len(buf) == self.buffer_bytes:
            self._free.append(buf)


RECEIVE_BUFFERS = BufferPool()  # the broker's connections share it


class FrameDecoder:
    def __init__(self, max_frame_bytes: int, buffer_bytes: int = BUFFER_BYTES,
                 pool: BufferPool | None = None) -> None:
        self.max_frame_bytes = max_frame_bytes
        if pool is None:
            pool = RECEIVE_BUFFERS if buffer_bytes == BUFFER_BYTES else BufferPool(buffer_bytes)
        self._pool = pool
        self._buf: bytearray | None = None  # taken from the pool while bytes are in it
        self._view: memoryview | None = None
        self._partial = b""  # the start of a frame, kept while the buffer is back in the pool
        self._start = 0  # unparsed bytes are _buf[_start:_end]
        self._end = 0
        self._body: bytearray | None = None  # a large frame being received into its own buffer
        self._body_size = 0  # the size announced for it (the buffer grows up to that)
        self._filled = 0

    @property
    def buffered(self) -> int:
        return (self._end - self._start) + len(self._partial) + (
            self._filled if self._body is not None else 0)

    @property
    def holds_buffer(self) -> bool:
        return self._buf is not None

    def release(self) -> None:
        """Give the receive buffer back to the pool if what is left in it is small (nothing,
        or the first bytes of a frame, then copied out)."""
        buf = self._buf
        if buf is None or self._body is not None:
            return
        tail = self._end - self._start
        if tail > _KEEP_PARTIAL_BYTES:
            return
        if tail:
            self._partial = bytes(buf[self._start:self._end])
        self._view.release()
        self._buf = self._view = None
        self._start = self._end = 0
        self._pool.release(buf)

    def recv_buffer(self) -> memoryview:
        """Where the next received bytes should be written."""
        if self._body is not None:
            if self._filled == len(self._body):
                self._grow_body()
            return memoryview(self._body)[self._filled:]
        if self._buf is None:
            self._buf = self._pool.acquire()
            self._view = memoryview(self._buf)
            partial, self._partial = self._partial, b""
            self._buf[:len(partial)] = partial
            self._start, self._end = 0, len(partial)
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
            if self._filled < self._body_size:
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
                body = bytearray(min(size, 2 * len(buf)))
                body[:have] = buf[start + 4:end]
                self._body, self._body_size, self._filled = body, size, have
                start = end = 0
            break
        if start == end:
            start = end = 0
        self._start, self._end = start, end
        return frames

    def _grow_body(self) -> None:
        """Double the large frame's buffer (up to its announced size) once it is full."""
        body = self._body
        bigger = min(self._body_size, 2 * len(body))
        try:
            body.extend(bytes(bigger - len(body)))
        except BufferError:  # a view of it is still held: copy into a new one
            grown = bytearray(bigger)
            grown[:len(body)] = body
            self._body = grown

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
