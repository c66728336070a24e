"""The codec's encoder (exact-type dispatch, memoised map-key order) against the
previous one, a plain chain of ``isinstance`` checks kept here as the reference.

A differential test of the fast path against the slow one: the same bytes for every
value, or the same exception type (``CborError``, or ``UnicodeEncodeError`` for a
lone surrogate), in the quick suite; ``tests/test_core_dagcbor.py`` compares both
with the ``dag_cbor`` library (slow).
"""

from __future__ import annotations

import enum
import math
import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarcast_ipfs.core import _dagcbor
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._dagcbor import MAX_DEPTH, CborError, _cid_bytes, _head
from pulsarcast_ipfs.core._descriptors import compute_cid


class _Name(enum.StrEnum):
    A = "a"


def _reference_enc(value: Any, out: bytearray, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise CborError("value nested too deeply")
    if value is None:
        out.append(0xF6)
    elif value is True:
        out.append(0xF5)
    elif value is False:
        out.append(0xF4)
    elif isinstance(value, int):
        if value >= 0:
            _head(0, value, out)
        else:
            _head(1, -1 - value, out)
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        _head(3, len(raw), out)
        out += raw
    elif isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        _head(2, len(raw), out)
        out += raw
    elif isinstance(value, CID):
        raw = b"\x00" + _cid_bytes(value)
        out += b"\xd8\x2a"
        _head(2, len(raw), out)
        out += raw
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise CborError("DAG-CBOR forbids NaN and infinities")
        out.append(0xFB)
        out += struct.pack(">d", value)
    elif isinstance(value, list | tuple):
        _head(4, len(value), out)
        for item in value:
            _reference_enc(item, out, depth + 1)
    elif isinstance(value, dict):
        items = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise CborError("DAG-CBOR map keys must be strings")
            items.append((k.encode("utf-8"), v))
        items.sort(key=lambda kv: (len(kv[0]), kv[0]))
        _head(5, len(items), out)
        for kb, v in items:
            _head(3, len(kb), out)
            out += kb
            _reference_enc(v, out, depth + 1)
    else:
        raise CborError(f"cannot encode {type(value).__name__} as DAG-CBOR")


def _outcome(fn: Any, value: Any) -> tuple[str, Any]:
    out = bytearray()
    try:
        fn(value, out, 0)
    except (CborError, UnicodeEncodeError) as exc:
        return "error", type(exc)
    return "ok", bytes(out)


cids = st.binary(max_size=8).map(compute_cid)
leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**65), max_value=2**65)
    | st.sampled_from([23, 24, 255, 256, 2**16, 2**32, 2**64 - 1, 2**64, -24, -25, -(2**64) - 1])
    | st.floats()
    | st.text(max_size=30)
    | st.sampled_from(["\ud800", _Name.A, "é" * 30])
    | st.binary(max_size=40)
    | st.binary(max_size=8).map(bytearray)
    | cids
    | cids.map(lambda c: CID.decode(bytes(c)))  # a plain multiformats CID
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(
            st.text(max_size=30) | st.sampled_from([_Name.A, "\udc00"]), inner, max_size=5
        )
        | st.dictionaries(st.integers(0, 3), inner, min_size=1, max_size=2)
    ),
    max_leaves=25,
)


@settings(max_examples=250, deadline=None)
@given(values)
def test_same_bytes_or_error_as_the_reference_encoder(value: Any) -> None:
    assert _outcome(_dagcbor._enc, value) == _outcome(_reference_enc, value)


BOUNDARIES = [0, 23, 24, 255, 256, 2**16 - 1, 2**16, 2**32 - 1, 2**32, 2**64 - 1, 2**64]


def test_the_length_boundaries_of_every_head() -> None:
    for n in BOUNDARIES:
        for value in (n, -1 - n, "x" * min(n, 70000), b"y" * min(n, 70000), [0] * min(n, 300)):
            assert _outcome(_dagcbor._enc, value) == _outcome(_reference_enc, value), n


def test_depth_limit_and_the_protocols_maps() -> None:
    deep: Any = 1
    for _ in range(MAX_DEPTH + 1):
        deep = {"k": [deep]}
    assert _outcome(_dagcbor._enc, deep) == _outcome(_reference_enc, deep) == ("error", CborError)
    event = {
        "topic": compute_cid(b"t"),
        "author": "12D3",
        "parents": [],
        "clock": 0,
        "payload": b"x" * 300,
        "metadata": {"created": "2026", "protocolVersion": "2.2.0"},
    }
    assert _outcome(_dagcbor._enc, event) == _outcome(_reference_enc, event)
    assert math.isfinite(struct.unpack(">d", _dagcbor.encode(1.5)[1:])[0])
