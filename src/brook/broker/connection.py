"""One client connection: read frames, answer each request in order, write responses.

The socket is used directly (not through an asyncio transport) so that record data can go
from the segment files to the socket with `os.sendfile`, on uvloop as on the standard loop.
Requests on one connection are handled one at a time, in order, as Kafka does; every
connection has its own task, so a slow client only ever waits for itself.

Answers are queued and sent together: those of the requests one read brought in go out with
one `send` once they are all answered, or earlier as soon as a handler has to wait (a
callback the event loop runs when this connection's task yields sends what is queued), so an
answer never waits for a later request's handler (what the socket does not take then goes
out as it makes room, through a writer callback, while the handler waits). A request's time
(metrics) runs until its answer has gone to the socket. On loopback a `send` that wakes the client
costs the broker about as much as handling a small request, and a pipelining client (8 offset
commits in flight) gets its answers in one.

A handler may answer `Deferred` (with log.flush.before.ack: a write answered once on disk). Its
place in the queue is kept and the connection goes on with the next requests (those of later
reads too), whose writes then share the same fsyncs; answers are sent in order, each once the ones before it are ready. At
most MAX_DEFERRED wait at a time.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import ssl
import weakref
from time import perf_counter

from ..protocol.framing import FrameDecoder, FrameTooLargeError, InvalidFrameError
from ..protocol.messages import (
    API_VERSIONS_KEY,
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    MalformedRequestError,
    UnsupportedVersionError,
    encode_response,
    parse_request,
)
from .auth.authenticator import authenticate
from .handlers.api import Deferred, RawResponse
from .handlers.api_versions import build_response as api_versions_response
from .handlers.common import CloseConnection, InvalidRequest
from .tls_socket import TlsSocket, WantWrite
from ..security.tls import NoMatchingRule

log = logging.getLogger(__name__)

#: Requests of one read answered before the connection lets the others have the event loop
#: (each is answered without waiting when its shard is idle).
YIELD_EVERY = 64
#: Seconds of work a connection does in one turn of the event loop before it lets the others
#: have it, even with more requests already read or waiting in its socket: a quiet client's
#: small request waits for at most about this much per busy connection, plus one request.
TURN_SECONDS = 0.002
#: Bytes of answers a connection may hold that the socket has not taken yet; past it, the
#: connection reads no further request until they have gone. Kafka holds one answer per
#: connection; this bounds what a client that pipelines requests without reading the answers
#: costs the broker, whatever their size.
MAX_QUEUED_BYTES = 1 << 20
_IOV_MAX = 1024  # buffers one sendmsg takes (Linux's UIO_MAXIOV)
#: Bytes of a file region read at a time on a TLS connection (no sendfile there).
TLS_READ_CHUNK = 256 * 1024
#: Deferred answers a connection holds before it waits for the oldest (the requests of a
#: pipelining client waiting together for their fsyncs).
MAX_DEFERRED = 32


class _Pending:
    """A deferred answer's place in the queue, until its bytes are known."""

    __slots__ = ("waiting",)

    def __init__(self, waiting: asyncio.Future) -> None:
        self.waiting = waiting

    def __len__(self) -> int:
        return 0


