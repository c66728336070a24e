"""``cid_from_str``, the fast text → CID parse, against multiformats' ``CID.decode``.

A differential test of the fast path against the slow one: the same CID for every
text the protocol writes, and an error (``ValueError``) wherever ``CID.decode`` has
one or the text is not the canonical form.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multiformats import CID

from pulsarcast_ipfs.core import cid_from_str, cid_str, compute_cid


@given(st.binary(min_size=0, max_size=64))
def test_the_text_of_every_block_cid_parses_to_the_same_cid(data: bytes) -> None:
    cid = compute_cid(data)
    text = cid_str(cid)
    got = cid_from_str(text)
    assert got == cid == CID.decode(text)
    assert bytes(got) == bytes(cid)


def test_other_codecs_and_bases_go_through_multiformats() -> None:
    digest = hashlib.sha256(b"x").digest()
    raw_cid = CID("base32", 1, "raw", ("sha2-256", digest))
    assert cid_from_str(str(raw_cid)) == raw_cid
    b58 = CID("base58btc", 1, "dag-cbor", ("sha2-256", digest))
    assert cid_from_str(str(b58)) == CID.decode(str(b58))


@given(st.text(min_size=0, max_size=70))
def test_garbage_is_refused_exactly_where_multiformats_refuses_it(text: str) -> None:
    try:
        want = CID.decode(text)
    except (ValueError, LookupError):
        want = None
    try:
        got = cid_from_str(text)
    except ValueError:
        got = None
    if want is None:
        assert got is None
    elif got is not None:
        assert got == want


@pytest.mark.parametrize(
    "text",
    [
        "",
        "b",
        "bafyrei",
        "bafyreiÅ",
        cid_str(compute_cid(b"y")) + "a",  # one character too many
        cid_str(compute_cid(b"y"))[:-1],  # one too few
    ],
)
def test_malformed_texts_raise_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        cid_from_str(text)


@given(st.binary(max_size=8), st.integers(min_value=0), st.sampled_from("abz27=AQ_é"))
def test_a_valid_text_with_one_character_changed(data: bytes, at: int, char: str) -> None:
    text = cid_str(compute_cid(data))
    i = at % len(text)
    mutated = text[:i] + char + text[i + 1 :]
    try:
        want = CID.decode(mutated)
    except (ValueError, LookupError):
        want = None
    try:
        got = cid_from_str(mutated)
    except ValueError:
        got = None
    if want is None:
        assert got is None, mutated
    elif got is not None:
        assert got == want
    else:  # only a non-canonical text may be refused where multiformats accepts it
        assert str(want) != mutated
