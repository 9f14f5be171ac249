"""The loader's bulk path against the reference paths: ``CommitBlock``s and batch templates
(``RecordsDecoder`` with ``bulk``) read what record-by-record decoding reads, byte for byte,
damaged or not; ``TopicOffsets.put_block`` stores what ``put`` stores; and a partition loaded in
bulk gives the state that replaying it record by record gives."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brook.coordinator.common.loader import replay_batches
from brook.coordinator.common.result import CoordinatorRecord
from brook.coordinator.group.batch_decoder import DecodedRecord, RecordsDecoder, UnreadableRecords
from brook.coordinator.group.batch_writer import encode_records
from brook.coordinator.group.commit_runs import CommitBlock, CommitRun
from brook.coordinator.group.loader import GroupBatchReplayer
from brook.coordinator.group.offsets_cache import OffsetsCache, TopicOffsets
from brook.coordinator.group.schemas import (
    CorruptOffsetsRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from brook.coordinator.group.shard import CoordinatorShard
from brook.records import Record as BatchRecord
from brook.records import decode_batch, encode_batch
from brook.records.batch import CONTROL_BIT, HEADER_SIZE, decode_records, read_header
from brook.records.errors import RecordsError
from tests.support.examples import examples

T0 = 1_700_000_000_000
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

# --- decoding --------------------------------------------------------------------------------


def batch_body(pairs, timestamps=None):
    """The records section of a batch of (key, value) byte pairs, and its record count."""
    timestamps = timestamps or [T0] * len(pairs)
    batch = encode_batch([BatchRecord(i, ts, k, v)
                          for i, ((k, v), ts) in enumerate(zip(pairs, timestamps))])
    return batch[HEADER_SIZE:], read_header(batch).record_count


def general(body, count):
    """Record by record: brook.records' framing, then decode_key and decode_value."""
    out = []
    for record in decode_records(body, count, 0, 0):
        key = decode_key(record.key)
        out.append((key, None if isinstance(key, UnknownKey) else decode_value(key, record.value)))
    return out


def spelled_out(items):
    out = []
    for item in items:
        if type(item) is CommitBlock:
            out += item.records()
        elif type(item) is CommitRun:
            out += item.records()
        elif type(item) is DecodedRecord:
            out.append((item.key, item.value))
        else:
            assert type(item) is UnreadableRecords
            out.append(item)
    return out


def bulk(body, count, decoder):
    return spelled_out(decoder.decode(body, count, bulk=True))


def bulk_or_none(body, count, decoder):
    try:
        return bulk(body, count, decoder)
    except CorruptOffsetsRecordError:
        return None


def general_or_none(body, count):
    try:
        return general(body, count)
    except (RecordsError, CorruptOffsetsRecordError):
        return None


def commit(group, topic, partition, offset, epoch=5, metadata="", ts=T0):
    return (encode_key(OffsetCommitKey(group, topic, partition)),
            encode_value(OffsetCommitValue(offset, epoch, metadata, ts)))


GROUPS = st.sampled_from(["g", "group-1", "\u00e9\u00e9", "x" * 70])
TOPICS = st.sampled_from(["t", "orders", "a-longer-topic-name"])
METADATA = st.sampled_from(["", "", "m", "checkpoint-17", "\u00e9" * 19, "x" * 39, "x" * 40])


@st.composite
def layouts(draw):
    """What a consumer commits in one request: topics, each with partitions (mostly a range,
    in order; now and then in another order, or with a partition twice) and one metadata."""
    segments = []
    for _ in range(draw(st.integers(1, 3))):
        first = draw(st.sampled_from([0, 0, 3, 200, 2**31 - 4, -1]))
        n = draw(st.integers(1, 70))
        partitions = [first + i for i in range(n) if first + i < 2**31]
        shape = draw(st.integers(0, 9))
        if shape == 0:
            partitions = draw(st.permutations(partitions))
        elif shape == 1 and partitions:
            partitions.append(partitions[0])
        segments.append((draw(GROUPS), draw(TOPICS), partitions, draw(METADATA)))
    return segments


