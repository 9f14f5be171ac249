"""A broker's connection to another broker, for the requests brokers send each other
(the controller's LeaderAndIsr and UpdateMetadata, a follower's Fetch, a leader's
AlterPartition, a stopping broker's ControlledShutdown): kio entities over one TCP connection,
one request at a time, reconnected on the next request after any failure."""

from __future__ import annotations

import asyncio
import io
import logging
import struct

from kio.serial import entity_reader, entity_writer

from ..protocol.messages import make, response_class

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


class ChannelError(Exception):
    """The request could not be sent or got no answer: the connection is dropped."""


class BrokerChannel:
    def __init__(self, broker_id: int, host: str, port: int, *, client_id: str,
                 timeout_s: float = 30.0, sasl=None, tls=None) -> None:
        self.broker_id = broker_id
        #: An ssl.SSLContext when the inter-broker listener is SSL or SASL_SSL.
        self.tls = tls
        #: ClientCredentials (or a function giving them, read for each connection): each new
        #: connection authenticates before its first request; on a listener without SASL,
        #: with the cluster's inter-broker identity (brook.security.broker_identity).
        self.sasl = sasl
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._correlation = 0

    def retarget(self, host: str, port: int) -> None:
        """The broker now listens elsewhere (it restarted on another port)."""
        if (host, port) != (self.host, self.port):
            self.host, self.port = host, port
            self.close()

    async def request(self, body, timeout_s: float | None = None):
        """Send `body` and return the response entity (ChannelError on any failure)."""
        async with self._lock:
            try:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a
                # cancellation that comes as the answer arrives, and the task asked to stop
                # (a replica fetcher, a controller's sender) then runs on for good.
                async with asyncio.timeout(timeout_s or self.timeout_s):
                    return await self._exchange(body)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
                self.close()
                raise ChannelError(f"request to broker {self.broker_id} at {self.host}:{self.port} "
                                   f"failed: {type(exc).__name__}: {exc}") from None

    async def _exchange(self, body):
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, ssl=self.tls,
                server_hostname=self.host if self.tls is not None else None)
            if self.sasl is not None:
                await self._authenticate()
        return await self._send(body)

    async def _authenticate(self) -> None:
        from ..security.client import SaslClientError, sasl_exchange

        exchange = sasl_exchange(self.sasl() if callable(self.sasl) else self.sasl)
        try:
            request = next(exchange)
            while True:
                request = exchange.send(await self._send(request))
        except StopIteration:
            return
        except SaslClientError as exc:
            raise ValueError(str(exc)) from None

    async def _send(self, body):
        cls = type(body)
        header_cls = cls.__header_schema__
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        entity_writer(header_cls)(buf, make(header_cls, request_api_key=cls.__api_key__,
                                            request_api_version=cls.__version__,
                                            correlation_id=self._correlation,
                                            client_id=self.client_id))
        entity_writer(cls)(buf, body)
        frame = buf.getbuffer()
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        self._writer.write(bytes(frame))
        del frame
        await self._writer.drain()
        (size,) = _SIZE.unpack(await self._reader.readexactly(4))
        data = await self._reader.readexactly(size)
        response_cls = response_class(cls.__api_key__, cls.__version__)
        header, pos = entity_reader(response_cls.__header_schema__)(data, 0)
        if header.correlation_id != self._correlation:
            raise ValueError(f"correlation id {header.correlation_id}, expected {self._correlation}")
        body, _ = entity_reader(response_cls)(data, pos)
        return body

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
