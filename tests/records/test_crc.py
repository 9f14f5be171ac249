"""brook.records.crc: CRC-32C as RFC 3720 defines it, for every kind of buffer the broker
hands it (bytes, bytearray, memoryview slices of either), whole or continued."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from brook.records.crc import crc32c


def reference_crc32c(data: bytes, crc: int = 0) -> int:
    """Bit by bit, with the reflected Castagnoli polynomial."""
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_rfc_3720_vectors():
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0


@given(st.binary(max_size=3000), st.integers(0, 64), st.integers(0, 64))
def test_any_buffer_and_slice_matches_the_reference(data, head, tail):
    expected = reference_crc32c(data)
    padded = bytes(head) + data + bytes(tail)
    assert crc32c(data) == expected
    assert crc32c(bytearray(data)) == expected
    assert crc32c(memoryview(padded)[head:head + len(data)]) == expected
    assert crc32c(memoryview(bytearray(padded))[head:head + len(data)]) == expected


@given(st.binary(max_size=2000), st.integers(0, 2000))
def test_a_checksum_continues_from_an_initial_value(data, cut):
    cut = min(cut, len(data))
    assert crc32c(data[cut:], crc32c(data[:cut])) == reference_crc32c(data)


def test_large_buffers_cross_every_vector_width():
    data = bytes((i * 131 + 7) % 256 for i in range(70_000))
    for size in (1, 15, 16, 63, 64, 255, 256, 4095, 4096, 16_573, 70_000):
        assert crc32c(data[:size]) == reference_crc32c(data[:size])
