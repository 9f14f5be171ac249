"""Every group's description and committed offsets in a handful of requests, for the lag
sampler: FindCoordinator v4 for all the groups at once (KIP-699), then, per coordinator, one
DescribeGroups and one OffsetFetch v8 (KIP-709) for all of its groups. confluent-kafka's
AdminClient sends four requests a group for the same (a FindCoordinator before each
DescribeGroups and OffsetFetch): 4,800 requests a round for 1,000 groups.

Those versions came with Kafka 3.0; against an older cluster the caller falls back to the
AdminClient. A group its coordinator cannot answer for right now (loading, moving) is left out
of the round, and is read again in the next."""

from __future__ import annotations

from ..cli.client import Group, Member, _addresses
from ..cli.offsets_decoder import assignment_partitions
from ..cli.wire import describe_groups, fetch_group_offsets, find_group_coordinators

TP = tuple[str, int]
BATCH = 500  # groups a request at most


def _chunks(items: list[str]) -> list[list[str]]:
    return [items[i:i + BATCH] for i in range(0, len(items), BATCH)]


def to_group(described, coordinator: tuple[int, str, int]) -> Group:
    """A DescribeGroups answer as the Group that brook.cli.client.Cluster.groups gives."""
    consumer = described.protocol_type == "consumer"

    def partitions(assignment: bytes) -> tuple[TP, ...]:
        decoded = assignment_partitions(assignment) if consumer and assignment else None
        return tuple(sorted((t, p) for t, ps in (decoded or {}).items() for p in ps))

    members = tuple(Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                           partitions(m.member_assignment)) for m in described.members)
    return Group(group_id=described.group_id, state=described.group_state or "Unknown",
                 assignor=described.protocol_data if consumer else "",
                 simple=not described.protocol_type, coordinator=coordinator, members=members)


def read_groups(bootstrap: str, group_ids: list[str], timeout: float,
                security) -> tuple[dict[str, Group], dict[str, dict[TP, int]]]:
    """({group: Group}, {group: {(topic, partition): committed offset}}) of the groups the
    coordinators answered for."""
    host, port = _addresses(bootstrap)[0]
    coordinators: dict[str, tuple[int, str, int] | str] = {}
    for chunk in _chunks(group_ids):
        coordinators.update(find_group_coordinators(host, port, chunk, timeout, security))
    by_node: dict[tuple[int, str, int], list[str]] = {}
    for group_id in group_ids:
        node = coordinators.get(group_id)
        if isinstance(node, tuple):
            by_node.setdefault(node, []).append(group_id)
    groups: dict[str, Group] = {}
    committed: dict[str, dict[TP, int]] = {}
    for node, names in by_node.items():
        for chunk in _chunks(names):
            for d in describe_groups(node[1], node[2], chunk, timeout, security):
                if d.error_code == 0:
                    groups[d.group_id] = to_group(d, node)
            for group_id, offsets in fetch_group_offsets(node[1], node[2], chunk, timeout,
                                                         security).items():
                if isinstance(offsets, dict):
                    committed[group_id] = offsets
    return ({g: d for g, d in groups.items() if g in committed},
            {g: o for g, o in committed.items() if g in groups})
