"""Delegated signing keys (protocolVersion 2.2.0, docs/security.md "Delegated signing keys").

The same six signing nodes as tests/test_core_signatures.py. A node given a
delegated key signs its own events at once (no ``SignRequest``); every hop checks
the delegation against the publisher's peer ID, its expiry against the event's
``created``, and both signatures against the delegated key. Forgeries are sent
straight to one subscriber by MALLORY, as there.
"""

from __future__ import annotations

import dataclasses

import pytest

from pulsarcast_ipfs.core import (
    DELEGATED_VERSION,
    ONE_SIGNATURE_VERSION,
    SIGNED_VERSION,
    DelegateKey,
    Delegation,
    DescriptorError,
    Ed25519Signer,
    Event,
    EventDescriptor,
    LocalProtocolError,
    Pending,
    PublishResult,
    decode_descriptor,
    format_created,
    verify_delegation,
)
from pulsarcast_ipfs.core.testing import CoreNet
from pulsarcast_ipfs.testing import (
    DELEGATE_SEED_A,
    DELEGATE_SEED_B,
    SigningWorld,
    delegate,
    delegated_event,
)


@pytest.fixture
def world() -> SigningWorld:
    return SigningWorld()


class _Counting:
    """A node's test signer (its "Kubo key/sign") that counts what it signs."""

    def __init__(self, inner: Ed25519Signer) -> None:
        self.inner, self.peer_id, self.count = inner, inner.peer_id, 0

    def sign(self, data: bytes) -> bytes:
        self.count += 1
        return self.inner.sign(data)


def _sign_requests(w: SigningWorld, peer: str) -> int:
    signer = w.net.signers[peer]
    if not isinstance(signer, _Counting):
        signer = w.net.signers[peer] = _Counting(signer)  # type: ignore[assignment]
    return signer.count


def test_a_delegated_key_signs_at_once_and_every_hop_accepts(world: SigningWorld) -> None:
    w = world
    node = w.net.nodes[w.allowed]
    node.use_delegate(w.net.now, delegate(w.net, w.allowed))
    before = _sign_requests(w, w.allowed)
    res = node.publish(w.net.now, w.restricted, b"fast")
    # Still an operation of the signing queue (order kept), but finished at once.
    assert isinstance(res, Pending)
    w.net.run_for(5)
    assert _sign_requests(w, w.allowed) == before, "a delegated publish asked Kubo to sign"
    done = w.net.done[res.op]
    assert isinstance(done.result, PublishResult) and done.result.event_cid is not None
    cid = done.result.event_cid
    for peer in (w.requester, w.sub, w.other):
        assert w.net.delivered(peer, w.restricted).count(cid) == 1, peer
    ev = decode_descriptor(w.net.store[cid])
    assert isinstance(ev, EventDescriptor)
    # One signature for both roles (2.3.0: tests/test_core_one_signature.py).
    assert ev.protocol_version == ONE_SIGNATURE_VERSION and ev.delegation is not None
    assert verify_delegation(w.allowed, ev.delegation)


def test_without_a_delegate_or_near_expiry_the_node_signs_through_the_driver(
    world: SigningWorld,
) -> None:
    w = world
    node = w.net.nodes[w.allowed]
    # Expires within delegate_margin (60 s) of now: not used.
    node.use_delegate(w.net.now, delegate(w.net, w.allowed, ttl=30))
    before = _sign_requests(w, w.allowed)
    res = w.net.call(w.allowed, "publish", w.restricted, b"slow path")
    assert isinstance(res, PublishResult) and res.event_cid is not None
    assert _sign_requests(w, w.allowed) == before + 2
    ev = decode_descriptor(w.net.store[res.event_cid])
    assert isinstance(ev, EventDescriptor) and ev.protocol_version == SIGNED_VERSION
    node.use_delegate(w.net.now, None)
    res = w.net.call(w.allowed, "publish", w.restricted, b"slow again")
    assert _sign_requests(w, w.allowed) == before + 4


def test_a_request_to_publish_keeps_the_requesters_own_signature(world: SigningWorld) -> None:
    w = world
    w.net.nodes[w.allowed].use_delegate(w.net.now, delegate(w.net, w.allowed))
    w.net.nodes[w.requester].use_delegate(
        w.net.now, delegate(w.net, w.requester, seed=DELEGATE_SEED_B)
    )
    w.net.call(w.requester, "publish", w.restricted, b"please")
    w.net.run_for(5)
    got = [
        e
        for e in (decode_descriptor(w.net.store[c]) for c in w.net.delivered(w.sub, w.restricted))
        if isinstance(e, EventDescriptor) and e.payload == b"please"
    ]
    assert len(got) == 1
    assert got[0].protocol_version == SIGNED_VERSION and got[0].delegation is None


