"""Relays that lie (core/_guard.py, docs/protocol-notes.md "Relays that lie").

A relay that drops EVENTs (black hole), also its DIGESTs and HEADS (silent), or only
one publisher's events (censor) is planted with CoreNet's ``drop_if``; the nodes
below it must get every event from their witnesses and leave it. Each guarantee is
checked against the same network with witnesses off, where the planted relay does
cut its subtree off: the tests can fail.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pulsarcast_ipfs.core import (
    CID,
    Digest,
    Event,
    GroupEvent,
    Heads,
    Join,
    JoinAck,
    Leave,
    Members,
    NodeConfig,
    Watch,
    encode_frame,
    make_peer_ids,
)
from pulsarcast_ipfs.core._guard import RelayGuard, WatchVerdict
from pulsarcast_ipfs.core.testing import CoreNet
from pulsarcast_ipfs.records import RecordKind

Drop = Callable[[str, str, object], bool]


def tree_net(
    n: int = 30, *, seed: int = 1, **cfg: object
) -> tuple[CoreNet, CID, str, list[str], str, list[str]]:
    """``n`` nodes, one topic, trees with relays (flat trees off, small k-buckets):
    a ``relay`` (not the author) and the members below it."""
    config = NodeConfig(flat_fanout=0, dead_after=10, **cfg)  # type: ignore[arg-type]
    net = CoreNet(n, seed=seed, config=config, bucket_size=4)
    author = net.peers[0]
    topic = net.call(author, "create_topic", "news")
    net.run_for(0.5)
    members = net.peers[1:]
    for p in members:
        net.call(p, "subscribe", topic)
    net.run_for(12)  # joined, MEMBERS out, WATCHes answered
    below: dict[str, list[str]] = {}
    for p in members:
        parent = net.nodes[p].topic_state(topic).parent
        if parent not in (None, author):
            below.setdefault(parent, []).append(p)
    relay = max(sorted(below), key=lambda r: len(below[r]))
    return net, topic, author, members, relay, below[relay]


def publish_many(net: CoreNet, topic: CID, publishers: list[str], count: int) -> list[CID]:
    cids = []
    for i in range(count):
        res = net.call(publishers[i % len(publishers)], "publish", topic, b"e%d" % i)
        cids.append(res.event_cid)
        net.run_for(0.2)
    net.run_for(15)
    return cids


def blackhole(relay: str) -> Drop:
    return lambda s, r, rpc: s == relay and isinstance(rpc, Event | GroupEvent)


def silent(relay: str) -> Drop:
    return lambda s, r, rpc: s == relay and isinstance(rpc, Event | GroupEvent | Digest | Heads)


def penalised(net: CoreNet, peer: str, reason: str) -> list[str]:
    """Nodes that penalised ``peer`` for ``reason``."""
    return [
        p
        for p in net.peers
        for r in net.records(p, RecordKind.PEER_PENALISED)
        if r.fields["peer"] == peer and r.fields["reason"] == reason
    ]


@pytest.mark.parametrize("attack", [blackhole, silent])
def test_a_lying_relay_cuts_nobody_off_and_is_left(attack: Callable[[str], Drop]) -> None:
    net, topic, _author, members, relay, below = tree_net()
    assert below, "the seeded tree has a relay with children"
    net.drop_if = attack(relay)
    publishers = [p for p in members if p != relay and p not in below][:3]
    cids = publish_many(net, topic, publishers, 20)
    for p in below:
        assert set(cids) <= set(net.delivered(p, topic)), p
        assert net.nodes[p].topic_state(topic).parent != relay, p  # left it
    assert set(penalised(net, relay, "withheld")) == set(below)


@pytest.mark.parametrize("attack", [blackhole, silent])
def test_planted_without_witnesses_the_subtree_is_cut_off(
    attack: Callable[[str], Drop],
) -> None:
    """The same network and relay with witnesses off: the relay's children do miss
    events (silent: for good, within the run) and stay below it."""
    net, topic, _author, members, relay, below = tree_net(witnesses=0)
    net.drop_if = attack(relay)
    publishers = [p for p in members if p != relay and p not in below][:3]
    cids = publish_many(net, topic, publishers, 20)
    missed = [p for p in below if not set(cids) <= set(net.delivered(p, topic))]
    if attack is silent:
        assert missed == below
    else:  # anti-entropy with the relay repairs, but late and from below the relay
        assert all(net.nodes[p].topic_state(topic).parent == relay for p in below)
    assert not penalised(net, relay, "withheld")


def test_a_censor_is_left_for_one_publishers_events() -> None:
    net, topic, _author, members, relay, below = tree_net()
    victim = next(p for p in members if p != relay and p not in below)
    others = [p for p in members if p not in (relay, victim) and p not in below][:2]

    def censor(s: str, r: str, rpc: object) -> bool:
        if s != relay or not isinstance(rpc, Event):
            return False
        ev = net.nodes[relay]._events.get(_event_cid(rpc))
        return ev is not None and ev[1].publisher == victim

    net.drop_if = censor
    cids = publish_many(net, topic, [victim, *others], 60)
    for p in below:
        assert set(cids) <= set(net.delivered(p, topic)), p
    recs = [
        r
        for p in below
        for r in net.records(p, RecordKind.PEER_PENALISED)
        if r.fields["peer"] == relay
    ]
    assert recs and all(r.fields["publisher"] in (victim, None) for r in recs)
    assert any(r.fields["publisher"] == victim for r in recs)


def _event_cid(rpc: Event) -> CID:
    from pulsarcast_ipfs.core import EventDescriptor

    return EventDescriptor.decode(rpc.event).cid


def test_no_honest_peer_is_penalised_under_loss() -> None:
    """5 % of all messages lost, nobody lying: every event everywhere, no penalty."""
    net, topic, _author, members, _relay, _below = tree_net(seed=2)
    net.links.loss = 0.05
    cids = publish_many(net, topic, members[:6], 60)
    net.run_for(30)
    for p in members:
        assert set(cids) <= set(net.delivered(p, topic)), p
    assert [r.fields for p in net.peers for r in net.records(p, RecordKind.PEER_PENALISED)] == []


def test_a_silent_child_is_dropped_and_refused() -> None:
    """A child that takes events and sends no DIGEST or HEADS: after six heads rounds
    with traffic its parent drops it and refuses its JOINs for ``penalty_ttl``."""
    net, topic, _author, members, relay, below = tree_net()
    child = below[0]
    net.drop_if = lambda s, r, rpc: s == child and r == relay and isinstance(rpc, Digest | Heads)
    publishers = [p for p in members if p != relay and p not in below][:2]
    for i in range(45):  # 45 s of traffic: nine heads rounds
        net.call(publishers[i % 2], "publish", topic, b"t%d" % i)
        net.run_for(1.0)
    assert penalised(net, child, "silent_child") == [relay]
    assert child not in net.nodes[relay].topic_state(topic).children
    net.inject(
        child, relay, Join(topic=topic, descriptor=_descriptor(net, topic), leaf=False, up=False)
    )
    net.run_for(1)
    assert child not in net.nodes[relay].topic_state(topic).children  # refused


def _descriptor(net: CoreNet, topic: CID) -> bytes:
    return net.store[topic]


def test_a_witness_announcing_made_up_events_frames_nobody() -> None:
    """A witness that announces CIDs nobody has (or replays old ones) gets no honest
    parent penalised; the made-up announcer is dropped as a witness."""
    net, topic, _author, _members, relay, below = tree_net()
    child = below[0]
    fakes = [CID.decode(str(c)) for c in _fake_cids(12)]
    witnesses = net.nodes[child]._guard.watched(topic)
    assert witnesses
    liar = witnesses[0]
    for i, fake in enumerate(fakes):
        net.inject(liar, child, Heads(topic=topic, heads=((fake, net.now - 0.1 * i),)))
        net.run_for(0.3)
    net.run_for(20)
    assert not penalised(net, relay, "withheld")
    assert net.nodes[child].topic_state(topic).parent == relay
    assert liar not in net.nodes[child]._guard.watched(topic)


def _fake_cids(n: int) -> list[CID]:
    from pulsarcast_ipfs.core import compute_cid

    return [compute_cid(b"\xa1amx" + bytes([i])) for i in range(n)]


def test_watch_is_validated_and_bounded() -> None:
    peers = make_peer_ids(70, seed=5)
    topic = _fake_cids(1)[0]
    with pytest.raises(Exception, match="ttl"):
        Watch(topic=topic, ttl=601)
    with pytest.raises(Exception, match="canonical"):
        Watch(topic=topic, ttl=60, filters=("ups>=10",))
    assert encode_frame(Watch(topic=topic, ttl=60))
    import random

    g = RelayGuard(
        witnesses=2,
        witness_grace=1.0,
        blame_window=2.0,
        penalty_ttl=600.0,
        silent_rounds=6,
        subnet_watchers=4,
        rng=random.Random(1),
    )
    taken = [g.on_watch(0.0, topic, p, 60, None) for p in peers]
    assert taken.count(WatchVerdict.TAKEN) == 64  # MAX_WATCHERS: the rest are not answered
    assert taken[64:] == [WatchVerdict.FULL] * 6
    assert len(g.watchers(1.0, topic)) == 64
    assert g.watchers(61.0, topic) == []  # expired


def _guard(**kw: object) -> RelayGuard:
    import random

    args: dict[str, object] = dict(
        witnesses=2,
        witness_grace=1.0,
        blame_window=2.0,
        penalty_ttl=600.0,
        silent_rounds=6,
        subnet_watchers=4,
        rng=random.Random(1),
    )
    args.update(kw)
    return RelayGuard(**args)  # type: ignore[arg-type]


def test_watchers_of_one_network_are_bounded_and_penalised_ones_make_room() -> None:
    """Sybil identities are free, networks are not: a witness takes at most
    ``subnet_watchers`` watchers of one network per topic (peers without a network
    are not counted), and a full table makes room by dropping a watcher it has
    penalised, never an honest one."""
    topic = _fake_cids(1)[0]
    sybils = make_peer_ids(20, seed=6)
    honest = make_peer_ids(70, seed=7)
    g = _guard()
    got = [g.on_watch(0.0, topic, p, 60, None, subnet="10.0.0") for p in sybils]
    assert got.count(WatchVerdict.TAKEN) == 4
    assert got[4:] == [WatchVerdict.COLOCATED] * 16
    assert g.on_watch(1.0, topic, sybils[0], 60, None, subnet="10.0.0") is WatchVerdict.TAKEN
    got = [g.on_watch(0.0, topic, p, 60, None) for p in honest]
    assert got.count(WatchVerdict.TAKEN) == 60 and got[60:] == [WatchVerdict.FULL] * 10
    g.penalise(2.0, sybils[1])
    late = honest[65]
    assert g.on_watch(2.0, topic, late, 60, None) is WatchVerdict.TAKEN
    kept = [p for p, _ in g.watchers(3.0, topic)]
    assert late in kept and sybils[1] not in kept and len(kept) == 64
    assert g.on_watch(2.0, topic, honest[66], 60, None) is WatchVerdict.FULL  # none left to drop
    assert (
        _guard(subnet_watchers=0).on_watch(0.0, topic, sybils[0], 60, None, subnet="10.0.0")
        is WatchVerdict.TAKEN
    )


def test_the_authors_list_is_preferred_once_a_witness_failed() -> None:
    """A refusal from the author carries its list: the next witnesses come from it,
    not from the list the parent passed on, and the author is not asked again
    for ``REJECT_TTL``."""
    topic = _fake_cids(1)[0]
    author, *rest = make_peer_ids(9, seed=8)
    parents_list, authors_list = tuple(rest[:4]), (author, *rest[4:])
    g = _guard(witnesses=2)

    def plan(now: float) -> tuple[tuple[str, int], ...]:
        return g.plan(
            now, topic, eligible=True, members=parents_list, author=author, exclude=set()
        ).sends

    first = {p for p, _ in plan(0.0)}
    assert first <= set(parents_list) and len(first) == 2
    sends = plan(5.0)  # unanswered ACK_WAIT after the WATCH: both dropped, and
    assert {p for p, ttl in sends if not ttl} == first
    # the author first (a witness failed), then the parent's list
    again = [p for p, ttl in sends if ttl]
    assert again[0] == author and again[1] in set(parents_list) - first
    g.author_list(6.0, topic, author, authors_list)
    assert author not in g.watched(topic)
    picked = [p for p, ttl in plan(6.5) if ttl]
    assert len(picked) == 1 and picked[0] in authors_list[1:]
    assert author not in [p for p, ttl in plan(30.0) if ttl]


def test_flat_trees_send_exactly_what_they_sent_without_witnesses() -> None:
    """Every member's parent is the author (flat trees): nobody watches, so the
    nodes' outputs are byte for byte those with witnesses off (the clean-run cost)."""

    def run(witnesses: int) -> list[tuple[str, bytes]]:
        net = CoreNet(12, seed=4, config=NodeConfig(witnesses=witnesses), loss=0.02)
        author = net.peers[0]
        topic = net.call(author, "create_topic", "flat")
        net.run_for(0.5)
        for p in net.peers[1:]:
            net.call(p, "subscribe", topic)
        net.run_for(8)
        for i in range(30):
            net.call(net.peers[1 + i % 11], "publish", topic, b"f%d" % i)
            net.run_for(0.3)
        net.run_for(20)
        assert all(net.nodes[p].topic_state(topic).parent == author for p in net.peers[1:])
        return [(s.peer, s.data) for p in net.peers for s in net.logs[p].sent]

    assert run(2) == run(0)


