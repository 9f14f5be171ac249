"""Which transaction a record of the message browser belongs to, and how it ended
(reader.transaction_states and decide_by_markers), against a model: random logs of
transactional and plain batches of a few producers, their markers, and some transactions still
open, read from any offset with the aborted transactions and last stable offset a broker
answers a read_committed Fetch with."""

from hypothesis import given, settings
from hypothesis import strategies as st

from brook.console.reader import decide_by_markers, transaction_states
from brook.records.batch import CONTROL_BIT, TRANSACTIONAL_BIT, BatchHeader


def header(offset: int, producer: int, attributes: int, count: int = 1) -> BatchHeader:
    return BatchHeader(base_offset=offset, batch_length=0, partition_leader_epoch=0, magic=2,
                       crc=0, attributes=attributes, last_offset_delta=count - 1,
                       base_timestamp=0, max_timestamp=0, producer_id=producer,
                       producer_epoch=0, base_sequence=-1, record_count=count)


# One step of the log: (producer 0-2, what: "data" a batch of its transaction (beginning one if
# it has none), "plain" a non-transactional batch, "commit"/"abort" its marker; batch size).
steps = st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["data", "plain", "commit",
                                                                 "abort"]),
                           st.integers(1, 3)), max_size=40)


def build(script):
    """The log's headers, each batch's true outcome (None: plain or a marker), the markers by
    batch index, the aborted transactions (producer, first offset, marker offset) and the
    last stable offset."""
    headers, truth_of, markers, aborted = [], [], {}, []
    open_txn: dict[int, tuple[int, list[int]]] = {}  # producer: (first offset, batch indexes)
    offset = 0
    for producer, what, size in script:
        if what == "plain":
            headers.append(header(offset, 100 + producer, 0, size))
            truth_of.append(None)
        elif what == "data":
            first, batches = open_txn.setdefault(producer, (offset, []))
            batches.append(len(headers))
            headers.append(header(offset, producer, TRANSACTIONAL_BIT, size))
            truth_of.append("open")
        else:
            if producer not in open_txn:
                continue  # a marker without a transaction is never written here
            size = 1
            first, batches = open_txn.pop(producer)
            outcome = "committed" if what == "commit" else "aborted"
            for i in batches:
                truth_of[i] = outcome
            if outcome == "aborted":
                aborted.append((producer, first, offset))
            markers[len(headers)] = "COMMIT" if what == "commit" else "ABORT"
            headers.append(header(offset, producer, TRANSACTIONAL_BIT | CONTROL_BIT))
            truth_of.append(None)
        offset += size
    stable = min([first for first, _ in open_txn.values()], default=offset)
    return headers, truth_of, markers, aborted, stable


@settings(max_examples=300, deadline=None)
@given(steps, st.integers(0, 200))
def test_every_record_has_its_transactions_outcome_read_from_any_offset(script, start_at):
    headers, truth, markers, aborted, stable = build(script)
    if not headers:
        return
    first = min(start_at, len(headers) - 1)
    position = headers[first].base_offset
    # What a read_committed Fetch from `position` names: the aborted transactions that
    # overlap what it reads (up to the last stable offset), as Kafka's brokers collect them.
    answered = [(p, f) for p, f, last in aborted if last >= position and f < stable]
    read, want = headers[first:], truth[first:]
    found = decide_by_markers(read, transaction_states(read, answered, stable),
                              {i - first: m for i, m in markers.items() if i >= first})
    assert found == want


def test_below_the_last_stable_offset_a_transaction_not_aborted_is_committed():
    headers = [header(0, 7, TRANSACTIONAL_BIT, 2)]  # its marker is past what was read
    assert transaction_states(headers, [], 5) == ["committed"]
    assert transaction_states(headers, [(7, 0)], 5) == ["aborted"]
    assert transaction_states(headers, [], 1) == ["open"]


def test_plain_batches_and_markers_have_no_outcome():
    headers = [header(0, 1, 0), header(1, 2, TRANSACTIONAL_BIT | CONTROL_BIT)]
    assert transaction_states(headers, [(2, 0)], 2) == [None, None]
