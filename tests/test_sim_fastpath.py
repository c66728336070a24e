"""The hot-path shortcuts behind the scale benchmark change costs, never results.

Each shortcut is checked against the slow path it replaces: the fast CID type
against ``multiformats.CID``, the planned RPC encoder against the generic
dag-cbor encoder, the decode memo against a fresh strict decode.
"""

from __future__ import annotations

import copy
import hashlib
import pickle

import dag_cbor
import multiformats
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarcast_ipfs.core import (
    DescriptorError,
    Event,
    EventDescriptor,
    GroupJoin,
    Heads,
    Join,
    JoinAck,
    Leave,
    Members,
    Ping,
    Pong,
    RequestAck,
    RequestToPublish,
    Rpc,
    TopicDescriptor,
    _dagcbor,
    compute_cid,
    encode_frame,
    encode_rpc,
    format_created,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._descriptors import decode_cached
from pulsarcast_ipfs.core.testing import make_peer_ids
from pulsarcast_ipfs.testing import to_mf

PEER = make_peer_ids(1, seed=5)[0]
TOPIC = TopicDescriptor.new(name="fast", author=PEER, now=1e9)
C = TOPIC.cid


def _plain(data: bytes) -> multiformats.CID:
    digest = b"\x12\x20" + hashlib.sha256(data).digest()
    return multiformats.CID("base32", 1, "dag-cbor", digest)


def test_fast_cid_is_equal_to_the_multiformats_cid() -> None:
    fast, plain = compute_cid(b"x"), _plain(b"x")
    assert type(fast) is CID and not isinstance(fast, multiformats.CID)
    assert fast == plain and plain == fast and not (fast != plain) and not (plain != fast)
    assert CID.of(plain) == fast and hash(CID.of(plain)) == hash(fast)
    assert {CID.of(plain): 1}[fast] == 1
    assert bytes(fast) == bytes(plain) and str(fast) == str(plain)
    assert fast.to_multiformats() == plain and hash(fast.to_multiformats()) == hash(plain)
    assert fast != compute_cid(b"y") and fast != _plain(b"y")
    assert fast != "not a cid"
    decoded = _dagcbor.cid_from_bytes(bytes(plain))
    assert decoded == fast and hash(decoded) == hash(fast)
    assert pickle.loads(pickle.dumps(fast)) == fast
    assert copy.deepcopy(fast) == fast


def test_fast_cid_keeps_the_link_checks() -> None:
    assert _dagcbor.is_dag_cbor_sha256_link(compute_cid(b"x"))
    assert _dagcbor.is_dag_cbor_sha256_link(_plain(b"x"))
    raw_codec = multiformats.CID("base32", 1, "raw", b"\x12\x20" + bytes(32))
    assert not _dagcbor.is_dag_cbor_sha256_link(raw_codec)
    assert not _dagcbor.is_dag_cbor_sha256_link(_dagcbor.cid_from_bytes(bytes(raw_codec)))
    with pytest.raises(_dagcbor.CborError):
        _dagcbor.cid_for_digest(b"short")


def _samples() -> list[Rpc]:
    return [
        Join(topic=C, descriptor=TOPIC.encode()),
        JoinAck(topic=C, ok=False),
        Leave(topic=C),
        Event(topic=C, event=b"\xa0", topic_block=None),
        Event(topic=CID.of(_plain(b"t")), event=b"\xa1" * 300, topic_block=TOPIC.encode()),
        RequestToPublish(
            topic=C,
            descriptor=TOPIC.encode(),
            request_id="r1",
            author=PEER,
            payload=b"p" * 70_000,
            parent=compute_cid(b"x"),
            created=format_created(1e9),
            inject_id=None,
        ),
        RequestAck(topic=C, request_id="r1", ok=True, event=None),
        Ping(nonce=0),
        Pong(nonce=2**63 - 1),
        Heads(topic=C, heads=()),
        Heads(
            topic=C,
            heads=tuple((compute_cid(bytes([i])), 1e9 + i / 7) for i in range(64)),
        ),
        Heads(topic=C, heads=((CID.of(_plain(b"p")), 0.0), (compute_cid(b"q"), -0.0))),
        # optional fields set: some keys of the message are written, some left out
        Join(topic=C, descriptor=TOPIC.encode(), summary=("*", "ups > 3"), want_meta=True),
        Join(topic=C, descriptor=TOPIC.encode(), leaf=True, want_meta=True),
        Members(topic=C, epoch=5, members=(PEER,), summaries=(("*",),)),
        Members(topic=C, epoch=5, members=(PEER,), base=4, removed=()),
        GroupJoin(topic=C, spare=2, filter="ups > 3"),
        RequestToPublish(
            topic=C,
            descriptor=TOPIC.encode(),
            request_id="r2",
            author=PEER,
            payload=b"p",
            created=format_created(1e9),
            attributes={"ups": 3, "user": "u"},
        ),
    ]


@pytest.mark.parametrize("rpc", _samples(), ids=lambda r: r.op)
def test_planned_encoding_is_the_generic_encoding(rpc: Rpc) -> None:
    body = encode_rpc(rpc)
    assert body == _dagcbor.encode(rpc.to_ipld())
    assert body == dag_cbor.encode(to_mf(rpc.to_ipld()))
    frame = encode_frame(rpc)
    assert frame.endswith(body) and len(frame) > len(body)
    # twice: the second encoding of a HEADS entry comes from the memo
    assert encode_rpc(rpc) == body


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.binary(min_size=1, max_size=8),
            st.floats(allow_nan=False, allow_infinity=False, width=64),
        ),
        max_size=64,
    )
)
def test_heads_encoding_matches_for_any_timestamps(entries: list[tuple[bytes, float]]) -> None:
    heads = tuple((compute_cid(b), ts) for b, ts in entries)
    rpc = Heads(topic=C, heads=heads)
    assert encode_rpc(rpc) == _dagcbor.encode(rpc.to_ipld())
    # the same CIDs with other timestamps: the memo must not answer with stale bytes
    moved = Heads(topic=C, heads=tuple((c, ts + 1.0) for c, ts in heads))
    assert encode_rpc(moved) == _dagcbor.encode(moved.to_ipld())


