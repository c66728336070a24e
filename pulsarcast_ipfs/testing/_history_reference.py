"""The retained history as it was first written: a ``dict`` of packed records by CID
bytes and a sorted ``list`` (one Python object per event and per entry).

Kept as the reference that ``tests/test_history_differential.py`` checks the compact
:class:`pulsarcast_ipfs.core.TopicHistory` against: the same operations give the same
answers. Not used by the node.
"""

from __future__ import annotations

import bisect
import heapq
import struct
from collections.abc import Iterable, Iterator, Mapping
from typing import Final

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._dagcbor import decode, encode
from pulsarcast_ipfs.core._descriptors import EventDescriptor
from pulsarcast_ipfs.core._errors import LocalProtocolError
from pulsarcast_ipfs.core._filters import AttributeValue, Filter, matches
from pulsarcast_ipfs.core._history import (
    MAX_SCAN,
    HistoryKey,
    HistoryOrder,
    RetainedEvent,
    RetentionPolicy,
)

__all__ = ["ReferenceHistory"]

_OUTSIDE_MEMORY: Final = 4096

_Raw = bytes
"""CID bytes (the name ``bytes`` is a property inside :class:`TopicHistory`)."""
_HEAD: Final = struct.Struct(">Q36sdIH")
"""A record's fixed part: clock, CID bytes, created, size, number of parents."""
_CREATED: Final = struct.Struct(">d")
_CID_LEN: Final = 36
"""Bytes of an event's CID (CIDv1 dag-cbor sha2-256: every event's, recomputed)."""


def _pack(raw: bytes, ev: EventDescriptor) -> bytes:
    """The record of event ``ev`` (CID bytes ``raw``): :data:`_HEAD`, then each parent
    as a length byte and its CID bytes, then the dag-cbor attribute map if any.
    Records start with ``clock`` (8 bytes, big-endian) and the CID bytes, so that
    they sort as the history order."""
    parts = [_HEAD.pack(ev.clock, raw, ev.created_ts, len(ev.encode()), len(ev.parents))]
    for p in ev.parents:
        pb = bytes(p)
        if len(pb) > 255:
            raise LocalProtocolError(f"parent CID {p} is too long for the history index")
        parts.append(bytes((len(pb),)) + pb)
    if ev.attributes is not None:
        parts.append(encode(dict(ev.attributes)))
    return b"".join(parts)


def _parents(rec: bytes) -> tuple[list[bytes], int]:
    """The parents' CID bytes of record ``rec``, and where its attributes start."""
    n = int.from_bytes(rec[_HEAD.size - 2 : _HEAD.size], "big")
    pos = _HEAD.size
    out: list[bytes] = []
    for _ in range(n):
        size = rec[pos]
        out.append(rec[pos + 1 : pos + 1 + size])
        pos += 1 + size
    return out, pos


def _attributes(rec: bytes) -> Mapping[str, AttributeValue] | None:
    _, pos = _parents(rec)
    return decode(rec[pos:]) if pos < len(rec) else None


def _created(rec: bytes) -> float:
    """A record's ``created`` (seconds since the epoch)."""
    created: float = _CREATED.unpack_from(rec, 44)[0]
    return created


def _key_bytes(key: HistoryKey) -> bytes:
    """A cursor key as a record prefix (clock, then CID bytes)."""
    return key[0].to_bytes(8, "big") + key[1]


