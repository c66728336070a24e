"""One signature for an event whose author is its publisher (protocolVersion 2.3.0 /
2.3.1, docs/security.md "One signature").

A node with a delegated key signs its own events once, over ``{tree, event}``
(:meth:`EventDescriptor.one_statement`), instead of twice (2.2.0: the author's
statement and the publisher's signing bytes): one Ed25519 verification per hop
instead of two. Every hop checks the delegation, its expiry and that one
signature; 2.2.x events are still accepted; the bytes and CIDs of the older
versions are unchanged. The same six signing nodes as tests/test_core_signatures.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from pulsarcast_ipfs.core import (
    DELEGATED_ATTRIBUTES_VERSION,
    DELEGATED_VERSION,
    ONE_SIGNATURE_ATTRIBUTES_VERSION,
    ONE_SIGNATURE_VERSION,
    DelegateKey,
    Delegation,
    DescriptorError,
    Event,
    EventDescriptor,
    LocalProtocolError,
    PublishResult,
    TopicDescriptor,
    _dagcbor,
    cid_str,
    decode_descriptor,
    event_version,
    format_created,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core.testing import make_peer_ids
from pulsarcast_ipfs.testing import DELEGATE_SEED_B, SigningWorld, delegate, delegated_event

P = make_peer_ids(3, seed=15)
TOPIC = TopicDescriptor.new(name="t", author=P[0], now=1_767_225_600.0)
D = Delegation(key=b"k" * 32, expires=2_000_000_000, signature=b"s" * 64)
BASE = {
    "topic": TOPIC.cid,
    "author": P[1],
    "publisher": P[1],
    "payload": b"hello",
    "created": format_created(1_767_225_600.5),
}


@pytest.fixture
def world() -> SigningWorld:
    return SigningWorld()


def _one_signed(
    w: SigningWorld,
    publisher: str,
    key: DelegateKey,
    *,
    payload: bytes,
    tree: CID | None = None,
    created: float | None = None,
) -> EventDescriptor:
    """``publisher``'s 2.3.0 event in the open topic, its one signature by ``key``
    over the statement for ``tree`` (default: the open topic's tree)."""
    assert key.delegation is not None
    draft = EventDescriptor(
        topic=w.open,
        author=publisher,
        publisher=publisher,
        payload=payload,
        created=format_created(w.net.now if created is None else created),
        protocol_version=ONE_SIGNATURE_VERSION,
    )
    statement = draft.one_statement(w.open if tree is None else tree)
    return draft.with_one_signature(signature=key.sign(statement), delegation=key.delegation)


def test_older_versions_keep_their_bytes_and_cids() -> None:
    """2.2.0 / 2.2.1 CIDs computed by the code before 2.3.0 existed (same inputs)."""
    e = EventDescriptor(
        **BASE,
        protocol_version=DELEGATED_VERSION,
        author_signature=b"a" * 64,
        publisher_signature=b"p" * 64,
        delegation=D,
    )
    f = dataclasses.replace(
        e, protocol_version=DELEGATED_ATTRIBUTES_VERSION, attributes={"ups": 12, "user": "alice"}
    )
    assert cid_str(e.cid) == "bafyreief4jll7g3eayvxngdyvuqlja74sfw74j7hsc7fi7fbuw3eddvrqu"
    assert cid_str(f.cid) == "bafyreiganb62xjxn2p4toqv6lxthj7irfngg3xs2zvtiokanlnssy6syha"
    assert set(_dagcbor.decode(e.encode())["signatures"]) == {"author", "publisher", "delegation"}


def test_a_delegated_publish_carries_one_signature_and_every_hop_accepts(
    world: SigningWorld,
) -> None:
    w = world
    node = w.net.nodes[w.allowed]
    node.use_delegate(w.net.now, delegate(w.net, w.allowed))
    res = w.net.call(w.allowed, "publish", w.restricted, b"one")
    assert isinstance(res, PublishResult) and res.event_cid is not None
    res2 = w.net.call(w.allowed, "publish", w.restricted, b"two", attributes={"ups": 3})
    assert isinstance(res2, PublishResult) and res2.event_cid is not None
    w.net.run_for(5)
    for cid, version in (
        (res.event_cid, ONE_SIGNATURE_VERSION),
        (res2.event_cid, ONE_SIGNATURE_ATTRIBUTES_VERSION),
    ):
        for peer in (w.requester, w.sub, w.other):
            assert w.net.delivered(peer, w.restricted).count(cid) == 1, peer
        ev = decode_descriptor(w.net.store[cid])
        assert isinstance(ev, EventDescriptor) and ev.protocol_version == version
        assert ev.author_signature is None and ev.delegation is not None
        assert set(_dagcbor.decode(ev.encode())["signatures"]) == {"publisher", "delegation"}


def test_2_2_0_events_are_still_accepted(world: SigningWorld) -> None:
    w = world
    old = delegated_event(w, w.mallory, delegate(w.net, w.mallory), payload=b"from a 2.2 node")
    assert old.protocol_version == DELEGATED_VERSION
    w.net.inject(w.mallory, w.sub, Event(topic=w.open, event=old.encode(), topic_block=None))
    w.net.run_for(3)
    for peer in (w.sub, w.other, w.allowed):
        assert old.cid in w.net.delivered(peer, w.open), peer


def test_one_signature_forgeries_are_refused(world: SigningWorld) -> None:
    """Planted: with the ONE_SIGNATURE_VERSIONS branch of ``_event_refused`` returning
    None at once, every forgery below was delivered (the test failed); with the tree
    left out of ``one_statement``, the other tree's signature was accepted."""
    w = world
    mine = delegate(w.net, w.mallory)
    # Control: MALLORY's own 2.3.0 event in the open topic is accepted by all.
    own = _one_signed(w, w.mallory, mine, payload=b"own")
    w.net.inject(w.mallory, w.sub, Event(topic=w.open, event=own.encode(), topic_block=None))
    w.net.run_for(3)
    assert all(own.cid in w.net.delivered(p, w.open) for p in (w.sub, w.other, w.allowed))

    # MALLORY's delegation presented as ALLOWED's.
    assert w.attack(w.open, _one_signed(w, w.allowed, mine, payload=b"as allowed")) == [
        "bad_signature"
    ]
    real = delegate(w.net, w.allowed)
    ev = _one_signed(w, w.allowed, real, payload=b"wrong key")
    # ALLOWED's real delegation, the signature by another key.
    other = DelegateKey(DELEGATE_SEED_B)
    forged = dataclasses.replace(ev, publisher_signature=other.sign(ev.one_statement(w.open)))
    assert w.attack(w.open, forged) == ["bad_signature"]
    # A signature made for another tree (the statement names the tree).
    assert w.attack(
        w.open, _one_signed(w, w.mallory, mine, payload=b"elsewhere", tree=w.restricted)
    ) == ["bad_signature"]
    # A 2.2-style publisher signature (over the signing bytes alone) is no 2.3 signature.
    key_sig = mine.sign(own.signing_bytes())
    assert w.attack(w.open, dataclasses.replace(own, publisher_signature=key_sig)) == [
        "bad_signature"
    ]
    # The payload changed under a valid signature.
    assert w.attack(w.open, dataclasses.replace(own, payload=b"tampered")) == ["bad_signature"]
    # Created after its delegation expired.
    late = _one_signed(w, w.mallory, mine, payload=b"late", created=w.net.now + 7200)
    assert w.attack(w.open, late) == ["delegation_expired"]


def test_one_signature_shapes() -> None:
    assert event_version(signed=True, attributes=False, delegated=True, one_signature=True) == (
        "2.3.0"
    )
    assert event_version(signed=True, attributes=True, delegated=True, one_signature=True) == (
        "2.3.1"
    )
    with pytest.raises(LocalProtocolError, match="delegated"):
        event_version(signed=True, attributes=False, one_signature=True)
    draft = EventDescriptor(**BASE, protocol_version=ONE_SIGNATURE_VERSION)
    assert draft.is_draft
    ev = draft.with_one_signature(signature=b"p" * 64, delegation=D)
    assert decode_descriptor(ev.encode(), expected_cid=ev.cid) == ev
    # An author signature, no delegation, author != publisher: refused.
    with pytest.raises(LocalProtocolError, match="one signature"):
        dataclasses.replace(ev, author_signature=b"a" * 64)
    with pytest.raises(LocalProtocolError, match="delegation"):
        dataclasses.replace(ev, delegation=None)
    with pytest.raises(LocalProtocolError, match="author == publisher"):
        dataclasses.replace(ev, publisher=P[2])
    # On the wire: an extra author signature, or a missing delegation, is named.
    raw = ev.to_ipld()
    raw["signatures"]["author"] = b"a" * 64
    with pytest.raises(DescriptorError, match=r"unknown fields \['author'\]"):
        EventDescriptor.decode(_dagcbor.encode(raw))
    raw = ev.to_ipld()
    del raw["signatures"]["delegation"]
    with pytest.raises(DescriptorError, match=r"missing fields \['delegation'\]"):
        EventDescriptor.decode(_dagcbor.encode(raw))
    # The statement: {tree, event: signing bytes}, a key set of its own.
    assert _dagcbor.decode(ev.one_statement(TOPIC.cid)) == {
        "tree": TOPIC.cid,
        "event": ev.signing_bytes(),
    }