def test_a_silent_member_of_the_roots_list_is_dropped_by_the_root() -> None:
    """A flat tree: publishers push to the root's members directly (the root does not
    forward to them). A member that joins no anti-entropy still owes the root its
    DIGESTs, and is dropped (a Sybil holding a slot near the root)."""
    net = CoreNet(8, seed=6)
    author = net.peers[0]
    topic = net.call(author, "create_topic", "flat")
    net.run_for(0.5)
    for p in net.peers[1:]:
        net.call(p, "subscribe", topic)
    net.run_for(8)  # joined, MEMBERS out
    sybil = net.peers[3]
    assert sybil in net.nodes[author].topic_state(topic).children
    net.drop_if = lambda s, r, rpc: s == sybil and isinstance(rpc, Digest | Heads)
    publishers = [p for p in net.peers[1:] if p != sybil]
    for i in range(45):
        net.call(publishers[i % len(publishers)], "publish", topic, b"p%d" % i)
        net.run_for(1.0)
    assert penalised(net, sybil, "silent_child") == [author]
    assert sybil not in net.nodes[author].topic_state(topic).children
    others = [p for p in publishers if p in net.nodes[author].topic_state(topic).children]
    assert not [p for p in others if penalised(net, p, "silent_child")]


def test_a_silent_child_of_an_idle_topic_is_probed_and_dropped() -> None:
    """A topic where nothing is published: no child owes the root a DIGEST, so only
    the root's idle probes (an empty HEADS, answered by one) tell a silent Sybil
    from an idle honest child. The silent one is dropped within a minute and a half
    of virtual time; no honest child is, with 5 % loss on every link. (Without the
    probes the root keeps the Sybil.)"""
    net = CoreNet(8, seed=9, loss=0.05)
    author = net.peers[0]
    topic = net.call(author, "create_topic", "idle")
    net.run_for(0.5)
    for p in net.peers[1:]:
        net.call(p, "subscribe", topic)
    net.run_for(8)
    sybil = net.nodes[author].topic_state(topic).children[0]
    honest = [p for p in net.peers[1:] if p != sybil]
    net.drop_if = lambda s, r, rpc: s == sybil and isinstance(rpc, Digest | Heads)
    net.run_for(90)
    # (in the topic and in its metadata topic, idle as well)
    assert set(penalised(net, sybil, "silent_child")) == {author}
    assert sybil not in net.nodes[author].topic_state(topic).children
    assert all(net.nodes[p].topic_state(topic).parent is not None for p in honest)
    assert not [p for p in honest if set(penalised(net, p, "silent_child")) - {sybil}]
    net.run_for(600)  # ten idle minutes: probes lost now and then, nobody dropped
    assert all(net.nodes[p].topic_state(topic).parent is not None for p in honest)
    assert not [p for p in honest if set(penalised(net, p, "silent_child")) - {sybil}]


