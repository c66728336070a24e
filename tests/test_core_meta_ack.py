"""The meta-topic descriptor in JOIN_ACK (wire 2.7, docs/protocol-notes.md).

A subscriber follows its topic's meta topic, so it needs the meta topic's descriptor.
Its JOIN asks for it (``wantMeta``) and the node that accepts it sends it in the
JOIN_ACK (``meta``); the bitswap fetch waits ``META_ACK_WAIT × join_timeout`` and is
made only if nothing brought the block, at once if the JOIN_ACK came without it. A
``meta`` that is not the block the topic links is dropped and changes nothing else.
"""

from __future__ import annotations

import pytest

from pulsarcast_ipfs.core import (
    Join,
    JoinAck,
    LocalProtocolError,
    NodeConfig,
    RemoteProtocolError,
    TopicDescriptor,
    TopicOptions,
    _dagcbor,
    decode_rpc,
    encode_rpc,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._topics import META_ACK_WAIT
from pulsarcast_ipfs.core.testing import CoreNet
from pulsarcast_ipfs.records import RecordKind
from pulsarcast_ipfs.testing import FetchLog


def _topic(net: CoreNet, name: str = "news") -> tuple[CID, CID, str]:
    author = net.peers[0]
    topic = net.call(author, "create_topic", name)
    net.run_for(0.5)
    meta = TopicDescriptor.decode(net.store[topic]).meta
    assert meta is not None
    return topic, meta, author


def _subscribe_unanswered(net: CoreNet, sub: str, topic: CID) -> None:
    """``sub`` subscribes; the JOIN_ACKs to it are lost, so that a test can send its own."""

    def no_ack_to_sub(a: str, b: str, rpc: object) -> bool:
        return isinstance(rpc, JoinAck) and b == sub and rpc.topic == topic

    net.drop_if = no_ack_to_sub
    net.call(sub, "subscribe", topic)
    net.run_for(0.2)


def _joins(net: CoreNet) -> list[tuple[str, Join]]:
    return [(p, s.rpc) for p in net.peers for s in net.logs[p].sent if isinstance(s.rpc, Join)]


def _acks(net: CoreNet) -> list[tuple[str, JoinAck]]:
    return [
        (s.peer, s.rpc) for p in net.peers for s in net.logs[p].sent if isinstance(s.rpc, JoinAck)
    ]


def test_subscribers_get_the_meta_descriptor_from_the_join_ack_not_by_a_fetch() -> None:
    net = FetchLog(8, seed=3)
    topic, meta, author = _topic(net)
    members = net.peers[1:]
    for p in members:
        net.call(p, "subscribe", topic)
    net.run_for(3)
    # Every subscriber fetched the topic descriptor (it subscribed by CID) and
    # nothing else: not the meta topic's.
    assert {c for _, c in net.fetched} == {topic}
    # Each asked in its topic JOIN, and got the block in the JOIN_ACK.
    asked = {p for p, j in _joins(net) if j.topic == topic and j.want_meta}
    assert asked == set(members)
    carried = {to for to, a in _acks(net) if a.topic == topic and a.meta is not None}
    assert carried == set(members)
    assert all(a.meta == net.store[meta] for _, a in _acks(net) if a.meta is not None)
    for p in members:
        assert net.nodes[p].topic_state(meta).joined, p  # it follows the meta topic
        assert any(s.cid == meta for s in net.logs[p].stored), p  # kept in its Kubo
    # A JOIN of the meta tree itself asks for nothing (nor does a later JOIN).
    assert not any(j.want_meta for _, j in _joins(net) if j.topic == meta)
    # The meta tree works: a new version reaches every subscriber through it.
    new = net.call(author, "update_topic", topic, options=TopicOptions(event_linking="CUSTOM"))  # type: ignore[arg-type]
    net.run_for(2)
    for p in members:
        assert net.nodes[p].topic_state(topic).latest_cid == new, p


def test_a_meta_block_that_is_not_the_linked_one_is_dropped_and_the_fetch_goes_on() -> None:
    net = FetchLog(4, seed=4)
    topic, meta, author = _topic(net)
    other, _, _ = _topic(net, "other")  # a real, valid descriptor: not this topic's meta
    sub = net.peers[1]

    _subscribe_unanswered(net, sub, topic)
    assert any(j.want_meta for p, j in _joins(net) if p == sub and j.topic == topic)
    net.inject(author, sub, JoinAck(topic=topic, ok=True, meta=net.store[other]))
    net.drop_if = None
    dropped = net.records(sub, RecordKind.EVENT_DROPPED)
    assert [r.fields["reason"] for r in dropped] == ["invalid"]
    assert dropped[0].fields["event"] == str(meta)
    assert net.nodes[sub].topic_state(topic).joined  # the JOIN_ACK itself counts
    assert not any(s.cid in (meta, other) for s in net.logs[sub].stored)
    assert (sub, meta) not in net.fetched  # not yet: the fetch waits its grace
    net.run_for(META_ACK_WAIT * NodeConfig().join_timeout + 1)
    assert (sub, meta) in net.fetched
    assert net.nodes[sub].topic_state(meta).joined


def test_a_join_ack_without_the_meta_block_starts_the_fetch_at_once() -> None:
    net = FetchLog(4, seed=5)
    topic, meta, author = _topic(net)
    sub = net.peers[1]

    _subscribe_unanswered(net, sub, topic)
    net.drop_if = None
    assert (sub, meta) not in net.fetched
    net.inject(author, sub, JoinAck(topic=topic, ok=True))  # a parent that lacks it
    assert (sub, meta) in net.fetched  # at once, not after the grace
    net.run_for(1)
    assert net.nodes[sub].topic_state(meta).joined
    assert not net.records(sub, RecordKind.EVENT_DROPPED)


def test_an_unasked_meta_block_is_ignored() -> None:
    net = FetchLog(4, seed=6)
    topic, meta, author = _topic(net)
    sub, reader = net.peers[1], net.peers[2]
    net.call(sub, "subscribe", topic)
    net.call(reader, "read", topic, holders=(author,))  # in the tree, not following the meta
    net.run_for(2)
    assert net.nodes[sub].topic_state(meta).joined
    assert net.nodes[reader].topic_state(topic).parent == author
    assert not any(j.want_meta for p, j in _joins(net) if p == reader)
    stored = {p: len(net.logs[p].stored) for p in (sub, reader)}
    # An accepting JOIN_ACK with the right block to a node that resolves no meta topic
    # (the subscriber holds it, the reader never wanted it): nothing is stored,
    # nothing is dropped, the reader starts no meta tree.
    for p in (sub, reader):
        net.inject(author, p, JoinAck(topic=topic, ok=True, meta=net.store[meta]))
    net.run_for(0.5)
    assert {p: len(net.logs[p].stored) for p in (sub, reader)} == stored
    assert meta not in net.nodes[reader]._trees
    assert not net.records(sub, RecordKind.EVENT_DROPPED)
    assert not net.records(reader, RecordKind.EVENT_DROPPED)


def test_the_wire_fields_round_trip_and_are_checked() -> None:
    topic = CID.decode("bafyreigavfcxkywiosv4nvxypzk7r6dmirdgwlkhx5jm6gl5rvxjqlxzri")
    join = Join(topic=topic, descriptor=b"d", want_meta=True)
    assert decode_rpc(encode_rpc(join)) == join
    assert _dagcbor.decode(encode_rpc(join))["wantMeta"] is True
    plain = Join(topic=topic, descriptor=b"d")
    assert "wantMeta" not in _dagcbor.decode(encode_rpc(plain))  # the 2.6 shape
    ack = JoinAck(topic=topic, ok=True, meta=b"m")
    assert decode_rpc(encode_rpc(ack)) == ack
    assert "meta" not in _dagcbor.decode(encode_rpc(JoinAck(topic=topic, ok=True)))
    with pytest.raises(LocalProtocolError, match="wantMeta"):
        Join(topic=topic, descriptor=b"d", want_meta=False)
    with pytest.raises(LocalProtocolError, match="accepting"):
        JoinAck(topic=topic, ok=False, meta=b"m")
    with pytest.raises(LocalProtocolError, match="larger than"):
        JoinAck(topic=topic, ok=True, meta=bytes(1 << 20))
    for obj in (
        {"op": "JOIN", "topic": topic, "descriptor": b"d", "leaf": False, "up": False,
         "wantMeta": False},
        {"op": "JOIN", "topic": topic, "descriptor": b"d", "leaf": False, "up": False,
         "wantMeta": None},
        {"op": "JOIN_ACK", "topic": topic, "ok": True, "meta": "text"},
        {"op": "JOIN_ACK", "topic": topic, "ok": False, "meta": b"m"},
    ):  # fmt: skip
        with pytest.raises(RemoteProtocolError):
            decode_rpc(_dagcbor.encode(obj))
