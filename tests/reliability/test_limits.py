"""Per-connection limits on a real broker: a client that pipelines requests without reading
the answers is held back by TCP (the broker reads a connection's next frames only after
answering the ones before), so what the broker queues for it stays bounded."""

from __future__ import annotations

import socket
import struct
import time

from tests.support.broker_harness import BrokerProcess, peak_rss_bytes

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 1, -1)  # header v1, no client id, empty body


def test_pipelining_without_reading_is_held_back_and_memory_stays_bounded(tmp_path):
    with BrokerProcess(tmp_path / "broker") as broker:
        before = peak_rss_bytes(broker.proc.pid)
        frame = struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0
        burst = frame * 4096
        with socket.create_connection(("127.0.0.1", broker.port)) as sock:
            sock.setblocking(False)
            sent, stalled_since = 0, None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    sent += sock.send(burst)
                    stalled_since = None
                except BlockingIOError:
                    stalled_since = stalled_since or time.monotonic()
                    if time.monotonic() - stalled_since > 2.0:
                        break  # the broker stopped taking requests from us
                    time.sleep(0.01)
            assert stalled_since is not None, "the broker kept reading requests it cannot answer"
            requests = sent // len(frame)
            # Another client is served meanwhile.
            with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as other:
                other.sendall(frame)
                size = struct.unpack(">i", other.recv(4))[0]
                assert size > 0
        grown = peak_rss_bytes(broker.proc.pid) - before
        # Responses to everything it accepted would be ~requests * 300 bytes; the broker holds
        # at most what the socket buffers let through.
        assert grown < 64 << 20, f"peak RSS grew by {grown} bytes for {requests} requests"
        assert broker.running


def test_announcing_large_frames_costs_the_broker_only_what_is_sent(tmp_path):
    # Ten connections each announce a frame just under socket.request.max.bytes (100 MiB)
    # and send 64 KiB of it. The broker holds what came, not what was announced (it used
    # to allocate the whole frame at its length: a gigabyte here).
    with BrokerProcess(tmp_path / "broker") as broker:
        before = peak_rss_bytes(broker.proc.pid)
        socks = []
        try:
            for _ in range(10):
                s = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
                s.sendall(struct.pack(">i", 100 * 1024 * 1024 - 1) + b"\0" * 65536)
                socks.append(s)
            time.sleep(1.0)
            with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as other:
                frame = struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0
                other.sendall(frame)
                assert struct.unpack(">i", other.recv(4))[0] > 0
        finally:
            for s in socks:
                s.close()
        grown = peak_rss_bytes(broker.proc.pid) - before
        assert grown < 64 << 20, f"peak RSS grew by {grown >> 20} MiB"
        assert broker.running
