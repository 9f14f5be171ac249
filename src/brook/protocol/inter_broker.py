"""The requests a controller sends to brokers in a ZooKeeper cluster (LeaderAndIsr,
UpdateMetadata, StopReplica) and a broker's ControlledShutdown to the controller, as kio
entities so that kio's reader and writer handle them like every other API.

kio's current schemas are Kafka 4's, which dropped these APIs with ZooKeeper; the fields and
their order here are those of Kafka 2.8's JSON schemas at the versions a 2.8 broker speaks
(LeaderAndIsr v5, UpdateMetadata v7, StopReplica v3, ControlledShutdown v3), all flexible.
"""


import uuid
from dataclasses import dataclass, field
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64

LEADER_AND_ISR = 4
STOP_REPLICA = 5
UPDATE_METADATA = 6
CONTROLLED_SHUTDOWN = 7

#: The one version of each served (brokers of one cluster run the same brook).
VERSIONS = {LEADER_AND_ISR: 5, STOP_REPLICA: 3, UPDATE_METADATA: 7, CONTROLLED_SHUTDOWN: 3}

# LeaderAndIsr's `type` (v5+): whether the request lists every partition of the broker.
INCREMENTAL = 0
FULL = 1


def _int32():
    return field(metadata={"kafka_type": "int32"})


def _int32s():
    return field(metadata={"kafka_type": "int32"}, default=())


def _entity(kind: EntityType, api_key: int):
    """Mark a dataclass as a kio entity of `api_key` at the version VERSIONS names."""
    header = RequestHeader if kind is not EntityType.response else ResponseHeader

    def mark(cls):
        cls.__type__ = EntityType.nested if kind is EntityType.nested else kind
        cls.__version__ = i16(VERSIONS[api_key])
        cls.__flexible__ = True
        cls.__api_key__ = i16(api_key)
        cls.__header_schema__ = header
        return cls
    return mark


def _nested_request(api_key):
    def mark(cls):
        cls = _entity(EntityType.request, api_key)(cls)
        cls.__type__ = EntityType.nested
        return cls
    return mark


def _nested_response(api_key):
    def mark(cls):
        cls = _entity(EntityType.response, api_key)(cls)
        cls.__type__ = EntityType.nested
        return cls
    return mark


_frozen = dataclass(frozen=True, slots=True, kw_only=True)

# ---------------------------------------------------------------- LeaderAndIsr v5


@_nested_request(LEADER_AND_ISR)
@_frozen
class LeaderAndIsrPartitionState:
    partition_index: i32 = _int32()
    controller_epoch: i32 = _int32()
    leader: i32 = _int32()
    leader_epoch: i32 = _int32()
    isr: tuple[i32, ...] = _int32s()
    partition_epoch: i32 = _int32()  # the state znode's zkVersion
    replicas: tuple[i32, ...] = _int32s()
    adding_replicas: tuple[i32, ...] = _int32s()
    removing_replicas: tuple[i32, ...] = _int32s()
    is_new: bool = field(metadata={"kafka_type": "bool"}, default=False)


@_nested_request(LEADER_AND_ISR)
@_frozen
class LeaderAndIsrTopicState:
    topic_name: str = field(metadata={"kafka_type": "string"})
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partition_states: tuple[LeaderAndIsrPartitionState, ...]


@_nested_request(LEADER_AND_ISR)
@_frozen
class LeaderAndIsrLiveLeader:
    broker_id: i32 = _int32()
    host_name: str = field(metadata={"kafka_type": "string"})
    port: i32 = _int32()


@_entity(EntityType.request, LEADER_AND_ISR)
@_frozen
class LeaderAndIsrRequest:
    controller_id: i32 = _int32()
    controller_epoch: i32 = _int32()
    broker_epoch: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    type_: i8 = field(metadata={"kafka_type": "int8"})
    topic_states: tuple[LeaderAndIsrTopicState, ...]
    live_leaders: tuple[LeaderAndIsrLiveLeader, ...]


@_nested_response(LEADER_AND_ISR)
@_frozen
class LeaderAndIsrPartitionError:
    partition_index: i32 = _int32()
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})


@_nested_response(LEADER_AND_ISR)
@_frozen
class LeaderAndIsrTopicError:
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partition_errors: tuple[LeaderAndIsrPartitionError, ...]


