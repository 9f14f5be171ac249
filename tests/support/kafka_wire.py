"""A minimal Kafka protocol client for tests that need exact requests and error codes:
kio entities in, kio entities out, over a plain blocking socket."""

from __future__ import annotations

import io
import socket
import ssl
import struct

from kio.serial import entity_reader, entity_writer

from brook.protocol.messages import make


def frame(body, correlation_id: int, client_id: str = "wire-test") -> bytes:
    """A request entity as one size-prefixed frame with its header."""
    cls = type(body)
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, make(header_cls, request_api_key=cls.__api_key__,
                                        request_api_version=cls.__version__,
                                        correlation_id=correlation_id, client_id=client_id))
    entity_writer(cls)(buf, body)
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


class WireClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0, ssl_context=None) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        if ssl_context is not None:  # a TLS listener: the handshake happens here
            self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def encode(self, body) -> bytes:
        self.correlation_id += 1
        return frame(body, self.correlation_id)

    def send(self, body) -> int:
        self.sock.sendall(self.encode(body))
        return self.correlation_id

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv_exactly(4))[0]
        return self._recv_exactly(size)

    def _recv_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            out += chunk
        return bytes(out)

    def recv(self, api_key: int, version: int, expect_correlation_id: int | None = None):
        frame = self.recv_frame()
        from brook.protocol.messages import response_class
        cls = response_class(api_key, version)
        header, offset = entity_reader(cls.__header_schema__)(frame, 0)
        if expect_correlation_id is not None:
            assert header.correlation_id == expect_correlation_id
        body, _ = entity_reader(cls)(frame, offset)
        return body

    def request(self, body):
        corr = self.send(body)
        return self.recv(type(body).__api_key__, type(body).__version__, corr)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
            return True
        except socket.timeout:
            return False


def request_class(api_key: int, version: int):
    """kio's request entity, or brook's for the ZooKeeper-era inter-broker APIs."""
    from brook.protocol.messages import request_class as brook_request_class
    return brook_request_class(api_key, version)