def commits_of(layout, draw, same_metadata=True):
    """A batch of the layout with drawn offsets, epochs, timestamps (and metadata of a
    length; the same for a segment unless not ``same_metadata``)."""
    pairs = []
    for group, topic, partitions, metadata in layout:
        if metadata and draw(st.booleans()):
            metadata = draw(st.sampled_from(["a", "b", "\u00e9"])) * len(metadata.encode())
        for p in partitions:
            m = metadata
            if not same_metadata and m and draw(st.integers(0, 5)) == 0:
                m = "z" * len(m.encode())
            pairs.append(commit(group, topic, p, draw(INT64), draw(INT32), m, draw(INT64)))
    return pairs


@settings(max_examples=examples(100))
@given(st.lists(layouts(), min_size=1, max_size=3), st.data())
def test_bulk_decoding_reads_what_record_by_record_decoding_reads(layouts_, data):
    """Several batches of a few layouts through one decoder, so that later ones are read by
    the templates of earlier ones."""
    decoder = RecordsDecoder()
    for _ in range(6):
        layout = data.draw(st.sampled_from(layouts_))
        pairs = commits_of(layout, data.draw, data.draw(st.integers(0, 3)) > 0)
        body, count = batch_body(pairs)
        assert bulk(body, count, decoder) == general(body, count)


@settings(max_examples=examples(300))
@given(layouts(), st.data())
def test_a_damaged_batch_like_a_template_reads_the_same_or_fails_alike(layout, data):
    decoder = RecordsDecoder()
    body, count = batch_body(commits_of(layout, data.draw))
    assert bulk(body, count, decoder) == general(body, count)  # the template
    body, count = batch_body(commits_of(layout, data.draw))
    damaged = bytearray(body)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    damaged = bytes(damaged)
    assert bulk_or_none(damaged, count, decoder) == general_or_none(damaged, count)


@pytest.mark.parametrize("metadata", ["", "meta"])
def test_any_byte_of_a_batch_like_a_template_changed_reads_as_record_by_record_reads_it(
        metadata):
    def batch(round_):
        pairs = [commit("group", "t", p, 100 * round_ + p, round_, metadata) for p in range(3)]
        pairs += [commit("group", "uu", p, p, 1, metadata) for p in range(2, 4)]
        return batch_body(pairs)

    decoder = RecordsDecoder()
    body, count = batch(0)
    assert bulk(body, count, decoder) == general(body, count)
    body, count = batch(1)
    for at in range(len(body)):
        for byte in (0x00, 0x01, 0x30, 0x7F, 0x80, 0xC3, 0xFF, body[at] ^ 0x01):
            damaged = body[:at] + bytes((byte,)) + body[at + 1 :]
            assert bulk_or_none(damaged, count, decoder) == general_or_none(damaged, count), (
                at, byte)
    assert decoder.known_blocks(body, count) is not None  # the template is still there


def test_a_batch_like_one_read_before_is_read_by_its_template():
    decoder = RecordsDecoder()
    pairs = [commit("g", "t", p, p) for p in range(20)] + [commit("g", "u", p, p, metadata="m")
                                                          for p in range(4, 9)]
    body, count = batch_body(pairs)
    assert decoder.known_blocks(body, count) is None
    items = list(decoder.decode(body, count, bulk=True))
    assert [(type(i), i.first, i.count, i.metadata) for i in items] == [
        (CommitBlock, 0, 20, ""), (CommitBlock, 4, 5, "m")]
    again, count = batch_body([commit("g", "t", p, 7 * p, 3, ts=5) for p in range(20)]
                              + [commit("g", "u", p, p, metadata="n") for p in range(4, 9)])
    blocks = decoder.known_blocks(again, count)
    assert blocks is not None
    assert spelled_out(blocks) == general(again, count)
    assert [b.metadata for b in blocks] == ["", "n"]


