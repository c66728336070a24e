"""Admission: per-peer token buckets and bans (flood protection, docs/security.md).

JOIN (and SUMMARY, MEMBERS_WANT), EVENT-like and REQUEST_TO_PUBLISH RPCs each spend a
token of the sender's bucket for that class; a peer refused ``abuse_limit`` times within
``abuse_window`` is disconnected, dropped from every tree and ignored for
``ban_time``.

(:class:`Admission` is a part of :class:`~._node.PulsarcastNode`: a mixin
over :class:`~._base.NodeBase`, which declares the state and methods they share.)
"""

from __future__ import annotations

from ._base import NodeBase, _in_force
from ._bucket import TokenBucket
from ._codec import Rpc
from ._io import DisconnectPeer

__all__ = ["Admission"]


_LIMITED_OPS = {
    "JOIN": "join",
    "EVENT": "event",
    "HEADS": "event",
    "DIGEST": "event",
    "MEMBERS": "event",
    "REQUEST_TO_PUBLISH": "request",
    "SUMMARY": "join",
    "MEMBERS_WANT": "join",
    "WATCH": "join",
    "GROUP_JOIN": "join",
    "GROUP_EVENT": "event",
    "GROUP_ACK": "event",
    "GROUP_ASSIGN": "event",
    "GROUP_LEAVE": "event",
    "STORED": "event",
}


class Admission(NodeBase):
    """Admission (a part of :class:`~._node.PulsarcastNode`)."""

    def _is_banned(self, now: float, peer: str) -> bool:
        return _in_force(self._banned, peer, now)

    def _admit(self, now: float, peer: str, rpc: Rpc) -> bool:
        """Per-peer token buckets for JOIN, EVENT/HEADS and REQUEST_TO_PUBLISH.

        Over the limit: drop (``event_dropped`` reason ``rate_limited``). A peer
        refused ``abuse_limit`` times within ``abuse_window`` is disconnected
        (:class:`DisconnectPeer`), dropped from every tree, and ignored for
        ``ban_time``. Pure: time comes from ``now``.
        """
        cls = _LIMITED_OPS.get(rpc.op)
        if cls is None:
            return True
        c = self.config
        rate, burst = self._limits[cls]
        key = (peer, cls)
        bucket: TokenBucket | None = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(tokens=burst, last=now)
        self._buckets.put(key, bucket)
        if bucket.take(now, rate, burst):
            return True
        strikes: list[float] | None = self._strikes.get(peer)
        if strikes is None or now - strikes[0] > c.abuse_window:
            strikes = [now, 0.0]
        strikes[1] += 1
        self._strikes.put(peer, strikes)
        self._drop(now, "rate_limited", peer=peer)
        if strikes[1] >= c.abuse_limit:
            until = now + c.ban_time
            self._banned[peer] = until
            self._strikes.put(peer, [now, 0.0])
            self._emit(DisconnectPeer(peer=peer, reason=f"{rpc.op} flood", until=until))
            self._peer_failed(now, peer)
        return False

    @property
    def banned_peers(self) -> dict[str, float]:
        """Peers ignored for flooding, with the time until which they are."""
        return dict(self._banned)
