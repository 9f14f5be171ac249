"""Internal topics belong to the broker: no client writes, deletes, grows, reconfigures or
creates `__consumer_offsets` (real broker processes, hand-built requests)."""

from __future__ import annotations

import time
from datetime import timedelta

from kio.schema.errors import ErrorCode

from brook.protocol.messages import make
from brook.records import Record, encode_batch
from tests.support.kafka_wire import WireClient, frame, request_class

OFFSETS = "__consumer_offsets"
BROKER = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 4}


def _with_offsets_topic(w: WireClient) -> None:
    """FindCoordinator creates __consumer_offsets, as the first group request does."""
    found = w.request(make(request_class(10, 4), key_type=0, coordinator_keys=("g",)))
    assert found.coordinators[0].error_code == ErrorCode.none


def _produce(w: WireClient, topic: str, batch: bytes, client_id: str = "wire-test"):
    cls = request_class(0, 9)
    mod = __import__(cls.__module__, fromlist=["x"])
    body = make(cls, transactional_id=None, acks=1, timeout=timedelta(seconds=5), topic_data=(
        mod.TopicProduceData(name=topic, partition_data=(mod.PartitionProduceData(index=0, records=batch),)),))
    w.correlation_id += 1
    w.send_raw(frame(body, w.correlation_id, client_id=client_id))
    return w.recv(0, 9, w.correlation_id).responses[0].partition_responses[0]


def test_no_client_id_may_write_an_internal_topic(broker_factory):
    broker = broker_factory(BROKER)
    batch = encode_batch([Record(0, int(time.time() * 1000), b"k", b"v")])
    with WireClient(broker.bootstrap) as w:
        _with_offsets_topic(w)
        for client_id in ("wire-test", "__admin_client"):  # Kafka's admin exemption is gone
            part = _produce(w, OFFSETS, batch, client_id)
            assert part.error_code == ErrorCode.invalid_topic_exception, client_id
            assert part.error_message == f"Cannot append to internal topic {OFFSETS}"


def test_producing_to_an_absent_internal_topic_does_not_create_it(broker_factory):
    broker = broker_factory(BROKER)
    batch = encode_batch([Record(0, int(time.time() * 1000), b"k", b"v")])
    with WireClient(broker.bootstrap) as w:
        part = _produce(w, OFFSETS, batch)  # auto-creation would make it an ordinary topic
        assert part.error_code == ErrorCode.invalid_topic_exception
        assert OFFSETS not in {t.name for t in _metadata(w).topics}


def _metadata(w: WireClient):
    return w.request(make(request_class(3, 12), topics=None, allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False))


def _create_topics(w: WireClient, name: str, partitions: int = 1, validate_only: bool = False,
                   configs: dict[str, str] | None = None):
    cls = request_class(19, 7)
    mod = __import__(cls.__module__, fromlist=["x"])
    answer = w.request(make(cls, topics=(make(
        mod.CreatableTopic, name=name, num_partitions=partitions, replication_factor=1, assignments=(),
        configs=tuple(make(mod.CreatableTopicConfig, name=k, value=v) for k, v in (configs or {}).items())),),
        timeout=timedelta(seconds=10), validate_only=validate_only))
    return answer.topics[0]


def _topic_configs(w: WireClient, name: str) -> dict[str, str]:
    cls = request_class(32, 4)
    mod = __import__(cls.__module__, fromlist=["x"])
    answer = w.request(make(cls, resources=(make(mod.DescribeConfigsResource, resource_type=2,
                                                  resource_name=name, configuration_keys=None),),
                            include_synonyms=False, include_documentation=False))
    return {c.name: c.value for c in answer.results[0].configs}


def test_create_topics_refuses_internal_topic_names(broker_factory):
    broker = broker_factory(BROKER)
    with WireClient(broker.bootstrap) as w:
        for name in (OFFSETS, "__transaction_state"):
            for validate_only in (True, False):
                t = _create_topics(w, name, 3, validate_only, {"cleanup.policy": "delete"})
                assert t.error_code == ErrorCode.invalid_request, (name, validate_only)
                assert f"Creation of internal topic {name} is prohibited" in t.error_message
        assert {t.name for t in _metadata(w).topics} == set()
        # The coordinator then makes it as it must be: internal, compacted, its own count.
        _with_offsets_topic(w)
        [offsets] = [t for t in _metadata(w).topics if t.name == OFFSETS]
        assert offsets.is_internal and len(offsets.partitions) == 4
        assert _topic_configs(w, OFFSETS)["cleanup.policy"] == "compact"


