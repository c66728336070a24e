"""MEMBERS deltas (wire 2.6, docs/protocol-notes.md "First hop").

A root sends a child that holds its previous list only what changed (``base``,
``removed``); every other child gets the whole list. A child that gets a delta whose
``base`` it does not hold asks its parent for the whole list (MEMBERS_WANT). What
every node ends up with must be exactly the root's list, summaries included, and the
bytes must be what the change is worth, not the list.
"""

from __future__ import annotations

import dataclasses

import pytest

from pulsarcast_ipfs.core import (
    Members,
    MembersWant,
    NodeConfig,
    RemoteProtocolError,
    _dagcbor,
    decode_rpc,
    encode_rpc,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._filters import parse_filter, render_filter
from pulsarcast_ipfs.core._push import _delta
from pulsarcast_ipfs.core.testing import CoreNet

_WHERE = ("ups >= 10", "ups < 3", 'user = "alice"', "controversiality = 1")


def _roots_list_everywhere(net: CoreNet, topic: CID) -> tuple[str, ...]:
    """Check that every node holding a list of the root's current epoch holds the
    root's list and summaries exactly; return the list."""
    root = next(p for p in net.peers if net.nodes[p]._trees[topic].member_sets)
    rt = net.nodes[root]._trees[topic]
    listed = rt.members_listed
    assert listed and listed[0] == root
    holders = 0
    for p in net.peers:
        tree = net.nodes[p]._trees.get(topic)
        if p == root or tree is None or tree.members_epoch is None:
            continue
        assert tree.members_epoch == rt.member_epoch, p
        assert tree.members == listed, p
        if rt.summaries_listed is not None:
            want = {
                m: tuple(parse_filter(t) for t in texts)
                for m, texts in zip(listed, rt.summaries_listed, strict=True)
            }
            assert tree.member_summaries == want, p
        holders += 1
    assert holders > 0
    return listed


def _members_frames(net: CoreNet) -> list[Members]:
    return [s.rpc for p in net.peers for s in net.logs[p].sent if isinstance(s.rpc, Members)]


def _waves(net: CoreNet, topic: CID, peers: list[str], filters: bool) -> None:
    for i, p in enumerate(peers):
        where = parse_filter(_WHERE[i % len(_WHERE)]) if filters else None
        net.call(p, "subscribe", topic, filter=where)
        if i % 3 == 2:
            net.run_for(NodeConfig().members_interval + 1)
    net.run_for(NodeConfig().members_interval + 1)


@pytest.mark.parametrize("filters", [False, True])
def test_children_rebuild_the_roots_list_from_deltas(filters: bool) -> None:
    net = CoreNet(16, seed=5)
    author = net.peers[0]
    topic = net.call(author, "create_topic", "news")
    net.run_for(0.5)
    _waves(net, topic, net.peers[1:], filters)
    listed = _roots_list_everywhere(net, topic)
    assert set(listed) == set(net.peers)
    frames = _members_frames(net)
    deltas = [m for m in frames if m.base is not None]
    assert deltas, "no delta was sent"
    assert max(len(m.members) + len(m.removed or ()) for m in deltas) < len(listed) - 1
    # A summary changes: the delta names that member alone.
    changed = net.peers[4]
    net.call(changed, "subscribe", topic, filter=parse_filter("downs > 7"))
    net.run_for(NodeConfig().members_interval + 2)
    _roots_list_everywhere(net, topic)
    if filters:
        last = _members_frames(net)[-1]
        assert last.base is not None and last.members == (changed,)
        assert last.summaries == ((render_filter(parse_filter("downs > 7")),),)
    # Members leave: the delta names them as removed.
    gone = net.peers[5:8]
    for p in gone:
        net.call(p, "unsubscribe", topic)
    net.run_for(NodeConfig().members_interval + 2)
    listed = _roots_list_everywhere(net, topic)
    assert not set(gone) & set(listed)
    last = _members_frames(net)[-1]
    assert last.base is not None and set(last.removed or ()) == set(gone)


def test_deltas_cost_a_fraction_of_whole_lists() -> None:
    """The same joins with deltas and with whole lists only (the pre-2.6 behaviour,
    planted back): the lists end equal, the MEMBERS bytes are far fewer."""

    def run(deltas: bool) -> tuple[tuple[str, ...], int]:
        net = CoreNet(24, seed=9)
        if not deltas:
            for node in net.nodes.values():
                node._send_members = _whole_lists_only(node)  # type: ignore[method-assign]
        author = net.peers[0]
        topic = net.call(author, "create_topic", "news")
        net.run_for(0.5)
        _waves(net, topic, net.peers[1:], True)
        listed = _roots_list_everywhere(net, topic)
        size = sum(
            len(s.data) for p in net.peers for s in net.logs[p].sent if isinstance(s.rpc, Members)
        )
        return listed, size

    listed, with_deltas = run(True)
    listed_whole, whole = run(False)
    assert listed == listed_whole
    assert with_deltas < 0.5 * whole, (with_deltas, whole)


def _whole_lists_only(node: object) -> object:
    real = node._send_members  # type: ignore[attr-defined]

    def send(now: float, tree: object) -> None:
        tree.members_sent = {}  # type: ignore[attr-defined]
        real(now, tree)

    return send


def test_a_lost_delta_is_repaired_by_members_want() -> None:
    net = CoreNet(10, seed=4)
    author = net.peers[0]
    topic = net.call(author, "create_topic", "news")
    net.run_for(0.5)
    first, victim, late = net.peers[1:5], net.peers[5], net.peers[6:]
    for p in [*first, victim]:
        net.call(p, "subscribe", topic)
    net.run_for(NodeConfig().members_interval + 1)
    _roots_list_everywhere(net, topic)
    lost = {"n": 0}

    def drop(s: str, r: str, rpc: object) -> bool:
        if r == victim and isinstance(rpc, Members) and rpc.base is not None and not lost["n"]:
            lost["n"] += 1
            return True
        return False

    net.drop_if = drop
    net.call(late[0], "subscribe", topic)
    net.run_for(NodeConfig().members_interval + 1)
    assert lost["n"] == 1
    stale = net.nodes[victim]._trees[topic].members_epoch
    # the next delta names a base the victim does not hold: it asks, and is answered
    for p in late[1:]:
        net.call(p, "subscribe", topic)
    net.run_for(NodeConfig().members_interval + 2)
    wants = [s for s in net.logs[victim].sent if isinstance(s.rpc, MembersWant)]
    assert [s.peer for s in wants] == [author]
    assert net.nodes[victim]._trees[topic].members_epoch != stale
    _roots_list_everywhere(net, topic)


def test_relays_pass_deltas_down() -> None:
    """Trees with relays (flat trees off): a relay applies a delta and passes it on;
    its children rebuild the same list."""
    config = dataclasses.replace(NodeConfig(), flat_fanout=0)
    net = CoreNet(30, seed=2, config=config, bucket_size=3)
    author = net.peers[0]
    topic = net.call(author, "create_topic", "news")
    net.run_for(0.5)
    _waves(net, topic, net.peers[1:], True)
    _roots_list_everywhere(net, topic)
    relayed = [
        s
        for p in net.peers[1:]
        for s in net.logs[p].sent
        if isinstance(s.rpc, Members) and s.rpc.base is not None
    ]
    assert relayed, "no relay passed a delta on"


def test_delta_of_lists() -> None:
    a, b, c, d = "A", "B", "C", "D"
    assert _delta((a, b, c), None, (a, b, d), None) == ((d,), None, (c,))
    s = (("*",), ("x = 1",), ("y = 2",))
    assert _delta((a, b, c), s, (a, b, c), (("*",), ("x = 1",), ("y = 3",))) == (
        (c,),
        (("y = 3",),),
        (),
    )
    assert _delta((a, b), None, (a, c), None) is None  # as long as the whole list
    assert _delta((b, a), None, (a, b, c), None) is None  # another root
    assert _delta((), None, (a, b), None) is None


def test_delta_frames_round_trip_and_refuse_garbage() -> None:
    net = CoreNet(6, seed=1)
    topic = net.call(net.peers[0], "create_topic", "news")
    p = net.peers
    m = Members(topic=topic, epoch=9, members=(p[1],), summaries=(("*",),), base=8, removed=(p[2],))
    assert decode_rpc(encode_rpc(m)) == m
    w = MembersWant(topic=topic)
    assert decode_rpc(encode_rpc(w)) == w
    good = m.to_ipld()
    for bad, why in (
        (good | {"base": 9}, "base"),
        (good | {"base": -1}, "base"),
        (good | {"removed": [p[1]]}, "both added and removed"),
        (good | {"removed": [p[2], p[2]]}, "removed"),
        (good | {"members": [p[1], p[1]], "summaries": [["*"], ["*"]]}, "twice"),
        (good | {"removed": ["nope"]}, "removed"),
        ({k: v for k, v in good.items() if k != "base"}, "only in a delta"),
        (w.to_ipld() | {"epoch": 1}, "unknown fields"),
    ):
        with pytest.raises(RemoteProtocolError, match=why):
            decode_rpc(_dagcbor.encode(bad))


def test_members_want_from_a_non_child_is_ignored() -> None:
    net = CoreNet(4, seed=3)
    author = net.peers[0]
    topic = net.call(author, "create_topic", "news")
    net.run_for(0.5)
    net.call(net.peers[1], "subscribe", topic)
    net.run_for(NodeConfig().members_interval + 1)
    before = len(net.logs[author].sent)
    net.inject(net.peers[2], author, MembersWant(topic=topic))
    net.run_for(0.5)
    assert not [s for s in net.logs[author].sent[before:] if isinstance(s.rpc, Members)]
    net.inject(net.peers[1], author, MembersWant(topic=topic))
    net.run_for(0.5)
    answer = [s for s in net.logs[author].sent[before:] if isinstance(s.rpc, Members)]
    assert [(s.peer, s.rpc.base) for s in answer] == [(net.peers[1], None)]
