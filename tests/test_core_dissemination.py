"""The first hop (MEMBERS, ``pushed`` events) and per-edge anti-entropy (HEADS deltas,
DIGEST) of the pure core (docs/protocol-notes.md "First hop",
"Anti-entropy")."""

from __future__ import annotations

import pytest

from pulsarcast_ipfs.core import (
    Digest,
    Event,
    Heads,
    Join,
    JoinAck,
    Leave,
    Members,
    NodeConfig,
    PulsarcastNode,
    RemoteProtocolError,
    decode_rpc,
    encode_rpc,
)
from pulsarcast_ipfs.core._antientropy import fingerprint
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core.testing import CoreNet


def star(n: int, **kw: object) -> tuple[CoreNet, CID, str, list[str]]:
    """``n`` nodes, everyone knows everyone: the tree is a star around the author."""
    net = CoreNet(n, seed=3, **kw)  # type: ignore[arg-type]
    author = net.peers[0]
    topic = net.call(author, "create_topic", "news")
    net.run_for(0.5)
    members = net.peers[1:]
    for p in members:
        net.call(p, "subscribe", topic)
    net.run_for(NodeConfig().members_interval + 1)  # the root's MEMBERS are out
    for p in members:
        assert net.nodes[p].topic_state(topic).parent == author
    return net, topic, author, members


def events_sent(net: CoreNet, peer: str) -> list[tuple[str, Event]]:
    return [(s.peer, s.rpc) for s in net.logs[peer].sent if isinstance(s.rpc, Event)]


def test_root_tells_its_children_who_they_are() -> None:
    net, topic, author, members = star(6)
    sent = [s for s in net.logs[author].sent if isinstance(s.rpc, Members)]
    assert sent, "the root sent no MEMBERS"
    last = sent[-1].rpc
    assert isinstance(last, Members) and last.members[0] == author
    assert set(last.members) == {author, *members}
    # Debounced: five JOINs, far fewer than 5 x 5 MEMBERS.
    assert len(sent) <= 3 * len(members)
    for p in members:
        assert net.nodes[p].topic_state(topic).parent == author


def test_a_child_publishes_in_one_hop_and_the_root_does_not_repeat_it() -> None:
    net, topic, author, members = star(8)
    pub = members[0]
    before = {p: len(net.logs[p].sent) for p in net.peers}
    cid = net.call(pub, "publish", topic, b"one hop").event_cid
    net.run_for(1)
    from_pub = [(to, rpc) for to, rpc in events_sent(net, pub) if rpc.pushed is not None]
    assert {to for to, _ in from_pub} == set(net.peers) - {pub}
    # The root forwards it to nobody: every other child had it from the publisher.
    root_events = [s for s in net.logs[author].sent[before[author] :] if isinstance(s.rpc, Event)]
    assert root_events == []
    for p in net.peers:
        assert net.delivered(p, topic) == [cid]
    # Each member got exactly one copy (no duplicate from the tree).
    dups = [
        r
        for p in members
        for r in net.records(p, "event_dropped")  # type: ignore[arg-type]
        if r.fields.get("reason") == "duplicate"
    ]
    assert dups == []


def test_a_member_forwards_a_direct_push_to_its_children_not_up() -> None:
    net, topic, author, members = star(5)
    pub, relay, child = members[0], members[1], members[2]
    # Give `relay` a child by hand (as if a farther peer had joined it).
    net.nodes[relay]._trees[topic].children[child] = None
    cid = net.call(pub, "publish", topic, b"x").event_cid
    net.run_for(1)
    to = [p for p, rpc in events_sent(net, relay)]
    assert child in to, "a member did not forward a direct push to its children"
    assert author not in to, "a direct push went back up to the root"
    assert cid in net.delivered(relay, topic)


def test_a_root_with_a_new_child_still_sends_it_pushed_events() -> None:
    """The publisher's member list is older than the root's newest child: the root
    forwards to the children outside the epoch the event names."""
    net, topic, author, members = star(5)
    pub, newest = members[0], members[3]
    old = frozenset(m for m in members if m != newest)
    net.nodes[author]._trees[topic].member_sets[99] = old
    t = net.nodes[pub]._trees[topic]
    t.members, t.members_epoch = tuple(old - {pub}), 99
    cid = net.call(pub, "publish", topic, b"x").event_cid
    net.run_for(1)
    assert cid in net.delivered(newest, topic)
    root_to = [p for p, rpc in events_sent(net, author)]
    assert root_to == [newest]


