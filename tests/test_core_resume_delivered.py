"""A restarted subscriber resumes from its delivery log (``restore_delivered``): it is
given what it missed, in causal order, and nothing it had delivered before."""

from __future__ import annotations

import dataclasses
import random

import pytest

from pulsarcast_ipfs.core import NodeConfig, PulsarcastNode
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._errors import LocalProtocolError
from pulsarcast_ipfs.core.testing import CoreNet

CONFIG = dataclasses.replace(NodeConfig(), max_waiting_events=40)
"""A small bound on parked events (a 200-event history is more than it holds)."""


def _restart(net: CoreNet, peer: str) -> PulsarcastNode:
    """``peer``'s process dies and starts again: a new node, nothing in memory."""
    i = net.index[peer]
    net.take_down(i, keep_state=False)
    node = PulsarcastNode(peer_id=peer, config=CONFIG, rng=random.Random(7), now=net.now)
    net._nodes[i] = net.nodes[peer] = node
    node.set_known_peers(net.now, [p for p in net.peers if p != peer])
    net.bring_up(i)
    return node


def _run(*, restore: bool) -> tuple[list[CID], list[CID], dict[CID, tuple[CID, ...]]]:
    net = CoreNet(2, seed=3, config=CONFIG)
    author, sub = net.peers
    topic = net.call(author, "create_topic", "resume")
    net.run_for(0.5)
    since = net.now
    net.call(sub, "subscribe", topic)
    net.run_for(2)
    for i in range(200):
        net.call(author, "publish", topic, b"before %d" % i)
        net.run_for(0.05)
    net.run_for(3)
    before = net.delivered(sub)
    assert len(before) == 200
    node = _restart(net, sub)
    for i in range(20):  # missed while down
        net.call(author, "publish", topic, b"down %d" % i)
        net.run_for(0.05)
    if restore:
        node.restore_delivered(net.now, before)
    net.call(sub, "subscribe", topic, since=since)
    for i in range(20):  # live after the restart
        net.call(author, "publish", topic, b"after %d" % i)
        net.run_for(0.1)
    net.run_for(30)
    after = net.delivered(sub)[200:]
    parents = {c: net.nodes[author]._events.get(c)[1].parents for c in after}
    return before, after, parents


def _out_of_order(before: list[CID], after: list[CID], parents: dict) -> list[CID]:
    done = set(before)
    bad = []
    for cid in after:
        if any(p not in done for p in parents[cid]):
            bad.append(cid)
        done.add(cid)
    return bad


def test_a_restarted_subscriber_resumes_from_its_log_in_causal_order() -> None:
    before, after, parents = _run(restore=True)
    new = [c for c in after if c not in set(before)]
    assert len(new) == 40 and len(after) == 40  # each missed and live event, once
    assert _out_of_order(before, after, parents) == []


def test_without_the_log_the_repair_delivers_the_whole_history_again() -> None:
    """The planted case: the same restart without ``restore_delivered`` walks every
    parent link back to the subscription's start and delivers the 200 events of before
    again (a sidecar had to drop each against its log)."""
    before, after, _ = _run(restore=False)
    assert len(set(before) & set(after)) == 200


def test_restore_delivered_takes_cids_only() -> None:
    net = CoreNet(1, seed=1)
    with pytest.raises(LocalProtocolError, match="takes CIDs"):
        net.nodes[net.peers[0]].restore_delivered(net.now, ["bafy-not-a-cid"])  # type: ignore[list-item]
