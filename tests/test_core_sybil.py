"""Sybil joins and JOIN admission (core/_joingate.py, docs/protocol-notes.md "Sybil joins").

Each attack is planted in a small network (colocated Sybils taking the root's
children, fresh identities taking its MEMBERS list, a JOIN flood from one network),
and each test also runs it with that defence off, where the attack does succeed: the
tests can fail.
"""

from __future__ import annotations

import pytest

from pulsarcast_ipfs.core import CID, Join, JoinAck, NodeConfig, SendRpc, make_peer_ids
from pulsarcast_ipfs.core._codec import MAX_MEMBERS
from pulsarcast_ipfs.core._joingate import JoinGate, colocation_key
from pulsarcast_ipfs.core.testing import CoreNet
from pulsarcast_ipfs.records import RecordKind

SYBIL_NETS = ("ip4:203.0.113.0/24", "ip4:198.51.100.0/24")


def _own_net(i: int) -> str:
    return f"ip4:10.{i // 256}.{i % 256}.0/24"


def _subnets(peers: list[str], sybils: set[str]) -> dict[str, str]:
    """Every honest peer on a network of its own; the Sybils on two."""
    nets: dict[str, str] = {}
    for i, p in enumerate(peers):
        nets[p] = SYBIL_NETS[i % 2] if p in sybils else _own_net(i)
    return nets


def _net(
    n: int, sybil_count: int, *, spread: bool = False, **cfg: object
) -> tuple[CoreNet, CID, str, list[str], list[str]]:
    """``n`` nodes that all know each other (every JOIN goes straight to the author):
    the author, honest subscribers, and ``sybil_count`` Sybils on two networks
    (``spread``: each on a network of its own)."""
    net = CoreNet(n, seed=3, config=NodeConfig(**cfg))  # type: ignore[arg-type]
    author = net.peers[0]
    sybils = net.peers[n - sybil_count :]
    honest = net.peers[1 : n - sybil_count]
    nets = _subnets(net.peers, set() if spread else set(sybils))
    for p in net.peers:
        net.nodes[p].set_peer_subnets(net.now, nets)
    topic = net.call(author, "create_topic", "news")
    net.run_for(0.5)
    return net, topic, author, honest, sybils


@pytest.mark.parametrize("bound", [4, 0])
def test_colocated_sybils_take_a_bounded_share_of_the_roots_children(bound: int) -> None:
    """Thirty Sybils on two networks JOIN before the honest nodes: the root takes
    ``subnet_children`` from each network, and every honest JOIN still gets in, at
    the root. With the bound off (0) the root takes every Sybil."""
    net, topic, author, honest, sybils = _net(44, 30, subnet_children=bound)
    for p in sybils:
        net.call(p, "subscribe", topic)
    net.run_for(2)
    for p in honest:
        net.call(p, "subscribe", topic)
    net.run_for(8)
    children = set(net.nodes[author].topic_state(topic).children)
    taken = children & set(sybils)
    assert set(honest) <= children  # honest JOINs got in
    if bound:
        assert len(taken) == 2 * bound
        assert net.nodes[author].join_gate_counts["colocated"] >= len(sybils) - 2 * bound
        refused = [
            r
            for r in net.records(author, RecordKind.EVENT_DROPPED)
            if r.fields["reason"] == "colocated"
        ]
        assert refused
    else:
        assert taken == set(sybils)  # the attack works without the bound
    for p in net.peers[1:]:
        assert net.nodes[p].topic_state(topic).joined, p  # the refused joined elsewhere
    cid = net.call(honest[0], "publish", topic, b"x").event_cid
    net.run_for(5)
    for p in honest:
        assert cid in net.delivered(p, topic), p


@pytest.mark.parametrize("ranked", [True, False])
def test_fresh_identities_do_not_push_established_peers_off_the_members_list(
    ranked: bool,
) -> None:
    """Twenty honest children, established, then seventy fresh identities (each on a
    network of its own, so colocation does not bind) JOIN the root: its MEMBERS list
    (63 children) keeps every honest child, the fresh ones get what is left. Ranked
    off (``established_after`` beyond the run), the list is the children sorted by
    peer ID, and fresh identities do push honest ones off."""
    cfg = {} if ranked else {"established_after": 1e9}
    net, topic, author, honest, sybils = _net(91, 70, spread=True, **cfg)
    for p in honest:
        net.call(p, "subscribe", topic)
    net.run_for(70)  # established (60 s)
    for p in sybils:
        net.call(p, "subscribe", topic)
    net.run_for(12)  # MEMBERS sent (every 5 s while the children change)
    state = net.nodes[author].topic_state(topic)
    assert set(state.children) == set(honest) | set(sybils)
    listed = set(state.members[1:])
    assert len(listed) == MAX_MEMBERS - 1
    # The attack would work on a list sorted by peer ID: some honest child is not in
    # the first 63.
    assert not set(honest) <= set(sorted(state.children)[: MAX_MEMBERS - 1])
    if ranked:
        assert set(honest) <= listed
        assert len(listed & set(sybils)) == MAX_MEMBERS - 1 - len(honest)
    else:
        assert not set(honest) <= listed
    # what the children were told is that list
    child = honest[0]
    assert set(net.nodes[child].topic_state(topic).members) == set(state.members)


