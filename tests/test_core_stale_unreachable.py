"""A child that restarts and JOINs again before its parent hears that a send to its
previous incarnation failed (pure core, CoreNet).

Diagnosis (found by a helper, session 8; fixed as said at the end):

The simulator found it (30 nodes, seed 2, 5 % loss, ``--crash 10%@1s``,
``--restart 5s``, 50 calls: 2 of 1,479 live deliveries missing, node 4 on topic
``programming``, root node 18, even after 300 s of grace). Node 4 crashed at 22.0 s
holding call 38 back for its lost parent call 31. The root sent it a PING while it
was down (~24.8 s); node 4 restarted at 27.0 s and JOINed the root again, which
still held it as a child (acknowledged, edge unchanged); at 27.77 s the driver told
the root ``peer_unreachable(node 4)`` for that old send (connect timeout 3 s), and
the root dropped its new child: ``_peer_failed`` removes it from the children and
its edge, and tells it nothing (it takes it for dead). Node 4 still takes the root
for its parent and answers its PINGs, so nothing tells it either. The only repair
of such a one-sided edge is a HEADS or DIGEST from the child (``_edge_tree`` adopts a
peer that still takes us for its parent), and a node with an empty window sends
neither (``_heads_round`` skips a tree without ``recent``), nor does one whose
DIGEST is unchanged and has been repeated ``DIGEST_REPEATS`` times. So the
subscriber is cut off for good: it misses every later event of the topic, silently.

A driver's failure report can always be late (a send to a previous incarnation, or a
connection that failed while a new one was being made); the core cannot tell by the
report alone. Fix: a parent that drops a child it is told is unreachable sends it a
LEAVE. A child alive after all takes it as the loss of its parent and JOINs again
(it gets everything it lacks through the new edge's HEADS); a dead one never gets
it, and the failure of that send is reported again, a no-op then. Without the LEAVE
this test fails (it was a strict xfail before the fix).
"""

from __future__ import annotations

import random

from pulsarcast_ipfs.core import PulsarcastNode
from pulsarcast_ipfs.core.testing import CoreNet


def _restart(net: CoreNet, peer: str) -> None:
    """``peer``, down, comes back as a new incarnation (its state lost)."""
    i = net.index[peer]
    node = PulsarcastNode(peer_id=peer, rng=random.Random(99), now=net.now)
    net._nodes[i] = net.nodes[peer] = node
    net.bring_up(i)
    net.call(peer, "set_known_peers", [p for p in net.peers if p != peer])


def test_a_child_back_before_a_late_failure_report_is_not_cut_off() -> None:
    net = CoreNet(3, seed=7)  # unreachable_after: 1 s
    author, child, _ = net.peers
    topic = net.call(author, "create_topic", "rejoin")
    net.run_for(0.5)
    subscribed_at = net.now
    net.call(child, "subscribe", topic)
    net.run_for(3)
    assert net.nodes[author].topic_state(topic).children == (child,)

    net.take_down(net.index[child], keep_state=False)
    during = net.call(author, "publish", topic, b"while down").event_cid  # its EVENT fails
    net.run_for(0.2)
    _restart(net, child)  # back before the author is told (1 s after the send)
    net.call(child, "subscribe", topic, since=subscribed_at)  # as the sidecar resumes
    net.run_for(30)
    later = net.call(author, "publish", topic, b"later").event_cid
    net.run_for(120)

    assert net.nodes[child].topic_state(topic).parent == author  # the child thinks so
    got = net.delivered(child, topic)
    assert during in got and later in got
    assert child in net.nodes[author].topic_state(topic).children
