"""Flood protection in the pure core: per-peer token buckets for JOIN,
EVENT/HEADS and REQUEST_TO_PUBLISH, disconnection of a persistent flooder, bounded
topics; other peers unharmed; legitimate rates never limited. Time stepped by hand."""

from __future__ import annotations

import random
from collections.abc import Sequence

from pulsarcast_ipfs.core import (
    DisconnectPeer,
    Event,
    EventDescriptor,
    Join,
    JoinAck,
    NodeConfig,
    Ping,
    PulsarcastNode,
    SendRpc,
    TopicDescriptor,
    format_created,
)
from pulsarcast_ipfs.core.testing import CoreNet, make_peer_ids
from pulsarcast_ipfs.records import MetricRecord, RecordKind

T0 = 1_800_000_000.0
PEERS = make_peer_ids(6, seed=21)


def _node(config: NodeConfig) -> PulsarcastNode:
    node = PulsarcastNode(peer_id=PEERS[0], config=config, rng=random.Random(1), now=T0)
    node.set_known_peers(T0, PEERS[1:])
    return node


def _drops(outs: Sequence[object], reason: str) -> int:
    return sum(
        1
        for o in outs
        if isinstance(o, MetricRecord)
        and o.kind == RecordKind.EVENT_DROPPED
        and o.fields["reason"] == reason
    )


def _topic(i: int, author: str = PEERS[0]) -> TopicDescriptor:
    return TopicDescriptor.new(name=f"t{i}", author=author, now=T0)


def test_join_flood_is_limited_then_disconnected_others_unharmed() -> None:
    cfg = NodeConfig(join_rate=10, join_burst=20, abuse_limit=30, abuse_window=60, ban_time=100)
    node = _node(cfg)
    flooder, honest = PEERS[1], PEERS[2]
    topics = [_topic(i) for i in range(80)]
    acks = 0
    outs: list[object] = []
    for t in topics[:50]:  # 50 JOINs at one instant: 20 pass (burst), 30 refused
        node.receive_rpc(T0, flooder, Join(topic=t.cid, descriptor=t.encode()))
        outs += node.take_outputs()
    acks = sum(1 for o in outs if isinstance(o, SendRpc) and isinstance(o.rpc, JoinAck))
    assert acks == 20
    assert _drops(outs, "rate_limited") == 30
    disconnects = [o for o in outs if isinstance(o, DisconnectPeer)]
    assert len(disconnects) == 1 and disconnects[0].peer == flooder
    assert disconnects[0].until == T0 + 100
    assert flooder in node.banned_peers
    # The flooder was dropped from every tree it had joined.
    assert all(flooder not in node.topic_state(t.cid).children for t in topics[:20])
    # Banned: ignored without records; the honest peer is served at once.
    node.receive_rpc(T0 + 1, flooder, Ping(nonce=1))
    assert node.take_outputs() == []
    t = topics[60]
    node.receive_rpc(T0 + 1, honest, Join(topic=t.cid, descriptor=t.encode()))
    assert any(
        isinstance(o, SendRpc) and o.peer == honest and o.rpc == JoinAck(topic=t.cid, ok=True)
        for o in node.take_outputs()
    )
    # After the ban the flooder may come back, with a refilled bucket.
    t = topics[70]
    node.receive_rpc(T0 + 101, flooder, Join(topic=t.cid, descriptor=t.encode()))
    assert flooder not in node.banned_peers
    assert any(isinstance(o, SendRpc) and o.peer == flooder for o in node.take_outputs())


def test_bucket_refills_with_time_and_abuse_window_resets() -> None:
    cfg = NodeConfig(join_rate=2, join_burst=2, abuse_limit=3, abuse_window=10)
    node = _node(cfg)
    t = [_topic(i) for i in range(10)]

    def join(now: float, i: int) -> int:
        node.receive_rpc(now, PEERS[1], Join(topic=t[i].cid, descriptor=t[i].encode()))
        return _drops(node.take_outputs(), "rate_limited")

    assert [join(T0, 0), join(T0, 1), join(T0, 2)] == [0, 0, 1]  # burst of 2
    assert join(T0 + 0.5, 3) == 0  # one token back after 0.5 s at 2/s
    assert join(T0 + 0.5, 4) == 1  # strike 2 in this window
    assert join(T0 + 20, 5) == 0 and join(T0 + 20, 6) == 0
    assert join(T0 + 20, 7) == 1  # a new window: strike 1, not 3
    assert PEERS[1] not in node.banned_peers


def _event(topic: TopicDescriptor, i: int) -> Event:
    ev = EventDescriptor(
        topic=topic.cid,
        author=topic.author,
        publisher=topic.author,
        payload=b"%d" % i,
        created=format_created(T0 + i / 1000),
    )
    return Event(topic=topic.cid, event=ev.encode(), topic_block=None)


def test_event_flood_from_a_child_is_limited_per_peer() -> None:
    cfg = NodeConfig(event_rate=5, event_burst=10, abuse_limit=1000)
    node = _node(cfg)
    topic = TopicDescriptor.new(name="ev", author=PEERS[0], now=T0)
    node.create_topic(T0, "unused")
    for child in PEERS[1:3]:
        node.receive_rpc(T0, child, Join(topic=topic.cid, descriptor=topic.encode()))
    node.take_outputs()
    for i in range(30):
        node.receive_rpc(T0 + 1, PEERS[1], _event(topic, i))
    outs = node.take_outputs()
    assert _drops(outs, "rate_limited") == 20
    node.receive_rpc(T0 + 1, PEERS[2], _event(topic, 999))  # another peer: its own bucket
    assert _drops(node.take_outputs(), "rate_limited") == 0


def test_too_many_topics_refused() -> None:
    node = _node(NodeConfig(max_topics=3))
    outs: list[object] = []
    for i in range(5):
        t = _topic(i, author=PEERS[0])
        node.receive_rpc(T0, PEERS[1], Join(topic=t.cid, descriptor=t.encode()))
        outs += node.take_outputs()
    assert node.memory_usage["trees"] == 3
    assert _drops(outs, "too_many_topics") == 2


def test_default_limits_never_touch_legitimate_traffic() -> None:
    """A 6-node network, 3 topics, ~150 events/s for 20 s: nothing rate-limited."""
    net = CoreNet(6, seed=4)
    peers = net.peers
    topics = [net.call(peers[i], "create_topic", f"busy{i}") for i in range(3)]
    for p in peers:
        for t in topics:
            if net.nodes[p].peer_id != peers[0]:
                net.call(p, "subscribe", t)
    net.run_for(5)
    for step in range(20 * 50):
        net.call(peers[step % 6], "publish", topics[step % 3], b"x")
        net.run_for(0.02 / 3)
    net.run_for(10)
    limited = [
        r
        for p in peers
        for r in net.records(p, RecordKind.EVENT_DROPPED)
        if r.fields["reason"] in ("rate_limited", "too_many_topics")
    ]
    assert limited == []
    assert len(net.delivered(peers[5], topics[0])) == 20 * 50 // 3 + (1 if 0 < (20 * 50) % 3 else 0)
