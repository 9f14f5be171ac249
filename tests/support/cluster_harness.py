"""Brokers in a cluster on a real ZooKeeper, for the cluster tests: fixtures for the server, a
chroot of its own per test (so tests share one server without seeing each other), a kazoo
client to look at what the brokers wrote, and a factory of broker processes joined to it.

Brokers get a short ZooKeeper session (`SESSION_TIMEOUT_MS`) so that expiry, failover and
re-registration happen within seconds, and a short wait between controlled-shutdown attempts
(`CONTROLLED_SHUTDOWN_RETRY_BACKOFF_MS`) so that stopping the last broker takes no 15 s.
"""

from __future__ import annotations

import itertools
import signal
import json
import time
from typing import Callable

import pytest

from tests.support.broker_harness import BrokerProcess
from tests.support.zookeeper_harness import ZooKeeperServer, missing_reason

SESSION_TIMEOUT_MS = 3000
CONNECTION_TIMEOUT_MS = 1000
CONTROLLED_SHUTDOWN_RETRY_BACKOFF_MS = 200
_chroots = itertools.count(1)


def skip_without_zookeeper() -> None:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory):
    """The run's ZooKeeper server (one for each xdist worker), started when a test first needs
    it. tests/conftest.py registers it once: a fixture imported into several test modules is a
    fixture of each, and would start one server per module."""
    skip_without_zookeeper()
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def zookeeper(zookeeper_server):
    """ZooKeeper for a test module: the run's server, shared by the modules (tests keep apart
    by chroot, the ``zk`` fixture) rather than a JVM started for each. A test that stops or
    restarts ZooKeeper takes ``own_zookeeper``."""
    return zookeeper_server


@pytest.fixture
def own_zookeeper(tmp_path):
    """A ZooKeeper server of the test's own, not started: for tests that stop or restart it."""
    skip_without_zookeeper()
    server = ZooKeeperServer(tmp_path / "zookeeper")
    try:
        yield server
    finally:
        server.stop()


class ZkView:
    """A kazoo client on a server, reading inside one chroot."""

    def __init__(self, server: ZooKeeperServer, chroot: str) -> None:
        from kazoo.client import KazooClient

        self.server = server
        self.chroot = chroot
        self.kz = KazooClient(hosts=server.connect, timeout=10,
                              connection_retry={"max_tries": -1, "max_delay": 0.5})
        self.kz.start(timeout=30)

    @property
    def connect(self) -> str:
        """`zookeeper.connect` for the brokers of this test."""
        return self.server.connect + self.chroot

    def get(self, path: str) -> tuple[bytes | None, object] | None:
        """(data, stat) of a znode, None if it does not exist (or ZooKeeper is down)."""
        from kazoo.exceptions import KazooException
        from kazoo.handlers.threading import KazooTimeoutError

        try:
            return self.kz.get_async(self.chroot + path).get(timeout=5)
        except (KazooException, KazooTimeoutError):
            return None

    def json(self, path: str):
        got = self.get(path)
        return None if got is None else json.loads(got[0])

    def children(self, path: str) -> list[str]:
        from kazoo.exceptions import KazooException
        from kazoo.handlers.threading import KazooTimeoutError

        try:
            return sorted(self.kz.get_children_async(self.chroot + path).get(timeout=5))
        except (KazooException, KazooTimeoutError):
            return []

    def controller(self) -> int | None:
        js = self.json("/controller")
        return None if js is None else js["brokerid"]

    def controller_epoch(self) -> int | None:
        got = self.get("/controller_epoch")
        return None if got is None else int(got[0])

    def broker_ids(self) -> list[int]:
        return sorted(int(c) for c in self.children("/brokers/ids"))

    def in_sync(self, topics: list[str]) -> bool:
        """Whether every partition of `topics` has all its replicas in its ISR (no partition
        under-replicated: what an operator waits for between two brokers of a rolling restart)."""
        for topic in topics:
            assignment = self.json(f"/brokers/topics/{topic}")
            if not assignment:
                return False
            for p, replicas in assignment["partitions"].items():
                state = self.json(f"/brokers/topics/{topic}/partitions/{p}/state")
                if state is None or sorted(state["isr"]) != sorted(replicas):
                    return False
        return True

    def close(self) -> None:
        try:
            self.kz.stop()
        finally:
            self.kz.close()


@pytest.fixture
def zk(zookeeper, request):
    """A chroot of the test's own on the module's server, and a client to look inside it."""
    view = ZkView(zookeeper, f"/{request.node.name[:40].replace('[', '-').rstrip(']')}-{next(_chroots)}")
    try:
        yield view
    finally:
        view.close()