def test_the_offsets_topic_cannot_be_grown_deleted_or_purged(broker_factory):
    broker = broker_factory(BROKER)
    with WireClient(broker.bootstrap) as w:
        _with_offsets_topic(w)
        cls = request_class(37, 3)
        mod = __import__(cls.__module__, fromlist=["x"])
        for validate_only in (True, False):
            grown = w.request(make(cls, topics=(make(mod.CreatePartitionsTopic, name=OFFSETS, count=5,
                                                     assignments=None),),
                                   timeout=timedelta(seconds=10), validate_only=validate_only))
            assert grown.results[0].error_code == ErrorCode.invalid_request
            assert "cannot be changed" in grown.results[0].error_message

        deleted = w.request(make(request_class(20, 6), topics=(make(
            __import__(request_class(20, 6).__module__, fromlist=["x"]).DeleteTopicState,
            name=OFFSETS, topic_id=None),), timeout=timedelta(seconds=10)))
        assert deleted.responses[0].error_code == ErrorCode.invalid_request

        cls = request_class(21, 2)
        mod = __import__(cls.__module__, fromlist=["x"])
        purged = w.request(make(cls, topics=(make(mod.DeleteRecordsTopic, name=OFFSETS, partitions=(
            make(mod.DeleteRecordsPartition, partition_index=0, offset=-1),)),),
            timeout=timedelta(seconds=10)))
        assert purged.topics[0].partitions[0].error_code == ErrorCode.invalid_topic_exception

        [offsets] = [t for t in _metadata(w).topics if t.name == OFFSETS]
        assert len(offsets.partitions) == 4
    broker.restart()  # the same four partitions after a restart
    with WireClient(broker.bootstrap) as w:
        [offsets] = [t for t in _metadata(w).topics if t.name == OFFSETS]
        assert offsets.is_internal and len(offsets.partitions) == 4


def _incremental_alter(w: WireClient, name: str, ops: list[tuple[str, int, str | None]]):
    cls = request_class(44, 1)
    mod = __import__(cls.__module__, fromlist=["x"])
    answer = w.request(make(cls, resources=(make(mod.AlterConfigsResource, resource_type=2, resource_name=name,
                                                  configs=tuple(make(mod.AlterableConfig, name=k, config_operation=op,
                                                                     value=v) for k, op, v in ops)),),
                            validate_only=False))
    return answer.responses[0]


def _alter(w: WireClient, name: str, configs: dict[str, str]):
    cls = request_class(33, 2)
    mod = __import__(cls.__module__, fromlist=["x"])
    answer = w.request(make(cls, resources=(make(mod.AlterConfigsResource, resource_type=2, resource_name=name,
                                                  configs=tuple(make(mod.AlterableConfig, name=k, value=v)
                                                                for k, v in configs.items())),),
                            validate_only=False))
    return answer.responses[0]


SET, DELETE, APPEND = 0, 1, 2


def test_config_changes_that_would_break_the_offsets_topic_are_refused(broker_factory):
    broker = broker_factory(BROKER)
    with WireClient(broker.bootstrap) as w:
        _with_offsets_topic(w)
        before = _topic_configs(w, OFFSETS)
        refused = [
            [("cleanup.policy", SET, "delete")],
            [("cleanup.policy", APPEND, "delete")],
            [("cleanup.policy", DELETE, None)],
            [("retention.ms", SET, "1000")],
            [("retention.bytes", SET, "1000000")],
            [("max.message.bytes", SET, "1000")],
        ]
        for ops in refused:
            answer = _incremental_alter(w, OFFSETS, ops)
            assert answer.error_code == ErrorCode.policy_violation, ops
            assert f"internal topic {OFFSETS}" in answer.error_message
        # AlterConfigs replaces every override: without cleanup.policy=compact, refused.
        assert _alter(w, OFFSETS, {"segment.bytes": "1048576"}).error_code == ErrorCode.policy_violation
        assert _topic_configs(w, OFFSETS) == before
        # Tuning that breaks nothing is allowed.
        allowed = _incremental_alter(w, OFFSETS, [("segment.bytes", SET, "1048576"),
                                                  ("max.message.bytes", SET, "2000000")])
        assert allowed.error_code == ErrorCode.none
        after = _topic_configs(w, OFFSETS)
        assert after["segment.bytes"] == "1048576" and after["cleanup.policy"] == "compact"
        # An ordinary topic takes all of them.
        assert _create_topics(w, "plain").error_code == ErrorCode.none
        assert _incremental_alter(w, "plain", refused[0] + refused[3]).error_code == ErrorCode.none


def test_the_cli_names_the_refusals(broker_factory):
    from typer.testing import CliRunner

    from brook.cli import app

    broker = broker_factory(BROKER)
    with WireClient(broker.bootstrap) as w:
        _with_offsets_topic(w)

    def brook(*args):
        return CliRunner().invoke(app, [*args, "--bootstrap-server", broker.bootstrap])

    created = brook("topics", "create", "__transaction_state")
    assert created.exit_code == 1
    assert created.stderr.startswith("brook: cannot create topic '__transaction_state': Creation of "
                                     "internal topic __transaction_state is prohibited")
    altered = brook("topics", "alter-config", OFFSETS, "--set", "cleanup.policy=delete")
    assert altered.exit_code == 1
    assert altered.stderr.startswith(f"brook: cannot alter the configs of topic '{OFFSETS}': "
                                     f"cleanup.policy of internal topic {OFFSETS} cannot be changed")
