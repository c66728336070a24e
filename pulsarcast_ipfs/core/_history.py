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
import struct
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple

from pulsarcast_ipfs.core._cid import CID

from ._dagcbor import decode, encode
from ._descriptors import EventDescriptor
from ._digesttable import DIGEST_SIZE, DigestTable
from ._errors import LocalProtocolError
from ._filters import AttributeValue, Filter, matches

__all__ = ["HistoryKey", "HistoryOrder", "RetainedEvent", "RetentionPolicy", "TopicHistory"]

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


class RetainedEvent(NamedTuple):
    """What a history holds of one retained event (its index entry, not its body)."""

    cid: CID
    clock: int
    created_ts: float
    size: int
    """Encoded descriptor bytes."""
    parents: tuple[CID, ...]
    attributes: Mapping[str, AttributeValue] | None

    @property
    def order_key(self) -> HistoryKey:
        return (self.clock, bytes(self.cid))


_Raw = bytes
"""(The name ``bytes`` is a property inside :class:`TopicHistory`.)"""
_PREFIX: Final = b"\x01\x71\x12\x20"
"""CIDv1 dag-cbor sha2-256: the first four bytes of every event's CID (recomputed from
its bytes) and of every parent link (checked on decode). The history keeps the 32-byte
digest that follows."""
_REC: Final = struct.Struct(">Q32sdIIIBxHQ")
"""A record: clock, digest, created, size, retained children, where its parents and
attributes start in the heap, number of parents, attribute bytes, arrival number
(72 bytes). Records
start with ``clock`` (8 bytes, big-endian) and the digest, so that their first
:data:`_KEY` bytes sort as the history order."""
_WIDTH: Final = _REC.size
_KEY: Final = 40
_CREATED_AT: Final = 40
_CHILDREN_AT: Final = 52
_EXT_AT: Final = 56
_ARRIVAL_AT: Final = 64
_U64: Final = struct.Struct(">Q")
_F64: Final = struct.Struct(">d")
_U32: Final = struct.Struct(">I")
_EXT: Final = struct.Struct(">IBxH")
"""Heap offset, number of parents, attribute bytes (a record's last 8 bytes)."""
_COUNT_WIDTH: Final = DIGEST_SIZE + 4
"""A link count: a digest and how many retained events link it."""
_MAX_ATTRIBUTE_BYTES: Final = 0xFFFF
_HEAP_SLACK: Final = 16384
"""Heap bytes no longer used that are tolerated beyond half the used ones."""


def _digest(raw: bytes) -> bytes | None:
    """The sha2-256 digest of a CIDv1 dag-cbor sha2-256's bytes ``raw``, else None."""
    return raw[4:] if len(raw) == 36 and raw.startswith(_PREFIX) else None


def _cid(digest: bytes | bytearray) -> CID:
    return CID._make(_PREFIX + digest)


