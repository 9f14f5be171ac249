"""The nemesis's network: a partition cuts exactly the pairs it names, both ways, the control
address keeps reaching every node, and heal() restores everything."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.chaos.net import Network, missing_reason

PORT = 7000


@pytest.fixture
def net():
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    network = Network(["a", "b", "c"]).up()
    servers = []
    try:
        for name in network.nodes:  # a TCP listener per node, for reachability probes
            servers.append(subprocess.Popen(
                [*network.prefix(name), sys.executable, "-c",
                 "import socket,sys; s=socket.create_server((sys.argv[1], int(sys.argv[2])));\n"
                 "while True: s.accept()[0].close()", network.addresses[name], str(PORT)]))
        time.sleep(0.5)
        yield network
    finally:
        for server in servers:
            server.kill()
            server.wait()
        network.down()
        assert not network.exists()


def reaches(net: Network, src: str | None, dst: str) -> bool:
    """Whether a TCP connection from node ``src`` (None: the control namespace) to ``dst``
    succeeds within half a second."""
    prefix = net.prefix(src) if src else []
    probe = ("import socket,sys\ntry: socket.create_connection((sys.argv[1], int(sys.argv[2])), "
             "timeout=0.5).close()\nexcept OSError: sys.exit(1)")
    return subprocess.run([*prefix, sys.executable, "-c", probe, net.addresses[dst], str(PORT)]
                          ).returncode == 0


def test_partition_cuts_the_named_pairs_both_ways_and_heal_restores(net):
    assert reaches(net, "a", "b") and reaches(net, "b", "c")
    net.partition({"a": {"b"}})
    assert not reaches(net, "a", "b")
    assert not reaches(net, "b", "a")
    assert reaches(net, "a", "c") and reaches(net, "c", "b")
    assert all(reaches(net, None, n) for n in net.nodes)  # the control clients are never cut
    net.partition({"a": {"b", "c"}})
    assert not reaches(net, "c", "a")
    net.heal()
    assert reaches(net, "a", "b") and reaches(net, "c", "a")


def test_loss_and_delay_can_be_set_and_cleared(net):
    net.set_loss("a", 1.0)
    assert not reaches(net, "b", "a")  # every packet a receives is dropped
    net.set_delay("b", 50)
    net.heal()
    assert reaches(net, "b", "a")
    assert net.delay["b"] == 0 and net.loss["a"] == 0
