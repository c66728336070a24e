"""Filters on subscriptions, at the subscriber, in the pure core.

The core delivers to the application exactly the events a subscription's filter
matches — live, recovered by gap repair, after a resume — while it still relays,
retains and repairs every event (the tree is unchanged). ``history(where=...)``
pages through the matching events with cursors that skip the others.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarcast_ipfs.core import (
    Event,
    EventDescriptor,
    Filter,
    LocalProtocolError,
    RetentionPolicy,
    TopicHistory,
    UnknownTopic,
    compute_cid,
    format_created,
    matches,
    parse_filter,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core.testing import CoreNet, make_peer_ids

WHERE = parse_filter("ups >= 10 and controversiality = 1")


def attrs_of(i: int) -> dict[str, int | str]:
    """Event i's attributes: about a third match WHERE; every fifth has none."""
    return {"ups": (i * 7) % 20, "controversiality": i % 2, "user": f"u{i % 3}"}


def setup(n: int = 6, seed: int = 3) -> tuple[CoreNet, CID, str, list[str]]:
    net = CoreNet(n, seed=seed)
    author = net.peers[0]
    topic: CID = net.call(author, "create_topic", "reddit")
    net.run_for(0.5)
    return net, topic, author, net.peers[1:]


def publish_all(net: CoreNet, peer: str, topic: CID, count: int) -> list[tuple[CID, bool]]:
    """Publish ``count`` events; (CID, matches WHERE) of each."""
    out = []
    for i in range(count):
        attrs = attrs_of(i) if i % 5 else None
        res = net.call(peer, "publish", topic, b"e%d" % i, attributes=attrs)
        out.append((res.event_cid, matches(WHERE, attrs)))
        net.run_for(0.05)
    return out


def test_live_delivery_is_exactly_the_matching_events() -> None:
    net, topic, author, peers = setup()
    filtered, plain = peers[0], peers[1:]
    net.call(filtered, "subscribe", topic, filter=WHERE)
    for p in plain:
        net.call(p, "subscribe", topic)
    net.run_for(3)
    sent = publish_all(net, author, topic, 30)
    net.run_for(2)
    wanted = [c for c, ok in sent if ok]
    assert 0 < len(wanted) < len(sent)
    assert net.delivered(filtered, topic) == wanted
    for p in plain:  # the others get everything, also through the filtered node
        assert sorted(net.delivered(p, topic), key=bytes) == sorted((c for c, _ in sent), key=bytes)
    # tree filters: the filtered subscriber's history holds what it wants (its parent
    # pruned the rest); the whole history is the author's
    page = net.nodes[filtered].history(topic, limit=100)
    assert {c for c, _ in page.events} == set(wanted) and page.complete
    assert len(net.nodes[author].history(topic, limit=100).events) == len(sent)


def test_recovered_deliveries_are_filtered_too() -> None:
    net, topic, author, peers = setup(3)
    sub = peers[0]
    net.call(sub, "subscribe", topic, filter=WHERE)
    net.call(peers[1], "subscribe", topic)
    net.run_for(3)
    net.drop_if = lambda s, r, rpc: r == sub and isinstance(rpc, Event)
    lost = publish_all(net, author, topic, 12)
    net.drop_if = None
    net.run_for(15)  # gap repair / anti-entropy
    log = [(e, rec) for t, e, rec in net.logs[sub].delivered if t == topic]
    assert log == [(c, True) for c, ok in lost if ok]
    assert any(not ok for _, ok in lost)


def test_resubscribing_replaces_the_filter_and_unsubscribe_clears_it() -> None:
    net, topic, author, peers = setup(3)
    sub = peers[0]
    net.call(sub, "subscribe", topic, filter=parse_filter("user = 'u1'"))
    net.run_for(3)
    first = publish_all(net, author, topic, 6)
    net.call(sub, "subscribe", topic)  # no filter any more
    second = publish_all(net, author, topic, 3)
    net.run_for(2)
    got = net.delivered(sub, topic)
    assert got == [c for c, _ in first if c in got] + [c for c, _ in second]
    assert len(got) == len(second) + sum(1 for i in range(6) if i % 5 and i % 3 == 1)
    net.call(sub, "subscribe", topic, filter=parse_filter("ups > 1000"))
    net.call(sub, "unsubscribe", topic)
    net.call(sub, "subscribe", topic)
    third = publish_all(net, author, topic, 2)
    net.run_for(2)
    assert net.delivered(sub, topic)[-2:] == [c for c, _ in third]
    with pytest.raises(LocalProtocolError, match="filter must be a Filter"):
        net.call(sub, "subscribe", topic, filter="ups > 1")


def test_a_filter_given_before_the_topic_is_resolved_applies() -> None:
    net, topic, author, peers = setup(4)
    sub = peers[0]
    with pytest.raises(UnknownTopic):
        net.nodes[sub].topic_state(topic)  # not known yet
    net.call(sub, "subscribe", topic, filter=WHERE)  # fetches the descriptor first
    net.run_for(3)
    sent = publish_all(net, author, topic, 10)
    net.run_for(2)
    assert net.delivered(sub, topic) == [c for c, ok in sent if ok]


# -- filtered history ----------------------------------------------------------------------

TOPIC = compute_cid(b"topic")
PEERS = make_peer_ids(2, seed=1)


