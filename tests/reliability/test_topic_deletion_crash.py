"""A crash between a topic's deletion and the tombstones of its committed offsets: the next start
finishes the deletion, so a topic created again under the name never starts its groups at the
old topic's offsets. The crash is reproduced exactly by the metadata journal line it leaves."""

from __future__ import annotations

import json
import time

from kio.schema.errors import ErrorCode

from brook.broker.metadata import JOURNAL_FILE
from tests.support.wire_requests import create_topic
from tests.support.offsets_wire import OffsetsWire, wait_until


def metadata_request():
    from brook.protocol.messages import make
    from tests.support.kafka_wire import request_class

    cls = request_class(3, 12)
    topic = __import__(cls.__module__, fromlist=["x"]).MetadataRequestTopic
    return make(cls, topics=(make(topic, name="t", topic_id=None),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def journal_line(broker, record: dict) -> None:
    with open(broker.log_dir / JOURNAL_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def committed(broker, partitions: int = 40) -> None:
    with OffsetsWire(broker.bootstrap) as wire:
        wire.create_topics(t=partitions, other=1)
        for group in ("g1", "g2"):
            wire.commit(group, {"t": [(p, 100 + p, -1, "") for p in range(partitions)],
                                "other": [(0, 7, -1, "")]})


def test_a_crash_after_the_deletion_mark_is_finished_by_the_next_start(broker_factory):
    broker = broker_factory({"offsets.topic.num.partitions": 4})
    committed(broker)
    with OffsetsWire(broker.bootstrap) as wire:
        topic_id = wire.client.request(metadata_request()).topics[0].topic_id
    broker.stop()
    journal_line(broker, {"deleting": "t", "id": str(topic_id)})  # DeleteTopics' first write
    broker.start()
    with OffsetsWire(broker.bootstrap) as wire:
        wait_until(lambda: wire.fetch_groups(["g1", "g2"])[0] == {
            "g1": {("other", 0): (7, -1, "")}, "g2": {("other", 0): (7, -1, "")}},
            what="the deleted topic's offsets to go")
        deadline = time.monotonic() + 30
        while True:  # the name is free once the tombstones are written
            code = create_topic(wire.client, "t", 3).error_code
            if code == ErrorCode.none or time.monotonic() > deadline:
                break
            assert code == ErrorCode.topic_already_exists
            time.sleep(0.1)
        assert code == ErrorCode.none
        assert wire.fetch_groups(["g1"])[0] == {"g1": {("other", 0): (7, -1, "")}}
    broker.stop()
    broker.start()  # and nothing comes back after another start
    with OffsetsWire(broker.bootstrap) as wire:
        wait_until(lambda: wire.fetch_groups(["g1"])[1] == {}, what="loading")
        assert wire.fetch_groups(["g1", "g2"])[0] == {
            "g1": {("other", 0): (7, -1, "")}, "g2": {("other", 0): (7, -1, "")}}


def test_offsets_of_a_topic_that_no_longer_exists_are_dropped_at_load(broker_factory):
    """A topic gone from the metadata without a mark (as an older brook deleted topics): its
    groups' offsets are tombstoned once the coordinator has loaded."""
    broker = broker_factory({"offsets.topic.num.partitions": 4})
    committed(broker)
    broker.stop()
    journal_line(broker, {"delete": "t"})
    broker.start()
    with OffsetsWire(broker.bootstrap) as wire:
        wait_until(lambda: wire.fetch_groups(["g1", "g2"])[0] == {
            "g1": {("other", 0): (7, -1, "")}, "g2": {("other", 0): (7, -1, "")}},
            what="the vanished topic's offsets to go")
