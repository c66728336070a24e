"""Filters in the tree, second part: pruning on the summaries.

With ``NodeConfig.tree_filters`` an event goes down only into subtrees whose summary
matches it (and a publisher's first hop only to the members whose summary matches).
What must hold, on trees several levels deep with several publishers:

* every subscriber is delivered exactly the events its filter matches, in causal
  order (through the unwanted events in between: EVENT's ``parents``);
* no EVENT goes down into a subtree whose summary does not match it;
* a filtered node never fetches an event its subtree does not want: not as a
  missing parent (causal delivery, history), not through anti-entropy;
* a filtered subscriber's history is complete, of what it wants.

Each property has a planted violation below that fails it.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pulsarcast_ipfs.core import (
    Event,
    EventDescriptor,
    Filter,
    GroupEvent,
    NodeConfig,
    UnknownTopic,
    matches,
    matches_any,
    parse_filter,
)
from pulsarcast_ipfs.core._antientropy import AntiEntropy
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._dissemination import Dissemination
from pulsarcast_ipfs.core._pruning import Pruning
from pulsarcast_ipfs.core.testing import CoreNet
from pulsarcast_ipfs.records import RecordKind
from pulsarcast_ipfs.testing import FetchLog

ON = NodeConfig(tree_filters=True, summary_interval=1.0, summary_bound=4, flat_fanout=0)
FLAT = NodeConfig(tree_filters=True, summary_interval=1.0)
FILTERS = [
    "ups >= 40",
    "controversiality = 1 and ups > 30",
    "user = 'alice'",
    "ups between 3 and 5",
    "user in ['bob', 'carol'] and ups > 50",
]


def attrs(rng: random.Random) -> dict[str, int | str]:
    return {
        "ups": rng.randrange(60),
        "controversiality": rng.randrange(2),
        "user": rng.choice(["alice", "bob", "carol", "dave"]),
    }


def run(
    *, config: NodeConfig = ON, loss: float = 0.0, seed: int = 5, events: int = 120
) -> tuple[FetchLog, CID, dict[str, Filter | None], dict[CID, EventDescriptor]]:
    """A topic on 16 nodes; most subscribe with a filter (a few with none); the
    author and three subscribers publish concurrently. The published events by CID."""
    net = FetchLog(16, seed=seed, config=config, bucket_size=2, latency=0.05, loss=loss)
    author = net.peers[0]
    topic: CID = net.call(author, "create_topic", "reddit")
    net.run_for(0.5)
    rng = random.Random(seed)
    subs: dict[str, Filter | None] = {}
    for i, p in enumerate(net.peers[1:]):
        text = None if i % 5 == 4 else FILTERS[i % len(FILTERS)]
        where = parse_filter(text) if text is not None else None
        net.call(p, "subscribe", topic, filter=where)
        subs[p] = where
    net.run_for(20)  # the tree settles, summaries are in
    publishers = [author, *list(subs)[:3]]
    for _ in range(events):
        net.call(rng.choice(publishers), "publish", topic, b"x", attributes=attrs(rng))
        net.run_for(0.02)
    net.run_for(60)  # anti-entropy rounds, repairs
    published = {}
    history = net.nodes[author]._trees[topic].history
    assert history is not None
    for cid in history.newest():  # the index; the bodies are in the block store
        published[cid] = EventDescriptor.decode(net.store[cid], expected_cid=cid)
    assert len(published) == events
    return net, topic, subs, published


def wants(where: Filter | None, ev: EventDescriptor) -> bool:
    return where is None or matches(where, ev.attributes)


def ancestors(published: dict[CID, EventDescriptor]) -> dict[CID, set[CID]]:
    memo: dict[CID, set[CID]] = {}
    for cid in sorted(published, key=lambda c: published[c].order_key):
        acc: set[CID] = set()
        for p in published[cid].parents:
            acc.add(p)
            acc |= memo.get(p, set())
        memo[cid] = acc
    return memo


def check_deliveries(
    net: CoreNet,
    topic: CID,
    subs: dict[str, Filter | None],
    published: dict[CID, EventDescriptor],
    *,
    causal: bool = True,
) -> None:
    anc = ancestors(published)
    for p, where in subs.items():
        got = net.delivered(p, topic)
        assert len(got) == len(set(got)), "a duplicate delivery"
        want = {c for c, ev in published.items() if wants(where, ev)}
        assert set(got) == want, (p, len(set(got) - want), len(want - set(got)))
        pos = {c: i for i, c in enumerate(got)}
        for c in (
            got if causal else ()
        ):  # causal order, through the events this subscriber did not get
            for a in anc[c]:
                if a in pos:
                    assert pos[a] < pos[c], "delivered before an ancestor"


def unwanted_fetches(
    net: FetchLog, topic: CID, published: dict[CID, EventDescriptor]
) -> list[tuple[str, CID]]:
    out = []
    for peer, cid in net.fetched:
        ev = published.get(cid)
        if ev is None:
            continue  # a topic block
        try:
            own = net.nodes[peer]._trees[topic].summary_filters
        except KeyError:
            continue
        if own is not None and not matches_any(own, ev.attributes) and ev.publisher != peer:
            out.append((peer, cid))
    return out


def test_pruned_trees_deliver_exactly_the_matches_in_causal_order() -> None:
    net, topic, subs, published = run()
    check_deliveries(net, topic, subs, published)
    totals = {"down": 0, "false_positive": 0, "pruned": 0}
    for p in net.peers:
        for k, v in net.nodes[p].filter_forwards.items():
            totals[k] += v
    assert totals["pruned"] > totals["down"] > 0
    assert totals["false_positive"] < totals["down"] // 4  # merges widen a little
    # Nothing went down into a subtree whose summary did not match it.
    for p in net.peers:
        for s in net.logs[p].sent:
            if not isinstance(s.rpc, Event) or s.rpc.topic != topic:
                continue
            tree = net.nodes[p]._trees.get(topic)
            if tree is None or s.peer not in tree.child_summaries:
                continue
            ev = EventDescriptor.decode(s.rpc.event)
            assert matches_any(tree.child_summaries[s.peer], ev.attributes)


def pruned(net: CoreNet) -> int:
    return sum(net.nodes[p].filter_forwards["pruned"] for p in net.peers)


def held_back(net: CoreNet, peers: list[str]) -> int:
    """Deliveries that waited ``parent_grace`` or longer: for a parent that never
    came (a filtered node does not fetch an unknown parent: it waits, then goes)."""
    grace = NodeConfig().parent_grace
    return sum(
        1
        for p in peers
        for r in net.records(p, RecordKind.EVENT_DELIVERED)
        if float(r.fields["latency"]) >= grace  # type: ignore[arg-type]
    )


def test_filtered_nodes_neither_fetch_nor_wait_for_what_they_do_not_want() -> None:
    """A filtered node does not fetch an unknown parent (it waits ``parent_grace``
    for it, then goes); with EVENT's ``parents`` it hardly ever waits: only for a
    parent the sender did not hold yet when it forwarded the event (links here are
    not FIFO). Measured: 0 unwanted fetches; 14 of 318 deliveries held back (180
    without ``parents``, the planted test below)."""
    net, topic, subs, published = run()
    assert not unwanted_fetches(net, topic, published)
    filtered = [p for p, w in subs.items() if w is not None]
    deliveries = sum(len(net.delivered(p, topic)) for p in filtered)
    assert held_back(net, filtered) <= deliveries // 10
    for p, where in subs.items():
        tree = net.nodes[p]._trees[topic]
        h = tree.history
        assert h is not None
        assert h.complete, (p, len(h.missing))
        if where is not None:
            for cid in h.newest():
                ev = published[cid]
                assert ev.publisher == p or matches_any(tree.summary_filters or (), ev.attributes)


def test_loss_is_still_repaired_without_fetching_the_unwanted() -> None:
    net, topic, subs, published = run(loss=0.05, seed=7)
    # (Not in causal order through the unwanted events: an event recovered by a
    # fetch after a loss names its own parents, not the ones our parent rewrote.)
    check_deliveries(net, topic, subs, published, causal=False)
    # A lost event is found again by the DIGESTs; its unknown parents are not
    # fetched. Measured (seeds 7, 8, 9): 19, 0, 3 unwanted fetches for 1,107, 783,
    # 709 sends pruned (HEADS of events a neighbour has and we do not, advertised
    # while our summary and its view of it differ).
    assert len(unwanted_fetches(net, topic, published)) <= pruned(net) // 25


def test_flat_trees_prune_the_first_hop_too() -> None:
    net, topic, subs, published = run(config=FLAT, seed=3)
    check_deliveries(net, topic, subs, published)
    assert not unwanted_fetches(net, topic, published)
    author = net.peers[0]
    assert all(net.nodes[p].topic_state(topic).parent == author for p in subs)
    pushed = pruned_pushes = 0
    for p in subs:
        for s in net.logs[p].sent:
            if isinstance(s.rpc, Event) and s.rpc.pushed is not None and s.peer != author:
                pushed += 1
                ev = EventDescriptor.decode(s.rpc.event)
                dst = net.nodes[s.peer]._trees[topic].summary_filters
                assert dst is None or matches_any(dst, ev.attributes)
        pruned_pushes += net.nodes[p].filter_forwards["pruned"]
    assert pushed > 0 and pruned_pushes > pushed


# ----------------------------------------------------------------- planted violations


@contextmanager
def planted(cls: type, name: str, replacement: object) -> Iterator[None]:
    old = vars(cls)[name]  # as defined (a staticmethod stays one)
    setattr(cls, name, replacement)
    try:
        yield
    finally:
        setattr(cls, name, old)


def test_planted_no_parents_rewrite_is_caught() -> None:
    """Without EVENT's ``parents`` a filtered node waits for the unwanted parents of
    what it gets."""

    def plain(self, now, tree, peer, rpc, data, summary, ev):  # type: ignore[no-untyped-def]
        self._send(now, peer, rpc, tree.name, data)

    with planted(Dissemination, "_send_pruned", plain):
        net, topic, subs, _ = run()
    filtered = [p for p, w in subs.items() if w is not None]
    deliveries = sum(len(net.delivered(p, topic)) for p in filtered)
    assert held_back(net, filtered) > deliveries // 10


def test_planted_unfiltered_digest_window_is_caught() -> None:
    """With the pruned events in the parent's DIGEST windows, anti-entropy takes
    them for gaps and the child fetches them."""
    original = AntiEntropy._window_items

    def unfiltered(self, tree, lo, hi, peer=None):  # type: ignore[no-untyped-def]
        return original(self, tree, lo, hi, None)

    with planted(AntiEntropy, "_window_items", unfiltered):
        net, topic, _, published = run()
    assert len(unwanted_fetches(net, topic, published)) > pruned(net) // 50


@pytest.mark.parametrize("seed", [11])
def test_planted_pruning_off_the_first_hop_is_caught(seed: int) -> None:
    """A publisher that pushes to every member sends down what nobody wanted."""

    def everything(self, tree, peer):  # type: ignore[no-untyped-def]
        return None

    from pulsarcast_ipfs.core._pruning import Pruning

    with planted(Pruning, "_target_summary", everything):
        net, topic, subs, _ = run(config=FLAT, seed=seed)
    sent_unwanted = 0
    for p in net.peers:
        for s in net.logs[p].sent:
            if isinstance(s.rpc, Event) and s.peer in subs:
                ev = EventDescriptor.decode(s.rpc.event)
                try:
                    own = net.nodes[s.peer]._trees[topic].summary_filters
                except (KeyError, UnknownTopic):
                    continue
                if own is not None and not matches_any(own, ev.attributes):
                    sent_unwanted += 1
    assert sent_unwanted > 0


def fast_filtered(seed: int = 7) -> tuple[FetchLog, CID, list[str], list[CID], list[CID]]:
    """Fast subscriptions with a filter on a deep tree (the group short-cuts it):
    three unwanted events between two wanted ones, all from one publisher."""
    cfg = NodeConfig(group_capacity=3, group_spare=4, group_refresh=2.0, flat_fanout=0)
    net = FetchLog(14, seed=seed, config=cfg, bucket_size=1)
    author = net.peers[0]
    topic: CID = net.call(author, "create_topic", "news")
    net.run_for(0.5)
    members = net.peers[1:13]
    for p in members:
        net.call(p, "subscribe", topic, fast=True, filter=parse_filter("ups >= 10"))
    net.run_for(5)
    wanted, unwanted = [], []
    for i in range(16):
        ups = 0 if i % 4 else 20
        op = net.call(author, "publish", topic, f"e{i}".encode(), attributes={"ups": ups})
        (wanted if ups >= 10 else unwanted).append(op.event_cid)
        net.run_for(0.3)
    net.run_for(10)
    for p in members:
        assert sorted(net.delivered(p, topic), key=bytes) == sorted(wanted, key=bytes)
    return net, topic, members, wanted, unwanted


def group_copies_unwanted(net: CoreNet, unwanted: list[CID]) -> tuple[int, int]:
    """GROUP_EVENTs sent, and of those the ones carrying an unwanted event."""
    sent = bad = 0
    lost = set(unwanted)
    for p in net.peers:
        for s in net.logs[p].sent:
            if isinstance(s.rpc, GroupEvent):
                sent += 1
                bad += EventDescriptor.decode(s.rpc.event).cid in lost
    return sent, bad


def test_a_filtered_group_sends_only_the_matching_events() -> None:
    """GROUP_JOIN carries the member's filter (GROUP_ASSIGN passes it on to the
    helper): no group copy of an unwanted event; the tree's copy of a wanted one
    names the parents as the member sees them, so the group copy that came first
    does not wait for (nor fetch) the unwanted parents."""
    net, _, members, wanted, unwanted = fast_filtered()
    sent, bad = group_copies_unwanted(net, unwanted)
    assert sent >= len(wanted) and bad == 0
    assert not [c for _, c in net.fetched if c in set(unwanted)]
    assert held_back(net, members) == 0


def test_planted_group_without_filters_is_caught() -> None:
    from pulsarcast_ipfs.core._fastgroup import FastGroups

    def everything(self, tree, member, ev):  # type: ignore[no-untyped-def]
        return True

    with planted(FastGroups, "_group_wants", everything):
        net, _, _, _, unwanted = fast_filtered()
    assert group_copies_unwanted(net, unwanted)[1] > 0


def test_planted_no_late_parents_is_caught() -> None:
    from pulsarcast_ipfs.core._pruning import Pruning

    def ignore(self, now, tree, ev, parents, recovered):  # type: ignore[no-untyped-def]
        return None

    with planted(Pruning, "_late_parents", ignore):
        net, _, members, _, _ = fast_filtered()
    # 0 when honest (the test above). Measured with the plant: 12, one wanted
    # event held back at every member (16-22 before idle probes' empty HEADS
    # stopped drawing history from a child).
    assert held_back(net, members) > 0


def test_a_walk_past_its_reach_does_not_hold_the_event_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rare filters on a wide DAG: the walk to the nearest wanted ancestors can pass
    its budget. An unwanted ancestor beyond it is left out of ``parents``, not named
    (named, the receiver would wait ``parent_grace`` for an event it never gets).
    Measured with a budget of 16: 0 deliveries held back; 43 when the walk named
    what it could not expand (planted)."""
    from pulsarcast_ipfs.core import _pruning

    monkeypatch.setattr(_pruning, "_WALK_BUDGET", 16)
    rare = ["ups >= 59", "user = 'alice' and ups > 57", "ups between 3 and 3", "ups <= 0"]
    monkeypatch.setattr(sys.modules[__name__], "FILTERS", rare)
    net, topic, subs, published = run(config=FLAT, seed=3, events=400)
    check_deliveries(net, topic, subs, published, causal=False)
    filtered = [p for p, w in subs.items() if w is not None]
    assert held_back(net, filtered) == 0


