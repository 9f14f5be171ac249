"""Coverage-guided fuzzing of the broker's request path with atheris (libFuzzer).

Each input is sent on a fresh connection to a broker running in this process (the same
`Connection` code that serves clients, over a socket pair), so every request parser and handler
runs on it. Coverage of brook's modules steers the fuzzer toward requests that reach deeper.

An input is either raw bytes sent as they are (frames with any length prefix) or, most of the
time, a well-framed request: its first two bytes pick an API and version the broker supports,
the rest is the request body after a correct header. The body is what gets mutated.

A finding is anything a request must never do to the broker: an exception escaping the
connection (the broker would lose it), or a handler failing with a traceback in the log (a
request that should have been answered with an error code). Either raises, and libFuzzer saves
the input as a ``crash-*`` file.

    .venv/bin/python tests/reliability/fuzz_requests.py -max_total_time=600 [corpus dir ...]

``--seeds DIR`` writes a corpus of one valid request per API and version into DIR and exits.
"""

from __future__ import annotations

import asyncio
import atexit
import io
import logging
import os
import shutil
import socket
import struct
import sys
import tempfile

import atheris

with atheris.instrument_imports(include=["brook"]):
    from brook.broker.broker import Broker
    from brook.broker.config import BrokerConfig
    from brook.broker.connection import Connection

from kio.serial import entity_writer

from brook.protocol.messages import make, request_class

MAX_REQUEST = 1 << 20
RAW = 0xFF  # a first byte of 0xFF: the rest is sent as it is
SEEDS_PER_API = 4
SETTLE_S = 0.05  # how long one input may keep the connection busy (a Fetch may long-poll)


class Finding(Exception):
    """A request did something no request may do to the broker."""


class TracebackLog(logging.Handler):
    """Keeps every log record that carries an exception: a handler that failed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


def apis(broker: Broker) -> list[tuple[int, int]]:
    return sorted((key, v) for key, api in broker.apis.items()
                  for v in range(api.min_version, api.max_version + 1))


def header_bytes(key: int, version: int) -> bytes:
    """The request header (v1 or v2, as the API and version use) with a correlation id."""
    header_cls = request_class(key, version).__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, make(header_cls, request_api_key=key, request_api_version=version,
                                        correlation_id=7, client_id="fuzz"))
    return buf.getvalue()


class Target:
    """A broker in this process and the code that sends it one input."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="brook-fuzz-")
        atexit.register(shutil.rmtree, self.dir, True)
        config = BrokerConfig.from_props({
            "log.dirs": self.dir,
            "listeners": "PLAINTEXT://127.0.0.1:9092",
            "socket.request.max.bytes": str(MAX_REQUEST),
            "auto.create.topics.enable": "false",
            "offsets.topic.num.partitions": "2",
        })
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.broker = Broker(config)
        self.broker.open()
        self.loop.run_until_complete(self._start_groups())
        self.apis = apis(self.broker)
        self.headers = {(k, v): header_bytes(k, v) for k, v in self.apis}
        self.tracebacks = TracebackLog()
        logging.getLogger("brook").addHandler(self.tracebacks)
        logging.getLogger("brook").setLevel(logging.WARNING)
        logging.getLogger("brook").propagate = False  # closed connections are expected here

    async def _start_groups(self) -> None:
        self.broker.coordinator.start()

    def frame(self, data: bytes) -> bytes:
        if not data or data[0] == RAW:
            return data[1:]
        key, version = self.apis[int.from_bytes(data[:2], "big") % len(self.apis)]
        payload = self.headers[key, version] + data[2:]
        return struct.pack(">i", len(payload)) + payload

    def send(self, data: bytes) -> None:
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        theirs.setblocking(False)
        try:
            self.loop.run_until_complete(self._exchange(ours, theirs, self.frame(data)))
        finally:
            ours.close()
            theirs.close()
        if self.tracebacks.records:
            record = self.tracebacks.records[0]
            self.tracebacks.records.clear()
            raise Finding(logging.Formatter().format(record))

    async def _exchange(self, ours: socket.socket, theirs: socket.socket, data: bytes) -> None:
        conn = Connection(self.broker, ours, "fuzz", "PLAINTEXT")
        task = asyncio.ensure_future(conn.run())
        await self.loop.sock_sendall(theirs, data)
        theirs.shutdown(socket.SHUT_WR)
        end = self.loop.time() + SETTLE_S
        while not task.done() and self.loop.time() < end:
            try:
                if not theirs.recv(1 << 20):
                    break
            except BlockingIOError:
                await asyncio.sleep(0.001)
        if not task.done():
            conn.close()
            task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # the connection let an exception out: the broker would die
            raise Finding(f"{type(exc).__name__} escaped the connection: {exc}") from exc


def write_seeds(directory: str) -> None:
    """A few structurally valid request bodies per API and version (hypothesis's simplest
    example of the request entity, then random ones with arrays filled), each an input the
    fuzzer reads."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from kio.static.primitive import Records

    st.register_type_strategy(Records, st.binary(max_size=64))
    target = Target()
    os.makedirs(directory, exist_ok=True)
    for index, (key, version) in enumerate(target.apis):
        cls = request_class(key, version)
        bodies: list[bytes] = []

        @settings(max_examples=SEEDS_PER_API, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(st.from_type(cls))
        def collect(entity) -> None:
            buf = io.BytesIO()
            entity_writer(cls)(buf, entity)
            bodies.append(buf.getvalue())

        collect()
        for n, body in enumerate(dict.fromkeys(bodies)):
            with open(os.path.join(directory, f"{key:03d}-v{version:02d}-{n}"), "wb") as f:
                f.write(index.to_bytes(2, "big") + body)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--seeds":
        write_seeds(sys.argv[2])
        return
    target = Target()
    atheris.Setup(sys.argv, target.send)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
