"""A subscriber restarted with its state lost (a sidecar stopped by an unwritable
state directory, then started again) delivers what it missed in causal order
(docs/faults.md "Unwritable state / full disk").

The new parent's history HEADS name more events than the fetch table holds. A fetch
the table had no room for used to count as given up, so an event waiting for that
parent was delivered before it; the checker saw a live child delivered seconds
before its parent. The delivery log given back to the core (``restore_delivered``)
ends the walk back of gap repair where the node left off.
"""

from __future__ import annotations

import random

import pytest

from pulsarcast_ipfs.core import EventDescriptor, LocalProtocolError, PulsarcastNode
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core.testing import CoreNet

HISTORY = 1200  # more than max_pending_fetches (1024): the HEADS fill the table


def _run(*, restore: bool, settle: float) -> tuple[CoreNet, str, list[CID], list[CID]]:
    """``HISTORY`` events from two publishers, the child down (state lost) for 40
    more, then 20 live ones after its restart. (the child's log before the
    restart, what the restarted child delivered)."""
    net = CoreNet(3, seed=7)
    author, child, other = net.peers
    topic = net.call(author, "create_topic", "restart-order")
    net.run_for(0.5)
    subscribed_at = net.now
    net.call(child, "subscribe", topic)
    net.call(other, "subscribe", topic)
    net.run_for(3)
    for i in range(HISTORY):
        net.call((author, other)[i % 2], "publish", topic, b"e%d" % i)
        net.run_for(0.05)
    net.run_for(1)
    log = net.delivered(child, topic)
    assert len(log) == HISTORY
    log = log[:-1]  # the last one could not be written: undelivered for the restart
    i = net.index[child]
    net.take_down(i, keep_state=False)
    for k in range(40):
        net.call((author, other)[k % 2], "publish", topic, b"d%d" % k)
        net.run_for(0.1)
    before = len(net.delivered(child, topic))
    node = PulsarcastNode(peer_id=child, rng=random.Random(99), now=net.now)
    if restore:
        node.restore_delivered(net.now, log)
    net._nodes[i] = net.nodes[child] = node
    net.bring_up(i)
    net.call(child, "set_known_peers", [author, other])
    net.call(child, "subscribe", topic, since=subscribed_at)  # as the sidecar resumes
    for k in range(20):
        net.call((author, other)[k % 2], "publish", topic, b"l%d" % k)
        net.run_for(0.2)
    net.run_for(settle)
    return net, topic, log, net.delivered(child, topic)[before:]


def _inversions(net: CoreNet, order: list[CID]) -> list[bytes]:
    pos = {c: k for k, c in reversed(list(enumerate(order)))}
    out = []
    for c in order:
        ev = EventDescriptor.decode(net.store[c])
        if any(p in pos and pos[p] > pos[c] for p in ev.parents):
            out.append(ev.payload)
    return out


def test_a_restarted_node_delivers_in_causal_order_when_the_heads_overflow_its_fetches() -> None:
    net, _, _, after = _run(restore=False, settle=400)
    assert len(set(after)) == HISTORY + 60  # everything again, the core knows nothing
    assert _inversions(net, after) == []


def test_the_restored_log_ends_the_walk_back_and_nothing_is_delivered_twice() -> None:
    net, _, log, after = _run(restore=True, settle=30)
    # The event it could not log, the 40 it missed and the 20 live ones, at once.
    assert len(after) == 61 and not set(after) & set(log)
    assert _inversions(net, log + after) == []


def test_restore_delivered_comes_first_and_takes_cids() -> None:
    net = CoreNet(1)
    node = net.nodes[net.peers[0]]
    with pytest.raises(LocalProtocolError, match="CIDs"):
        node.restore_delivered(net.now, ["bafy"])  # type: ignore[list-item]
    net.call(net.peers[0], "create_topic", "t")
    with pytest.raises(LocalProtocolError, match="before any subscription"):
        node.restore_delivered(net.now, [])
