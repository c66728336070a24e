"""A topic's history: the retained events of its DAG, in one total order (docs/protocol.md §5).

Theory of operation
-------------------
Protocol 2 events link *every* head their publisher knew (``parents``) and carry a
Lamport ``clock``: 0 without parents, otherwise greater than every parent's. The
history order is the key ``(clock, CID bytes)``, ascending from the oldest:

* **causal**: a parent's clock is below its child's, so it always comes first;
* **total and the same on every node**: ties between concurrent events (same clock)
  are broken by the bytes of their CIDs, a function of the events alone;
* **stable for cursors**: a page ends at an event; the next page starts strictly
  after that event's key. An event that arrives between pages lands at its own key,
  so it is listed once if it falls on the side not read yet, and not at all if it
  falls on the side already read: a boundary never skips nor repeats an event.

A :class:`TopicHistory` holds the events of one topic that this node retains,
within a :class:`RetentionPolicy` (count, age, bytes). It also knows what it lacks:
``missing`` is every parent linked by a retained event that is neither retained nor
outside the policy; the node fetches those until the set is empty (the history is
then *complete*: every ancestor of every retained event, down to the retention
horizon). ``heads`` are the retained events no retained event links.

Eviction: an event created more than ``max_age`` seconds ago goes, wherever it is
in the order; then, while there are more than ``max_events`` or ``max_bytes``, the
oldest key goes, and the **horizon** (the largest key evicted that way) rises. A
parent whose clock lies below the horizon's is outside the policy, not missing; an
event at or below the horizon, or too old, is not taken back.

Pure: no clock (``now`` is given), no I/O; evictions are returned to the caller,
which unpins them.
"""

from __future__ import annotations

import bisect
import heapq
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final, Literal

from pulsarcast_ipfs.core._cid import CID

from ._descriptors import EventDescriptor
from ._errors import LocalProtocolError
from ._filters import Filter, matches

__all__ = ["HistoryKey", "HistoryOrder", "RetentionPolicy", "TopicHistory"]

HistoryKey = tuple[int, bytes]
"""``(clock, CID bytes)``: an event's place in the history order."""
HistoryOrder = Literal["newest", "oldest"]

MAX_SCAN: Final = 10_000
"""Most events a filtered history page examines (then it ends early, with a cursor)."""
_OUTSIDE_MEMORY: Final = 4096
"""How many fetched-but-too-old CIDs are remembered (so they are not fetched again)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionPolicy:
    """What a subscriber keeps (pinned) of each topic's history (docs/sidecar.md "Retention").

    An event is kept while all three hold; the oldest (in the history order) goes first.
    """

    max_events: int = 10_000
    max_age: float = 30 * 24 * 3600.0
    """Seconds since the event's ``created``."""
    max_bytes: int = 64 * 1024 * 1024
    """Encoded descriptor bytes (payload included)."""

    def __post_init__(self) -> None:
        if type(self.max_events) is not int or self.max_events < 1:
            raise LocalProtocolError("retention max_events must be a positive integer")
        if not isinstance(self.max_age, int | float) or not self.max_age > 0:
            raise LocalProtocolError("retention max_age must be a positive number of seconds")
        if type(self.max_bytes) is not int or self.max_bytes < 1:
            raise LocalProtocolError("retention max_bytes must be a positive integer")