def test_use_delegate_refuses_another_peers_or_an_expired_delegation(world: SigningWorld) -> None:
    w = world
    node = w.net.nodes[w.allowed]
    with pytest.raises(LocalProtocolError, match="not signed by"):
        node.use_delegate(w.net.now, delegate(w.net, w.mallory))
    with pytest.raises(LocalProtocolError, match="expired"):
        node.use_delegate(w.net.now, delegate(w.net, w.allowed, ttl=-5))


def test_forgeries_with_delegations_are_refused(world: SigningWorld) -> None:
    w = world
    mine = delegate(w.net, w.mallory)
    # Control: MALLORY's own delegated event in the open topic is accepted by all.
    own = delegated_event(w, w.mallory, mine, payload=b"own")
    w.net.inject(w.mallory, w.sub, Event(topic=w.open, event=own.encode(), topic_block=None))
    w.net.run_for(3)
    assert all(own.cid in w.net.delivered(p, w.open) for p in (w.sub, w.other, w.allowed))

    # MALLORY's delegation presented as ALLOWED's: the delegation does not verify.
    assert w.attack(w.open, delegated_event(w, w.allowed, mine, payload=b"as allowed")) == [
        "bad_signature"
    ]
    # ALLOWED's real delegation, but signatures by another key.
    real = delegate(w.net, w.allowed)
    other = DelegateKey(DELEGATE_SEED_B)
    ev = delegated_event(w, w.allowed, real, payload=b"wrong key")
    forged = dataclasses.replace(
        ev,
        publisher_signature=other.sign(ev.signing_bytes()),
        author_signature=other.sign(ev.author_statement(w.open)),
    )
    assert w.attack(w.open, forged) == ["bad_signature"]
    # An event created after its delegation expired.
    late = delegated_event(w, w.mallory, mine, payload=b"late", created=w.net.now + 7200)
    assert w.attack(w.open, late) == ["delegation_expired"]


def test_delegation_shapes_on_the_wire() -> None:
    key = DelegateKey(DELEGATE_SEED_A)
    d = Delegation(key=key.public_key, expires=2_000_000_000, signature=bytes(64))
    net = CoreNet(2, seed=3, signatures=True)
    author = net.peers[0]
    topic = net.call(author, "create_topic", "t")
    draft = EventDescriptor(
        topic=topic,
        author=author,
        publisher=author,
        payload=b"x",
        created=format_created(net.now),
        protocol_version=DELEGATED_VERSION,
    )
    ev = draft.with_signatures(author=bytes(64), publisher=bytes(64), delegation=d)
    assert decode_descriptor(ev.encode()) == ev
    # A 2.2.0 event without its delegation, or 2.1.0 with one, or author != publisher.
    with pytest.raises(LocalProtocolError, match="delegation"):
        draft.with_signatures(author=bytes(64), publisher=bytes(64))
    with pytest.raises(LocalProtocolError, match="no delegation"):
        dataclasses.replace(draft, protocol_version=SIGNED_VERSION).with_signatures(
            author=bytes(64), publisher=bytes(64), delegation=d
        )
    with pytest.raises(LocalProtocolError, match="author == publisher"):
        dataclasses.replace(draft, publisher=net.peers[1])
    # Decoding: bad key size and extra fields are DescriptorError with the field named.
    raw = ev.to_ipld()
    from pulsarcast_ipfs.core import _dagcbor

    raw["signatures"]["delegation"]["key"] = b"short"
    with pytest.raises(DescriptorError, match=r"delegation\.key"):
        EventDescriptor.decode(_dagcbor.encode(raw))
    raw["signatures"]["delegation"] = {**d.to_ipld(), "extra": 1}
    with pytest.raises(DescriptorError, match="unknown fields"):
        EventDescriptor.decode(_dagcbor.encode(raw))
    # A topic descriptor never has the delegated version.
    with pytest.raises(LocalProtocolError):
        dataclasses.replace(decode_descriptor(net.store[topic]), protocol_version=DELEGATED_VERSION)  # type: ignore[type-var]
