"""Decoding whole record batches of ``__consumer_offsets``: the loader's path.

A partition of __consumer_offsets is mostly offset commits, written a request at a time: one
batch holds one group's commits, topic after topic, each record with the key of version 1, the
value of version 3 without metadata, and the batch's timestamp. Within a topic those records
have the same length and the same bytes except for the record's offset delta, the partition,
the offset, the leader epoch and the commit timestamp. ``RecordsDecoder`` finds such runs and
reads the four numbers of every record with one precompiled ``struct`` format, without
building a key, a value or a record object; any other record is decoded on its own with
``decode_key`` and ``decode_value``. Both give the same answer for the same bytes.

A run is checked in three steps, all of them over whole byte strings: the first record is
framed and decoded as any record is; every later record must have the same bytes as its
predecessor outside the varying fields (the two records' bytes are XORed as big integers and
masked); and every offset delta must be a varint of the same length as the first one's.

A ``bulk`` decoder (the loader's) reads more at once. A run whose partitions are consecutive
(as a consumer commits them: its assigned partitions of a topic, in order) is given as a
``CommitBlock``: its offsets, leader epochs and commit timestamps are copied out as the bytes
they are (one ``struct`` call takes them, one ``join`` makes the block's rows, which the offsets
cache stores as they are); commits with metadata (one metadata for the whole run, up to 39
bytes) form such blocks too. And a batch made only of blocks is remembered as a template, by
the bytes of its first record up to the end of its key: the next batch of the same group
committing the same partitions (every commit of a consumer until its assignment changes) has
the same bytes but for the offsets, leader epochs, commit timestamps and metadata. One
``struct`` call a block cuts such a batch into those fields and the bytes between them (the
formats are shared by every block of the same shape and size); the bytes between them must
equal the template's (one comparison of the joined bytes), each block's metadata must be the
same in all its records, and then the blocks are read without framing a single record
(``known_blocks``). Whichever the path, the records are the same.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from functools import partial
from operator import itemgetter
from typing import NamedTuple

from ...records.batch import decode_records
from ...records.errors import RecordsError
from ...records.varint import decode_varint
from .commit_runs import CommitBlock, CommitRun
from .schemas import (
    CorruptOffsetsRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    _bytes_of,
    _Corrupt,
)
from .consumer_schemas import decode_key, decode_value  # every record type, classic ones too

__all__ = ["CommitBlock", "DecodedRecord", "RecordsDecoder", "UnreadableRecords"]


class UnreadableRecords(NamedTuple):
    """Records of a batch that cannot be read (a tolerant decoder yields this instead of
    raising): ``count`` records from the one at ``index``, and why."""

    index: int
    count: int
    reason: str


class DecodedRecord(NamedTuple):
    """A record decoded on its own, ``index`` its position in the batch. For an ``UnknownKey``
    the value is not read (it is None)."""

    index: int
    key: OffsetCommitKey | GroupMetadataKey | UnknownKey
    value: OffsetCommitValue | GroupMetadataValue | None


#: The value of a run record: version 3, offset, leader epoch, metadata, commit time.
_RUN_VALUE_SIZE = 24  # without metadata
#: The most records a CommitBlock holds (a longer run is read as several blocks).
_MAX_BLOCK = 512
#: About the memory a decoder's templates may take before it forgets them all.
_TEMPLATE_BYTES = 32 << 20
# A varint's last byte is below 0x80, the others are not: _HIGH maps the others to ASCII.
_HIGH = bytes((b ^ 0x80) for b in range(256))
_new_block = partial(tuple.__new__, CommitBlock)


class _Shape(NamedTuple):
    """The layout of the records of a run (all of them the first one's size)."""

    #: offset delta position, key position, key size, metadata size
    lengths: tuple[int, int, int, int]
    stride: int
    delta_at: int
    delta_size: int
    rows: struct.Struct  # the four numbers of a record
    mask: bytes  # 0xff over the bytes every record of a run shares with the others
    offset_at: int  # where a record's value's offset starts


class _Step(NamedTuple):
    """A block of a template. Its records are cut into fields by ``fields`` (shared by the
    blocks of the same shape and size, of every template), four a record: the bytes before its
    offset (from the header count of the record before, but for the block's first record),
    its offset and leader epoch, its metadata with the metadata's length before it, its commit
    timestamp; and a last one, the header count of its last record."""

    at: int  # where the block starts in the batch
    fields: object  # struct.Struct.unpack_from
    #: the fields that must be the template's (None: every other one, from the first)
    fixed_fields: object
    fixed: bytes  # those fields of the template, joined
    group: str
    topic: str
    first: int
    count: int
    #: None without metadata; else the length the metadata field begins with
    metadata: bytes | None


class _Template(NamedTuple):
    size: int
    count: int
    steps: tuple[_Step, ...]


class RecordsDecoder:
    """Decodes the records of ``__consumer_offsets`` batches, in log order.

    One decoder serves one load: it remembers the group and topic of the keys it has met (by
    their bytes) and the formats of run shapes, so that thousands of commit batches are read
    without decoding a group id twice.
    """

    def __init__(self) -> None:
        #: key bytes before the partition -> (group, topic), or None for keys no run has.
        self._prefixes: dict[bytes, tuple[str, str] | None] = {}
        self._shapes: dict[tuple[int, int, int, int], _Shape] = {}
        self._masks: dict[tuple[tuple[int, int, int, int], int], int] = {}
        #: (shape lengths, records) -> the partitions' and the rows' formats of a block
        self._blocks: dict[tuple[tuple[int, int, int, int], int],
                           tuple[struct.Struct, struct.Struct]] = {}
        #: ``_template_key`` of a batch -> the template of the last such batch made of blocks
        self._templates: dict[bytes, _Template] = {}
        #: (shape lengths, records) -> how a template's block is cut (see ``_Step``)
        self._fields: dict[tuple[tuple[int, int, int, int], int], tuple] = {}
        self._template_bytes = 0

    def decode(self, body: bytes, count: int, tolerant: bool = False, bulk: bool = False,
               templates: bool = True
               ) -> Iterator[CommitRun | CommitBlock | DecodedRecord | UnreadableRecords]:
        """The ``count`` records of a batch's uncompressed records section, as runs of plain
        offset commits and single decoded records, in order. Raises
        ``CorruptOffsetsRecordError`` at bytes that cannot be read (after yielding what came
        before them), wherever ``brook.records``' decoder and ``decode_key``/``decode_value``
        would fail; a ``tolerant`` decoder yields ``UnreadableRecords`` for them instead and
        goes on: after a record whose key or value cannot be decoded, with the next record;
        after a record that cannot even be framed, with nothing (the rest of the batch is
        unreadable). A ``bulk`` decoder also yields ``CommitBlock``s, and looks the batch up
        among its templates first unless told not to (see the module's description)."""
        if type(body) is not bytes:
            body = _bytes_of(body)
        if bulk and templates:
            blocks = self.known_blocks(body, count)
            if blocks is not None:
                yield from blocks
                return
        end = len(body)
        #: the blocks so far, while the batch is nothing else: (shape, block)
        steps: list[tuple[_Shape, CommitBlock]] | None = [] if bulk else None
        pos = 0
        index = 0
        from_bytes = int.from_bytes
        while index < count:
            try:
                rec_end, delta_at, key_at, key_len, value_at, value_len, plain, bare = _frame(
                    body, pos, end
                )
            except (_Corrupt, RecordsError, IndexError) as e:
                if tolerant:
                    yield UnreadableRecords(index, count - index, str(e))
                    return
                raise CorruptOffsetsRecordError(f"record {index} of the batch: {e}") from None
            shape = None
            metadata = ""
            if plain and key_len >= 10 and (
                value_len == _RUN_VALUE_SIZE or (bulk and value_len > _RUN_VALUE_SIZE)
            ):
                shape = self._run_shape(body, pos, delta_at, key_at, key_len, value_at,
                                        value_len, rec_end)
                if shape is not None and shape.lengths[3]:
                    try:
                        metadata = body[value_at + 16 : value_at + value_len - 8].decode()
                    except UnicodeDecodeError:
                        shape = None
            if shape is None:
                steps = None
                try:
                    if bare:  # framed already: its key and value are where _frame found them
                        yield self._bare(body, index, key_at, key_len, value_at, value_len)
                    else:
                        yield self._single(body, index, pos, rec_end)
                except CorruptOffsetsRecordError as e:
                    if not tolerant:
                        raise
                    yield UnreadableRecords(index, 1, str(e))
                pos = rec_end
                index += 1
                continue
            stride = shape.stride
            n = min(count - index, (end - pos) // stride)
            if bulk and n > _MAX_BLOCK:
                n = _MAX_BLOCK
            prefix = body[key_at : key_at + key_len - 4]
            if n > 1:
                n = _run_bound(body, key_at, stride, prefix, n)
            run = body[pos : pos + n * stride]
            if n > 1:
                mask = self._mask(shape, n - 1)
                diff = (from_bytes(run[stride:], "big") ^ from_bytes(run[:-stride], "big")) & mask
                if diff:  # the first differing byte ends the run before its record
                    n = ((n - 1) * stride - (diff.bit_length() + 7) // 8) // stride + 1
                n = _same_delta_sizes(run, shape, n)
                if n * stride != len(run):
                    run = run[: n * stride]
            group, topic = self._prefixes[prefix]  # type: ignore[misc]
            if bulk:
                partitions, fields = self._block_structs(shape, n)
                first = partitions.unpack_from(run)
                first = first[0] if first == tuple(range(first[0], first[0] + n)) else -1
                if first >= 0:
                    block = _new_block((group, topic, first, n,
                                        b"".join(fields.unpack_from(run)), metadata))
                    yield block
                    if steps is not None:
                        steps.append((shape, block))
                    pos += n * stride
                    index += n
                    continue
                steps = None
                if metadata:  # partitions out of order: each record on its own
                    for _ in range(n):
                        try:
                            yield self._single(body, index, pos, pos + stride)
                        except CorruptOffsetsRecordError as e:
                            if not tolerant:
                                raise
                            yield UnreadableRecords(index, 1, str(e))
                        pos += stride
                        index += 1
                    continue
            yield CommitRun(group, topic, shape.rows.iter_unpack(run))
            pos += n * stride
            index += n
        if pos != end:
            if not tolerant:  # every record was read: a tolerant decoder is done
                raise CorruptOffsetsRecordError(
                    f"{end - pos} bytes after the last record of a batch")
        elif steps:
            self._remember(body, count, steps)

    def known_blocks(self, body: bytes, count: int, start: int = 0, size: int = -1
                     ) -> list[CommitBlock] | None:
        """The blocks of a batch of ``count`` records like one this decoder read before (see
        the module's description), or None when there is no such template or the batch
        differs from it where it must not. The batch's records are ``body``, or its ``size``
        bytes from ``start`` when given (a batch in a buffer of batches, not copied out)."""
        if size < 0:
            size = len(body) - start
        template = self._templates.get(_template_key(body, start))
        if template is None or template.size != size or template.count != count:
            return None
        blocks = []
        join = b"".join
        for at, cut, fixed_fields, fixed, group, topic, first, n, size_bytes in template.steps:
            fields = cut(body, start + at)  # type: ignore[operator]
            if join(fields[0::2] if fixed_fields is None
                    else fixed_fields(fields)) != fixed:  # type: ignore[operator]
                return None
            metadata = ""
            if size_bytes is not None:
                values = fields[2::4]
                value = values[0]
                if values.count(value) != n or not value.startswith(size_bytes):
                    return None  # the records of the block differ in their metadata
                try:
                    metadata = value[2:].decode()
                except UnicodeDecodeError:
                    return None
            blocks.append(_new_block((group, topic, first, n, join(fields[1::2]), metadata)))
        return blocks

    def _remember(self, body: bytes, count: int, steps: list[tuple[_Shape, CommitBlock]]
                  ) -> None:
        """Keep a batch made only of blocks as a template (see ``_Step``)."""
        join = b"".join
        template_steps = []
        at = 0
        for shape, block in steps:
            n = block.count
            cut, fixed_fields = self._block_fields(shape, n)
            fields = cut(body, at)  # type: ignore[operator]
            fixed = join(fields[0::2] if fixed_fields is None else fixed_fields(fields))
            size = shape.lengths[3]
            template_steps.append(_Step(at, cut, fixed_fields, fixed, block.group, block.topic,
                                        block.first, n, size.to_bytes(2, "big") if size else None))
            at += n * shape.stride
        self._template_bytes += len(body) + 200 * len(steps)
        if self._template_bytes > _TEMPLATE_BYTES:
            self._templates.clear()
            self._fields.clear()
            self._template_bytes = 0
            return
        self._templates[_template_key(body)] = _Template(len(body), count, tuple(template_steps))

    def _block_fields(self, shape: _Shape, n: int) -> tuple[object, object]:
        """``_Step.fields`` and ``_Step.fixed_fields`` of ``n`` records of the shape."""
        k = (shape.lengths, n)
        found = self._fields.get(k)
        if found is None:
            size = shape.lengths[3]
            record = f"{shape.offset_at}s12s{2 + size}s8s"
            later = f"{shape.offset_at + 1}s12s{2 + size}s8s"
            cut = struct.Struct(">" + record + later * (n - 1) + "s").unpack_from
            fixed_fields = None
            if size:  # the metadata fields are not the template's
                fixed_fields = itemgetter(*range(0, 4 * n, 4), 4 * n)
            found = self._fields[k] = (cut, fixed_fields)
            self._template_bytes += 40 * (4 * n + 1)  # the format's compiled fields
        return found

    def _block_structs(self, shape: _Shape, n: int) -> tuple[struct.Struct, struct.Struct]:
        """The formats of the partitions and of the rows' fields (offset and leader epoch,
        commit timestamp) of ``n`` records of the shape."""
        k = (shape.lengths, n)
        found = self._blocks.get(k)
        if found is None:
            key_at, key_len, meta = shape.lengths[1:]
            partition_at = key_at + key_len - 4
            found = self._blocks[k] = (
                struct.Struct(">" + f"{partition_at}xi{shape.stride - partition_at - 4}x" * n),
                struct.Struct(">" + f"{shape.offset_at}x12s{2 + meta}x8sx" * n),
            )
        return found

    def _bare(self, body: bytes, index: int, key_at: int, key_len: int, value_at: int,
              value_len: int) -> DecodedRecord:
        """``_single`` of a record without headers, framed by ``_frame``."""
        try:
            if key_len < 0:
                raise CorruptOffsetsRecordError("a record without a key")
            key = decode_key(body[key_at : key_at + key_len])
            if type(key) is UnknownKey:
                return DecodedRecord(index, key, None)
            value = None if value_len < 0 else decode_value(
                key, body[value_at : value_at + value_len])
        except CorruptOffsetsRecordError as e:
            raise CorruptOffsetsRecordError(f"record {index} of the batch: {e}") from None
        return DecodedRecord(index, key, value)

    def _single(self, body: bytes, index: int, pos: int, rec_end: int) -> DecodedRecord:
        """The record at ``pos`` on its own, framed by ``brook.records`` as any record is."""
        try:
            try:
                [record] = decode_records(body[pos:rec_end], 1, 0, 0)
            except RecordsError as e:
                raise CorruptOffsetsRecordError(str(e)) from None
            if record.key is None:
                raise CorruptOffsetsRecordError("a record without a key")
            key = decode_key(record.key)
            if type(key) is UnknownKey:
                return DecodedRecord(index, key, None)
            value = None if record.value is None else decode_value(key, record.value)
        except CorruptOffsetsRecordError as e:
            raise CorruptOffsetsRecordError(f"record {index} of the batch: {e}") from None
        return DecodedRecord(index, key, value)

    def _run_shape(
        self,
        body: bytes,
        pos: int,
        delta_at: int,
        key_at: int,
        key_len: int,
        value_at: int,
        value_len: int,
        rec_end: int,
    ) -> _Shape | None:
        """The shape of a run that starts with this record, or None when none can: the key must
        be an offset commit key ending with its partition, the value version 3 with its
        metadata (empty unless the caller allows more) and nothing after the commit timestamp
        (``_frame`` checked the rest)."""
        if body[value_at : value_at + 2] != b"\x00\x03":
            return None
        meta = value_len - _RUN_VALUE_SIZE
        if body[value_at + 14 : value_at + 16] != meta.to_bytes(2, "big"):
            return None
        prefix = body[key_at : key_at + key_len - 4]
        names = self._prefixes.get(prefix, False)
        if names is False:
            names = self._prefixes[prefix] = _run_key_names(body[key_at : key_at + key_len])
        if names is None:
            return None
        lengths = (delta_at - pos, key_at - pos, key_len, meta)
        shape = self._shapes.get(lengths)
        if shape is None:
            shape = self._shapes[lengths] = _new_shape(
                lengths, rec_end - pos, _varint_size_at(body, delta_at)
            )
        return shape

    def _mask(self, shape: _Shape, n: int) -> int:
        """The mask of ``n`` records of the shape (all but the first of a run), as a big-endian
        integer."""
        k = (shape.lengths, n)
        mask = self._masks.get(k)
        if mask is None:
            mask = self._masks[k] = int.from_bytes(shape.mask * n, "big")
        return mask


def _new_shape(lengths: tuple[int, int, int, int], stride: int, delta_size: int) -> _Shape:
    # Record layout: length varint, attributes, timestamp delta varint, offset delta varint,
    # key length varint, key (its partition last), value length (one byte), value, header count.
    # The value: version, offset, leader epoch, metadata length, metadata, commit timestamp.
    delta_at, key_at, key_len, meta = lengths
    partition_at = key_at + key_len - 4
    value_at = key_at + key_len + 1
    commit_at = value_at + 16 + meta
    mask = bytearray(b"\xff" * stride)
    mask[delta_at : delta_at + delta_size] = bytes(delta_size)
    mask[partition_at : partition_at + 4] = bytes(4)
    mask[value_at + 2 : value_at + 14] = bytes(12)  # offset, leader epoch
    mask[commit_at : commit_at + 8] = bytes(8)  # commit timestamp
    rows = struct.Struct(f">{partition_at}xi3xqi{2 + meta}xqx")
    return _Shape(lengths, stride, delta_at, delta_size, rows, bytes(mask), value_at + 2)


def _run_bound(body: bytes, key_at: int, stride: int, prefix: bytes, n: int) -> int:
    """How many of the ``n`` records from the one whose key is at ``key_at`` may be in its run:
    every record of a run has the key's ``prefix`` (group and topic) where the first has it.
    A binary search, so a batch of several topics costs a few probes; never less than the run
    (the records of a run all match), perhaps more (other bytes may match by chance)."""
    if body.startswith(prefix, key_at + (n - 1) * stride):
        return n
    matches, misses = 0, n - 1
    while misses - matches > 1:
        mid = (matches + misses) // 2
        if body.startswith(prefix, key_at + mid * stride):
            matches = mid
        else:
            misses = mid
    return misses


def _same_delta_sizes(run: bytes, shape: _Shape, n: int) -> int:
    """How many of the first ``n`` records of ``run`` have an offset delta of the first one's
    size (the other varying fields have fixed sizes)."""
    stride, at, size = shape.stride, shape.delta_at, shape.delta_size
    end = n * stride
    last = run[at + size - 1 : end : stride]
    if last.isascii() and all(run[at + i : end : stride].translate(_HIGH).isascii()
                              for i in range(size - 1)):
        return n
    for k in range(1, n):
        r = k * stride + at
        if run[r + size - 1] >= 0x80 or any(run[r + i] < 0x80 for i in range(size - 1)):
            return k
    return n


def _run_key_names(key: bytes) -> tuple[str, str] | None:
    """(group, topic) of an offset commit key that ends with its partition, else None."""
    if key[:2] not in (b"\x00\x00", b"\x00\x01"):
        return None
    try:
        k = decode_key(key)
    except CorruptOffsetsRecordError:
        return None
    if type(k) is not OffsetCommitKey:
        return None
    if len(key) != 10 + len(k.group.encode()) + len(k.topic.encode()):
        return None  # bytes after the partition: not a run key
    return k.group, k.topic


def _template_key(body: bytes, start: int = 0) -> bytes:
    """The bytes of the first record from ``start`` up to the end of its key, when its
    attributes, timestamp delta and offset delta take a byte each (as in every batch made of
    blocks); for other batches, some other bytes at their start (a key of no template, or of
    one the batch is then checked against)."""
    try:
        p = start + (4 if body[start] < 0x80 else 5 if body[start + 1] < 0x80 else 6)
        b = body[p]
        if b < 0x80:
            return body[start : p + 1 + (b >> 1)]
        return body[start : p + 2 + (((b & 0x7F) | body[p + 1] << 7) >> 1)]
    except IndexError:
        return body[start : start + 8]


def _varint_size_at(data: bytes, p: int) -> int:
    size = 1
    while data[p] & 0x80:
        p += 1
        size += 1
    return size


def _frame(body: bytes, pos: int, end: int
           ) -> tuple[int, int, int, int, int, int, bool, bool]:
    """The framing of the v2 record at ``pos``: (its end, offset delta position, key position,
    key length, value position, value length, plain, bare), lengths -1 for null. ``bare``
    says that the record has no headers (and nothing after its value); ``plain`` that it could
    be in a run: bare, with a one-byte value length. One-byte varints, the common case, are
    read inline."""
    b = body[pos]
    if b < 0x80:
        length, p = (b >> 1) ^ -(b & 1), pos + 1
    else:
        length, p = decode_varint(body, pos)
    if length < 1:
        raise _Corrupt(f"invalid record length {length}")
    rec_end = p + length
    if rec_end > end:
        raise _Corrupt("record runs past the end of the batch")
    # attributes, timestamp delta, offset delta
    if body[p + 1] < 0x80:
        delta_at = p + 2
    else:
        _, delta_at = decode_varint(body, p + 1)
    if body[delta_at] < 0x80:
        p = delta_at + 1
    else:
        _, p = decode_varint(body, delta_at)
    b = body[p]
    if b < 0x80:
        key_len, key_at = (b >> 1) ^ -(b & 1), p + 1
    else:
        key_len, key_at = decode_varint(body, p)
    if key_len >= 0:
        p = key_at + key_len
    elif key_len == -1:
        p = key_at
    else:
        raise _Corrupt(f"invalid key length {key_len}")
    b = body[p]
    if b < 0x80:
        value_len, value_at = (b >> 1) ^ -(b & 1), p + 1
    else:
        value_len, value_at = decode_varint(body, p)
    plain = value_at == p + 1
    if value_len >= 0:
        p = value_at + value_len
    elif value_len == -1:
        p = value_at
    else:
        raise _Corrupt(f"invalid value length {value_len}")
    if p >= rec_end:
        raise _Corrupt("record fields run past its length")
    bare = p + 1 == rec_end and not body[p]
    return rec_end, delta_at, key_at, key_len, value_at, value_len, plain and bare, bare
