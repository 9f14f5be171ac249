"""The data of each znode, as Kafka 2.8 writes and reads it (kafka.zk.ZkData).

Kafka encodes with Jackson: compact JSON, UTF-8, and object keys in the order its Scala maps
iterate. The order means nothing to a parser, but it is kept so that `get /brokers/ids/1` in
zookeeper-shell shows what a Kafka broker would have written, byte for byte but the timestamp.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field

BROKER_REGISTRATION_VERSION = 5  # Kafka 2.7+ (KIP-584 added "features")
CONTROLLER_VERSION = 1  # Kafka 2.8 (version 2, with kraftControllerEpoch, is 3.4's migration)
CLUSTER_ID_VERSION = "1"  # a string in Kafka's ClusterIdZNode
INITIAL_CONTROLLER_EPOCH = 0  # /controller_epoch as created; the first controller makes it 1
NO_JMX_PORT = -1


class ZkDataError(ValueError):
    """A znode's data is not what Kafka writes there."""


def _dumps(value: dict) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _loads(data: bytes | None, what: str) -> dict:
    try:
        value = json.loads(data or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ZkDataError(f"{what} is not JSON: {data!r} ({exc})") from None
    if not isinstance(value, dict):
        raise ZkDataError(f"{what} is not a JSON object: {data!r}")
    return value


# ------------------------------------------------------------------ /brokers/ids/<id>



def new_cluster_id() -> str:
    """22 characters of URL-safe base64 of a random UUID, as Kafka makes them (/cluster/id, meta.properties)."""
    while True:
        s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not s.startswith("-"):
            return s

@dataclass(frozen=True, slots=True)
class Endpoint:
    """One advertised listener: PLAINTEXT://host:9092 is Endpoint("PLAINTEXT", "host", 9092)."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """What /brokers/ids/<id> holds (kafka.cluster.Broker with its registration's version)."""

    broker_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    version: int = BROKER_REGISTRATION_VERSION
    jmx_port: int = NO_JMX_PORT
    timestamp: int = 0  # ms, when it registered

    def endpoint(self, listener: str) -> Endpoint | None:
        for e in self.endpoints:
            if e.listener == listener:
                return e
        return None


def encode_broker(reg: BrokerRegistration) -> bytes:
    """BrokerIdZNode.encode of Kafka 2.8: "host" and "port" are the first PLAINTEXT endpoint's
    (null and -1 without one), for clients older than the endpoints list; "rack" only when
    broker.rack is set."""
    plaintext = next((e for e in reg.endpoints if e.security_protocol == "PLAINTEXT"), None)
    # The order of Scala 2.13's mutable.HashMap over these keys, as Kafka's JSON comes out.
    out: dict = {
        "features": {},
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in reg.endpoints},
        "endpoints": [e.connection_string for e in reg.endpoints],
    }
    if reg.rack is not None:
        out["rack"] = reg.rack
    out.update({
        "jmx_port": reg.jmx_port,
        "port": plaintext.port if plaintext else -1,
        "host": plaintext.host if plaintext else None,
        "version": reg.version,
        "timestamp": str(reg.timestamp),
    })
    return _dumps(out)


def _parse_endpoint(text: str, protocols: dict[str, str] | None) -> Endpoint:
    """EndPoint.createEndPoint: NAME://host:port, the name's protocol from the map (else the
    name itself, as listeners named after their protocol are)."""
    name, sep, rest = text.partition("://")
    host, colon, port = rest.rpartition(":")
    if not sep or not colon or not port.lstrip("-").isdigit():
        raise ZkDataError(f"endpoint {text!r} is not LISTENER://host:port")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    protocol = (protocols or {}).get(name, name)
    return Endpoint(name, host, int(port), protocol)


def decode_broker(broker_id: int, data: bytes | None) -> BrokerRegistration:
    """BrokerIdZNode.decode: any version from 1 on (version 1 has only host and port)."""
    what = f"the registration of broker {broker_id}"
    js = _loads(data, what)
    try:
        version = int(js["version"])
        if version < 1:
            raise ZkDataError(f"Unsupported version of broker registration: {data!r}")
        if version == 1:
            endpoints = (Endpoint("PLAINTEXT", js["host"], int(js["port"])),)
        else:
            protocols = js.get("listener_security_protocol_map")
            endpoints = tuple(_parse_endpoint(e, protocols) for e in js["endpoints"])
        rack = js.get("rack")
        return BrokerRegistration(broker_id, endpoints, rack if rack is None else str(rack), version,
                                  int(js.get("jmx_port", NO_JMX_PORT)), int(js.get("timestamp", 0)))
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ZkDataError):
            raise
        raise ZkDataError(f"Failed to parse ZooKeeper registration for broker {broker_id}: "
                          f"{data!r} ({type(exc).__name__}: {exc})") from None