def _parents_sent(net: CoreNet, topic: CID) -> tuple[int, int]:
    """(EVENT frames with ``parents``, CIDs named in them) over the whole net."""
    frames = named = 0
    for p in net.peers:
        for s in net.logs[p].sent:
            if isinstance(s.rpc, Event) and s.rpc.topic == topic and s.rpc.parents is not None:
                frames += 1
                named += len(s.rpc.parents)
    return frames, named


def _unreduced(self, out, own):  # type: ignore[no-untyped-def]
    return out


def _redundant(net: CoreNet, topic: CID, published: dict[CID, EventDescriptor]) -> int:
    """CIDs named in EVENT ``parents`` (not the event's own parents) that are
    ancestors of another CID the same list names."""
    anc = ancestors(published)
    count = 0
    for p in net.peers:
        for s in net.logs[p].sent:
            if not isinstance(s.rpc, Event) or s.rpc.topic != topic or s.rpc.parents is None:
                continue
            own = set(EventDescriptor.decode(s.rpc.event).parents)
            for c in s.rpc.parents:
                if c in published and c not in own:
                    count += any(c in anc[o] for o in s.rpc.parents if o in anc)
    return count


@pytest.mark.parametrize("config", [ON, FLAT], ids=["deep", "flat"])
def test_parents_lists_leave_out_the_ancestors_of_another_and_deliver_the_same(
    config: NodeConfig,
) -> None:
    """EVENT's ``parents`` leaves out the events that are ancestors of another it
    names (besides the event's own parents), as far as the sender knows when it sends
    (an event it holds later may show one more): the same deliveries, in causal
    order, with fewer CIDs than without the reduction (the differential run)."""
    net, topic, subs, published = run(config=config)
    check_deliveries(net, topic, subs, published)
    with planted(Pruning, "_reduced", _unreduced):
        base, btopic, bsubs, bpublished = run(config=config)
    check_deliveries(base, btopic, bsubs, bpublished)
    frames, named = _parents_sent(net, topic)
    base_frames, base_named = _parents_sent(base, btopic)
    redundant, base_redundant = (
        _redundant(net, topic, published),
        _redundant(base, btopic, bpublished),
    )
    assert frames > 0 and base_frames > 0
    assert named / frames < 0.8 * (base_named / base_frames)
    assert redundant < base_redundant / 4