class TopicHistory:
    """The retained events of one topic, ordered by :data:`HistoryKey`."""

    __slots__ = (
        "_ages",
        "_bytes",
        "_cid_of",
        "_events",
        "_heads",
        "_horizon",
        "_keys",
        "_linked",
        "_missing",
        "_outside",
        "policy",
    )

    def __init__(self, *, policy: RetentionPolicy) -> None:
        self.policy = policy
        self._events: dict[CID, EventDescriptor] = {}
        self._keys: list[HistoryKey] = []  # ascending
        self._cid_of: dict[bytes, CID] = {}
        self._ages: list[tuple[float, bytes]] = []  # (created, CID bytes), a min-heap
        self._linked: dict[CID, int] = {}  # CID -> how many retained events link it
        self._heads: set[CID] = set()
        self._missing: set[CID] = set()
        self._outside: OrderedDict[CID, None] = OrderedDict()
        self._horizon: HistoryKey | None = None
        self._bytes = 0

    # ---------------------------------------------------------------- queries

    def __len__(self) -> int:
        return len(self._events)

    def __contains__(self, cid: object) -> bool:
        return cid in self._events

    def get(self, cid: CID) -> EventDescriptor | None:
        return self._events.get(cid)

    @property
    def bytes(self) -> int:
        """Encoded size of the retained events."""
        return self._bytes

    @property
    def heads(self) -> frozenset[CID]:
        """Retained events that no retained event links."""
        return frozenset(self._heads)

    @property
    def missing(self) -> frozenset[CID]:
        """Parents of retained events that are neither retained nor outside the policy."""
        return frozenset(self._missing)

    @property
    def complete(self) -> bool:
        return not self._missing

    @property
    def horizon(self) -> HistoryKey | None:
        """The largest key evicted so far (everything at or below is outside)."""
        return self._horizon

    def newest(self) -> Iterator[tuple[CID, EventDescriptor]]:
        """Every retained event, newest first."""
        for _, raw in reversed(self._keys):
            cid = self._cid_of[raw]
            yield cid, self._events[cid]

    def key_of(self, cid: CID) -> HistoryKey | None:
        ev = self._events.get(cid)
        return ev.order_key if ev is not None else None

    def page(
        self, *, order: HistoryOrder = "newest", after: HistoryKey | None = None, limit: int
    ) -> tuple[list[tuple[CID, EventDescriptor]], bool]:
        """Up to ``limit`` events strictly after the cursor key ``after`` in ``order``
        (``newest``: descending keys, so "after" means older), and whether more follow."""
        if type(limit) is not int or limit < 1:
            raise LocalProtocolError("limit must be a positive integer")
        keys = self._keys
        if order == "newest":
            end = len(keys) if after is None else bisect.bisect_left(keys, after)
            start = max(0, end - limit)
            chosen = keys[start:end][::-1]
            more = start > 0
        elif order == "oldest":
            start = 0 if after is None else bisect.bisect_right(keys, after)
            chosen = keys[start : start + limit]
            more = start + limit < len(keys)
        else:
            raise LocalProtocolError(f"order must be 'newest' or 'oldest', not {order!r}")
        cid_of, events = self._cid_of, self._events
        return [(cid_of[raw], events[cid_of[raw]]) for _, raw in chosen], more

    def filtered_page(
        self,
        *,
        order: HistoryOrder = "newest",
        after: HistoryKey | None = None,
        limit: int,
        where: Filter,
        scan: int = MAX_SCAN,
    ) -> tuple[list[tuple[CID, EventDescriptor]], CID | None]:
        """Up to ``limit`` events ``where`` matches, strictly after ``after`` in
        ``order``, examining at most ``scan`` events; and the next page's cursor.

        The cursor is the last event examined (matching or not), or None when no event
        after it remains. With ``limit`` matches found, one more is looked for (within
        ``scan``) so that a last page says ``None`` rather than leading to an empty one.
        """
        if type(limit) is not int or limit < 1:
            raise LocalProtocolError("limit must be a positive integer")
        keys = self._keys
        if order == "newest":
            end = len(keys) if after is None else bisect.bisect_left(keys, after)
            positions: range = range(end - 1, -1, -1)
        elif order == "oldest":
            start = 0 if after is None else bisect.bisect_right(keys, after)
            positions = range(start, len(keys))
        else:
            raise LocalProtocolError(f"order must be 'newest' or 'oldest', not {order!r}")
        cid_of, events = self._cid_of, self._events
        out: list[tuple[CID, EventDescriptor]] = []
        last: CID | None = None
        examined = 0
        for pos in positions:
            if examined >= scan:
                return out, last  # out of budget: go on after the last examined
            cid = cid_of[keys[pos][1]]
            ev = events[cid]
            if matches(where, ev.attributes):
                if len(out) == limit:
                    return out, out[-1][0]  # one more match exists: next page after ours
                out.append((cid, ev))
            last = cid
            examined += 1
        return out, None  # the end of the history

    # ---------------------------------------------------------------- updates

    def is_outside(self, ev: EventDescriptor, now: float) -> bool:
        """Whether the policy would not keep ``ev`` (below the horizon, or too old)."""
        h = self._horizon
        if h is not None and ev.order_key <= h:
            return True
        return ev.created_ts < now - self.policy.max_age

    def add(self, cid: CID, ev: EventDescriptor, now: float) -> bool:
        """Retain ``ev`` (its CID is ``cid``); False if known or outside the policy."""
        if cid in self._events:
            return False
        if self.is_outside(ev, now):
            self._missing.discard(cid)
            self._note_outside(cid)
            return False
        self._events[cid] = ev
        key = ev.order_key
        clock = key[0]
        if not self._keys or key > self._keys[-1]:
            self._keys.append(key)  # the usual case: the newest event
        else:
            bisect.insort(self._keys, key)
        self._cid_of[key[1]] = cid
        heapq.heappush(self._ages, (ev.created_ts, key[1]))
        self._bytes += len(ev.encode())
        self._missing.discard(cid)
        if not self._linked.get(cid):
            self._heads.add(cid)
        below = self._horizon is not None and clock - 1 < self._horizon[0]
        for p in ev.parents:
            self._linked[p] = self._linked.get(p, 0) + 1
            self._heads.discard(p)
            if p not in self._events and p not in self._outside and not below:
                self._missing.add(p)
        return True

    def enforce(self, now: float) -> list[CID]:
        """Evict what the policy no longer keeps; the evicted CIDs.

        Events older than ``max_age`` go wherever they are in the order; then, while
        there are more than ``max_events`` or ``max_bytes``, the oldest key goes (and
        the horizon rises to it)."""
        p = self.policy
        out: list[CID] = []
        cutoff = now - p.max_age
        ages = self._ages
        while ages and ages[0][0] < cutoff:
            _, raw = heapq.heappop(ages)
            cid = self._cid_of.pop(raw, None)
            if cid is None:
                continue  # evicted already
            ev = self._events[cid]
            key = ev.order_key
            del self._keys[bisect.bisect_left(self._keys, key)]
            out.append(cid)
            self._evict(cid, key, horizon=False)
        keys = self._keys
        i = 0
        while i < len(keys) and (len(keys) - i > p.max_events or self._bytes > p.max_bytes):
            cid = self._cid_of.pop(keys[i][1])
            out.append(cid)
            self._evict(cid, keys[i], horizon=True)
            i += 1
        if i:
            del keys[:i]
            self._drop_missing_below()
        return out

    def note_outside(self, cids: Iterable[CID]) -> None:
        """These events are not this history's to keep (tree filters: the node's
        subtree does not want them): not missing, and not fetched."""
        for cid in cids:
            if cid not in self._events:
                self._missing.discard(cid)
                self._note_outside(cid)

    def _note_outside(self, cid: CID) -> None:
        self._outside[cid] = None
        if len(self._outside) > _OUTSIDE_MEMORY:
            self._outside.popitem(last=False)

    def _evict(self, cid: CID, key: HistoryKey, *, horizon: bool) -> None:
        ev = self._events.pop(cid)
        self._note_outside(cid)  # its retained children do not miss it
        self._bytes -= len(ev.encode())
        self._heads.discard(cid)
        if horizon and (self._horizon is None or key > self._horizon):
            self._horizon = key
        for p in ev.parents:
            n = self._linked.get(p, 0) - 1
            if n <= 0:
                self._linked.pop(p, None)
                self._missing.discard(p)
                if p in self._events:
                    self._heads.add(p)
            else:
                self._linked[p] = n

    def _drop_missing_below(self) -> None:
        """Parents below the new horizon are outside the policy, not missing.

        A missing parent's clock is unknown; its retained children bound it from
        above (parent clock <= child clock - 1). Missing sets are small (about the
        DAG's width), and this runs once per eviction batch.
        """
        h = self._horizon
        if h is None or not self._missing:
            return
        bound: dict[CID, int] = {}
        for ev in self._events.values():
            for p in ev.parents:
                if p in self._missing:
                    bound[p] = max(bound.get(p, -1), ev.clock - 1)
        for m in list(self._missing):
            if bound.get(m, -1) < h[0]:
                self._missing.discard(m)

    def restore_horizon(self, horizon: HistoryKey | None) -> None:
        """Set the horizon a restarted node had (nothing below it is fetched again)."""
        if horizon is not None and (self._horizon is None or horizon > self._horizon):
            self._horizon = horizon

    def clear(self) -> list[CID]:
        """Forget everything (the node stops retaining the topic); the CIDs it held."""
        out = list(self._events)
        self._events = {}
        self._keys = []
        self._cid_of = {}
        self._ages = []
        self._linked = {}
        self._heads = set()
        self._missing = set()
        self._bytes = 0
        return out
