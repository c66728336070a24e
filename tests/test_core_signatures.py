"""Signed events and topic versions (protocolVersion 1.1.0, docs/security.md "Signatures").

Pure core over a :class:`CoreNet` whose nodes have Ed25519 identities and answer
``SignRequest`` outputs with :class:`Ed25519Signer` (as Kubo ``key/sign`` would).
Every attack is sent straight to one subscriber (the first hop) by MALLORY, a
node with its own valid key: the subscriber must drop it with the right
``event_dropped`` reason, and no node may deliver it. Time is stepped by hand.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any, cast

import pytest

from pulsarcast_ipfs.core import (
    SIGNED_VERSION,
    DescriptorError,
    Ed25519Signer,
    Event,
    EventDescriptor,
    Join,
    JoinAck,
    LocalProtocolError,
    NodeConfig,
    OperationDone,
    PeerPolicy,
    Pending,
    PublishResult,
    PulsarcastNode,
    RequestAck,
    RequestToPublish,
    SendRpc,
    SignRequest,
    StoreBlock,
    TopicDescriptor,
    TopicOptions,
    author_statement,
    decode_descriptor,
    format_created,
    verify_signature,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._signqueue import SigningQueue
from pulsarcast_ipfs.core.testing import make_signers
from pulsarcast_ipfs.records import RecordKind
from pulsarcast_ipfs.testing import SigningWorld


@pytest.fixture
def world() -> SigningWorld:
    return SigningWorld()


SUBSCRIBERS = ("allowed", "requester", "sub", "other")


def _everyone_got(w: SigningWorld, topic: CID, cid: CID) -> None:
    for name in SUBSCRIBERS:
        assert w.net.delivered(getattr(w, name), topic).count(cid) == 1, name


def test_signed_delivery_over_a_tree(world: SigningWorld) -> None:
    w = world
    res = w.net.call(w.allowed, "publish", w.restricted, b"hello")
    assert isinstance(res, PublishResult) and res.status == "published"
    assert res.event_cid is not None
    res2 = w.net.call(w.author, "publish", w.open, b"from the author")
    w.net.run_for(5)
    _everyone_got(w, w.restricted, res.event_cid)
    _everyone_got(w, w.open, res2.event_cid)
    ev = decode_descriptor(w.net.store[res.event_cid])
    assert isinstance(ev, EventDescriptor) and ev.protocol_version == SIGNED_VERSION
    assert ev.publisher_signature is not None and ev.author_signature is not None
    assert verify_signature(w.allowed, ev.signing_bytes(), ev.publisher_signature)
    assert verify_signature(w.allowed, ev.author_statement(w.restricted), ev.author_signature)
    topic = decode_descriptor(w.net.store[w.restricted])
    assert isinstance(topic, TopicDescriptor) and topic.signature is not None
    assert verify_signature(w.author, topic.signing_bytes(), topic.signature)
    for peer in w.net.peers:
        reasons = {r.fields["reason"] for r in w.net.records(peer, RecordKind.EVENT_DROPPED)}
        assert not reasons & {"unsigned", "bad_signature", "not_allowed"}, (peer, reasons)


def test_forged_author_refused(world: SigningWorld) -> None:
    w = world
    ev = w.event(
        w.open,
        author=w.other,
        publisher=w.mallory,
        payload=b"in OTHER's name",
        author_key=w.key(w.mallory),
    )
    assert w.attack(w.open, ev) == ["bad_signature"]


def test_forged_publisher_refused(world: SigningWorld) -> None:
    w = world
    ev = w.event(
        w.restricted,
        author=w.allowed,
        publisher=w.allowed,
        payload=b"claims ALLOWED",
        author_key=w.key(w.mallory),
        publisher_key=w.key(w.mallory),
    )
    assert w.attack(w.restricted, ev) == ["bad_signature"]
    only_publisher = w.event(
        w.restricted,
        author=w.mallory,
        publisher=w.allowed,
        payload=b"claims ALLOWED",
        publisher_key=w.key(w.mallory),
    )
    assert w.attack(w.restricted, only_publisher) == ["bad_signature"]


def test_tampered_payload_with_recomputed_cid_refused(world: SigningWorld) -> None:
    w = world
    real = w.event(w.restricted, author=w.allowed, publisher=w.allowed, payload=b"pay 10")
    assert real.author_signature is not None and real.publisher_signature is not None
    tampered = EventDescriptor(
        topic=real.topic,
        author=real.author,
        publisher=real.publisher,
        parents=real.parents,
        clock=real.clock,
        payload=b"pay 1000",
        created=real.created,
        protocol_version=SIGNED_VERSION,
        author_signature=real.author_signature,
        publisher_signature=real.publisher_signature,
    )
    assert tampered.cid != real.cid
    assert w.attack(w.restricted, tampered) == ["bad_signature"]
    # Same payload, re-parented: the publisher's signature covers the parent too.
    reparented = EventDescriptor(
        topic=real.topic,
        author=real.author,
        publisher=real.publisher,
        parents=(real.cid,),
        clock=real.clock + 1,
        payload=real.payload,
        created=real.created,
        protocol_version=SIGNED_VERSION,
        author_signature=real.author_signature,
        publisher_signature=real.publisher_signature,
    )
    assert w.attack(w.restricted, reparented) == ["bad_signature"]


def test_unsigned_event_refused(world: SigningWorld) -> None:
    w = world
    ev = EventDescriptor(
        topic=w.open,
        author=w.mallory,
        publisher=w.mallory,
        payload=b"1.0.0",
        created=format_created(w.net.now),
    )
    assert w.attack(w.open, ev) == ["unsigned"]


def test_replayed_event_is_a_duplicate_and_delivered_once(world: SigningWorld) -> None:
    w = world
    res = w.net.call(w.allowed, "publish", w.restricted, b"once")
    w.net.run_for(5)
    data = w.net.store[res.event_cid]
    w.net.inject(w.mallory, w.sub, Event(topic=w.restricted, event=data, topic_block=None))
    w.net.run_for(3)
    reasons = [
        r.fields["reason"]
        for r in w.net.records(w.sub, RecordKind.EVENT_DROPPED)
        if r.fields.get("peer") == w.mallory
    ]
    assert reasons == ["duplicate"]
    _everyone_got(w, w.restricted, res.event_cid)


def test_correctly_signed_event_of_a_publisher_not_allowed_refused(world: SigningWorld) -> None:
    w = world
    ev = w.event(w.restricted, author=w.mallory, publisher=w.mallory, payload=b"mine")
    assert w.attack(w.restricted, ev) == ["not_allowed"]


def test_topic_version_with_a_bad_signature_refused(world: SigningWorld) -> None:
    w = world
    root = decode_descriptor(w.net.store[w.restricted])
    assert isinstance(root, TopicDescriptor)
    forged = TopicDescriptor.new(
        name=root.name,
        author=w.author,
        now=w.net.now,
        options=TopicOptions(allowed_publishers=PeerPolicy(enabled=False)),
        parent=root.cid,
        links=dict(root.links),
        protocol_version=SIGNED_VERSION,
    )
    forged = forged.with_signature(w.key(w.mallory).sign(forged.signing_bytes()))
    ev = w.event(
        w.restricted, author=w.mallory, publisher=w.mallory, payload=b"x", version=forged.cid
    )
    assert w.attack(w.restricted, ev, block=forged.encode()) == ["bad_signature"]
    assert w.net.nodes[w.sub].topic_state(w.restricted).latest_cid == root.cid
    # A JOIN naming a topic whose descriptor is not signed by its author: refused too.
    fake = TopicDescriptor.new(
        name="fake", author=w.author, now=w.net.now, protocol_version=SIGNED_VERSION
    )
    fake = fake.with_signature(w.key(w.mallory).sign(fake.signing_bytes()))
    before = len(w.net.logs[w.sub].sent)
    w.net.inject(w.mallory, w.sub, Join(topic=fake.cid, descriptor=fake.encode()))
    acks = [s.rpc for s in w.net.logs[w.sub].sent[before:] if isinstance(s.rpc, JoinAck)]
    assert acks == [JoinAck(topic=fake.cid, ok=False)]
    with pytest.raises(LocalProtocolError):
        w.net.nodes[w.sub].topic_state(fake.cid)


def test_a_signed_update_is_learnt_and_applied(world: SigningWorld) -> None:
    w = world
    new = w.net.call(
        w.author,
        "update_topic",
        w.restricted,
        options=TopicOptions(allowed_publishers=PeerPolicy(enabled=True, peers=(w.mallory,))),
    )
    w.net.run_for(5)
    assert w.net.nodes[w.sub].topic_state(w.restricted).latest_cid == new
    ev = w.event(w.restricted, author=w.mallory, publisher=w.mallory, payload=b"ok", version=new)
    w.net.inject(w.mallory, w.sub, Event(topic=w.restricted, event=ev.encode(), topic_block=None))
    w.net.run_for(3)
    _everyone_got(w, w.restricted, ev.cid)


def test_request_to_publish_signature_chain(world: SigningWorld) -> None:
    w = world
    res = w.net.call(w.requester, "publish", w.restricted, b"please publish")
    assert res.status == "requested"
    w.net.run_for(5)
    published = w.net.records(w.author, RecordKind.EVENT_PUBLISHED) + w.net.records(
        w.allowed, RecordKind.EVENT_PUBLISHED
    )
    mine = [r for r in published if r.fields.get("inject_id") == res.inject_id]
    assert len(mine) == 1
    cid = CID.decode(str(mine[0].fields["event"]))
    _everyone_got(w, w.restricted, cid)
    ev = decode_descriptor(w.net.store[cid])
    assert isinstance(ev, EventDescriptor)
    assert ev.author == w.requester and ev.publisher != w.requester
    assert ev.author_signature is not None and ev.publisher_signature is not None
    assert verify_signature(w.requester, ev.author_statement(w.restricted), ev.author_signature)
    assert verify_signature(ev.publisher, ev.signing_bytes(), ev.publisher_signature)


def _request(w: SigningWorld, signature: bytes | None) -> RequestToPublish:
    created = format_created(w.net.now)
    return RequestToPublish(
        topic=w.restricted,
        descriptor=w.net.store[w.restricted],
        request_id=f"{w.requester}/forged",
        author=w.requester,
        payload=b"in REQUESTER's name",
        created=created,
        signature=signature,
    )


@pytest.mark.parametrize("kind", ["forged", "unsigned"])
def test_forged_or_unsigned_request_refused_by_the_publisher(
    world: SigningWorld, kind: str
) -> None:
    w = world
    created = format_created(w.net.now)
    sig = None
    if kind == "forged":
        statement = author_statement(
            tree=w.restricted, author=w.requester, created=created, payload=b"in REQUESTER's name"
        )
        sig = w.key(w.mallory).sign(statement)
    rpc = _request(w, sig)
    before = len(w.net.logs[w.allowed].sent)
    w.net.inject(w.mallory, w.allowed, rpc)
    w.net.run_for(3)
    reasons = [
        r.fields["reason"]
        for r in w.net.records(w.allowed, RecordKind.EVENT_DROPPED)
        if r.fields.get("peer") == w.requester
    ]
    assert reasons == (["bad_signature"] if kind == "forged" else ["unsigned"])
    sent = [s.rpc for s in w.net.logs[w.allowed].sent[before:]]
    assert RequestAck(topic=w.restricted, request_id=rpc.request_id, ok=False) in sent
    assert not any(isinstance(r, Event) for r in sent)
    assert w.net.records(w.allowed, RecordKind.EVENT_PUBLISHED) == []


# -- the asynchronous signing interface, on one node -------------------------------------

T0 = 1_800_000_000.0


def _lone(seed: int = 3) -> tuple[PulsarcastNode, Ed25519Signer]:
    key = make_signers(1, seed=seed)[0]
    node = PulsarcastNode(
        peer_id=key.peer_id,
        config=NodeConfig(require_signatures=True),
        rng=random.Random(seed),
        now=T0,
    )
    return node, key


def _answer(node: PulsarcastNode, key: Ed25519Signer, now: float) -> list[OperationDone]:
    done: list[OperationDone] = []
    for _ in range(20):
        outs = node.take_outputs()
        if not outs:
            break
        for out in outs:
            if isinstance(out, SignRequest):
                node.signed(now, out.request_id, key.sign(out.data))
            elif isinstance(out, OperationDone):
                done.append(out)
    return done


def test_api_commands_wait_for_signatures_and_queue_in_order() -> None:
    node, key = _lone()
    pending = node.create_topic(T0, "t")
    assert isinstance(pending, Pending)
    outs = node.take_outputs()
    requests = [o for o in outs if isinstance(o, SignRequest)]
    assert len(requests) == 1  # the meta topic first; nothing is stored before it is signed
    assert not any(isinstance(o, SendRpc) for o in outs)
    node.signed(T0, requests[0].request_id, key.sign(requests[0].data))
    (done,) = _answer(node, key, T0)
    assert done.op == pending.op and done.error is None and isinstance(done.result, CID)
    topic = done.result
    # Two publishes before any signature: the second chains on the first (FIFO).
    first = node.publish(T0 + 1, topic, b"one")
    second = node.publish(T0 + 1, topic, b"two")
    assert isinstance(first, Pending) and isinstance(second, Pending)
    assert node.pending_signatures == 2
    results = {d.op: d.result for d in _answer(node, key, T0 + 2)}
    r1, r2 = results[first.op], results[second.op]
    assert isinstance(r1, PublishResult) and isinstance(r2, PublishResult)
    assert r1.event_cid is not None and r2.event_cid is not None
    history = node.history(topic)
    assert [c for c, _ in history.events] == [r2.event_cid, r1.event_cid]
    assert history.events[0][1].parents == (r1.event_cid,)


def test_a_failed_or_wrong_signature_fails_the_operation_with_a_clear_error() -> None:
    node, key = _lone()
    assert isinstance(node.create_topic(T0, "t"), Pending)
    (done,) = _answer(node, key, T0)
    assert isinstance(done.result, CID)
    topic = done.result
    pending = node.publish(T0 + 1, topic, b"x")
    assert isinstance(pending, Pending)
    reqs = [o for o in node.take_outputs() if isinstance(o, SignRequest)]
    node.sign_failed(T0 + 1, reqs[0].request_id, "Kubo is unavailable")
    failed = [o for o in node.take_outputs() if isinstance(o, OperationDone)]
    assert failed == [
        OperationDone(op=pending.op, result=None, error="signing failed: Kubo is unavailable")
    ]
    node.signed(T0 + 1, reqs[1].request_id, key.sign(reqs[1].data))  # late answer: ignored
    assert node.pending_signatures == 0
    # A signature by another key (the driver signed with the wrong identity).
    other = make_signers(2, seed=9)[1]
    pending = node.publish(T0 + 2, topic, b"y")
    assert isinstance(pending, Pending)
    reqs = [o for o in node.take_outputs() if isinstance(o, SignRequest)]
    node.signed(T0 + 2, reqs[0].request_id, other.sign(reqs[0].data))
    (bad,) = [o for o in node.take_outputs() if isinstance(o, OperationDone)]
    assert bad.error is not None and "not" in bad.error and bad.result is None
    assert node.history(topic).events == ()  # nothing was published


def _fail_at(node: PulsarcastNode, key: Ed25519Signer, now: float, k: int) -> OperationDone:
    """Answer the operation's signature requests, failing the ``k``-th one."""
    seen = 0
    effects: list[object] = []
    for _ in range(20):
        outs = node.take_outputs()
        effects += [o for o in outs if not isinstance(o, (SignRequest, OperationDone))]
        for out in outs:
            if isinstance(out, OperationDone):
                assert out.error is None or not effects, effects  # a failure did nothing
                return out
            if isinstance(out, SignRequest):
                if seen == k:
                    node.sign_failed(now, out.request_id, "Kubo is unavailable")
                else:
                    node.signed(now, out.request_id, key.sign(out.data))
                seen += 1
    raise AssertionError("the operation never finished")


