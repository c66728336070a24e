"""The core's DAG-CBOR codec agrees with the reference ``dag_cbor`` library."""

from __future__ import annotations

from typing import Any

import dag_cbor
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