def test_a_stale_child_that_watches_its_former_parent_is_let_go_not_penalised() -> None:
    """A peer takes a node for its child (the JOIN_ACK, or later the node's LEAVE, was
    lost) while the node sits below another parent and watches that peer as a
    witness. The peer's idle probes reach the node as a witness's HEADS, never
    answered; but the node's WATCH tells the peer it is no child of its: it is let
    go (LEAVE), not dropped as silent. (Without that, it is penalised.)"""
    net, topic, _author, _members, relay, below = tree_net()
    child = below[0]
    witness = net.nodes[child]._guard.watched(topic)[0]
    net.drop_if = lambda s, r, rpc: s == witness and r == child and isinstance(rpc, JoinAck)
    join = Join(topic=topic, descriptor=_descriptor(net, topic), leaf=False, up=False)
    net.inject(child, witness, join)
    net.run_for(0.5)
    assert child in net.nodes[witness].topic_state(topic).children  # stale
    assert net.nodes[child].topic_state(topic).parent == relay
    net.run_for(120)  # idle: probes after six quiet rounds, WATCH refreshes every 20 s
    assert child not in net.nodes[witness].topic_state(topic).children
    assert not penalised(net, child, "silent_child")
    assert net.nodes[child].topic_state(topic).parent == relay