def test_an_unknown_epoch_makes_the_root_forward_to_everyone() -> None:
    net, topic, _author, members = star(4)
    pub = members[0]
    net.nodes[pub]._trees[topic].members_epoch = 10_000
    cid = net.call(pub, "publish", topic, b"x").event_cid
    net.run_for(1)
    for p in net.peers:
        assert net.delivered(p, topic) == [cid]


def test_direct_pushes_lost_are_repaired_by_anti_entropy() -> None:
    net, topic, _author, members = star(6)
    pub, victim = members[0], members[1]
    net.drop_if = lambda s, r, rpc: s == pub and r == victim and isinstance(rpc, Event)
    cid = net.call(pub, "publish", topic, b"lost").event_cid
    net.run_for(1)
    net.drop_if = None
    assert cid not in net.delivered(victim, topic)
    net.run_for(15)
    assert net.delivered(victim, topic) == [cid]


def test_a_direct_push_from_a_non_publisher_is_a_stale_edge() -> None:
    """Only the publisher itself may push outside the tree; anyone else gets LEAVE."""
    net, topic, _author, members = star(4)
    cid = net.call(members[0], "publish", topic, b"x").event_cid
    net.run_for(1)
    ev = next(rpc for _, rpc in events_sent(net, members[0]))
    outsider = members[2]
    net.logs[outsider].sent.clear()
    fresh = Event(topic=topic, event=ev.event, pushed=ev.pushed)
    receiver = members[1]
    net.logs[receiver].sent.clear()
    net.inject(outsider, receiver, fresh)
    net.run_for(0.1)
    leaves = [s.peer for s in net.logs[receiver].sent if isinstance(s.rpc, Leave)]
    assert leaves == [outsider]
    # From the publisher itself, the same push is no stale edge: no LEAVE.
    net.logs[receiver].sent.clear()
    net.inject(members[0], receiver, fresh)
    net.run_for(0.1)
    assert not [s for s in net.logs[receiver].sent if isinstance(s.rpc, Leave)]
    assert net.delivered(receiver, topic) == [cid]


def test_a_stale_edge_gets_one_leave_per_ping_interval() -> None:
    """Every frame on an edge the receiver no longer has comes back to it until its
    LEAVE lands; it answers the first, and again only after ``ping_interval``."""
    net, topic, _author, members = star(4)
    net.call(members[0], "publish", topic, b"x")
    net.run_for(1)
    ev = next(rpc for _, rpc in events_sent(net, members[0]))
    outsider, receiver = members[2], members[1]
    stale = Event(topic=topic, event=ev.event)  # not a push: a tree edge's frame

    def leaves_after(n: int) -> list[str]:
        net.logs[receiver].sent.clear()
        for _ in range(n):
            net.inject(outsider, receiver, stale)
            net.run_for(0.1)
        return [s.peer for s in net.logs[receiver].sent if isinstance(s.rpc, Leave)]

    assert leaves_after(5) == [outsider]  # five frames within 0.5 s: one LEAVE
    net.run_for(net.nodes[receiver].config.ping_interval)
    assert leaves_after(3) == [outsider]  # the window passed: told again


