"""The ZooKeeper backend on the event loop: joining the cluster at start, then keeping this
broker registered, electing a controller when there is none, and the view of the live brokers
up to date, whatever happens to the connection or the session.

How it stays right: every watch event and session change only marks the state dirty; one task
then reads ZooKeeper afresh in a worker thread (setting the watches again), re-registers if the
session is a new one, runs for controller if /controller is empty, and replaces the view. Events
that come while a read runs are folded into the next one, so nothing is missed and nothing is
read twice for nothing. The broker never dies of ZooKeeper trouble once started: a failed read
is logged and tried again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Callable

from ..security import broker_identity
from . import zk_data, zk_paths
from .errors import BrokerIdInUseError, ClusterError
from .view import NO_CONTROLLER, ClusterView, membership_change
from .zk_client import TRANSIENT_ERRORS, Election, Snapshot, ZkClient

#: (client, broker id, election, view, config, listener=, sasl=) -> the running controller
ControllerFactory = Callable[..., Any]

log = logging.getLogger(__name__)

RETRY_DELAY_S = 1.0  # between two tries of a failed ZooKeeper read while connected
#: A registration in the way that advertises this broker's own endpoints (an earlier run whose
#: session has not expired): how often to look again, and the margin past its session timeout.
STALE_REGISTRATION_POLL_S = 0.2
STALE_REGISTRATION_MARGIN_MS = 3000
#: Change notifications older than this are deleted by the brokers that read them (Kafka's
#: 15 minutes): without it /config/changes and the ACL change paths grow for ever.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000


class ZkCluster:
    def __init__(self, config, controller_factory: ControllerFactory | None = None) -> None:
        self.config = config
        #: Makes and starts the controller's work when this broker is elected
        #: (brook.controller's `start_controller`, given by the wiring: this package elects the
        #: controller and knows nothing of what it does).
        self._controller_factory = controller_factory
        self.broker_id: int = config.broker_id
        self.connect = zk_paths.parse_connect(config.zookeeper_connect)
        self.endpoints = self._endpoints(config.advertised)
        self.view = ClusterView()
        #: This broker's controller epoch while it is the controller, else None.
        self.controller_epoch: int | None = None
        self.cluster_id: str | None = None
        #: The secret brokers derive their logins to each other from (broker_identity), from
        #: ZooKeeper at start.
        self.broker_secret: bytes | None = None
        #: This broker's epoch: the czxid of its registration (-1 until registered).
        self.broker_epoch: int = -1
        self._client: ZkClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dirty = asyncio.Event()
        self._stop = threading.Event()  # ends the start's wait for ZooKeeper in its thread
        self._closing = False
        self._task: asyncio.Task | None = None
        self._registered_session: int | None = None  # the session /brokers/ids/<id> belongs to
        self._conflict: str | None = None  # why this broker is not registered, once logged
        self._connected = False
        self._watchdog: asyncio.Task | None = None
        #: The controller's work (a brook.controller.controller.Controller) while this broker is it.
        self.controller = None
        #: Called with the ZkCluster when the view of the live brokers or the controller changed.
        self.on_change = None
        #: Called with a reason when the session is lost (the broker fences its leaderships).
        self.on_session_lost = None
        #: Called with (topic, configs) when a topic's configs changed in ZooKeeper.
        self.on_topic_config = None
        #: Called (a coroutine function, no arguments) when dynamic broker configs changed.
        self.on_broker_config = None
        #: Called with a user's name when its configs (SCRAM credentials) changed.
        self.on_user_config = None
        #: Called with the entity path of a changed quota entity ("users/alice/clients/app").
        self.on_quota_config = None
        #: ACLs: called with a (resource type, pattern type, name) whose ACLs changed in
        #: ZooKeeper, or None for all of them (at start); set before watch_configs.
        self.on_acl_change = None
        self._acl_task: asyncio.Task | None = None
        self._acls_again = False
        self._seen_acl_changes: dict[str, set[str]] = {}
        self._config_task: asyncio.Task | None = None
        self._configs_again = False
        self._seen_changes: set[str] | None = None

    @property
    def client(self) -> ZkClient:
        return self._client

    @property
    def is_controller(self) -> bool:
        return self.controller_epoch is not None

    def lease_holds(self) -> bool:
        """Whether this broker's ZooKeeper session is known to be alive now (its lease,
        brook.cluster.lease): a broker without serves no group coordinator requests."""
        client = self._client
        return client is not None and client.lease.holds()

    # ------------------------------------------------------------ start and stop

    async def start(self) -> str:
        """Connect (waiting as long as it takes, one log line per connection timeout), make sure
        of Kafka's persistent paths, and return the cluster id from /cluster/id (created by the
        first broker of a cluster)."""
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        self._client = ZkClient(self.connect, cfg.zookeeper_session_timeout_ms, self._notify,
                                cfg.zookeeper_connection_timeout_ms)
        log.info("Connecting to zookeeper on %s", self.connect)
        try:
            connected = await asyncio.to_thread(self._client.connect_until, self._stop,
                                                cfg.zookeeper_connection_timeout_ms)
        except asyncio.CancelledError:
            self._stop.set()  # the thread sees it within 50 ms
            raise
        if not connected:
            raise asyncio.CancelledError()
        self._connected = True
        log.info("Connected to ZooKeeper at %s: session 0x%x, timeout %d ms", self.connect,
                 self._client.session_id or 0, self._client.negotiated_session_timeout_ms)
        await self._retrying(self._client.ensure_layout, "creating Kafka's top-level paths")
        self.cluster_id = await self._retrying(
            lambda: self._client.get_or_create_cluster_id(zk_data.new_cluster_id), "reading /cluster/id")
        log.info("Cluster ID = %s", self.cluster_id)
        self.broker_secret = await self._retrying(
            lambda: self._client.get_or_create_broker_secret(broker_identity.new_secret),
            f"reading {zk_paths.BROKER_SECRET}")
        return self.cluster_id

    def channel_credentials(self):
        """How this broker logs in to the others (read for each new connection): the
        operator's inter-broker SASL user on a SASL inter-broker listener, else the cluster's
        inter-broker identity."""
        if self.config.inter_broker_sasl is not None:
            return self.config.inter_broker_sasl
        return broker_identity.client_credentials(self.broker_secret, self.broker_id)

    async def controller_in_zookeeper(self) -> tuple[int, int]:
        """(controller id, controller epoch) read from ZooKeeper now (TRANSIENT_ERRORS when
        it cannot be read)."""
        return await asyncio.to_thread(self._client.read_controller)

    async def own_epoch_in_zookeeper(self) -> int | None:
        """This broker's registration's czxid read from ZooKeeper now."""
        return await asyncio.to_thread(self._client.read_broker_epoch, self.broker_id)

    def use_endpoints(self, listeners) -> None:
        """The advertised listeners as bound (a listener on port 0 has its port only then)."""
        self.endpoints = self._endpoints(listeners)

    def _endpoints(self, listeners) -> tuple:
        """Each with its security protocol, as Kafka registers them (a name brook does not
        know the protocol of is PLAINTEXT: advertised.listeners may name one)."""
        security = self.config.listener_security
        return tuple(zk_data.Endpoint(l.name, l.host, l.port,
                                      security[l.name].protocol if l.name in security else "PLAINTEXT")
                     for l in listeners)

    async def join(self) -> None:
        """Register this broker (BrokerIdInUseError if another live broker has its id), run for
        controller, read the live brokers; then keep all of it up to date in a task."""
        snapshot = await self._register_first()
        self._apply(snapshot)
        self._task = asyncio.create_task(self._run(), name="zookeeper")

    async def _register_first(self):
        """The first registration. A registration of another session that advertises this
        broker's own endpoints is most likely this broker's previous run, killed before its
        session ended (a supervisor restarting it at once): wait for that session to expire,
        up to a session timeout and a margin, instead of failing the start as Kafka does. One
        that stays past that is a live broker renewing its session: refused then."""
        deadline = None
        while True:
            try:
                return await self._retrying(lambda: self._reconcile(first=True), "registering the broker")
            except BrokerIdInUseError as exc:
                if not self._own_endpoints(exc.endpoints):
                    raise
                now = time.monotonic()
                if deadline is None:
                    wait_ms = self._stale_registration_wait_ms()
                    deadline = now + wait_ms / 1000
                    log.warning("broker.id %d is registered by ZooKeeper session 0x%x, not this "
                                "process's, with this broker's own endpoints (%s): an earlier run "
                                "whose session has not expired yet; waiting up to %d ms for it to "
                                "expire", self.broker_id, exc.owner,
                                ",".join(e.connection_string for e in exc.endpoints), wait_ms)
                elif now >= deadline:
                    log.error("broker.id %d is still registered by session 0x%x after a session "
                              "timeout and more: another live broker holds it", self.broker_id,
                              exc.owner)
                    raise
                await asyncio.sleep(STALE_REGISTRATION_POLL_S)

    def _own_endpoints(self, endpoints: tuple) -> bool:
        key = lambda es: sorted((e.listener, e.host, e.port) for e in es)  # noqa: E731
        return bool(endpoints) and key(endpoints) == key(self.endpoints)

    def _stale_registration_wait_ms(self) -> int:
        """How long an earlier session of this broker may still live: its timeout (the larger
        of the configured and the negotiated one) and a margin for ZooKeeper's expiry ticks."""
        timeout = max(self.config.zookeeper_session_timeout_ms,
                      self._client.negotiated_session_timeout_ms)
        return timeout + max(STALE_REGISTRATION_MARGIN_MS, timeout // 2)

    async def stop(self) -> None:
        """Close the session: this broker's registration (and /controller, if it holds it) go
        at once, and the other brokers see it leave without waiting for a session timeout."""
        self._closing = True
        self._stop.set()
        for task in (self._task, self._watchdog):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self._client is not None:
            try:
                await asyncio.to_thread(self._client.close)
            except Exception as exc:  # noqa: BLE001 - stopping anyway; the session then expires
                log.warning("closing the ZooKeeper session failed: %s", exc)
        if self.controller is not None:
            await self.controller.stop()
            self.controller = None
        if self.controller_epoch is not None:
            log.info("Resigned as the controller (epoch %d): stopping", self.controller_epoch)
            self.controller_epoch = None

    async def _retrying(self, fn, what: str):
        """`fn()` in a worker thread, tried again (one log line a try) on ZooKeeper trouble."""
        while True:
            try:
                return await asyncio.to_thread(fn)
            except TRANSIENT_ERRORS as exc:
                log.warning("%s failed: %s; trying again in %.0f s", what, _describe(exc),
                            RETRY_DELAY_S)
            await asyncio.sleep(RETRY_DELAY_S)

    # ------------------------------------------------------------ events (kazoo's threads)

    def _notify(self, what: str) -> None:
        """From kazoo's threads: hand the event to the event loop."""
        if self._closing or self._loop is None:
            return
        try:
            self._loop.call_soon_threadsafe(self._on_event, what)
        except RuntimeError:
            pass  # the loop is closed: the broker is gone

    def _on_event(self, what: str) -> None:
        if self._closing:
            return
        if what == "suspended":
            self._connected = False
            if self._watchdog is None or self._watchdog.done():
                self._watchdog = asyncio.create_task(self._renew_if_refused(), name="zookeeper-watchdog")
            log.warning("Lost the connection to ZooKeeper at %s; reconnecting (the session "
                        "survives if it is back within %d ms)", self.connect,
                        self.config.zookeeper_session_timeout_ms)
        elif what == "lost":
            self._connected = False
            log.warning("ZooKeeper session expired: this broker is not registered until it "
                        "reconnects (then it registers again)")
            self._resign("the ZooKeeper session expired")
            if self.on_session_lost is not None:
                self.on_session_lost("the ZooKeeper session expired")
            self._client.lease.fenced()  # what it led in that session is given up
        elif what == "topics":
            if self.controller is not None:
                self.controller.on_topics_changed()
            return
        elif what == "acls":
            if self._acl_task is None or self._acl_task.done():
                self._acl_task = asyncio.create_task(self._read_acl_changes())
            else:
                self._acls_again = True
            return
        elif what == "configs":
            if self._config_task is None or self._config_task.done():
                self._config_task = asyncio.create_task(self._read_config_changes())
            else:
                self._configs_again = True
            return
        elif what == "connected":
            if not self._connected and self._task is not None:
                log.info("Reconnected to ZooKeeper at %s: session 0x%x", self.connect,
                         self._client.session_id or 0)
            self._connected = True
        self._dirty.set()

    async def _renew_if_refused(self) -> None:
        """Disconnected for longer than the session could live: ZooKeeper has expired it, or
        (restarted without its data) refuses the client for the zxids it has seen. Either way
        a new session is what the broker needs; kazoo alone would knock on forever."""
        deadline = self.config.zookeeper_session_timeout_ms / 1000 * 2
        while not self._connected and not self._closing:
            await asyncio.sleep(deadline)
            if self._connected or self._closing:
                return
            log.warning("No connection to ZooKeeper at %s for %.0f s, twice the session timeout: "
                        "starting a new session", self.connect, deadline)
            try:
                await asyncio.to_thread(self._client.new_session)
            except Exception as exc:  # noqa: BLE001 - tried again after another wait
                log.warning("starting a new ZooKeeper session failed: %s", _describe(exc))

    # ------------------------------------------------------------ keeping up to date

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                snapshot = await asyncio.to_thread(self._reconcile)
            except TRANSIENT_ERRORS as exc:
                if self._connected:  # else the reconnection marks it dirty again
                    log.warning("reading the cluster from ZooKeeper failed: %s; trying again "
                                "in %.0f s", _describe(exc), RETRY_DELAY_S)
                    await asyncio.sleep(RETRY_DELAY_S)
                    self._dirty.set()
                continue
            except Exception:  # noqa: BLE001 - a bug must not take the broker down
                log.exception("reading the cluster from ZooKeeper failed")
                await asyncio.sleep(RETRY_DELAY_S)
                self._dirty.set()
                continue
            self._apply(snapshot)

    def _registration(self) -> zk_data.BrokerRegistration:
        return zk_data.BrokerRegistration(self.broker_id, self.endpoints, self.config.broker_rack,
                                          timestamp=int(time.time() * 1000))

    def _reconcile(self, first: bool = False) -> "_Outcome":
        """In a worker thread: register if this session has not, read the cluster (watches
        set), run for controller if there is none."""
        client = self._client
        session = client.session_id
        if session is None:
            from kazoo.exceptions import ConnectionLoss
            raise ConnectionLoss("not connected")
        conflict = None
        if session != self._registered_session:
            if not first:  # a new session: maybe a new ZooKeeper that lost everything
                client.ensure_layout()
                found = client.restore_cluster_id(self.cluster_id)
                if found != self.cluster_id:
                    conflict = (f"/cluster/id is {found} now, not {self.cluster_id}: ZooKeeper "
                                "holds another cluster, which this broker does not join")
                else:
                    secret = client.get_or_create_broker_secret(lambda: self.broker_secret)
                    if secret != self.broker_secret:
                        log.error("%s changed: this broker logs in to the others with the new "
                                  "one from now on", zk_paths.BROKER_SECRET)
                        self.broker_secret = secret
        if conflict is None and session != self._registered_session:
            try:
                epoch = client.register(self._registration())
            except BrokerIdInUseError as exc:
                if first:
                    raise
                conflict = str(exc)
            else:
                self._registered_session = session
                self.broker_epoch = epoch
                log.info("Registered broker %d at path %s with addresses: %s, czxid (broker "
                         "epoch): %d", self.broker_id, zk_paths.broker_path(self.broker_id),
                         ",".join(e.connection_string for e in self.endpoints), epoch)
        snapshot = client.read()
        election = None
        if snapshot.controller_id == NO_CONTROLLER and conflict is None:
            election = client.elect(self.broker_id, int(time.time() * 1000))
            snapshot = Snapshot(election.controller_id, snapshot.brokers, snapshot.unreadable)
        return _Outcome(snapshot, election, conflict, session)

    def _apply(self, outcome: "_Outcome") -> None:
        """On the event loop: the new view, and what it means for this broker."""
        snapshot, election = outcome.snapshot, outcome.election
        if outcome.conflict != self._conflict:
            if outcome.conflict:
                log.error("%s; registering again once it is gone", outcome.conflict)
            self._conflict = outcome.conflict
        for text in snapshot.unreadable:
            log.warning("%s", text)
        before = self.view
        after = ClusterView(snapshot.brokers, snapshot.controller_id)
        if election is not None and election.epoch is not None:
            if self.controller_epoch is not None:
                self._resign("elected again in a new session")
            self.controller_epoch = election.epoch
            log.info("%d successfully elected as the controller. Epoch incremented to %d and "
                     "epoch zk version is now %d", self.broker_id, election.epoch,
                     election.epoch_zk_version)
            log.info("Currently active brokers in the cluster: %s",
                     ",".join(map(str, after.live_ids())))
            self._start_controller(election, after)
        elif self.controller_epoch is not None and after.controller_id != self.broker_id:
            self._resign(f"broker {after.controller_id} is the controller" if
                         after.controller_id != NO_CONTROLLER else "/controller is gone")
        elif self.controller_epoch is not None:
            change = membership_change(before.brokers, after.brokers)
            if change:
                log.info("%s", change.describe())
                if self.controller is not None:
                    self.controller.on_brokers(after)
        if after.controller_id != before.controller_id and not self.is_controller \
                and after.controller_id != NO_CONTROLLER:
            log.info("The controller is broker %d", after.controller_id)
        self.view = after
        if self.on_change is not None:
            self.on_change(self)

    async def watch_configs(self) -> None:
        """Start following /config/changes (changes before now are already in what the broker
        read at start)."""
        self._seen_changes = set(await asyncio.to_thread(self._client.watch_config_changes))
        if self.on_acl_change is not None:
            await self._watch_acls()

    async def _watch_acls(self) -> None:
        """Start following the ACL change notifications, then read every ACL (a change made
        in between is read twice, never missed)."""
        def start():
            self._client.ensure_acl_paths()
            return self._client.watch_acl_changes()

        seen = await asyncio.to_thread(start)
        self._seen_acl_changes = {d: set(names) for d, names in seen.items()}
        await self.on_acl_change(None)

    async def _read_acl_changes(self) -> None:
        from . import zk_acls
        while True:
            self._acls_again = False
            try:
                current = await asyncio.to_thread(self._client.watch_acl_changes)
                for changes_dir, names in current.items():
                    for name in names:
                        if name in self._seen_acl_changes.get(changes_dir, set()):
                            continue
                        data = await asyncio.to_thread(self._client.read_acl_change, changes_dir, name)
                        if data is None:
                            continue
                        try:
                            resource = zk_acls.decode_change(changes_dir, data)
                        except (ValueError, KeyError) as exc:
                            log.warning("ignoring ACL change %s/%s: %s", changes_dir, name, exc)
                            continue
                        await self.on_acl_change(resource)
                self._seen_acl_changes = {d: set(names) for d, names in current.items()}
                for changes_dir, names in current.items():
                    await asyncio.to_thread(self._client.purge_changes, changes_dir, names,
                                            CHANGE_EXPIRATION_MS)
            except TRANSIENT_ERRORS as exc:
                log.warning("reading ACL changes failed: %s; trying again", _describe(exc))
                await asyncio.sleep(RETRY_DELAY_S)
                self._acls_again = True
            if not self._acls_again:
                return

    async def _read_config_changes(self) -> None:
        while True:
            self._configs_again = False
            try:
                names = await asyncio.to_thread(self._client.watch_config_changes)
                new = [n for n in names if n not in (self._seen_changes or set())]
                for name in new:
                    path = await asyncio.to_thread(self._client.read_config_change, name)
                    if path and path.startswith("topics/") and self.on_topic_config is not None:
                        topic = path[len("topics/"):]
                        configs = await asyncio.to_thread(self._client.read_topic_config, topic)
                        self.on_topic_config(topic, configs)
                    elif path and self.on_quota_config is not None and (
                            path.startswith("clients/") or "/clients/" in path):
                        await self.on_quota_config(path)  # a client id's or a user's client id's
                    elif path and path.startswith("users/") and self.on_user_config is not None:
                        if self.on_quota_config is not None:
                            await self.on_quota_config(path)  # a user's node holds quotas too
                        await self.on_user_config(zk_paths.desanitize(path[len("users/"):]))
                    elif path and path.startswith("brokers/") and self.on_broker_config is not None:
                        entity = path[len("brokers/"):]
                        if entity in (zk_paths.DEFAULT_ENTITY, str(self.broker_id)):
                            await self.on_broker_config()
                self._seen_changes = set(names)
                await asyncio.to_thread(self._client.purge_changes, zk_paths.CONFIG_CHANGES, names,
                                        CHANGE_EXPIRATION_MS)
            except TRANSIENT_ERRORS as exc:
                log.warning("reading config changes failed: %s; trying again", _describe(exc))
                await asyncio.sleep(RETRY_DELAY_S)
                self._configs_again = True
            if not self._configs_again:
                return

    def _start_controller(self, election: Election, view: ClusterView) -> None:
        if self._controller_factory is None:
            log.warning("elected controller (epoch %d) with no controller to run",
                        election.epoch)
            return
        listener = self.config.inter_broker_listener_name or self.endpoints[0].listener
        self.controller = self._controller_factory(
            self._client, self.broker_id, election, view, self.config,
            listener=listener, sasl=self.channel_credentials)

    def _resign(self, why: str) -> None:
        if self.controller_epoch is not None:
            log.info("Resigned as the controller (epoch %d): %s", self.controller_epoch, why)
            self.controller_epoch = None
        if self.controller is not None:
            controller, self.controller = self.controller, None
            asyncio.get_running_loop().create_task(controller.stop())


class _Outcome:
    __slots__ = ("snapshot", "election", "conflict", "session")

    def __init__(self, snapshot: Snapshot, election: Election | None, conflict: str | None,
                 session: int) -> None:
        self.snapshot, self.election, self.conflict, self.session = snapshot, election, conflict, session


def _describe(exc: BaseException) -> str:
    """kazoo's exceptions often have no message: their class name says it."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = ["ZkCluster", "ClusterError", "BrokerIdInUseError"]
