"""Every reader of Fetch responses, given a response cut at every byte: a response's byte
limits may end it inside a batch (KIP-74), and each reader keeps the whole batches before the
cut and goes on from the first offset of the cut one.

The readers: the follower's append (`whole_batches_size`, then `Log.append_as_follower`),
brook's own range reader (the bulk Arrow decoder and the read-ahead position), which the
Spark readers and the command's tools use."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brook.client.fetcher import _after_whole_batches
from brook.records import Codec, Record, encode_batch, encode_message_set, whole_batches_size
from brook.records.arrow import decode
from brook.records.legacy import LegacyMessage
from brook.storage.config import LogConfig
from brook.storage.log import Log
from tests.support.examples import examples


def _batches(first_offset: int, sizes: list[int], codec: Codec = Codec.NONE) -> list[bytes]:
    out, offset = [], first_offset
    for n in sizes:
        records = [Record(offset + i, 1_700_000_000_000 + i, b"k%d" % (offset + i), b"v" * (20 + i))
                   for i in range(n)]
        out.append(encode_batch(records, base_offset=offset, codec=codec, partition_leader_epoch=3))
        offset += n
    return out


def _boundaries(batches: list[bytes]) -> list[int]:
    ends, pos = [0], 0
    for b in batches:
        pos += len(b)
        ends.append(pos)
    return ends


def _whole_before(ends: list[int], cut: int) -> int:
    return max(e for e in ends if e <= cut)


def test_whole_batches_size_at_every_cut_of_v2_batches():
    batches = _batches(100, [1, 3, 2, 5])
    data = b"".join(batches)
    ends = _boundaries(batches)
    for cut in range(len(data) + 1):
        assert whole_batches_size(data[:cut]) == _whole_before(ends, cut), cut


def test_whole_batches_size_at_every_cut_of_a_legacy_message_set():
    sets = [encode_message_set([LegacyMessage(offset=o, magic=magic, key=b"k", value=b"x" * o)],
                               magic=magic) for o, magic in ((0, 0), (1, 1), (2, 1))]
    data = b"".join(sets)
    ends = _boundaries(sets)
    for cut in range(len(data) + 1):
        assert whole_batches_size(data[:cut]) == _whole_before(ends, cut), cut


def test_the_bulk_reader_at_every_cut():
    for codec in (Codec.NONE, Codec.ZSTD):
        batches = _batches(7, [2, 1, 4], codec)
        data = b"".join(batches)
        ends = _boundaries(batches)
        offsets_after = [7, 9, 10, 14]  # after 0, 1, 2, 3 whole batches
        for cut in range(len(data) + 1):
            n_whole = ends.index(_whole_before(ends, cut))
            decoded = decode(data[:cut], "t", 0)
            assert decoded.bytes_used == ends[n_whole], (codec, cut)
            assert decoded.batch.num_rows == offsets_after[n_whole] - 7
            assert decoded.next_offset == (offsets_after[n_whole] if n_whole else None)
            assert _after_whole_batches(data[:cut]) == (offsets_after[n_whole] if n_whole else None)


def test_the_follower_appends_the_whole_batches_of_a_cut_response_and_resumes(tmp_path):
    batches = _batches(0, [2, 3, 1, 4])
    data = b"".join(batches)
    ends = _boundaries(batches)
    step = 7  # every cut would make hundreds of logs; a prime step still meets every batch
    for cut in range(0, len(data) + 1, step):
        log = Log(str(tmp_path / f"t{cut}-0"), LogConfig())
        try:
            whole = whole_batches_size(data[:cut])
            if whole:
                log.append_as_follower(memoryview(data[:cut])[:whole])
            # the next fetch starts at the log end: the rest of the response follows whole
            rest = data[whole:]
            if rest:
                log.append_as_follower(rest)
            assert log.log_end_offset == 10
            assert [b.last_offset for b in log.read(0, 1 << 20).batches()] == [1, 4, 5, 9]
            assert log.epoch_cache.latest_epoch == 3
            assert whole == _whole_before(ends, cut)
        finally:
            log.close()


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=6),
       codec=st.sampled_from(list(Codec)), data=st.data())
def test_any_cut_of_any_batches_keeps_exactly_the_whole_ones(sizes, codec, data):
    batches = _batches(data.draw(st.integers(0, 2**40)), sizes, codec)
    buf = b"".join(batches)
    cut = data.draw(st.integers(0, len(buf)))
    ends = _boundaries(batches)
    whole = whole_batches_size(buf[:cut])
    assert whole == _whole_before(ends, cut)
    assert decode(buf[:cut], "t", 0).bytes_used == whole
