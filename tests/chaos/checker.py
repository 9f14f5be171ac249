"""The checker: reads a history (tests/chaos/history.py) and names what went wrong, in the
terms of the published Kafka and Redpanda analyses, plus how long the cluster went without
acknowledging a write during and after each kind of fault.

The anomalies (each a list of examples; any example fails the run):

lost-write            an acknowledged send whose value the final log does not hold
duplicate             one value at two or more offsets (in acknowledgements, polls or the log)
out-of-order          two values of one producer in one partition's log in the reverse of the
                      order they were sent in (an idempotent producer keeps its order); one
                      producer id's values only: a producer the workload closed and made anew
                      (a new producer id) has no order with the old one's sends still on their
                      way, which Kafka may append after the new one's (seed 34)
vanished-read         a consumer polled (partition, offset, value) that the final log does not
                      hold at that offset
inconsistent-offsets  one (partition, offset) seen holding two different values, by any two
                      observers (an acknowledgement, a poll, the final log)
nonmonotonic-send     a producer's acknowledged offsets in one partition going down in the
                      order it sent them
nonmonotonic-poll     a consumer's polled offsets in one partition not going up, between two
                      changes of its assignment
commit-regressed      an acknowledged commit of a lower offset than one acknowledged before it
                      was sent
commit-lost           the group's final committed offset lower than an acknowledged commit
final-read-missing    a partition the final read could not read (the cluster did not recover)

With transformers (consume-transform-produce in transactions, tests/chaos/client.py), the
output topic read with read_committed and the final committed offsets of their group must
agree, input record by input record (each output record's key names its input's partition
and offset):

eos-duplicate         one input record in the committed output twice
eos-lost              an input record below the group's committed offset (and in the final
                      input log) that the committed output does not hold: offsets committed
                      without the records their transaction wrote
eos-uncommitted       an input record at or past the group's committed offset in the committed
                      output: records committed without the offsets of their transaction
eos-inconsistent      an output record whose value is not its input record's

``unseen`` (acknowledged, never polled by a consumer) is counted but is not an error: a
consumer may simply not have got that far.

``resent`` is counted, not an error: one value in the final log more than once, each copy
written under another epoch of its producer id (the final read notes each record's producer
id and epoch). librdkafka's idempotent producer bumps its epoch when messages time out in
flight (KIP-360) and sends the messages it still holds again, renumbered from sequence 0: a
broker cannot tell such a copy from a new record (Kafka's cannot either), so it is the
client's duplicate. Two copies under the same producer id and epoch are a retry the broker
wrote twice: a ``duplicate``. The later copies of a re-sent value are left out of the order
checks (out-of-order, nonmonotonic-send), which they would fail by their nature.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from tests.chaos.history import producer_of

ANOMALIES = ("lost-write", "duplicate", "out-of-order", "vanished-read", "inconsistent-offsets",
             "nonmonotonic-send", "nonmonotonic-poll", "commit-regressed", "commit-lost",
             "final-read-missing", "eos-duplicate", "eos-lost", "eos-uncommitted",
             "eos-inconsistent")
SETTLE_AFTER_HEAL = 10.0  # seconds: a fault's window for availability runs this long past its heal


@dataclass
class Report:
    anomalies: dict[str, list] = field(default_factory=lambda: {a: [] for a in ANOMALIES})
    counts: dict[str, int] = field(default_factory=dict)
    # per fault kind: faults, longest and median gap without an acknowledgement, longest
    # time from the heal to the first acknowledgement after it
    availability: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not any(self.anomalies.values())

    def summary(self, examples: int = 5) -> str:
        lines = ["counts: " + ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))]
        for name in ANOMALIES:
            found = self.anomalies[name]
            if found:
                lines.append(f"{name}: {len(found)}, e.g. {found[:examples]}")
        lines.append(f"{'kind':<28}{'faults':>7}{'max gap s':>11}{'median gap s':>14}"
                     f"{'max recovery s':>16}")
        for kind, a in sorted(self.availability.items()):
            lines.append(f"{kind:<28}{a['faults']:>7}{a['max_gap']:>11.1f}{a['median_gap']:>14.1f}"
                         f"{a['max_recovery']:>16.1f}")
        return "\n".join(lines)


def check(events: list[dict]) -> Report:
    events = sorted(events, key=lambda e: e["t"])
    report = Report()
    by_type: dict[str, list[dict]] = defaultdict(list)
    for e in events:
        by_type[e["type"]].append(e)

    final = {e["partition"]: {o: v for o, v in e["records"]} for e in by_type["final"]}
    producers = {(e["partition"], o): (pid, epoch)
                 for e in by_type["final-producers"] for o, pid, epoch in e["records"]}
    resent = _observations(by_type, final, producers, report)
    _writes(by_type, final, producers, resent, report)
    _sends_in_order(by_type, resent, report)
    _polls_in_order(events, report)
    _commits(by_type, report)
    if by_type["txn-commit"] or by_type["final-out"]:
        _exactly_once(by_type, final, report)
    report.availability = availability(events)
    report.counts.update({
        "sends": len(by_type["send"]), "acknowledged": len(by_type["send-ok"]),
        "failed": len(by_type["send-fail"]), "indeterminate": len(by_type["send-info"]),
        "polled": sum(len(e["records"]) for e in by_type["poll"]),
        "acknowledged-without-offset": sum(e["offset"] is None for e in by_type["send-ok"]),
        "commits-acknowledged": len(by_type["commit-ok"]),
        "final-records": sum(len(r) for r in final.values()),
        "resent": len(resent),
        "faults": len(by_type["nemesis-start"]),
    })
    return report


def _writes(by_type, final, producers, resent: set[str], report: Report) -> None:
    """lost-write, out-of-order, final-read-missing, unseen."""
    partitions = {e["partition"] for e in by_type["send"]}
    for p in sorted(partitions - set(final)):
        report.anomalies["final-read-missing"].append({"partition": p})
    in_log = {v for records in final.values() for v in records.values()}
    polled = {r[2] for e in by_type["poll"] for r in e["records"]}
    unseen = 0
    for e in by_type["send-ok"]:
        if e["partition"] in final and e["value"] not in in_log:
            report.anomalies["lost-write"].append(
                {"value": e["value"], "partition": e["partition"], "offset": e["offset"],
                 "acknowledged_at": round(e["t"], 3)})
        unseen += e["value"] not in polled
    report.counts["unseen"] = unseen
    for p, records in sorted(final.items()):
        # (process, producer id) -> (seq, offset) of its latest value; the producer id is
        # the one the final read found written with the record (None where it could not)
        last: dict[tuple[str, int | None], tuple[int, int]] = {}
        seen: set[str] = set()
        for offset in sorted(records):
            if records[offset] in resent:
                if records[offset] in seen:
                    continue  # a later copy, sent again under a new epoch
                seen.add(records[offset])
            process, seq = producer_of(records[offset])
            key = (process, (producers.get((p, offset)) or (None,))[0])
            if key in last and seq < last[key][0]:
                report.anomalies["out-of-order"].append(
                    {"partition": p, "earlier": [last[key][1], f"{process}:{last[key][0]}"],
                     "later": [offset, records[offset]]})
            last[key] = max(last.get(key, (seq, offset)), (seq, offset))


def _observations(by_type, final, producers, report: Report) -> set[str]:
    """duplicate, inconsistent-offsets, vanished-read; returns the values re-sent by their
    client under a new producer epoch."""
    at: dict[tuple[int, int], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    where: dict[str, set[tuple[int, int]]] = defaultdict(set)

    def saw(p, o, v, who):
        at[(p, o)][v].append(who)
        where[v].add((p, o))

    for e in by_type["send-ok"]:
        if e["offset"] is not None:  # librdkafka acknowledges a duplicate without an offset
            saw(e["partition"], e["offset"], e["value"], f"ack:{e['process']}")
    for e in by_type["poll"]:
        for p, o, v in e["records"]:
            saw(p, o, v, f"poll:{e['process']}")
            if p in final and final[p].get(o) != v:
                report.anomalies["vanished-read"].append(
                    {"partition": p, "offset": o, "value": v, "consumer": e["process"],
                     "polled_at": round(e["t"], 3), "final": final[p].get(o)})
    for p, records in final.items():
        for o, v in records.items():
            saw(p, o, v, "final")
    for (p, o), values in sorted(at.items()):
        if len(values) > 1:
            report.anomalies["inconsistent-offsets"].append(
                {"partition": p, "offset": o, "values": {v: sorted(set(w)) for v, w in values.items()}})
    resent: set[str] = set()
    for v, places in sorted(where.items()):
        if len(places) > 1:
            epochs = [producers.get(place) for place in places]
            in_log = all(final.get(p, {}).get(o) == v for p, o in places)
            if in_log and None not in epochs and len(set(epochs)) == len(epochs):
                resent.add(v)
            else:
                report.anomalies["duplicate"].append(
                    {"value": v, "at": sorted(places), "producer_epochs": epochs})
    return resent


def _sends_in_order(by_type, resent: set[str], report: Report) -> None:
    """nonmonotonic-send: per producer and partition, acknowledged offsets by send order."""
    acked = {e["value"]: e["offset"] for e in by_type["send-ok"]
             if e["offset"] is not None and e["value"] not in resent}
    last: dict[tuple[str, int], tuple[str, int]] = {}
    for e in by_type["send"]:  # in invocation order
        if e["value"] not in acked:
            continue
        key, offset = (e["process"], e["partition"]), acked[e["value"]]
        if key in last and offset <= last[key][1]:
            report.anomalies["nonmonotonic-send"].append(
                {"process": e["process"], "partition": e["partition"],
                 "earlier": list(last[key]), "later": [e["value"], offset]})
        last[key] = (e["value"], offset)


def _polls_in_order(events, report: Report) -> None:
    """nonmonotonic-poll: per consumer and partition, between changes of assignment."""
    last: dict[tuple[str, int], int] = {}
    for e in events:
        if e["type"] in ("assign", "revoke"):
            for key in [k for k in last if k[0] == e["process"]]:
                del last[key]
        elif e["type"] == "poll":
            for p, o, v in e["records"]:
                key = (e["process"], p)
                if key in last and o <= last[key]:
                    report.anomalies["nonmonotonic-poll"].append(
                        {"consumer": e["process"], "partition": p, "after": last[key], "got": o,
                         "value": v, "at": round(e["t"], 3)})
                last[key] = o


def _commits(by_type, report: Report) -> None:
    """commit-regressed and commit-lost."""
    oks = defaultdict(list)  # partition -> [(invoked, completed, offset, process)]
    for e in by_type["commit-ok"]:
        for p, o in e["offsets"].items():
            oks[int(p)].append((e["invoked"], e["t"], o, e["process"]))
    for p, commits in sorted(oks.items()):
        done = sorted(commits, key=lambda c: c[1])
        for c in sorted(commits):
            before = [d for d in done if d[1] < c[0]]
            if before:
                top = max(before, key=lambda d: d[2])
                if c[2] < top[2]:
                    report.anomalies["commit-regressed"].append(
                        {"partition": p, "acknowledged_before": [top[3], top[2], round(top[1], 3)],
                         "then": [c[3], c[2], round(c[1], 3)]})
    for e in by_type["final-commit"]:
        finals = {int(p): o for p, o in e["offsets"].items()}
        for p, commits in sorted(oks.items()):
            top = max(c[2] for c in commits)
            if finals.get(p, -1) < top:
                report.anomalies["commit-lost"].append(
                    {"partition": p, "acknowledged": top, "final": finals.get(p)})


def _exactly_once(by_type, final, report: Report) -> None:
    """eos-duplicate, eos-lost, eos-uncommitted, eos-inconsistent (and final-read-missing
    for an output partition the final read could not read, or for the transformers' committed
    offsets: without them nothing is known committed, and the checks that need them are
    left out rather than failing every record)."""
    known = bool(by_type["final-eos-commit"])
    committed = {int(p): o for e in by_type["final-eos-commit"] for p, o in e["offsets"].items()}
    outputs = {e["partition"]: e["records"] for e in by_type["final-out"]}
    for e in by_type["final-error"]:
        if e.get("topic", "").endswith("-out"):
            report.anomalies["final-read-missing"].append({"topic": e["topic"],
                                                           "partition": e["partition"]})
    if not known and outputs:
        report.anomalies["final-read-missing"].append({"committed offsets": "transformers"})
    copies: dict[tuple[int, int], list[int]] = defaultdict(list)  # input -> output offsets
    for out_partition, records in outputs.items():
        for offset, key, value in records:
            p, _, o = key.partition(":")
            source = (int(p), int(o))
            copies[source].append(offset)
            if len(copies[source]) == 2:
                report.anomalies["eos-duplicate"].append(
                    {"input": list(source), "output_offsets": copies[source]})
            if known and source[1] >= committed.get(source[0], 0):
                report.anomalies["eos-uncommitted"].append(
                    {"input": list(source), "output": [out_partition, offset],
                     "committed": committed.get(source[0])})
            logged = final.get(source[0], {}).get(source[1])
            if logged is not None and logged != value:
                report.anomalies["eos-inconsistent"].append(
                    {"input": list(source), "input_value": logged, "output_value": value})
    for p, upto in sorted(committed.items()):
        if p not in outputs:
            continue  # reported as final-read-missing
        for o in sorted(final.get(p, {})):
            if o < upto and (p, o) not in copies:
                report.anomalies["eos-lost"].append({"input": [p, o], "committed": upto})
    report.counts.update({
        "txn-commits-acknowledged": len(by_type["txn-commit-ok"]),
        "txn-errors": len(by_type["txn-error"]),
        "client-hangs": len(by_type["client-hang"]),
        "output-records": sum(len(r) for r in outputs.values()),
    })


def availability(events: list[dict]) -> dict[str, dict[str, float]]:
    """Per fault kind: the longest time without any acknowledged send inside each fault's
    window (its start to SETTLE_AFTER_HEAL past its heal), the median of those, and the longest
    wait from a heal to the next acknowledgement."""
    acks = sorted(e["t"] for e in events if e["type"] == "send-ok")
    sends = [e["t"] for e in events if e["type"] == "send"]
    if not sends:
        return {}
    end = max(sends)
    starts = {e["fault"]: e for e in events if e["type"] == "nemesis-start"}
    stops = {e["fault"]: e["t"] for e in events if e["type"] == "nemesis-stop"}
    gaps: dict[str, list[float]] = defaultdict(list)
    recoveries: dict[str, list[float]] = defaultdict(list)
    for fault, start in starts.items():
        t0 = start["t"]
        t1 = stops.get(fault, end)
        hi = min(t1 + SETTLE_AFTER_HEAL, end)
        if hi <= t0:
            continue
        points = [t0] + [a for a in acks if t0 < a < hi] + [hi]
        gaps[start["kind"]].append(max(b - a for a, b in zip(points, points[1:])))
        after = [a for a in acks if a >= t1]
        recoveries[start["kind"]].append((after[0] if after else end) - t1)
    return {kind: {"faults": len(g), "max_gap": max(g), "median_gap": statistics.median(g),
                   "max_recovery": max(recoveries[kind])} for kind, g in gaps.items()}