@pytest.mark.parametrize("operation", ["create", "sub_topic", "update"])
def test_a_signing_failure_part_way_changes_nothing(operation: str) -> None:
    """Every signature an operation needs is made before any state changes: failing
    any one of them leaves no topic without its announcement, no sub-topic missing
    from its parent's links, no half-made version."""
    steps = 0
    while True:
        node, key = _lone()
        assert isinstance(node.create_topic(T0, "t"), Pending)
        (done,) = _answer(node, key, T0)
        topic = done.result
        assert isinstance(topic, CID)
        before_memory = node.memory_usage
        before_state = node.topic_state(topic)
        if operation == "create":
            pending = node.create_topic(T0 + 1, "other")
        elif operation == "sub_topic":
            pending = node.create_topic(T0 + 1, "child", parent=topic)
        else:
            pending = node.update_topic(
                T0 + 1, topic, options=TopicOptions(allowed_publishers=PeerPolicy(enabled=True))
            )
        assert isinstance(pending, Pending)
        result = _fail_at(node, key, T0 + 1, steps)
        if result.error is None:
            break  # ``steps`` signatures were all it needed
        assert result.error == "signing failed: Kubo is unavailable"
        assert node.memory_usage == before_memory
        assert node.topic_state(topic) == before_state
        assert node.pending_signatures == 0
        steps += 1
    # signatures: a topic version 1, an announcement 2 (author and publisher)
    assert steps == {"create": 4, "sub_topic": 6, "update": 3}[operation]


