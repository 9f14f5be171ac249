"""The broker's TLS socket over a real socket pair: bytes arrive whole and in order both ways,
whatever the socket takes at a time; a send the socket did not take is offered again and
reported once its encrypted bytes have gone; a peer's close reads as end of stream."""

from __future__ import annotations

import select
import socket
import ssl
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brook.broker.tls_socket import TlsSocket, WantWrite
from brook.security.tls import server_tls
from tests.support.examples import examples
from tests.support.tls_certs import TlsFiles


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return TlsFiles(tmp_path_factory.mktemp("certs"))


def _pair(files: TlsFiles, sndbuf: int = 4096):
    server_raw, client_raw = socket.socketpair()
    server_raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)  # partial sends, often
    server_raw.setblocking(False)
    context = server_tls({"ssl.keystore.location": str(files.broker_keystore)}, "SSL").context
    server = TlsSocket(server_raw, context)
    client_context = ssl.create_default_context(cafile=str(files.ca))
    client = client_context.wrap_socket(client_raw, server_hostname="localhost",
                                        do_handshake_on_connect=False)
    done = threading.Thread(target=client.do_handshake)
    done.start()
    _until(server.handshake, server)
    done.join(10)
    return server, client


def _until(step, sock: TlsSocket):
    """Run `step` until it does not ask to wait, waiting as it asks (as Connection does)."""
    while True:
        try:
            return step()
        except WantWrite:
            select.select([], [sock.fileno()], [], 10)
        except BlockingIOError:
            select.select([sock.fileno()], [], [], 10)


def _send_all(server: TlsSocket, pieces: list[bytes]) -> int:
    """Connection's queue in miniature: what `send` reports is dropped from the front."""
    queue = list(pieces)
    calls = 0
    while queue:
        n = _until(lambda: server.sendmsg(queue), server)
        calls += 1
        while n:
            if n >= len(queue[0]):
                n -= len(queue[0])
                queue.pop(0)
            else:
                queue[0] = queue[0][n:]
                n = 0
    return calls


def _read(client: ssl.SSLSocket, size: int, out: list) -> None:
    buf = bytearray()
    while len(buf) < size:
        chunk = client.recv(65536)
        if not chunk:
            break
        buf += chunk
    out.append(bytes(buf))


@given(st.lists(st.integers(1, 300_000), min_size=1, max_size=8), st.integers(0, 2**32))
@settings(max_examples=examples(20), deadline=None)
def test_what_is_sent_arrives_whole_and_in_order_through_partial_sends(files, sizes, seed):
    import random
    rnd = random.Random(seed)
    pieces = [rnd.randbytes(n) for n in sizes]
    server, client = _pair(files)
    try:
        got: list = []
        reader = threading.Thread(target=_read, args=(client, sum(sizes), got))
        reader.start()
        _send_all(server, pieces)
        reader.join(30)
        assert got and got[0] == b"".join(pieces)
    finally:
        client.close()
        server.close()


def test_received_bytes_arrive_in_any_buffer_size_and_a_close_reads_as_end(files):
    server, client = _pair(files)
    data = bytes(range(256)) * 4000  # 1 MB: many TLS records, many socket reads
    def send_and_close():
        client.sendall(data)
        try:
            client.unwrap()  # sends close_notify, then waits for the broker's, which never comes
        except ssl.SSLEOFError:
            pass
        client.close()

    sender = threading.Thread(target=send_and_close)
    sender.start()
    got = bytearray()
    buf = memoryview(bytearray(7000))  # not a multiple of anything TLS uses
    while True:
        n = _until(lambda: server.recv_into(buf), server)
        if n == 0:
            break
        got += buf[:n]
    server.close()  # the client's unwrap waits for a close_notify the broker does not send
    sender.join(10)
    assert bytes(got) == data


def test_a_peer_gone_without_close_notify_reads_as_end(files):
    server, client = _pair(files)
    client.sendall(b"last words")
    client.close()  # no TLS close_notify: the socket just closes
    got = bytearray()
    buf = memoryview(bytearray(100))
    while (n := _until(lambda: server.recv_into(buf), server)):
        got += buf[:n]
    server.close()
    assert bytes(got) == b"last words"
