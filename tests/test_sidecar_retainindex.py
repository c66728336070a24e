"""The retention index's blocks and bookkeeping (``sidecar._retainindex``), without
Kubo; ``tests/test_kubo_client.py::test_the_retention_index_keeps_retained_events_through_gc``
runs it against a real daemon's garbage collector."""

from __future__ import annotations

import random

import dag_cbor
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multiformats import CID

from pulsarcast_ipfs.core import compute_cid
from sidecar._retainindex import (
    NotAnIndex,
    RetainIndex,
    decode_bucket,
    decode_root,
    encode_bucket,
)


def _cids(n: int, tag: str = "e") -> list[CID]:
    return [compute_cid(dag_cbor.encode({"t": tag, "n": i})) for i in range(n)]


def _linked(index_blocks: dict[CID, bytes], root: CID) -> set[bytes]:
    out: set[bytes] = set()
    for bucket in decode_root(index_blocks[root]):
        out.update(decode_bucket(index_blocks[bucket]))
    return out


def _mh(cid: CID) -> bytes:
    return bytes(cid)[2:]


@pytest.mark.parametrize("n", [0, 1, 23, 24, 255, 256, 300])
def test_a_bucket_is_strict_dag_cbor_with_raw_links(n: int) -> None:
    """Hand-built bytes equal ``dag_cbor``'s encoding of the same value, with each
    event linked as the raw CID of its own multihash."""
    cids = _cids(n)
    data = encode_bucket(_mh(c) for c in cids)
    raw = [CID("base32", 1, "raw", c.digest) for c in cids]
    assert data == dag_cbor.encode({"events": raw})
    assert decode_bucket(data) == [_mh(c) for c in cids]


def test_blocks_that_are_no_index_are_refused() -> None:
    for data in [b"\xff", dag_cbor.encode({"events": [1]}), dag_cbor.encode([1])]:
        with pytest.raises(NotAnIndex):
            decode_bucket(data)
    for data in [b"\xff", dag_cbor.encode({"buckets": []}), dag_cbor.encode({"events": []})]:
        with pytest.raises(NotAnIndex):
            decode_root(data)


def test_a_change_rebuilds_one_bucket_and_the_root() -> None:
    index = RetainIndex(bucket_size=4)
    cids = _cids(10)
    for c in cids:
        assert index.add(c)
    assert not index.add(cids[0]) and len(index) == 10 and cids[3] in index
    first = index.build()
    assert len(first.blocks) == 3 + 1  # buckets of 4, 4, 2 and the root
    index.commit(first)
    assert not index.changed and index.root == first.root and index.pinned_size == 10
    index.add(_cids(1, "new")[0])  # into the last bucket
    second = index.build()
    assert len(second.blocks) == 2  # that bucket and the root
    index.commit(second)
    for c in cids[:4]:  # the oldest bucket empties: dropped from the root
        assert index.remove(c)
    assert not index.remove(cids[0])
    third = index.build()
    blocks = dict(first.blocks + second.blocks + third.blocks)
    assert len(third.blocks) == 1  # only the root: the emptied bucket is gone
    assert _linked(blocks, third.root) == {_mh(c) for c in cids[4:]} | {_mh(_cids(1, "new")[0])}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["add", "remove", "build", "commit"]), st.integers(0, 40)))
)
def test_every_build_links_exactly_the_set_when_it_was_built(ops: list[tuple[str, int]]) -> None:
    """Random adds, removes, builds and late commits (changes while a build is in
    flight, as while Kubo pins it): a build links exactly the set of its moment, and
    the index is "changed" until a build of the current set is committed."""
    index = RetainIndex(bucket_size=3)
    pool = _cids(41)
    blocks: dict[CID, bytes] = {}
    members: set[bytes] = set()
    pending = None
    for op, i in ops:
        if op == "add":
            index.add(pool[i])
            members.add(_mh(pool[i]))
        elif op == "remove":
            index.remove(pool[i])
            members.discard(_mh(pool[i]))
        elif op == "build":
            pending = (index.build(), set(members))
            blocks.update(pending[0].blocks)
            assert _linked(blocks, pending[0].root) == members
        elif pending is not None:
            index.commit(pending[0])
            assert index.pinned_size == len(pending[1])
            pending = None
    final = index.build()
    blocks.update(final.blocks)
    index.commit(final)
    assert not index.changed and _linked(blocks, final.root) == members


def test_an_index_read_back_goes_on_from_its_root() -> None:
    index = RetainIndex(bucket_size=4)
    cids = _cids(9)
    for c in cids:
        index.add(c)
    build = index.build()
    index.commit(build)
    blocks = dict(build.blocks)
    buckets = [decode_bucket(blocks[b]) for b in decode_root(blocks[build.root])]
    again = RetainIndex(bucket_size=4)
    again.load(build.root, buckets)
    again.load(compute_cid(b"\xa0"), [[_mh(c) for c in _cids(2, "other")]])  # a second one
    assert again.root == build.root and len(again) == 11 and again.pinned_size == 11
    assert again.remove(cids[0]) and cids[0] not in again
    rebuilt = again.build()
    blocks.update(rebuilt.blocks)
    assert len(_linked(blocks, rebuilt.root)) == 10
    random.Random(0).shuffle(cids)  # order of removal does not matter
    assert sum(again.remove(c) for c in cids) == 8  # the one removed before: False
    assert len(again) == 2


def _odd_cid(i: int) -> CID:
    """A CID of another multihash (blake2b-256): only an index pinned by someone else
    could link one."""
    return CID("base32", 1, "dag-cbor", ("blake2b-256", bytes([i]) * 32))


@settings(max_examples=80, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "add", "remove", "build", "commit", "load"]),
            st.integers(0, 60),
        ),
        max_size=150,
    ),
    size=st.integers(1, 5),
)
def test_the_compact_index_builds_what_the_reference_builds(
    ops: list[tuple[str, int]], size: int
) -> None:
    """The index keeps no Python object per event; the dict-based one it replaced
    (``pulsarcast_ipfs.testing._retainindex_reference``) is the reference: the same
    adds, removes, loads, builds and commits give the same answers and the very same
    blocks, raw links and links of another multihash alike."""
    from pulsarcast_ipfs.core._cid import CID as CoreCID
    from pulsarcast_ipfs.testing._retainindex_reference import ReferenceRetainIndex

    pool = [CoreCID.of(c) for c in _cids(50)] + [CoreCID.of(_odd_cid(i)) for i in range(5)]
    pool += [CoreCID.of(CID("base32", 1, "raw", c.digest)) for c in _cids(6, "raw")]
    new, ref = RetainIndex(bucket_size=size), ReferenceRetainIndex(bucket_size=size)
    pending = None
    for op, i in ops:
        cid = pool[i]
        if op == "add":
            assert new.add(cid) == ref.add(cid)
        elif op == "remove":
            assert new.remove(cid) == ref.remove(cid)
        elif op == "build":
            pending = new.build()
            assert pending == ref.build()
        elif op == "commit" and pending is not None:
            new.commit(pending)
            ref.commit(pending)
            pending = None
        elif op == "load":
            mhs = [bytes(c)[2:] for c in pool[i : i + 4]]
            new.load(pool[i], [mhs[:2], mhs[2:]])
            ref.load(pool[i], [mhs[:2], mhs[2:]])
        assert len(new) == len(ref) and new.changed == ref.changed
        assert new.root == ref.root and new.pinned_size == ref.pinned_size
        assert all((c in new) == (c in ref) for c in pool)
    assert new.build() == ref.build()