# ------------------------------------------------------------------ /controller, /controller_epoch


def encode_controller(broker_id: int, timestamp: int) -> bytes:
    return _dumps({"version": CONTROLLER_VERSION, "brokerid": broker_id, "timestamp": str(timestamp)})


def decode_controller(data: bytes | None) -> int:
    """The controller's broker id (ControllerZNode.decode; any version, 2 too)."""
    js = _loads(data, "/controller")
    try:
        return int(js["brokerid"])
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"/controller has no broker id: {data!r}") from None


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes | None) -> int:
    try:
        return int((data or b"").decode())
    except (ValueError, UnicodeDecodeError):
        raise ZkDataError(f"/controller_epoch is not a number: {data!r}") from None


# ------------------------------------------------------------------ /cluster/id


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": CLUSTER_ID_VERSION, "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    js = _loads(data, "/cluster/id")
    cluster_id = js.get("id")
    if not isinstance(cluster_id, str) or not cluster_id:
        raise ZkDataError(f"/cluster/id has no id: {data!r}")
    return cluster_id


# ------------------------------------------------------------------ /brook/broker_secret (brook's own)

BROKER_SECRET_VERSION = 1


def encode_broker_secret(secret: bytes) -> bytes:
    import base64
    return _dumps({"version": BROKER_SECRET_VERSION, "secret": base64.b64encode(secret).decode()})


def decode_broker_secret(data: bytes | None) -> bytes:
    import base64
    import binascii
    js = _loads(data, "/brook/broker_secret")
    try:
        secret = base64.b64decode(js.get("secret") or "", validate=True)
    except (binascii.Error, TypeError, ValueError):
        secret = b""
    if len(secret) < 16:
        raise ZkDataError("/brook/broker_secret holds no secret of at least 16 bytes")
    return secret


# ------------------------------------------------------------------ /brokers/topics/<topic>

TOPIC_VERSION = 3  # Kafka 2.8 with a topic id (KIP-516)
PARTITION_STATE_VERSION = 1
TOPIC_CONFIG_VERSION = 1


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """A topic's replica assignment: for each partition, its replicas, the preferred leader
    first (TopicZNode); during a reassignment (KIP-455) the replicas are the target's and the
    original's together, with the ones being added and removed."""

    topic_id: str | None  # Kafka's base64 form of the topic's UUID
    partitions: dict[int, tuple[int, ...]]
    adding: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing: dict[int, tuple[int, ...]] = field(default_factory=dict)


def encode_topic(assignment: TopicAssignment) -> bytes:
    value: dict = {"version": TOPIC_VERSION}
    if assignment.topic_id is not None:
        value["topic_id"] = assignment.topic_id
    value["partitions"] = {str(p): list(r) for p, r in sorted(assignment.partitions.items())}
    value["adding_replicas"] = {str(p): list(r) for p, r in sorted(assignment.adding.items()) if r}
    value["removing_replicas"] = {str(p): list(r) for p, r in sorted(assignment.removing.items()) if r}
    return _dumps(value)


