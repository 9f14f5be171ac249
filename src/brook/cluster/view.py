"""What the broker knows of the cluster: the live brokers and the controller, as an immutable
value replaced whole when ZooKeeper says something changed; and how two views differ, as
Kafka's controller tells brokers joining, leaving and bouncing apart."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from .zk_data import BrokerRegistration

NO_CONTROLLER = -1  # MetadataResponse.NO_CONTROLLER_ID


@dataclass(frozen=True, slots=True)
class LiveBroker:
    """A registered broker and its broker epoch: the czxid of its /brokers/ids/<id> znode,
    new with every registration, so a broker that restarted between two looks is told apart
    from one that stayed."""

    registration: BrokerRegistration
    epoch: int

    @property
    def broker_id(self) -> int:
        return self.registration.broker_id


@dataclass(frozen=True, slots=True)
class ClusterView:
    brokers: Mapping[int, LiveBroker] = field(default_factory=dict)
    controller_id: int = NO_CONTROLLER

    def live_ids(self) -> list[int]:
        return sorted(self.brokers)


@dataclass(frozen=True, slots=True)
class MembershipChange:
    added: tuple[int, ...]
    removed: tuple[int, ...]
    bounced: tuple[int, ...]  # re-registered (a new broker epoch) since the last look
    live: tuple[int, ...]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.bounced)

    def describe(self) -> str:
        """KafkaController.processBrokerChange's log line."""
        def ids(xs):
            return ",".join(map(str, xs))
        return (f"Newly added brokers: {ids(self.added)}, deleted brokers: {ids(self.removed)}, "
                f"bounced brokers: {ids(self.bounced)}, all live brokers: {ids(self.live)}")


def membership_change(before: Mapping[int, LiveBroker], after: Mapping[int, LiveBroker]) -> MembershipChange:
    return MembershipChange(
        added=tuple(sorted(after.keys() - before.keys())),
        removed=tuple(sorted(before.keys() - after.keys())),
        bounced=tuple(sorted(i for i in after.keys() & before.keys() if after[i].epoch != before[i].epoch)),
        live=tuple(sorted(after)),
    )
