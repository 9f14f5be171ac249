"""What the console's pages show, as plain values, from a Kafka-protocol cluster: the `brook`
command's client (brook.cli.client.Cluster) and its operations (brook.cli.groups, .topics,
.configs, .cluster, .offsets_decoder), so the console and the command do one thing one way.

Every failure is a CliError with a message for a person; the pages show it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ..cli import groups as cli_groups
from ..cli import topics as cli_topics
from ..cli.errors import CliError
from ..coordinator.group.partitioner import partition_for
from . import render
from .lag import LagHistory, duration_text, time_behind
from .metrics import BrokerRates
from .reader import Page, PartitionReader, browse
from .topology import MetadataCache, metadata_request

log = logging.getLogger("brook.console")
OFFSETS_TOPIC = "__consumer_offsets"
CLIENT_ID = "brook-console"
MAX_LIMIT = 500
SCAN_MAX = 20_000  # records read at most to fill a filtered page


class Backend:
    """One console's connection to the cluster, made at the first request that needs it (and
    again after a failure to make it), and the lag history its sampler fills."""

    def __init__(self, bootstrap: str, timeout: float, security, history: LagHistory | None = None,
                 lag_interval: float = 5.0, rates: BrokerRates | None = None) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        self.security = security
        self.history = history or LagHistory()
        self.lag_interval = lag_interval
        self._cluster = None
        self._sampling = None
        self._lock = threading.Lock()
        self._reader: PartitionReader | None = None
        self._producer = None
        self._overview: tuple[float, list[dict[str, Any]]] | None = None
        self._sampling_rounds = 0  # rounds under way (the sampler's, a page's)
        self._batched = True  # FindCoordinator v4 and OffsetFetch v8 work: Kafka 3.0 or later
        self._batch_failures = 0
        self.rates = rates or BrokerRates()  # the brokers' metrics (brook's): none by default
        self._brokers: list[dict[str, Any]] | None = None  # the cluster page's last list
        self.metadata = MetadataCache(self._fetch_metadata)  # shared by the pages

    # -- the connection --------------------------------------------------------------------

    def cluster(self):
        from ..cli.client import Cluster

        with self._lock:
            if self._cluster is None:
                self._cluster = Cluster(self.bootstrap, self.timeout, security=self.security,
                                        client_id=CLIENT_ID)
            return self._cluster

    def sampling_cluster(self):
        """The sampler's own client: its rounds (the log end offsets of every partition a
        group has, on 10,000 partitions) held a page's requests behind them for up to 2 s in a
        client shared with the pages."""
        from ..cli.client import Cluster

        with self._lock:
            if self._sampling is None:
                self._sampling = Cluster(self.bootstrap, self.timeout, security=self.security,
                                         client_id=CLIENT_ID + "-sampler")
            return self._sampling

    def reader(self) -> PartitionReader:
        with self._lock:
            if self._reader is None:
                self._reader = PartitionReader(self._leader, self.metadata.invalidate,
                                               self.security, self.timeout, CLIENT_ID)
            return self._reader

    def _fetch_metadata(self):
        from ..cli.wire import request

        cluster = self.cluster()
        host, port = self._address(cluster)
        return request(host, port, metadata_request(), cluster.timeout, self.security)

    def _leader(self, topic: str, partition: int) -> tuple[str, int]:
        """The address of a partition's leader, from the shared metadata."""
        info = self.metadata.topic(topic)
        pm = info.partitions.get(partition) if info is not None else None
        if pm is None:
            raise CliError(f"topic '{topic}' has no partition {partition}", code=2)
        snap = self.metadata.get()
        broker = snap.brokers.get(pm.leader)
        if broker is None:
            raise CliError(f"{topic}-{partition} has no leader now")
        return broker[0], broker[1]

    def partitions(self, topic: str) -> list[int]:
        """A topic's partitions (from the shared metadata); CliError if there is no such topic."""
        info = self.metadata.topic(topic)
        if info is None or info.error is not None:
            raise CliError(f"unknown topic '{topic}'")
        return sorted(info.partitions)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        if self._producer is not None:
            self._producer.flush(self.timeout)

    def connection_text(self) -> str:
        """How the console reaches the cluster, for the pages: address and security protocol,
        the SASL user's name (never a password)."""
        text = f"{self.bootstrap} ({self.security.protocol}"
        if self.security.sasl:
            text += f", {self.security.mechanism} as {self.security.username}"
        return text + ")"

    # -- consumer groups -------------------------------------------------------------------

    def sample(self, now: float | None = None) -> list[dict[str, Any]]:
        """Every group's state and lag now: the sampler's work, and the groups list's. Adds a
        sample to the lag history of each group."""
        with self._lock:
            self._sampling_rounds += 1
        try:
            return self._sample(now)
        finally:
            with self._lock:
                self._sampling_rounds -= 1

    def _sample(self, now: float | None) -> list[dict[str, Any]]:
        now = time.time() if now is None else now
        cluster = self.sampling_cluster()
        ids = [g for g, _ in cluster.group_ids()]
        described, committed = self._read_groups(cluster, ids)
        ids = [g for g in ids if g in described]
        tps = {tp for offsets in committed.values() for tp in offsets}
        tps |= {tp for g in described.values() for m in g.members for tp in m.partitions}
        ends = {tp: o for tp, (o, _) in cluster.log_offsets(tps, "latest",
                                                            missing_ok=True).items()}
        offsets_partitions = self._offsets_partitions(cluster)
        rows = []
        for group_id in ids:
            group = described[group_id]
            partition_rows = cli_groups.offset_rows(group, committed.get(group_id, {}), ends)
            self.history.add(group_id, now, partition_rows)
            lags = [r["lag"] for r in partition_rows if r["lag"] is not None]
            latest = self.history.latest(group_id)
            rate = latest[2] if latest else None
            lag = sum(lags) if lags else None
            rows.append({
                "group": group_id, "state": group.state, "protocol": group.assignor or None,
                "members": len(group.members), "lag": lag,
                "partitions": len(partition_rows),
                "time_behind": duration_text(time_behind(lag, rate)) if lag is not None else None,
                "coordinator": group.coordinator[0] if group.coordinator else None,
                "offsets_partition": (partition_for(group_id, offsets_partitions)
                                      if offsets_partitions else None),
            })
        self.history.forget_except(ids, now)
        self._overview = (now, rows)
        return rows

    def _read_groups(self, cluster, ids: list[str]):
        """Every group's description and committed offsets: in a few batched requests
        (sampling.py), or one request a group from a cluster older than Kafka 3.0."""
        from .sampling import read_groups

        if self._batched:
            try:
                result = read_groups(cluster.bootstrap, ids, cluster.timeout, self.security)
                self._batch_failures = 0
                return result
            except CliError as exc:
                self._batch_failures += 1
                if self._batch_failures >= 3:  # while the requests below work: an old cluster
                    self._batched = False
                    log.warning("console: sampling one request a group (%s)", exc.message)
        try:
            described = {g.group_id: g for g in cluster.groups(ids)}
            committed = {g: {tp: o for tp, (o, _) in offsets.items()}
                         for g, offsets in cluster.committed_many(ids).items()}
        except CliError:
            self._batch_failures = 0  # the cluster failed, not the batched requests
            raise
        return described, committed

    def groups_overview(self) -> tuple[float, list[dict[str, Any]]]:
        """The last sample when it is recent, or while a round is under way (on a busy machine
        a round can take longer than the interval: a page starting one more would only slow
        both), else a new one: (its time, its rows)."""
        overview = self._overview
        if overview is not None and (self._sampling_rounds > 0 or
                                     time.time() - overview[0] <= 2 * self.lag_interval + 1):
            return overview
        rows = self.sample()
        return time.time(), rows

    @staticmethod
    def _offsets_metadata(cluster):
        """(ClusterMetadata of __consumer_offsets alone, its TopicMetadata or None)."""
        md = cluster.metadata(OFFSETS_TOPIC)
        topic = md.topics.get(OFFSETS_TOPIC)
        if topic is not None and topic.error is not None:  # not created yet
            topic = None
        return md, topic

    def _offsets_partitions(self, cluster) -> int:
        topic = self._offsets_metadata(cluster)[1]
        return len(topic.partitions) if topic is not None else 0

    def group(self, group_id: str) -> dict[str, Any]:
        cluster = self.cluster()
        group = cluster.group(group_id)
        if not group.exists:
            raise CliError(f"consumer group '{group_id}' does not exist")
        rows = cli_groups.group_offsets(cluster, group)
        lags = [r["lag"] for r in rows if r["lag"] is not None]
        latest = self.history.latest(group_id)
        lag = sum(lags) if lags else None
        n = self._offsets_partitions(cluster)
        return {
            "group": group, "rows": rows, "members": cli_groups.member_rows(group),
            "lag": lag,
            "time_behind": duration_text(time_behind(lag, latest[2] if latest else None)),
            "offsets_partition": partition_for(group_id, n) if n else None,
            "topics": sorted({r["topic"] for r in rows}),
        }

    def reset_plan(self, group_id: str, spec, topic_args: list[str], all_topics: bool):
        return cli_groups.reset_plan(self.cluster(), group_id, spec, topic_args, all_topics)

    def reset_execute(self, group_id: str, spec, topic_args: list[str], all_topics: bool):
        """Plan again (the log has moved since the dry run) and commit that plan."""
        cluster = self.cluster()
        changes, warnings = cli_groups.reset_plan(cluster, group_id, spec, topic_args, all_topics)
        cli_groups.execute_reset(cluster, group_id, changes)
        return changes, warnings

    def delete_group(self, group_id: str) -> None:
        reason = self.cluster().delete_groups([group_id])[group_id]
        if reason is not None:
            raise CliError(f"cannot delete consumer group '{group_id}': "
                           f"{cli_groups.delete_reason(reason)}")

    def delete_offsets(self, group_id: str, topic_args: list[str]) -> list[dict[str, Any]]:
        rows = cli_groups.delete_group_offsets(self.cluster(), group_id, topic_args)
        failure = cli_groups.offsets_failure(group_id, rows)
        if failure:
            raise CliError(failure)
        return rows

    # -- the offsets topic -----------------------------------------------------------------

    def offsets_topic(self) -> dict[str, Any]:
        """Each partition of __consumer_offsets: leader, replicas, ISR, offsets, size on its
        leader, and how many groups it coordinates."""
        from ..cli.wire import describe_log_dirs

        cluster = self.cluster()
        md, topic = self._offsets_metadata(cluster)
        if topic is None:
            return {"exists": False, "partitions": [], "count": 0}
        n = len(topic.partitions)
        groups_per: dict[int, list[str]] = {}
        for group_id, _ in cluster.group_ids():
            groups_per.setdefault(partition_for(group_id, n), []).append(group_id)
        tps = [(OFFSETS_TOPIC, p) for p in sorted(topic.partitions)]
        start, end = cluster.log_start_end(tps)
        sizes: dict[tuple[str, int], int] = {}
        by_leader: dict[int, list[int]] = {}
        for p, pm in topic.partitions.items():
            by_leader.setdefault(pm.leader, []).append(p)
        size_error = None
        for leader, partitions in by_leader.items():
            broker = md.brokers.get(leader)
            if broker is None:
                continue
            try:
                sizes.update(describe_log_dirs(broker.host, broker.port,
                                               {OFFSETS_TOPIC: sorted(partitions)},
                                               cluster.timeout, self.security))
            except CliError as exc:
                size_error = exc.message
        partitions = []
        for p in sorted(topic.partitions):
            pm = topic.partitions[p]
            broker = md.brokers.get(pm.leader)
            partitions.append({
                "partition": p, "leader": pm.leader if pm.leader >= 0 else None,
                "leader_address": f"{broker.host}:{broker.port}" if broker else None,
                "replicas": list(pm.replicas), "isr": list(pm.isrs),
                "log_start_offset": start.get((OFFSETS_TOPIC, p)),
                "log_end_offset": end.get((OFFSETS_TOPIC, p)),
                "size": sizes.get((OFFSETS_TOPIC, p)),
                "groups": len(groups_per.get(p, [])),
            })
        return {"exists": True, "partitions": partitions, "count": n, "size_error": size_error,
                "groups": sum(len(g) for g in groups_per.values())}

    def locate_group(self, group_id: str) -> dict[str, Any]:
        """Where a group's offsets and state live: its partition of __consumer_offsets by
        Kafka's hash, that partition's leader, and the coordinator the brokers name."""
        cluster = self.cluster()
        md, topic = self._offsets_metadata(cluster)
        if topic is None:
            raise CliError(f"the cluster has no {OFFSETS_TOPIC} topic yet (no group has "
                           "committed or joined)")
        n = len(topic.partitions)
        p = partition_for(group_id, n)
        leader = topic.partitions[p].leader
        broker = md.brokers.get(leader)
        described = cluster.group(group_id)
        coordinator = described.coordinator
        return {
            "group": group_id, "partitions": n, "partition": p, "leader": leader,
            "leader_address": f"{broker.host}:{broker.port}" if broker else None,
            "coordinator": coordinator[0] if coordinator else None,
            "coordinator_address": f"{coordinator[1]}:{coordinator[2]}" if coordinator else None,
            "state": described.state,
        }

    def offsets_records(self, partition: int, offset: int | None, limit: int,
                        newest_first: bool, group_filter: str = "") -> tuple[Page, list[dict]]:
        """A page of one __consumer_offsets partition's records, decoded as dump-log
        --offsets-decoder decodes them."""
        from ..cli.offsets_decoder import decode, describe

        topic = self._offsets_metadata(self.cluster())[1]
        if topic is None:
            raise CliError(f"the cluster has no {OFFSETS_TOPIC} topic yet")
        if partition not in topic.partitions:
            raise CliError(f"{OFFSETS_TOPIC} has no partition {partition} (it has "
                           f"{len(topic.partitions)})", code=2)
        decoded: dict[int, dict] = {}

        def keep(r) -> bool:
            if r.control is not None:  # a transaction's marker (offsets committed in it)
                d = {"type": f"{r.control} marker"}
            else:
                d = decode(r.key, r.value)
            decoded[r.offset] = d
            return not group_filter or d.get("group") == group_filter

        page = self._page(OFFSETS_TOPIC, partition, offset, limit, newest_first, keep)
        rows = []
        for r in page.records:
            d = decoded[r.offset]
            rows.append({"offset": r.offset, "timestamp": render.timestamp_text(r.timestamp),
                         "type": d["type"], "group": d.get("group"),
                         "tombstone": bool(d.get("tombstone")),
                         "text": (f"producer {r.producer_id}" if r.control is not None
                                  else describe(d)),
                         "control": r.control, "transaction": r.transaction})
        return page, rows

    # -- messages --------------------------------------------------------------------------

    def _page(self, topic: str, partition: int, offset: int | None, limit: int,
              newest_first: bool, keep, timestamp: int | None = None,
              isolation: str = "read_uncommitted") -> Page:
        cluster = self.cluster()
        limit = max(1, min(limit, MAX_LIMIT))
        tp = (topic, partition)
        start, end = cluster.log_start_end([tp], isolation)
        low, high = start[tp], end[tp]
        if timestamp is not None:
            found = cluster.log_offsets([tp], timestamp, isolation=isolation)[tp][0]
            position = found if found >= 0 else high
        elif offset is None:
            position = high if newest_first else low
        else:
            position = offset
        reader = self.reader()
        return browse(lambda a, b, n: reader.read_range(topic, partition, a, b, n, isolation),
                      low, high, position, newest_first, limit, keep, SCAN_MAX)

    def messages(self, topic: str, partition: int, *, offset: int | None = None,
                 timestamp: int | None = None, newest_first: bool = True, limit: int = 50,
                 fmt: str = "auto", key_filter: str = "", contains: str = "",
                 isolation: str = "read_uncommitted") -> tuple[Page, list[dict[str, Any]]]:
        partitions = self.partitions(topic)
        if partition not in partitions:
            raise CliError(f"topic '{topic}' has no partition {partition} (it has "
                           f"{len(partitions)})", code=2)

        def keep(r) -> bool:
            if r.control is not None:  # a marker: shown unless a filter asks for content
                return not (key_filter or contains)
            return render.matches(r.key, r.value, r.headers, key_filter, contains)

        page = self._page(topic, partition, offset, limit, newest_first, keep, timestamp,
                          isolation)
        rows = [{
            "offset": r.offset, "timestamp": render.timestamp_text(r.timestamp),
            "timestamp_type": r.timestamp_type,
            "control": r.control, "producer_id": r.producer_id, "transaction": r.transaction,
            "key": render.show_bytes(r.key, "text" if fmt == "hex" else fmt),
            "value": render.show_bytes(r.value, fmt),
            "headers": [(k, render.show_bytes(v, "text")) for k, v in r.headers],
        } for r in page.records]
        return page, rows

    def produce(self, topic: str, partition: int | None, key: bytes | None, value: bytes | None,
                headers: list[tuple[str, bytes]]) -> tuple[int, int]:
        """Send one message and wait for it: (partition, offset)."""
        from confluent_kafka import Producer

        cluster = self.cluster()
        partitions = self.partitions(topic)
        if partition is not None and partition not in partitions:
            raise CliError(f"topic '{topic}' has no partition {partition}", code=2)
        with self._lock:
            if self._producer is None:
                self._producer = Producer(cluster.config(**{
                    "message.timeout.ms": int(max(self.timeout, 10) * 1000), "linger.ms": 0}))
            producer = self._producer
        outcome: list = []
        extra = {} if partition is None else {"partition": partition}
        producer.produce(topic, value=value, key=key, headers=headers or None,
                         on_delivery=lambda err, msg: outcome.append((err, msg)), **extra)
        deadline = time.monotonic() + max(self.timeout, 10) + 5
        while not outcome and time.monotonic() < deadline:
            producer.poll(0.1)
        if not outcome:
            raise CliError(f"the message to '{topic}' was not delivered in time")
        err, msg = outcome[0]
        if err is not None:
            raise CliError(f"the message to '{topic}' was not delivered: {err.str()}")
        return msg.partition(), msg.offset()

    # -- cluster ---------------------------------------------------------------------------

    def cluster_page(self) -> dict[str, Any]:
        from ..cli.cluster import cluster_view

        cluster = self.cluster()
        view = cluster_view(cluster.bootstrap, cluster.timeout, self.security)
        snap = self.metadata.get()
        leaders: dict[int, int] = {}
        replicas: dict[int, int] = {}
        under, offline = [], []
        total = 0
        for name, topic in sorted(snap.topics.items()):
            for p, pm in sorted(topic.partitions.items()):
                total += 1
                if pm.leader >= 0:
                    leaders[pm.leader] = leaders.get(pm.leader, 0) + 1
                for r in pm.replicas:
                    replicas[r] = replicas.get(r, 0) + 1
                if pm.leader >= 0 and len(pm.isr) >= len(pm.replicas):
                    continue
                row = {"topic": name, "partition": p,
                       "leader": pm.leader if pm.leader >= 0 else None,
                       "replicas": list(pm.replicas), "isr": list(pm.isr)}
                if pm.leader < 0:
                    offline.append(row)
                else:
                    under.append(row)
        self._brokers = [dict(b) for b in view["brokers"]]
        for b in view["brokers"]:
            b["leaders"] = leaders.get(b["id"], 0)
            b["partitions"] = replicas.get(b["id"], 0)
            b["controller"] = b["id"] == view["controller"]
        return {**view, "topics": len(snap.topics), "partitions": total,
                "under_replicated": under, "offline": offline}

    def broker_rates(self) -> dict[str, Any]:
        """Produce and fetch rates per broker from their metrics, where the console knows where
        (--metrics-port, --metrics-url) and they answer."""
        if not self.rates.configured:
            return {"configured": False, "brokers": []}
        if self._brokers is None:
            from ..cli.cluster import cluster_view

            cluster = self.cluster()
            self._brokers = cluster_view(cluster.bootstrap, cluster.timeout,
                                         self.security)["brokers"]
        found = self.rates.rates(self._brokers)
        rows = [{"id": b["id"], **found[b["id"]]} for b in self._brokers if b["id"] in found]
        return {"configured": True, "brokers": rows}

    def broker_configs(self, broker_id: int) -> list[dict[str, Any]]:
        from ..cli.configs import broker_configs

        cluster = self.cluster()
        configs = broker_configs(cluster.bootstrap, cluster.timeout, str(broker_id),
                                 f"broker {broker_id}", self.security)
        for c in configs:
            if c["sensitive"]:
                c["value"] = None
                c["synonyms"] = [{**s, "value": None} for s in c["synonyms"]]
        return configs

    # -- topics ----------------------------------------------------------------------------

    def topics(self) -> list[dict[str, Any]]:
        """Every topic with its partitions, replication factor, under-replicated and offline
        partitions and whether it is internal, from the shared metadata (one Metadata request
        every few seconds at most, however many pages ask)."""
        rows = []
        for name, t in sorted(self.metadata.get().topics.items()):
            parts = t.partitions.values()
            rows.append({
                "topic": name, "internal": t.internal, "partitions": len(t.partitions),
                "replication_factor": max((len(p.replicas) for p in parts), default=0),
                "under_replicated": sum(1 for p in parts if len(p.isr) < len(p.replicas)),
                "offline": sum(1 for p in parts if p.leader < 0),
            })
        return rows

    def topic(self, topic: str) -> dict[str, Any]:
        cluster = self.cluster()
        desc = cluster.describe_topic(topic)
        partitions = cli_topics.partition_rows(cluster, topic, desc)
        configs = cli_topics.topic_configs(cluster, topic)
        return {
            "topic": topic, "topic_id": cli_topics.topic_id_text(desc.topic_id),
            "internal": bool(desc.is_internal), "partitions": partitions,
            "replication_factor": max((len(p["replicas"]) for p in partitions), default=0),
            "configs": configs,
            "records": sum((p["log_end_offset"] or 0) - (p["log_start_offset"] or 0)
                           for p in partitions),
        }

    def create_topic(self, topic: str, partitions: int, replication_factor: int,
                     configs: dict[str, str]) -> None:
        try:
            cli_topics.create_topic(self.cluster(), topic, partitions, replication_factor,
                                    configs)
        finally:
            self.metadata.invalidate()

    def delete_topic(self, topic: str) -> None:
        try:
            cli_topics.delete_topics(self.cluster(), [topic])
        finally:
            self.metadata.invalidate()

    def add_partitions(self, topic: str, total: int) -> int:
        try:
            return cli_topics.add_partitions(self.cluster(), topic, total)
        finally:
            self.metadata.invalidate()

    def alter_topic_configs(self, topic: str, to_set: dict[str, str],
                            to_delete: list[str]) -> None:
        cli_topics.alter_topic_configs(self.cluster(), topic, to_set, to_delete)

    # -- security --------------------------------------------------------------------------

    def security_page(self, acl_filter=None) -> dict[str, Any]:
        """ACLs (those matching `acl_filter`, a confluent AclBindingFilter, or all), SCRAM users
        (mechanisms and iterations: never a salt or a key) and client quotas; each part is its
        rows, or the reason the cluster gave for not listing them (no authorizer, not allowed)."""
        from ..cli.acls import acl_rows
        from ..cli.quotas import quota_rows
        from ..cli.users import user_rows

        cluster = self.cluster()

        def part(fn):
            try:
                return fn(), None
            except CliError as exc:
                return [], exc.message

        def quotas():
            host, port = self._address(cluster)
            return quota_rows(host, port, {}, cluster.timeout, self.security)

        acls, acls_error = part(lambda: acl_rows(cluster, [acl_filter] if acl_filter else None))
        users, users_error = part(lambda: user_rows(cluster))
        quota_list, quotas_error = part(quotas)
        return {"acls": acls, "acls_error": acls_error, "users": users,
                "users_error": users_error, "quotas": quota_list, "quotas_error": quotas_error}

    @staticmethod
    def _address(cluster) -> tuple[str, int]:
        from ..cli.client import _addresses

        return _addresses(cluster.bootstrap)[0]

    def create_acl(self, binding) -> None:
        from ..cli.acls import create_acls

        create_acls(self.cluster(), [binding])

    def delete_acls(self, acl_filter) -> list[tuple]:
        from ..cli.acls import delete_acls

        return delete_acls(self.cluster(), [acl_filter])

    def set_scram(self, user: str, mechanism: str, password: str, iterations: int) -> None:
        from ..cli.users import set_scram_credential

        set_scram_credential(self.cluster(), user, mechanism, password, iterations)

    def delete_scram(self, user: str, mechanism: str | None) -> list[str]:
        from ..cli.users import delete_scram_credentials

        return delete_scram_credentials(self.cluster(), user, mechanism)

    def alter_quotas(self, target: dict, to_set: dict[str, float], to_delete: list[str]) -> str:
        from ..cli.quotas import alter_quotas

        cluster = self.cluster()
        host, port = self._address(cluster)
        return alter_quotas(host, port, target, to_set, to_delete, cluster.timeout,
                            self.security)
