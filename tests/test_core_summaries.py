"""Filters in the tree, first part: subtree summaries.

With ``NodeConfig.tree_filters`` a child tells its parent what its subtree wants
(JOIN's ``summary``, SUMMARY when it changes, rate-limited and coalesced), relays
merge within ``summary_bound`` (never narrower), a re-join carries the summary, and
EVENTs sent into subtrees whose summary does not match are counted as false
positives. Off, the wire is exactly that of 2.4.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

import pytest

from pulsarcast_ipfs.core import (
    Event,
    EventDescriptor,
    Filter,
    Join,
    NodeConfig,
    Summary,
    TopicState,
    UnknownTopic,
    matches,
    matches_any,
    parse_filter,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core.testing import CoreNet
from pulsarcast_ipfs.records import RecordKind

# No flat trees (``flat_fanout=0``): relays stay between subscribers and the root, so
# summaries are merged through several levels (a flat tree is one level deep).
ON = NodeConfig(tree_filters=True, summary_interval=1.0, summary_bound=4, flat_fanout=0)
FILTERS = [
    "ups >= 10",
    "controversiality = 1",
    "user = 'alice'",
    "ups between 3 and 5 and controversiality = 0",
    "user in ['bob', 'carol'] and ups > 40",
]


def setup(
    n: int = 14,
    *,
    config: NodeConfig = ON,
    seed: int = 5,
    pick: Callable[[random.Random], Filter | None] | None = None,
) -> tuple[CoreNet, CID, str, dict[str, Filter | None]]:
    """A topic; other nodes subscribe, each with ``pick(rng)`` (by default 70 % of
    them, with one of FILTERS or none)."""
    net = CoreNet(n, seed=seed, config=config, bucket_size=2)
    author = net.peers[0]
    topic: CID = net.call(author, "create_topic", "reddit")
    net.run_for(0.5)
    rng = random.Random(seed)
    subs: dict[str, Filter | None] = {}
    for p in net.peers[1:]:
        if pick is not None:
            where = pick(rng)
        elif rng.random() < 0.7:
            text = rng.choice([*FILTERS, None])
            where = parse_filter(text) if text is not None else None
        else:
            continue
        net.call(p, "subscribe", topic, filter=where)
        subs[p] = where
    net.run_for(20)  # the tree settles
    return net, topic, author, subs


def states(net: CoreNet, topic: CID) -> dict[str, TopicState]:
    """Every node's place in the topic's tree (nodes outside it left out)."""
    out = {}
    for p in net.peers:
        try:
            out[p] = net.nodes[p].topic_state(topic)
        except UnknownTopic:
            continue
    return out


def sent(net: CoreNet, peer: str, kind: type) -> list[object]:
    return [s.rpc for s in net.logs[peer].sent if isinstance(s.rpc, kind)]


def attrs(rng: random.Random) -> dict[str, int | str]:
    return {
        "ups": rng.randrange(60),
        "controversiality": rng.randrange(2),
        "user": rng.choice(["alice", "bob", "carol", "dave"]),
    }


def test_every_ancestor_summary_covers_every_subscriber_below() -> None:
    """Never narrower: whatever a subscriber's filter matches, its parent's entry for
    it and every ancestor's subtree summary match too (checked on random events)."""
    net, topic, _, subs = setup()
    rng = random.Random(1)
    samples = [attrs(rng) for _ in range(300)] + [{}]
    state = states(net, topic)
    checked = 0
    for p, where in subs.items():
        wanted = [m for m in samples if where is None or matches(where, m)]
        cur, child = state[p].parent, p
        while cur is not None:
            node = net.nodes[cur]
            tree = node._trees[topic]
            entry = tree.child_summaries.get(child)
            summary = [parse_filter(t) for t in node.subtree_summary(topic)]
            for m in wanted:
                assert entry is None or matches_any(entry, m), (p, cur, m)
                assert matches_any(summary, m), (p, cur, m)
                checked += 1
            cur, child = state[cur].parent, cur
    assert checked > 1000
    for p in state:  # each neighbour entry within the bound
        for entry in net.nodes[p]._trees[topic].child_summaries.values():
            assert len(entry) <= ON.summary_bound


# Narrow, disjoint ranges of ``ups``: with ``summary_bound=1`` a relay with two of them
# in its subtree merges them into their hull (``ups between 3 and 55`` for 3-5 and
# 50-55), so its parent sends it the events in the gap, which nobody below wants.
RANGES = [f"ups between {lo} and {lo + 2}" for lo in range(0, 100, 12)]
NARROW = dataclasses.replace(ON, summary_bound=1)


