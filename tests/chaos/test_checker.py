"""The checker on hand-made histories: a clean one passes, and each anomaly planted in an
otherwise clean history is found (and only that kind, where the kinds do not imply each
other)."""

from __future__ import annotations

import json

import pytest

from tests.chaos.checker import ANOMALIES, check
from tests.chaos.history import Recorder, load


class H:
    """A history under construction, with a clock that ticks by one per event."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.t = 0.0

    def add(self, type_: str, process: str, **fields) -> dict:
        self.t += 1
        event = {"t": self.t, "process": process, "type": type_, **fields}
        self.events.append(event)
        return event

    def send(self, process: str, seq: int, partition: int, offset: int | None) -> str:
        value = f"{process}:{seq}"
        self.add("send", process, value=value, partition=partition)
        if offset is not None:
            self.add("send-ok", process, value=value, partition=partition, offset=offset)
        return value

    def poll(self, process: str, *records) -> None:
        self.add("poll", process, records=[list(r) for r in records])

    def commit(self, process: str, offsets: dict[int, int]) -> None:
        invoked = self.add("commit", process, offsets=offsets)["t"]
        self.add("commit-ok", process, offsets={str(p): o for p, o in offsets.items()},
                 invoked=invoked)

    def final(self, partition: int, *records) -> None:
        self.add("final", "final", partition=partition, records=[list(r) for r in records])

    def final_commit(self, offsets: dict[int, int]) -> None:
        self.add("final-commit", "final", offsets={str(p): o for p, o in offsets.items()})


def clean() -> H:
    """Two producers on two partitions, a consumer that reads and commits it all."""
    h = H()
    h.add("nemesis-start", "nemesis", kind="kill", fault=1, detail={})
    a0 = h.send("p0", 0, 0, 0)
    b0 = h.send("p1", 0, 1, 0)
    a1 = h.send("p0", 1, 0, 1)
    h.add("nemesis-stop", "nemesis", kind="kill", fault=1)
    b1 = h.send("p1", 1, 1, 1)
    h.add("assign", "c0", partitions=[0, 1])
    h.poll("c0", (0, 0, a0), (1, 0, b0))
    h.commit("c0", {0: 1, 1: 1})
    h.poll("c0", (0, 1, a1), (1, 1, b1))
    h.commit("c0", {0: 2, 1: 2})
    h.final(0, (0, a0), (1, a1))
    h.final(1, (0, b0), (1, b1))
    h.final_commit({0: 2, 1: 2})
    return h


def found(h: H) -> set[str]:
    return {name for name, examples in check(h.events).anomalies.items() if examples}


def test_a_clean_history_has_no_anomaly():
    report = check(clean().events)
    assert report.valid, report.summary()
    assert report.counts["acknowledged"] == 4
    assert report.availability["kill"]["faults"] == 1


def test_lost_write():
    h = clean()
    h.events = [e for e in h.events if e["type"] != "final" or e["partition"] != 1]
    h.final(1, (0, "p1:0"))  # p1:1 was acknowledged at offset 1 and is gone
    assert "lost-write" in found(h)


def test_duplicate_from_an_idempotent_producer():
    h = clean()
    h.events = [e for e in h.events if e["type"] != "final" or e["partition"] != 0]
    h.final(0, (0, "p0:0"), (1, "p0:1"), (2, "p0:1"))
    assert "duplicate" in found(h)


def test_a_retry_written_twice_under_one_producer_epoch_is_a_duplicate():
    h = clean()
    h.events = [e for e in h.events if e["type"] != "final" or e["partition"] != 0]
    h.final(0, (0, "p0:0"), (1, "p0:1"), (2, "p0:1"))
    h.add("final-producers", "final", partition=0, records=[[0, 7, 0], [1, 7, 0], [2, 7, 0]])
    assert found(h) == {"duplicate"}


def test_a_value_sent_again_by_its_client_under_a_bumped_epoch_is_counted_not_failed():
    # p0:1 timed out in flight (indeterminate), was written, and librdkafka, having bumped
    # its epoch, sent it again renumbered; p0:2 followed. The copy at offset 2 breaks neither
    # the order checks nor the duplicate check, and is counted.
    h = H()
    a0 = h.send("p0", 0, 0, 0)
    a1 = h.send("p0", 1, 0, None)
    h.add("send-ok", "p0", value=a1, partition=0, offset=2)
    a2 = h.send("p0", 2, 0, 3)
    h.final(0, (0, a0), (1, a1), (2, a1), (3, a2))
    h.add("final-producers", "final", partition=0, records=[[0, 7, 0], [1, 7, 0], [2, 7, 1], [3, 7, 1]])
    report = check(h.events)
    assert report.valid, report.summary()
    assert report.counts["resent"] == 1


def test_out_of_order_within_a_partition():
    h = H()
    a0 = h.send("p0", 0, 0, None)  # both indeterminate, so no acknowledged offsets disagree
    a1 = h.send("p0", 1, 0, None)
    h.final(0, (0, a1), (1, a0))
    assert found(h) == {"out-of-order"}


def test_a_new_producer_of_the_process_has_no_order_with_the_old_ones_late_sends():
    # Seed 34: the workload closed p0's producer (producer id 7) with p0:1 in flight, and
    # its new producer (id 8) wrote p0:2; the old request, held up on the network, was then
    # appended. Kafka orders one producer id's writes, not those of two.
    h = H()
    a1 = h.send("p0", 1, 0, None)
    a2 = h.send("p0", 2, 0, 0)
    h.final(0, (0, a2), (1, a1))
    h.add("final-producers", "final", partition=0, records=[[0, 8, 0], [1, 7, 0]])
    assert found(h) == set()
    h.events[-1]["records"] = [[0, 7, 0], [1, 7, 0]]  # one producer id: out of order
    assert found(h) == {"out-of-order"}


def test_vanished_read():
    h = clean()
    h.poll("c0", (0, 2, "p9:0"))  # read at offset 2, which the final log does not have
    assert "vanished-read" in found(h)


def test_inconsistent_offsets_across_readers():
    h = clean()
    h.poll("c1", (1, 1, "p0:7"))  # another reader sees another value at (1, 1)
    assert "inconsistent-offsets" in found(h)


def test_nonmonotonic_send():
    h = H()
    a0 = h.send("p0", 0, 0, 5)
    a1 = h.send("p0", 1, 0, 3)
    h.final(0, (3, a1), (5, a0))
    assert "nonmonotonic-send" in found(h)


def test_nonmonotonic_poll_but_not_across_a_rebalance():
    h = clean()
    h.poll("c0", (0, 0, "p0:0"))  # back to offset 0 without a new assignment
    assert "nonmonotonic-poll" in found(h)
    h = clean()
    h.add("assign", "c0", partitions=[0])
    h.poll("c0", (0, 0, "p0:0"))  # after a rebalance, re-reading is allowed
    assert "nonmonotonic-poll" not in found(h)


def test_commit_regressed():
    h = clean()
    h.events = [e for e in h.events if e["type"] != "final-commit"]
    h.commit("c1", {0: 1})  # acknowledged after 2 was
    h.final_commit({0: 2, 1: 2})
    assert "commit-regressed" in found(h)


def test_commit_lost():
    h = clean()
    h.events = [e for e in h.events if e["type"] != "final-commit"]
    h.final_commit({0: 2, 1: 1})
    assert found(h) == {"commit-lost"}


def test_final_read_missing():
    h = clean()
    h.events = [e for e in h.events if e["type"] != "final" or e["partition"] != 1]
    assert "final-read-missing" in found(h)


def transformed(outputs: dict[int, list[tuple[int, str, str]]] | None = None,
                committed: dict[int, int] | None = None) -> H:
    """The clean history with a transformer that copied all four input records and committed
    their offsets in its transactions."""
    h = clean()
    h.add("txn-commit", "t0", offsets={"0": 2, "1": 2}, records=4)
    h.add("txn-commit-ok", "t0", offsets={"0": 2, "1": 2}, invoked=h.t)
    if outputs is None:
        outputs = {0: [(0, "0:0", "p0:0"), (1, "0:1", "p0:1")],
                   1: [(0, "1:0", "p1:0"), (1, "1:1", "p1:1")]}
    for partition, records in outputs.items():
        h.add("final-out", "final", partition=partition, records=[list(r) for r in records])
    h.add("final-eos-commit", "final",
          offsets={str(p): o for p, o in (committed or {0: 2, 1: 2}).items()})
    return h


def test_a_clean_transformed_history_has_no_anomaly():
    report = check(transformed().events)
    assert report.valid, report.summary()
    assert report.counts["output-records"] == 4


def test_eos_duplicate():
    h = transformed({0: [(0, "0:0", "p0:0"), (1, "0:1", "p0:1"), (2, "0:1", "p0:1")],
                     1: [(0, "1:0", "p1:0"), (1, "1:1", "p1:1")]})
    assert found(h) == {"eos-duplicate"}


def test_eos_lost():
    h = transformed({0: [(0, "0:0", "p0:0")], 1: [(0, "1:0", "p1:0"), (1, "1:1", "p1:1")]})
    assert found(h) == {"eos-lost"}


def test_eos_uncommitted():
    assert found(transformed(committed={0: 1, 1: 2})) == {"eos-uncommitted"}


def test_eos_inconsistent():
    h = transformed({0: [(0, "0:0", "p0:0"), (1, "0:1", "p0:7")],
                     1: [(0, "1:0", "p1:0"), (1, "1:1", "p1:1")]})
    assert found(h) == {"eos-inconsistent"}


def test_an_output_partition_the_final_read_missed_is_final_read_missing():
    h = transformed({1: [(0, "1:0", "p1:0"), (1, "1:1", "p1:1")]})
    h.add("final-error", "final", topic="chaos-x-out", partition=0, error="timed out")
    assert found(h) == {"final-read-missing"}


def test_committed_offsets_the_final_read_missed_are_final_read_missing_not_every_record():
    h = transformed()
    h.events = [e for e in h.events if e["type"] != "final-eos-commit"]
    h.add("final-error", "final", error="committed offsets of chaos-eos: timed out")
    assert found(h) == {"final-read-missing"}
    report = check(h.events)
    assert report.anomalies["final-read-missing"] == [{"committed offsets": "transformers"}]


def test_every_anomaly_has_a_test():
    names = {n.replace("-", "_") for n in ANOMALIES}
    tested = {n[len("test_"):] for n in globals() if n.startswith("test_")}
    assert all(any(t.startswith(n) for t in tested) for n in names), names


def test_availability_is_the_longest_time_without_an_acknowledgement():
    h = H()
    h.add("nemesis-start", "nemesis", kind="pause", fault=1, detail={})  # t=1
    h.send("p0", 0, 0, 0)                                                  # acks at t=3
    h.t += 20
    h.send("p0", 1, 0, 1)                                                  # acks at t=25
    h.add("nemesis-stop", "nemesis", kind="pause", fault=1)                # t=26
    h.t += 3
    h.send("p0", 2, 0, 2)                                                  # acks at t=31
    a = check(h.events).availability["pause"]
    assert a["max_gap"] == pytest.approx(22)
    assert a["max_recovery"] == pytest.approx(5)


def test_recorder_files_merge_in_time_order(tmp_path):
    a = Recorder(tmp_path / "a.jsonl", "a")
    b = Recorder(tmp_path / "b.jsonl", "b")
    a("send", value="a:0", partition=0)
    b("send", value="b:0", partition=0)
    a("send", value="a:1", partition=0)
    a.close()
    b.close()
    with open(tmp_path / "b.jsonl", "a") as f:
        f.write('{"t": 1, "torn')  # a writer killed mid-line
    events = load(tmp_path)
    assert [e["value"] for e in events] == ["a:0", "b:0", "a:1"]
    assert json.dumps(events)