class Connection:
    def __init__(self, broker, sock: socket.socket | TlsSocket, peer: str, listener_name: str) -> None:
        self.broker = broker
        self.sock = sock
        self.tls = type(sock) is TlsSocket
        self.fd = sock.fileno()
        self.peer = peer
        self.listener_name = listener_name
        #: When its SASL session ends (loop time; connections.max.reauth.ms), if it does: a
        #: request other than a re-authentication after it closes the connection (KIP-368).
        self.session_expires: float | None = None
        self.sasl_mechanism: str | None = None
        #: A SASL exchange in progress in the request stream (authenticator.py): a
        #: re-authentication, or a broker's login on a listener without SASL.
        self.reauthentication = None
        #: Who the client is (Kafka's KafkaPrincipal): User:<name> once SASL authenticated it,
        #: or the mapped subject of its TLS client certificate.
        self.principal = "User:ANONYMOUS"
        #: The broker id this connection logged in as with the cluster's inter-broker identity
        #: (brook.security.broker_identity); None for everyone else.
        self.peer_broker_id: int | None = None
        self.loop = asyncio.get_running_loop()
        self.closed = False
        self._task: weakref.ref[asyncio.Task] | None = None
        self.busy = False  # a handler is working (a long-polling Fetch is not idle; a stalled write is)
        self.last_active = self.loop.time()
        self._out: list = []  # answers not yet handed to the socket, in order (bytes, views)
        self._out_bytes = 0  # their length
        self._flush_scheduled = False
        #: The flush callback left answers queued (the socket was full): a writer callback
        #: sends the rest as the socket takes it, while the task waits for its handler.
        self._writer_armed = False
        self._task_writing = False  # the task waits for room in the socket (its own writer)
        self._write_error: OSError | None = None  # from a send the flush callback made
        #: (api key, time received) of the requests whose answers are still queued: their
        #: time is counted when the queue has gone to the socket (Kafka's TotalTimeMs).
        self._answered: list[tuple[int, float]] = []
        self._pending: list[_Pending] = []  # deferred answers not ready, oldest first
        #: Over a client quota: nothing more is read from the client until this loop time
        #: (set by brook.broker.quotas.throttling; 0.0: not throttled).
        self.muted_until = 0.0

    @property
    def task(self) -> asyncio.Task | None:
        """The task running `run` (whoever starts it sets this)."""
        return self._task() if self._task is not None else None

    @task.setter
    def task(self, task: asyncio.Task) -> None:
        # Held weakly: a cancelled task keeps its exception, whose traceback holds run()'s
        # frame and so this connection; a strong reference back would make a cycle that only
        # the cycle collector frees (and never, once frozen: see heap.py).
        self._task = weakref.ref(task)

    async def run(self) -> None:
        decoder = FrameDecoder(self.broker.config.socket_request_max_bytes)
        recv_into = self.sock.recv_into
        turn = perf_counter()  # when this connection's turn of the event loop began
        try:
            security = self.broker.config.listener_security.get(self.listener_name)
            if security is not None:
                if self.tls and not await self._tls_handshake(security.tls):
                    return
                if security.sasl and not await authenticate(self, security):
                    return
            while True:
                try:
                    n = recv_into(decoder.recv_buffer())
                except BlockingIOError:
                    decoder.release()  # an idle connection holds no receive buffer
                    await self._readable()
                    turn = perf_counter()
                    continue
                if n == 0:
                    await self._drain()  # the deferred answers to what it sent before
                    return
                self.last_active = self.loop.time()
                received = perf_counter()  # the time of the requests this read completes
                handled = 0
                frames = decoder.received(n)
                decoder.release()  # the frames are copies (or buffers of their own)
                for frame in frames:
                    if not await self._handle(frame, received):
                        await self._drain()  # the answers to the requests before it
                        return
                    handled += 1
                    if self.muted_until:
                        await self._sit_out_throttle()
                    if self._out_bytes > MAX_QUEUED_BYTES:
                        await self._drain()
                    if handled % YIELD_EVERY == 0 or perf_counter() - turn > TURN_SECONDS:
                        await self._drain(deferred=False)
                        await asyncio.sleep(0)  # let other connections in
                        turn = perf_counter()
                # Deferred answers are not waited for: the next requests are read and handled
                # meanwhile (their fsyncs shared), up to MAX_DEFERRED of them.
                await self._drain(deferred=False)
        except FrameTooLargeError as exc:
            # A TLS ClientHello starts 0x16 0x03: read as a size, a frame of about 370 MB.
            hint = " (a TLS client on a plaintext listener?)" if exc.size >> 16 == 0x1603 else ""
            log.warning("closing connection from %s: %s%s", self.peer, exc, hint)
        except InvalidFrameError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
        except (ConnectionError, TimeoutError):
            pass
        except OSError as exc:
            if exc.errno not in (errno.EBADF, errno.ENOTCONN, errno.EPIPE, errno.ECONNRESET):
                log.warning("connection from %s failed: %s", self.peer, exc)
        finally:
            self.close()

    async def _tls_handshake(self, tls) -> bool:
        """The TLS handshake, then the principal of the client's certificate; False (one log
        line) if the connection is to be closed."""
        sock = self.sock
        try:
            while True:
                try:
                    sock.handshake()
                    break
                except WantWrite:
                    await self._writable()
                except BlockingIOError:
                    await self._readable()
            self.principal = tls.principal(sock)
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):  # port probes, health checks
            log.debug("connection from %s on listener %s closed during the TLS handshake", self.peer,
                      self.listener_name)
            return False
        except (ssl.SSLError, NoMatchingRule) as exc:
            log.warning("Failed authentication with %s on listener %s (SSL handshake failed): %s",
                        self.peer, self.listener_name, getattr(exc, "reason", None) or exc)
            return False
        self.last_active = self.loop.time()
        if self.principal != "User:ANONYMOUS":
            log.info("authenticated %s from %s on listener %s with a TLS client certificate (%s)",
                     self.principal, self.peer, self.listener_name, sock.version())
        return True

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
                self._write(encode_response(API_VERSIONS_KEY, 0, exc.correlation_id, body))
                return True
            log.warning("closing connection from %s: %s", self.peer, exc)
            return False
        except MalformedRequestError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
            return False
        if self.session_expires is not None and self._session_expired(request.api_key):
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
            if type(response) is Deferred:
                await self._defer(response, request, received)
                return True
            if not isinstance(response, RawResponse):
                response = encode_response(request.api_key, request.api_version,
                                           request.correlation_id, response)
        except CloseConnection as exc:
            if exc.answer is not None:  # e.g. a failed re-authentication's, then the close
                self._write(encode_response(request.api_key, request.api_version,
                                            request.correlation_id, exc.answer))
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
            pieces = response.pieces
            if len(pieces) == 1 and type(pieces[0]) is bytes:  # a frame encoded by its handler
                self._write(pieces[0])
            else:
                await self._write_pieces(pieces)
        else:
            self._write(response)
        if metrics is not None:
            if self._out:
                self._answered.append((request.api_key, received))
            else:
                metrics.request_done(request.api_key, received)
        return True

    async def _sit_out_throttle(self) -> None:
        """KIP-219: the throttled answer goes out at once, then the client waits (not idle)."""
        await self._drain()
        self.busy = True
        try:
            await asyncio.sleep(max(0.0, self.muted_until - self.loop.time()))
        finally:
            self.busy = False
            self.muted_until = 0.0

    def _session_expired(self, api_key: int) -> bool:
        if api_key in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY) or self.loop.time() < self.session_expires:
            return False
        log.info("closing connection from %s (%s) on listener %s: its SASL session expired without "
                 "re-authentication (connections.max.reauth.ms)", self.peer, self.principal,
                 self.listener_name)
        return True

    # ------------------------------------------------------------ deferred answers

    async def _defer(self, deferred: Deferred, request, received: float) -> None:
        """Keep the answer's place in the queue; it is encoded into it once ready."""
        if len(self._pending) >= MAX_DEFERRED:
            await asyncio.wait((self._pending[0].waiting,))
        pending = _Pending(deferred.waiting)
        self._pending.append(pending)
        self._out.append(pending)
        deferred.waiting.add_done_callback(
            lambda _, p=pending: self._resolved(p, deferred, request, received))

    def _resolved(self, pending: _Pending, deferred: Deferred, request, received: float) -> None:
        """A deferred answer is ready: its bytes take its place, and what is ready is sent."""
        if self.closed:  # close() let go of every place in the queue
            return
        self._pending.remove(pending)
        try:
            response = deferred.build(deferred.waiting)
            if isinstance(response, RawResponse):  # encoded by its handler (bytes only)
                data = b"".join(response.pieces)
            else:
                data = encode_response(request.api_key, request.api_version,
                                       request.correlation_id, response)
        except Exception as exc:  # no answer can be given: the client must not take it as one
            log.warning("closing connection from %s: a deferred answer failed: %r", self.peer, exc)
            self.close()
            return
        api_key = request.api_key
        try:
            i = self._out.index(pending)
        except ValueError:
            return
        self._out[i] = data
        self._out_bytes += len(data)
        if self.broker.metrics is not None:
            self._answered.append((api_key, received))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    # ------------------------------------------------------------ writing

    def _write(self, data: bytes) -> None:
        """Queue an answer (see the module's docstring for when it is sent)."""
        self._out.append(data)
        self._out_bytes += len(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        """The event loop's turn, this connection's task waiting: send what is queued, as far
        as the socket takes it now; what it does not take goes out as it makes room (a
        handler that waits, a long-polling Fetch or a parked JoinGroup, must not hold back
        the answers before it)."""
        self._flush_scheduled = False
        if (self._out and not self.closed and self._write_error is None
                and not self._writer_armed and not self._task_writing):
            self._send_ready()
            if self._sendable() and self._write_error is None and not self.closed:
                self.loop.add_writer(self.fd, self._send_ready)
                self._writer_armed = True

    def _send_ready(self) -> None:
        """Send what is queued as far as the socket takes it (the flush callback, and the
        writer callback it leaves while answers remain); a send error is kept for the task's
        next `_drain`."""
        if not self.closed and self._write_error is None:
            try:
                self._send_queued()
            except OSError as exc:
                self._write_error = exc  # raised in the task by its next `_drain`
        if self._writer_armed and (not self._sendable() or self._write_error is not None
                                   or self.closed):
            self._disarm_writer()

    def _sendable(self) -> bool:
        """Whether an answer is queued that is ready to go (not behind a deferred one)."""
        return bool(self._out) and type(self._out[0]) is not _Pending

    def _disarm_writer(self) -> None:
        if self._writer_armed:
            self._writer_armed = False
            try:
                self.loop.remove_writer(self.fd)
            except (RuntimeError, OSError, ValueError):  # the loop is closed or the fd gone
                pass

    def _send_queued(self) -> None:
        """One `send` (or `sendmsg`, the pieces not joined) of the queued answers that are
        ready (up to the first deferred one that is not); what the socket does not take stays
        queued."""
        out = self._out
        ready = len(out)
        if self._pending:
            ready = next(i for i, piece in enumerate(out) if type(piece) is _Pending)
            if not ready:
                return
        try:
            n = (self.sock.send(out[0]) if ready == 1
                 else self.sock.sendmsg(out[:min(ready, _IOV_MAX)]))
        except BlockingIOError:
            return
        if n:
            self.last_active = self.loop.time()
            self._out_bytes -= n
        sent = 0
        while sent < ready and n >= len(out[sent]):  # a deferred place is never sent
            n -= len(out[sent])
            sent += 1
        del out[:sent]
        if n:
            out[0] = memoryview(out[0])[n:]
        elif not out and self._answered:
            metrics = self.broker.metrics
            if metrics is not None:
                for api_key, received in self._answered:
                    metrics.request_done(api_key, received)
            self._answered.clear()

    async def _drain(self, deferred: bool = True) -> None:
        """Send every queued answer ready, waiting for room in the socket as long as it takes;
        deferred ones once ready, or (``deferred=False``) up to the first that is not, the
        rest left to the callback that sends it when it is."""
        while True:
            if self._write_error is not None:
                raise self._write_error
            if not self._out:
                self._disarm_writer()
                return
            if type(self._out[0]) is _Pending:
                if not deferred:
                    return
                await asyncio.wait((self._out[0].waiting,))
                await asyncio.sleep(0)  # its done-callback puts its bytes in place
                continue
            self._send_queued()
            if self._out and type(self._out[0]) is not _Pending:
                await self._writable()

    async def _write_pieces(self, pieces) -> None:
        """Queue or send a response of bytes and file regions. Each region's file is duplicated
        before anything is sent (each region pins its segment's descriptor in the cache of
        segment files until then, and releases it once duplicated), so a segment deleted
        or evicted meanwhile is still read from its own file, never from whatever file
        reuses its descriptor number. Before a region, everything queued is sent."""
        fds = {}
        try:
            for piece in pieces:
                if not isinstance(piece, bytes) and piece.fd not in fds:
                    fds[piece.fd] = os.dup(piece.fd)
            for piece in pieces:  # the duplicates are ours: the segments' may be closed now
                if not isinstance(piece, bytes):
                    release = getattr(piece, "release", None)
                    if release is not None:
                        release()
            for piece in pieces:
                if isinstance(piece, bytes):
                    self._write(piece)
                elif self.tls:
                    await self._send_region_encrypted(fds[piece.fd], piece.position, piece.length)
                else:
                    await self._drain()
                    await self._sendfile(fds[piece.fd], piece.position, piece.length)
        finally:
            for fd in fds.values():
                os.close(fd)

    async def _send_region_encrypted(self, fd: int, offset: int, count: int) -> None:
        """A file region on a TLS connection: read in chunks and queued as bytes (TLS must
        encrypt them), at most MAX_QUEUED_BYTES held at a time."""
        while count > 0:
            chunk = os.pread(fd, min(count, TLS_READ_CHUNK), offset)
            if not chunk:  # the file ended early (truncated under us)
                raise ConnectionError("segment file shorter than the region being sent")
            self._write(chunk)
            offset += len(chunk)
            count -= len(chunk)
            if self._out_bytes > MAX_QUEUED_BYTES:
                await self._drain()

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

    async def _readable(self) -> None:
        """Wait until the socket has bytes (or is closed) without lending it a buffer."""
        fut = self.loop.create_future()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        self.loop.add_reader(self.fd, ready)
        try:
            await fut
        finally:
            self.loop.remove_reader(self.fd)

    async def _writable(self) -> None:
        self._disarm_writer()  # the task sends from here on (one writer per descriptor)
        fut = self.loop.create_future()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        self.loop.add_writer(self.fd, ready)
        self._task_writing = True
        try:
            await fut
        finally:
            self._task_writing = False
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
            self._disarm_writer()
            self._pending.clear()  # what they wait for goes on; nothing is sent after close
            self._out.clear()  # nothing is sent after close
            self._out_bytes = 0
            self._answered.clear()
            try:
                self.sock.close()
            except OSError:
                pass