def test_requests_queued_behind_signatures_still_make_one_chain() -> None:
    """Two requests to publish that arrive while the author's signatures are pending
    are published one after the other: the second's parent is the first (LAST_SEEN
    read when the publication runs, not when the request came)."""
    node, key = _lone()
    opts = TopicOptions(
        allowed_publishers=PeerPolicy(enabled=True), request_to_publish=PeerPolicy(enabled=True)
    )
    assert isinstance(node.create_topic(T0, "ordered", options=opts), Pending)
    blocks: dict[CID, bytes] = {}

    def settle(now: float) -> list[OperationDone]:
        done: list[OperationDone] = []
        for _ in range(50):
            outs = node.take_outputs()
            if not outs:
                break
            for out in outs:
                if isinstance(out, SignRequest):
                    node.signed(now, out.request_id, key.sign(out.data))
                elif isinstance(out, OperationDone):
                    done.append(out)
                elif isinstance(out, StoreBlock):
                    blocks[out.cid] = out.data
        return done

    (done,) = settle(T0)
    topic = done.result
    assert isinstance(topic, CID)
    requesters = make_signers(3, seed=21)[1:]
    for i, r in enumerate(requesters):
        created = format_created(T0 + 1)
        payload = b"request %d" % i
        statement = author_statement(tree=topic, author=r.peer_id, created=created, payload=payload)
        node.receive_rpc(
            T0 + 1,
            r.peer_id,
            RequestToPublish(
                topic=topic,
                descriptor=blocks[topic],
                request_id=f"{r.peer_id}/{i}",
                author=r.peer_id,
                payload=payload,
                created=created,
                signature=r.sign(statement),
            ),
        )
    assert node.pending_signatures == 2  # both waiting, nothing published yet
    settle(T0 + 2)
    events = [
        ev
        for data in blocks.values()
        if isinstance(ev := decode_descriptor(data), EventDescriptor) and ev.topic == topic
    ]
    assert sorted(ev.author for ev in events) == sorted(r.peer_id for r in requesters)
    first, second = sorted(events, key=lambda ev: ev.clock)
    assert first.parents == () and second.parents == (first.cid,)
    assert [c for c, _ in node.history(topic).events] == [second.cid, first.cid]


