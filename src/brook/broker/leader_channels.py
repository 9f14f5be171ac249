"""Channels to the leaders of partitions, for requests a broker sends another on a
coordinator's or a leader's behalf (markers to partition leaders, verifications to transaction
coordinators), on brook's inter-broker channel (``brook.cluster.channel``).

In a cluster the leader is the metadata cache's and the address its endpoint on the
inter-broker listener, with the cluster's inter-broker login. On a single node the leader is
this broker, reached on its inter-broker listener (``inter.broker.listener.name``, else the
first). One channel per broker, kept and pointed at the broker's current address."""

from __future__ import annotations

from ..cluster.channel import BrokerChannel


class LeaderChannels:
    def __init__(self, broker, client_id: str) -> None:
        self.broker = broker
        self.client_id = client_id
        self.channels: dict[int, BrokerChannel] = {}

    def leader(self, topic: str, partition: int) -> tuple[int, tuple[str, int]] | None:
        """(broker id, address) of the partition's leader, None when it has none known."""
        b = self.broker
        if b.replicas is None:
            c = b.config
            name = c.inter_broker_listener_name
            listener = next((l for l in c.listeners if l.name == name), c.listeners[0])
            host = listener.host or "127.0.0.1"
            if host in ("0.0.0.0", "::"):
                host = "127.0.0.1"
            return b.broker_id, (host, listener.port)
        cache = b.replicas.cache
        info = cache.partition(topic, partition)
        if info is None or info.leader < 0:
            return None
        address = cache.endpoint(info.leader, b.replicas.listener)
        return None if address is None else (info.leader, address)

    def channel(self, broker_id: int, address: tuple[str, int]) -> BrokerChannel:
        ch = self.channels.get(broker_id)
        if ch is None:
            b = self.broker
            sasl = b.cluster.channel_credentials if b.cluster is not None else None
            ch = self.channels[broker_id] = BrokerChannel(
                broker_id, *address, client_id=f"broker-{b.broker_id}-{self.client_id}",
                timeout_s=b.config.request_timeout_ms / 1000, sasl=sasl,
                tls=getattr(b.config, "inter_broker_tls", None))
        else:
            ch.retarget(*address)
        return ch

    def close(self) -> None:
        for ch in self.channels.values():
            ch.close()
        self.channels.clear()
