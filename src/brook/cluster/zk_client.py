"""A broker's ZooKeeper operations on kazoo: blocking calls, run in worker threads (never on the
event loop). kazoo calls back on its own threads: session states and watch events go to the
`notify` callable given, which hands them to the event loop.

Paths are the layout's (`zk_paths`) inside the chroot of `zookeeper.connect`, which brook
applies itself so that it can create the chroot as Kafka does.

The client keeps a lease on its session (`lease`, `brook.cluster.lease`): kazoo's connection
is watched for when each request and ping goes out and when its reply comes back.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (BadVersionError, KazooException, NodeExistsError, NoNodeError,
                              ConnectionClosedError, ConnectionLoss, RolledBackError,
                              SessionExpiredError)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from . import zk_acls, zk_data, zk_paths
from .errors import BrokerIdInUseError
from .lease import SessionLease
from .view import NO_CONTROLLER, LiveBroker
from .zk_paths import ConnectString

log = logging.getLogger(__name__)

#: What a ZooKeeper call may fail with that trying again later can cure (connection loss, an
#: expired session, a timeout, an unexpected ZooKeeper error code).
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (KazooException, KazooTimeoutError)


class _KazooLog(logging.Filter):
    """kazoo logs every failed connection attempt as a warning; the broker logs one line per
    attempt of its own instead, with kazoo's last complaint as the reason. kazoo's errors
    (bugs, not weather) still get through."""

    def __init__(self) -> None:
        super().__init__()
        self.last_warning = ""
        self.logger = logging.getLogger("brook.cluster.kazoo")
        self.logger.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING:
            self.last_warning = record.getMessage().removeprefix("Connection dropped: ")
        return record.levelno >= logging.ERROR


@dataclass(frozen=True)
class Election:
    """The outcome of trying to become the controller."""

    controller_id: int
    epoch: int | None = None  # this broker's controller epoch when it won, else None
    epoch_zk_version: int | None = None


@dataclass(frozen=True)
class Snapshot:
    """The controller and the live brokers, read with watches set on both."""

    controller_id: int
    brokers: dict[int, LiveBroker] = field(default_factory=dict)
    unreadable: tuple[str, ...] = ()  # registrations that are not Kafka's JSON


def watch_session(kz: KazooClient, lease: SessionLease) -> None:
    """Tell ``lease`` what kazoo's connection sends and receives: each request or ping as it
    goes out (``_submit``, with its xid; the connection's own handshake has none), each reply's
    header as it comes in (``_read_header``), each new connection (``_connect``, which returns
    kazoo's read timeout: two thirds of the timeout the server gave the session). These are
    kazoo's connection handler's methods of 2.x, wrapped on the instance; a kazoo without them
    is refused here rather than run without a lease."""
    conn = kz._connection
    try:
        submit, read_header, connect = conn._submit, conn._read_header, conn._connect
    except AttributeError as exc:
        raise RuntimeError(f"this kazoo's connection cannot be watched for the session lease "
                           f"({exc}); brook needs kazoo 2.x") from exc

    def _submit(request, timeout, xid=None):
        if xid is not None:
            lease.sent(xid)
        return submit(request, timeout, xid)

    def _read_header(timeout):
        header, buffer, offset = read_header(timeout)
        lease.answered(header.xid, header.err)
        return header, buffer, offset

    def _connect(host, hostip, port):
        lease.connecting()
        read_timeout_ms, connect_timeout_ms = connect(host, hostip, port)
        lease.connected(read_timeout_ms * 3 / 2)
        return read_timeout_ms, connect_timeout_ms

    conn._submit, conn._read_header, conn._connect = _submit, _read_header, _connect


class ZkClient:
    def __init__(self, connect: ConnectString, session_timeout_ms: int,
                 notify: Callable[[str], None], connection_timeout_ms: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.connect = connect
        self._notify = notify
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self._session = threading.Event()  # set while connected with a live session
        self._unreachable = False  # a call waited for a session in vain, and none came since
        self._kazoo_log = _KazooLog()
        # Reconnect fast and forever: a broker outlives any ZooKeeper outage.
        retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0, max_jitter=0.2)
        self.kz = KazooClient(hosts=connect.servers, timeout=session_timeout_ms / 1000,
                              connection_retry=retry, logger=self._kazoo_log.logger)
        #: Whether the session is known to be alive now (see brook.cluster.lease).
        self.lease = SessionLease(session_timeout_ms, clock)
        watch_session(self.kz, self.lease)
        self.kz.add_listener(self._on_state)
        self._on_watch = lambda event: notify("watch")  # one object: kazoo keeps watchers in sets
        self.changed_topics: set[str] = set()  # assignments changed since the controller read them

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._unreachable = False
            self._session.set()
        else:
            self._session.clear()
        if state == KazooState.LOST:
            self.lease.lost()  # here, on kazoo's thread: before a new session can renew it
        self._notify({KazooState.LOST: "lost", KazooState.SUSPENDED: "suspended"}.get(state, "connected"))

    def p(self, path: str) -> str:
        return self.connect.path(path)

    @property
    def session_id(self) -> int | None:
        """The id of the session while connected, else None."""
        cid = self.kz.client_id
        return cid[0] if cid else None

    @property
    def negotiated_session_timeout_ms(self) -> int:
        return int(getattr(self.kz, "_session_timeout", 0))

    # ------------------------------------------------------------ connecting

    def connect_until(self, stop: threading.Event, timeout_ms: int) -> bool:
        """Connect, logging one line per `timeout_ms` without a session, until connected (True)
        or `stop` is set (False). kazoo keeps trying meanwhile."""
        live = self.kz.start_async()
        attempt = 0
        while not stop.is_set():
            attempt += 1
            deadline = time.monotonic() + timeout_ms / 1000
            while not live.is_set() and not stop.is_set() and time.monotonic() < deadline:
                live.wait(0.05)
            if live.is_set():
                return True
            if stop.is_set():
                break
            reason = self._kazoo_log.last_warning or "no answer"
            log.warning("Timed out waiting for connection to ZooKeeper at %s while in state: %s "
                        "(attempt %d, %d ms: %s); trying again", self.connect, self.kz.client_state,
                        attempt, timeout_ms, reason)
        return False

    def call_in_session(self, call: Callable, *args, attempts: int = 3):
        """``call(*args)`` once this client has a session, as Kafka's ZooKeeper client makes
        its requests: it waits for a session at most zookeeper.connection.timeout.ms (then
        KazooTimeoutError), and a call that met a lost connection, an expired session or the
        broker starting a new one (`new_session`) is made again on the next session (kazoo
        opens one as soon as a server answers), up to `attempts` times in all. Each call
        made this way has the same outcome made twice (a topic creation or partition growth
        recognises its own earlier write). Once a wait has timed out, calls fail at once
        until a session comes, so that a request of many topics does not wait for each."""
        for attempt in range(1, attempts + 1):
            if self._unreachable and not self._session.is_set():
                raise KazooTimeoutError(
                    f"no ZooKeeper session for over {self.connection_timeout_ms} ms")
            if not self._session.wait(self.connection_timeout_ms / 1000):
                self._unreachable = True
                raise KazooTimeoutError(
                    f"no ZooKeeper session within {self.connection_timeout_ms} ms")
            try:
                return call(*args)
            except (ConnectionLoss, ConnectionClosedError, SessionExpiredError):
                if attempt == attempts:
                    raise
                time.sleep(0.05)  # kazoo tells its listener a moment after the call fails

    def new_session(self) -> None:
        """Drop the session and connect afresh. For a server that refuses this client because
        it has seen a later zxid than the server has (a ZooKeeper restarted without its data):
        such a session is gone anyway once the session timeout has passed, and only a new
        client (no session, no zxid) is let in."""
        self.kz.stop()
        self.kz.start_async()

    def close(self) -> None:
        """End the session: ZooKeeper removes this broker's ephemeral znodes at once."""
        try:
            self.kz.stop()
        finally:
            self.kz.close()

    # ------------------------------------------------------------ at start

    def ensure_layout(self) -> None:
        """The chroot and the persistent paths Kafka makes sure of at start (createTopLevelPaths)."""
        if self.connect.chroot:
            self.kz.ensure_path(self.connect.chroot)
        for path in zk_paths.PERSISTENT_PATHS:
            self.kz.ensure_path(self.p(path))

    def get_or_create_cluster_id(self, new_id: Callable[[], str]) -> str:
        """/cluster/id's id; the first broker of a cluster creates it (getOrGenerateClusterId)."""
        return self._get_or_create(zk_paths.CLUSTER_ID, new_id, zk_data.encode_cluster_id,
                                   zk_data.decode_cluster_id)

    def restore_cluster_id(self, cluster_id: str) -> str:
        """Create /cluster/id with `cluster_id` if it is gone (a ZooKeeper that lost its data:
        the brokers carry the cluster on); returns the id it holds."""
        return self.get_or_create_cluster_id(lambda: cluster_id)

    def get_or_create_broker_secret(self, new_secret: Callable[[], bytes]) -> bytes:
        """The cluster's inter-broker secret (brook.security.broker_identity); the first broker
        creates it, the others read it (a broker restoring a ZooKeeper that lost its data
        passes its own)."""
        return self._get_or_create(zk_paths.BROKER_SECRET, new_secret,
                                   zk_data.encode_broker_secret, zk_data.decode_broker_secret)

    def _get_or_create(self, path: str, new: Callable, encode: Callable, decode: Callable):
        """What the znode at `path` holds; the first broker to find it missing creates it
        with `new()`, and a broker that loses that race reads the winner's."""
        path = self.p(path)
        while True:
            try:
                return decode(self.kz.get(path)[0])
            except NoNodeError:
                pass
            try:
                value = new()
                self.kz.create(path, encode(value), makepath=True)
                return value
            except NodeExistsError:
                continue  # another broker made it first: read theirs

    def read_controller(self) -> tuple[int, int]:
        """(the controller's id, the controller epoch) as ZooKeeper holds them now: synced
        first, so a server of the ensemble behind the leader cannot answer older news."""
        self.kz.sync(self.p(zk_paths.CONTROLLER_EPOCH))
        try:
            controller = zk_data.decode_controller(self.kz.get(self.p(zk_paths.CONTROLLER))[0])
        except NoNodeError:
            controller = NO_CONTROLLER
        try:
            epoch = zk_data.decode_controller_epoch(self.kz.get(self.p(zk_paths.CONTROLLER_EPOCH))[0])
        except NoNodeError:
            epoch = zk_data.INITIAL_CONTROLLER_EPOCH
        return controller, epoch

    def read_broker_epoch(self, broker_id: int) -> int | None:
        """The czxid of /brokers/ids/<id> (the broker epoch), None if not registered."""
        self.kz.sync(self.p(zk_paths.broker_path(broker_id)))
        stat = self.kz.exists(self.p(zk_paths.broker_path(broker_id)))
        return None if stat is None else stat.czxid

    # ------------------------------------------------------------ registration

    def register(self, registration: zk_data.BrokerRegistration) -> int:
        """Create /brokers/ids/<id> (ephemeral) and return its czxid, the broker epoch. A
        znode of this session already there (a retry after a lost connection) is fine; one of
        another session is another broker: BrokerIdInUseError (Kafka's checkedEphemeralCreate)."""
        path = self.p(zk_paths.broker_path(registration.broker_id))
        try:
            _, stat = self.kz.create(path, zk_data.encode_broker(registration), ephemeral=True,
                                     makepath=True, include_data=True)
            return stat.czxid
        except NodeExistsError:
            pass
        try:
            data, stat = self.kz.get(path)
        except NoNodeError:
            raise NodeExistsError(f"{path} went away while checking whose it is") from None
        session = self.session_id or 0
        if stat.ephemeralOwner != session:
            try:
                endpoints = zk_data.decode_broker(registration.broker_id, data).endpoints
            except zk_data.ZkDataError:
                endpoints = ()
            raise BrokerIdInUseError(registration.broker_id, zk_paths.broker_path(registration.broker_id),
                                     stat.ephemeralOwner, session, endpoints)
        return stat.czxid

    # ------------------------------------------------------------ the controller and the brokers

    def read(self) -> Snapshot:
        """The controller and the live brokers, with watches set on /controller and on
        /brokers/ids (they call `notify("watch")` once when either changes)."""
        controller = NO_CONTROLLER
        path = self.p(zk_paths.CONTROLLER)
        if self.kz.exists(path, watch=self._on_watch) is not None:
            try:
                controller = zk_data.decode_controller(self.kz.get(path)[0])
            except NoNodeError:
                pass  # gone since: the watch has fired
            except zk_data.ZkDataError as exc:
                log.warning("%s", exc)
        brokers: dict[int, LiveBroker] = {}
        unreadable = []
        for child in self.kz.get_children(self.p(zk_paths.BROKER_IDS), watch=self._on_watch):
            broker_id = zk_paths.broker_id_of(child)
            if broker_id is None:
                continue
            try:
                data, stat = self.kz.get(self.p(zk_paths.broker_path(broker_id)))
                brokers[broker_id] = LiveBroker(zk_data.decode_broker(broker_id, data), stat.czxid)
            except NoNodeError:
                continue  # gone since: the watch has fired
            except zk_data.ZkDataError as exc:
                unreadable.append(str(exc))
        return Snapshot(controller, brokers, tuple(unreadable))

    def elect(self, broker_id: int, timestamp_ms: int) -> Election:
        """Try to become the controller: create /controller (ephemeral) and bump
        /controller_epoch in one transaction, the bump conditional on the epoch's zkVersion as
        read, so two brokers can never both win one epoch
        (registerControllerAndIncrementControllerEpoch)."""
        controller_path = self.p(zk_paths.CONTROLLER)
        epoch_path = self.p(zk_paths.CONTROLLER_EPOCH)
        try:
            return Election(zk_data.decode_controller(self.kz.get(controller_path)[0]))
        except NoNodeError:
            pass
        epoch, version = self._controller_epoch()
        tx = self.kz.transaction()
        tx.create(controller_path, zk_data.encode_controller(broker_id, timestamp_ms), ephemeral=True)
        tx.set_data(epoch_path, zk_data.encode_controller_epoch(epoch + 1), version=version)
        results = tx.commit()
        if not any(isinstance(r, Exception) for r in results):
            return Election(broker_id, epoch + 1, results[1].version)
        failure = next(r for r in results if isinstance(r, Exception) and
                       not isinstance(r, RolledBackError))
        if not isinstance(failure, (NodeExistsError, BadVersionError)):
            raise failure
        # Lost the race (checkControllerAndEpoch): whoever holds /controller now is the controller.
        try:
            return Election(zk_data.decode_controller(self.kz.get(controller_path)[0]))
        except NoNodeError:
            return Election(NO_CONTROLLER)  # gone again already: its watch makes us try again

    def _controller_epoch(self) -> tuple[int, int]:
        """/controller_epoch's epoch and zkVersion, created with epoch 0 if absent."""
        path = self.p(zk_paths.CONTROLLER_EPOCH)
        try:
            data, stat = self.kz.get(path)
            return zk_data.decode_controller_epoch(data), stat.version
        except NoNodeError:
            pass
        try:
            self.kz.create(path, zk_data.encode_controller_epoch(zk_data.INITIAL_CONTROLLER_EPOCH),
                           makepath=True)
            log.info("Successfully created %s with initial epoch %d", zk_paths.CONTROLLER_EPOCH,
                     zk_data.INITIAL_CONTROLLER_EPOCH)
            return zk_data.INITIAL_CONTROLLER_EPOCH, 0
        except NodeExistsError:
            data, stat = self.kz.get(path)
            return zk_data.decode_controller_epoch(data), stat.version

    # ------------------------------------------------------------ topics and partition states

    def watch_topics(self) -> list[str]:
        """The topics in /brokers/topics, with a watch set on the list (`notify("topics")`)."""
        return self.kz.get_children(self.p(zk_paths.TOPICS),
                                    watch=lambda event: self._notify("topics"))

    def read_topic(self, topic: str, watch: bool = False) -> zk_data.TopicAssignment | None:
        """A topic's assignment; with `watch`, a change of it (CreatePartitions) is noted in
        `changed_topics` and notified as "topics"."""
        def changed(event, topic=topic):
            self.changed_topics.add(topic)
            self._notify("topics")
        try:
            data, _ = self.kz.get(self.p(zk_paths.topic_path(topic)), watch=changed if watch else None)
        except NoNodeError:
            return None
        return zk_data.decode_topic(topic, data)

    def add_partitions(self, topic: str, assignment: zk_data.TopicAssignment,
                       expected: zk_data.TopicAssignment) -> bool:
        """Write a topic's assignment grown by new partitions, only if it is still `expected`
        (False if it changed meanwhile; True if it is `assignment` already: an earlier go
        whose answer a lost connection took)."""
        path = self.p(zk_paths.topic_path(topic))
        data, stat = self.kz.get(path)
        now = zk_data.decode_topic(topic, data)
        if now != expected:
            return now == assignment
        try:
            self.kz.set(path, zk_data.encode_topic(assignment), version=stat.version)
        except BadVersionError:
            return False
        return True

    def read_partition_state(self, topic: str, partition: int) -> zk_data.PartitionState | None:
        path = zk_paths.partition_state_path(topic, partition)
        try:
            data, stat = self.kz.get(self.p(path))
        except NoNodeError:
            return None
        return zk_data.decode_partition_state(path, data, stat.version, stat.mzxid)

    def write_partition_states(self, writes: list[tuple[str, int, zk_data.PartitionState, int | None]],
                               controller_epoch_version: int) -> list[zk_data.PartitionState | None]:
        """Write partitions' states as the controller: each one created (expected version None)
        or set only if its zkVersion is still the expected one, and only while /controller_epoch
        is still at `controller_epoch_version` (a deposed controller changes nothing: it gets
        ControllerMovedError). For each write, the state as written (with its new zkVersion), or
        None if someone else changed or created it first."""
        from .errors import ControllerMovedError
        out: list[zk_data.PartitionState | None] = []
        epoch_path = self.p(zk_paths.CONTROLLER_EPOCH)
        for topic, partition, state, expected in writes:
            path = self.p(zk_paths.partition_state_path(topic, partition))
            data = zk_data.encode_partition_state(state)
            if expected is None:
                self.kz.ensure_path(path.rsplit("/", 1)[0])
            tx = self.kz.transaction()
            tx.check(epoch_path, controller_epoch_version)
            if expected is None:
                tx.create(path, data)
            else:
                tx.set_data(path, data, version=expected)
            results = tx.commit()
            if isinstance(results[0], BadVersionError) or isinstance(results[0], NoNodeError):
                raise ControllerMovedError(f"/controller_epoch moved on from zkVersion "
                                           f"{controller_epoch_version}")
            failure = next((r for r in results if isinstance(r, Exception)
                            and not isinstance(r, RolledBackError)), None)
            if failure is None:
                if expected is None:  # a create answers with the path: read its stat
                    stat = self.kz.exists(path)
                    version, zxid = (0, stat.mzxid) if stat is not None else (0, -1)
                else:
                    version, zxid = results[1].version, results[1].mzxid
                out.append(zk_data.PartitionState(state.leader, state.leader_epoch, state.isr,
                                                  state.controller_epoch, version, zxid))
            elif isinstance(failure, (NodeExistsError, BadVersionError, NoNodeError)):
                out.append(None)
            else:
                raise failure
        return out

    def create_topic(self, topic: str, assignment: zk_data.TopicAssignment,
                     configs: dict[str, str]) -> bool:
        """Create a topic as Kafka's AdminZkClient does: its config first, then its assignment
        (which the controller watches). False if the topic exists already, unless it is this
        very topic (its id), made by an earlier go whose answer a lost connection took."""
        tx = self.kz.transaction()
        config_path = self.p(zk_paths.topic_config_path(topic))
        if self.kz.exists(config_path) is None:
            tx.create(config_path, zk_data.encode_topic_config(configs))
        else:
            tx.set_data(config_path, zk_data.encode_topic_config(configs))
        tx.create(self.p(zk_paths.topic_path(topic)), zk_data.encode_topic(assignment))
        results = tx.commit()
        failure = next((r for r in results if isinstance(r, Exception)
                        and not isinstance(r, RolledBackError)), None)
        if failure is None:
            return True
        if isinstance(failure, NodeExistsError):
            existing = self.read_topic(topic)
            return existing is not None and existing.topic_id == assignment.topic_id
        raise failure

    def read_topic_config(self, topic: str) -> dict[str, str]:
        try:
            data, _ = self.kz.get(self.p(zk_paths.topic_config_path(topic)))
        except NoNodeError:
            return {}
        return zk_data.decode_topic_config(topic, data)

    # ------------------------------------------------------------ topic deletion

    def mark_for_deletion(self, topic: str) -> None:
        """/admin/delete_topics/<topic>, which the controller watches (Kafka's DeleteTopics in
        ZooKeeper mode)."""
        try:
            self.kz.create(self.p(f"{zk_paths.DELETE_TOPICS}/{topic}"), b"", makepath=True)
        except NodeExistsError:
            pass

    def watch_deletions(self) -> list[str]:
        return self.kz.get_children(self.p(zk_paths.DELETE_TOPICS),
                                    watch=lambda event: self._notify("topics"))

    def watch_reassignment_request(self) -> dict[tuple[str, int], tuple[int, ...]]:
        """The moves asked in /admin/reassign_partitions (older kafka-reassign-partitions.sh
        writes it), with a watch on the node (`notify("topics")`); {} when there is none."""
        try:
            data, _ = self.kz.get(self.p(zk_paths.REASSIGN_PARTITIONS),
                                  watch=lambda event: self._notify("topics"))
        except NoNodeError:
            self.kz.exists(self.p(zk_paths.REASSIGN_PARTITIONS),
                           watch=lambda event: self._notify("topics"))
            return {}
        return zk_data.decode_reassignment_request(data)

    def remove_from_reassignment_request(self, done: set[tuple[str, int]],
                                         controller_epoch_version: int) -> None:
        """The controller takes the moves it finished (or refused) out of
        /admin/reassign_partitions, and the node goes once empty, as Kafka's does."""
        from .errors import ControllerMovedError
        path = self.p(zk_paths.REASSIGN_PARTITIONS)
        while True:
            try:
                data, stat = self.kz.get(path)
            except NoNodeError:
                return
            try:
                left = {tp: r for tp, r in zk_data.decode_reassignment_request(data).items()
                        if tp not in done}
            except zk_data.ZkDataError:
                left = {}  # nothing of it can be done: it goes
            tx = self.kz.transaction()
            tx.check(self.p(zk_paths.CONTROLLER_EPOCH), controller_epoch_version)
            if left:
                tx.set_data(path, zk_data.encode_reassignment_request(left), version=stat.version)
            else:
                tx.delete(path, version=stat.version)
            results = tx.commit()
            if not any(isinstance(r, Exception) for r in results):
                return
            if isinstance(results[0], Exception):
                raise ControllerMovedError("/controller_epoch moved on")
            # the request changed meanwhile: read it again

    def remove_topic(self, topic: str, controller_epoch_version: int) -> None:
        """The controller's last step of a deletion: the topic's znodes go (its partitions'
        states, its assignment, its config, the deletion mark), while it is still the
        controller."""
        from .errors import ControllerMovedError
        if self.kz.exists(self.p(zk_paths.CONTROLLER_EPOCH)).version != controller_epoch_version:
            raise ControllerMovedError("/controller_epoch moved on")
        for path in (zk_paths.topic_path(topic), zk_paths.topic_config_path(topic),
                     f"{zk_paths.DELETE_TOPICS}/{topic}"):
            try:
                self.kz.delete(self.p(path), recursive=True)
            except NoNodeError:
                pass

    def topic_names(self) -> list[str]:
        return self.kz.get_children(self.p(zk_paths.TOPICS))

    # ------------------------------------------------------------ topic configs

    def write_topic_config(self, topic: str, configs: dict[str, str]) -> None:
        """A topic's configs, then a change notification every broker watches (Kafka's
        /config/changes/config_change_<seq>, version 2)."""
        self.kz.set(self.p(zk_paths.topic_config_path(topic)), zk_data.encode_topic_config(configs))
        self.kz.create(self.p(f"{zk_paths.CONFIG_CHANGES}/config_change_"),
                       zk_data.encode_config_change(f"topics/{topic}"), sequence=True)

    # ------------------------------------------------------------ dynamic broker configs

    def read_broker_config(self, broker_id: int | None) -> dict[str, str]:
        """A broker's dynamic configs, or the cluster-wide defaults (None); {} if none."""
        path = zk_paths.broker_config_path(broker_id)
        try:
            data, _ = self.kz.get(self.p(path))
        except NoNodeError:
            return {}
        return zk_data.decode_broker_config(path, data)

    def write_broker_config(self, broker_id: int | None, configs: dict[str, str]) -> None:
        """A broker's dynamic configs (None: the cluster-wide defaults), then a change
        notification every broker watches ("brokers/<id>" or "brokers/<default>", as Kafka's
        AdminZkClient.changeBrokerConfig writes them)."""
        entity = zk_paths.DEFAULT_ENTITY if broker_id is None else str(broker_id)
        self._write_config(zk_paths.broker_config_path(broker_id), configs, f"brokers/{entity}")

    def _write_config(self, path: str, configs: dict[str, str], entity: str) -> None:
        """An entity's configs ({"version":1,"config":{}}), then the change notification that
        names it."""
        path = self.p(path)
        data = zk_data.encode_broker_config(configs)
        try:
            self.kz.set(path, data)
        except NoNodeError:
            try:
                self.kz.create(path, data, makepath=True)
            except NodeExistsError:
                self.kz.set(path, data)
        self.kz.create(self.p(f"{zk_paths.CONFIG_CHANGES}/config_change_"),
                       zk_data.encode_config_change(entity), sequence=True)

    # ------------------------------------------------------------ user configs (SCRAM)

    def read_user_config(self, user: str) -> dict[str, str]:
        path = zk_paths.user_config_path(user)
        try:
            data, _ = self.kz.get(self.p(path))
        except NoNodeError:
            return {}
        return zk_data.decode_broker_config(path, data)  # the same {"version":1,"config":{}}

    def read_user_configs(self) -> dict[str, dict[str, str]]:
        """Every user's configs, by user name."""
        try:
            names = self.kz.get_children(self.p(f"{zk_paths.CONFIG}/users"))
        except NoNodeError:
            return {}
        return {zk_paths.desanitize(n): self.read_user_config(zk_paths.desanitize(n)) for n in names}

    def write_user_config(self, user: str, configs: dict[str, str]) -> None:
        """A user's configs, then a change notification ("users/<user, sanitized>", as Kafka's
        AdminZkClient.changeUserOrUserClientIdConfig writes it)."""
        self._write_config(zk_paths.user_config_path(user), configs,
                           f"users/{zk_paths.sanitize(user)}")

    # ------------------------------------------------------------ client quotas

    def read_entity_config(self, entity_path: str) -> dict[str, str]:
        """The configs of /config/<entity_path> ("users/alice/clients/app"); {} if none (a
        user's node made only as the parent of its client ids' has no data)."""
        path = f"{zk_paths.CONFIG}/{entity_path}"
        try:
            data, _ = self.kz.get(self.p(path))
        except NoNodeError:
            return {}
        return zk_data.decode_broker_config(path, data) if data else {}

    def read_quota_entities(self) -> dict[str, dict[str, str]]:
        """Every user, user and client id, and client id node's configs, by entity path
        (names as sanitized in the paths)."""
        out = {}
        for kind in ("users", "clients"):
            try:
                names = self.kz.get_children(self.p(f"{zk_paths.CONFIG}/{kind}"))
            except NoNodeError:
                continue
            for name in names:
                out[f"{kind}/{name}"] = self.read_entity_config(f"{kind}/{name}")
                if kind == "users":
                    try:
                        clients = self.kz.get_children(self.p(f"{zk_paths.CONFIG}/users/{name}/clients"))
                    except NoNodeError:
                        continue
                    for client in clients:
                        path = f"users/{name}/clients/{client}"
                        out[path] = self.read_entity_config(path)
        return out

    def write_entity_config(self, entity_path: str, configs: dict[str, str]) -> None:
        """/config/<entity_path>'s configs, then a change notification naming it, as Kafka's
        AdminZkClient writes those of users, users' client ids and client ids."""
        self._write_config(f"{zk_paths.CONFIG}/{entity_path}", configs, entity_path)

    def watch_config_changes(self) -> list[str]:
        return sorted(self.kz.get_children(self.p(zk_paths.CONFIG_CHANGES),
                                           watch=lambda event: self._notify("configs")))

    def purge_changes(self, directory: str, names, older_than_ms: int) -> int:
        """Delete the change notifications under `directory` created more than `older_than_ms`
        ago, as every Kafka broker does (a broker that starts later reads the entities
        themselves, never old notifications); the number deleted."""
        deleted = 0
        oldest = time.time() * 1000 - older_than_ms
        for name in names:
            path = self.p(f"{directory}/{name}")
            try:
                stat = self.kz.exists(path)
                if stat is not None and stat.ctime < oldest:
                    self.kz.delete(path, version=stat.version)
                    deleted += 1
            except (NoNodeError, BadVersionError):
                pass  # another broker purged it first
        return deleted

    def read_config_change(self, name: str) -> str | None:
        """The entity path of a change notification ("topics/<t>"), None if gone."""
        try:
            data, _ = self.kz.get(self.p(f"{zk_paths.CONFIG_CHANGES}/{name}"))
        except NoNodeError:
            return None
        return zk_data.decode_config_change(data)

    # ------------------------------------------------------------ ACLs (zk_acls has the layout)

    def ensure_acl_paths(self) -> None:
        """What Kafka's authorizer makes sure of at start."""
        for path in zk_acls.PATHS:
            self.kz.ensure_path(self.p(path))

    def read_all_acls(self) -> list[tuple[str, str, str, bytes]]:
        """(root, type dir, name, data) of every resource with ACLs."""
        out = []
        for root in (zk_acls.ACLS, zk_acls.PREFIXED_ACLS):
            try:
                types = self.kz.get_children(self.p(root))
            except NoNodeError:
                continue
            for rtype in types:
                try:
                    names = self.kz.get_children(self.p(f"{root}/{rtype}"))
                except NoNodeError:
                    continue
                for name in names:
                    try:
                        data, _ = self.kz.get(self.p(f"{root}/{rtype}/{name}"))
                    except NoNodeError:
                        continue
                    out.append((root, rtype, name, data))
        return out

    def read_acls(self, path: str) -> tuple[bytes | None, int]:
        """A resource's ACL data and its znode version (-1: no node)."""
        try:
            data, stat = self.kz.get(self.p(path))
        except NoNodeError:
            return None, -1
        return data, stat.version

    def update_acls(self, path: str, change: Callable[[bytes | None], bytes | None],
                    notification: tuple[str, bytes]) -> bytes | None:
        """Rewrite a resource's ACLs with `change(old data) -> new data` (None: none left, the
        node goes), conditionally on the version read, again if another broker wrote first;
        then announce it. Returns the data written."""
        path_in = self.p(path)
        while True:
            data, version = self.read_acls(path)
            new = change(data)
            try:
                if new is None:
                    if version >= 0:
                        self.kz.delete(path_in, version=version)
                elif version < 0:
                    self.kz.create(path_in, new, makepath=True)
                else:
                    self.kz.set(path_in, new, version=version)
                break
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # someone else changed it meanwhile: read it again
        prefix, payload = notification
        self.kz.create(self.p(prefix), payload, sequence=True, makepath=True)
        return new

    def watch_acl_changes(self) -> dict[str, list[str]]:
        """The change notifications under both change paths (watched: "acls" when they change)."""
        if getattr(self, "_acl_watch", None) is None:
            self._acl_watch = lambda event: self._notify("acls")  # one object (kazoo keeps sets)
        return {d: sorted(self.kz.get_children(self.p(d), watch=self._acl_watch))
                for d in (zk_acls.ACL_CHANGES, zk_acls.EXTENDED_ACL_CHANGES)}

    def read_acl_change(self, changes_dir: str, name: str) -> bytes | None:
        try:
            data, _ = self.kz.get(self.p(f"{changes_dir}/{name}"))
        except NoNodeError:
            return None
        return data

    # ------------------------------------------------------------ producer ids

    def allocate_producer_id_block(self, broker_id: int) -> tuple[int, int]:
        """A block of producer ids no other broker gets (Kafka's ZkProducerIdManager): the block
        after the newest in /latest_producer_id_block, claimed with a conditional write."""
        path = self.p(zk_paths.LATEST_PRODUCER_ID_BLOCK)
        while True:
            self.kz.ensure_path(path)
            data, stat = self.kz.get(path)
            start = zk_data.decode_producer_id_block_end(data) + 1
            end = start + zk_data.PRODUCER_ID_BLOCK_SIZE - 1
            try:
                self.kz.set(path, zk_data.encode_producer_id_block(broker_id, start, end),
                            version=stat.version)
            except BadVersionError:
                continue  # another broker took this block first
            return start, end

    def write_assignment(self, topic: str, assignment: zk_data.TopicAssignment,
                         controller_epoch_version: int) -> None:
        """The controller's change of a topic's assignment (a reassignment's steps), while it
        is still the controller."""
        from .errors import ControllerMovedError
        tx = self.kz.transaction()
        tx.check(self.p(zk_paths.CONTROLLER_EPOCH), controller_epoch_version)
        tx.set_data(self.p(zk_paths.topic_path(topic)), zk_data.encode_topic(assignment))
        results = tx.commit()
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            raise ControllerMovedError("/controller_epoch moved on")
        failure = next((r for r in results if isinstance(r, Exception)
                        and not isinstance(r, RolledBackError)), None)
        if failure is not None:
            raise failure