def test_heads_rounds_send_nothing_when_events_crossed_the_edges() -> None:
    net, topic, _author, members = star(5)
    for i in range(10):
        net.call(members[i % 4], "publish", topic, f"e{i}".encode())
        net.run_for(0.2)
    # Deltas settle at once; an unchanged DIGEST is repeated after 1, 2, 4 and 8
    # rounds (a lost one must not stall a repair), then never again.
    net.run_for(16 * 5 + 5)
    for p in net.peers:
        net.logs[p].sent.clear()
    net.run_for(60)  # idle topic: twelve HEADS rounds
    for p in net.peers:
        sent = [s for s in net.logs[p].sent if isinstance(s.rpc, Heads | Digest)]
        chatter = [s.rpc.op for s in sent if not (isinstance(s.rpc, Heads) and not s.rpc.heads)]
        assert chatter == [], (p, chatter)
        # Only the idle probes (an empty HEADS to a child not heard from in six
        # rounds) and their answers: at most two per edge, direction and topic (the
        # topic's own and its metadata topic's) in twelve.
        probes: dict[tuple[str, object], int] = {}
        for s in sent:
            key = (s.peer, s.rpc.topic)
            probes[key] = probes.get(key, 0) + 1
        assert all(n <= 2 for n in probes.values()), (p, probes)


def digests_per_edge(net: CoreNet) -> dict[tuple[str, str], int]:
    """Plain DIGESTs (no answer, no listing) sent on each directed edge."""
    out: dict[tuple[str, str], int] = {}
    for p in net.peers:
        for s in net.logs[p].sent:
            if isinstance(s.rpc, Digest) and s.rpc.have is None and not s.rpc.ranges:
                out[p, s.peer] = out.get((p, s.peer), 0) + 1
    return out


def test_a_window_compared_both_ways_is_not_repeated() -> None:
    """One event crosses each edge of a quiet star: each side sends one DIGEST of the
    new window, the other's compares equal, and neither repeats it (five each way
    while a DIGEST was repeated whatever the other side had compared)."""
    net, topic, author, members = star(5)
    net.call(author, "publish", topic, b"zero")
    net.run_for(100)  # the windows are settled
    for p in net.peers:
        net.logs[p].sent.clear()
    net.call(author, "publish", topic, b"one")
    net.run_for(100)
    sent = digests_per_edge(net)
    assert sorted(sent) == sorted([(author, m) for m in members] + [(m, author) for m in members])
    assert set(sent.values()) == {1}, sent


def test_a_lost_digest_is_still_repeated() -> None:
    """The child's DIGESTs of the new window are lost: the root has compared none,
    so its own is repeated (after 1, 2, 4 and 8 rounds). (Children whose DIGESTs
    never arrive would be dropped as silent after 30 s: that is off here.)"""
    net, topic, author, members = star(3, config=NodeConfig(silent_child_after=0))
    net.call(author, "publish", topic, b"zero")
    net.run_for(100)
    for p in net.peers:
        net.logs[p].sent.clear()
    net.drop_if = lambda s, r, rpc: r == author and isinstance(rpc, Digest)
    net.call(author, "publish", topic, b"one")
    net.run_for(100)
    sent = digests_per_edge(net)
    assert all(sent[author, m] == 5 for m in members), sent


def test_a_lost_tree_event_is_found_by_digest_not_by_resending_heads() -> None:
    net, topic, author, members = star(4)
    victim = members[2]
    net.drop_if = lambda s, r, rpc: r == victim and isinstance(rpc, Event)
    cid = net.call(author, "publish", topic, b"lost").event_cid
    net.run_for(0.5)
    net.drop_if = None
    net.run_for(12)
    assert net.delivered(victim, topic) == [cid]
    listings = [
        s.rpc
        for p in net.peers
        for s in net.logs[p].sent
        if isinstance(s.rpc, Digest) and s.rpc.have is not None
    ]
    assert listings, "repaired without a DIGEST listing?"


def test_digest_repair_survives_lost_listings() -> None:
    """A lost listing or HEADS answer must not stall the repair: the edge keeps
    comparing every round until a DIGEST matches."""
    net, topic, author, members = star(3)
    victim = members[1]
    lost = {"listing": 2}

    def drop(s: str, r: str, rpc: object) -> bool:
        if r == victim and isinstance(rpc, Event):
            return True
        if isinstance(rpc, Digest) and rpc.have is not None and lost["listing"] > 0:
            lost["listing"] -= 1
            return True
        return False

    net.drop_if = drop
    cid = net.call(author, "publish", topic, b"lost").event_cid
    net.run_for(0.5)
    net.drop_if = lambda s, r, rpc: (
        isinstance(rpc, Digest) and rpc.have is not None and drop(s, r, rpc)
    )
    net.run_for(40)
    assert lost["listing"] == 0
    assert net.delivered(victim, topic) == [cid]


