"""Record fields of v2 batch bodies, decoded for all records at once with numpy (one varint
column at a time) and checked: what the Arrow decoder builds its columns from and what
Produce validates records with.

A record's length is the only thing that says where the next one begins, so finding the
records is a walk (`record_starts`, quick over runs of records of one size); every other
field is then decoded for all of them together (`fields`). A record with headers has them
walked one by one (`headers`): headers are rare.
"""

from __future__ import annotations

from array import array
from typing import NamedTuple, Sequence

import numpy as np

from .errors import CorruptRecordError

PAD = bytes(16)  # varint reads may look a few bytes past the end: buffers end with this


class Fields(NamedTuple):
    """Per record: where it ends, and each field's value and place (positions into the buffer)."""

    rec_end: np.ndarray
    ts_delta: np.ndarray
    off_delta: np.ndarray
    key_len: np.ndarray
    key_start: np.ndarray
    key_end: np.ndarray
    value_len: np.ndarray
    value_start: np.ndarray
    value_end: np.ndarray
    n_headers: np.ndarray
    headers_at: np.ndarray


def fields(arr: np.ndarray, begins: np.ndarray, size: int) -> Fields:
    """Each record's fields, checked: lengths are -1 or more, every field ends inside its
    record, and a record without headers ends exactly after its value. A record with headers
    must have them walked (`headers`) to be checked whole.

    Each field is read where the one before it ends, whatever it says, and checked once at
    the end: positions only grow along a record, so its header count inside the record puts
    every field before it inside too. A field that says it is longer than the buffer makes
    the next read raise IndexError: on a padded buffer, CorruptRecordError; on an unpadded
    one the IndexError itself, for the caller to read a padded copy."""
    try:
        length, body = varints(arr, begins)
        rec_end = body + length
        ts_delta, p = varints(arr, body + 1)  # after the attributes byte
        off_delta, p = varints(arr, p)
        key_len, key_start = varints(arr, p)
        key_end = key_start + np.maximum(key_len, 0)
        value_len, value_start = varints(arr, key_end)
        value_end = value_start + np.maximum(value_len, 0)
        n_headers, headers_at = varints(arr, value_end)
    except IndexError:
        if len(arr) < size + len(PAD):
            raise
        raise CorruptRecordError("a record's fields run past the end of its batch") from None
    if not len(begins):
        return Fields(*(np.zeros(0, np.int64),) * 11)
    if length.min() < 1 or rec_end.max() > size:
        raise CorruptRecordError("a record has an invalid length")
    if key_len.min() < -1 or value_len.min() < -1 or n_headers.min() < 0:
        raise CorruptRecordError(
            "a record has a key or value length below -1 or a negative header count")
    if not n_headers.any():  # the common case: one comparison of two columns
        if not np.array_equal(headers_at, rec_end):
            raise CorruptRecordError("record length does not match its fields")
    elif (headers_at > rec_end).any() or not (headers_at == rec_end)[n_headers == 0].all():
        raise CorruptRecordError("record length does not match its fields")
    return Fields(rec_end, ts_delta, off_delta, key_len, key_start, key_end, value_len,
                  value_start, value_end, n_headers, headers_at)


