"""KIP-951's leader hints: a partition answered NOT_LEADER_OR_FOLLOWER (or FENCED_LEADER_EPOCH)
in Produce v10+ carries the leader this broker knows of (id and epoch, from the metadata cache
the controller keeps up to date), and the response the endpoints of those leaders on the
listener the request came in on, so a client can go straight to the new leader instead of
asking for metadata first. Nothing is hinted where no leader is known (a single node leads
everything it has)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

#: the errors Kafka adds the hint to
HINTED = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})


class LeaderHints:
    """Collects the hints of one response."""

    def __init__(self, broker, connection) -> None:
        self.cache = broker.replicas.cache if broker.replicas is not None else None
        self.listener = broker.advertised_listener(connection).name if self.cache else None
        self.leaders: set[int] = set()

    def current_leader(self, code: ErrorCode, topic: str, partition: int) -> tuple[int, int]:
        """(leader id, leader epoch) for a partition answered `code`; (-1, -1): no hint."""
        if self.cache is None or code not in HINTED:
            return -1, -1
        info = self.cache.partition(topic, partition)
        if info is None or info.leader < 0 or self.cache.endpoint(info.leader,
                                                                  self.listener) is None:
            return -1, -1
        self.leaders.add(info.leader)
        return info.leader, info.leader_epoch

    def node_endpoints(self) -> list[tuple[int, str, int, str | None]]:
        """(node id, host, port, rack) of each leader hinted, in id order."""
        out = []
        for node in sorted(self.leaders):
            host, port = self.cache.endpoint(node, self.listener)
            out.append((node, host, port, self.cache.brokers[node].rack))
        return out
