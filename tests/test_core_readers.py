"""Readers of an orphaned topic (pure core, no Kubo): the author gone for good, a node
that never subscribed reads the history from the holders the driver found, hanging
below one of them as a *leaf* (docs/protocol-notes.md "Readers")."""

from __future__ import annotations

import pytest

from pulsarcast_ipfs.core import Join
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core.testing import CoreNet
from pulsarcast_ipfs.kademlia import peer_position
from pulsarcast_ipfs.testing import orphaned_topic


def _stranger(net: CoreNet, topic: CID, others: list[str]) -> str:
    """The live node nearest the middle of ``others`` that is not in the tree at all."""
    mid = len(others) // 2
    for p in sorted(others, key=lambda p: abs(others.index(p) - mid)):
        if topic not in net.nodes[p]._trees:
            return p
    raise AssertionError("every node is in the tree")


def _read(net: CoreNet, reader: str, topic: CID, holders: list[str]) -> tuple[list[CID], bool]:
    net.call(reader, "read", topic, holders=holders)
    net.run_for(10)
    page = net.nodes[reader].history(topic, order="oldest", limit=50)
    return [c for c, _ in page.events], page.complete


@pytest.mark.slow
def test_a_reader_of_an_orphaned_topic_reads_it_whole_below_a_holder() -> None:
    """Over 40 topologies: with the holders given, every reader gets the whole history
    and hangs below a holder. Without them (the planted violation: the tree alone, as
    before), the path towards the gone author ends, in some topologies, at an acting
    root that holds nothing, and the reader's history is empty but looks complete."""
    failed_without = 0
    for seed in range(40):
        net, topic, holders, others, cids = orphaned_topic(seed)
        reader = _stranger(net, topic, others)
        got, complete = _read(net, reader, topic, holders)
        assert (got, complete) == (cids, True), seed
        st = net.nodes[reader].topic_state(topic)
        assert st.parent in holders and st.synced and not st.subscribed, seed
        net2, topic2, _, others2, cids2 = orphaned_topic(seed)
        got2, complete2 = _read(net2, _stranger(net2, topic2, others2), topic2, [])
        failed_without += (got2, complete2) != (cids2, True)
    assert failed_without >= 5  # the scenario does catch the bug the holders close


def test_a_leaf_takes_no_children_and_a_relay_takes_no_leaf() -> None:
    net, topic, holders, others, _ = orphaned_topic(3, flat=False)
    reader = _stranger(net, topic, others)
    _read(net, reader, topic, holders)
    descriptor = net.nodes[reader]._trees[topic].root.encode()
    apos = peer_position(net.peers[0])
    farther = [p for p in others if peer_position(p) ^ apos > peer_position(reader) ^ apos]
    assert farther  # a peer the distance rule alone would let hang below the reader
    # A JOIN to the leaf: refused (a child of a leaf could close a cycle).
    net.inject(farther[0], reader, Join(topic=topic, descriptor=descriptor))
    assert farther[0] not in net.nodes[reader].topic_state(topic).children
    # Nor while its leaf JOIN is in flight (a holder that took it as parent meanwhile
    # would refuse the leaf JOIN, and one further down could close a cycle).
    net2, topic2, holders2, others2, _ = orphaned_topic(3, flat=False)
    reader2 = _stranger(net2, topic2, others2)
    net2.call(reader2, "read", topic2, holders=holders2)
    while topic2 not in net2.nodes[reader2]._trees:  # its descriptor is being fetched
        assert net2.step()
    assert net2.nodes[reader2]._trees[topic2].join.leaf  # type: ignore[union-attr]
    net2.inject(farther[0], reader2, Join(topic=topic2, descriptor=descriptor))
    assert farther[0] not in net2.nodes[reader2].topic_state(topic2).children
    # A leaf JOIN to nodes that keep no history (relays, strangers): refused; to a
    # holder, whatever the distance: taken.
    for p in others:
        if p not in (reader, farther[0]):
            net.inject(farther[0], p, Join(topic=topic, descriptor=descriptor, leaf=True))
            tree = net.nodes[p]._trees.get(topic)
            assert tree is None or farther[0] not in tree.children, p
    net.inject(others[0], holders[0], Join(topic=topic, descriptor=descriptor, leaf=True))
    assert others[0] in net.nodes[holders[0]].topic_state(topic).children


def test_a_leaf_that_subscribes_stays_below_its_holder_and_gets_live_events() -> None:
    """A leaf that subscribes keeps its holder (moving towards the gone author could
    land it on an acting root of a tree fragment of its own: seen with seed 1) and
    still refuses children; live events from a holder reach it once."""
    for seed in range(10):
        net, topic, holders, others, _ = orphaned_topic(seed)
        reader = _stranger(net, topic, others)
        _read(net, reader, topic, holders)
        node = net.nodes[reader]
        parent = node.topic_state(topic).parent
        net.call(reader, "subscribe", topic)
        net.run_for(node.config.root_recheck_interval + 5)
        st = node.topic_state(topic)
        assert node._trees[topic].leaf and st.parent == parent and st.subscribed, seed
        live = net.call(holders[0], "publish", topic, b"live").event_cid
        net.run_for(3)
        assert net.delivered(reader, topic) == [live], seed
