"""Per-topic tree state of a node and the small containers the core's modules share."""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from pulsarcast_ipfs.core._cid import CID

from ._descriptors import TopicDescriptor
from ._filters import Filter
from ._groupstate import FastState
from ._history import TopicHistory
from ._io import Role
from ._window import WindowIndex

__all__ = ["LRU", "EdgeSync", "JoinAttempt", "Tree", "TreeDues"]


class LRU:
    """An insertion-ordered set/map with a size limit (oldest evicted first).

    A plain ``dict`` keeps the order (a key put again is deleted and re-inserted at
    the end) and a ``deque`` of keys in put order finds the oldest one to evict: a
    key's earlier places in it are stale (counted in ``_stale``, skipped). An
    ``OrderedDict`` does the same in one object but costs ~105 B an entry against
    ~61 B here, and the core's caches (``_seen``, ``_events``, ``_delivered``,
    ``_linked``) held nearly a third of a simulation's memory (docs/simulator.md "Memory
    per node"); evicting from the front of a bare ``dict`` instead costs a scan of
    its deleted entries each time. ``tests/test_core_lru.py`` checks this against
    the ``OrderedDict`` version (:mod:`pulsarcast_ipfs.testing._lru_reference`).
    """

    __slots__ = ("_d", "_q", "_stale", "limit")

    def __init__(self, limit: int) -> None:
        self._d: dict[Any, Any] = {}
        self._q: deque[Any] = deque()
        self._stale: dict[Any, int] = {}
        self.limit = limit

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def __len__(self) -> int:
        return len(self._d)

    def get(self, key: Any) -> Any:
        return self._d.get(key)

    def items(self) -> list[tuple[Any, Any]]:
        """A snapshot, oldest first."""
        return list(self._d.items())

    def pop(self, key: Any) -> Any:
        """Remove ``key``; its value, or ``None``."""
        d = self._d
        if key not in d:
            return None
        stale = self._stale
        stale[key] = stale.get(key, 0) + 1  # its place in the queue
        value = d.pop(key)
        self._compact()
        return value

    def put(self, key: Any, value: Any = None) -> None:
        d = self._d
        if key in d:
            del d[key]  # re-inserted at the end
            stale = self._stale
            stale[key] = stale.get(key, 0) + 1
        d[key] = value
        q = self._q
        q.append(key)
        if len(d) > self.limit:
            stale = self._stale
            while len(d) > self.limit:
                k = q.popleft()
                n = stale.get(k)
                if n:
                    if n == 1:
                        del stale[k]
                    else:
                        stale[k] = n - 1
                    continue
                del d[k]
        self._compact()

    def _compact(self) -> None:
        """Rebuild the queue once stale places outnumber the keys (amortised O(1))."""
        if len(self._q) > 2 * len(self._d) + 64:
            self._q = deque(self._d)
            self._stale.clear()


class TreeDues:
    """The earliest deadline of a node's trees (``Tree.join``'s, ``recheck_at``,
    ``heads_due``, ``members_due``, ``summary_due``), kept as they change.

    The node's ``get_timer()`` runs after every input, and scanning every tree for
    it was the largest single cost of a simulation where each node is in many
    trees (a Sybil run: every identity subscribes to every topic). Each tree tells
    this object of every change (the five are properties): a deadline that moves
    earlier lowers :attr:`best`; one that was the earliest and moves or goes marks
    it stale, and the next :meth:`earliest` scans the trees once. A tree that
    leaves the node marks it stale too (:meth:`~._membership.Membership._drop_tree`).
    ``JoinAttempt.deadline`` is set once, when the attempt is made.
    """

    __slots__ = ("best", "valid")

    def __init__(self) -> None:
        self.best = float("inf")
        self.valid = False

    def changed(self, old: float | None, new: float | None) -> None:
        if not self.valid:
            return
        if old is not None and old <= self.best:
            self.valid = False  # it was (one of) the earliest
        elif new is not None and new < self.best:
            self.best = new

    def earliest(self, trees: Any) -> float:
        """The earliest deadline of ``trees`` (an iterable of :class:`Tree`; ``inf``: none)."""
        if not self.valid:
            best = float("inf")
            for tree in trees:
                at = tree.earliest_due()
                if at < best:
                    best = at
            self.best = best
            self.valid = True
        return self.best