class ClusterBrokers:
    """Broker processes joined to one chroot: ``brokers(1)`` starts broker 1 (on its own data
    dir and port); all are stopped at the end."""

    def __init__(self, base_dir, connect: Callable[[], str]) -> None:
        self.base_dir = base_dir
        self.connect = connect
        self.brokers: dict[int, BrokerProcess] = {}
        self.extra: list[BrokerProcess] = []

    def process(self, broker_id: int, overrides: dict | None = None, **kwargs) -> BrokerProcess:
        settings = {
            "broker.id": broker_id,
            "zookeeper.connect": self.connect(),
            "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
            "zookeeper.connection.timeout.ms": CONNECTION_TIMEOUT_MS,
            "num.partitions": 1,
            # A broker asks the controller again 200 ms after a controlled shutdown that left it
            # leading partitions (Kafka's default waits 5 s, three times): the last broker of a
            # cluster, whose partitions have nowhere to go, otherwise takes 15 s to stop, at the
            # end of every test (most cluster tests already set 200 ms themselves).
            "controlled.shutdown.retry.backoff.ms": CONTROLLED_SHUTDOWN_RETRY_BACKOFF_MS,
        }
        settings.update(overrides or {})
        name = f"broker{broker_id}" if broker_id not in self.brokers else f"broker{broker_id}-{len(self.extra)}"
        proc = BrokerProcess(self.base_dir / name, overrides=settings, **kwargs)
        if broker_id in self.brokers:
            self.extra.append(proc)
        else:
            self.brokers[broker_id] = proc
        return proc

    def __call__(self, broker_id: int, overrides: dict | None = None) -> BrokerProcess:
        return self.process(broker_id, overrides).start()

    def __getitem__(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id]

    def wait_ready(self, zk: "ZkView", ids: list[int], timeout: float = 30) -> str:
        """Wait until brokers `ids` are registered and each one's Metadata answer names a
        controller and lists them all; return their bootstrap string. ZooKeeper can name the
        controller before a broker's own view does, and librdkafka's admin client, told "no
        controller" once, waits for a broker state change that may never come (then times out
        after socket.timeout.ms)."""
        wait_for(lambda: zk.broker_ids() == sorted(ids), timeout, f"brokers {ids} registered", self)
        wait_for(lambda: all(_names_controller(self.brokers[i].bootstrap, ids) for i in ids),
                 timeout, f"brokers {ids} naming a controller in their Metadata", self)
        return ",".join(self.brokers[i].bootstrap for i in ids)

    def tails(self) -> str:
        return "\n".join(p.stderr_tail() for p in [*self.brokers.values(), *self.extra])

    def close(self) -> None:
        """Stop every broker, even when one fails to stop (its error is raised after the
        others are stopped: left running, they outlive the test and load the machine)."""
        failed: BaseException | None = None
        for proc in [*self.brokers.values(), *self.extra]:
            try:
                if proc.proc is not None and proc.proc.poll() is None:
                    proc.proc.send_signal(signal.SIGCONT)  #: a paused broker must be able to stop
            except OSError:
                pass
            try:
                proc.close()
            except BaseException as exc:  # noqa: BLE001 - raised below
                failed = failed or exc
        if failed is not None:
            raise failed


def _names_controller(bootstrap: str, ids: list[int]) -> bool:
    from brook.protocol.messages import make
    from tests.support.kafka_wire import WireClient, request_class

    try:
        with WireClient(bootstrap, 5) as w:
            md = w.request(make(request_class(3, 12), topics=(), allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False))
    except OSError:
        return False
    return md.controller_id in ids and sorted(b.node_id for b in md.brokers) == sorted(ids)


@pytest.fixture
def brokers(tmp_path, zk):
    cluster = ClusterBrokers(tmp_path, lambda: zk.connect)
    try:
        yield cluster
    finally:
        cluster.close()


def wait_for(condition: Callable[[], object], timeout: float, what: str,
             cluster: ClusterBrokers | None = None, interval: float = 0.05):
    """Poll until `condition()` is truthy (returned); fail naming `what`, with the brokers'
    stderr tails."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}\n" + (cluster.tails() if cluster else ""))
        time.sleep(interval)


def describe_cluster(bootstrap: str, timeout: float = 15.0):
    """DescribeCluster (API key 60) as Kafka's AdminClient sends it: (cluster id, controller
    id, {broker id: (host, port, rack)})."""
    from tests.support.kafka_wire import WireClient, request_class

    from brook.protocol.messages import make

    with WireClient(bootstrap, timeout) as wire:
        r = wire.request(make(request_class(60, 0), include_cluster_authorized_operations=False))
    assert r.error_code == 0, r
    return r.cluster_id, r.controller_id, {b.broker_id: (b.host, b.port, b.rack) for b in r.brokers}


def confluent_describe_cluster(bootstrap: str, timeout: float = 15.0):
    """confluent-kafka's AdminClient.describe_cluster, the same triple. librdkafka builds it
    from a Metadata request, so its brokers are Metadata's."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000})
    result = admin.describe_cluster(request_timeout=timeout).result(timeout=timeout + 5)
    controller = result.controller.id if result.controller is not None else None
    return result.cluster_id, controller, {n.id: (n.host, n.port, n.rack) for n in result.nodes}