def record_starts(buf: bytes, arr: np.ndarray, positions: Sequence[int], counts: Sequence[int],
                  size: int) -> np.ndarray:
    """Where each record (its length varint) begins, in the bodies that start at `positions`
    of `buf` (each ending where the next begins, the last at `size`) holding `counts` records.
    `buf` ends with PAD; without it, a read past `size` raises IndexError.

    A record's length is the only thing that says where the next one begins, so this is a
    walk from record to record. Records of one size often come in runs (values of a fixed
    size, and the same key, offset-delta and timestamp-delta widths for many records in a
    row): where the record at `p` and the two after it have the same size `L`, the records
    from `p` on are taken to start every `L` bytes, and numpy checks that guess for a window
    of them at once, keeping them up to the first whose length says otherwise (a run of
    records that each say "I am L bytes" from a true start are true starts, one after the
    other). Elsewhere a list comprehension steps from each record to the next (a record of
    under 8 KiB has a one- or two-byte length; longer ones take a function call). Both give
    exactly the walk's starts, and the batch's records must end where its body does.
    """
    parts: list[np.ndarray] = []
    sizes = list(positions) + [size]
    try:
        for i, count in enumerate(counts):
            p = sizes[i]
            end = sizes[i + 1]
            k = 0
            window, step = _RUN_WINDOW, _RUN_MIN
            while k < count:
                left = count - k
                if left >= _RUN_MIN:
                    # (`width`, not `size`: the handler below needs the body's size)
                    width = size_at(buf, p)
                    if (width and p + 2 * width < end and size_at(buf, p + width) == width
                            and size_at(buf, p + 2 * width) == width):
                        # Only starts a whole record fits after: a guess on the body's last
                        # byte would read the byte after it, past an unpadded buffer's end.
                        m = min(left, window, (end - p) // width)
                        stop = p + m * width
                        # The guesses' length varints, read as strided views (no gather):
                        # those with the bytes of the first are records of its size.
                        same = arr[p:stop:width] == buf[p]
                        if buf[p] >= 0x80:
                            same &= arr[p + 1:stop + 1:width] == buf[p + 1]
                        run = m if same.all() else int(same.argmin())
                        parts.append(np.arange(p, p + run * width, width, dtype=np.int64))
                        k += run
                        p += run * width
                        window = 2 * window if run == m else _RUN_WINDOW
                        step = _RUN_MIN
                        continue
                    n = min(left, step)  # not a run here: step through some (more each time)
                    step *= 4
                else:
                    n = left
                starts = array("q", [p])
                ends = [(p := p + (1 + (b >> 1) if (b := buf[p]) < 0x80 else
                                   2 + ((b & 0x7F | c << 7) >> 1) if (c := buf[p + 1]) < 0x80 else
                                   record_size(buf, p)))
                        for _ in range(n)]
                starts.extend(array("q", ends[:-1]))
                parts.append(np.frombuffer(starts, np.int64))
                k += n
            if p != end:
                raise CorruptRecordError(
                    f"batch {i} of the buffer: its records do not fill its body")
    except IndexError:
        if len(buf) < size + len(PAD):
            raise  # an unpadded buffer: the caller's to pad and try again
        raise CorruptRecordError("a record runs past the end of its batch") from None
    if not parts:
        return np.zeros(0, np.int64)
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


_RUN_MIN = 16  # records left in a batch for a run to be looked for
_RUN_WINDOW = 256  # records a run's guess is first checked over (doubling while it holds)


def size_at(buf: bytes, p: int) -> int:
    """The size of the record at `p` with its length varint, if that varint has one or two
    bytes; else 0."""
    b = buf[p]
    if b < 0x80:
        return 1 + (b >> 1)
    c = buf[p + 1]
    return 2 + ((b & 0x7F | c << 7) >> 1) if c < 0x80 else 0


def record_size(buf: bytes, p: int) -> int:
    """Bytes of the record at `p`, its length varint included (records of 8 KiB or more)."""
    raw, q = _uvarint(buf, p)
    return q - p + (raw >> 1)


def _uvarint(buf: bytes, p: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[p]
        p += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, p
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")


_WIDE = np.arange(10, dtype=np.int64)
_SHIFTS = (7 * np.arange(10)).astype(np.uint64)
_ONE = np.arange(128, dtype=np.int64)
_ONE = (_ONE >> 1) ^ -(_ONE & 1)  # the value of each one-byte zigzag varint
# Two-byte zigzag varints by their first byte << 8 | their second (a one-byte varint's entry
# ignores the second byte), and each varint's width by its first byte.
_TWO = np.arange(1 << 16, dtype=np.int32)
_TWO = np.where(_TWO >> 15, (_TWO >> 8 & 0x7F) | (_TWO & 0xFF) << 7, _TWO >> 8)
_TWO = ((_TWO >> 1) ^ -(_TWO & 1)).astype(np.int32)
_WIDTH = np.repeat(np.array([1, 2], np.int64), 128)


def varints(arr: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varints at `pos` (positions into `arr`): values, and the positions after
    them. One- and two-byte varints (nearly all) are looked up in tables, a few numpy calls
    for a whole column: a batch's cost is mostly numpy's cost per call."""
    b0 = arr[pos]
    if not len(b0) or b0.max() < 0x80:  # common for keys, timestamp deltas, header counts
        return _ONE[b0], pos + 1
    b1 = arr[pos + 1]
    if (b0 & b1).max() < 0x80:  # where a first byte says more, the second ends it
        return _TWO[(b0.astype(np.intp) << 8) | b1], pos + _WIDTH[b0]
    one = b0 < 0x80
    two = b1 < 0x80
    raw = (b0 & 0x7F).astype(pos.dtype)
    raw |= np.where(one, 0, b1.astype(pos.dtype) << 7)
    after = pos + 2 - one
    wide = ~(one | two)
    idx = np.flatnonzero(wide)
    window = arr[pos[idx, None].astype(np.int64) + _WIDE]
    more = window >= 0x80
    if more.all(axis=1).any():
        raise CorruptRecordError("varint longer than 10 bytes")
    length = np.argmin(more, axis=1) + 1
    keep = _WIDE[None, :] < length[:, None]
    parts = (window & 0x7F).astype(np.uint64) << _SHIFTS
    value = np.bitwise_or.reduce(np.where(keep, parts, np.uint64(0)), axis=1)
    raw = raw.astype(np.uint64)
    raw[idx] = value
    after[idx] = pos[idx] + length
    half = (raw >> np.uint64(1)).astype(np.int64)
    return half ^ -(raw & np.uint64(1)).astype(np.int64), after


def headers(buf: bytes, pos: int, count: int, end: int) -> list[tuple[str, bytes | None]]:
    """One record's headers (the per-record path)."""
    out = []
    try:
        for _ in range(count):
            klen, pos = zigzag(buf, pos)
            if klen < 0 or pos + klen > end:
                raise CorruptRecordError("record header with a null or overlong key")
            key = str(buf[pos : pos + klen], "utf-8")  # bytes or a memoryview
            pos += klen
            vlen, pos = zigzag(buf, pos)
            if vlen < -1 or pos + max(vlen, 0) > end:
                raise CorruptRecordError("record header value runs past its record")
            value = None if vlen < 0 else buf[pos : pos + vlen]
            pos += max(vlen, 0)
            out.append((key, value))
    except UnicodeDecodeError:
        raise CorruptRecordError("record header key is not UTF-8") from None
    if pos != end:
        raise CorruptRecordError("record length does not match its fields")
    return out


def zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint at `pos`, and the position after it."""
    raw, pos = _uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def zigzag_short(buf: bytes, pos: int) -> tuple[int, int]:
    """zigzag(), with varints of one and two bytes (nearly all) read in place: a call costs
    more than their decoding."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    c = buf[pos + 1]
    if c < 0x80:
        raw = b & 0x7F | c << 7
        return (raw >> 1) ^ -(raw & 1), pos + 2
    return zigzag(buf, pos)