def decode_topic(topic: str, data: bytes | None) -> TopicAssignment:
    what = f"/brokers/topics/{topic}"
    js = _loads(data, what)
    try:
        partitions = {int(p): tuple(int(b) for b in r) for p, r in js["partitions"].items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ZkDataError(f"{what} has no partition assignment: {data!r}") from None
    topic_id = js.get("topic_id")
    moving = []
    for key in ("adding_replicas", "removing_replicas"):
        try:
            moving.append({int(p): tuple(int(b) for b in r) for p, r in (js.get(key) or {}).items()})
        except (TypeError, ValueError, AttributeError):
            raise ZkDataError(f"{what} has a malformed {key}: {data!r}") from None
    return TopicAssignment(topic_id if isinstance(topic_id, str) else None, partitions, *moving)


# ------------------------------------------------------------------ .../partitions/<p>/state


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's leader, leader epoch and ISR, and the epoch of the controller that wrote
    them (TopicPartitionStateZNode). `zk_version` is the znode's version as read: every
    change is conditional on it (-1 for a state not read from ZooKeeper)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1
    #: the zxid of the znode's last write (its mzxid), to tell whether a broker registered
    #: after it (-1: not read from ZooKeeper)
    zxid: int = -1


def encode_partition_state(state: PartitionState) -> bytes:
    return _dumps({"controller_epoch": state.controller_epoch, "leader": state.leader,
                   "version": PARTITION_STATE_VERSION, "leader_epoch": state.leader_epoch,
                   "isr": list(state.isr)})


def decode_partition_state(what: str, data: bytes | None, zk_version: int = -1,
                           zxid: int = -1) -> PartitionState:
    js = _loads(data, what)
    try:
        return PartitionState(int(js["leader"]), int(js["leader_epoch"]),
                              tuple(int(b) for b in js["isr"]), int(js["controller_epoch"]),
                              zk_version, zxid)
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"{what} is not a partition state: {data!r}") from None


# ------------------------------------------------------------------ /config/topics/<topic>


def encode_topic_config(configs: dict[str, str]) -> bytes:
    return _dumps({"version": TOPIC_CONFIG_VERSION, "config": dict(configs)})


def decode_topic_config(topic: str, data: bytes | None) -> dict[str, str]:
    js = _loads(data, f"/config/topics/{topic}")
    config = js.get("config", {})
    if not isinstance(config, dict):
        raise ZkDataError(f"/config/topics/{topic} has no config object: {data!r}")
    return {str(k): str(v) for k, v in config.items()}


# ------------------------------------------------------------------ /config/brokers/<id>

BROKER_CONFIG_VERSION = 1


def encode_broker_config(configs: dict[str, str]) -> bytes:
    return _dumps({"version": BROKER_CONFIG_VERSION, "config": dict(configs)})


def decode_broker_config(path: str, data: bytes | None) -> dict[str, str]:
    js = _loads(data, path)
    config = js.get("config", {})
    if not isinstance(config, dict):
        raise ZkDataError(f"{path} has no config object: {data!r}")
    return {str(k): str(v) for k, v in config.items()}


# ------------------------------------------------------------------ /config/changes

CONFIG_CHANGE_VERSION = 2


def encode_config_change(entity_path: str) -> bytes:
    return _dumps({"version": CONFIG_CHANGE_VERSION, "entity_path": entity_path})


def decode_config_change(data: bytes | None) -> str | None:
    try:
        js = _loads(data, "/config/changes")
    except ZkDataError:
        return None
    path = js.get("entity_path")
    return path if isinstance(path, str) else None


# ------------------------------------------------------------------ /latest_producer_id_block

PRODUCER_ID_BLOCK_VERSION = 1
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock size


def encode_producer_id_block(broker_id: int, start: int, end: int) -> bytes:
    return _dumps({"version": PRODUCER_ID_BLOCK_VERSION, "broker": broker_id,
                   "block_start": str(start), "block_end": str(end)})


def decode_producer_id_block_end(data: bytes | None) -> int:
    """The last id of the newest block handed out (-1: none yet)."""
    if not data:
        return -1
    js = _loads(data, "/latest_producer_id_block")
    try:
        return int(js["block_end"])
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"/latest_producer_id_block has no block_end: {data!r}") from None


# --- /admin/reassign_partitions (what older kafka-reassign-partitions.sh writes) -------------

def encode_reassignment_request(moves: dict[tuple[str, int], tuple[int, ...]]) -> bytes:
    return _dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(moves.items())]})


def decode_reassignment_request(data: bytes | None) -> dict[tuple[str, int], tuple[int, ...]]:
    """{(topic, partition): target replicas}; what is not Kafka's format raises ZkDataError."""
    doc = _loads(data, "/admin/reassign_partitions")
    out: dict[tuple[str, int], tuple[int, ...]] = {}
    for entry in doc.get("partitions") or ():
        try:
            topic, p = entry["topic"], int(entry["partition"])
            replicas = tuple(int(r) for r in entry["replicas"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ZkDataError(f"/admin/reassign_partitions: bad entry {entry!r}") from exc
        if not isinstance(topic, str):
            raise ZkDataError(f"/admin/reassign_partitions: bad topic in {entry!r}")
        out[(topic, p)] = replicas
    return out