def test_a_silent_child_cannot_dodge_by_leaving_and_joining_again() -> None:
    """A silent child that LEAVEs its parent for six seconds in every ten (a heads
    round falls in each gap, so it is never a child for six rounds in a row) and
    JOINs again still owes the rounds it was fed in, and is dropped and refused
    like one that stays. (Without the carried count it is never dropped.)"""
    net, topic, _author, members, relay, below = tree_net()
    child = below[0]

    def drop(s: str, r: str, rpc: object) -> bool:
        if s == child and r == relay:
            return isinstance(rpc, Digest | Heads | Event | Leave)  # silent; leaves are ours
        return s == relay and r == child and isinstance(rpc, Leave)  # it ignores LEAVEs

    net.drop_if = drop
    publishers = [p for p in members if p != relay and p not in below][:2]
    join = Join(topic=topic, descriptor=_descriptor(net, topic), leaf=False, up=False)
    for i in range(120):  # 120 s of traffic: twenty-four heads rounds
        if i % 10 == 0:
            net.inject(child, relay, Leave(topic=topic))
        elif i % 10 == 6:
            net.inject(child, relay, join)
        net.call(publishers[i % 2], "publish", topic, b"c%d" % i)
        net.run_for(1.0)
    assert penalised(net, child, "silent_child") == [relay]
    net.inject(child, relay, join)
    net.run_for(1)
    assert child not in net.nodes[relay].topic_state(topic).children  # refused


