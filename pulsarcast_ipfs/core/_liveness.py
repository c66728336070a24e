"""Liveness: PING/PONG keep-alive, parent lag detection and suspects (§6).

Children PING their parents every ``ping_interval``; a parent silent
``dead_after`` rounds is gone, a child silent twice as long is dropped. A parent
that answers later than ``slow_parent_after`` beyond twice the shortest round trip
seen on that link (or whose events come late and whose probe PING is not answered
in a few round trips) is lagging: the node joins a closer peer and keeps the slow
one until then (make before break). The link's own delay is not lag: with 500 ±
300 ms each way every parent answered "late", and children hopped from parent to
parent into chains eight deep (run set "s8f").

(:class:`Liveness` is a part of :class:`~._node.PulsarcastNode`: a mixin
over :class:`~._base.NodeBase`, which declares the state and methods they share.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from ._base import NodeBase, _in_force
from ._codec import Ping, Pong
from ._moves import entry_point

__all__ = ["Liveness"]

_MIN_PROBE_WAIT: Final = 0.25
"""Seconds a probe PING after a late event waits at least (however short the link's
round trip): scheduling hiccups of a loaded machine are not lag."""


@dataclass(slots=True, kw_only=True)
class _PingWait:
    """PINGs to a parent not answered yet (lag detection, ``slow_parent_after``)."""

    since: float
    """When the oldest unanswered PING was sent."""
    sent: dict[int, float]
    """nonce -> when it was sent (bounded)."""
    probe_due: float | None = None
    """A probe PING went out after ``since`` overran; unanswered by then: lagging."""

    def due(self, slow_after: float) -> float:
        return self.probe_due if self.probe_due is not None else self.since + slow_after


class Liveness(NodeBase):
    """Liveness (a part of :class:`~._node.PulsarcastNode`)."""

    def _is_suspect(self, now: float, peer: str) -> bool:
        return self._admission.banned(now, peer) or _in_force(self._suspect, peer, now)

    def link_rtt(self, peer: str) -> float | None:
        """The smoothed round trip (s) of the link to parent ``peer``, from its PONGs
        (``None``: not measured yet, or not a parent: only parents are PINGed)."""
        return self._srtt.get(peer)

    def _lag_limit(self, peer: str) -> float:
        """How late a PONG from ``peer`` may come: ``slow_parent_after`` plus twice
        the shortest round trip seen on that link (its delay, not a backlog)."""
        return self.config.slow_parent_after + 2 * self._rtt_min.get(peer, 0.0)

    def _ping(self, now: float, peer: str) -> None:
        nonce = self._rng.getrandbits(62)
        wait = self._pings.get(peer)
        if wait is None:
            self._pings[peer] = _PingWait(since=now, sent={nonce: now})
            self._lag_check_by(now + self._lag_limit(peer))
        elif len(wait.sent) < 8:
            wait.sent[nonce] = now
        self._send(now, peer, Ping(nonce=nonce), None)

    def _on_pong(self, now: float, peer: str, rpc: Pong) -> None:
        wait = self._pings.get(peer)
        sent = wait.sent.get(rpc.nonce) if wait is not None else None
        if sent is None:
            return
        rtt = now - sent
        if rtt < self._rtt_min.get(peer, math.inf):
            self._rtt_min[peer] = rtt
        if rtt > self._lag_limit(peer):
            self._parent_lagging(now, peer)
        else:
            srtt = self._srtt.get(peer)
            self._srtt[peer] = rtt if srtt is None else 0.875 * srtt + 0.125 * rtt
            del self._pings[peer]
            if not self._pings:
                self._lag_at = None

    def _probe_parent(self, now: float, peer: str) -> None:
        """An event came from ``peer`` more than half ``slow_parent_after`` after it was
        created: PING it now. Unanswered within four smoothed round trips of that link
        (at least ``_MIN_PROBE_WAIT``, at most ``slow_parent_after``), it is lagging:
        its PONG waits behind the backlog that makes its events late. Clock skew or an
        old event only costs a PING (at most one per ``slow_parent_after``)."""
        wait = self._pings.get(peer)
        if (wait is not None and wait.probe_due is not None) or self._next_probe.get(
            peer, now
        ) > now:
            return
        slow_after = self._lag_limit(peer)
        self._next_probe[peer] = now + slow_after
        srtt = self._srtt.get(peer)
        patience = slow_after if srtt is None else min(slow_after, max(_MIN_PROBE_WAIT, 4 * srtt))
        self._ping(now, peer)
        self._pings[peer].probe_due = now + patience
        self._lag_check_by(now + patience)

    def _lag_check_by(self, due: float) -> None:
        if self._lag_at is None or due < self._lag_at:
            self._lag_at = due

    def _check_lag(self, now: float) -> None:
        """PINGs overran: probe once (a lost message is not lag), then call it lag."""
        for peer, wait in list(self._pings.items()):
            if wait.due(self._lag_limit(peer)) > now:
                continue
            if wait.probe_due is None:
                wait.probe_due = now + self._lag_limit(peer)
                self._ping(now, peer)
            else:
                self._parent_lagging(now, peer)
        self._lag_at = min(
            (w.due(self._lag_limit(p)) for p, w in self._pings.items()), default=None
        )

    @entry_point
    def _parent_lagging(self, now: float, peer: str) -> None:
        """§6 repair for a parent that answers too late: join a closer peer if there is
        one; the laggard stays the parent until the new one accepts (then LEAVE), and
        stays it if the new one refuses or does not answer in time while the laggard
        still answers (the next lag check may try again). Trying peer after peer, as
        a lost parent does, made a JOIN storm where every peer lags (50 nodes on 2
        cores: docs/benchmark-history.md, session 12; ``benchmarks/lag_churn.py``); a laggard
        silent all along may be dead, and then the next peers are tried."""
        self._pings.pop(peer, None)
        self._suspect[peer] = now + self.config.suspect_ttl
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
        parents = {t.parent for t in self._trees.values() if t.parent is not None}
        dead_parent = c.dead_after * c.ping_interval
        for peer in [p for p in self._pings if p not in parents]:
            del self._pings[peer]
        for table in (self._next_probe, self._srtt, self._rtt_min):
            for peer in [p for p in table if p not in parents]:
                del table[peer]
        for peer in sorted(parents):
            heard = self._last_heard.setdefault(peer, now)
            if now - heard > dead_parent:
                self._peer_failed(now, peer)
            else:
                self._ping(now, peer)
        dead_child = 2 * c.dead_after * c.ping_interval
        for tree in list(self._trees.values()):
            gone = [
                p for p in tree.children if now - self._last_heard.setdefault(p, now) > dead_child
            ]
            for peer in gone:
                del tree.children[peer]
                tree.edges.pop(peer, None)
            if gone:
                self._tree_changed(now, tree)
                self._maybe_leave(now, tree)
        live = {p for t in self._trees.values() for p in t.neighbours()}
        for peer in [p for p in self._last_heard if p not in live]:
            del self._last_heard[peer]
