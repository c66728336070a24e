"""The project's CID type against ``multiformats.CID`` (the slow path it replaces).

Every property the project reads (binary form, text, version, codec, digests,
equality, hashing, pickling) must be what ``multiformats`` says for the same CID,
for the protocol's links and for other CIDs (v0, raw, libp2p-key, identity
multihash); every input ``multiformats`` refuses, :meth:`CID.decode` refuses too.
"""

from __future__ import annotations

import copy
import hashlib
import pickle

import multiformats
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._dagcbor import CborError, cid_for_digest, cid_from_bytes

_SHA = hashlib.sha256(b"a block").digest()
_SAMPLES = [
    multiformats.CID("base32", 1, "dag-cbor", ("sha2-256", _SHA)),
    multiformats.CID("base32", 1, "raw", ("sha2-256", _SHA)),
    multiformats.CID("base58btc", 0, "dag-pb", ("sha2-256", _SHA)),
    multiformats.CID("base32", 1, "dag-pb", ("sha2-512", hashlib.sha512(b"x").digest())),
    multiformats.CID("base32", 1, "libp2p-key", ("identity", b"\x08\x01\x12\x20" + _SHA)),
    multiformats.CID("base32", 1, "dag-json", ("sha2-256", _SHA)),  # a two-byte codec varint
]


@pytest.mark.parametrize("plain", _SAMPLES, ids=lambda c: f"v{c.version}-{c.codec.name}")
def test_every_property_is_what_multiformats_says(plain: multiformats.CID) -> None:
    for ours in (CID.decode(bytes(plain)), CID.decode(str(plain)), CID.of(plain)):
        assert bytes(ours) == bytes(plain)
        assert ours.version == plain.version
        assert ours.codec == plain.codec
        assert ours.digest == bytes(plain.digest)
        assert ours.raw_digest == bytes(plain.raw_digest)
        canonical = plain if plain.version == 0 else plain.set(base="base32")
        assert str(ours) == str(canonical) == ours.encode()
        if plain.version == 1:
            assert ours.encode("base58btc") == str(plain.set(base="base58btc"))
        assert ours == plain and plain == ours and not ours != plain and not plain != ours
        assert ours.to_multiformats() == plain
        assert ours.is_dag_cbor_sha256() == (
            plain.codec.name == "dag-cbor" and len(bytes(plain)) == 36
        )


def test_equality_and_hashing_are_by_the_binary_form() -> None:
    a = cid_for_digest(_SHA)
    b = CID.decode(bytes(a))
    other = cid_for_digest(hashlib.sha256(b"another").digest())
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a != other and not a == other and hash(a) != hash(other)
    assert a != str(a) and a != bytes(a) and a is not None
    raw = CID.decode(bytes(multiformats.CID("base32", 1, "raw", ("sha2-256", _SHA))))
    assert raw != a and raw.raw_digest == a.raw_digest  # same digest, other codec
    assert pickle.loads(pickle.dumps(a)) == a and copy.deepcopy(a) is a and copy.copy(a) is a
    assert repr(a) == f"CID({str(a)!r})"


def test_only_the_module_builds_one() -> None:
    with pytest.raises(TypeError, match=r"CID\.decode"):
        CID(bytes(cid_for_digest(_SHA)))
    with pytest.raises(ValueError, match="32 bytes"):
        CID.dag_cbor_sha256(b"short")
    with pytest.raises(TypeError):
        CID.decode(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        CID.of("bafy")  # type: ignore[arg-type]


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=48))
def test_bytes_are_refused_exactly_where_multiformats_refuses_them(raw: bytes) -> None:
    try:
        plain = multiformats.CID.decode(raw)
    except (ValueError, LookupError):
        with pytest.raises(ValueError):
            CID.decode(raw)
        with pytest.raises(CborError):
            cid_from_bytes(raw)
        return
    if bytes(plain) != raw:  # multiformats accepts a non-canonical form; we do not
        with pytest.raises(ValueError, match="canonical"):
            CID.decode(raw)
        return
    assert CID.decode(raw) == plain and cid_from_bytes(raw) == plain


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=32, max_size=32))
def test_the_protocol_links_fast_path_is_the_validated_one(digest: bytes) -> None:
    raw = b"\x01\x71\x12\x20" + digest
    fast = cid_for_digest(digest)
    plain = multiformats.CID.decode(raw)
    assert fast == plain and bytes(fast) == raw and str(fast) == str(plain.set(base="base32"))
    assert cid_from_bytes(raw) is fast  # memoised: one object per link
    raw_link = b"\x01\x55\x12\x20" + digest  # the retention index's links
    got, plain = CID.decode(raw_link), multiformats.CID.decode(raw_link)
    assert got == plain and str(got) == str(plain.set(base="base32"))
    assert got.codec == plain.codec and got.digest == bytes(plain.digest)
    assert got.raw_digest == digest and not got.is_dag_cbor_sha256()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_text_is_refused_where_multiformats_refuses_it(text: str) -> None:
    try:
        plain = multiformats.CID.decode(text)
    except (ValueError, LookupError):
        with pytest.raises(ValueError):
            CID.decode(text)
        return
    assert CID.decode(text) == plain
