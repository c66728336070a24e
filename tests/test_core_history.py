"""The topic history: a multi-parent DAG, one total order, stable cursors,
retention, and gap repair on every branch (pure core, no Kubo)."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarcast_ipfs.core import (
    EventDescriptor,
    LocalProtocolError,
    NodeConfig,
    RetentionPolicy,
    TopicDescriptor,
    TopicHistory,
    format_created,
    sort_parents,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core.testing import CoreNet, make_peer_ids
from pulsarcast_ipfs.records import RecordKind

T0 = 1_767_225_600.0
PEERS = make_peer_ids(3)
TOPIC = TopicDescriptor.new(name="h", author=PEERS[0], now=T0)
HUGE = RetentionPolicy(max_events=10**9, max_bytes=2**60, max_age=1e12)


def random_dag(rng: random.Random, n: int, *, width: int = 3) -> list[EventDescriptor]:
    """``n`` events whose parents are drawn among the heads of ``width`` concurrent
    publishers (some link every head they know, as LAST_SEEN does)."""
    events: list[EventDescriptor] = []
    views: list[list[EventDescriptor]] = [[] for _ in range(width)]
    for i in range(n):
        w = rng.randrange(width)
        if events and rng.random() < 0.5:
            views[w].append(rng.choice(events))  # it heard of another publisher's event
        linked = {e.cid: e for e in views[w][-rng.randint(1, 3) :]} if views[w] else {}
        ev = EventDescriptor(
            topic=TOPIC.cid,
            author=PEERS[w % 3],
            publisher=PEERS[w % 3],
            parents=sort_parents(linked),
            clock=1 + max((e.clock for e in linked.values()), default=-1),
            payload=b"%d" % i,
            created=format_created(T0 + i),
        )
        events.append(ev)
        views[w] = [ev]
    return events


def walk(
    h: TopicHistory, order: str, sizes: list[int], between: Callable[[int], None] | None = None
) -> list[CID]:
    """Page through ``h`` with the given page sizes (cycled), calling ``between`` after
    each page (inserts), the way an application pages with cursors."""
    out: list[CID] = []
    after = None
    for k in itertools.count():
        events, more = h.page(order=order, after=after, limit=sizes[k % len(sizes)])  # type: ignore[arg-type]
        out.extend(events)
        if not more or not events:
            return out
        after = h.key_of(events[-1])
        if between is not None:
            between(k)
    raise AssertionError("unreachable")


def check_pages(
    events: list[EventDescriptor],
    late: list[EventDescriptor],
    order: str,
    sizes: list[int],
    pager: Callable[..., list[CID]] = walk,
) -> None:
    """The property: pages concatenated are the history, each event once, in order;
    events inserted between pages appear at most once and never break the order."""
    h = TopicHistory(policy=HUGE)
    for ev in events:
        h.add(ev.cid, ev, T0)
    pending = list(late)

    def insert(_: int) -> None:
        if pending:
            ev = pending.pop()
            h.add(ev.cid, ev, T0)

    got = pager(h, order, sizes, insert)
    assert len(got) == len(set(got)), "an event was listed twice"
    assert {e.cid for e in events} <= set(got), "an event was skipped"
    assert set(got) <= {e.cid for e in events} | {e.cid for e in late}
    keys = [(h.get(c) or _never()).order_key for c in got]
    assert keys == sorted(keys, reverse=order == "newest"), "not in the history order"
    if not late:
        full = sorted(events, key=lambda e: e.order_key, reverse=order == "newest")
        assert got == [e.cid for e in full]


def _never() -> EventDescriptor:
    raise AssertionError("listed an event the history does not hold")


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    n=st.integers(0, 120),
    late=st.integers(0, 30),
    order=st.sampled_from(["newest", "oldest"]),
    sizes=st.lists(st.integers(1, 17), min_size=1, max_size=4),
    shuffle=st.booleans(),
)
def test_pages_are_the_whole_history_even_with_inserts_between_pages(
    seed: int, n: int, late: int, order: str, sizes: list[int], shuffle: bool
) -> None:
    rng = random.Random(seed)
    dag = random_dag(rng, n + late)
    if shuffle:  # events arrive in any order (gap repair, several paths)
        rng.shuffle(dag)
    check_pages(dag[:n], dag[n:], order, sizes)


def test_the_property_catches_a_cursor_that_repeats_or_skips() -> None:
    """Planted violations: a cursor that restarts at its own event (repeat) or one
    past it (skip) fails the property check."""
    dag = random_dag(random.Random(3), 40)

    def repeating(h: TopicHistory, order: str, sizes: list[int], between: object) -> list[CID]:
        out: list[CID] = []
        after = None
        while True:
            events, more = h.page(order=order, after=after, limit=sizes[0])  # type: ignore[arg-type]
            out.extend(events)
            if not more:
                return out
            after = h.key_of(events[-2])  # one too early: the last event comes again

    def skipping(h: TopicHistory, order: str, sizes: list[int], between: object) -> list[CID]:
        out: list[CID] = []
        after = None
        while True:
            events, more = h.page(order=order, after=after, limit=sizes[0] + 1)  # type: ignore[arg-type]
            out.extend(events[:-1])  # drops the page's last event
            if not more:
                return [*out, events[-1]] if events else out
            after = h.key_of(events[-1])

    with pytest.raises(AssertionError, match="twice"):
        check_pages(dag, [], "newest", [5], repeating)
    with pytest.raises(AssertionError, match="skipped"):
        check_pages(dag, [], "oldest", [5], skipping)


def test_causal_total_order_is_the_same_whatever_the_arrival_order() -> None:
    dag = random_dag(random.Random(9), 200, width=5)
    lists = []
    for seed in range(3):
        order = list(dag)
        random.Random(seed).shuffle(order)
        h = TopicHistory(policy=HUGE)
        for ev in order:
            h.add(ev.cid, ev, T0)
        lists.append(list(h.newest()))
        assert h.complete and not h.missing
    assert lists[0] == lists[1] == lists[2]
    pos = {c: i for i, c in enumerate(lists[0][::-1])}
    for ev in dag:  # oldest first: every parent before its child
        assert all(pos[p] < pos[ev.cid] for p in ev.parents)


def test_missing_parents_and_heads() -> None:
    dag = random_dag(random.Random(1), 30)
    h = TopicHistory(policy=HUGE)
    newest = max(dag, key=lambda e: e.order_key)
    h.add(newest.cid, newest, T0)
    assert h.missing == set(newest.parents) and not h.complete
    for ev in dag:
        h.add(ev.cid, ev, T0)
    assert h.complete
    linked = {p for e in dag for p in e.parents}
    assert h.heads == {e.cid for e in dag} - linked


def test_retention_by_count_bytes_and_age() -> None:
    dag = sorted(random_dag(random.Random(2), 50), key=lambda e: e.order_key)
    h = TopicHistory(policy=RetentionPolicy(max_events=10, max_bytes=2**30, max_age=1e9))
    evicted: list[CID] = []
    for ev in dag:
        h.add(ev.cid, ev, T0 + 60)
        evicted += h.enforce(T0 + 60)
    assert len(h) == 10 and evicted == [e.cid for e in dag[:40]]  # oldest first
    assert h.complete  # parents below the horizon are outside, not missing
    assert not h.add(dag[0].cid, dag[0], T0 + 60)  # below the horizon: not taken back
    size = len(dag[0].encode())
    h = TopicHistory(policy=RetentionPolicy(max_events=10**6, max_bytes=5 * size + 10))
    gone: list[CID] = []
    for ev in dag:
        h.add(ev.cid, ev, T0)
        gone += h.enforce(T0)
    assert h.bytes <= 5 * size + 10 and len(h) >= 3
    newest_gone = next(e for e in dag if e.cid == gone[-1])
    assert h.bytes + len(newest_gone.encode()) > 5 * size + 10  # no more evicted than needed
    h = TopicHistory(policy=RetentionPolicy(max_age=20.0))
    for ev in dag:
        h.add(ev.cid, ev, T0 + 49)  # too old already: not taken
    assert set(h.newest()) == {e.cid for e in dag if e.created_ts >= T0 + 29}
    assert set(h.enforce(T0 + 60)) == {e.cid for e in dag if T0 + 29 <= e.created_ts < T0 + 40}
    with pytest.raises(LocalProtocolError):
        RetentionPolicy(max_events=0)


def _relinked(dag: list[EventDescriptor], rng: random.Random, n: int) -> list[EventDescriptor]:
    """``dag`` with random ``created`` times, each event linking the changed parents."""
    out: dict[CID, EventDescriptor] = {}
    new: list[EventDescriptor] = []
    for e in dag:
        ev = dataclasses.replace(
            e,
            parents=sort_parents(out[p].cid for p in e.parents),
            created=format_created(T0 + rng.uniform(0, n)),
        )
        out[e.cid] = ev
        new.append(ev)
    return new


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=10_000),
    n=st.integers(min_value=1, max_value=60),
    keep=st.integers(min_value=1, max_value=30),
    width=st.integers(min_value=1, max_value=4),
    age=st.sampled_from([1e9, 25.0]),
)
def test_heads_and_missing_match_a_recount_after_any_adds_and_evictions(
    seed: int, n: int, keep: int, width: int, age: float
) -> None:
    """The history counts links without an entry per event (heads, events linked more
    than once, links to events not retained): whatever the arrival order and the
    evictions, its heads are exactly the retained events no retained event links, and
    every parent it calls missing is linked by a retained event and not retained."""
    rng = random.Random(seed)
    # Publishers' clocks disagree: an event may say it was created before its parents,
    # so that evicting by age leaves parents whose children are gone.
    dag = _relinked(random_dag(rng, n, width=width), rng, n)
    order = dag[:]
    rng.shuffle(order)
    h = TopicHistory(policy=RetentionPolicy(max_events=keep, max_age=age))
    now = T0 + n / 2
    for ev in order:
        h.add(ev.cid, ev, now)
        h.enforce(now)
        retained = {c: h.get(c) for c in h.newest()}
        linked = {p for e in retained.values() if e is not None for p in e.parents}
        assert h.heads == {c for c in retained if c not in linked}
        assert all(m in linked and m not in retained for m in h.missing)
        now += 0.5


# -- the node ---------------------------------------------------------------------------


def _net(n: int = 6, **kw: object) -> tuple[CoreNet, CID, list[str]]:
    net = CoreNet(n, seed=5, **kw)  # type: ignore[arg-type]
    topic = net.call(net.peers[0], "create_topic", "news")
    net.run_for(0.5)
    for p in net.peers[1:]:
        net.call(p, "subscribe", topic)
    net.run_for(3)
    return net, topic, net.peers


def _whole(net: CoreNet, peer: str, topic: CID, order: str = "newest") -> list[CID]:
    out: list[CID] = []
    after = None
    while True:
        page = net.nodes[peer].history(topic, order=order, after=after, limit=7)  # type: ignore[arg-type]
        out += [c for c, _ in page.events]
        if page.next is None:
            assert page.complete
            return out
        after = page.next


def test_concurrent_publishers_one_history_everywhere() -> None:
    """A bug found once: three publishers at once make branches; every event is in
    the history of every node, once, in the same order, and the next event links
    every head (the DAG closes again)."""
    net, topic, peers = _net()
    published = []
    for i in range(20):
        for p in peers[:3]:  # three publishers in the same instant: concurrent events
            published.append(net.call(p, "publish", topic, b"%s-%d" % (p[-4:].encode(), i)))
        net.run_for(0.05)
    net.run_for(5)
    want = {r.event_cid for r in published}
    views = [_whole(net, p, topic) for p in peers]
    assert set(views[0]) == want and len(views[0]) == 60
    assert all(v == views[0] for v in views)
    assert views[0] == _whole(net, peers[4], topic, "oldest")[::-1]
    heads = net.nodes[peers[1]].history(topic, limit=1).heads
    assert len(heads) > 1  # branches
    last = net.call(peers[5], "publish", topic, b"joins them")
    ev = EventDescriptor.decode(net.store[last.event_cid])
    assert set(ev.parents) == set(heads)
    net.run_for(2)
    assert net.nodes[peers[2]].history(topic, limit=1).heads == (last.event_cid,)


def test_gap_repair_recovers_every_branch_once() -> None:
    """A subscriber that misses events on several branches gets them all, each once."""
    net, topic, peers = _net()
    victim = peers[5]
    net.drop_if = lambda s, r, rpc: r == victim and rpc.op in ("EVENT", "HEADS")
    missed = []
    for i in range(6):
        for p in peers[1:4]:
            missed.append(net.call(p, "publish", topic, b"m%d" % i).event_cid)
        net.run_for(0.1)
    net.run_for(1)
    net.drop_if = None
    after = net.call(peers[0], "publish", topic, b"after the gap").event_cid
    net.run_for(10)
    got = Counter(net.delivered(victim, topic))
    assert set(got) == {*missed, after} and set(got.values()) == {1}
    recovered = [
        r for r in net.records(victim, RecordKind.EVENT_DELIVERED) if r.fields["recovered"]
    ]
    assert len(recovered) == len(missed)
    assert _whole(net, victim, topic) == _whole(net, peers[1], topic)


def test_a_reader_back_fills_the_whole_history_without_subscribing() -> None:
    net, topic, peers = _net(8)
    for i in range(30):
        net.call(peers[1 + i % 3], "publish", topic, b"%d" % i)
        net.run_for(0.1)
    net.run_for(2)
    reader = peers[7]  # subscribed once: unsubscribe, so that it keeps no history
    net.call(reader, "unsubscribe", topic)
    net.run_for(2)
    with pytest.raises(LocalProtocolError, match=r"unknown topic|keeps no history"):
        net.nodes[reader].history(topic)
    delivered = len(net.delivered(reader, topic))
    net.call(reader, "read", topic)
    assert not net.nodes[reader].topic_state(topic).synced
    net.run_for(8)
    assert net.nodes[reader].topic_state(topic).synced  # its parent's HEADS arrived
    assert _whole(net, reader, topic) == _whole(net, peers[1], topic)
    net.call(peers[2], "publish", topic, b"live")
    net.run_for(2)
    assert len(net.delivered(reader, topic)) == delivered  # a reader delivers nothing
    net.run_for(NodeConfig().reader_ttl + 10)
    with pytest.raises(LocalProtocolError, match=r"unknown topic|keeps no history"):
        net.nodes[reader].history(topic)  # gone after reader_ttl, its pins released
    assert net.logs[reader].released


def test_subscribers_pin_within_retention_and_release_the_rest() -> None:
    config = NodeConfig(retention=RetentionPolicy(max_events=5))
    net, topic, peers = _net(4, config=config)
    cids = [net.call(peers[1], "publish", topic, b"%d" % i).event_cid for i in range(12)]
    net.run_for(3)
    log = net.logs[peers[2]]
    pinned = {b.cid for b in log.stored if b.retain}
    assert set(cids[7:]) <= pinned and set(log.released) <= set(cids[:7])
    assert (pinned - set(log.released)) & set(cids) == set(cids[7:])  # the newest 5
    page = net.nodes[peers[2]].history(topic, limit=50)
    assert [c for c, _ in page.events] == cids[::-1][:5] and page.complete
    net.call(peers[2], "unsubscribe", topic)
    assert set(cids[7:]) <= set(log.released)  # leaving the topic unpins it
