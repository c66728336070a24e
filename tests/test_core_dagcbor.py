"""The core's DAG-CBOR codec agrees with the reference ``dag_cbor`` library."""

from __future__ import annotations

import ast
import hashlib
import random
from pathlib import Path
from typing import Any

import dag_cbor
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multiformats import CID

from pulsarcast_ipfs.core import _dagcbor
from pulsarcast_ipfs.core._descriptors import compute_cid

cids = st.binary(max_size=8).map(compute_cid)
leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.binary(max_size=40)
    | cids
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=25,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(values)
def test_same_bytes_as_dag_cbor(value: Any) -> None:
    ours = _dagcbor.encode(value)
    assert ours == dag_cbor.encode(value)
    assert _dagcbor.decode(ours) == dag_cbor.decode(ours)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_what_we_accept_dag_cbor_accepts(data: bytes) -> None:
    try:
        ours = _dagcbor.decode(data)
    except _dagcbor.CborError:
        return
    assert dag_cbor.decode(data) == ours


@settings(max_examples=200, deadline=None)
@given(values, st.data())
def test_mutations_never_crash(value: Any, data: st.DataObject) -> None:
    raw = bytearray(_dagcbor.encode(value))
    i = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    raw[i] = data.draw(st.integers(min_value=0, max_value=255))
    try:
        decoded = _dagcbor.decode(bytes(raw))
    except _dagcbor.CborError:
        return
    assert dag_cbor.decode(bytes(raw)) == decoded


@pytest.mark.parametrize(
    "data",
    [
        b"\x18\x17",  # non-minimal integer
        b"\xa2\x61b\x01\x61a\x02",  # unsorted map keys
        b"\xa2\x61a\x01\x61a\x02",  # duplicate keys
        b"\x9f\xff",  # indefinite array
        b"\xf9\x3c\x00",  # half float
        b"\xfb\x7f\xf8\x00\x00\x00\x00\x00\x00",  # NaN
        b"\xc1\x00",  # tag other than 42
        b"\xa1\x01\x02",  # integer map key
        b"\x62\xc3\x28",  # invalid UTF-8
        b"\x01\x02",  # trailing bytes
        b"\xf7",  # undefined
        b"\x81" * 100 + b"\x00",  # too deep
    ],
)
def test_rejects_what_dag_cbor_forbids(data: bytes) -> None:
    with pytest.raises(_dagcbor.CborError):
        _dagcbor.decode(data)


def test_cids_are_built_on_public_ground() -> None:
    """No write to a private attribute of a library object, no bypassed constructor,
    anywhere in the project (the fields of ``multiformats.CID``, ``object.__new__``)."""
    root = Path(_dagcbor.__file__).parents[2]
    private = {"_base", "_version", "_codec", "_hashfun", "_digest"}
    found = []
    for path in sorted(root.glob("*/**/*.py")):
        if ".venv" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and node.attr in private
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}: writes .{node.attr}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "__new__"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "object"
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}: calls object.__new__")
    assert found == []


def test_fast_and_plain_cids_mix_in_either_order() -> None:
    """The fast CID is interned by multiformats like any CID: whichever of it and a
    plain CID of the same fields is built first, the two are equal and hash alike."""
    digest = hashlib.sha256(b"plain first").digest()
    plain = CID("base32", 1, "dag-cbor", b"\x12\x20" + digest)
    got = _dagcbor.cid_for_digest(digest)
    assert got is plain  # the live plain CID came back: correct, only slower
    assert _dagcbor.is_dag_cbor_sha256_link(got) and _dagcbor._cid_bytes(got) == bytes(plain)
    fast = compute_cid(b"fast first")
    other = CID.decode(bytes(fast))  # base58btc: another multiformats instance
    assert type(fast) is not CID and type(other) is CID
    assert fast == other and other == fast and not fast != other
    assert hash(fast) == hash(other) and {other: 1}[fast] == 1
    assert bytes(fast) == bytes(other) and str(fast) == str(other.set(base="base32"))
    assert CID("base32", 1, "dag-cbor", bytes(fast)[2:]) is fast
    assert _dagcbor.decode(_dagcbor.encode([fast, other])) == [fast, fast]


def test_the_pair_form_builds_the_same_cid() -> None:
    """Differential: ``cid_for_digest`` (the constructor's ``(multihash name, raw
    digest in hex)`` form) against the multihash-bytes and raw-bytes forms it
    replaced and a plain ``multiformats.CID``: the same object (interned), bytes,
    text and hash."""
    rng = random.Random(9)
    for _ in range(200):
        digest = rng.randbytes(32)
        got = _dagcbor.cid_for_digest(digest)
        assert _dagcbor._Cid("base32", 1, "dag-cbor", b"\x12\x20" + digest) is got
        assert _dagcbor._Cid("base32", 1, "dag-cbor", ("sha2-256", digest)) is got
        plain = CID.decode(b"\x01\x71\x12\x20" + digest)
        assert got == plain and hash(got) == hash(plain) and bytes(got) == bytes(plain)
        assert str(got) == str(plain.set(base="base32")) and got.digest == plain.digest
        assert _dagcbor.cid_from_bytes(bytes(plain)) is got