def test_what_is_not_a_block_is_read_as_runs_and_records():
    decoder = RecordsDecoder()
    pairs = [commit("g", "t", p, p) for p in (3, 1, 2)]  # out of order: a run
    pairs += [commit("g", "u", p, p, metadata="m") for p in (3, 1)]  # each on its own
    pairs += [commit("g", "v", p, p, metadata="m" if p else "n") for p in range(2)]
    body, count = batch_body(pairs)
    items = list(decoder.decode(body, count, bulk=True))
    assert [type(i) for i in items] == [CommitRun, DecodedRecord, DecodedRecord, CommitBlock,
                                        CommitBlock]
    assert spelled_out(items) == general(body, count)
    assert decoder.known_blocks(body, count) is None  # not only blocks: no template


def test_a_block_whose_metadata_differs_from_record_to_record_is_not_read_by_the_template():
    decoder = RecordsDecoder()
    body, count = batch_body([commit("g", "t", p, p, metadata="ab") for p in range(4)])
    list(decoder.decode(body, count, bulk=True))
    mixed, count = batch_body([commit("g", "t", p, p, metadata="ab" if p else "cd")
                               for p in range(4)])
    assert decoder.known_blocks(mixed, count) is None
    assert bulk(mixed, count, decoder) == general(mixed, count)
    bad, count = batch_body([commit("g", "t", p, p, metadata="ab") for p in range(4)])
    bad = bad.replace(b"ab", b"\xff\xfe")  # not UTF-8
    assert decoder.known_blocks(bad, count) is None
    with pytest.raises(CorruptOffsetsRecordError):
        bulk(bad, count, decoder)


def test_long_runs_are_read_as_blocks_of_at_most_512():
    decoder = RecordsDecoder()
    body, count = batch_body([commit("g", "t", p, p) for p in range(1200)])
    items = list(decoder.decode(body, count, bulk=True))
    assert [(i.first, i.count) for i in items] == [(0, 64), (64, 512), (576, 512), (1088, 112)]
    assert spelled_out(items) == general(body, count)


# --- the cache -------------------------------------------------------------------------------

ROW = struct.Struct(">qiq")
values_ = st.tuples(INT64, INT32, INT64)


def put_block_by_put(offsets, first, rows, metadata):
    new = 0
    for i, (offset, epoch, commit) in enumerate(rows):
        new += offsets.put(first + i, OffsetCommitValue(offset, epoch, metadata, commit))
    return new


cache_operations = st.lists(st.one_of(
    st.tuples(st.just("block"), st.sampled_from([0, 1, 5, 60, 200, -3, 2**31 - 2]),
              st.lists(values_, min_size=1, max_size=30), st.sampled_from(["", "", "m"])),
    st.tuples(st.just("put"), st.integers(0, 12) | st.integers(-2, 300),
              st.builds(OffsetCommitValue, INT64, INT32, st.sampled_from(["", "x"]), INT64,
                        st.sampled_from([-1, -1, 7])) | st.just(OffsetCommitValue(2**63, 1))),
    st.tuples(st.just("delete"), st.integers(-2, 300)),
), max_size=25)


@settings(max_examples=examples(400))
@given(cache_operations)
def test_put_block_stores_what_put_stores(operations):
    fast, slow = TopicOffsets(), TopicOffsets()
    for op in operations:
        if op[0] == "block":
            _, first, rows, metadata = op
            data = b"".join(ROW.pack(*r) for r in rows)
            assert fast.put_block(first, len(rows), data, metadata) == put_block_by_put(
                slow, first, rows, metadata)
        elif op[0] == "put":
            assert fast.put(op[1], op[2]) == slow.put(op[1], op[2])
        else:
            assert fast.delete(op[1]) == slow.delete(op[1])
        assert list(fast.items()) == list(slow.items())
        assert_consistent(fast)
        assert (fast.extras or None) == (slow.extras or None)


def assert_consistent(offsets):
    """A row per flag; extras exactly for the rows flagged with them; no partition both in a
    row and in ``sparse``."""
    assert len(offsets.rows) == 20 * len(offsets.flags)
    assert set(offsets.flags) <= {0, 1, 3}
    assert set(offsets.extras or ()) == {p for p, f in enumerate(offsets.flags) if f == 3}
    assert not {p for p, f in enumerate(offsets.flags) if f} & set(offsets.sparse or ())


