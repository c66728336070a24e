"""Acknowledgement levels in the core (wire 2.9, core/_acks.py): EVENT ``ack`` from a
publisher that waits, STORED from the nodes that hold the event, the outbox offered
again until enough of them do."""

from __future__ import annotations

import pytest

from pulsarcast_ipfs.core import (
    Event,
    LocalProtocolError,
    RemoteProtocolError,
    Stored,
    _dagcbor,
    decode_rpc,
    encode_rpc,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core.testing import CoreNet


def _hold_all(net: CoreNet, peers: list[str]) -> None:
    """What the sidecar does once Kubo stored and pinned: tell each node its retained
    blocks are held."""
    for p in peers:
        cids = [s.cid for s in net.logs[p].stored if s.retain]
        if cids:
            net.call(p, "blocks_held", cids)


def _stored_sent(net: CoreNet, peer: str) -> list[tuple[str, Stored]]:
    return [(s.peer, s.rpc) for s in net.logs[peer].sent if isinstance(s.rpc, Stored)]


def _net(n: int) -> tuple[CoreNet, CID, str]:
    net = CoreNet(n, seed=5)
    author = net.peers[0]
    topic = net.call(author, "create_topic", "news")
    net.run_for(0.5)
    return net, topic, author


def test_stored_codec_round_trip_and_bounds() -> None:
    cid = _dagcbor.sha256_cid(b"x")
    msg = Stored(topic=cid, event=cid)
    assert decode_rpc(encode_rpc(msg)) == msg
    assert len(encode_rpc(msg)) <= 110  # one small message per event per holder
    ev = Event(topic=cid, event=b"e", ack=True)
    assert decode_rpc(encode_rpc(ev)) == ev
    plain = Event(topic=cid, event=b"e")
    assert "ack" not in plain.to_ipld()  # left out: an EVENT without it keeps its bytes
    with pytest.raises(LocalProtocolError):
        Event(topic=cid, event=b"e", ack=False)  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        Stored(topic=cid, event="bafy")  # type: ignore[arg-type]
    # From the network: only RemoteProtocolError.
    for bad in (
        {"op": "STORED", "topic": cid},
        {"op": "STORED", "topic": cid, "event": b"x"},
        {"op": "STORED", "topic": cid, "event": cid, "extra": 1},
        {
            "op": "EVENT",
            "topic": cid,
            "event": b"e",
            "topicBlock": None,
            "pushed": None,
            "ack": False,
        },
        {
            "op": "EVENT",
            "topic": cid,
            "event": b"e",
            "topicBlock": None,
            "pushed": None,
            "ack": None,
        },
    ):
        with pytest.raises(RemoteProtocolError):
            decode_rpc(_dagcbor.encode(bad))


def test_publish_ack_1_is_held_by_a_subscriber_and_the_outbox_empties() -> None:
    net, topic, author = _net(3)
    subs = net.peers[1:]
    for p in subs:
        net.call(p, "subscribe", topic)
    net.run_for(3)
    res = net.call(author, "publish", topic, b"hello", ack=1)
    cid = res.event_cid
    node = net.nodes[author]
    assert node.holders(cid) == ()  # waiting
    net.run_for(0.2)
    # Delivered without waiting for any holder: dissemination is not held back.
    assert all(cid in net.delivered(p) for p in subs)
    sent = [s.rpc for s in net.logs[author].sent if isinstance(s.rpc, Event)]
    assert sent and all(e.ack is True for e in sent)
    # Nobody said STORED yet: the blocks are not held (stored and pinned) yet.
    assert node.acknowledged(cid) is None
    # Their blocks were stored urgently (a publisher waits).
    assert any(s.urgent for p in subs for s in net.logs[p].stored if s.cid == cid)
    _hold_all(net, subs)
    net.run_for(0.2)
    holders = node.acknowledged(cid)
    assert holders is not None and set(holders) <= set(subs) and holders
    assert node.holders(cid) is None and node.outbox == {}
    # Each holder answered once.
    for p in subs:
        assert len([r for _, r in _stored_sent(net, p) if r.event == cid]) <= 1


def test_ack_local_sends_no_ack_flag_and_no_stored() -> None:
    net, topic, author = _net(3)
    for p in net.peers[1:]:
        net.call(p, "subscribe", topic)
    net.run_for(3)
    net.call(author, "publish", topic, b"hello")
    net.run_for(0.5)
    _hold_all(net, net.peers[1:])
    net.run_for(0.5)
    assert all(s.rpc.ack is None for s in net.logs[author].sent if isinstance(s.rpc, Event))
    assert not any(_stored_sent(net, p) for p in net.peers)
    assert net.nodes[author].outbox == {}


def test_no_holder_keeps_offering_until_one_appears() -> None:
    net, topic, author = _net(2)
    other = net.peers[1]
    res = net.call(author, "publish", topic, b"alone", ack=1)
    cid = res.event_cid
    net.run_for(5)
    assert net.nodes[author].outbox == {cid: (1, ())}  # still waiting, not dropped
    net.call(other, "subscribe", topic)
    net.run_for(40)  # the next offer (backed off to at most ack_retry_max)
    _hold_all(net, [other])
    net.run_for(40)
    assert net.nodes[author].acknowledged(cid) == (other,)
    assert net.nodes[author].outbox == {}


def test_a_relay_forwards_no_ack_and_a_non_publisher_is_not_answered() -> None:
    net, topic, author = _net(3)
    sub = net.peers[1]
    net.call(sub, "subscribe", topic)
    net.run_for(3)
    res = net.call(author, "publish", topic, b"x")
    net.run_for(0.5)
    _hold_all(net, [sub])
    ev_bytes = next(s.rpc.event for s in net.logs[author].sent if isinstance(s.rpc, Event))
    # A third peer claims to be asking for the author's event: no STORED to it.
    stranger = net.peers[2]
    net.inject(stranger, sub, Event(topic=topic, event=ev_bytes, ack=True))
    net.run_for(0.5)
    assert not [r for to, r in _stored_sent(net, sub) if to == stranger]
    assert res.event_cid is not None


def test_stored_from_a_peer_for_an_unknown_event_changes_nothing() -> None:
    net, topic, author = _net(2)
    other = net.peers[1]
    res = net.call(author, "publish", topic, b"x", ack=2)
    bogus = _dagcbor.sha256_cid(b"nothing")
    net.inject(other, author, Stored(topic=topic, event=bogus))
    net.inject(other, author, Stored(topic=topic, event=res.event_cid))
    net.inject(other, author, Stored(topic=topic, event=res.event_cid))  # counted once
    assert net.nodes[author].outbox == {res.event_cid: (2, (other,))}


@pytest.mark.parametrize("bad", [-1, 65, 10**9, True, "1", 1.5])
def test_bad_ack_levels_are_refused(bad: object) -> None:
    net, topic, author = _net(1)
    with pytest.raises(LocalProtocolError, match="ack must be"):
        net.call(author, "publish", topic, b"x", ack=bad)


def test_the_first_send_asks_needed_plus_one_peers_and_an_offer_again_asks_all() -> None:
    net, topic, author = _net(6)
    subs = net.peers[1:]
    for p in subs:
        net.call(p, "subscribe", topic)
    net.run_for(5)
    res = net.call(author, "publish", topic, b"x", ack=1)
    first = [s for s in net.logs[author].sent if isinstance(s.rpc, Event)]
    asked = {s.peer for s in first if s.rpc.ack}
    assert len(first) == len(subs)  # sent to every subscriber at once, as at local
    assert len(asked) == 2  # ack=1: two of them asked (one spare)
    net.run_for(0.2)
    _hold_all(net, subs)
    net.run_for(0.5)
    holders = net.nodes[author].acknowledged(res.event_cid)
    assert holders is not None and set(holders) <= asked
    # Only the asked answered: the others stored without STORED.
    answered = {p for p in subs if _stored_sent(net, p)}
    assert answered == asked and set(holders) <= answered
    # Offered again, every peer is asked: here the two not asked at first are the
    # only ones that hold the event.
    before = len(net.logs[author].sent)
    res2 = net.call(author, "publish", topic, b"y", ack=2)
    first2 = [s for s in net.logs[author].sent[before:] if isinstance(s.rpc, Event)]
    asked2 = {s.peer for s in first2 if s.rpc.ack}
    assert len(asked2) == 3
    net.run_for(0.2)
    others = [p for p in subs if p not in asked2]
    _hold_all(net, others)
    net.run_for(0.5)
    assert net.nodes[author].holders(res2.event_cid) == ()  # not asked: no answer
    net.run_for(3)  # offered again, every subscriber asked
    assert set(net.nodes[author].acknowledged(res2.event_cid) or ()) == set(others)
