"""One client connection: read frames, answer each request in order, write responses.

The socket is used directly (not through an asyncio transport) so that record data can go
from the segment files to the socket with `os.sendfile`, on uvloop as on the standard loop.
Requests on one connection are handled one at a time, in order, as Kafka does; every
connection has its own task, so a slow client only ever waits for itself.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
from time import perf_counter

from ..protocol.framing import FrameDecoder, FrameTooLargeError, InvalidFrameError
from ..protocol.messages import (
    API_VERSIONS_KEY,
    MalformedRequestError,
    UnsupportedVersionError,
    encode_response,
    parse_request,
)
from .handlers import RawResponse
from .handlers.api_versions import build_response as api_versions_response
from .handlers.common import InvalidRequest
from .handlers.produce import CloseConnection

log = logging.getLogger(__name__)


class Connection:
    def __init__(self, broker, sock: socket.socket, peer: str, listener_name: str) -> None:
        self.broker = broker
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.listener_name = listener_name
        self.loop = asyncio.get_running_loop()
        self.closed = False
        self.task: asyncio.Task | None = None
        self.busy = False  # a handler is working (a long-polling Fetch is not idle; a stalled write is)
        self.last_active = self.loop.time()

    async def run(self) -> None:
        decoder = FrameDecoder(self.broker.config.socket_request_max_bytes)
        recv_into = self.loop.sock_recv_into
        try:
            while True:
                n = await recv_into(self.sock, decoder.recv_buffer())
                if n == 0:
                    return
                self.last_active = self.loop.time()
                received = perf_counter()  # the time of the requests this read completes
                for frame in decoder.received(n):
                    if not await self._handle(frame, received):
                        return
        except FrameTooLargeError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
        except InvalidFrameError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
        except (ConnectionError, TimeoutError):
            pass
        except OSError as exc:
            if exc.errno not in (errno.EBADF, errno.ENOTCONN, errno.EPIPE, errno.ECONNRESET):
                log.warning("connection from %s failed: %s", self.peer, exc)
        finally:
            self.close()

    async def _handle(self, frame: bytes, received: float) -> bool:
        """Answer one request; False if the connection must be closed."""
        broker = self.broker
        metrics = broker.metrics
        try:
            request = parse_request(frame, broker.supported_versions)
        except UnsupportedVersionError as exc:
            if exc.api_key == API_VERSIONS_KEY:
                from kio.schema.errors import ErrorCode
                body = api_versions_response(broker, 0, ErrorCode.unsupported_version)
                await self.send(encode_response(API_VERSIONS_KEY, 0, exc.correlation_id, body))
                return True
            log.warning("closing connection from %s: %s", self.peer, exc)
            return False
        except MalformedRequestError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
            return False
        api = broker.apis[request.api_key]
        self.busy = True
        try:
            response = await api.handle(broker, request, self)
            self.busy = False
            self.last_active = self.loop.time()
            if response is None:
                if metrics is not None:
                    metrics.request_done(request.api_key, received)
                return True
            if not isinstance(response, RawResponse):
                response = encode_response(request.api_key, request.api_version,
                                           request.correlation_id, response)
        except CloseConnection:
            return False
        except InvalidRequest as exc:
            log.warning("closing connection from %s: invalid %s v%d request: %s", self.peer,
                        api.name, request.api_version, exc)
            return False
        except Exception:
            self.busy = False
            log.exception("closing connection from %s: %s v%d failed", self.peer, api.name,
                          request.api_version)
            return False
        if isinstance(response, RawResponse):
            await self.send_pieces(response.pieces)
        else:
            await self.send(response)
        if metrics is not None:
            metrics.request_done(request.api_key, received)
        return True

    # ------------------------------------------------------------ writing

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = self.sock.send(view)
            except BlockingIOError:
                await self._writable()
                continue
            view = view[n:]
            self.last_active = self.loop.time()

    async def send_pieces(self, pieces) -> None:
        """Send a response of bytes and file regions. Each region's file is duplicated
        before anything is sent (no await in between since the regions were read), so a
        segment deleted meanwhile is still read from its own file, never from whatever
        file reuses its descriptor number."""
        fds = {}
        try:
            for piece in pieces:
                if not isinstance(piece, bytes) and piece.fd not in fds:
                    fds[piece.fd] = os.dup(piece.fd)
            for piece in pieces:
                if isinstance(piece, bytes):
                    await self.send(piece)
                else:
                    await self._sendfile(fds[piece.fd], piece.position, piece.length)
        finally:
            for fd in fds.values():
                os.close(fd)

    async def _sendfile(self, fd: int, offset: int, count: int) -> None:
        while count > 0:
            try:
                n = os.sendfile(self.fd, fd, offset, count)
            except BlockingIOError:
                await self._writable()
                continue
            if n == 0:  # the file ended early (truncated under us): the frame cannot be completed
                raise ConnectionError("segment file shorter than the region being sent")
            offset += n
            count -= n
            self.last_active = self.loop.time()

    async def _writable(self) -> None:
        fut = self.loop.create_future()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        self.loop.add_writer(self.fd, ready)
        try:
            await fut
        finally:
            self.loop.remove_writer(self.fd)

    def close(self) -> None:
        """Close from anywhere: a task still reading or writing is cancelled first, since a
        socket closed under a pending event-loop operation is not reliably released."""
        task = self.task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()  # run()'s finally closes the socket
            return
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass
