"""Serving the metrics over HTTP: prometheus_client's threading WSGI server on a thread of
its own, and a WSGI application that answers as prometheus_client's does (OPTIONS, 405 for
other methods than GET, an empty /favicon.ico, metrics on any other path, ``name[]``, gzip
when accepted), sending the body in the pieces it was written in.
"""

from __future__ import annotations

import logging
import socket
import threading
import zlib
from collections.abc import Callable
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.exposition import ThreadingWSGIServer, gzip_accepted

log = logging.getLogger(__package__)

#: gzip level of compressed scrapes (Prometheus asks for gzip): level 1 compresses 100,000 lag
#: series (7 MB) in ~35 ms to ~5 %; prometheus_client's level 9 takes ~0.45 s for ~3.5 %.
GZIP_LEVEL = 1

#: (Accept header, ``name[]`` values or None) -> (the body's pieces, content type).
Exposition = Callable[[str | None, list[str] | None], tuple[list[bytes], str]]


class MetricsServer:
    """An HTTP server of the metrics on a thread of its own, until `stop`."""

    def __init__(self, host: str, port: int, exposition: Exposition) -> None:
        """Listen on host:port (all interfaces when host is empty; raises OSError if it
        cannot) and serve what `exposition` gives."""
        addr = host or "0.0.0.0"
        try:
            family, addr = _address_family(addr, port)

            class Server(ThreadingWSGIServer):
                address_family = family

            self._server = make_server(addr, port, make_app(exposition), Server,
                                       handler_class=_QuietHandler)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot serve metrics on {host or '0.0.0.0'}:{port}: "
                                     f"{exc.strerror or exc}") from None
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="brook-metrics")
        self._thread.start()
        log.info("serving Prometheus metrics on http://%s:%d/metrics", host or "0.0.0.0", port)

    @property
    def port(self) -> int:
        return self._server.server_port

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def make_app(exposition: Exposition):
    """The WSGI application serving what `exposition` gives, as prometheus_client's does."""

    def app(environ, start_response):
        method = environ["REQUEST_METHOD"]
        headers: list[tuple[str, str]] = []
        if method == "OPTIONS":
            status, headers, body = "200 OK", [("Allow", "OPTIONS,GET")], b""
        elif method != "GET":
            status = "405 Method Not Allowed"
            headers = [("Allow", "OPTIONS,GET")]
            body = f"# HTTP {status}: {method}; use OPTIONS or GET\n".encode()
        elif environ["PATH_INFO"] == "/favicon.ico":
            status, body = "200 OK", b""
        else:
            names = parse_qs(environ.get("QUERY_STRING", "")).get("name[]")
            parts, content_type = exposition(environ.get("HTTP_ACCEPT"), names)
            status, headers = "200 OK", [("Content-Type", content_type)]
            if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING")):
                parts = _gzip(parts)
                headers.append(("Content-Encoding", "gzip"))
            headers.append(("Content-Length", str(sum(map(len, parts)))))
            start_response(status, headers)
            return parts
        start_response(status, headers)
        return [body]

    return app


def _gzip(parts: list[bytes]) -> list[bytes]:
    """The parts compressed as one gzip stream, each part let go once it is compressed."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts.reverse()
    out = []
    while parts:
        piece = compressor.compress(parts.pop())
        if piece:
            out.append(piece)
    out.append(compressor.flush())
    return out


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's name
        pass


def _address_family(addr: str, port: int) -> tuple[int, str]:
    """The address family and address to bind (an IPv6 host gets an IPv6 socket)."""
    family, _, _, _, sockaddr = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM,
                                                   flags=socket.AI_PASSIVE)[0]
    return family, sockaddr[0]
