"""The codec's CIDs, built without multiformats' run-time checks, against its constructor.

A differential test of the fast path (``_dagcbor._build_cid``: ``CID._new_instance``
with the constructor's own arguments) against the slow one (``CID("base32", 1,
"dag-cbor", multihash)``): the same interned object whichever is built first, the
same fields, bytes, text and hash as a plain ``CID``.
"""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st
from multiformats import CID

from pulsarcast_ipfs.core import _dagcbor


def test_the_fast_builder_is_in_use() -> None:
    assert _dagcbor._build_cid is not _dagcbor._validated_cid


@given(st.binary(min_size=32, max_size=32), st.booleans())
def test_fast_and_validated_cids_are_one_object(digest: bytes, fast_first: bool) -> None:
    mh = b"\x12\x20" + digest
    if fast_first:
        fast = _dagcbor._build_cid(mh)
        slow = _dagcbor._validated_cid(mh)
    else:
        slow = _dagcbor._validated_cid(mh)
        fast = _dagcbor._build_cid(mh)
    assert fast is slow  # multiformats interned it: the very same instance
    plain = CID("base32", 1, "dag-cbor", ("sha2-256", digest))
    assert fast == plain and hash(fast) == hash(plain)
    assert bytes(fast) == bytes(plain) == b"\x01\x71" + mh
    assert str(fast) == str(plain)
    assert (fast.base, fast.version, fast.codec, fast.hashfun, fast.digest) == (
        plain.base,
        plain.version,
        plain.codec,
        plain.hashfun,
        plain.digest,
    )
    assert fast.raw_digest == digest


@given(st.binary(max_size=64))
def test_block_cids_decode_to_what_the_constructor_builds(data: bytes) -> None:
    cid = _dagcbor.sha256_cid(data)
    assert (
        cid
        == CID.decode(str(cid))
        == CID("base32", 1, "dag-cbor", ("sha2-256", hashlib.sha256(data).digest()))
    )
    assert _dagcbor.cid_from_bytes(bytes(cid)) is cid