@_entity(EntityType.response, LEADER_AND_ISR)
@_frozen
class LeaderAndIsrResponse:
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    topics: tuple[LeaderAndIsrTopicError, ...]


# ---------------------------------------------------------------- UpdateMetadata v7


@_nested_request(UPDATE_METADATA)
@_frozen
class UpdateMetadataPartitionState:
    partition_index: i32 = _int32()
    controller_epoch: i32 = _int32()
    leader: i32 = _int32()
    leader_epoch: i32 = _int32()
    isr: tuple[i32, ...] = _int32s()
    zk_version: i32 = _int32()
    replicas: tuple[i32, ...] = _int32s()
    offline_replicas: tuple[i32, ...] = _int32s()


@_nested_request(UPDATE_METADATA)
@_frozen
class UpdateMetadataTopicState:
    topic_name: str = field(metadata={"kafka_type": "string"})
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partition_states: tuple[UpdateMetadataPartitionState, ...]


@_nested_request(UPDATE_METADATA)
@_frozen
class UpdateMetadataEndpoint:
    port: i32 = _int32()
    host: str = field(metadata={"kafka_type": "string"})
    listener: str = field(metadata={"kafka_type": "string"})
    security_protocol: i16 = field(metadata={"kafka_type": "int16"})


@_nested_request(UPDATE_METADATA)
@_frozen
class UpdateMetadataBroker:
    id_: i32 = _int32()
    endpoints: tuple[UpdateMetadataEndpoint, ...]
    rack: str | None = field(metadata={"kafka_type": "string"})


@_entity(EntityType.request, UPDATE_METADATA)
@_frozen
class UpdateMetadataRequest:
    controller_id: i32 = _int32()
    controller_epoch: i32 = _int32()
    broker_epoch: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    topic_states: tuple[UpdateMetadataTopicState, ...]
    live_brokers: tuple[UpdateMetadataBroker, ...]


@_entity(EntityType.response, UPDATE_METADATA)
@_frozen
class UpdateMetadataResponse:
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})


# ---------------------------------------------------------------- StopReplica v3


@_nested_request(STOP_REPLICA)
@_frozen
class StopReplicaPartitionState:
    partition_index: i32 = _int32()
    leader_epoch: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))
    delete_partition: bool = field(metadata={"kafka_type": "bool"})


@_nested_request(STOP_REPLICA)
@_frozen
class StopReplicaTopicState:
    topic_name: str = field(metadata={"kafka_type": "string"})
    partition_states: tuple[StopReplicaPartitionState, ...]


@_entity(EntityType.request, STOP_REPLICA)
@_frozen
class StopReplicaRequest:
    controller_id: i32 = _int32()
    controller_epoch: i32 = _int32()
    broker_epoch: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    topic_states: tuple[StopReplicaTopicState, ...]


@_nested_response(STOP_REPLICA)
@_frozen
class StopReplicaPartitionError:
    topic_name: str = field(metadata={"kafka_type": "string"})
    partition_index: i32 = _int32()
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})


@_entity(EntityType.response, STOP_REPLICA)
@_frozen
class StopReplicaResponse:
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    partition_errors: tuple[StopReplicaPartitionError, ...]


# ---------------------------------------------------------------- ControlledShutdown v3


@_entity(EntityType.request, CONTROLLED_SHUTDOWN)
@_frozen
class ControlledShutdownRequest:
    broker_id: i32 = _int32()
    broker_epoch: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))


@_nested_response(CONTROLLED_SHUTDOWN)
@_frozen
class RemainingPartition:
    topic_name: str = field(metadata={"kafka_type": "string"})
    partition_index: i32 = _int32()


@_entity(EntityType.response, CONTROLLED_SHUTDOWN)
@_frozen
class ControlledShutdownResponse:
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    remaining_partitions: tuple[RemainingPartition, ...]


REQUESTS = {LEADER_AND_ISR: LeaderAndIsrRequest, UPDATE_METADATA: UpdateMetadataRequest,
            STOP_REPLICA: StopReplicaRequest, CONTROLLED_SHUTDOWN: ControlledShutdownRequest}
RESPONSES = {LEADER_AND_ISR: LeaderAndIsrResponse, UPDATE_METADATA: UpdateMetadataResponse,
             STOP_REPLICA: StopReplicaResponse, CONTROLLED_SHUTDOWN: ControlledShutdownResponse}
