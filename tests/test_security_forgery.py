"""Forged, tampered, unauthorised and replayed events are refused at the first hop
(issue 7), with the reason counted in ``event_dropped`` records, and never stored,
forwarded or delivered. Pure core; the real-network version of the unauthorised
case is ``tests/test_e2e_sidecar.py::test_allowed_publishers_and_request_to_publish``.

What v1.0.0 cannot refuse (no signatures): an event that *claims* an allowed
publisher; see docs/security.md."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from pulsarcast_ipfs.core import (
    Deliver,
    Event,
    EventDescriptor,
    FetchBlock,
    Join,
    JoinAck,
    PeerPolicy,
    PulsarcastNode,
    SendRpc,
    StoreBlock,
    TopicDescriptor,
    TopicOptions,
    format_created,
)
from pulsarcast_ipfs.core.testing import make_peer_ids
from pulsarcast_ipfs.records import MetricRecord, RecordKind

T0 = 1_800_000_000.0
AUTHOR, ME, ALLOWED, MALLORY, CHILD = make_peer_ids(5, seed=77)
TOPIC = TopicDescriptor.new(
    name="restricted",
    author=AUTHOR,
    now=T0,
    options=TopicOptions(allowed_publishers=PeerPolicy(enabled=True, peers=(ALLOWED,))),
)


def _subscribed_node() -> PulsarcastNode:
    """ME subscribed to TOPIC with AUTHOR as parent and CHILD below it."""
    node = PulsarcastNode(peer_id=ME, rng=random.Random(1), now=T0)
    node.set_known_peers(T0, [AUTHOR, ALLOWED, MALLORY, CHILD])
    node.subscribe(T0, TOPIC.cid)
    for _ in range(4):
        for out in node.take_outputs():
            if isinstance(out, FetchBlock) and out.cid == TOPIC.cid:
                node.block_fetched(T0, out.cid, TOPIC.encode())
            elif isinstance(out, FetchBlock):
                node.block_fetched(T0, out.cid, None)
            elif isinstance(out, SendRpc) and isinstance(out.rpc, Join):
                node.receive_rpc(T0, out.peer, JoinAck(topic=TOPIC.cid, ok=True))
    node.receive_rpc(T0, CHILD, Join(topic=TOPIC.cid, descriptor=TOPIC.encode()))
    node.take_outputs()
    return node


def _event(publisher: str, payload: bytes, *, topic: TopicDescriptor = TOPIC) -> EventDescriptor:
    return EventDescriptor(
        topic=topic.cid,
        author=publisher,
        publisher=publisher,
        parent=None,
        payload=payload,
        created=format_created(T0 + 1),
    )


def _outcome(outs: Sequence[object]) -> tuple[list[str], bool]:
    """(drop reasons, whether anything was stored, forwarded or delivered)."""
    reasons = [
        str(o.fields["reason"])
        for o in outs
        if isinstance(o, MetricRecord) and o.kind == RecordKind.EVENT_DROPPED
    ]
    acted = any(
        isinstance(o, StoreBlock | Deliver) or (isinstance(o, SendRpc) and isinstance(o.rpc, Event))
        for o in outs
    )
    return reasons, acted


def test_control_an_allowed_event_is_accepted_forwarded_and_delivered() -> None:
    node = _subscribed_node()
    node.receive_rpc(T0 + 1, AUTHOR, Event(topic=TOPIC.cid, event=_event(ALLOWED, b"ok").encode()))
    reasons, acted = _outcome(node.take_outputs())
    assert reasons == [] and acted


def test_unauthorised_publisher_refused() -> None:
    node = _subscribed_node()
    rpc = Event(topic=TOPIC.cid, event=_event(MALLORY, b"spam").encode())
    node.receive_rpc(T0 + 1, MALLORY, rpc)  # straight from the attacker
    node.receive_rpc(T0 + 1, AUTHOR, rpc)  # or relayed by a careless parent
    assert _outcome(node.take_outputs()) == (["not_allowed", "not_allowed"], False)


def test_forged_topic_version_refused() -> None:
    """A 'new version' of the topic by MALLORY that allows MALLORY to publish."""
    forged = TopicDescriptor.new(
        name="restricted",
        author=MALLORY,
        now=T0 + 1,
        parent=TOPIC.cid,
        options=TopicOptions(allowed_publishers=PeerPolicy(enabled=True, peers=(MALLORY,))),
    )
    node = _subscribed_node()
    ev = _event(MALLORY, b"spam", topic=forged)
    node.receive_rpc(
        T0 + 1, AUTHOR, Event(topic=TOPIC.cid, event=ev.encode(), topic_block=forged.encode())
    )
    assert _outcome(node.take_outputs()) == (["wrong_topic"], False)


@pytest.mark.parametrize("where", ["encoding", "publisher", "topic_block"])
def test_tampered_bytes_refused(where: str) -> None:
    node = _subscribed_node()
    good = _event(ALLOWED, b"original").encode()
    if where == "encoding":
        # Bytes changed so that the block is no longer a canonical event descriptor.
        rpc = Event(topic=TOPIC.cid, event=good[:-3] + b"\xff\xff\xff")
        expected = "invalid"
    elif where == "publisher":
        data = good.replace(ALLOWED.encode(), MALLORY.encode())
        rpc = Event(topic=TOPIC.cid, event=data)
        expected = "not_allowed"
    else:
        v2 = TopicDescriptor.new(
            name="restricted",
            author=AUTHOR,
            now=T0 + 1,
            parent=TOPIC.cid,
            options=TopicOptions(allowed_publishers=PeerPolicy(enabled=True, peers=(ALLOWED,))),
        )
        # The event names version v2, but the block sent as v2 is altered (CID mismatch).
        tampered = v2.encode().replace(ALLOWED.encode(), MALLORY.encode())
        ev = _event(MALLORY, b"spam", topic=v2)
        rpc = Event(topic=TOPIC.cid, event=ev.encode(), topic_block=tampered)
        expected = "wrong_topic"
    node.receive_rpc(T0 + 1, AUTHOR, rpc)
    assert _outcome(node.take_outputs()) == ([expected], False)


def test_replayed_event_is_a_duplicate() -> None:
    node = _subscribed_node()
    rpc = Event(topic=TOPIC.cid, event=_event(ALLOWED, b"once").encode())
    node.receive_rpc(T0 + 1, AUTHOR, rpc)
    assert _outcome(node.take_outputs())[1]
    for t in (T0 + 2, T0 + 3600):
        node.receive_rpc(t, AUTHOR, rpc)
        node.receive_rpc(t, CHILD, rpc)
        assert _outcome(node.take_outputs()) == (["duplicate", "duplicate"], False)
