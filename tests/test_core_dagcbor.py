"""The core's DAG-CBOR codec agrees with the reference ``dag_cbor`` library."""

from __future__ import annotations

import ast
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
from pulsarcast_ipfs.testing import to_mf

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
    assert ours == dag_cbor.encode(to_mf(value))
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


def test_project_and_multiformats_cids_mix_in_either_order() -> None:
    """A ``multiformats.CID`` and the project's CID of the same bytes are equal either
    way round; the codec encodes both as the same link and decodes it as the project's."""
    fast = compute_cid(b"fast first")
    other = CID.decode(bytes(fast))  # multiformats (base58btc by default for bytes)
    assert type(fast) is not CID and type(other) is CID
    assert fast == other and other == fast and not fast != other and not other != fast
    assert bytes(fast) == bytes(other) and str(fast) == str(other.set(base="base32"))
    assert _dagcbor.decode(_dagcbor.encode([fast, other])) == [fast, fast]
    assert _dagcbor.encode([fast]) == _dagcbor.encode([other])


def test_the_digest_form_builds_the_multiformats_cid() -> None:
    """Differential: ``cid_for_digest`` and ``cid_from_bytes`` against a plain
    ``multiformats.CID`` of the same digest: equal, same bytes, text, digest; the
    memo gives one object per link."""
    rng = random.Random(9)
    for _ in range(200):
        digest = rng.randbytes(32)
        got = _dagcbor.cid_for_digest(digest)
        plain = CID("base32", 1, "dag-cbor", b"\x12\x20" + digest)
        assert got == plain and bytes(got) == bytes(plain)
        assert str(got) == str(plain) and got.digest == plain.digest
        assert got.raw_digest == plain.raw_digest and got.version == plain.version
        assert got.codec == plain.codec
        assert _dagcbor.cid_from_bytes(bytes(plain)) is got
