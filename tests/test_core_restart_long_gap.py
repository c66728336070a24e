"""A restarted subscriber's gap repair over a history longer than the event cache
(pure core, CoreNet).

Found by ``pulsarcast check`` (30 minutes, 10 nodes, ~6 events/s): a subscriber's
sidecar stopped on an unwritable state directory and was restarted with the same
disk 1 s later; it resumed its subscription with ``since`` = the subscription's start,
18 minutes back. Its gap repair walked the DAG back to that point, 6,300 events,
while each live event and each fetched one was held back for its parents (causal
order). The event cache holds ``event_cache_size`` (4,096) descriptors: the events
held back first, the newest (those published from the stop on), left it before the
walk reached the bottom. When their turn came the offer found no descriptor and
skipped them, and being seen they were taken as duplicates whenever they came again:
1,940 events were never delivered there, even after the drain.

Here the same at a scale a test runs in seconds: 1,500 events of history, an event
cache of 256. Fixed: an event held back whose descriptor left the cache is forgotten
as seen and fetched again (its block is held), then delivered with ``recovered``.
Without the fix 7 events (the ones published around the restart) are never
delivered.
"""

from __future__ import annotations

import random

from pulsarcast_ipfs.core import NodeConfig, PulsarcastNode
from pulsarcast_ipfs.core.testing import CoreNet

CONFIG = NodeConfig(event_cache_size=256)
RATE = 6  # events per second, two publishers in turn


def _restart(net: CoreNet, peer: str) -> None:
    """``peer``, down, comes back as a new incarnation (its state lost)."""
    i = net.index[peer]
    node = PulsarcastNode(peer_id=peer, rng=random.Random(99), now=net.now, config=CONFIG)
    net._nodes[i] = net.nodes[peer] = node
    net.bring_up(i)
    net.call(peer, "set_known_peers", [p for p in net.peers if p != peer])


def test_a_restart_after_a_long_history_delivers_every_event() -> None:
    net = CoreNet(4, seed=7, config=CONFIG)
    author, other, _, child = net.peers
    topic = net.call(author, "create_topic", "long")
    net.run_for(0.5)
    subscribed_at = net.now
    for p in net.peers[1:]:
        net.call(p, "subscribe", topic)
    net.run_for(3)
    published = []

    def publish_for(seconds: float) -> None:
        for k in range(int(seconds * RATE)):
            who = (author, other)[k % 2]
            published.append(net.call(who, "publish", topic, b"%d" % len(published)).event_cid)
            net.run_for(1 / RATE)

    publish_for(250)  # 1,500 events: the restart walks back over all of them
    assert set(net.delivered(child, topic)) == set(published)
    net.take_down(net.index[child], keep_state=False)
    publish_for(1)
    _restart(net, child)
    net.call(child, "subscribe", topic, since=subscribed_at)  # as the sidecar resumes
    publish_for(60)
    net.run_for(120)

    got = set(net.delivered(child, topic))  # both incarnations (the driver de-duplicates)
    missing = [i for i, cid in enumerate(published) if cid not in got]
    assert missing == []
