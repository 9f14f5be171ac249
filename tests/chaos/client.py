"""A workload client, run as its own process (``python -m tests.chaos.client producer|consumer
...``) so that it can run inside a broker's network namespace and see the network as that
broker does. It records every operation to a history file (tests/chaos/history.py) until its
stop file appears.

producer  an idempotent confluent-kafka producer, acks=all, sending ``<name>:<seq>`` round
          robin over the partitions at a steady rate; a producer that hits a fatal error is
          replaced by a new one (a new producer id), as Jepsen's clients reopen.
consumer  a member of the group, committing what it has read (synchronously) about once a
          second, with automatic commits off.
transformer
          consume-transform-produce with transactions (KIP-98, KIP-447): a read_committed
          member of the group ``<group>-eos`` copies each input record to the same partition
          of ``<topic>-out``, keyed by the input's "<partition>:<offset>", and commits the
          consumed offsets in the same transaction (send_offsets_to_transaction). On any error
          it aborts if it can and starts afresh (a new consumer from the committed offsets and
          a producer whose init_transactions fences the old one), as an application would.
          A transactional call still blocked well past its timeout is a client hang
          (librdkafka's send_offsets_to_transaction waits forever for a group coordinator
          whose broker left the metadata: confluentinc/librdkafka#5456, #5511): the process
          records it and starts itself again, as a supervisor would restart it.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.chaos.history import Recorder, now

# A small batch.size: large fetch responses cut inside a batch once stalled followers
# (fixed on main since; kept small so that runs compare).
PRODUCER = {"enable.idempotence": True, "acks": "all", "linger.ms": 5, "batch.size": 16384,
            "request.timeout.ms": 5000, "message.timeout.ms": 15000,
            "topic.metadata.refresh.interval.ms": 2000, "socket.timeout.ms": 5000,
            "reconnect.backoff.max.ms": 1000}
CONSUMER = {"enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
            "topic.metadata.refresh.interval.ms": 2000, "socket.timeout.ms": 5000,
            "reconnect.backoff.max.ms": 1000, "max.poll.interval.ms": 30000}
# delivery errors after which the record was certainly not written
DEFINITE = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG_SIZE,
            KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._INVALID_ARG}


def produce(args, record: Recorder) -> None:
    interval = 1.0 / args.rate
    seq = 0

    def report(err, msg):
        value = msg.value().decode()
        if err is None:
            record("send-ok", value=value, partition=msg.partition(), offset=msg.offset())
        elif err.code() in DEFINITE:
            record("send-fail", value=value, error=str(err))
        else:  # timed out or failed after retries: it may have been written
            record("send-info", value=value, error=str(err))

    while not os.path.exists(args.stop):
        producer = Producer({"bootstrap.servers": args.bootstrap, **PRODUCER,
                             "error_cb": lambda e: record("client-error", error=str(e))})
        fatal = False
        try:
            while not os.path.exists(args.stop):
                value, partition = f"{args.name}:{seq}", seq % args.partitions
                seq += 1
                record("send", value=value, partition=partition)
                try:
                    producer.produce(args.topic, value.encode(), partition=partition,
                                     on_delivery=report)
                except BufferError:
                    record("send-fail", value=value, error="local queue full")
                producer.poll(0)
                deadline = time.monotonic() + interval
                while time.monotonic() < deadline:
                    producer.poll(max(0.0, deadline - time.monotonic()))
        except KafkaException as exc:
            fatal = True
            record("client-error", error=str(exc), fatal=True)
        # wait for what is in flight (their outcomes are recorded), then start afresh if fatal
        producer.flush(20)
        if not fatal:
            break


def consume(args, record: Recorder) -> None:
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                         "client.id": args.name, **CONSUMER,
                         "error_cb": lambda e: record("client-error", error=str(e))})
    positions: dict[int, int] = {}  # partition -> next offset to commit
    committed: dict[int, int] = {}

    def on_assign(c, parts):
        record("assign", partitions=[p.partition for p in parts])

    def on_revoke(c, parts):
        record("revoke", partitions=[p.partition for p in parts])
        for p in parts:
            positions.pop(p.partition, None)
            committed.pop(p.partition, None)

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    last_commit = now()
    try:
        while not os.path.exists(args.stop):
            msgs = consumer.consume(num_messages=200, timeout=0.5)
            records = []
            for m in msgs:
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        record("client-error", error=str(m.error()))
                    continue
                records.append([m.partition(), m.offset(), m.value().decode()])
                positions[m.partition()] = m.offset() + 1
            if records:
                record("poll", records=records)
            if now() - last_commit >= 1.0:
                last_commit = now()
                todo = {p: o for p, o in positions.items() if committed.get(p) != o}
                if todo:
                    _commit(consumer, args.topic, todo, committed, record)
    finally:
        consumer.close()


TRANSFORMER = {"transaction.timeout.ms": 10000, "request.timeout.ms": 5000,
               "message.timeout.ms": 10000, "socket.timeout.ms": 5000,
               "topic.metadata.refresh.interval.ms": 2000, "reconnect.backoff.max.ms": 1000}


#: how long past its own timeout a transactional call may block before it counts as a hang
HANG_GRACE_S = 15.0


def _bounded(record: Recorder, name: str, timeout: float, call, *call_args):
    """``call(*call_args, timeout)``, or, when it has not returned ``HANG_GRACE_S`` after its
    timeout, the process started again in its place (its history file is appended to)."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = call(*call_args, timeout)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout + HANG_GRACE_S)
    if worker.is_alive():
        record("client-hang", call=name, seconds=timeout + HANG_GRACE_S)
        record.close()
        os.execv(sys.executable, [sys.executable, "-m", "tests.chaos.client", *sys.argv[1:]])
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def transform(args, record: Recorder) -> None:
    out_topic = f"{args.topic}-out"
    while not os.path.exists(args.stop):
        consumer = producer = None
        try:
            producer = Producer({"bootstrap.servers": args.bootstrap, **TRANSFORMER,
                                 "transactional.id": f"eos-{args.name}",
                                 "error_cb": lambda e: record("client-error", error=str(e))})
            _bounded(record, "init_transactions", 30, producer.init_transactions)
            consumer = Consumer({"bootstrap.servers": args.bootstrap, **CONSUMER,
                                 "group.id": f"{args.group}-eos", "client.id": args.name,
                                 "isolation.level": "read_committed",
                                 "error_cb": lambda e: record("client-error", error=str(e))})
            consumer.subscribe([args.topic])
            while not os.path.exists(args.stop):
                msgs = [m for m in consumer.consume(num_messages=200, timeout=0.5)
                        if not m.error()]
                if not msgs:
                    continue
                producer.begin_transaction()
                for m in msgs:
                    producer.produce(out_topic, m.value(), key=f"{m.partition()}:{m.offset()}",
                                     partition=m.partition())
                positions = [tp for tp in consumer.position(consumer.assignment())
                             if tp.offset >= 0]
                _bounded(record, "send_offsets_to_transaction", 30,
                         producer.send_offsets_to_transaction, positions,
                         consumer.consumer_group_metadata())
                offsets = {str(tp.partition): tp.offset for tp in positions}
                invoked = record("txn-commit", offsets=offsets, records=len(msgs))["t"]
                _bounded(record, "commit_transaction", 30, producer.commit_transaction)
                record("txn-commit-ok", offsets=offsets, invoked=invoked)
        except KafkaException as exc:
            error = exc.args[0]
            record("txn-error", error=str(error), fatal=error.fatal(),
                   abortable=error.txn_requires_abort())
            if producer is not None and error.txn_requires_abort():
                try:
                    _bounded(record, "abort_transaction", 30, producer.abort_transaction)
                except KafkaException as abort_exc:
                    record("txn-error", error=f"abort: {abort_exc.args[0]}")
        finally:
            if consumer is not None:
                consumer.close()


def _commit(consumer, topic, offsets, committed, record: Recorder) -> None:
    invoked = record("commit", offsets={str(p): o for p, o in offsets.items()})["t"]
    try:
        result = consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                                 asynchronous=False)
    except KafkaException as exc:
        record("commit-fail", error=str(exc), invoked=invoked)
        return
    ok = {tp.partition: tp.offset for tp in result or [] if tp.error is None}
    if ok:
        record("commit-ok", offsets={str(p): o for p, o in ok.items()}, invoked=invoked)
        committed.update(ok)
    failed = {tp.partition: str(tp.error) for tp in result or [] if tp.error is not None}
    if failed:
        record("commit-fail", error=failed, invoked=invoked)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["producer", "consumer", "transformer"])
    parser.add_argument("--name", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--group", default="chaos")
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--stop", required=True)
    args = parser.parse_args()
    record = Recorder(args.out, args.name)
    try:
        {"producer": produce, "consumer": consume, "transformer": transform}[args.role](
            args, record)
    finally:
        record.close()


if __name__ == "__main__":
    main()