def test_put_blocks_counts_new_offsets():
    cache = OffsetsCache()
    rows = b"".join(ROW.pack(p, 1, 2) for p in range(4))
    cache.put_blocks([CommitBlock("g", "t", 0, 4, rows), CommitBlock("g", "t", 2, 4, rows),
                      CommitBlock("h", "t", 0, 1, rows[:20], "m")])
    assert len(cache) == 7
    assert cache.get("g", "t", 5) == OffsetCommitValue(3, 1, "", 2)
    assert cache.get("h", "t", 0) == OffsetCommitValue(0, 1, "m", 2)


# --- loading ---------------------------------------------------------------------------------

LOADED_AT = T0 + 3_600_000
MEMBERS = ["m-a", "m-b"]


def snapshot(shard):
    """What a load must reproduce: every group as stored plus its state, every offset."""
    core, offsets = shard.classic, shard.offsets
    groups = {gid: (g.state, g.to_metadata_value()) for gid, g in core.groups.items()}
    stored = {
        (g, t, p): v for g in offsets.cache.groups() for t, p, v in offsets.cache.group_offsets(g)
    }
    return groups, stored, offsets.cached_offsets


def replay_one_by_one(batches, now=LOADED_AT):
    shard = CoordinatorShard()
    for data in batches:
        pos = 0
        while pos < len(data):
            header = read_header(data, pos)
            batch = decode_batch(data, pos)
            pos += header.size
            if header.attributes & CONTROL_BIT:
                continue  # a transaction marker
            for record in batch.records:
                key = decode_key(record.key)
                if not isinstance(key, UnknownKey):
                    shard.replay(key, decode_value(key, record.value), now)
    return shard


def load(batches, bulk_=True, now=LOADED_AT):
    shard = CoordinatorShard()
    replay_batches(GroupBatchReplayer(shard, now, bulk=bulk_), batches)
    return shard


@st.composite
def consumer_partitions(draw):
    """Batches as consumers write them: groups committing their assigned partitions again and
    again (ranges in order, now and then shuffled; metadata the same for a request, or none;
    now and then a v1 value with an expire timestamp, a partition beyond the rows, or a value
    out of a row's range), OffsetDeletes, group deletions, rebalances, unknown record types."""
    groups = ["g0", "g1", "g2"]
    assigned = {g: draw(layouts()) for g in groups}
    for g, layout in assigned.items():  # one group per layout, as a coordinator writes it
        assigned[g] = [(g, topic, partitions, metadata)
                       for _, topic, partitions, metadata in layout]
    batches: list[list[CoordinatorRecord]] = []
    generations = dict.fromkeys(groups, 0)
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["commit"] * 6 + ["odd", "delete", "drop", "meta",
                                                      "assign", "unknown"]))
        group = draw(st.sampled_from(groups))
        if kind == "commit":
            records = []
            for g, topic, partitions, metadata in assigned[group]:
                if metadata and draw(st.booleans()):
                    metadata = draw(st.sampled_from(["a", "bb", "\u00e9"]))
                for p in partitions:
                    value = OffsetCommitValue(draw(st.integers(0, 2**40)),
                                              draw(st.integers(-1, 9)), metadata,
                                              draw(st.integers(T0, T0 + 10**6)))
                    records.append(CoordinatorRecord(OffsetCommitKey(g, topic, p), value))
            batches.append(records)
        elif kind == "odd":
            _, topic, partitions, _ = draw(st.sampled_from(assigned[group]))
            p = draw(st.sampled_from([*partitions[:3], 5000, -7]))
            value = draw(st.sampled_from([OffsetCommitValue(1, 2, "", T0, T0 + 9),
                                          OffsetCommitValue(2**63 - 1, 2**31 - 1, "x", 0),
                                          OffsetCommitValue(3, -1, "", T0)]))
            batches.append([CoordinatorRecord(OffsetCommitKey(group, topic, p), value)])
        elif kind == "delete":
            _, topic, partitions, _ = draw(st.sampled_from(assigned[group]))
            batches.append([CoordinatorRecord(OffsetCommitKey(group, topic, p), None)
                            for p in partitions])
        elif kind == "drop":
            batches.append([CoordinatorRecord(OffsetCommitKey(group, t, p), None)
                            for _, t, ps, _ in assigned[group] for p in ps]
                           + [CoordinatorRecord(GroupMetadataKey(group), None)])
            generations[group] = 0
        elif kind == "meta":
            generations[group] += 1
            ids = draw(st.lists(st.sampled_from(MEMBERS), unique=True))
            batches.append([CoordinatorRecord(GroupMetadataKey(group), GroupMetadataValue(
                "consumer", generations[group], "range" if ids else None,
                ids[0] if ids else None, T0 + generations[group],
                tuple(MemberMetadata(m, None, "client", "/127.0.0.1", 30_000, 10_000, b"sub",
                                     m.encode()) for m in ids)))])
        elif kind == "assign":
            layout = draw(layouts())
            assigned[group] = [(group, t, ps, m) for _, t, ps, m in layout]
        else:
            batches.append([CoordinatorRecord(UnknownKey(10), None)])
    return batches