def _lost_on_the_way_up() -> tuple[FetchLog, CID, str, CID]:
    """A filtered publisher's event its own summary does not match, every EVENT copy
    of it from the publisher lost: only the publisher holds it, and anti-entropy on
    the publisher's up edge must carry it (to the root, and down to who wants it)."""
    net = FetchLog(12, seed=11, config=ON, bucket_size=2, latency=0.05)
    author = net.peers[0]
    topic: CID = net.call(author, "create_topic", "reddit")
    net.run_for(0.5)
    for i, p in enumerate(net.peers[1:]):
        where = "ups >= 40" if i % 2 else "ups between 3 and 5"
        net.call(p, "subscribe", topic, filter=parse_filter(where))
    net.run_for(20)
    publisher = next(
        p
        for p in net.peers[1:]
        if net.nodes[p]._trees[topic].filters == (parse_filter("ups >= 40"),)
        and net.nodes[p].topic_state(topic).parent != author
    )

    def lose_its_copies(a: str, b: str, rpc: object) -> bool:
        return a == publisher and isinstance(rpc, Event) and rpc.topic == topic

    net.drop_if = lose_its_copies
    res = net.call(publisher, "publish", topic, b"up", attributes={"ups": 4})
    net.run_for(0.5)
    net.drop_if = None
    net.run_for(40)  # DIGEST rounds
    return net, topic, publisher, res.event_cid


