"""Runs a broker: listening sockets, one task per connection, the periodic log work, and a
clean shutdown on SIGINT/SIGTERM (flush, checkpoints, clean-shutdown marker)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import resource
import signal
import socket

from ..cluster.errors import LogDirOfflineError
from . import heap
from .broker import Broker
from .config import BrokerConfig, Listener
from .connection import Connection
from .metrics import BrokerMetrics
from .tls_socket import TlsSocket

log = logging.getLogger(__name__)


def _listen(listener: Listener) -> socket.socket:
    family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((listener.host or "0.0.0.0", listener.port))
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {listener.name}://{listener.host or '0.0.0.0'}:"
                                 f"{listener.port}: {exc.strerror}") from exc
    sock.setblocking(False)
    return sock


def _resolve_overrides(overrides) -> dict[str, int]:
    """max.connections.per.ip.overrides by address: a host name counts for each of its
    addresses (resolved once, at start, as Kafka does)."""
    limits: dict[str, int] = {}
    for host, count in overrides:
        try:
            addresses = {ai[4][0] for ai in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
        except OSError as exc:
            log.warning("max.connections.per.ip.overrides: cannot resolve %r (%s); ignored", host, exc)
            continue
        for address in addresses:
            limits[address] = count
    return limits


def raise_open_files_limit() -> None:
    """The soft RLIMIT_NOFILE up to the hard one: every segment and connection is a file,
    and a soft limit of 1024 (a common default) runs out long before the machine does."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("cannot raise the open files limit from %d to %d: %s", soft, hard, exc)
    else:
        log.info("open files limit raised from %d to %s", soft,
                 "unlimited" if hard == resource.RLIM_INFINITY else hard)


def _address(listener: Listener) -> str:
    host = f"[{listener.host}]" if ":" in listener.host else listener.host
    return f"{listener.name}://{host}:{listener.port}"