def narrow_run(seed: int = 5) -> tuple[CoreNet, CID, dict[str, Filter | None], int]:
    """A topic whose subscribers all have one of RANGES, 40 events of random ``ups``;
    returns the net, the topic, the subscriptions and the false positives counted by
    a recount from the tree: EVENTs sent to a child whose subtree has no subscriber
    that wants them."""
    net, topic, author, subs = setup(
        16, config=NARROW, seed=seed, pick=lambda rng: parse_filter(rng.choice(RANGES))
    )
    rng = random.Random(seed)
    for _ in range(40):
        net.call(author, "publish", topic, b"x", attributes={"ups": rng.randrange(100)})
        net.run_for(0.2)
    net.run_for(3)
    state = states(net, topic)

    def subtree(p: str) -> list[str]:
        return [p, *(q for c in state[p].children for q in subtree(c))]

    unwanted_down = 0
    for p in state:
        for s in net.logs[p].sent:
            if not isinstance(s.rpc, Event) or s.rpc.topic != topic:
                continue
            if s.peer not in state[p].children:
                continue
            a = EventDescriptor.decode(s.rpc.event).attributes
            below = [q for q in subtree(s.peer) if q in subs]
            if not any(subs[q] is None or matches(subs[q], a) for q in below):  # type: ignore[arg-type]
                unwanted_down += 1
    return net, topic, subs, unwanted_down


def counted(net: CoreNet) -> dict[str, int]:
    total = {"down": 0, "false_positive": 0, "pruned": 0}
    for p in net.peers:
        for k, v in net.nodes[p].filter_forwards.items():
            total[k] += v
    return total


def test_false_positive_forwards_are_counted() -> None:
    """With pruning (:mod:`._pruning`) an EVENT goes down only where the child's
    summary matches; a false positive is one that reached a subtree where nobody
    wanted it after all (a relay merged its children's filters wider). The counts
    are checked against a recount from the tree: at least one false positive
    happens here (merged hulls have gaps), none is counted that did not happen (a
    receiver counts by its children's summaries as they sent them, which can only
    be wider than what their subtrees want: at most the recount)."""
    net, _, _, unwanted_down = narrow_run()
    total = counted(net)
    assert total["pruned"] > 0 and total["down"] > unwanted_down > 0
    assert 0 < total["false_positive"] <= unwanted_down


def test_planted_false_positive_miscounts_are_caught() -> None:
    """The test above fails when the receiver counts nothing, or counts every event
    it gets from its parent."""
    from pulsarcast_ipfs.core._summaries import Summaries

    def nothing(self, tree, sender, ev):  # type: ignore[no-untyped-def]
        return None

    def everything(self, tree, sender, ev):  # type: ignore[no-untyped-def]
        if sender is not None and sender not in tree.children:
            self._forward_counts["false_positive"] += 1

    for wrong in (nothing, everything):
        old = vars(Summaries)["_count_received"]
        Summaries._count_received = wrong  # type: ignore[method-assign]
        try:
            with pytest.raises(AssertionError):
                test_false_positive_forwards_are_counted()
        finally:
            Summaries._count_received = old  # type: ignore[method-assign]


def test_a_filter_change_sends_one_coalesced_summary() -> None:
    net, topic, _, subs = setup()
    state = states(net, topic)
    leaf = next(p for p in subs if state[p].parent and not state[p].children)
    parent = net.nodes[leaf].topic_state(topic).parent
    assert parent is not None
    before = len(sent(net, leaf, Summary))
    for text in ("ups > 1", "ups > 2", "user = 'zed'"):
        net.call(leaf, "subscribe", topic, filter=parse_filter(text))
    net.run_for(3)
    new = sent(net, leaf, Summary)[before:]
    assert len(new) == 1 and new[0].filters == ('user = "zed"',)  # type: ignore[attr-defined]
    entry = net.nodes[parent]._trees[topic].child_summaries[leaf]
    assert entry == (parse_filter("user = 'zed'"),)
    net.call(leaf, "unsubscribe", topic)
    net.run_for(3)
    if leaf in net.nodes[parent].topic_state(topic).children:  # still a relay: wants nothing
        assert net.nodes[parent]._trees[topic].child_summaries[leaf] == ()