def test_an_event_lost_on_its_way_up_a_filtered_edge_is_repaired() -> None:
    net, topic, _, event = _lost_on_the_way_up()
    want = parse_filter("ups between 3 and 5")
    wanting = [p for p in net.peers[1:] if net.nodes[p]._trees[topic].filters == (want,)]
    assert wanting
    for p in wanting:
        assert event in net.delivered(p, topic), p
    assert event in net.nodes[net.peers[0]]._trees[topic].recent  # the root has it


def test_planted_window_without_the_up_edge_events_is_caught() -> None:
    """Without the events that went up in the window of a child -> parent edge, the
    event above reaches nobody."""
    orig = AntiEntropy._window_items

    def no_up(self, tree, lo, hi, peer=None):  # type: ignore[no-untyped-def]
        edge = tree.edges.get(peer) if peer is not None else None
        if edge is None:
            return orig(self, tree, lo, hi, peer)
        saved, edge.up = edge.up, set()
        try:
            return orig(self, tree, lo, hi, peer)
        finally:
            edge.up = saved

    with planted(AntiEntropy, "_window_items", no_up):
        net, topic, publisher, event = _lost_on_the_way_up()
    others = [p for p in net.peers if p != publisher]
    assert not any(event in net.delivered(p, topic) for p in others)
