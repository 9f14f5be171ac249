"""What connections cost and how many one address may hold: receive buffers are lent only
while bytes are in them (an idle connection holds none), `max.connections.per.ip` and its
overrides as in Kafka (real broker processes, raw sockets)."""

from __future__ import annotations

import socket
import struct
import time

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from brook.protocol.messages import make
from tests.support.kafka_wire import WireClient, frame, request_class


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


API_VERSIONS = frame(make(request_class(18, 3), client_software_name="t", client_software_version="1"), 1)


def _open_idle(port: int, n: int) -> list[socket.socket]:
    """`n` connections that each asked ApiVersions once, got the answer, and went quiet."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(API_VERSIONS)
        socks.append(s)
    for s in socks:
        s.settimeout(10)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        assert len(s.recv(size, socket.MSG_WAITALL)) == size
    return socks


def test_idle_connections_hold_no_receive_buffer_and_memory_is_reused_after_they_close(broker_factory):
    broker = broker_factory()
    pid = broker.proc.pid
    n = 2000
    time.sleep(0.5)
    base = _rss_kib(pid)
    socks = _open_idle(broker.port, n)
    time.sleep(0.5)
    held = _rss_kib(pid)
    for s in socks:
        s.close()
    time.sleep(1.0)
    after = _rss_kib(pid)
    socks = _open_idle(broker.port, n)  # a second wave reuses what the first left
    time.sleep(0.5)
    again = _rss_kib(pid)
    for s in socks:
        s.close()
    per_connection = (held - base) / n
    print(f"\nbroker RSS: {base} KiB, with {n} idle connections {held} KiB "
          f"({per_connection:.1f} KiB each), after they closed {after} KiB, "
          f"with {n} more {again} KiB")
    assert per_connection < 16, per_connection  # was 67 KiB: a 64 KiB buffer each, for life
    assert after <= held + 1024
    assert again - after < (held - base) / 4 + 2048, (after, again)
    with WireClient(broker.bootstrap) as w:  # and the broker still answers
        m = load_payload_module(18, 3, EntityType.request)
        assert w.request(make(m.ApiVersionsRequest, client_software_name="t",
                              client_software_version="1")).error_code == ErrorCode.none


def _connect_from(source: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def _served(s: socket.socket) -> bool:
    """The broker answers ApiVersions on `s` (False: it closed the connection)."""
    s.settimeout(5)
    try:
        s.sendall(API_VERSIONS)
        head = s.recv(4, socket.MSG_WAITALL)
    except (ConnectionResetError, BrokenPipeError):
        return False
    if len(head) < 4:
        return False
    size = struct.unpack(">i", head)[0]
    return len(s.recv(size, socket.MSG_WAITALL)) == size


def test_max_connections_per_ip_and_its_overrides(broker_factory):
    broker = broker_factory({"max.connections.per.ip": 2,
                             "max.connections.per.ip.overrides": "127.0.0.2:4,localhost:3"})
    time.sleep(0.3)  # the harness's readiness probe has been closed and forgotten
    first = [_connect_from("127.0.0.1", broker.port) for _ in range(4)]
    assert [_served(s) for s in first] == [True, True, True, False]  # localhost is 127.0.0.1: 3
    other = [_connect_from("127.0.0.2", broker.port) for _ in range(5)]
    assert [_served(s) for s in other] == [True, True, True, True, False]
    assert "Rejected connection from 127.0.0.1, address already has the configured maximum of 3 " \
           "connections" in broker.stderr_tail()
    for s in first + other:
        s.close()
    time.sleep(0.3)  # their slots are free again
    again = _connect_from("127.0.0.1", broker.port)
    assert _served(again)
    again.close()


def test_max_connections_per_ip_alone(broker_factory):
    broker = broker_factory({"max.connections.per.ip": 1})
    time.sleep(0.3)
    a, b = _connect_from("127.0.0.1", broker.port), _connect_from("127.0.0.1", broker.port)
    assert _served(a) and not _served(b)
    c = _connect_from("127.0.0.3", broker.port)  # another address has its own count
    assert _served(c)
    for s in (a, b, c):
        s.close()
