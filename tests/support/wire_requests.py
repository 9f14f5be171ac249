"""Requests built with kio for tests that talk to a broker over the wire (`kafka_wire`): the
payload module of an API version, record batches, and CreateTopics, DeleteTopics, Produce and
Fetch as the tests send them."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

from kio.index import load_payload_module
from kio.static.constants import EntityType

from brook.protocol import legacy
from brook.protocol.messages import make
from brook.records import Record, encode_batch


def req_mod(key: int, version: int):
    """The request module of an API version: kio's, or brook's for the versions Kafka 4.0
    removed (``brook.protocol.legacy``)."""
    if legacy.has(key, version):
        return legacy.module(key, version, "request")
    return load_payload_module(key, version, EntityType.request)


def batch(n=3, ts=None, value=b"v", **kw) -> bytes:
    ts = int(time.time() * 1000) if ts is None else ts
    return encode_batch([Record(i, ts, b"k%d" % i, value, ()) for i in range(n)], **kw)


def create_topic(client, name, partitions=1, configs=(), replication_factor=-1, version=7):
    m = req_mod(19, version)
    body = make(m.CreateTopicsRequest, topics=(make(
        m.CreatableTopic, name=name, num_partitions=partitions, replication_factor=replication_factor,
        assignments=(), configs=tuple(make(m.CreatableTopicConfig, name=k, value=v) for k, v in configs)),),
        timeout=timedelta(seconds=5), validate_only=False)
    return client.request(body).topics[0]


def produce(client, topic, parts: dict[int, bytes | None], acks=1, version=9):
    m = req_mod(0, version)
    body = make(m.ProduceRequest, transactional_id=None, acks=acks, timeout=timedelta(seconds=5),
                topic_data=(make(m.TopicProduceData, name=topic, partition_data=tuple(
                    make(m.PartitionProduceData, index=i, records=r) for i, r in parts.items())),))
    if acks == 0:
        client.send(body)
        return None
    resp = client.request(body)
    return {p.index: p for p in resp.responses[0].partition_responses}


def fetch_request(topic, offsets: dict[int, int], max_wait_ms=0, min_bytes=1, version=12,
                  partition_max_bytes=1 << 20, max_bytes=50 << 20):
    m = req_mod(1, version)
    return make(m.FetchRequest, cluster_id=None, replica_id=-1, max_wait=timedelta(milliseconds=max_wait_ms),
                min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                topics=(make(m.FetchTopic, topic=topic, partitions=tuple(
                    make(m.FetchPartition, partition=p, current_leader_epoch=-1, fetch_offset=o,
                         last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=partition_max_bytes)
                    for p, o in offsets.items())),),
                forgotten_topics_data=(), rack_id="")


def delete_topic(client, name):
    m = req_mod(20, 6)
    body = make(m.DeleteTopicsRequest, topics=(make(m.DeleteTopicState, name=name, topic_id=uuid.UUID(int=0)),),
                timeout=timedelta(seconds=5))
    return client.request(body).responses[0].error_code
