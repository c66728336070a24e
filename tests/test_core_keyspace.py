"""Keyspace (core/_keyspace.py): the greedy next hop of Algorithm 2, with no network."""

from __future__ import annotations

import pytest

from pulsarcast_ipfs.core import LocalProtocolError, make_peer_ids
from pulsarcast_ipfs.core._keyspace import Keyspace
from pulsarcast_ipfs.kademlia import peer_position


def _brute(me: str, peers: list[str], author: str, skip: set[str]) -> str | None:
    target = peer_position(author)
    mine = peer_position(me) ^ target
    closer = [(peer_position(p) ^ target, p) for p in peers if p not in skip and p != me]
    closer = [c for c in closer if c[0] < mine]
    return min(closer)[1] if closer else None


def test_the_next_hop_is_the_closest_strictly_closer_known_peer() -> None:
    peers = make_peer_ids(40, seed=3)
    for me in peers[:10]:
        ks = Keyspace(me)
        ks.set_known(peers)
        for author in peers[10:20]:
            target = peer_position(author)
            for skip in (set(), set(peers[20:30])):
                want = _brute(me, peers, author, skip)
                assert ks.next_hop(target, skip) == want
                assert ks.next_hop(target, set(), skip.__contains__) == want
            assert ks.next_hop(target, set(), lambda p: True) is None


def test_the_author_is_no_ones_next_hop_but_its_own_closest_is_it() -> None:
    author, *rest = make_peer_ids(12, seed=4)
    ks = Keyspace(author)
    ks.set_known(rest)
    assert ks.next_hop(peer_position(author), set()) is None  # distance 0: the root
    ks = Keyspace(rest[0])
    ks.set_known([author, *rest])
    assert ks.next_hop(peer_position(author), set()) == author
    assert ks.distance(author, peer_position(author)) == 0


def test_a_bad_peer_id_from_the_driver_is_its_bug() -> None:
    ks = Keyspace(make_peer_ids(1, seed=5)[0])
    with pytest.raises(LocalProtocolError):
        ks.set_known(["not-a-peer-id"])