def test_decode_memo_returns_the_strict_decoding() -> None:
    ev = EventDescriptor(
        topic=C, author=PEER, publisher=PEER, payload=b"m", created=format_created(2e9)
    )
    data = ev.encode()
    first = decode_cached(EventDescriptor, data)
    assert first == EventDescriptor.decode(data) and first.encode() == data
    assert decode_cached(EventDescriptor, bytes(data)) is first  # equal bytes, one decoding
    assert decode_cached(EventDescriptor, data, expected_cid=ev.cid) is first
    with pytest.raises(DescriptorError, match="does not match"):
        decode_cached(EventDescriptor, data, expected_cid=C)
    # the same bytes asked as the other kind are decoded (and refused) as that kind
    with pytest.raises(DescriptorError):
        decode_cached(TopicDescriptor, data)
    assert decode_cached(TopicDescriptor, TOPIC.encode(), expected_cid=C) == TOPIC
    # bytes-like input takes the uncached path, with the same result
    assert decode_cached(EventDescriptor, bytearray(data)) == first  # type: ignore[arg-type]


def test_decode_memo_never_remembers_invalid_bytes() -> None:
    bad = TOPIC.encode()[:-1]
    for _ in range(2):
        with pytest.raises(DescriptorError):
            decode_cached(TopicDescriptor, bad)


def test_decode_memo_bound_is_the_processes_to_set() -> None:
    """A sidecar (one node per process) keeps a small memo: the bound holds, 0 keeps
    nothing (and still decodes right), and shrinking drops the oldest at once."""
    from pulsarcast_ipfs.core import _descriptors as d

    events = [
        EventDescriptor(
            topic=C, author=PEER, publisher=PEER, payload=bytes([i]), created=format_created(2e9)
        ).encode()
        for i in range(8)
    ]
    before = d._DECODE_CACHE_SIZE
    try:
        d.set_decode_cache_size(3)
        for data in events:
            decode_cached(EventDescriptor, data)
        assert list(d._decoded)[-3:] == events[-3:] and len(d._decoded) == 3
        d.set_decode_cache_size(1)
        assert list(d._decoded) == events[-1:]
        d.set_decode_cache_size(0)
        assert not d._decoded
        first = decode_cached(EventDescriptor, events[0])
        assert not d._decoded and first == EventDescriptor.decode(events[0])
        with pytest.raises(ValueError, match=">= 0"):
            d.set_decode_cache_size(-1)
    finally:
        d.set_decode_cache_size(before)


def test_a_sidecar_keeps_a_small_decode_memo() -> None:
    from sidecar._config import ConfigError, SidecarConfig

    assert SidecarConfig().decode_cache == 256
    with pytest.raises(ConfigError, match="decode_cache"):
        SidecarConfig(decode_cache=-1)