@pytest.mark.parametrize("limited", [True, False])
def test_a_join_flood_from_one_network_is_rate_limited_and_honest_joins_get_in(
    limited: bool,
) -> None:
    """200 identities on one network JOIN the author at once, and again a second later:
    it answers at most its subnet's burst plus what the rate refills (the rest is
    dropped unanswered), while the JOINs of 10 honest peers, on networks of their
    own, sent in the middle of the flood, are all accepted. With the bucket off every
    flood JOIN is answered."""
    cfg: dict[str, object] = {"subnet_join_rate": 5.0, "subnet_join_burst": 20.0}
    if not limited:
        cfg = {"subnet_join_rate": 1e6, "subnet_join_burst": 1e6}
    net = CoreNet(2, seed=4, config=NodeConfig(**cfg))  # type: ignore[arg-type]
    author, _other = net.peers
    topic = net.call(author, "create_topic", "news")
    net.run_for(0.5)
    flood = make_peer_ids(200, seed=11)
    honest = make_peer_ids(10, seed=12)
    nets = {p: "ip4:203.0.113.0/24" for p in flood}
    nets.update({p: _own_net(i) for i, p in enumerate(honest)})
    node = net.nodes[author]
    node.set_peer_subnets(net.now, nets)
    join = Join(topic=topic, descriptor=net.store[topic], leaf=False, up=False)
    answered: dict[str, list[bool]] = {}
    for wave in range(2):
        for i, p in enumerate(flood):
            node.receive_rpc(net.now, p, join)
            if wave == 0 and i % 20 == 10:
                node.receive_rpc(net.now, honest[i // 20], join)
        for out in node.take_outputs():
            if isinstance(out, SendRpc) and isinstance(out.rpc, JoinAck):
                answered.setdefault(out.peer, []).append(out.rpc.ok)
        net.run_for(1.0)
    flood_answers = sum(len(answered.get(p, [])) for p in flood)
    assert all(answered.get(p) == [True] for p in honest), answered
    if limited:
        # the burst, a second's refill, and the second JOINs of the 4 it took as
        # children (a child's JOIN is answered: it is no new child)
        assert flood_answers <= 20 + 5 + 4
        assert node.join_gate_counts["join_flood"] >= 400 - 29
    else:
        assert flood_answers == 400


def test_join_gate_ranks_one_per_network_then_established_then_fresh() -> None:
    peers = make_peer_ids(8, seed=21)
    topic = CID.decode("bafyreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy")
    gate = JoinGate(
        subnet_children=0,
        subnet_join_rate=1.0,
        subnet_join_burst=1.0,
        established_after=60.0,
        buckets=16,
    )
    a, b, c, d, e, f, g, h = peers
    gate.set_subnets({a: "n1", b: "n1", c: "n1", d: "n2"})
    for i, p in enumerate([a, b, c, d]):
        gate.adopted(float(i), topic, p)  # established at 100
    for p in (e, f, g, h):
        gate.adopted(90.0, topic, p)  # fresh at 100
    # a (first of n1), d (first of n2): rank first; then the keyless fresh ones, since
    # b and c are second and third of n1
    assert gate.ranked(100.0, topic, peers, 6) == sorted([a, d, e, f, g, h])
    assert gate.ranked(100.0, topic, peers, 3) == sorted([a, d, min(e, f, g, h)])
    assert gate.ranked(100.0, topic, peers[:5], 8) == sorted(peers[:5])  # all fit
    # with no networks known: established before fresh
    gate.set_subnets({})
    assert gate.ranked(100.0, topic, peers, 4) == sorted([a, b, c, d])


@pytest.mark.parametrize(
    ("addr", "key"),
    [
        ("/ip4/1.2.3.7/tcp/4001", "ip4:1.2.3.0/24"),
        ("/ip4/203.0.113.7/tcp/4001", None),  # documentation range: not global
        ("/ip4/8.8.4.4/udp/4001/quic-v1", "ip4:8.8.4.0/24"),
        ("/ip6/2001:4860:4860::8888/tcp/4001", "ip6:2001:4860:4860::/64"),
        ("/ip4/127.0.0.1/tcp/4001", None),
        ("/ip4/192.168.1.9/tcp/4001", None),
        ("/ip6/::1/tcp/4001", None),
        ("/ip4/1.2.3.4/tcp/4001/p2p/12D3KooWRelay/p2p-circuit", None),
        ("/dns4/example.org/tcp/4001", None),
        ("/ip4/not-an-ip/tcp/1", None),
        ("", None),
        ("garbage", None),
    ],
)
def test_colocation_key(addr: str, key: str | None) -> None:
    assert colocation_key(addr) == key


def test_set_peer_subnets_takes_a_mapping() -> None:
    net = CoreNet(2, seed=1)
    node = net.nodes[net.peers[0]]
    with pytest.raises(Exception, match="mapping"):
        node.set_peer_subnets(net.now, [("a", "b")])  # type: ignore[arg-type]


def test_a_networks_lying_peers_shrink_its_share_of_the_children() -> None:
    """Each peer of a network dropped as lying takes one of the network's places for
    ``penalty_ttl``: its fresh identities do not refill them."""
    topic = CID.decode("bafyreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy")
    a, b, c, d, e = make_peer_ids(5, seed=22)
    gate = JoinGate(
        subnet_children=4,
        subnet_join_rate=100.0,
        subnet_join_burst=100.0,
        established_after=60.0,
        buckets=16,
    )
    gate.set_subnets({p: "n1" for p in (a, b, c, d, e)})
    assert gate.admit(0.0, topic, e, [a, b]) is None
    gate.struck(0.0, c, 600.0)
    gate.struck(0.0, d, 600.0)
    assert gate.admit(1.0, topic, e, [a, b]) == "colocated"  # 2 of 4 places struck
    assert gate.admit(1.0, topic, e, [a]) is None
    assert gate.admit(601.0, topic, e, [a, b, c]) is None  # the strikes ran out
    for p in (a, b, c, d, a):
        gate.struck(700.0, p, 1300.0)
    assert gate.admit(701.0, topic, e, []) == "colocated"  # shut out