class TopicHistory:
    """The retained events of one topic, ordered by :data:`HistoryKey`.

    An index, not the events, and no Python object per event: each event is one
    72-byte record (clock, digest, created, size, its retained children, where its
    parents and attributes are, its arrival number) in a
    :class:`~._digesttable.DigestTable`, found by digest; its parents' digests and
    its dag-cbor attribute map go to a ``bytearray`` heap (compacted when half of it
    is unused); two ``array('I')`` of record slots keep the history order and the
    order of ``created`` (age eviction). Links to events not retained are counted in
    a second table. About 140 bytes an event with one parent and one short
    attribute. The bodies are in the block store (docs/sidecar.md "Retention").
    """

    __slots__ = (
        "_absent",
        "_arrivals",
        "_by_age",
        "_bytes",
        "_heads",
        "_heap",
        "_heap_used",
        "_horizon",
        "_missing",
        "_order",
        "_outside",
        "_outside_order",
        "_recs",
        "policy",
    )

    def __init__(self, *, policy: RetentionPolicy) -> None:
        self.policy = policy
        self._recs = DigestTable(_WIDTH, key_at=8)
        self._order = array("I")
        """Record slots, ascending (history order)."""
        self._by_age = array("I")
        """Record slots by ``created``, ascending (ties: in arrival order)."""
        self._heap = bytearray()
        """Per record: its parents' digests, then its attribute map (dag-cbor)."""
        self._heap_used = 0
        self._heads: set[int] = set()
        """Slots of the retained events no retained event links (children 0)."""
        self._absent = DigestTable(_COUNT_WIDTH)
        """Events not retained that retained events link: digest -> how many."""
        self._missing: set[CID] = set()
        self._outside = DigestTable(DIGEST_SIZE)
        """Events known to be outside the policy (bounded: ``_OUTSIDE_MEMORY``)..."""
        self._outside_order = array("I")
        """...their slots, oldest first."""
        self._horizon: HistoryKey | None = None
        self._bytes = 0
        self._arrivals = 0
        """Events added so far (each record's arrival number: :meth:`clear`'s order)."""

    # ---------------------------------------------------------------- records

    def _key(self, slot: int) -> bytearray:
        """Record ``slot``'s place in the history order (clock, then digest)."""
        at = slot * _WIDTH
        return self._recs.data[at : at + _KEY]

    def _created(self, slot: int) -> float:
        created: float = _F64.unpack_from(self._recs.data, slot * _WIDTH + _CREATED_AT)[0]
        return created

    def _cid_at(self, slot: int) -> CID:
        at = slot * _WIDTH + 8
        return _cid(bytes(self._recs.data[at : at + DIGEST_SIZE]))

    def _children(self, slot: int) -> int:
        n: int = _U32.unpack_from(self._recs.data, slot * _WIDTH + _CHILDREN_AT)[0]
        return n

    def _set_children(self, slot: int, n: int) -> None:
        _U32.pack_into(self._recs.data, slot * _WIDTH + _CHILDREN_AT, n)

    def _parents_at(self, slot: int) -> list[_Raw]:
        """Record ``slot``'s parents' digests."""
        ext, n, _ = _EXT.unpack_from(self._recs.data, slot * _WIDTH + _EXT_AT)
        heap = self._heap
        return [
            bytes(heap[p : p + DIGEST_SIZE]) for p in range(ext, ext + n * DIGEST_SIZE, DIGEST_SIZE)
        ]

    def _attributes_at(self, slot: int) -> Mapping[str, AttributeValue] | None:
        ext, n, size = _EXT.unpack_from(self._recs.data, slot * _WIDTH + _EXT_AT)
        if not size:
            return None
        at = ext + n * DIGEST_SIZE
        attrs: Mapping[str, AttributeValue] = decode(bytes(self._heap[at : at + size]))
        return attrs

    def _find(self, cid: CID) -> int:
        digest = _digest(bytes(cid))
        return -1 if digest is None else self._recs.find(digest)

    # ---------------------------------------------------------------- queries

    def __len__(self) -> int:
        return len(self._recs)

    def __contains__(self, cid: object) -> bool:
        return isinstance(cid, CID) and self._find(cid) >= 0

    def get(self, cid: CID) -> RetainedEvent | None:
        """The index entry of retained event ``cid`` (its body is in the block store)."""
        slot = self._find(cid)
        if slot < 0:
            return None
        clock, _, created, size, _, _, _, _, _ = _REC.unpack_from(self._recs.data, slot * _WIDTH)
        parents = tuple(map(_cid, self._parents_at(slot)))
        return RetainedEvent(cid, clock, created, size, parents, self._attributes_at(slot))

    @property
    def bytes(self) -> int:
        """Encoded size of the retained events."""
        return self._bytes

    @property
    def heads(self) -> frozenset[CID]:
        """Retained events that no retained event links."""
        return frozenset(map(self._cid_at, self._heads))

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
        for slot in self._order[::-1]:
            yield self._cid_at(slot)

    def key_of(self, cid: CID) -> HistoryKey | None:
        slot = self._find(cid)
        if slot < 0:
            return None
        clock: int = _REC.unpack_from(self._recs.data, slot * _WIDTH)[0]
        return (clock, bytes(cid))

    def _bounds(self, after: HistoryKey | None) -> tuple[int, int]:
        """Positions of the first record at or above ``after``, and after it."""
        order = self._order
        if after is None:
            return len(order), len(order)
        clock, raw = after
        prefix = bytearray(clock.to_bytes(8, "big"))
        if raw.startswith(_PREFIX):  # (any other CID sorts before or after them all)
            key, exact = prefix + raw[4:], len(raw) == 36
        else:
            key, exact = (prefix if raw < _PREFIX else prefix + b"\xff" * 33), False
        lo = bisect.bisect_left(order, key, key=self._key)
        hi = lo + 1 if exact and lo < len(order) and self._key(order[lo]) == key else lo
        return lo, hi

    def page(
        self, *, order: HistoryOrder = "newest", after: HistoryKey | None = None, limit: int
    ) -> tuple[list[CID], bool]:
        """Up to ``limit`` events strictly after the cursor key ``after`` in ``order``
        (``newest``: descending keys, so "after" means older), and whether more follow."""
        if type(limit) is not int or limit < 1:
            raise LocalProtocolError("limit must be a positive integer")
        slots = self._order
        if order == "newest":
            end = len(slots) if after is None else self._bounds(after)[0]
            start = max(0, end - limit)
            chosen = slots[start:end][::-1]
            more = start > 0
        elif order == "oldest":
            start = 0 if after is None else self._bounds(after)[1]
            chosen = slots[start : start + limit]
            more = start + limit < len(slots)
        else:
            raise LocalProtocolError(f"order must be 'newest' or 'oldest', not {order!r}")
        return [self._cid_at(s) for s in chosen], more

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
        slots = self._order
        if order == "newest":
            end = len(slots) if after is None else self._bounds(after)[0]
            positions: range = range(end - 1, -1, -1)
        elif order == "oldest":
            start = 0 if after is None else self._bounds(after)[1]
            positions = range(start, len(slots))
        else:
            raise LocalProtocolError(f"order must be 'newest' or 'oldest', not {order!r}")
        out: list[CID] = []
        last: CID | None = None
        examined = 0
        for pos in positions:
            if examined >= scan:
                return out, last  # out of budget: go on after the last examined
            slot = slots[pos]
            cid = self._cid_at(slot)
            if matches(where, self._attributes_at(slot)):
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
        digest = _digest(bytes(cid))
        recs = self._recs
        if digest is not None and recs.find(digest) >= 0:
            return False
        if self.is_outside(ev, now):
            self._missing.discard(cid)
            self._note_outside(cid)
            return False
        if digest is None:
            raise LocalProtocolError(f"event CID {cid} is not a dag-cbor sha2-256 CID")
        parents = ev.parents
        linked: list[_Raw] = []
        for p in parents:
            pd = _digest(bytes(p))
            if pd is None:
                raise LocalProtocolError(f"parent {p} is not a dag-cbor sha2-256 CID")
            linked.append(pd)
        attrs = encode(dict(ev.attributes)) if ev.attributes is not None else b""
        if len(attrs) > _MAX_ATTRIBUTE_BYTES:
            raise LocalProtocolError(f"the attributes of {cid} are too large for the index")
        size = len(ev.encode())
        heap = self._heap
        ext = len(heap)
        heap += b"".join(linked)
        heap += attrs
        self._heap_used += len(heap) - ext
        slot = recs.insert(digest)
        data = recs.data
        at = slot * _WIDTH
        _REC.pack_into(
            data,
            at,
            ev.clock,
            digest,
            ev.created_ts,
            size,
            0,
            ext,
            len(linked),
            len(attrs),
            self._arrivals,
        )
        self._arrivals += 1
        order, key = self._order, data[at : at + _KEY]
        if not order or key > self._key(order[-1]):
            order.append(slot)  # the usual case: the newest event
        else:
            order.insert(bisect.bisect_left(order, key, key=self._key), slot)
        ages, created = self._by_age, ev.created_ts
        if not ages or created >= self._created(ages[-1]):
            ages.append(slot)
        else:
            ages.insert(bisect.bisect_right(ages, created, key=self._created), slot)
        self._bytes += size
        self._missing.discard(cid)
        heads = self._heads
        n = self._uncount(digest)  # children retained before it
        if n == 0:
            heads.add(slot)
        else:
            self._set_children(slot, n)
        below = self._horizon is not None and ev.clock - 1 < self._horizon[0]
        for p, pd in zip(parents, linked, strict=True):
            ps = recs.find(pd)
            if ps >= 0:
                k = self._children(ps)
                if k == 0:
                    heads.discard(ps)
                self._set_children(ps, k + 1)
                continue
            self._count(pd, 1)
            if not below and self._outside.find(pd) < 0:
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
        ages, order = self._by_age, self._order
        n = 0
        while n < len(ages) and self._created(ages[n]) < cutoff:
            n += 1
        if n:
            old = sorted((self._created(s), self._key(s)[8:], s) for s in ages[:n])
            del ages[:n]
            for _, digest, slot in old:  # oldest first, ties by CID bytes
                del order[bisect.bisect_left(order, self._key(slot), key=self._key)]
                out.append(_cid(digest))
                self._evict(slot, horizon=False, aged=True)
        i = 0
        while i < len(order) and (len(order) - i > p.max_events or self._bytes > p.max_bytes):
            slot = order[i]
            out.append(self._cid_at(slot))
            self._evict(slot, horizon=True)
            i += 1
        if i:
            del order[:i]
            self._drop_missing_below()
        if out:
            self._compact()
        return out

    def note_outside(self, cids: Iterable[CID]) -> None:
        """These events are not this history's to keep (tree filters: the node's
        subtree does not want them): not missing, and not fetched."""
        for cid in cids:
            if self._find(cid) < 0:
                self._missing.discard(cid)
                self._note_outside(cid)

    def _note_outside(self, cid: CID) -> None:
        digest = _digest(bytes(cid))
        if digest is not None:  # (no other CID is ever retained or missing)
            self._note_outside_digest(digest)

    def _note_outside_digest(self, digest: _Raw) -> None:
        outside = self._outside
        if outside.find(digest) >= 0:
            return
        self._outside_order.append(outside.insert(digest))
        if len(outside) > _OUTSIDE_MEMORY:
            outside.remove(self._outside_order.pop(0))

    def _count(self, digest: _Raw, n: int) -> None:
        """``n`` more retained events link ``digest`` (not retained)."""
        t = self._absent
        slot = t.find(digest)
        if slot < 0:
            slot = t.insert(digest)
        at = slot * _COUNT_WIDTH + DIGEST_SIZE
        _U32.pack_into(t.data, at, _U32.unpack_from(t.data, at)[0] + n)

    def _uncount(self, digest: _Raw) -> int:
        """Forget the links to ``digest``; how many there were."""
        t = self._absent
        slot = t.find(digest)
        if slot < 0:
            return 0
        n: int = _U32.unpack_from(t.data, slot * _COUNT_WIDTH + DIGEST_SIZE)[0]
        t.remove(slot)
        return n

    def _unlink(self, digest: _Raw) -> None:
        """One retained event less links ``digest`` (not retained): once none does,
        it is not missing either."""
        t = self._absent
        slot = t.find(digest)
        n = 0 if slot < 0 else _U32.unpack_from(t.data, slot * _COUNT_WIDTH + DIGEST_SIZE)[0] - 1
        if n > 0:
            _U32.pack_into(t.data, slot * _COUNT_WIDTH + DIGEST_SIZE, n)
            return
        if slot >= 0:
            t.remove(slot)
        self._missing.discard(_cid(digest))

    def _evict(self, slot: int, *, horizon: bool, aged: bool = False) -> None:
        """Forget retained event ``slot`` (``aged``: out of ``_by_age`` already; the
        caller takes it out of ``_order``)."""
        recs = self._recs
        clock, digest, created, size, children, _, npar, alen, _ = _REC.unpack_from(
            recs.data, slot * _WIDTH
        )
        linked = self._parents_at(slot)
        self._heap_used -= npar * DIGEST_SIZE + alen
        if not aged:
            ages = self._by_age
            i = bisect.bisect_left(ages, created, key=self._created)
            while ages[i] != slot:
                i += 1
            del ages[i]
        recs.remove(slot)
        self._note_outside_digest(digest)  # its retained children do not miss it
        self._bytes -= size
        heads = self._heads
        if slot in heads:
            heads.discard(slot)
        else:  # its retained children still link it
            self._count(digest, children)
        key = (clock, _PREFIX + digest)
        if horizon and (self._horizon is None or key > self._horizon):
            self._horizon = key
        for pd in linked:
            ps = recs.find(pd)
            if ps >= 0:
                k = self._children(ps) - 1
                self._set_children(ps, k)
                if k == 0:
                    heads.add(ps)  # linked by none now
                continue
            self._unlink(pd)

    def _compact(self) -> None:
        """Rewrite the heap without the parts of evicted records, once more than half
        of it is unused."""
        heap, used = self._heap, self._heap_used
        if len(heap) <= used + used // 2 + _HEAP_SLACK:
            return
        new = bytearray()
        data = self._recs.data
        with memoryview(heap) as view:
            for slot in self._order:
                at = slot * _WIDTH + _EXT_AT
                ext, npar, alen = _EXT.unpack_from(data, at)
                _EXT.pack_into(data, at, len(new), npar, alen)
                new += view[ext : ext + npar * DIGEST_SIZE + alen]
        self._heap = new

    def _drop_missing_below(self) -> None:
        """Parents below the new horizon are outside the policy, not missing.

        A missing parent's clock is unknown; its retained children bound it from
        above (parent clock <= child clock - 1). Missing sets are small (about the
        DAG's width), and this runs once per eviction batch.
        """
        h = self._horizon
        if h is None or not self._missing:
            return
        missing = {bytes(m)[4:] for m in self._missing}
        bound: dict[_Raw, int] = {}
        data = self._recs.data
        for slot in self._order:
            clock = int.from_bytes(data[slot * _WIDTH : slot * _WIDTH + 8], "big")
            for pd in self._parents_at(slot):
                if pd in missing:
                    bound[pd] = max(bound.get(pd, -1), clock - 1)
        for m in list(self._missing):
            if bound.get(bytes(m)[4:], -1) < h[0]:
                self._missing.discard(m)

    def restore_horizon(self, horizon: HistoryKey | None) -> None:
        """Set the horizon a restarted node had (nothing below it is fetched again)."""
        if horizon is not None and (self._horizon is None or horizon > self._horizon):
            self._horizon = horizon

    def clear(self) -> list[CID]:
        """Forget everything (the node stops retaining the topic); the CIDs it held,
        in the order they were added (the order the node releases them in)."""
        data = self._recs.data
        slots = sorted(self._order, key=lambda s: _U64.unpack_from(data, s * _WIDTH + _ARRIVAL_AT))
        out = [self._cid_at(slot) for slot in slots]
        self._recs = DigestTable(_WIDTH, key_at=8)
        self._order = array("I")
        self._by_age = array("I")
        self._heap = bytearray()
        self._heap_used = 0
        self._heads = set()
        self._absent = DigestTable(_COUNT_WIDTH)
        self._missing = set()
        self._bytes = 0
        return out