@dataclass(slots=True, kw_only=True)
class JoinAttempt:
    peer: str
    deadline: float
    tried: set[str]
    leaf: bool = False
    """A reader's JOIN to a holder of the history, whatever its distance (it takes
    no children while it hangs there: docs/protocol-notes.md "Readers")."""
    single: bool = False
    """A joined node's one try to move, up to the root (flat trees) or away from a
    lagging parent: refused or timed out, it stays with its parent instead of trying
    the next peer (under overload, trying peer after peer was a JOIN storm)."""
    away_since: float | None = None
    """A move away from a lagging parent: when it began. Refused or timed out while
    that parent has not been heard from since, the parent may be gone rather than
    slow (a killed root): the next peers are tried as for a lost parent."""


@dataclass(slots=True)
class EdgeSync:
    """Anti-entropy state of one tree edge (docs/protocol-notes.md "Anti-entropy")."""

    known: set[CID] = field(default_factory=set)
    """Event CIDs the neighbour has or has been told of: received from it, sent to it
    (EVENT), advertised either way (HEADS, DIGEST listings). Never advertised again."""
    digest_sent: tuple[float, int, int] | None = None
    """``(lo, count, sum)`` of the last DIGEST sent. Unchanged, it is sent again only
    ``DIGEST_REPEATS`` times, after 1, 2, 4, ... rounds (a lost DIGEST must not stall
    a repair), then no more: an idle topic sends nothing..."""
    repeats: int = 0
    repeat_tick: int = 0
    differs: bool = False
    """...unless the last comparison on this edge found a difference (and no matching
    DIGEST has come since): then every round, so that a lost listing or HEADS cannot
    stall the repair."""
    confirmed: list[tuple[float, int, int]] = field(default_factory=list)
    """``(lo, count, sum)`` of the neighbour's last few DIGESTs that compared equal
    here. Ours of the same window is then sent once (the neighbour compares it in
    turn) and not repeated: both sides have compared."""
    peer_lo: float = 0.0
    """Where the neighbour's window starts (from its DIGESTs): ours are sent from
    there on, so that it can compare them."""
    delta_seq: int = -1
    """``Tree.recent_seq`` when a HEADS delta last left every CID of ``recent`` in
    ``known``; reset when ``known`` loses one (a wider summary owes it again)."""
    skipped: set[CID] = field(default_factory=set)
    """(tree filters) Events not sent to this child because its summary did not
    match them (:mod:`._pruning`): in ``known``, and left out of this edge's DIGEST
    windows on our side until the child shows it has one after all."""
    up: set[CID] = field(default_factory=set)
    """(tree filters) Events that went up this edge: sent to our parent, received from
    this child (or listed by it in a DIGEST while we hold them). In the edge's DIGEST
    windows on both sides whatever the child's summary, so that an EVENT lost on its
    way up to the root is repaired like any other."""