def _history(n: int, seed: int) -> tuple[TopicHistory, list[tuple[CID, EventDescriptor]]]:
    """``n`` events in a DAG with random parents (some concurrent), random attributes."""
    rng = random.Random(seed)
    h = TopicHistory(policy=RetentionPolicy())
    evs: list[EventDescriptor] = []
    for i in range(n):
        parents = tuple(sorted({rng.choice(evs).cid for _ in range(2)}, key=bytes)) if evs else ()
        clock = 1 + max((e.clock for e in evs if e.cid in parents), default=-1)
        attrs = {"ups": rng.randrange(20), "controversiality": rng.randrange(2)}
        with_attrs = rng.random() < 0.9
        ev = EventDescriptor(
            topic=TOPIC,
            author=PEERS[0],
            publisher=PEERS[0],
            parents=parents,
            clock=clock,
            payload=b"%d" % i,
            created=format_created(1_767_225_600.0 + i),
            protocol_version="2.0.1" if with_attrs else "2.0.0",
            attributes=attrs if with_attrs else None,
        )
        evs.append(ev)
        h.add(ev.cid, ev, 1_767_225_600.0 + i)
    cids, _ = h.page(order="oldest", limit=max(n, 1))
    by_cid = {ev.cid: ev for ev in evs}
    return h, [(c, by_cid[c]) for c in cids]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=0, max_value=60),
    seed=st.integers(min_value=0, max_value=10_000),
    limit=st.integers(min_value=1, max_value=7),
    scan=st.integers(min_value=1, max_value=12),
    order=st.sampled_from(["newest", "oldest"]),
    text=st.sampled_from(["ups >= 10 and controversiality = 1", "ups < 3", "ups > 99", "*"]),
)
def test_filtered_pages_list_every_match_once_in_order(
    n: int, seed: int, limit: int, scan: int, order: str, text: str
) -> None:
    h, events = _history(n, seed)
    where = parse_filter(text)
    expected = [c for c, ev in events if matches(where, ev.attributes)]
    if order == "newest":
        expected.reverse()
    got: list[CID] = []
    after = None
    for _ in range(n + 2):  # every page advances the cursor by at least one event
        page, nxt = h.filtered_page(
            order=order,  # type: ignore[arg-type]
            after=after,
            limit=limit,
            where=where,
            scan=scan,
        )
        assert len(page) <= limit
        got += page
        if nxt is None:
            break
        key = h.key_of(nxt)
        assert key is not None and key != after
        after = key
    else:
        raise AssertionError("paging did not end")
    assert got == expected


def test_the_node_history_where_uses_the_filter_and_skips_cursors() -> None:
    net, topic, author, _ = setup(2)
    sent = publish_all(net, author, topic, 40)
    net.run_for(1)
    wanted = [c for c, ok in sent if ok]
    node = net.nodes[author]
    got: list[CID] = []
    after: CID | None = None
    while True:
        page = node.history(topic, order="oldest", after=after, limit=3, where=WHERE)
        got += [c for c, _ in page.events]
        if page.next is None:
            break
        after = page.next
    assert got == wanted
    with pytest.raises(LocalProtocolError, match="where must be a Filter"):
        node.history(topic, where="ups > 1")  # type: ignore[arg-type]
    assert (
        node.history(topic, limit=100, where=Filter()).events
        == node.history(topic, limit=100).events
    )


def test_a_disjunction_of_filters_delivers_and_summarises_their_union() -> None:
    """``subscribe(filters=)``: a sidecar's consumers' union. Delivered: the events any
    of them matches; the summary the parent holds: each of them; "*" among them:
    every event (then the tree sends everything)."""
    net, topic, author, peers = setup()
    node = peers[0]
    hot, alice = parse_filter("ups >= 15"), parse_filter('user = "u1"')
    net.call(node, "subscribe", topic, filters=[hot, alice])
    net.run_for(3)
    tree = net.nodes[node]._trees[topic]
    assert tree.filters == (hot, alice)
    assert sorted(net.nodes[node].subtree_summary(topic)) == sorted([str(hot), str(alice)])
    parent_of = tree.parent
    assert parent_of is not None
    held = net.nodes[parent_of].child_summaries(topic)[node]
    assert sorted(held) == sorted([str(hot), str(alice)])
    sent = []
    for i in range(20):
        attrs = attrs_of(i)
        res = net.call(author, "publish", topic, b"e%d" % i, attributes=attrs)
        sent.append((res.event_cid, matches(hot, attrs) or matches(alice, attrs)))
        net.run_for(0.05)
    net.run_for(2)
    wanted = [c for c, ok in sent if ok]
    assert 0 < len(wanted) < len(sent)
    assert net.delivered(node, topic) == wanted
    # "*" in the disjunction is every event; the parent is told so
    net.call(node, "subscribe", topic, filters=[hot, parse_filter("*")])
    net.run_for(3)
    assert tree.filters is None
    assert net.nodes[parent_of].child_summaries(topic)[node] == ("*",)


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"filters": []}, "non-empty"),
        ({"filters": [WHERE], "filter": WHERE}, "not both"),
        ({"filters": WHERE}, "sequence"),
        ({"filters": ["ups > 1"]}, "Filter"),
    ],
)
def test_bad_disjunctions_are_refused(kw: dict[str, object], says: str) -> None:
    net, topic, _, peers = setup(3)
    with pytest.raises(LocalProtocolError, match=says):
        net.call(peers[0], "subscribe", topic, **kw)
