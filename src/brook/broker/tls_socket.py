"""A non-blocking TLS connection with the calls `Connection` makes of a plain socket, so a TLS
connection runs the same loop: `recv_into` and `send` raise BlockingIOError when the socket
must become readable (or, `WantWrite`, writable) first, a closed connection reads as end of
stream, and `sendmsg` sends the buffers joined.

TLS runs in memory (`ssl.SSLObject` between two `ssl.MemoryBIO`s) over the plain socket,
rather than through `ssl.SSLSocket`: the socket is read in large pieces (an SSLSocket reads
each 16 KiB TLS record with two system calls and raises an exception whenever the next one
has not arrived), which halves the broker's CPU for receiving a produce over TLS.

Sending keeps Kafka's (and OpenSSL's) rule for a write that did not complete: the same bytes
are offered again. Encrypted bytes the socket did not take wait here, and the plaintext they
carry is reported sent only once they have all gone; until then `send` raises BlockingIOError,
so the connection's queue (whose first bytes are those same bytes) waits for the socket.

The records of a Fetch cannot go from the file to the socket with sendfile (the kernel would
send them unencrypted), so `Connection` reads file regions and sends them as bytes on TLS
connections.
"""

from __future__ import annotations

import socket
import ssl

#: The most plaintext one `send` encrypts: TLS encrypts in records of 16 KiB, so larger
#: pieces only hold more bytes waiting for the socket.
JOIN_LIMIT = 256 * 1024
#: The most bytes read from the socket at a time (many TLS records).
RECV_SIZE = 256 * 1024


class WantWrite(BlockingIOError):
    """Wait until the socket is writable (encrypted bytes wait for it)."""


class TlsSocket:
    __slots__ = ("sock", "tls", "_incoming", "_outgoing", "_unsent", "_owed")

    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        self.sock = sock
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._unsent = memoryview(b"")  # encrypted bytes the socket has not taken yet
        self._owed = 0  # plaintext bytes those carry, reported once they have gone

    def fileno(self) -> int:
        return self.sock.fileno()

    def handshake(self) -> None:
        """The TLS handshake, as far as the socket allows: BlockingIOError to wait for
        readable, WantWrite for writable; ssl.SSLError if it fails."""
        while True:
            try:
                self.tls.do_handshake()
            except ssl.SSLWantReadError:
                self._send_unsent()
                self._receive()
                continue
            self._send_unsent()  # the handshake's last flight (and TLS 1.3 session tickets)
            return

    def recv_into(self, buffer) -> int:
        while True:
            try:
                return self.tls.read(len(buffer), buffer)
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return 0  # closed, with or without TLS's close_notify (clients often skip it)
            if self._outgoing.pending:  # TLS's own messages (a key update) go out first
                try:
                    self._send_unsent()
                except BlockingIOError:
                    pass
            try:
                self._receive()
            except ConnectionResetError:
                return 0

    def _receive(self) -> None:
        data = self.sock.recv(RECV_SIZE)  # BlockingIOError: nothing yet
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()

    def send(self, data) -> int:
        if self._unsent or self._outgoing.pending:
            self._send_unsent()  # WantWrite while they wait for the socket
            if self._owed:  # `data` starts with the plaintext they carried
                owed, self._owed = self._owed, 0
                return owed
        chunk = memoryview(data)[:JOIN_LIMIT]
        try:
            self.tls.write(chunk)
        except ssl.SSLEOFError:
            raise ConnectionResetError("the peer closed the TLS connection") from None
        try:
            self._send_unsent()
        except WantWrite:
            self._owed = len(chunk)
            raise
        return len(chunk)

    def sendmsg(self, buffers) -> int:
        joined, size = [], 0
        for buf in buffers:
            joined.append(buf)
            size += len(buf)
            if size >= JOIN_LIMIT:
                break
        return self.send(b"".join(joined) if len(joined) > 1 else joined[0])

    def _send_unsent(self) -> None:
        if self._outgoing.pending:
            self._unsent = memoryview(bytes(self._unsent) + self._outgoing.read())
        while self._unsent:
            try:
                n = self.sock.send(self._unsent)
            except BlockingIOError:
                raise WantWrite from None
            self._unsent = self._unsent[n:]

    def getpeercert(self):
        return self.tls.getpeercert()

    def version(self) -> str | None:
        return self.tls.version()

    def close(self) -> None:
        self.sock.close()