class ReferenceHistory:
    """The retained events of one topic, ordered by :data:`HistoryKey`.

    An index, not the events: per event one record (``bytes``: clock, CID, created,
    size, parents' CIDs, attributes; about 130 bytes for one parent) in a dict by CID
    bytes and in a list sorted in the history order, its CID bytes in the list of its
    second of ``created`` (age eviction); links are counted only where an event has
    more than one retained child or is not retained itself. The bodies
    are in the block store (docs/sidecar.md "Retention").
    """

    __slots__ = (
        "_absent",
        "_age_secs",
        "_ages",
        "_bytes",
        "_heads",
        "_horizon",
        "_keys",
        "_missing",
        "_multi",
        "_outside",
        "_recs",
        "policy",
    )

    def __init__(self, *, policy: RetentionPolicy) -> None:
        self.policy = policy
        self._recs: dict[bytes, bytes] = {}  # CID bytes -> record
        self._keys: list[bytes] = []  # the records, ascending (history order)
        self._ages: dict[int, list[bytes]] = {}  # whole second of created -> CID bytes
        self._age_secs: list[int] = []  # the seconds of _ages, a min-heap
        # How many retained events link an event, without an entry per event: a retained
        # event is linked by none if it is in _heads, by n >= 2 if _multi says so, else
        # by one; _absent counts the links to events not retained.
        self._multi: dict[bytes, int] = {}
        self._absent: dict[bytes, int] = {}
        self._heads: set[bytes] = set()
        self._missing: set[CID] = set()
        self._outside: dict[bytes, None] = {}  # CID bytes, oldest first (bounded)
        self._horizon: HistoryKey | None = None
        self._bytes = 0

    # ---------------------------------------------------------------- queries

    def __len__(self) -> int:
        return len(self._recs)

    def __contains__(self, cid: object) -> bool:
        return isinstance(cid, CID) and bytes(cid) in self._recs

    def get(self, cid: CID) -> RetainedEvent | None:
        """The index entry of retained event ``cid`` (its body is in the block store)."""
        rec = self._recs.get(bytes(cid))
        if rec is None:
            return None
        clock, _, created, size, _ = _HEAD.unpack_from(rec)
        parents, pos = _parents(rec)
        attrs = decode(rec[pos:]) if pos < len(rec) else None
        return RetainedEvent(cid, clock, created, size, tuple(map(CID._make, parents)), attrs)

    @property
    def bytes(self) -> int:
        """Encoded size of the retained events."""
        return self._bytes

    @property
    def heads(self) -> frozenset[CID]:
        """Retained events that no retained event links."""
        return frozenset(map(CID._make, self._heads))

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

    def newest(self) -> Iterator[CID]:
        """Every retained event, newest first."""
        for rec in reversed(self._keys):
            yield CID._make(rec[8:44])

    def key_of(self, cid: CID) -> HistoryKey | None:
        raw = bytes(cid)
        rec = self._recs.get(raw)
        return (int.from_bytes(rec[:8], "big"), raw) if rec is not None else None

    def _bounds(self, after: HistoryKey | None) -> tuple[int, int]:
        """Positions of the first record at or above ``after``, and after it."""
        keys = self._keys
        if after is None:
            return len(keys), len(keys)
        prefix = _key_bytes(after)
        lo = bisect.bisect_left(keys, prefix)
        hi = lo + 1 if lo < len(keys) and keys[lo].startswith(prefix) else lo
        return lo, hi

    def page(
        self, *, order: HistoryOrder = "newest", after: HistoryKey | None = None, limit: int
    ) -> tuple[list[CID], bool]:
        """Up to ``limit`` events strictly after the cursor key ``after`` in ``order``
        (``newest``: descending keys, so "after" means older), and whether more follow."""
        if type(limit) is not int or limit < 1:
            raise LocalProtocolError("limit must be a positive integer")
        keys = self._keys
        if order == "newest":
            end = len(keys) if after is None else self._bounds(after)[0]
            start = max(0, end - limit)
            chosen = keys[start:end][::-1]
            more = start > 0
        elif order == "oldest":
            start = 0 if after is None else self._bounds(after)[1]
            chosen = keys[start : start + limit]
            more = start + limit < len(keys)
        else:
            raise LocalProtocolError(f"order must be 'newest' or 'oldest', not {order!r}")
        return [CID._make(rec[8:44]) for rec in chosen], more

    def filtered_page(
        self,
        *,
        order: HistoryOrder = "newest",
        after: HistoryKey | None = None,
        limit: int,
        where: Filter,
        scan: int = MAX_SCAN,
    ) -> tuple[list[CID], CID | None]:
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
            end = len(keys) if after is None else self._bounds(after)[0]
            positions: range = range(end - 1, -1, -1)
        elif order == "oldest":
            start = 0 if after is None else self._bounds(after)[1]
            positions = range(start, len(keys))
        else:
            raise LocalProtocolError(f"order must be 'newest' or 'oldest', not {order!r}")
        out: list[CID] = []
        last: CID | None = None
        examined = 0
        for pos in positions:
            if examined >= scan:
                return out, last  # out of budget: go on after the last examined
            rec = keys[pos]
            cid = CID._make(rec[8:44])
            if matches(where, _attributes(rec)):
                if len(out) == limit:
                    return out, out[-1]  # one more match exists: next page after ours
                out.append(cid)
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
        raw = bytes(cid)
        if raw in self._recs:
            return False
        if self.is_outside(ev, now):
            self._missing.discard(cid)
            self._note_outside(cid)
            return False
        if len(raw) != _CID_LEN:
            raise LocalProtocolError(f"event CID {cid} is not a dag-cbor sha2-256 CID")
        rec = _pack(raw, ev)
        self._recs[raw] = rec
        keys = self._keys
        if not keys or rec > keys[-1]:
            keys.append(rec)  # the usual case: the newest event
        else:
            bisect.insort(keys, rec)
        sec = int(ev.created_ts)
        bucket = self._ages.get(sec)
        if bucket is None:
            self._ages[sec] = [raw]
            heapq.heappush(self._age_secs, sec)
        else:
            bucket.append(raw)
        self._bytes += len(ev.encode())
        self._missing.discard(cid)
        recs, heads, multi, absent = self._recs, self._heads, self._multi, self._absent
        n = absent.pop(raw, 0)  # children retained before it
        if n == 0:
            heads.add(raw)
        elif n > 1:
            multi[raw] = n
        below = self._horizon is not None and ev.clock - 1 < self._horizon[0]
        for p in ev.parents:
            pb = bytes(p)
            if pb in recs:
                if pb in heads:
                    heads.discard(pb)
                else:
                    multi[pb] = multi.get(pb, 1) + 1
                continue
            absent[pb] = absent.get(pb, 0) + 1
            if pb not in self._outside and not below:
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
        ages, secs, recs = self._ages, self._age_secs, self._recs
        old: list[tuple[float, bytes, bytes]] = []
        while secs and secs[0] <= cutoff:
            sec = secs[0]
            kept: list[bytes] = []
            for raw in ages.get(sec, ()):
                rec = recs[raw]
                created = _created(rec)
                if created < cutoff:
                    old.append((created, raw, rec))
                else:
                    kept.append(raw)
            if kept:  # the second the cutoff falls in: the rest stays
                ages[sec] = kept
                break
            heapq.heappop(secs)
            ages.pop(sec, None)
        for _, raw, rec in sorted(old):  # oldest first, ties by CID bytes
            del self._keys[bisect.bisect_left(self._keys, rec)]
            out.append(CID._make(raw))
            self._evict(raw, rec, horizon=False, aged=True)
        keys = self._keys
        i = 0
        while i < len(keys) and (len(keys) - i > p.max_events or self._bytes > p.max_bytes):
            rec = keys[i]
            raw = rec[8:44]
            out.append(CID._make(raw))
            self._evict(raw, rec, horizon=True)
            i += 1
        if i:
            del keys[:i]
            self._drop_missing_below()
        return out

    def note_outside(self, cids: Iterable[CID]) -> None:
        """These events are not this history's to keep (tree filters: the node's
        subtree does not want them): not missing, and not fetched."""
        for cid in cids:
            if bytes(cid) not in self._recs:
                self._missing.discard(cid)
                self._note_outside(cid)

    def _note_outside(self, cid: CID) -> None:
        self._note_outside_raw(bytes(cid))

    def _note_outside_raw(self, raw: _Raw) -> None:
        outside = self._outside
        outside[raw] = None
        if len(outside) > _OUTSIDE_MEMORY:
            del outside[next(iter(outside))]

    def _evict(self, raw: _Raw, rec: _Raw, *, horizon: bool, aged: bool = False) -> None:
        """Forget retained event ``raw`` (``aged``: taken out of its age bucket already)."""
        del self._recs[raw]
        sec = int(_created(rec))
        bucket = None if aged else self._ages.get(sec)
        if bucket is not None:
            bucket.remove(raw)
            if not bucket:
                del self._ages[sec]
                secs = self._age_secs
                while secs and secs[0] not in self._ages:
                    heapq.heappop(secs)  # emptied seconds at the top of the heap
        self._note_outside_raw(raw)  # its retained children do not miss it
        clock, _, _, size, _ = _HEAD.unpack_from(rec)
        self._bytes -= size
        recs, heads, multi, absent = self._recs, self._heads, self._multi, self._absent
        if raw in heads:
            heads.discard(raw)
        else:  # its retained children still link it
            absent[raw] = multi.pop(raw, 1)
        key = (clock, raw)
        if horizon and (self._horizon is None or key > self._horizon):
            self._horizon = key
        for pb in _parents(rec)[0]:
            if pb in recs:
                n = multi.get(pb)
                if n is None:
                    heads.add(pb)  # linked by none now
                elif n == 2:
                    del multi[pb]
                else:
                    multi[pb] = n - 1
                continue
            n = absent.get(pb, 0) - 1
            if n <= 0:
                absent.pop(pb, None)
                self._missing.discard(CID._make(pb))
            else:
                absent[pb] = n

    def _drop_missing_below(self) -> None:
        """Parents below the new horizon are outside the policy, not missing.

        A missing parent's clock is unknown; its retained children bound it from
        above (parent clock <= child clock - 1). Missing sets are small (about the
        DAG's width), and this runs once per eviction batch.
        """
        h = self._horizon
        if h is None or not self._missing:
            return
        missing = {bytes(m) for m in self._missing}
        bound: dict[_Raw, int] = {}
        for rec in self._recs.values():
            clock = int.from_bytes(rec[:8], "big")
            for pb in _parents(rec)[0]:
                if pb in missing:
                    bound[pb] = max(bound.get(pb, -1), clock - 1)
        for m in list(self._missing):
            if bound.get(bytes(m), -1) < h[0]:
                self._missing.discard(m)

    def restore_horizon(self, horizon: HistoryKey | None) -> None:
        """Set the horizon a restarted node had (nothing below it is fetched again)."""
        if horizon is not None and (self._horizon is None or horizon > self._horizon):
            self._horizon = horizon

    def clear(self) -> list[CID]:
        """Forget everything (the node stops retaining the topic); the CIDs it held."""
        out = [CID._make(raw) for raw in self._recs]
        self._recs = {}
        self._keys = []
        self._ages = {}
        self._age_secs = []
        self._multi = {}
        self._absent = {}
        self._heads = set()
        self._missing = set()
        self._bytes = 0
        return out
