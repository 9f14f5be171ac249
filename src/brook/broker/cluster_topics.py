"""Creating topics in a cluster, as a Kafka 2.8 broker does in ZooKeeper mode: whichever
broker gets CreateTopics (or auto-creates) checks the topic, spreads its replicas over the
live brokers (`assignment`), and writes /config/topics/<t> and /brokers/topics/<t>; the
controller, watching /brokers/topics, elects the leaders and tells the replicas, which make
their logs. The answer waits (within the request's timeout) until this broker's metadata shows
every partition with a leader, so a client's next request finds them."""

from __future__ import annotations

import asyncio
import logging
import random
import uuid

from kio.schema.errors import ErrorCode

from ..controller.assignment import (ReplicationFactorError, assign_replicas,
                                  assign_replicas_rack_aware)
from ..controller.controller import topic_id_text
from ..cluster.zk_data import TopicAssignment
from .metadata import (INTERNAL_TOPICS, InvalidRequestError, MetadataError, validate_topic_configs,
                       validate_topic_name)
from .zookeeper_calls import ZooKeeperUnavailable, in_zookeeper

log = logging.getLogger(__name__)


class TopicRefused(Exception):
    def __init__(self, code: ErrorCode, text: str) -> None:
        super().__init__(text)
        self.code = code


async def _in_zookeeper(zk, call, *args):
    """A ZooKeeper call of a topic admin request: a failure (this broker's session may have
    expired, and it then resigns as controller) is answered NOT_CONTROLLER."""
    try:
        return await in_zookeeper(zk, call, *args)
    except ZooKeeperUnavailable as exc:
        raise TopicRefused(ErrorCode.not_controller, str(exc)) from None


def plan_assignment(broker, partitions: int, replication_factor: int,
                    explicit: dict[int, tuple[int, ...]] | None = None) -> dict[int, tuple[int, ...]]:
    live = broker.cluster.view.live_ids()
    if explicit:
        for p, replicas in explicit.items():
            if len(set(replicas)) != len(replicas) or not replicas:
                raise TopicRefused(ErrorCode.invalid_replica_assignment,
                                   f"partition {p}: replica assignment {list(replicas)} is not a set of brokers")
            unknown = [r for r in replicas if r not in live]
            if unknown:
                raise TopicRefused(ErrorCode.broker_not_available,
                                   f"partition {p}: brokers {unknown} are not alive")
        return dict(explicit)
    rf = broker.config.default_replication_factor if replication_factor == -1 else replication_factor
    try:
        return spread(broker, live, partitions, rf)
    except ReplicationFactorError as exc:
        raise TopicRefused(ErrorCode.invalid_replication_factor, str(exc)) from None


def spread(broker, live: list[int], partitions: int, rf: int, *, first_partition: int = 0,
           start_index: int = -1) -> dict[int, tuple[int, ...]]:
    """Kafka's assignment over the live brokers: rack-aware when every one has a broker.rack,
    rack-unaware when none has (and, with a warning, when only some have)."""
    registrations = broker.cluster.view.brokers
    racks = {b: registrations[b].registration.rack for b in live if b in registrations}
    if racks and all(racks.values()) and len(racks) == len(live):
        return assign_replicas_rack_aware(racks, partitions, rf, rng=random.Random(),
                                          first_partition=first_partition, start_index=start_index)
    if any(racks.values()):
        log.warning("only some brokers have a broker.rack (%s): replicas are assigned without "
                    "racks", racks)
    return assign_replicas(live, partitions, rf, rng=random.Random(),
                           first_partition=first_partition, start_index=start_index)


async def create_topic(broker, name: str, partitions: int, replication_factor: int,
                       configs: dict[str, str], *, explicit: dict[int, tuple[int, ...]] | None = None,
                       internal: bool = False, validate_only: bool = False) -> uuid.UUID | None:
    """Check and write the topic to ZooKeeper; its id (None with `validate_only`)."""
    try:
        validate_topic_name(name)
        if name in INTERNAL_TOPICS and not internal:
            raise InvalidRequestError(f"Creation of internal topic {name} is prohibited: the broker "
                                      "creates it, with its proper configuration, on first use.")
        validate_topic_configs(configs, broker.config.log_config)
    except MetadataError as exc:
        from .errors import error_code_for
        raise TopicRefused(error_code_for(exc), str(exc)) from None
    if partitions < 1 and not explicit:
        raise TopicRefused(ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.")
    assignment = plan_assignment(broker, partitions, replication_factor, explicit)
    if name in broker.replicas.cache.topics:
        raise TopicRefused(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    if validate_only:
        return None
    topic_id = uuid.uuid4()
    zk = broker.cluster.client
    made = await _in_zookeeper(zk, zk.create_topic, name,
                               TopicAssignment(topic_id_text(topic_id), assignment), configs)
    if not made:
        raise TopicRefused(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    log.info("Creating topic %s with configuration %s and initial partition assignment %s",
             name, configs, {p: list(r) for p, r in sorted(assignment.items())})
    return topic_id


async def wait_for_leaders(broker, names: list[str], timeout_s: float) -> None:
    """Until this broker's metadata shows every partition of `names` with a leader."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    cache = broker.replicas.cache
    while loop.time() < deadline:
        if all(name in cache.topics and cache.topics[name]
               and all(p.leader >= 0 for p in cache.topics[name].values()) for name in names):
            return
        await asyncio.sleep(0.05)


async def add_partitions(broker, name: str, count: int, explicit: list[tuple[int, ...]] | None,
                         validate_only: bool) -> None:
    """CreatePartitions in a cluster: the topic's assignment grown to `count` partitions, the
    new ones spread as Kafka spreads them (same replication factor as partition 0)."""
    zk = broker.cluster.client
    current = await _in_zookeeper(zk, zk.read_topic, name)
    if current is None or name not in broker.replicas.cache.topics:
        raise TopicRefused(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
    have = len(current.partitions)
    if count <= have:
        raise TopicRefused(ErrorCode.invalid_partitions,
                           f"Topic currently has {have} partitions, which is higher than the "
                           f"requested {count}.")
    rf = len(current.partitions[0])
    if explicit:
        if len(explicit) != count - have:
            raise TopicRefused(ErrorCode.invalid_replica_assignment,
                               f"{len(explicit)} assignments for {count - have} new partitions")
        new = plan_assignment(broker, count - have, rf, {have + i: tuple(r) for i, r in enumerate(explicit)})
    else:
        live = broker.cluster.view.live_ids()
        try:
            start = sorted(live).index(current.partitions[0][0]) if current.partitions[0][0] in live else -1
            new = spread(broker, live, count - have, rf, first_partition=have, start_index=start)
        except ReplicationFactorError as exc:
            raise TopicRefused(ErrorCode.invalid_replication_factor, str(exc)) from None
    if validate_only:
        return
    grown = TopicAssignment(current.topic_id, {**current.partitions, **new})
    if not await _in_zookeeper(zk, zk.add_partitions, name, grown, current):
        raise TopicRefused(ErrorCode.reassignment_in_progress,
                           f"the assignment of {name!r} changed meanwhile; try again")
    log.info("Creating %d partitions for %s with the following replica assignment: %s",
             count - have, name, {p: list(r) for p, r in sorted(new.items())})