@dataclass(slots=True, kw_only=True)
class Tree:
    root: TopicDescriptor
    author_pos: int
    latest: TopicDescriptor
    versions: dict[CID, TopicDescriptor] = field(default_factory=dict)
    depth: dict[CID, int] = field(default_factory=dict)
    subscribed: bool = False
    filters: tuple[Filter, ...] | None = None
    """The subscription's content filters (core/_filters.py), a disjunction: only the
    events one of them matches are delivered to the application; None = every event.
    (A sidecar subscribes with the union of its consumers' filters.)"""
    publishing: bool = False
    followers: set[CID] = field(default_factory=set)
    since: float = 0.0
    parent: str | None = None
    children: dict[str, None] = field(default_factory=dict)
    joined: bool = False
    join_: JoinAttempt | None = field(default=None, repr=False)
    """``join`` (a property: see :class:`TreeDues`)."""
    recheck_at_: float | None = field(default=None, repr=False)
    heads_due_: float | None = field(default=None, repr=False)
    recent: OrderedDict[CID, float] = field(default_factory=OrderedDict)
    older: OrderedDict[CID, float] = field(default_factory=OrderedDict)
    window: WindowIndex = field(default_factory=WindowIndex)
    recent_seq: int = 0
    """Counts ``_note_recent`` calls: an edge whose ``delta_seq`` equals it is known to
    have every CID of ``recent`` (its HEADS delta is empty)."""
    """``recent`` and ``older`` sorted by ``created``, for DIGEST fingerprints
    (kept in step by ``Dissemination._note_recent``, the one place they change)."""
    tips: dict[CID, int] = field(default_factory=dict)
    """The DAG's heads as this node knows them: events seen that no event seen links
    (CID -> clock). LAST_SEEN links the newest of them (docs/protocol-notes.md)."""
    history: TopicHistory | None = None
    """The retained history (subscribers, the author, readers); ``None``: a relay."""
    reading_until: float | None = None
    """A reader (history without subscription) stays in the tree until then."""
    holders: tuple[str, ...] = ()
    """(reader) Peers known to hold the history (the driver found them): joined as a
    leaf first, whatever their distance to the author."""
    leaf: bool = False
    """Joined ``parent`` as a leaf (a reader below a holder): refuses children."""
    heads_from: set[str] = field(default_factory=set)
    """Neighbours whose HEADS arrived (a reader is synced once its parent's did)."""
    edges: dict[str, EdgeSync] = field(default_factory=dict)
    """Per neighbour: what it is known to have (anti-entropy, :mod:`._antientropy`)."""
    dropped_max: float = float("-inf")
    """The latest ``created`` of an event dropped from ``older``: above it, ``recent``
    and ``older`` hold every event this node has seen (the DIGEST window starts there)."""
    history_due: set[str] = field(default_factory=set)
    """New children owed the window, sent once the parent's HEADS have come."""
    fetching: dict[CID, float] = field(default_factory=dict)
    """Events being fetched for this tree as advertised (CID -> created): listed to a
    new child with the window (bounded by the node's pending fetches)."""
    members: tuple[str, ...] = ()
    """(child of a root) The root's children, from its last MEMBERS: a publisher's
    direct first hop (:mod:`._push`)."""
    members_epoch: int | None = None
    members_from: str | None = None
    """Who sent ``members``: used only while that peer is still the parent."""
    flattened_at: int | None = None
    """The MEMBERS epoch for which this node last JOINed the root directly (once
    per epoch: :mod:`._push`, "Flat trees")."""
    member_epoch: int = 0
    """(root) The epoch of the last MEMBERS sent."""
    member_sets: dict[int, frozenset[str]] = field(default_factory=dict)
    """(root) The member sets of the last few epochs (what a ``pushed`` event covered)."""
    members_due_: float | None = field(default=None, repr=False)
    """(root) Send MEMBERS then (children changed): ``members_due``."""
    summaries_listed: tuple[tuple[str, ...], ...] | None = None
    """(root, tree filters) The members' summaries in the last MEMBERS sent."""
    members_frame: tuple[object, Any, bytes] | None = field(default=None, repr=False)
    """(child of a root) The MEMBERS a new child gets, with its frame, and what it was
    built from: sent again as it is while the list is the same (:mod:`._push`)."""
    members_listed: tuple[str, ...] = ()
    """(root) The list of the last MEMBERS sent (epoch ``member_epoch``)."""
    members_sent: dict[str, int] = field(default_factory=dict)
    """(root) The epoch of the list each child was last sent: a child that holds the
    previous epoch gets a delta (wire 2.6), any other the whole list."""
    members_wanted_at: float = float("-inf")
    """(child) When this node last asked its parent for the whole list (MEMBERS_WANT):
    at most once per ``members_interval``."""
    unsent: list[CID] = field(default_factory=list)
    role: Role = "none"
    child_summaries: dict[str, tuple[Filter, ...]] = field(default_factory=dict)
    """(tree_filters) What each child's subtree wants (JOIN's summary, SUMMARY); a
    child without an entry wants everything."""
    former_summaries: OrderedDict[str, tuple[Filter, ...]] = field(default_factory=OrderedDict)
    """(tree_filters) Summaries of children that went, the newest last (bounded): a
    child adopted back without a JOIN keeps being pruned for."""
    child_wants: dict[str, tuple[Filter, ...]] = field(default_factory=dict)
    """(tree_filters) Each child's summary as it sent it, before any merge here (what
    a false-positive forward is measured by)."""
    summary_sent: tuple[str, ...] | None = None
    """(tree_filters) The summary the parent was last told (in a JOIN or SUMMARY)."""
    summary_filters: tuple[Filter, ...] | None = None
    """(tree_filters) ``summary_sent`` parsed: what this node's subtree wants."""
    member_summaries: dict[str, tuple[Filter, ...]] = field(default_factory=dict)
    """(tree_filters, child of a root) Each member's summary from the root's MEMBERS:
    a publisher's first hop is pruned by it (:mod:`._pruning`)."""
    summary_due_: float | None = field(default=None, repr=False)
    """(tree_filters) Send SUMMARY then, if the summary changed: ``summary_due``."""
    summary_at: float = float("-inf")
    """(tree_filters) When the last SUMMARY went (rate limit: summary_interval)."""
    summary_repeats: int = 0
    """(tree_filters) Times the last SUMMARY is still to be sent again, unchanged
    (``_summaries.SUMMARY_REPEATS``: SUMMARY has no acknowledgement)."""
    fast: FastState | None = None
    """Fast groups of this topic: as a member, a publisher, a helper (:mod:`._fastgroup`)."""
    dues: TreeDues | None = field(default=None, repr=False, compare=False)
    """The node's :class:`TreeDues`, told of every change of a deadline below while
    the tree is one of the node's (``None`` otherwise)."""

    @property
    def join(self) -> JoinAttempt | None:
        return self.join_

    @join.setter
    def join(self, value: JoinAttempt | None) -> None:
        old = self.join_
        self.join_ = value
        if self.dues is not None:
            self.dues.changed(
                None if old is None else old.deadline, None if value is None else value.deadline
            )

    @property
    def recheck_at(self) -> float | None:
        return self.recheck_at_

    @recheck_at.setter
    def recheck_at(self, value: float | None) -> None:
        old = self.recheck_at_
        self.recheck_at_ = value
        if self.dues is not None:
            self.dues.changed(old, value)

    @property
    def heads_due(self) -> float | None:
        return self.heads_due_

    @heads_due.setter
    def heads_due(self, value: float | None) -> None:
        old = self.heads_due_
        self.heads_due_ = value
        if self.dues is not None:
            self.dues.changed(old, value)

    @property
    def members_due(self) -> float | None:
        return self.members_due_

    @members_due.setter
    def members_due(self, value: float | None) -> None:
        old = self.members_due_
        self.members_due_ = value
        if self.dues is not None:
            self.dues.changed(old, value)

    @property
    def summary_due(self) -> float | None:
        return self.summary_due_

    @summary_due.setter
    def summary_due(self, value: float | None) -> None:
        old = self.summary_due_
        self.summary_due_ = value
        if self.dues is not None:
            self.dues.changed(old, value)

    def earliest_due(self) -> float:
        """The earliest of the five deadlines (``inf``: none)."""
        best = float("inf")
        join = self.join_
        if join is not None and join.deadline < best:
            best = join.deadline
        for at in (self.recheck_at_, self.heads_due_, self.members_due_, self.summary_due_):
            if at is not None and at < best:
                best = at
        return best

    @property
    def key(self) -> CID:
        return self.root.cid

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def author(self) -> str:
        return self.root.author

    def edge(self, peer: str) -> EdgeSync:
        e = self.edges.get(peer)
        if e is None:
            e = self.edges[peer] = EdgeSync()
        return e

    def neighbours(self) -> list[str]:
        out = list(self.children)
        if self.parent is not None:
            out.append(self.parent)
        return out
