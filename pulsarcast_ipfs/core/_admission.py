"""Admission: per-peer token buckets and bans (flood protection, docs/security.md).

JOIN (and SUMMARY, MEMBERS_WANT), EVENT-like and REQUEST_TO_PUBLISH RPCs each spend a
token of the sender's bucket for that class; a peer refused ``abuse_limit`` times within
``abuse_window`` is disconnected, dropped from every tree and ignored for
``ban_time``.

:class:`Admission` is a component of :class:`~._node.PulsarcastNode` (``node._admission``):
it owns the buckets, the strikes and the bans; the node asks it about each RPC
(:meth:`~Admission.admit`) and each peer (:meth:`~Admission.banned`), and it reaches
the node only through the three calls it is given (record a drop, emit an output,
a peer failed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ._bucket import TokenBucket
from ._codec import Rpc
from ._config import NodeConfig
from ._io import DisconnectPeer, Output
from ._tree import LRU

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


class _Drop(Protocol):
    def __call__(self, now: float, reason: str, **fields: Any) -> None: ...


class Admission:
    """The flood protection of one node (see the module)."""

    def __init__(
        self,
        *,
        config: NodeConfig,
        drop: _Drop,
        emit: Callable[[Output], None],
        peer_failed: Callable[[float, str], None],
    ) -> None:
        c = self.config = config
        self._drop = drop
        self._emit = emit
        self._peer_failed = peer_failed
        self._buckets = LRU(c.rate_limit_peers)  # (peer, class) -> TokenBucket
        self._strikes = LRU(c.rate_limit_peers)  # peer -> [window start, count]
        self._banned: dict[str, float] = {}  # peer -> until
        self._limits = {
            "join": (c.join_rate, c.join_burst),
            "event": (c.event_rate, c.event_burst),
            "request": (c.request_rate, c.request_burst),
        }

    def banned(self, now: float, peer: str) -> bool:
        """Whether ``peer`` is ignored for flooding (an ended ban is forgotten)."""
        end = self._banned.get(peer) if self._banned else None
        if end is None:
            return False
        if end <= now:
            del self._banned[peer]
            return False
        return True

    @property
    def any_banned(self) -> bool:
        """Some peer is (or was, until it is next asked about) banned."""
        return bool(self._banned)

    def admit(self, now: float, peer: str, rpc: Rpc) -> bool:
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
    def peers(self) -> dict[str, float]:
        """Peers ignored for flooding, with the time until which they are."""
        return dict(self._banned)
