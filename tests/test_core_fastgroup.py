"""Fast groups (FastDelivery; docs/protocol-notes.md "Fast groups") on
in-memory networks: join, capacity, helpers, two hops at most, deduplication, leave,
a helper's crash, expiry, and the wire checks of the new RPCs."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from pulsarcast_ipfs.core import (
    EventDescriptor,
    GroupAck,
    GroupAssign,
    GroupEvent,
    GroupJoin,
    GroupLeave,
    LocalProtocolError,
    NodeConfig,
    RemoteProtocolError,
    _fastgroup,
    decode_rpc,
    encode_rpc,
    format_created,
    parse_filter,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._groupstate import plan_group
from pulsarcast_ipfs.core.testing import CoreNet
from pulsarcast_ipfs.records import RecordKind

CFG = NodeConfig(group_capacity=3, group_spare=4, group_refresh=2.0)


def fast_net(
    n: int = 14, subs: int = 12, *, config: NodeConfig = CFG, **kw: object
) -> tuple[CoreNet, CID, str, list[str]]:
    kw.setdefault("bucket_size", 1)  # sparse tables: a deep tree, which groups short-cut
    net = CoreNet(n, seed=7, config=config, **kw)  # type: ignore[arg-type]
    author = net.peers[0]
    topic = net.call(author, "create_topic", "news")
    net.run_for(0.5)
    members = net.peers[1 : subs + 1]
    for p in members:
        net.call(p, "subscribe", topic, fast=True)
    net.run_for(3)
    return net, topic, author, members


def group_hops(
    net: CoreNet, lost: frozenset[tuple[str, str]] = frozenset()
) -> dict[tuple[str, CID], int]:
    """For every GROUP_EVENT receipt, the hops from the event's publisher, from the
    traffic itself (a sender that is not the publisher and got the event along no
    group counts as far away: 99). ``lost``: links whose GROUP_EVENTs were dropped."""
    first: dict[tuple[str, CID], str] = {}
    sends: list[tuple[str, str, CID, str]] = []
    for sender, log in net.logs.items():
        for out in log.sent:
            if isinstance(out.rpc, GroupEvent) and (sender, out.peer) not in lost:
                ev = EventDescriptor.decode(out.rpc.event)
                sends.append((sender, out.peer, ev.cid, ev.publisher))
    for sender, receiver, cid, _pub in sends:
        first.setdefault((receiver, cid), sender)
    hops: dict[tuple[str, CID], int] = {}

    def hop(peer: str, cid: CID, publisher: str, depth: int = 0) -> int:
        if peer == publisher:
            return 0
        got = first.get((peer, cid))
        if got is None or depth > 10:
            return 99
        return 1 + hop(got, cid, publisher, depth + 1)

    for sender, receiver, cid, pub in sends:
        hops[(receiver, cid)] = max(hops.get((receiver, cid), 0), hop(sender, cid, pub) + 1)
    return hops


def paths(net: CoreNet, peers: list[str]) -> Counter[str]:
    return Counter(
        str(r.fields.get("path")) for p in peers for r in net.records(p, RecordKind.EVENT_DELIVERED)
    )


def test_plan_group_bounds() -> None:
    members = {f"p{i:02}": (4 if i % 2 else 0, i) for i in range(12)}
    direct, helpers = plan_group(members, 3) or ((), {})
    assert len(direct) + len(helpers) <= 3
    placed = set(direct) | set(helpers) | {m for ms in helpers.values() for m in ms}
    assert placed == set(members)
    for h, ms in helpers.items():
        assert members[h][0] >= len(ms) and h not in ms
        assert not set(ms) & set(helpers)  # a helper is never served by a helper
    assert plan_group({f"p{i}": (0, i) for i in range(4)}, 3) is None  # nobody can help
    assert plan_group({"a": (0, 1)}, 3) == (("a",), {})


def test_group_join_capacity_helpers_two_hops_exactly_once() -> None:
    net, topic, author, members = fast_net()
    st = net.nodes[author].fast_state(topic)
    assert st.members == len(members)
    assert len(st.direct) + len(st.helpers) <= CFG.group_capacity
    assert st.helpers, "a group larger than the capacity recruits helpers"
    for h, served in st.helpers:
        assert net.nodes[h].fast_state(topic).helping == ((author, served),)
        for m in served:
            assert dict(net.nodes[m].fast_state(topic).joined)[author] == h
    cids = []
    for i in range(20):
        cids.append(net.call(author, "publish", topic, f"e{i}".encode()).event_cid)
        net.run_for(0.2)
    net.run_for(3)
    for p in members:
        assert sorted(net.delivered(p, topic), key=bytes) == sorted(cids, key=bytes), p
    hops = group_hops(net)
    assert hops and max(hops.values()) == 2  # helpers used, never a third hop
    by_path = paths(net, members)
    assert by_path["helper"] > 0 and by_path["group"] > 0
    assert sum(by_path.values()) == len(members) * len(cids)
    # the publisher sends each event to at most `capacity` peers along the group
    per_event = Counter(
        EventDescriptor.decode(o.rpc.event).cid
        for o in net.logs[author].sent
        if isinstance(o.rpc, GroupEvent)
    )
    assert max(per_event.values()) <= CFG.group_capacity


def test_a_publisher_seen_in_events_is_joined() -> None:
    net, topic, _author, members = fast_net(8, 6)
    other = members[0]
    first = net.call(other, "publish", topic, b"by another publisher").event_cid
    net.run_for(2)
    joined = [p for p in members[1:] if other in dict(net.nodes[p].fast_state(topic).joined)]
    assert joined == members[1:]
    second = net.call(other, "publish", topic, b"again").event_cid
    net.run_for(2)
    for p in members:
        assert net.delivered(p, topic) == [first, second]
    assert net.nodes[other].fast_state(topic).members == len(members) - 1


def test_a_subscribers_filter_applies_to_group_copies() -> None:
    """Fast and filter combine: events that came along a group pass the
    subscriber's filter like tree copies (the core's one delivery point)."""
    net, topic, author, members = fast_net()
    where = parse_filter("ups >= 10")
    filtered = members[::2]
    for p in filtered:
        net.call(p, "subscribe", topic, fast=True, filter=where)
    net.run_for(3)
    wanted = []
    cids = []
    for i in range(12):
        ups = 5 * i
        cid = net.call(author, "publish", topic, f"e{i}".encode(), attributes={"ups": ups})
        cids.append(cid.event_cid)
        if ups >= 10:
            wanted.append(cid.event_cid)
        net.run_for(0.2)
    net.run_for(3)
    for p in members:
        got = sorted(net.delivered(p, topic), key=bytes)
        expect = wanted if p in filtered else cids
        assert got == sorted(expect, key=bytes), p
    # the filtered subscribers' deliveries came first along the group, not the tree
    by_path = paths(net, filtered)
    assert by_path["group"] + by_path["helper"] > 0, by_path
    assert sum(by_path.values()) == len(filtered) * len(wanted)


def _chained_plan(
    members: dict[str, tuple[int, int]], capacity: int
) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]] | None:
    """A wrong placement: the second helper is itself served by the first one."""
    if len(members) < 8:
        return plan_group(members, capacity)
    order = sorted(members, key=lambda p: members[p][1])
    a, b, rest = order[0], order[1], order[2:]
    return (), {a: (b, *rest[:2]), b: tuple(rest[2:6])}


@pytest.mark.parametrize("planted", [False, True])
def test_helpers_never_forward_helper_traffic(
    monkeypatch: pytest.MonkeyPatch, planted: bool
) -> None:
    """Even with a placement that chains helpers, and the publisher's own copy to the
    second helper lost, no group delivery takes a third hop: a helper forwards only
    what the publisher itself sent. Planting the violation (a helper forwarding what
    it got from another helper) is caught by the same hop count."""
    monkeypatch.setattr(_fastgroup, "plan_group", _chained_plan)
    if planted:
        monkeypatch.setattr(_fastgroup.FastGroups, "_forwards", lambda self, direct: True)
    net, topic, author, members = fast_net(10, 8, config=dataclasses.replace(CFG, group_spare=8))
    helpers = dict(net.nodes[author].fast_state(topic).helpers)
    (second,) = [h for h in helpers if any(h in ms for ms in helpers.values())]
    net.drop_if = lambda s, r, rpc: s == author and r == second and isinstance(rpc, GroupEvent)
    for i in range(5):
        net.call(author, "publish", topic, f"e{i}".encode())
        net.run_for(0.3)
    net.run_for(2)
    hops = max(group_hops(net, frozenset({(author, second)})).values())
    if planted:
        assert hops == 3
    else:
        assert hops == 2
    for p in members:  # whatever the group does, the tree delivers everything once
        assert len(net.delivered(p, topic)) == 5


def test_dedup_and_every_check_runs_on_group_events() -> None:
    net, topic, author, members = fast_net(8, 6, config=dataclasses.replace(CFG, group_capacity=8))
    # a member that is no tree neighbour of the publisher (those get the EVENT only)
    m = next(p for p in members if p not in net.nodes[author].topic_state(topic).children)
    ev = net.call(author, "publish", topic, b"one").event_cid
    net.run_for(2)
    assert net.delivered(m, topic) == [ev]
    dup = [r for r in net.records(m, RecordKind.EVENT_DROPPED) if r.fields["reason"] == "duplicate"]
    assert dup, "the group copy and the tree copy meet: one is dropped as a duplicate"
    # A GROUP_EVENT naming a publisher other than its sender (and not the sender's
    # helper): refused, not delivered.
    forged = EventDescriptor(
        topic=topic,
        author=members[1],
        publisher=members[1],
        parents=(),
        clock=0,
        payload=b"forged",
        created=format_created(net.now),
        protocol_version="2.0.0",
    )
    net.inject(author, m, GroupEvent(topic=topic, event=forged.encode()))
    assert forged.cid not in net.delivered(m, topic)
    assert net.records(m, RecordKind.EVENT_DROPPED)[-1].fields["reason"] == "not_member"
    # From the publisher itself but for a topic version of another tree: wrong_topic.
    other = net.call(author, "create_topic", "other")
    wrong = dataclasses.replace(forged, author=author, publisher=author, topic=other)
    net.inject(
        author, m, GroupEvent(topic=topic, event=wrong.encode(), topic_block=net.store[other])
    )
    assert wrong.cid not in net.delivered(m, topic)
    assert net.records(m, RecordKind.EVENT_DROPPED)[-1].fields["reason"] == "wrong_topic"
    # From a peer whose group this node is not in: refused, and told to leave.
    stranger = net.peers[-1]
    stray = dataclasses.replace(forged, author=stranger, publisher=stranger)
    before = len(net.logs[m].sent)
    net.inject(stranger, m, GroupEvent(topic=topic, event=stray.encode()))
    assert stray.cid not in net.delivered(m, topic)
    assert isinstance(net.logs[m].sent[before].rpc, GroupLeave)


def test_member_leave_loses_nothing_for_the_others() -> None:
    net, topic, author, members = fast_net()
    leaver = members[3]
    net.call(leaver, "unsubscribe", topic)
    net.run_for(1)
    st = net.nodes[author].fast_state(topic)
    assert st.members == len(members) - 1
    ev = net.call(author, "publish", topic, b"after").event_cid
    net.run_for(2)
    assert ev not in net.delivered(leaver, topic)
    for p in members:
        if p != leaver:
            assert net.delivered(p, topic).count(ev) == 1


def test_helper_crash_reassigned_and_nothing_lost() -> None:
    net, topic, author, members = fast_net()
    helpers = dict(net.nodes[author].fast_state(topic).helpers)
    victim = sorted(helpers)[0]
    orphans = helpers[victim]
    cids = [net.call(author, "publish", topic, b"before").event_cid]
    net.run_for(1)
    net.crash(victim)
    for i in range(10):
        cids.append(net.call(author, "publish", topic, f"e{i}".encode()).event_cid)
        net.run_for(0.5)
    net.run_for(15)
    st = net.nodes[author].fast_state(topic)
    assert victim not in dict(st.helpers) and victim not in st.direct
    assert st.members == len(members) - 1
    for p in members:
        if p != victim:
            got = net.delivered(p, topic)
            assert sorted(got, key=bytes) == sorted(cids, key=bytes), p  # once each
    # the victim's members are served along the group again
    late = net.call(author, "publish", topic, b"late").event_cid
    net.run_for(2)
    st = net.nodes[author].fast_state(topic)
    placed = set(st.direct) | {m for _, ms in st.helpers for m in ms} | set(dict(st.helpers))
    neighbours = net.nodes[author].topic_state(topic).children
    group_sent = {
        (o.peer, EventDescriptor.decode(o.rpc.event).cid)
        for log in net.logs.values()
        for o in log.sent
        if isinstance(o.rpc, GroupEvent)
    }
    for p in orphans:
        assert p in placed and dict(net.nodes[p].fast_state(topic).joined)[author] != victim
        assert net.delivered(p, topic).count(late) == 1
        assert p in neighbours or (p, late) in group_sent


def test_crashed_member_expires() -> None:
    net, topic, author, members = fast_net(8, 6, unreachable_after=None)
    net.crash(members[0])
    net.run_for(3 * CFG.group_refresh + 2 * CFG.group_refresh)
    assert net.nodes[author].fast_state(topic).members == len(members) - 1


def test_group_rpcs_reject_bad_fields() -> None:
    topic = CID.decode("bafyreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy")
    peer = CoreNet(1).peers[0]
    good = [
        GroupJoin(topic=topic, spare=3),
        GroupAck(topic=topic, ok=True, helper=peer, ttl=30.0),
        GroupLeave(topic=topic),
        GroupAssign(topic=topic, epoch=1, members=(peer,), ttl=30.0),
        GroupEvent(topic=topic, event=b"x", topic_block=None),
    ]
    for rpc in good:
        assert decode_rpc(encode_rpc(rpc)) == rpc
    import pulsarcast_ipfs.core._dagcbor as cbor

    def body(**fields: object) -> bytes:
        return cbor.encode(fields)

    bad = [
        body(op="GROUP_JOIN", topic=topic, spare=65),
        body(op="GROUP_JOIN", topic=topic, spare=-1),
        body(op="GROUP_JOIN", topic=topic, spare=True),
        body(op="GROUP_JOIN", topic=topic),
        body(op="GROUP_JOIN", topic=topic, spare=1, extra=1),
        body(op="GROUP_ACK", topic=topic, ok=True, helper="nope", ttl=30.0),
        body(op="GROUP_ACK", topic=topic, ok=True, helper=None, ttl=0.0),
        body(op="GROUP_ACK", topic=topic, ok=True, helper=None, ttl=1e9),
        body(op="GROUP_ACK", topic=topic, ok=1, helper=None, ttl=3.0),
        body(op="GROUP_ASSIGN", topic=topic, epoch=1, members=[peer, peer], ttl=3.0),
        body(op="GROUP_ASSIGN", topic=topic, epoch=-1, members=[], ttl=3.0),
        body(op="GROUP_ASSIGN", topic=topic, epoch=1, members=[peer] * 65, ttl=3.0),
        body(op="GROUP_ASSIGN", topic=topic, epoch=1, members="x", ttl=3.0),
        body(op="GROUP_EVENT", topic=topic, event="text", topicBlock=None),
        body(op="GROUP_LEAVE", topic="not a cid"),
    ]
    for b in bad:
        with pytest.raises(RemoteProtocolError):
            decode_rpc(b)


def test_group_rpcs_are_rate_limited() -> None:
    cfg = dataclasses.replace(CFG, join_rate=1.0, join_burst=2.0)
    net, topic, author, _members = fast_net(4, 2, config=cfg)
    flooder = net.peers[3]
    for _ in range(5):
        net.inject(flooder, author, GroupJoin(topic=topic, spare=0))
    limited = [
        r
        for r in net.records(author, RecordKind.EVENT_DROPPED)
        if r.fields["reason"] == "rate_limited" and r.fields.get("peer") == flooder
    ]
    assert limited


def test_signed_group_events_are_verified() -> None:
    """With signatures, group copies are verified like tree EVENTs: a tampered one is
    dropped (bad_signature) and never delivered."""
    net, topic, author, members = fast_net(8, 6, signatures=True)
    cid = net.call(author, "publish", topic, b"signed").event_cid
    net.run_for(2)
    for p in members:
        assert net.delivered(p, topic) == [cid]
    m = next(p for p in members if p not in net.nodes[author].topic_state(topic).children)
    good = EventDescriptor.decode(net.store[cid])
    bad = dataclasses.replace(good, payload=b"tampered", parents=(cid,), clock=good.clock + 1)
    net.inject(author, m, GroupEvent(topic=topic, event=bad.encode()))
    assert bad.cid not in net.delivered(m, topic)
    assert net.records(m, RecordKind.EVENT_DROPPED)[-1].fields["reason"] == "bad_signature"


def test_the_tree_still_forwards_what_came_first_along_a_group() -> None:
    """A member that got an event along its group first forwards the tree's own copy
    when it comes: the non-fast subscribers below it get every event at tree speed
    (anti-entropy is switched off here, so nothing else could repair them). Planting
    the violation (never forwarding that copy) leaves them without the events."""
    cfg = dataclasses.replace(CFG, heads_interval=600.0, heads_after_publish=300.0)
    for seed in range(7, 40):  # the first seeded topology with the case in it
        net = CoreNet(16, seed=seed, config=cfg, bucket_size=1)
        author = net.peers[0]
        topic = net.call(author, "create_topic", "news")
        net.run_for(0.5)
        members = net.peers[1:]
        for k, p in enumerate(members):
            net.call(p, "subscribe", topic, fast=k % 2 == 0)
        net.run_for(3)
        fast = {p for k, p in enumerate(members) if k % 2 == 0}
        below_fast = [
            p for p in members if p not in fast and net.nodes[p].topic_state(topic).parent in fast
        ]
        if below_fast:
            break
    assert below_fast, "no topology with plain subscribers below fast ones"
    cids = [net.call(author, "publish", topic, f"e{i}".encode()).event_cid for i in range(10)]
    net.run_for(1.5)
    for p in members:
        assert sorted(net.delivered(p, topic), key=bytes) == sorted(cids, key=bytes), p


@pytest.mark.parametrize(
    "bad",
    [
        {"group_capacity": -1},
        {"group_capacity": True},
        {"group_spare": 65},
        {"group_spare": 1.5},
        {"group_refresh": 0.0},
        {"group_refresh": 1201.0},  # three refreshes must fit in the largest ttl
        {"fast_publishers": 0},
    ],
)
def test_group_config_is_checked(bad: dict[str, object]) -> None:
    with pytest.raises(LocalProtocolError):
        NodeConfig(**bad)  # type: ignore[arg-type]
    assert NodeConfig(group_capacity=0, group_spare=0).group_capacity == 0  # groups off