def test_a_silent_parent_claiming_to_miss_everything_is_still_left() -> None:
    """A silent relay that, twice a second, sends its children a DIGEST listing
    nothing (it claims to miss everything): each child answers with HEADS entries of
    what it has, the events it fetched on its witnesses' word among them. Telling the
    parent of an event after fetching it elsewhere is no delivery by the parent, so
    the claim games no score: the children leave it as they leave any silent relay.
    (Scored as a delivery, the relay keeps every child.)"""
    net, topic, _author, members, relay, below = tree_net()
    net.drop_if = silent(relay)
    publishers = [p for p in members if p != relay and p not in below][:3]
    cids = []
    for i in range(40):
        cids.append(net.call(publishers[i % 3], "publish", topic, b"g%d" % i).event_cid)
        for _ in range(2):
            net.run_for(0.25)
            for p in below:
                if net.nodes[p].topic_state(topic).parent == relay:
                    claim = Digest(
                        topic=topic, lo=net.now - 60.0, hi=net.now, count=0, sum=0, have=()
                    )
                    net.inject(relay, p, claim)
    net.run_for(15)
    for p in below:
        assert set(cids) <= set(net.delivered(p, topic)), p
        assert net.nodes[p].topic_state(topic).parent != relay, p
    assert set(penalised(net, relay, "withheld")) == set(below)