def test_descriptor_shapes_per_version() -> None:
    key = make_signers(1, seed=4)[0]
    draft = TopicDescriptor.new(
        name="t", author=key.peer_id, now=T0, protocol_version=SIGNED_VERSION
    )
    assert draft.is_draft
    signed = draft.with_signature(key.sign(draft.signing_bytes()))
    assert decode_descriptor(signed.encode()) == signed
    assert signed.signing_bytes() == draft.encode()
    with pytest.raises(DescriptorError):
        decode_descriptor(draft.encode())  # a draft never decodes (signature missing)
    with pytest.raises(LocalProtocolError):
        TopicDescriptor.new(name="t", author=key.peer_id, now=T0).with_signature(b"\0" * 64)
    with pytest.raises(LocalProtocolError):
        draft.with_signature(b"short")


def test_a_checked_event_is_checked_again_for_another_tree(world: SigningWorld) -> None:
    """The process-wide memo of events whose signatures checked out is keyed by the
    event's CID *and* the tree: the author's statement names the tree, so the same
    bytes offered for another tree are checked afresh and refused (with the memo
    keyed by the CID alone, the second answer would be ``None``)."""
    w = world
    queue = SigningQueue(
        peer_id=w.sub, require_signatures=True, delegate_margin=60.0, emit=lambda _: None, now=0.0
    )
    ev = w.event(w.open, author=w.author, publisher=w.author, payload=b"checked once per tree")
    home = cast(Any, SimpleNamespace(key=w.open))
    other = cast(Any, SimpleNamespace(key=w.restricted))
    assert queue.event_refused(home, ev) is None
    assert queue.event_refused(home, ev) is None  # from the memo
    assert queue.event_refused(other, ev) == "bad_signature"
    forged = w.event(
        w.open,
        author=w.author,
        publisher=w.author,
        payload=b"checked once per tree",
        author_key=w.key(w.mallory),
    )
    assert forged.cid != ev.cid
    assert queue.event_refused(home, forged) == "bad_signature"