def write_listeners_file(path: str, listeners: tuple[Listener, ...]) -> None:
    """``NAME://host:port`` of each listener, one a line, written whole (a reader never sees a
    part of it): how a script learns the port a listener on port 0 was given."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(_address(l) + "\n" for l in listeners))
    os.replace(tmp, path)


class BrokerServer:
    def __init__(self, config: BrokerConfig, listeners_file: str | None = None) -> None:
        self.listeners_file = listeners_file
        self.broker = Broker(config)
        self.broker.on_config_change = self._config_changed
        if config.zookeeper_connect is not None:
            from ..cluster.zk_cluster import ZkCluster  # kazoo is imported only for a cluster
            from ..controller.controller import start_controller

            self.broker.cluster = ZkCluster(config, start_controller)
        if config.metrics_port is not None:
            self.broker.metrics = BrokerMetrics(self.broker)
        self.sockets: list[tuple[socket.socket, Listener]] = []
        self.connections: set[Connection] = set()
        self.tasks: set[asyncio.Task] = set()
        self._stopping: asyncio.Event | None = None
        #: Set when a log dir failed in a cluster: the broker stops and run() raises it.
        self.log_dir_failure: LogDirOfflineError | None = None
        self._refusing = False
        self._per_ip: dict[str, int] = {}  # open connections by client address
        self._per_ip_limits = _resolve_overrides(config.max_connections_per_ip_overrides)
        self._overrides_generation = 0
        self._resolving: asyncio.Task | None = None
        self._refused_ips: set[str] = set()  # logged once until one of theirs is accepted again

    @property
    def config(self) -> BrokerConfig:
        """The broker's configuration, which dynamic broker configs change while it runs."""
        return self.broker.config

    @config.setter
    def config(self, value: BrokerConfig) -> None:
        self.broker.config = value

    def _config_changed(self, old: BrokerConfig, new: BrokerConfig) -> None:
        """Dynamic broker configs changed: the connection limits are read from the config at
        every accept; the per-address overrides are resolved again, off the event loop (a
        host name's lookup may take seconds), the latest change winning."""
        if new.max_connections_per_ip_overrides == old.max_connections_per_ip_overrides:
            return
        self._overrides_generation += 1
        generation = self._overrides_generation

        async def resolve() -> None:
            limits = await asyncio.to_thread(_resolve_overrides, new.max_connections_per_ip_overrides)
            if generation == self._overrides_generation:
                self._per_ip_limits = limits

        self._resolving = asyncio.get_running_loop().create_task(resolve())

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        raise_open_files_limit()
        cluster = self.broker.cluster
        if cluster is None:
            self.broker.open()
        else:
            self._handle_signals(loop)  # stopping while waiting for ZooKeeper
            if not await self._open_in_cluster(cluster):
                return
        # A single node coordinates every offsets partition; in a cluster, those it leads.
        self.broker.coordinator.start(load_all=cluster is None)
        self.broker.txn_coordinator.start(load_all=cluster is None)
        started = False
        heap.freeze_survivors_of_full_collections()  # logs loaded: out of the collector's passes
        try:
            self.broker.log_manager.start_cleaner()  # compaction off the event loop; close() stops it
            # Metrics first: once a listener accepts, everything the broker serves is up.
            if self.broker.metrics is not None:
                self.broker.metrics.start(self.config.listeners[0].host, self.config.metrics_port)
            for listener in self.config.listeners:
                sock = _listen(listener)
                port = sock.getsockname()[1]
                self.sockets.append((sock, dataclasses.replace(listener, port=port)))
            self._use_bound_ports()
            if cluster is not None:
                from ..replication.replica_manager import ReplicaManager
                self.broker.replicas = ReplicaManager(self.broker)
                self.broker.replicas.start()
                self.broker.on_log_dir_failure = self._log_dir_failed
                cluster.on_session_lost = self.broker.replicas.fence
                # Registered (with the ports bound) before the listeners accept: a broker whose
                # id is taken serves nobody.
                cluster.use_endpoints(self.config.advertised)
                await cluster.join()
                cluster.on_topic_config = self.broker.apply_topic_config
                cluster.on_broker_config = self.broker.load_cluster_broker_configs
                cluster.on_user_config = self.broker.load_cluster_user_scram
                cluster.on_quota_config = self.broker.load_cluster_quotas
                if self.config.acl_authorizer:  # the ACLs are ZooKeeper's, followed from now on
                    cluster.on_acl_change = self.broker.load_cluster_acls
                await cluster.watch_configs()
                await self.broker.load_cluster_broker_configs()
                await self.broker.load_cluster_user_scram()
                await self.broker.load_cluster_quotas()
                names = await asyncio.to_thread(cluster.client.topic_names)
                await self.broker.drop_topics_not_in(set(names))
            if self.listeners_file:
                write_listeners_file(self.listeners_file, self.config.listeners)
            self._handle_signals(loop)
            accepting = [asyncio.create_task(self._accept(s, l)) for s, l in self.sockets]
            ticker = asyncio.create_task(self._tick())
            sweeper = asyncio.create_task(self._close_idle_connections())
            # What a crash left of topic deletions, once the coordinator has loaded.
            finishing = asyncio.create_task(self._complete_topic_deletions())
            log.info("brook broker %d started: listening on %s, cluster %s, log dirs %s",
                     self.broker.broker_id,
                     ", ".join(_address(l) for l in self.config.listeners),
                     self.broker.metadata.cluster_id, ", ".join(self.config.log_dirs))
            started = True
            await self._stopping.wait()
            if self.broker.replicas is not None:
                await self._controlled_shutdown()
            for t in accepting + [ticker, sweeper, finishing]:
                t.cancel()
            for conn in list(self.connections):
                conn.close()
            for t in list(self.tasks):
                t.cancel()
            await _bounded("the connections", asyncio.gather(
                *accepting, ticker, sweeper, finishing, *self.tasks, return_exceptions=True))
            await _bounded("the group coordinator", self.broker.coordinator.stop())
            await _bounded("the transaction coordinator", self._stop_transactions())
        finally:
            for s, _ in self.sockets:
                s.close()
            if self.broker.metrics is not None:
                self.broker.metrics.stop()
            if not started:  # a listener or the metrics port failed: the groups never served
                await self.broker.coordinator.stop()
                await self._stop_transactions()
            if self.broker.replicas is not None:
                await _bounded("replication", self.broker.replicas.stop())
            if cluster is not None:  # deregistered before the log dirs are let go
                await _bounded("the ZooKeeper session", cluster.stop())
            self.broker.close()
            if started and self.log_dir_failure is None:
                log.info("brook broker %d stopped cleanly", self.broker.broker_id)
        if self.log_dir_failure is not None:
            raise self.log_dir_failure

    async def _controlled_shutdown(self) -> None:
        """Before leaving a cluster, ask the controller to move this broker's leaderships to
        other in-sync replicas (Kafka's controlled shutdown), so clients see a leader change
        rather than a dead leader; tried controlled.shutdown.max.retries times."""
        cfg = self.config
        if not cfg.controlled_shutdown_enable:
            return
        from ..cluster.channel import BrokerChannel, ChannelError
        from ..protocol import inter_broker as ib
        replicas = self.broker.replicas
        for attempt in range(1, cfg.controlled_shutdown_max_retries + 1):
            controller = self.broker.cluster.view.controller_id
            if controller == self.broker.broker_id and self.broker.cluster.controller is not None:
                remaining = await self.broker.cluster.controller.controlled_shutdown(self.broker.broker_id)
            else:
                address = replicas.cache.endpoint(controller, replicas.listener)
                if address is None:
                    log.info("controlled shutdown: no controller known; stopping anyway")
                    return
                channel = BrokerChannel(controller, *address, client_id=f"broker-{self.broker.broker_id}-shutdown",
                                        timeout_s=cfg.request_timeout_ms / 1000,
                                        sasl=self.broker.cluster.channel_credentials,
                                        tls=cfg.inter_broker_tls)
                try:
                    response = await channel.request(ib.ControlledShutdownRequest(
                        broker_id=self.broker.broker_id, broker_epoch=self.broker.cluster.broker_epoch))
                except ChannelError as exc:
                    log.warning("controlled shutdown attempt %d failed: %s", attempt, exc)
                    await asyncio.sleep(cfg.controlled_shutdown_retry_backoff_ms / 1000)
                    continue
                finally:
                    channel.close()
                if response.error_code != 0:
                    log.warning("controlled shutdown attempt %d: the controller answered %s", attempt,
                                response.error_code)
                    await asyncio.sleep(cfg.controlled_shutdown_retry_backoff_ms / 1000)
                    continue
                remaining = [(r.topic_name, r.partition_index) for r in response.remaining_partitions]
            if not remaining:
                log.info("Controlled shutdown succeeded")
                return
            log.info("controlled shutdown attempt %d: %d partition(s) still led here", attempt, len(remaining))
            await asyncio.sleep(cfg.controlled_shutdown_retry_backoff_ms / 1000)
        log.warning("Proceeding to do an unclean shutdown as all the controlled shutdown attempts failed")

    async def _stop_transactions(self) -> None:
        await self.broker.txn_marker_sender.stop()
        await self.broker.txn_coordinator.stop()
        self.broker.txn_marker_sender.writer.close()
        self.broker.txn_verifier.close()

    def _use_bound_ports(self) -> None:
        """A listener on port 0 was given a port by the system: from now on the configuration
        says that port, so Metadata advertises it; an advertised listener of the same name on
        port 0 gets it too, as in Kafka."""
        bound = tuple(l for _, l in self.sockets)
        if bound == self.config.listeners:
            return
        ports = {l.name: l.port for l in bound}
        advertised = tuple(dataclasses.replace(l, port=ports.get(l.name, 0)) if l.port == 0 else l
                           for l in self.config.advertised_listeners)
        self.config = dataclasses.replace(self.config, listeners=bound,
                                          advertised_listeners=advertised)

    def stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()

    def _log_dir_failed(self, directory: str, exc: BaseException) -> None:
        """In a cluster, a log dir whose write failed is offline, and with it this broker (it
        has one set of log dirs; Kafka's broker also stops once its log dirs are offline):
        a leader that cannot write must not keep its leaderships. The stop moves them to
        other in-sync replicas first (controlled shutdown), then the broker exits with 1."""
        if self.log_dir_failure is not None:
            return
        self.log_dir_failure = LogDirOfflineError(directory, str(exc))
        log.error("Stopping serving logs in dir %s: a write failed (%s); moving this broker's "
                  "leaderships to other in-sync replicas and stopping", directory, exc)
        self.stop()

    def _handle_signals(self, loop) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.stop)
            except (NotImplementedError, RuntimeError):
                pass  # no signal handlers on this loop: Ctrl-C ends the process as Python does

    async def _open_in_cluster(self, cluster) -> bool:
        """Lock the log dirs, wait for ZooKeeper and the cluster id, then load the logs (dirs of
        another cluster refuse). False if the broker was stopped meanwhile."""
        self.broker.lock()
        joining = asyncio.create_task(cluster.start())
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait((joining, stopping), return_when=asyncio.FIRST_COMPLETED)
            if not joining.done():
                joining.cancel()
                await asyncio.gather(joining, return_exceptions=True)
                log.info("brook broker %d stopped before it joined the cluster", self.broker.broker_id)
                await cluster.stop()
                self.broker.close()
                return False
            self.broker.open(joining.result())
        except BaseException:
            await cluster.stop()
            self.broker.close()
            raise
        finally:
            stopping.cancel()
        return True

    async def _accept(self, sock: socket.socket, listener: Listener) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, addr = await loop.sock_accept(sock)
            except OSError as exc:
                log.warning("accept on %s:%d failed: %s", listener.host, listener.port, exc)
                await asyncio.sleep(0.1)
                continue
            peer = f"{addr[0]}:{addr[1]}"
            ip = addr[0]
            limit = self._per_ip_limits.get(ip, self.config.max_connections_per_ip)
            if self._per_ip.get(ip, 0) >= limit:
                if ip not in self._refused_ips:  # once per address while it stays at its limit
                    self._refused_ips.add(ip)
                    log.info("Rejected connection from %s, address already has the configured "
                             "maximum of %d connections.", ip, limit)
                client.close()
                continue
            if len(self.connections) >= self.config.max_connections:
                if not self._refusing:
                    log.warning("refusing connections: max.connections=%d reached (first refused: %s)",
                                self.config.max_connections, peer)
                self._refusing = True
                client.close()
                continue
            self._refusing = False
            self._refused_ips.discard(ip)
            self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            security = self.config.listener_security.get(listener.name)
            if security is not None and security.tls is not None:  # the handshake runs in the connection's task
                client = TlsSocket(client, security.tls.context)
            conn = Connection(self.broker, client, peer, listener.name)
            self.connections.add(conn)
            task = asyncio.create_task(conn.run())
            conn.task = task
            self.tasks.add(task)
            task.add_done_callback(lambda t, c=conn, ip=ip: self._closed(t, c, ip))

    def _closed(self, task: asyncio.Task, conn: Connection, ip: str) -> None:
        self.tasks.discard(task)
        self.connections.discard(conn)
        left = self._per_ip.pop(ip, 1) - 1
        if left > 0:
            self._per_ip[ip] = left

    async def _close_idle_connections(self) -> None:
        """Close connections idle for connections.max.idle.ms, as Kafka's selector does."""
        idle_s = self.config.connections_max_idle_ms / 1000
        period = min(max(idle_s / 4, 0.01), 30.0)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for conn in list(self.connections):
                if not conn.busy and now - conn.last_active > idle_s:
                    log.debug("closing connection from %s: idle for %.0f s", conn.peer, now - conn.last_active)
                    conn.close()

    async def _complete_topic_deletions(self) -> None:
        try:
            await self.broker.complete_topic_deletions()
        except Exception:
            log.exception("finishing topic deletions failed")

    async def _tick(self) -> None:
        while True:
            try:
                delay_ms = self.broker.tick()
            except Exception:
                log.exception("periodic log work failed")
                delay_ms = 1000
            await asyncio.sleep(min(max(delay_ms, 10), 1000) / 1000)


