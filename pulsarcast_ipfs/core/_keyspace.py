"""Where peers sit in the keyspace, and the greedy next hop towards a topic's author
(Algorithm 2, §3).

Theory of operation
-------------------
Every peer has a *position*: the 256-bit Kademlia key of its peer ID
(:func:`~pulsarcast_ipfs.kademlia.peer_position`). A tree grows towards its author:
a node JOINs the known peer closest to the author by XOR distance, and only one
strictly closer than itself, so JOINs never go round in a circle and the author
(distance 0) is the root. The peers a node knows are the driver's routing-table
snapshot plus its connected peers (:meth:`Keyspace.set_known`, which replaces the
previous snapshot); positions are computed once per peer.

This object owns the known peers and their positions, and answers distance
questions; which peers to skip (children, peers found lying, suspects, banned
peers) is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pulsarcast_ipfs.kademlia import InvalidPeerId, peer_position

from ._errors import LocalProtocolError

__all__ = ["Keyspace"]


class Keyspace:
    """The known peers' keyspace positions (a component of
    :class:`~._node.PulsarcastNode`)."""

    def __init__(self, peer_id: str) -> None:
        self.peer_id = peer_id
        self.position = peer_position(peer_id)
        self._known: dict[str, int] = {}  # peer -> keyspace position

    def set_known(self, peers: Iterable[str]) -> None:
        """Routing-table snapshot plus connected peers; replaces the previous one. A
        peer ID that is no valid key is the driver's bug (:class:`LocalProtocolError`)."""
        known: dict[str, int] = {}
        for peer in peers:
            if peer == self.peer_id:
                continue
            pos = self._known.get(peer)
            if pos is None:
                try:
                    pos = peer_position(peer)
                except InvalidPeerId as exc:
                    raise LocalProtocolError(str(exc)) from exc
            known[peer] = pos
        self._known = known

    def distance(self, peer: str, target: int) -> int:
        """XOR distance of ``peer`` (known or not) to the position ``target``."""
        pos = self._known.get(peer)
        if pos is None:
            pos = peer_position(peer)
        return pos ^ target

    def my_distance(self, target: int) -> int:
        return self.position ^ target

    def next_hop(
        self,
        target: int,
        skip: set[str],
        excluded: Callable[[str], bool] | None = None,
    ) -> str | None:
        """The known peer closest to ``target`` and strictly closer than this node,
        ties broken by peer ID, leaving out ``skip`` and the peers ``excluded`` says
        (asked only of peers that would otherwise be candidates); ``None``: nobody."""
        mine = self.position ^ target
        best: tuple[int, str] | None = None
        if excluded is not None:
            for peer, pos in self._known.items():
                if peer in skip or excluded(peer):
                    continue
                d = pos ^ target
                if d < mine and (best is None or (d, peer) < best):
                    best = (d, peer)
            return None if best is None else best[1]
        # Only the distance matters: the skip set is consulted for the candidates
        # that would win.
        for peer, pos in self._known.items():
            d = pos ^ target
            if d < mine and (best is None or (d, peer) < best) and peer not in skip:
                best = (d, peer)
        return None if best is None else best[1]
