"""One blocking connection to a broker: kio request entities in, response entities out."""

from __future__ import annotations

import io
import socket
import struct

from kio.serial import entity_reader, entity_writer

from ..protocol.messages import make, response_class
from ..security.client import ClientCredentials, SaslClientError, sasl_exchange
from ..security.client_settings import ClientSecurity

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")


class KafkaClientError(RuntimeError):
    """The broker could not be reached, or answered with something that is not a response."""


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"invalid bootstrap server {item.strip()!r}: expected host:port")
        out.append((host.strip("[]"), int(port)))
    return out


class BrokerConnection:
    """Requests one at a time over one socket. Any socket error closes it; the caller
    (the fetcher) reconnects, and treats the failure as retriable."""

    def __init__(self, host: str, port: int, timeout: float, client_id: str = "brook",
                 security: ClientSecurity | None = None) -> None:
        self.host, self.port = host, port
        self.timeout = timeout
        self.client_id = client_id
        self.correlation_id = 0
        self._sent: list[tuple[int, type]] = []
        self._buffer = bytearray(0)
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise KafkaClientError(f"cannot connect to {host}:{port}: {exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if security is not None and security.tls:
            try:
                self.sock = security.ssl_context().wrap_socket(self.sock, server_hostname=host)
            except (OSError, ValueError) as exc:
                self.close()
                raise KafkaClientError(f"TLS with {host}:{port} failed: {exc}") from None
        if security is not None and security.sasl:
            self._authenticate(security.credentials())

    def _authenticate(self, credentials: ClientCredentials) -> None:
        exchange = sasl_exchange(credentials)
        try:
            request = next(exchange)
            while True:
                request = exchange.send(self.request(request))
        except StopIteration:
            return
        except SaslClientError as exc:
            self.close()
            raise KafkaClientError(f"{self.host}:{self.port}: {exc}") from None

    def close(self) -> None:
        self.sock.close()

    def request(self, body, timeout: float | None = None, response_cls: type | None = None):
        """Send a kio request entity and return the response entity (read as `response_cls`
        when given: an entity of the same layout, see `brook.protocol.lenient`)."""
        self.send(body)
        return self.receive(type(body), timeout, response_cls)

    def send(self, body) -> None:
        """Send a request without waiting for its answer (`receive` reads it later; answers
        come in request order)."""
        cls = type(body)
        self.correlation_id += 1
        header_cls = cls.__header_schema__
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        entity_writer(header_cls)(buf, make(header_cls, request_api_key=cls.__api_key__,
                                            request_api_version=cls.__version__,
                                            correlation_id=self.correlation_id,
                                            client_id=self.client_id))
        entity_writer(cls)(buf, body)
        frame = buf.getbuffer()
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        try:
            self.sock.settimeout(self.timeout)
            self.sock.sendall(frame)
        except OSError as exc:
            self.close()
            raise KafkaClientError(f"request to {self.host}:{self.port} failed: {exc}") from None
        self._sent.append((self.correlation_id, cls))

    def receive(self, cls: type, timeout: float | None = None, response_cls: type | None = None):
        """The answer to the oldest request sent and not yet received (of class `cls`)."""
        data = bytes(self.receive_raw(cls, timeout))
        response_cls = response_cls or response_class(cls.__api_key__, cls.__version__)
        _, pos = entity_reader(response_cls.__header_schema__)(data, 0)
        body, _ = entity_reader(response_cls)(data, pos)
        return body

    def receive_raw(self, cls: type, timeout: float | None = None) -> memoryview:
        """The bytes of the next answer (response header included), in a buffer the
        connection reuses: valid until the next receive."""
        expected, sent_cls = self._sent.pop(0)
        assert sent_cls is cls, (sent_cls, cls)
        try:
            self.sock.settimeout(timeout or self.timeout)
            (size,) = _SIZE.unpack(self._exactly(4))
            data = self._exactly(size)
        except OSError as exc:
            self.close()
            raise KafkaClientError(f"request to {self.host}:{self.port} failed: {exc}") from None
        (correlation,) = _CORRELATION.unpack_from(data, 0)
        if correlation != expected:
            self.close()
            raise KafkaClientError(f"{self.host}:{self.port} answered request "
                                   f"{expected} with {correlation}")
        return data

    @property
    def waiting(self) -> int:
        """Requests sent whose answers have not been received."""
        return len(self._sent)

    def _exactly(self, n: int) -> memoryview:
        # One buffer for every answer: a large Fetch answer is not allocated (and its pages
        # faulted in) anew each time.
        if len(self._buffer) < n:
            self._buffer = bytearray(max(n, 2 * len(self._buffer)))
        view = memoryview(self._buffer)[:n]
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise ConnectionError("the broker closed the connection")
            got += k
        return view.toreadonly()