STOP_STEP_TIMEOUT_S = 10.0


async def _bounded(what: str, aw) -> None:
    """One step of stopping, given STOP_STEP_TIMEOUT_S: a step that hangs is logged with
    the tasks still running, and the broker stops anyway."""
    task = asyncio.ensure_future(aw)
    done, _ = await asyncio.wait({task}, timeout=STOP_STEP_TIMEOUT_S)
    if done:
        task.result()
        return
    task.cancel()
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    log.error("stopping %s took over %.0f s; going on. Tasks still running: %s", what,
              STOP_STEP_TIMEOUT_S, "; ".join(f"{t.get_name()} at {_where(t)}" for t in pending[:20]))


def _where(task: asyncio.Task) -> str:
    frames = task.get_stack(limit=1)
    if not frames:
        return "?"
    f = frames[-1]
    return f"{f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_lineno} ({f.f_code.co_name})"


def run_broker(config: BrokerConfig, listeners_file: str | None = None) -> None:
    """Run until SIGINT/SIGTERM, on uvloop when it is installed; once listening, write the
    listeners with their bound ports to ``listeners_file`` if given."""
    server = BrokerServer(config, listeners_file)
    # `kill -USR1 <pid>` writes every thread's stack to stderr (a stuck broker's jstack).
    import faulthandler
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        import uvloop
    except ImportError:
        asyncio.run(server.run())
    else:
        uvloop.run(server.run())