def test_a_lost_summary_is_sent_again_and_the_subtree_gets_what_it_now_wants() -> None:
    """SUMMARY has no acknowledgement: a lost one left the parent pruning by the
    narrower summary before, for good (the 1,000-node simulation lost 16 live
    deliveries so). It is sent again, unchanged, 4, 16 and 64 s after; the parent
    takes the repeats of what it knows as no-ops."""
    net, topic, author, subs = setup(pick=lambda rng: parse_filter("user = 'zed'"))
    state = states(net, topic)
    leaf = next(p for p in subs if state[p].parent and not state[p].children)
    parent = state[leaf].parent
    lost: list[object] = []

    def drop_first_summary(src: str, dst: str, rpc: object) -> bool:
        if src == leaf and isinstance(rpc, Summary) and not lost:
            lost.append(rpc)
            return True
        return False

    net.drop_if = drop_first_summary
    before = len(sent(net, leaf, Summary))
    net.call(leaf, "subscribe", topic, filter=None)  # now wants everything
    net.run_for(2)
    assert lost and len(sent(net, leaf, Summary)) > before, "the test lost no SUMMARY"
    cids = [
        net.call(author, "publish", topic, f"e{i}".encode(), attributes={"user": "bob"})
        for i in range(5)
    ]
    net.run_for(30)
    got = set(net.delivered(leaf, topic))
    assert all(op.event_cid in got for op in cids), "the subtree never got what it now wants"
    repeats = sent(net, leaf, Summary)[before:]
    assert len(repeats) == 3 and len({r.filters for r in repeats}) == 1  # type: ignore[attr-defined]
    assert net.nodes[parent]._trees[topic].child_summaries[leaf] == (parse_filter("*"),)
    net.run_for(80)  # the last repeat, 64 s on: a no-op at the parent
    assert len(sent(net, leaf, Summary)[before:]) == 4


def test_a_rejoin_carries_the_summary() -> None:
    net, topic, author, subs = setup()
    child = next(p for p in subs if net.nodes[p].topic_state(topic).parent not in (None, author))
    old = net.nodes[child].topic_state(topic).parent
    assert old is not None
    net.crash(old)
    net.run_for(40)
    new = net.nodes[child].topic_state(topic).parent
    assert new is not None and new != old
    joins = [j for j in sent(net, child, Join) if j.summary is not None]  # type: ignore[attr-defined]
    assert joins, "the re-JOIN carried no summary"
    got = net.nodes[new]._trees[topic].child_summaries.get(child)
    assert got is not None
    own = subs[child]
    rng = random.Random(3)
    for _ in range(200):
        m = attrs(rng)
        if own is None or matches(own, m):
            assert matches_any(got, m)


def test_summaries_from_non_children_are_dropped_and_rate_limited() -> None:
    cfg = NodeConfig(tree_filters=True, join_rate=1.0, join_burst=3.0)
    net, topic, author, _ = setup(config=cfg)
    children = net.nodes[author].topic_state(topic).children
    stranger = next(p for p in net.peers if p not in children and p != author)
    for _ in range(6):
        net.inject(stranger, author, Summary(topic=topic, filters=("*",)))
    reasons = [str(r.fields.get("reason")) for r in net.records(author, RecordKind.EVENT_DROPPED)]
    assert "not_child" in reasons and "rate_limited" in reasons


def test_off_the_wire_is_that_of_2_4() -> None:
    net, topic, author, _ = setup(config=NodeConfig(tree_filters=False))
    net.call(author, "publish", topic, b"x", attributes={"ups": 1})
    net.run_for(3)
    for p in net.peers:
        assert not sent(net, p, Summary)
        assert all(j.summary is None for j in sent(net, p, Join))  # type: ignore[attr-defined]
        assert net.nodes[p].filter_forwards == {"down": 0, "false_positive": 0, "pruned": 0}


def test_topic_state_says_who_holds_the_whole_history() -> None:
    """``TopicState.whole_history`` (what the sidecar's announcers go by,
    docs/sidecar.md "Providing"): a node that says it keeps the whole history holds
    every event published after the tree settled; one that says it does not lacks
    some; and every node's ``partial_members`` names exactly the members that say
    ``False`` themselves, so that every node ranks the same candidates."""
    net, topic, author, _ = setup()
    rng = random.Random(3)
    for _ in range(60):
        net.call(author, "publish", topic, b"x", attributes=attrs(rng))
        net.run_for(0.1)
    net.run_for(5)
    state = states(net, topic)
    whole = {p for p, st in state.items() if st.whole_history}
    assert author in whole and whole != set(state), "both kinds expected in this tree"
    for p, st in state.items():
        if not (st.subscribed or p == author):
            continue
        if p in whole:
            assert st.retained >= 60, p
        else:
            assert st.retained < 60, p
    listed = 0
    for p, st in state.items():
        if st.members:
            listed += 1
            assert st.partial_members == tuple(
                m for m in st.members if not state[m].whole_history
            ), p
    assert listed > len(state) // 2
