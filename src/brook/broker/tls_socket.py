"""A non-blocking TLS socket with the calls `Connection` makes of a plain one, so a TLS
connection runs the same loop: `recv_into` and `send` raise BlockingIOError when TLS needs the
socket to become readable or writable, a clean TLS close reads as end of stream, and
`sendmsg` (which `ssl` lacks) sends the buffers joined.

The records of a TLS record batch cannot go from the file to the socket with sendfile (the
kernel would send them unencrypted), so `Connection` reads file regions and sends them as
bytes on TLS connections.
"""

from __future__ import annotations

import ssl

#: The most bytes one `sendmsg` joins: TLS encrypts in records of 16 KiB, so larger joins
#: only copy more. A retried send always starts with the same bytes and is never shorter
#: (the queue only grows at its end), as OpenSSL requires after a partial write.
JOIN_LIMIT = 256 * 1024


class TlsSocket:
    __slots__ = ("ssl",)

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.ssl = sock

    def fileno(self) -> int:
        return self.ssl.fileno()

    def recv_into(self, buffer) -> int:
        try:
            return self.ssl.recv_into(buffer)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise BlockingIOError from None
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return 0  # closed, with or without TLS's close_notify (clients often skip it)

    def send(self, data) -> int:
        try:
            return self.ssl.send(data)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise BlockingIOError from None
        except ssl.SSLEOFError:
            raise ConnectionResetError("the peer closed the TLS connection") from None

    def sendmsg(self, buffers) -> int:
        joined, size = [], 0
        for buf in buffers:
            joined.append(buf)
            size += len(buf)
            if size >= JOIN_LIMIT:
                break
        return self.send(b"".join(joined) if len(joined) > 1 else joined[0])

    def close(self) -> None:
        self.ssl.close()
