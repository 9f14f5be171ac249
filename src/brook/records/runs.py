"""The common shape of a producer's records, checked a run at a time: what Produce's record
checks (`brook.records.validate`) spend least on.

Producers write records of one layout in long runs: librdkafka and the Java client write
attributes 0, timestamp deltas that grow from 0, offset deltas 0 to n-1, and no headers; keys
and values are of one size when the application sends them so (a null key, values of one
size). Records of one layout and size differ only in their timestamp and offset deltas and
the bytes of their keys and values, so a run of them is checked a column at a time, for all
its records in one numpy call each: a few 8-byte words of each record (read in place, `size`
bytes apart) hold every field that must equal the first record's (lengths, the header count
of the record before), the timestamp delta's continuation and sign bits and the offset delta,
which must be the record's own. A record of another layout (a wider timestamp delta, the
offset deltas' next width at 64 and 8,192, another value size) starts the next run.

`sound_prefix` checks records from the first on until one is not of that shape (headers, a
negative timestamp delta, a varint of three bytes or more where the run needs one or two, a
rule broken, damage); the general walk checks the rest, and answers whatever is wrong. What is
accepted here is what the general walk accepts.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .columns import zigzag_short
from .errors import CorruptRecordError

RUN = 16  # records of one layout checked as a run (fewer cost less one by one)
SINGLES = 4  # records taken one by one before the general walk takes over
_WORD = 8  # bytes of a record checked in one step
_MAX_WORDS = 8  # a layout whose checked fields spread wider is left to the general walk
# The offset delta of record i is the zigzag varint 2i: one byte below 64, two below 8,192,
# three below 2^20 (a run ends where the width changes).
_WIDTH_ENDS = ((64, 1), (8192, 2), (1 << 20, 3))
_TABLE = 8192  # offset deltas kept in tables (below it, runs take their expected words there)


def sound_prefix(buf, arr: np.ndarray, size: int, count: int, keys_required: bool,
                 earliest: int | None, latest: int | None) -> tuple[int, int, int | None]:
    """The records at the start of the batch body `buf` (`size` bytes; `arr` its bytes, which
    may go on past `size`) that are of the common shape and sound: (where the first record
    after them begins, how many there are, their largest timestamp delta or None for none).
    `earliest` and `latest` bound the timestamp deltas (None: unbounded): a run with a record
    outside is left to the general walk, which names it."""
    p = i = 0
    top = None
    singles = 0
    try:
        while i < count:
            layout = _layout(buf, p, i, keys_required)
            if layout is None:
                break
            length, delta, ts_at, ts_width, shape = layout
            m = min(count - i, (size - p) // length, _width_end(i) - i)
            if m < 1:  # it runs past the body
                break
            if m < RUN or buf[p + length] != buf[p]:  # no run here: this record alone
                if (earliest is not None and delta < earliest) or \
                        (latest is not None and delta > latest) or singles == SINGLES:
                    break
                singles += 1
                top = delta if top is None else max(top, delta)
                p += length
                i += 1
                continue
            words = _words(*shape)
            if words is None:
                break
            # Rows: records 1 to m-1, each word read from `start` bytes after its record's
            # start (a negative start reads the end of the record before).
            rows = m - 1
            stride = (length,)
            bad = None
            for start, mask, expected, offset_shift in words:
                word = np.ndarray((rows,), "<u8", arr, p + length + start, stride)
                x = np.bitwise_and(word, mask)
                x ^= expected
                if offset_shift is not None:
                    x ^= _offsets(i + 1, rows, offset_shift)
                if bad is None:
                    bad = x
                else:
                    bad |= x
            if np.count_nonzero(bad):  # record j's end or record j+1's start is not the run's
                m = max(int(np.argmax(bad != 0)), 1)  # (the first record is the layout's)
                if m < RUN:  # (a run cut short costs as much as a long one)
                    if singles >= SINGLES:
                        break
                    singles += 1
            elif buf[p + m * length - 1]:  # the last record's header count
                m -= 1
            high = low = delta
            if m > 1:
                column = np.ndarray((m - 1,), "u1" if ts_width == 1 else "<u2", arr,
                                    p + length + ts_at, stride)
                high = max(high, _ts_delta(int(np.maximum.reduce(column)), ts_width))
                if earliest is not None:
                    low = min(low, _ts_delta(int(np.minimum.reduce(column)), ts_width))
            if (earliest is not None and low < earliest) or (latest is not None and high > latest):
                break
            top = high if top is None else max(top, high)
            p += m * length
            i += m
    except (IndexError, CorruptRecordError):  # the general walk says what is wrong
        pass
    return p, i, top


def _ts_delta(raw: int, width: int) -> int:
    """The timestamp delta of a varint of one byte, or of two read as a little-endian number
    (the second byte, at most 0x7F, counts more than the first, 0x80 or more, as in the
    varint: their order is the deltas' order). Not negative: checked already."""
    if width == 1:
        return raw >> 1
    return ((raw & 0x7F) | (raw >> 8) << 7) >> 1


def _width_end(i: int) -> int:
    """Where the offset deltas' width changes next after record `i` (i itself past 2^20)."""
    return _offset_width(i)[0]


def _offset_width(i: int) -> tuple[int, int]:
    for end, width in _WIDTH_ENDS:
        if i < end:
            return end, width
    return i, 0  # no run past 2^20 records


def _layout(buf, p: int, i: int, keys_required: bool):
    """The layout of record `i` at `p`, if it is of the common shape and sound by itself:
    (its size, its timestamp delta, where that begins in the record and how wide it is, what
    `_words` makes the words that check a run of its layout of). None otherwise."""
    length, q = zigzag_short(buf, p)
    if length < 1 or q - p > 2:
        return None
    size = q - p + length
    ts_at = q + 1  # after the attributes byte
    delta, o = zigzag_short(buf, ts_at)
    if delta < 0 or o - ts_at > 2:
        return None
    offset_width = _offset_width(i)[1]
    offset, key_at = zigzag_short(buf, o)
    if offset != i or key_at - o != offset_width:
        return None
    key, v = zigzag_short(buf, key_at)
    if key < -1 or (key == -1 and keys_required):
        return None
    value_at = v + max(key, 0)
    value, h = zigzag_short(buf, value_at)
    if value < -1 or h + max(value, 0) != p + size - 1 or buf[p + size - 1]:
        return None
    shape = (size, q - p, o - ts_at, offset_width, key_at - p, key, v - key_at, value_at - p,
             value, h - value_at)
    return size, delta, ts_at - p, o - ts_at, shape


@lru_cache(maxsize=256)
def _words(size: int, length_width: int, ts_width: int, offset_width: int, key_at: int,
           key: int, key_width: int, value_at: int, value: int, value_width: int) -> tuple | None:
    """The 8-byte words (little-endian) that check a record of this layout: for each, where it
    begins (from the record's start; before it, the end of the record before), the bits
    checked, what they must be, and the shift of the offset delta's bytes in it (None if it
    has none). Checked: the length, the key and value lengths (each as the first record's);
    the timestamp delta's width and sign (continuation bits, the sign bit); the offset delta
    (the record's own); the header count of the record before (none). None if the fields
    spread wider than a few words, or the record is shorter than a word."""
    ts_at = length_width + 1
    offset_at = ts_at + ts_width
    checked: dict[int, tuple[int, int]] = {-1: (0xFF, 0)}  # column: (bits, what they must be)
    for at, field in ((0, _zigzag_bytes(size - length_width, length_width)),
                      (key_at, _zigzag_bytes(key, key_width)),
                      (value_at, _zigzag_bytes(value, value_width))):
        for k, byte in enumerate(field):
            checked[at + k] = (0xFF, byte)
    for k in range(ts_width):  # continuation bits; the sign bit in the first byte
        checked[ts_at + k] = (0x80 | (0x01 if k == 0 else 0), 0 if k == ts_width - 1 else 0x80)
    offsets = range(offset_at, offset_at + offset_width)
    columns = sorted(checked.keys() | set(offsets))
    if size < _WORD or columns[-1] - columns[0] >= _MAX_WORDS * _WORD:
        return None
    words = []
    covered = -_WORD
    for column in columns:
        if column < covered:
            continue
        start = min(column, size - _WORD)  # a word stays within its record's end
        words.append(_word(start, checked, offsets))
        covered = start + _WORD
    if all(shift is None for *_, shift in words):
        # The offset delta across two words (with a length, a timestamp delta and an
        # offset delta of widths 2, 2 and 3): a word of its own.
        if offset_at + _WORD > size:
            return None
        words.append(_word(offset_at, checked, offsets))
    return tuple(words)


def _word(start: int, checked: dict[int, tuple[int, int]], offsets: range) -> tuple:
    """The word at `start` (see `_words`): the offset delta is checked in it only if it
    holds the whole of it."""
    shift = 8 * (offsets.start - start) \
        if start <= offsets.start and offsets.stop <= start + _WORD else None
    mask = expected = 0
    for k in range(_WORD):
        bits, byte = checked.get(start + k, (0, 0))
        if shift is not None and start + k in offsets:
            bits = 0xFF  # what they must be: the record's own offset delta (`_offsets`)
        mask |= bits << 8 * k
        expected |= byte << 8 * k
    return start, np.uint64(mask), np.uint64(expected), shift


def _zigzag_bytes(value: int, width: int) -> bytes:
    """`value` as a zigzag varint of `width` bytes (as a record has it: one value has one
    varint of each width)."""
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        out.append(raw & 0x7F | (0x80 if raw >= 0x80 or len(out) + 1 < width else 0))
        raw >>= 7
        if not raw and len(out) >= width:
            return bytes(out)


def _offsets(i: int, m: int, shift: int) -> np.ndarray:
    """The offset deltas of records i to i + m - 1 as their varint bytes, each in a word
    shifted left by `shift` bits (of one width: a run does not cross one)."""
    if i + m <= _TABLE:
        return _offset_table(shift)[i : i + m]
    raw = np.arange(2 * i, 2 * (i + m), 2, dtype=np.uint64)
    words = ((raw & np.uint64(0x7F)) | np.uint64(0x80)) \
        | (((raw >> np.uint64(7)) & np.uint64(0x7F)) | np.uint64(0x80)) << np.uint64(8) \
        | (raw >> np.uint64(14)) << np.uint64(16)
    return words << np.uint64(shift)


@lru_cache(maxsize=8)
def _offset_table(shift: int) -> np.ndarray:
    """`_offsets` for offset deltas 0 to 8,191 (one byte below 64, two from 64)."""
    raw = np.arange(0, 2 * _TABLE, 2, dtype=np.uint64)
    two = ((raw & np.uint64(0x7F)) | np.uint64(0x80)) | (raw >> np.uint64(7)) << np.uint64(8)
    return np.where(raw < 128, raw, two) << np.uint64(shift)