def test_fingerprint_is_order_free_and_sensitive() -> None:
    net, topic, author, _members = star(3)
    cids = [net.call(author, "publish", topic, f"{i}".encode()).event_cid for i in range(5)]
    assert fingerprint(cids) == fingerprint(reversed(cids))
    assert fingerprint(cids) != fingerprint(cids[:-1])
    assert fingerprint([])[0] == 0


def test_new_rpcs_round_trip_and_refuse_garbage() -> None:
    _net, topic, author, _members = star(2)
    m = Members(topic=topic, epoch=3, members=(author,))
    assert decode_rpc(encode_rpc(m)) == m
    d = Digest(topic=topic, lo=0.0, hi=1.0, count=0, sum=0)
    assert decode_rpc(encode_rpc(d)) == d
    e = Event(topic=topic, event=b"x", pushed=7)
    assert decode_rpc(encode_rpc(e)) == e
    from pulsarcast_ipfs.core import _dagcbor

    bad = d.to_ipld() | {"lo": 2.0}
    with pytest.raises(RemoteProtocolError, match="lo"):
        decode_rpc(_dagcbor.encode(bad))
    bad = m.to_ipld() | {"members": ["not a peer"]}
    with pytest.raises(RemoteProtocolError, match="members"):
        decode_rpc(_dagcbor.encode(bad))
    bad = e.to_ipld() | {"pushed": -1}
    with pytest.raises(RemoteProtocolError, match="pushed"):
        decode_rpc(_dagcbor.encode(bad))


def test_members_from_a_non_parent_are_ignored() -> None:
    net, topic, _author, members = star(3)
    node: PulsarcastNode = net.nodes[members[0]]
    before = node._trees[topic].members
    node.receive_rpc(net.now, members[1], Members(topic=topic, epoch=99, members=(members[1],)))
    assert node._trees[topic].members == before


def test_a_list_that_overtakes_its_join_ack_is_kept() -> None:
    """On a transport that does not keep order (CoreNet's links do not), the MEMBERS
    a relay sends right after its JOIN_ACK (``_members_to_new_child``) can come
    first: the joining node keeps it (from the peer it is joining, from nobody
    else) and uses it once that peer accepts."""
    net, topic, author, members = star(4)
    late, other = members[-1], members[0]
    net.call(late, "unsubscribe", topic)
    net.run_for(NodeConfig().members_interval + 1)
    net.drop_if = lambda s, r, rpc: s == late and isinstance(rpc, Join)
    net.call(late, "subscribe", topic)
    net.run_for(0.1)
    tree = net.nodes[late]._trees[topic]
    assert tree.join is not None and tree.parent is None
    target = tree.join.peer
    listed = (author, *members[:-1])
    net.inject(other, late, Members(topic=topic, epoch=7, members=listed))
    assert tree.members_epoch is None  # not from the peer it is joining
    net.inject(target, late, Members(topic=topic, epoch=8, members=listed))
    assert tree.members_epoch == 8
    net.inject(target, late, JoinAck(topic=topic, ok=True))
    assert tree.parent == target
    assert net.nodes[late].topic_state(topic).members == listed


def test_config_default_is_one_round() -> None:
    assert NodeConfig().heads_refresh_every == 1


def _two_events_out_of_order(gap: float | None) -> tuple[CoreNet, CID, list[CID], int]:
    """The author publishes e1 then e2 (e2's parent); ``victim`` gets e2 first, then
    e1 ``gap`` seconds later (``None``: never). Returns the fetches it made."""
    net, topic, author, members = star(3)
    victim = members[0]
    net.drop_if = lambda s, r, rpc: r == victim and isinstance(rpc, Event | Heads | Digest)
    e1 = net.call(author, "publish", topic, b"e1").event_cid
    e2 = net.call(author, "publish", topic, b"e2").event_cid
    net.run_for(0.2)
    net.drop_if = None
    frames = {rpc.event: rpc for to, rpc in events_sent(net, author) if to == members[1]}
    ev1, ev2 = (next(r for r in frames.values() if r.event == net.store[c]) for c in (e1, e2))
    before = net.fetches
    net.inject(author, victim, ev2)
    if gap is not None:
        net.run_for(gap)
        net.inject(author, victim, ev1)
    net.run_for(3)
    return net, topic, [e1, e2], net.fetches - before