def _first_hop_lost(net: CoreNet, publisher: str, relay: str) -> Drop:
    """The relay is silent (no EVENT, DIGEST, HEADS); the first copy of each EVENT
    the publisher sends to anyone else (its first hop, a push to the author) is lost
    on the way."""
    sent_once: set[tuple[str, CID]] = set()

    def drop(s: str, r: str, rpc: object) -> bool:
        if s == relay:
            return isinstance(rpc, Event | GroupEvent | Digest | Heads)
        if s != publisher or r == relay or not isinstance(rpc, Event):
            return False
        key = (r, _event_cid(rpc))
        if key in sent_once:
            return False
        sent_once.add(key)
        return True

    return drop


def _own_event_below_a_silent_relay() -> tuple[CoreNet, CID, list[str], str, list[CID]]:
    net, topic, _author, members, relay, below = tree_net()
    publisher = below[0]
    net.drop_if = _first_hop_lost(net, publisher, relay)
    cids = publish_many(net, topic, [publisher], 3)
    others = [p for p in members if p not in (relay, publisher)]
    return net, topic, others, publisher, cids


def test_an_own_event_withheld_by_the_parent_gets_out_through_the_witnesses() -> None:
    """A publisher below a silent relay whose first hop was lost: no witness announces
    its event back, so it pushes it again to them and the author (wire 2.11), and
    everyone gets it; still below the relay (three events are no reason to leave)."""
    net, topic, others, publisher, cids = _own_event_below_a_silent_relay()
    for p in others:
        assert set(cids) <= set(net.delivered(p, topic)), p
    assert net.nodes[publisher].guard_counts["own_pushes"] >= len(cids)


def test_planted_without_the_own_event_check_the_event_stays_with_the_relay() -> None:
    def ignore(self, now, key, cid):  # type: ignore[no-untyped-def]
        return None

    saved = RelayGuard.published
    RelayGuard.published = ignore  # type: ignore[method-assign]
    try:
        net, topic, others, _publisher, cids = _own_event_below_a_silent_relay()
    finally:
        RelayGuard.published = saved  # type: ignore[method-assign]
    assert all(not set(cids) & set(net.delivered(p, topic)) for p in others)


def test_own_events_are_announced_back_and_not_pushed_again_in_a_clean_run() -> None:
    net, topic, _author, members, _relay, _below = tree_net(seed=3)
    publish_many(net, topic, members[:10], 40)
    assert sum(net.nodes[p].guard_counts["own_pushes"] for p in net.peers) == 0
    watched = [p for p in members[:10] if net.nodes[p]._guard.watched(topic)]
    assert watched, "some publishers sit below a relay and watch witnesses"


