"""A long link is not a lagging parent (issue 13, run set "s8f").

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