def test_a_live_events_parent_on_its_way_is_not_fetched() -> None:
    net, topic, (e1, e2), fetches = _two_events_out_of_order(0.3)
    assert fetches == 0
    assert net.delivered(net.peers[1], topic) == [e1, e2]


def test_a_live_events_parent_that_does_not_come_is_fetched_after_the_grace() -> None:
    net, topic, (e1, e2), fetches = _two_events_out_of_order(None)
    assert fetches == 1
    assert net.delivered(net.peers[1], topic) == [e1, e2]


def test_a_difference_lists_only_the_ranges_that_differ() -> None:
    """One event missing out of 200 (the newest: no later event links it, so only
    anti-entropy finds it): the answer splits the window in ranges and only the
    range holding it is listed, not the whole window."""
    net, topic, author, members = star(3)
    victim = members[0]
    cids = []
    for i in range(200):
        if i == 199:
            net.drop_if = lambda s, r, rpc: r == victim and isinstance(rpc, Event)
        cids.append(net.call(author, "publish", topic, f"e{i}".encode()).event_cid)
        net.drop_if = None
        net.run_for(0.01)
    assert cids[199] not in net.delivered(victim, topic)
    net.run_for(15)
    assert set(net.delivered(victim, topic)) == set(cids)
    listings = [
        s.rpc
        for p in net.peers
        for s in net.logs[p].sent
        if isinstance(s.rpc, Digest) and s.rpc.have is not None
    ]
    answers = [
        s.rpc
        for p in net.peers
        for s in net.logs[p].sent
        if isinstance(s.rpc, Digest) and s.rpc.ranges
    ]
    assert listings and answers
    assert max(len(d.have or ()) for d in listings) <= 2 * 200 // 16


def test_a_pushed_event_of_a_stale_list_still_goes_up() -> None:
    """A publisher whose list names another epoch than its parent's (a stale list,
    a root that failed): the parent sends the event up as any event, so the root
    does not wait for anti-entropy."""
    net, topic, author, members = star(4)
    pub, relay = members[0], members[1]
    # `pub` hangs below `relay`, holding a list of an epoch its relay does not hold.
    for a, b in ((pub, relay),):
        ta, tb = net.nodes[a]._trees[topic], net.nodes[b]._trees[topic]
        ta.parent = b
        tb.children[a] = None
        ta.members, ta.members_epoch, ta.members_from = (members[2],), 12345, b
    net.nodes[author]._trees[topic].children.pop(pub, None)
    cid = net.call(pub, "publish", topic, b"x").event_cid
    net.run_for(0.2)
    assert cid in net.delivered(author, topic)
    assert author in [p for p, _ in events_sent(net, relay)]


def test_a_node_not_in_step_with_its_parent_owes_a_new_child_its_window() -> None:
    """A relay that has not had its parent's HEADS yet lists nothing to a new child
    (a reader would take that for the whole history); it does once they come."""
    net, topic, author, members = star(4)
    cid = net.call(author, "publish", topic, b"x").event_cid
    net.run_for(1)
    relay, newcomer = members[0], members[2]
    node = net.nodes[relay]
    tree = node._trees[topic]
    tree.heads_from.clear()  # as if it had just joined its parent
    node.take_outputs()
    node._adopt_child(net.now, tree, newcomer)
    heads = [o for o in node.take_outputs() if isinstance(getattr(o, "rpc", None), Heads)]
    assert heads == []
    assert newcomer in tree.history_due
    node.receive_rpc(net.now, author, Heads(topic=topic, heads=((cid, 1.0),)))
    sent = [o.rpc for o in node.take_outputs() if getattr(o, "peer", None) == newcomer]
    listed = {c for rpc in sent if isinstance(rpc, Heads) for c, _ in rpc.heads}
    assert cid in listed and not tree.history_due
