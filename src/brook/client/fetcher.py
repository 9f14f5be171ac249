"""Reading offset ranges of partitions as Arrow record batches, over the Kafka protocol.

`RangeReader.read(topic, partition, start, end)` finds the partition's leader through
Metadata, sends Fetch requests from ``start`` and decodes each response's record batches in
bulk (brook.records.arrow), yielding the rows with offsets in ``[start, end)``: one Arrow
batch per Fetch response that has any. Offsets missing inside the range (compaction,
transaction markers) are fine; the read ends at the first batch reaching ``end``.

* Memory is bounded by the fetch sizes: one response at a time, at most
  ``max.partition.fetch.bytes`` of records (``fetch.max.bytes`` for the whole response), as
  received plus decompressed, plus the Arrow batch made of it.
* Retriable errors (a leader that moved, a broker that went away, a partition not yet
  known) refresh the metadata and try again, with a backoff, until
  ``kafkaConsumer.pollTimeoutMs`` passes without progress.
* Data loss (offsets below the log start, a log ending before the range's end, a partition
  that no longer exists) fails the read with `DataLossError` when ``fail_on_data_loss``;
  otherwise it is logged and the read goes on from the log start (or ends).
* Damaged batches (CRC, impossible records, unknown codecs) fail the read with
  `CorruptRecordError`: never wrong rows.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta

import pyarrow as pa
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from ..protocol.messages import request_class
from ..records.arrow import decode
from ..security.client_settings import ClientSecurity
from .connection import BrokerConnection, KafkaClientError, parse_bootstrap

log = logging.getLogger("brook.client")

FETCH, LIST_OFFSETS, METADATA = 1, 2, 3
FETCH_VERSION, LIST_OFFSETS_VERSION, METADATA_VERSION = 11, 5, 9
_FETCH = load_payload_module(FETCH, FETCH_VERSION, EntityType.request)
_LIST = load_payload_module(LIST_OFFSETS, LIST_OFFSETS_VERSION, EntityType.request)
_META = load_payload_module(METADATA, METADATA_VERSION, EntityType.request)
EARLIEST_TIMESTAMP = -2
READ_UNCOMMITTED, READ_COMMITTED = 0, 1

_RETRIABLE = {ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
              ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
              ErrorCode.kafka_storage_error, ErrorCode.request_timed_out,
              ErrorCode.broker_not_available, ErrorCode.replica_not_available,
              ErrorCode.not_coordinator, ErrorCode.network_exception,
              ErrorCode.offset_not_available, ErrorCode.unknown_topic_or_partition}
# A partition unknown this many times in a row is taken as gone (deleted), not as metadata lag.
UNKNOWN_PARTITION_TRIES = 5


class DataLossError(RuntimeError):
    """Records a read was to return are not in the log any more (failOnDataLoss=true)."""


# librdkafka's names (and defaults, except the per-partition fetch size: a range is read
# start to end, and large fetches cost the broker fewer requests).
_SETTINGS = {
    "max.partition.fetch.bytes": 10_485_760,
    "fetch.max.bytes": 52_428_800,
    "fetch.wait.max.ms": 500,
    "socket.timeout.ms": 60_000,
    "retry.backoff.ms": 100,
}


@dataclass(frozen=True)
class FetchSettings:
    bootstrap: tuple[tuple[str, int], ...]
    max_partition_fetch_bytes: int = _SETTINGS["max.partition.fetch.bytes"]
    fetch_max_bytes: int = _SETTINGS["fetch.max.bytes"]
    max_wait_ms: int = _SETTINGS["fetch.wait.max.ms"]
    socket_timeout_ms: int = _SETTINGS["socket.timeout.ms"]
    retry_backoff_ms: int = _SETTINGS["retry.backoff.ms"]
    read_committed: bool = True  # librdkafka's default isolation level
    client_id: str = "brook"
    security: ClientSecurity = ClientSecurity()  # TLS and SASL settings, PLAINTEXT by default

    @classmethod
    def from_client(cls, client: Mapping[str, str]) -> "FetchSettings":
        """From librdkafka-style settings (the connector's ``kafka.*`` options); settings this
        client has no use for (librdkafka tuning, the group id) are ignored."""
        bootstrap = client.get("bootstrap.servers")
        if not bootstrap:
            raise ValueError("bootstrap.servers is required")
        security = ClientSecurity.from_properties(client)  # ClientSecurityError is a ValueError
        isolation = client.get("isolation.level", "read_committed").lower()
        if isolation not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"invalid isolation.level {isolation!r}")
        values = {k: int(client.get(k, v)) for k, v in _SETTINGS.items()}
        return cls(
            bootstrap=tuple(parse_bootstrap(bootstrap)),
            max_partition_fetch_bytes=values["max.partition.fetch.bytes"],
            fetch_max_bytes=values["fetch.max.bytes"],
            max_wait_ms=values["fetch.wait.max.ms"],
            socket_timeout_ms=values["socket.timeout.ms"],
            retry_backoff_ms=values["retry.backoff.ms"],
            read_committed=isolation == "read_committed",
            client_id=client.get("client.id", "brook"),
            security=security,
        )


_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_DELTA = struct.Struct(">i")


def _after_whole_batches(records) -> int | None:
    """The offset after the last whole batch of a Fetch response's records (headers only)."""
    pos, size, after = 0, len(records), None
    while size - pos >= 61:
        base, length = _PREFIX.unpack_from(records, pos)
        if pos + 12 + length > size or length < 49:
            break
        after = base + _LAST_DELTA.unpack_from(records, pos + 23)[0] + 1
        pos += 12 + length
    return after


@dataclass(slots=True)
class PartitionData:
    """One partition of a Fetch v11 answer; `records` points into the connection's buffer."""

    partition: int
    error_code: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None
    records: memoryview | None


_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_PARTITION = struct.Struct(">ihqqq")  # index, error, high watermark, last stable, log start
_ABORTED = struct.Struct(">qq")


def parse_fetch_v11(data: memoryview) -> tuple[ErrorCode, list[tuple[str, PartitionData]]]:
    """A Fetch v11 answer (response header v0 included), read in place: kio would copy every
    partition's records into bytes of their own. Raises KafkaClientError on malformed bytes."""
    try:
        pos = 4 + 4  # correlation id, throttle time
        (error,) = _I16.unpack_from(data, pos)
        pos += 2 + 4  # session id
        (topics,) = _I32.unpack_from(data, pos)
        pos += 4
        out = []
        for _ in range(topics):
            (n,) = _I16.unpack_from(data, pos)
            name = bytes(data[pos + 2 : pos + 2 + n]).decode("utf-8")
            pos += 2 + n
            (partitions,) = _I32.unpack_from(data, pos)
            pos += 4
            for _ in range(partitions):
                index, perr, high, stable, start = _PARTITION.unpack_from(data, pos)
                pos += _PARTITION.size
                (count,) = _I32.unpack_from(data, pos)
                pos += 4
                aborted = None
                if count >= 0:
                    aborted = [_ABORTED.unpack_from(data, pos + 16 * i) for i in range(count)]
                    pos += 16 * count
                pos += 4  # preferred read replica
                (size,) = _I32.unpack_from(data, pos)
                pos += 4
                records = None
                if size >= 0:
                    if pos + size > len(data):
                        raise KafkaClientError("a Fetch answer's records run past its end")
                    records = data[pos : pos + size]
                    pos += size
                out.append((name, PartitionData(index, ErrorCode(perr), high, stable, start,
                                                aborted, records)))
        return ErrorCode(error), out
    except (struct.error, ValueError) as exc:
        raise KafkaClientError(f"malformed Fetch answer: {exc}") from None


class _Retry(Exception):
    """A retriable failure: refresh the metadata and fetch again."""


class RangeReader:
    """Reads ranges of partitions; keeps one connection per broker between reads."""

    def __init__(self, settings: FetchSettings, clock=time.monotonic, sleep=time.sleep) -> None:
        self.settings = settings
        self.clock, self.sleep = clock, sleep
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._leaders: dict[tuple[str, int], tuple[str, int]] = {}

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def __enter__(self) -> "RangeReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ reading

    def read(self, topic: str, partition: int, start: int, end: int, *,
             include_headers: bool = False, fail_on_data_loss: bool = True,
             poll_timeout_ms: int = 120_000) -> Iterator[pa.RecordBatch]:
        ahead: list = []  # a Fetch sent ahead: [leader address, its position]
        try:
            yield from self._read(topic, partition, start, end, include_headers,
                                  fail_on_data_loss, poll_timeout_ms, ahead)
        finally:
            if ahead:  # a read ended (or failed) with an answer still to come: drop it
                self._drop(ahead[0])

    def _read(self, topic, partition, start, end, include_headers, fail_on_data_loss,
              poll_timeout_ms, ahead: list) -> Iterator[pa.RecordBatch]:
        position = start
        deadline = self.clock() + poll_timeout_ms / 1000
        unknown = 0
        last_error = ""
        while position < end:
            try:
                if ahead and ahead[1] == position:
                    address = ahead[0]
                    ahead.clear()
                    data = self._fetch_answer(topic, partition, address)
                else:
                    if ahead:
                        self._drop(ahead[0])
                        ahead.clear()
                    data = self._fetch(topic, partition, position)
            except _Retry as exc:
                last_error = str(exc)
                if "unknown_topic_or_partition" in last_error:
                    unknown += 1
                    if unknown >= UNKNOWN_PARTITION_TRIES:
                        self._data_loss(fail_on_data_loss,
                                        f"{topic}-{partition} does not exist any more (range "
                                        f"[{start}, {end}) read up to {position})")
                        return
                self._leaders.pop((topic, partition), None)
                if self.clock() > deadline:
                    raise TimeoutError(f"no records from {topic}-{partition} at offset "
                                       f"{position} for kafkaConsumer.pollTimeoutMs="
                                       f"{poll_timeout_ms}: {last_error}") from None
                self.sleep(self.settings.retry_backoff_ms / 1000)
                continue
            unknown = 0
            if data.error_code == ErrorCode.offset_out_of_range:
                low = self._earliest(topic, partition)
                if position >= low:  # past the end: the log ends before the range does
                    self._data_loss(fail_on_data_loss,
                                    f"the log of {topic}-{partition} ends before offset "
                                    f"{position}, inside the range [{start}, {end}) being read")
                    return
                self._data_loss(fail_on_data_loss,
                                f"cannot read {topic}-{partition} from offset {position} (range "
                                f"[{start}, {end})): offsets [{position}, {min(low, end)}) are "
                                f"not in the log any more (it starts at {low})")
                position = low
                continue
            if data.error_code != ErrorCode.none:
                raise KafkaClientError(f"fetching {topic}-{partition} at offset {position}: "
                                       f"{data.error_code.name}")
            records = data.records or b""
            # While this response is decoded, the broker prepares the next one: the position
            # after its whole batches is known from their headers alone.
            after = _after_whole_batches(records)
            if after is not None and position < after < end:
                sent = self._fetch_ahead(topic, partition, after)
                if sent is not None:
                    ahead[:] = [sent, after]
            aborted = None
            if self.settings.read_committed:
                aborted = data.aborted_transactions or []
            decoded = decode(records, topic, partition, start=position, end=end,
                             include_headers=include_headers, aborted=aborted)
            if decoded.batch.num_rows:
                yield decoded.batch
            if decoded.next_offset is not None and decoded.next_offset > position:
                position = decoded.next_offset
                deadline = self.clock() + poll_timeout_ms / 1000
                continue
            stable = data.last_stable_offset if self.settings.read_committed else -1
            limit = stable if stable >= 0 else data.high_watermark
            if records:
                # Only part of a batch fitted: Kafka's brokers send the first batch whole
                # whatever the limits, so this is a broker that does not; ask for more.
                raise KafkaClientError(f"{topic}-{partition} at offset {position}: a record "
                                       f"batch larger than max.partition.fetch.bytes="
                                       f"{self.settings.max_partition_fetch_bytes}")
            if data.high_watermark <= position:
                self._data_loss(fail_on_data_loss,
                                f"the log of {topic}-{partition} ends at offset "
                                f"{data.high_watermark}, before the end {end} of the range "
                                f"[{start}, {end}) being read")
                return
            if self.clock() > deadline:
                raise TimeoutError(f"no records from {topic}-{partition} at offset {position} "
                                   f"for kafkaConsumer.pollTimeoutMs={poll_timeout_ms} (the "
                                   f"last stable offset is {limit})")

    def _data_loss(self, fail: bool, message: str) -> None:
        if fail:
            raise DataLossError(message + ". Some data may have been lost (deleted by retention, "
                                "or the topic was deleted). If you want the query to go on, set "
                                "the option failOnDataLoss to false.")
        log.warning("%s; skipped (failOnDataLoss=false)", message)

    # ------------------------------------------------------------------ requests

    def _fetch_body(self, topic: str, partition: int, position: int):
        s = self.settings
        return request_class(FETCH, FETCH_VERSION)(
            replica_id=-1, max_wait=timedelta(milliseconds=s.max_wait_ms), min_bytes=1,
            max_bytes=s.fetch_max_bytes,
            isolation_level=READ_COMMITTED if s.read_committed else READ_UNCOMMITTED,
            session_id=0, session_epoch=-1,
            topics=(_FETCH.FetchTopic(topic=topic, partitions=(_FETCH.FetchPartition(
                partition=partition, current_leader_epoch=-1, fetch_offset=position,
                log_start_offset=-1, partition_max_bytes=s.max_partition_fetch_bytes),)),),
            forgotten_topics_data=(), rack_id="")

    def _fetch_timeout(self) -> float:
        return (self.settings.socket_timeout_ms + self.settings.max_wait_ms) / 1000

    def _fetch(self, topic: str, partition: int, position: int):
        leader = self._leaders.get((topic, partition)) or self._find_leader(topic, partition)
        try:
            connection = self._connection(leader)
            connection.send(self._fetch_body(topic, partition, position))
        except KafkaClientError as exc:
            self._connections.pop(leader, None)
            self._leaders.pop((topic, partition), None)
            raise _Retry(str(exc)) from None
        return self._fetch_answer(topic, partition, leader)

    def _fetch_ahead(self, topic: str, partition: int, position: int) -> tuple[str, int] | None:
        """Send the Fetch from `position` now, to read its answer later; None if it could not
        be sent (the fetch is then sent again when it is needed)."""
        leader = self._leaders.get((topic, partition))
        if leader is None or leader not in self._connections:
            return None
        try:
            self._connections[leader].send(self._fetch_body(topic, partition, position))
        except KafkaClientError:
            self._connections.pop(leader, None)
            return None
        return leader

    def _fetch_answer(self, topic: str, partition: int, leader: tuple[str, int]):
        connection = self._connections.get(leader)
        if connection is None:
            raise _Retry(f"the connection to {leader[0]}:{leader[1]} was lost")
        try:
            response = parse_fetch_v11(connection.receive_raw(
                request_class(FETCH, FETCH_VERSION), self._fetch_timeout()))
        except KafkaClientError as exc:
            self._drop(leader)
            self._leaders.pop((topic, partition), None)
            raise _Retry(str(exc)) from None
        return self._partition_data(topic, partition, response)

    def _drop(self, address: tuple[str, int]) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.close()

    def _partition_data(self, topic: str, partition: int, response) -> PartitionData:
        error, partitions = response
        if error != ErrorCode.none:
            raise _Retry(f"fetch: {error.name}")
        for name, p in partitions:
            if name == topic and p.partition == partition:
                if p.error_code in _RETRIABLE:
                    raise _Retry(f"fetch {topic}-{partition}: {p.error_code.name}")
                return p
        raise _Retry(f"the fetch response has no {topic}-{partition}")

    def _earliest(self, topic: str, partition: int) -> int:
        body = request_class(LIST_OFFSETS, LIST_OFFSETS_VERSION)(
            replica_id=-1,
            isolation_level=READ_COMMITTED if self.settings.read_committed else READ_UNCOMMITTED,
            topics=(_LIST.ListOffsetsTopic(name=topic, partitions=(_LIST.ListOffsetsPartition(
                partition_index=partition, current_leader_epoch=-1,
                timestamp=EARLIEST_TIMESTAMP),)),))
        response = self._to_leader(topic, partition, body)
        for t in response.topics:
            for p in t.partitions:
                if p.partition_index == partition:
                    if p.error_code != ErrorCode.none:
                        raise _Retry(f"list offsets {topic}-{partition}: {p.error_code.name}")
                    return p.offset
        raise _Retry(f"the list offsets response has no {topic}-{partition}")

    def _to_leader(self, topic: str, partition: int, body, timeout: float | None = None):
        leader = self._leaders.get((topic, partition)) or self._find_leader(topic, partition)
        try:
            return self._connection(leader).request(body, timeout)
        except KafkaClientError as exc:
            self._connections.pop(leader, None)
            self._leaders.pop((topic, partition), None)
            raise _Retry(str(exc)) from None

    def _connection(self, address: tuple[str, int]) -> BrokerConnection:
        connection = self._connections.get(address)
        if connection is None:
            connection = BrokerConnection(*address, timeout=self.settings.socket_timeout_ms / 1000,
                                          client_id=self.settings.client_id,
                                          security=self.settings.security)
            self._connections[address] = connection
        return connection

    def _find_leader(self, topic: str, partition: int) -> tuple[str, int]:
        body = request_class(METADATA, METADATA_VERSION)(
            topics=(_META.MetadataRequestTopic(name=topic),), allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False)
        errors = []
        addresses = list(dict.fromkeys([*self._connections, *self.settings.bootstrap]))
        for address in addresses:
            try:
                response = self._connection(address).request(body)
            except KafkaClientError as exc:
                self._connections.pop(address, None)
                errors.append(str(exc))
                continue
            brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
            for t in response.topics:
                if t.name != topic:
                    continue
                if t.error_code != ErrorCode.none:
                    raise _Retry(f"metadata of {topic}: {t.error_code.name}")
                for p in t.partitions:
                    if p.partition_index == partition:
                        if p.error_code != ErrorCode.none or p.leader_id not in brokers:
                            raise _Retry(f"metadata of {topic}-{partition}: "
                                         f"{p.error_code.name}, leader {p.leader_id}")
                        leader = brokers[p.leader_id]
                        self._leaders[(topic, partition)] = leader
                        return leader
                raise _Retry(f"metadata of {topic}-{partition}: unknown_topic_or_partition")
            raise _Retry(f"metadata of {topic}: unknown_topic_or_partition")
        raise _Retry("no broker answered Metadata: " + "; ".join(errors))