def test_a_witness_dropped_for_a_lost_answer_is_chosen_again_later() -> None:
    """A WATCH answer lost (one refresh in ten at 5 % loss each way) drops the
    witness; were it dropped for good, a node whose every witness and the author
    were dropped so would watch nobody below a withholding parent."""
    import random

    topic = _fake_cids(1)[0]
    (author,) = make_peer_ids(1, seed=9)
    g = RelayGuard(
        witnesses=1,
        witness_grace=1.0,
        blame_window=2.0,
        penalty_ttl=600.0,
        silent_rounds=6,
        subnet_watchers=4,
        rng=random.Random(1),
    )

    def plan(now: float) -> tuple[tuple[str, int], ...]:
        return g.plan(now, topic, eligible=True, members=(), author=author, exclude=set()).sends

    assert plan(0.0) == ((author, 60),)
    assert plan(5.0) == ((author, 0),)  # no answer ACK_WAIT (3 s) after the WATCH
    assert g.watched(topic) == ()  # dropped as silent
    assert plan(10.0) == () and plan(50.0) == ()
    assert plan(66.0) == ((author, 60),)  # REJECT_TTL later: chosen again


def _below_a_silent_relay_with_the_author_full() -> tuple[CoreNet, CID, str, list[str], list[CID]]:
    """Relays pass no MEMBERS list down (only the root's children hold one), so the
    nodes deeper down can watch nobody but the author, whose watcher table is full
    (Sybils holding its slots); then the relay with the most children goes silent."""
    config = NodeConfig(flat_fanout=0, dead_after=10)
    net = CoreNet(30, seed=1, config=config, bucket_size=4)
    author = net.peers[0]
    topic = net.call(author, "create_topic", "news")
    net.run_for(0.5)
    for fake in make_peer_ids(64, seed=99):
        net.inject(fake, author, Watch(topic=topic, ttl=600))
    net.drop_if = lambda s, r, rpc: isinstance(rpc, Members) and s != author
    members = net.peers[1:]
    for p in members:
        net.call(p, "subscribe", topic)
    net.run_for(12)
    below: dict[str, list[str]] = {}
    for p in members:
        parent = net.nodes[p].topic_state(topic).parent
        if parent not in (None, author):
            below.setdefault(parent, []).append(p)
    relay = max(sorted(below), key=lambda r: len(below[r]))
    hidden = below[relay]
    assert hidden, "the seeded tree has a relay with children"
    lists = silent(relay)
    net.drop_if = lambda s, r, rpc: lists(s, r, rpc) or (isinstance(rpc, Members) and s != author)
    publishers = [p for p in members if p != relay and p not in hidden][:3]
    cids = publish_many(net, topic, publishers, 20)
    return net, topic, relay, hidden, cids


def test_a_full_author_sends_its_list_and_the_nodes_below_a_silent_relay_get_everything() -> None:
    net, topic, relay, hidden, cids = _below_a_silent_relay_with_the_author_full()
    for p in hidden:
        assert set(cids) <= set(net.delivered(p, topic)), p
    assert set(penalised(net, relay, "withheld")) == set(hidden)


def test_planted_a_full_author_that_sends_nothing_leaves_them_cut_off() -> None:
    """The same network with the author's refusal silent (as before wire 2.12): the
    nodes below the relay have no witness and miss events for good."""
    from pulsarcast_ipfs.core._push import FirstHopPush

    def nothing(self, now, tree, peer):  # type: ignore[no-untyped-def]
        return None

    saved = FirstHopPush._offer_members
    FirstHopPush._offer_members = nothing  # type: ignore[method-assign]
    try:
        net, topic, relay, hidden, cids = _below_a_silent_relay_with_the_author_full()
    finally:
        FirstHopPush._offer_members = saved  # type: ignore[method-assign]
    assert all(not set(cids) <= set(net.delivered(p, topic)) for p in hidden)
    assert not penalised(net, relay, "withheld")
