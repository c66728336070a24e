"""A long link is not a lagging parent (run set "s8f").

With 500 ± 300 ms each way (the benchmark's ``latency`` condition) every PONG came
back later than ``slow_parent_after`` (1 s), every parent looked "lagging", and
children hopped from parent to parent into chains up to eight deep: two to eight
delayed hops per event where one would do. A parent is lagging only when it
answers ``slow_parent_after`` later than twice the shortest round trip seen on
that link; a parent that becomes slow still is (tests/test_core_node.py's
lagging-parent tests).
"""

from __future__ import annotations

import random

from pulsarcast_ipfs.core import NodeConfig
from pulsarcast_ipfs.core.testing import CoreNet


def test_children_of_a_far_root_stay_put_and_get_everything() -> None:
    cfg = NodeConfig(ping_interval=1.0)
    # 0.4-0.8 s per message each way: round trips of 0.8-1.6 s, most over 1 s.
    net = CoreNet(16, seed=5, latency=0.4, config=cfg)
    author, *members = net.peers
    topic = net.call(author, "create_topic", "far")
    net.run_for(1)
    for p in members:
        net.call(p, "subscribe", topic)
    net.run_for(10)
    parents = {p: net.nodes[p].topic_state(topic).parent for p in members}
    assert all(parents.values()), parents
    rng = random.Random(1)
    published = []
    changes = 0
    for _ in range(60):
        who = rng.choice([author, *members])
        published.append(net.call(who, "publish", topic, b"x").event_cid)
        net.run_for(0.5)
        now = {p: net.nodes[p].topic_state(topic).parent for p in members}
        changes += sum(now[p] != parents[p] for p in members)
        parents = now
    net.run_for(10)
    assert changes == 0, f"{changes} parent changes on links that are only long"
    for p in [author, *members]:
        got = net.delivered(p, topic)
        assert set(published) <= set(got) and len(got) == len(set(got)), p


def _depths(net: CoreNet, topic: object, author: str, members: list[str]) -> dict[str, int]:
    out = {}
    for p in members:
        d, cur = 0, p
        while cur != author and d < 50:
            parent = net.nodes[cur].topic_state(topic).parent  # type: ignore[arg-type]
            assert parent is not None, cur
            cur, d = parent, d + 1
        out[p] = d
    return out


def _deep_tree(flat_fanout: int) -> tuple[CoreNet, object, str, list[str], list[object]]:
    """30 nodes, one peer per k-bucket (JOINs climb relays), 29 subscribers; events
    published throughout, while the tree flattens."""
    cfg = NodeConfig(ping_interval=1.0, flat_fanout=flat_fanout)
    net = CoreNet(30, seed=2, bucket_size=1, config=cfg)
    author, *members = net.peers
    topic = net.call(author, "create_topic", "deep")
    net.run_for(1)
    for p in members:
        net.call(p, "subscribe", topic)
    net.run_for(3)
    published = []
    for i in range(40):
        published.append(net.call(members[i % len(members)], "publish", topic, b"e").event_cid)
        net.run_for(0.5)
    net.run_for(10)
    return net, topic, author, members, published


def test_a_deep_tree_flattens_up_to_the_fanout_bound_and_loses_nothing() -> None:
    net, topic, author, members, published = _deep_tree(64)
    assert set(_depths(net, topic, author, members).values()) == {1}  # all below the root
    for p in [author, *members]:
        got = net.delivered(p, topic)
        assert set(published) <= set(got) and len(got) == len(set(got)), p
    # Without flat trees the same JOINs leave relays between members and the root
    # (this scenario would not test anything otherwise).
    net0, topic0, author0, members0, _ = _deep_tree(0)
    assert max(_depths(net0, topic0, author0, members0).values()) >= 3
    # A bound of 8: the root's list names at most 8 (itself and 7 children); the
    # rest stay below them.
    net8, topic8, author8, members8, published8 = _deep_tree(8)
    root_children = net8.nodes[author8].topic_state(topic8).children
    assert 7 <= len(root_children) <= 8 + 2  # (+ JOINs of the tree's own routing)
    for p in [author8, *members8]:
        got = net8.delivered(p, topic8)
        assert set(published8) <= set(got) and len(got) == len(set(got)), p
