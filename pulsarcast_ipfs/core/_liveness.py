"""Liveness, the tree's half: PING/PONG keep-alive, parents that lag or die, suspects
(§6).

The links' figures (last heard, round trips, unanswered PINGs) and the decisions on
them are :class:`~._links.PeerLinks`'s, a component that owns its state; this part
of the node sends the PINGs and PONGs it asks for, joins a closer peer away from a
lagging parent (make before break), and drops a parent or child gone silent.

(:class:`Liveness` is a part of :class:`~._node.PulsarcastNode`: a mixin
over :class:`~._base.NodeBase`, which declares the state and methods they share.)
"""

from __future__ import annotations

from ._base import NodeBase
from ._codec import Ping, Pong
from ._moves import entry_point

__all__ = ["Liveness"]


class Liveness(NodeBase):
    """Liveness (a part of :class:`~._node.PulsarcastNode`)."""

    def _is_suspect(self, now: float, peer: str) -> bool:
        return self._admission.banned(now, peer) or self._links.is_suspect(now, peer)

    def link_rtt(self, peer: str) -> float | None:
        """The smoothed round trip (s) of the link to parent ``peer``, from its PONGs
        (``None``: not measured yet, or not a parent: only parents are PINGed)."""
        return self._links.rtt(peer)

    def _ping(self, now: float, peer: str) -> None:
        nonce = self._rng.getrandbits(62)
        self._links.sent(now, peer, nonce)
        self._send(now, peer, Ping(nonce=nonce), None)

    def _on_pong(self, now: float, peer: str, rpc: Pong) -> None:
        if self._links.pong(now, peer, rpc.nonce):
            self._parent_lagging(now, peer)

    def _probe_parent(self, now: float, peer: str) -> None:
        """An event came from ``peer`` more than half its lag limit after it was
        created: PING it now (:meth:`~._links.PeerLinks.probe`). Unanswered in time,
        it is lagging: its PONG waits behind the backlog that makes its events late.
        Clock skew or an old event only costs a PING (at most one per lag limit)."""
        patience = self._links.probe(now, peer)
        if patience is None:
            return
        self._ping(now, peer)
        self._links.probe_sent(now, peer, patience)

    def _check_lag(self, now: float) -> None:
        """PINGs overran: probe once (a lost message is not lag), then call it lag."""
        for peer, probe in self._links.overdue(now):
            if probe:
                self._ping(now, peer)
            else:
                self._parent_lagging(now, peer)
        self._links.rearm()

    @entry_point
    def _parent_lagging(self, now: float, peer: str) -> None:
        """§6 repair for a parent that answers too late: join a closer peer if there is
        one; the laggard stays the parent until the new one accepts (then LEAVE), and
        stays it if the new one refuses or does not answer in time while the laggard
        still answers (the next lag check may try again). Trying peer after peer, as
        a lost parent does, made a JOIN storm where every peer lags (50 nodes on 2
        cores: docs/benchmark-history.md, session 12; ``benchmarks/lag_churn.py``); a laggard
        silent all along may be dead, and then the next peers are tried."""
        self._links.stop_waiting(peer)
        self._links.suspect(now, peer)
        for tree in list(self._trees.values()):
            if tree.parent != peer or tree.join is not None:
                continue
            hop = self._next_hop(now, tree, (peer,))
            if hop is None:
                continue  # nobody better: keep the slow parent
            self._send_join(now, tree, hop, {peer, hop}, away=True)

    def _keep_alive(self, now: float) -> None:
        """§6 keep-alive: children PING parents; silence means the neighbour is dead."""
        c = self.config
        links = self._links
        parents = {t.parent for t in self._trees.values() if t.parent is not None}
        dead_parent = c.dead_after * c.ping_interval
        links.keep_parents(parents)
        for peer in sorted(parents):
            if links.silent_for(now, peer) > dead_parent:
                self._peer_failed(now, peer)
            else:
                self._ping(now, peer)
        dead_child = 2 * c.dead_after * c.ping_interval
        for tree in list(self._trees.values()):
            gone = [p for p in tree.children if links.silent_for(now, p) > dead_child]
            for peer in gone:
                del tree.children[peer]
                tree.edges.pop(peer, None)
            if gone:
                self._tree_changed(now, tree)
                self._maybe_leave(now, tree)
        links.keep_heard(p for t in self._trees.values() for p in t.neighbours())
