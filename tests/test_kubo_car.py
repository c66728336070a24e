"""CARv1 archives for ``dag/import`` (``pulsarcast_ipfs.kubo._car``): the bytes the
spec lays out, read back exactly, and anything else refused with a ``CarError``.
Kubo's own reading of them is in ``tests/test_kubo_client.py`` (real daemons)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import dag_cbor
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multiformats import CID as MfCID

from pulsarcast_ipfs.core import compute_cid
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kubo._car import CarError, decode_car, encode_car


def _blocks(n: int) -> list[tuple[CID, bytes]]:
    out = []
    for i in range(n):
        data = dag_cbor.encode({"n": i, "pad": "x" * (i * 70)})  # up to multi-byte varints
        out.append((compute_cid(data), data))
    return out


def test_an_archive_is_the_header_then_one_section_per_block_as_the_spec_lays_them_out() -> None:
    blocks = _blocks(3)
    car = encode_car(blocks)
    # header: varint length, then dag-cbor {"roots": [], "version": 1} (read by another codec)
    assert car[0] == len(dag_cbor.encode({"roots": [], "version": 1}))
    assert dag_cbor.decode(car[1 : 1 + car[0]]) == {"roots": [], "version": 1}
    pos = 1 + car[0]
    for cid, data in blocks:
        raw = bytes(cid)
        length, shift = 0, 0
        while True:  # an unsigned LEB128 varint
            byte = car[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        assert length == len(raw) + len(data)
        assert MfCID.decode(car[pos : pos + len(raw)]) == MfCID.decode(raw)
        assert car[pos + len(raw) : pos + length] == data
        pos += length
    assert pos == len(car)


def test_an_archive_reads_back_with_its_roots_and_blocks_in_order() -> None:
    blocks = _blocks(40)
    assert decode_car(encode_car(blocks)) == ([], blocks)
    root = blocks[0][0]
    assert decode_car(encode_car(blocks[:2], roots=[root])) == ([root], blocks[:2])
    assert decode_car(encode_car([])) == ([], [])


@pytest.mark.parametrize(
    ("mangle", "why"),
    [
        (lambda car: b"", "the varint is cut short"),
        (lambda car: b"\x00", "does not fit"),
        (lambda car: car[:5], "does not fit"),
        (lambda car: b"\x03\xa1av\x01", "is not"),  # {"v": 1}
        (lambda car: car[:-1], "past the end"),
        (lambda car: car + b"\x85", "cut short"),
        (lambda car: car[:-1] + bytes([car[-1] ^ 1]), "does not hash to its CID"),
        (lambda car: car + b"\x02\x00\x00", "not a CIDv1"),
    ],
)
def test_anything_else_is_refused_with_what_is_wrong(
    mangle: Callable[[bytes], bytes], why: str
) -> None:
    car = encode_car(_blocks(2))
    with pytest.raises(CarError, match=why):
        decode_car(mangle(car))


def test_a_block_under_another_hash_is_refused() -> None:
    data = b"\x01"
    sha512 = MfCID("base32", 1, "dag-cbor", ("sha2-512", hashlib.sha512(data).digest()))
    header = dag_cbor.encode({"roots": [], "version": 1})
    section = bytes(sha512) + data
    car = bytes([len(header)]) + header + bytes([len(section)]) + section
    with pytest.raises(CarError, match="not a sha2-256 CID"):
        decode_car(car)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 3))
def test_garbage_raises_only_car_errors(garbage: bytes, keep: int) -> None:
    """Random bytes, and a valid archive's prefix followed by random bytes: a
    ``CarError`` or a valid reading, never another exception."""
    car = encode_car(_blocks(keep))
    for data in (garbage, car[: len(car) // 2] + garbage, car + garbage):
        try:
            decode_car(data)
        except CarError:
            pass
