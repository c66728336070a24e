"""Links to other peers: when each tree neighbour was last heard from, the round trips
and unanswered PINGs of the links to parents, and the peers held suspect (§6;
docs/protocol.md §11.2).

Theory of operation
-------------------
Children PING their parents every ``ping_interval``; a parent not heard from in
``dead_after`` rounds is gone, a child silent twice as long is dropped. A PONG's round
trip feeds two figures per parent link, as a transport's loss recovery does: the
shortest ever seen (the link's own delay) and a smoothed one (RFC 6298's 7/8 weight).
A parent *lags* when a PONG comes later than its *lag limit*, ``slow_parent_after``
beyond twice the shortest round trip of that link; a PING unanswered that long gets
one probe PING (a lost message is not lag), and the probe unanswered as long again is
lag too. An event from the parent that comes late sends a probe PING at once, with a
shorter patience (four smoothed round trips). The link's own delay is not lag: with
500 ± 300 ms each way every parent answered "late", and children hopped from parent
to parent into chains eight deep (run set "s8f"). A parent that lags or fails is
*suspect* for ``suspect_ttl``: no JOIN goes to it meanwhile.

This object owns that state and decides; it sends nothing. The node draws each
PING's nonce, sends it, and carries out what this object answers: a PING to send
(:meth:`overdue`), a parent that lags (:meth:`pong`, :meth:`overdue`), a parent or a
child silent too long (:meth:`silent_for`), the next deadline (:attr:`due`). Its
membership half (joining a closer peer away from a laggard, dropping the dead) stays
with the tree's state (``_liveness``, ``_membership``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = ["PeerLinks"]

_MIN_PROBE_WAIT: Final = 0.25
"""Seconds a probe PING after a late event waits at least (however short the link's
round trip): scheduling hiccups of a loaded machine are not lag."""

_MAX_IN_FLIGHT: Final = 8
"""Unanswered PINGs remembered per parent."""


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


class PeerLinks:
    """Last-heard times of neighbours, the PING state of parent links and suspects
    (see the module doc). A component of :class:`~._node.PulsarcastNode`."""

    def __init__(self, *, slow_parent_after: float, suspect_ttl: float) -> None:
        self.slow_parent_after = slow_parent_after
        self.suspect_ttl = suspect_ttl
        self._suspect: dict[str, float] = {}  # peer -> suspect until
        self._last_heard: dict[str, float] = {}
        self._pings: dict[str, _PingWait] = {}  # parent -> PINGs it has not answered
        self._next_probe: dict[str, float] = {}  # parent -> no late-event probe before
        self._srtt: dict[str, float] = {}  # parent -> smoothed PING round trip
        self._rtt_min: dict[str, float] = {}  # parent -> shortest round trip seen
        self._due: float | None = None  # when the next _PingWait falls due (or earlier)

    # ------------------------------------------------------------ heard from

    def heard(self, now: float, peer: str) -> None:
        """Anything came from ``peer``."""
        self._last_heard[peer] = now

    def last_heard(self, peer: str) -> float | None:
        return self._last_heard.get(peer)

    def silent_for(self, now: float, peer: str) -> float:
        """Seconds since ``peer`` was last heard from; a neighbour never heard from
        counts from now."""
        return now - self._last_heard.setdefault(peer, now)

    def forget(self, peer: str) -> None:
        """``peer`` failed: nothing of it is kept but its link figures (a parent's go
        with :meth:`keep_parents`)."""
        self._last_heard.pop(peer, None)
        self._pings.pop(peer, None)

    def keep_parents(self, parents: set[str]) -> None:
        """Forget the PINGs and link figures of peers that are no parent any more."""
        for table in (self._pings, self._next_probe, self._srtt, self._rtt_min):
            for peer in [p for p in table if p not in parents]:
                del table[peer]

    def keep_heard(self, live: Iterable[str]) -> None:
        """Forget when peers that are no tree neighbour were last heard from."""
        keep = set(live)
        for peer in [p for p in self._last_heard if p not in keep]:
            del self._last_heard[peer]

    # ------------------------------------------------------------ suspects

    def suspect(self, now: float, peer: str) -> None:
        """``peer`` lagged or failed: no JOIN to it for ``suspect_ttl``."""
        self._suspect[peer] = now + self.suspect_ttl

    def is_suspect(self, now: float, peer: str) -> bool:
        until = self._suspect.get(peer)
        if until is None:
            return False
        if until <= now:
            del self._suspect[peer]
            return False
        return True

    @property
    def any_suspect(self) -> bool:
        """Whether any peer is (or was, not yet looked at since) suspect."""
        return bool(self._suspect)

    # ------------------------------------------------------------ round trips

    def rtt(self, peer: str) -> float | None:
        """The smoothed round trip (s) of the link to parent ``peer`` (``None``: not
        measured yet, or not a parent)."""
        return self._srtt.get(peer)

    def lag_limit(self, peer: str) -> float:
        """How late a PONG from ``peer`` may come: ``slow_parent_after`` plus twice
        the shortest round trip seen on that link (its delay, not a backlog)."""
        return self.slow_parent_after + 2 * self._rtt_min.get(peer, 0.0)

    @property
    def due(self) -> float | None:
        """When :meth:`overdue` has something to say (or earlier)."""
        return self._due

    def _due_by(self, at: float) -> None:
        if self._due is None or at < self._due:
            self._due = at

    def sent(self, now: float, peer: str, nonce: int) -> None:
        """A PING to parent ``peer`` went out."""
        wait = self._pings.get(peer)
        if wait is None:
            self._pings[peer] = _PingWait(since=now, sent={nonce: now})
            self._due_by(now + self.lag_limit(peer))
        elif len(wait.sent) < _MAX_IN_FLIGHT:
            wait.sent[nonce] = now

    def pong(self, now: float, peer: str, nonce: int) -> bool | None:
        """A PONG: ``None`` if it answers no PING of ours, else whether the parent lags
        (answered later than its lag limit; its PINGs then stay unanswered until
        :meth:`stop_waiting`)."""
        wait = self._pings.get(peer)
        sent = wait.sent.get(nonce) if wait is not None else None
        if sent is None:
            return None
        rtt = now - sent
        if rtt < self._rtt_min.get(peer, math.inf):
            self._rtt_min[peer] = rtt
        if rtt > self.lag_limit(peer):
            return True
        srtt = self._srtt.get(peer)
        self._srtt[peer] = rtt if srtt is None else 0.875 * srtt + 0.125 * rtt
        del self._pings[peer]
        if not self._pings:
            self._due = None
        return False

    def stop_waiting(self, peer: str) -> None:
        """``peer`` was found lagging: its unanswered PINGs are forgotten."""
        self._pings.pop(peer, None)

    def probe(self, now: float, peer: str) -> float | None:
        """An event came late from parent ``peer``: the patience (s) of a probe PING to
        send now (four smoothed round trips, at least ``_MIN_PROBE_WAIT``, at most the
        lag limit), or ``None`` (a probe is out, or one went less than a lag limit ago).
        The caller sends the PING, then calls :meth:`probe_sent`."""
        wait = self._pings.get(peer)
        if (wait is not None and wait.probe_due is not None) or self._next_probe.get(
            peer, now
        ) > now:
            return None
        slow_after = self.lag_limit(peer)
        self._next_probe[peer] = now + slow_after
        srtt = self._srtt.get(peer)
        return slow_after if srtt is None else min(slow_after, max(_MIN_PROBE_WAIT, 4 * srtt))

    def probe_sent(self, now: float, peer: str, patience: float) -> None:
        self._pings[peer].probe_due = now + patience
        self._due_by(now + patience)

    def overdue(self, now: float) -> list[tuple[str, bool]]:
        """Parents whose PINGs overran, in PING order: ``(peer, True)`` to probe now
        (a lost message is not lag: the probe is noted, send it), ``(peer, False)``
        lagging (the probe went unanswered too). Call :meth:`rearm` after acting."""
        out: list[tuple[str, bool]] = []
        for peer, wait in self._pings.items():
            if wait.due(self.lag_limit(peer)) > now:
                continue
            if wait.probe_due is None:
                wait.probe_due = now + self.lag_limit(peer)
                out.append((peer, True))
            else:
                out.append((peer, False))
        return out

    def rearm(self) -> None:
        """The next deadline, from the PINGs still unanswered."""
        self._due = min((w.due(self.lag_limit(p)) for p, w in self._pings.items()), default=None)