def encoded(batches):
    out = []
    for records in batches:
        if records and type(records[0].key) is UnknownKey:
            out.append(encode_batch([BatchRecord(0, T0, b"\x00\x0a\x00\x01g", b"\x00\x00")]))
        else:
            out.append(encode_records(records, T0))
    return out


@settings(max_examples=examples(200))
@given(consumer_partitions())
def test_loading_in_bulk_gives_the_state_of_replaying_record_by_record(batches):
    data = encoded(batches)
    reference = snapshot(replay_one_by_one(data))
    loaded = load(data)
    assert snapshot(loaded) == reference
    for group in loaded.offsets.cache._groups.values():
        for offsets in group.values():
            assert_consistent(offsets)
    assert snapshot(load(data, bulk_=False)) == reference
    # all of it in one buffer, and one batch a buffer, with one decoder
    assert snapshot(load([b"".join(data)])) == reference


def test_a_decoder_over_its_template_budget_forgets_its_templates_and_reads_on(monkeypatch):
    import brook.coordinator.group.batch_decoder as batch_decoder

    monkeypatch.setattr(batch_decoder, "_TEMPLATE_BYTES", 3000)
    batches = [[CoordinatorRecord(OffsetCommitKey(f"g{g}", "t", p),
                                  OffsetCommitValue(100 * r + p, r, "", T0 + r))
                for p in range(8)] for r in range(3) for g in range(6)]
    data = encoded(batches)
    decoder = RecordsDecoder()
    shard = CoordinatorShard()
    replay_batches(GroupBatchReplayer(shard, LOADED_AT, decoder), data)
    assert len(decoder._templates) < 6  # forgotten at least once
    assert snapshot(shard) == snapshot(replay_one_by_one(data))


@settings(max_examples=examples(50))
@given(consumer_partitions(), st.data())
def test_compressed_and_control_batches_load_in_bulk_as_record_by_record(batches, data):
    """The same partition with some batches compressed and transaction markers between them:
    a compressed batch's records are read from the decompressed bytes, templates included."""
    from brook.records.compression import Codec

    out = []
    for raw in encoded(batches):
        codec = data.draw(st.sampled_from([Codec.NONE, Codec.GZIP, Codec.ZSTD, Codec.LZ4]))
        records = decode_batch(raw, 0).records
        out.append(encode_batch(records, base_offset=0, codec=codec))
        if data.draw(st.integers(0, 4)) == 0:
            out.append(encode_batch([BatchRecord(0, T0, b"\x00\x00\x00\x00", b"\x00\x00")],
                                    base_offset=0, control=True, transactional=True))
    buffer = b"".join(out)
    reference = snapshot(replay_one_by_one([buffer]))
    assert snapshot(load([buffer])) == reference
    assert snapshot(load(out)) == reference
