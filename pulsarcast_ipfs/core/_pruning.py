"""Filters in the tree, second part: pruning on the summaries.

Theory of operation
-------------------
With ``NodeConfig.tree_filters`` a child's subtree summary (:mod:`._summaries`) is
a promise: nobody below it wants an event its summary does not match. So

* **Forward.** An event goes down only to the children whose summary matches it
  (a child without a summary wants everything), and up as always. A publisher's
  first hop does the same with the summaries the root lists beside its MEMBERS.
  An event not sent to a child is *pruned* for that edge
  (:attr:`~._tree.EdgeSync.skipped`): the child is taken as knowing it (HEADS do
  not advertise it) and the edge's DIGEST windows leave it out on the parent's side,
  where the child never had it, so anti-entropy does not repair it as a gap.
* **Causal delivery.** The events a filtered subtree receives link parents it will
  never receive. An EVENT sent down a filtered edge therefore carries ``parents``:
  the event's parents *as that subtree sees them*, each pruned parent replaced by
  its own parents, recursively (a walk over what the sender holds, at most
  ``_WALK_BUDGET`` events expanded: an unwanted one beyond is left out, a parent
  the sender does not hold is named as it is). The receiver waits
  for (and repairs) those instead: the matching events still come in causal order,
  through the unwanted ones in between, and a matching event lost on the way is
  still found by the links of its matching descendants. The receiver keeps the
  replacement (:attr:`_seen_parents`) for its own subtree's walks.
* **What a filtered node wants.** An event its own summary does not match (its own
  subtree's, a stale reference fetched anyway) is not waited for, does not make its
  parents wanted, and is not retained in its history; the parents a received event
  named but the sender pruned are outside its history, not missing. So the only
  events a filtered node ever fetches are ones its subtree wants, or ones a walk
  could not expand (then one block, and no further).

A node trusts its tree parent for what it prunes: it already trusts it to forward
at all, and anti-entropy with the same parent is what repairs a loss. A relay
that lies about ``parents`` can hide events from its filtered subtree; docs/security.md
says so.

(:class:`Pruning` is a part of :class:`~._node.PulsarcastNode`: a mixin over
:class:`~._base.NodeBase`, which declares the state and methods they share.)
"""

from __future__ import annotations

from typing import Final

from pulsarcast_ipfs.core._cid import CID

from ._base import NodeBase
from ._codec import MAX_SEEN_PARENTS
from ._descriptors import EventDescriptor, sort_parents
from ._filters import MATCH_ALL, Filter, covers, matches_any
from ._tree import Tree

__all__ = ["Pruning"]

_WALK_BUDGET: Final = 256
"""Most events one ``parents`` walk expands (the rest are named as they are)."""


class _PartialView(Exception):
    """This node's view of an event's ancestry is pruned below what a target wants."""


class Pruning(NodeBase):
    """Pruning on subtree summaries (a part of :class:`~._node.PulsarcastNode`)."""

    @staticmethod
    def _own_filters(tree: Tree) -> tuple[Filter, ...] | None:
        """What this node told its parent its subtree wants, when that prunes
        anything (None: it wants everything, or tree filters are off)."""
        own = tree.summary_filters
        if own is None or MATCH_ALL in own:
            return None
        return own

    def _unwanted(self, tree: Tree, ev: EventDescriptor) -> bool:
        """Whether nobody in this node's subtree wants ``ev`` (its own summary)."""
        own = self._own_filters(tree)
        return own is not None and not matches_any(own, ev.attributes)

    def _keeps(self, tree: Tree, ev: EventDescriptor) -> bool:
        """Whether this node's retained history takes ``ev``: its own events, and
        what its subtree wants."""
        return ev.publisher == self.peer_id or not self._unwanted(tree, ev)

    def _target_summary(self, tree: Tree, peer: str) -> tuple[Filter, ...] | None:
        """The summary a send to ``peer`` is pruned by: a child's, or a member's from
        the root's list (a publisher's first hop); None: it wants everything."""
        if not self.config.tree_filters:
            return None
        summary = tree.child_summaries.get(peer)
        if summary is None and peer not in tree.children and peer != tree.parent:
            summary = tree.member_summaries.get(peer)
        if summary is None or MATCH_ALL in summary:
            return None
        return summary

    def _parents_of(self, cid: CID, ev: EventDescriptor) -> tuple[CID, ...]:
        """``ev``'s parents as this node sees them (a pruned edge replaced some)."""
        seen: tuple[CID, ...] | None = self._seen_parents.get(cid)
        return ev.parents if seen is None else seen

    def _parents_for(
        self, summary: tuple[Filter, ...], ev: EventDescriptor, *, view: bool = True
    ) -> tuple[CID, ...] | None:
        """``ev``'s parents as a subtree with ``summary`` sees them: every parent it
        does not want replaced by that parent's own, recursively. None: unchanged.

        ``view=False``: ``summary`` may want what this node never received (a member
        beside us, not below): expanding an event whose parents our own parent
        rewrote would skip those, and a parent we do not hold may be one it pruned
        for us, so :class:`_PartialView` is raised instead."""
        out: set[CID] = set()
        seen = self._seen_parents.get(ev.cid)
        stack = list(ev.parents if seen is None else seen)
        visited: set[CID] = set()
        budget = _WALK_BUDGET
        changed = seen is not None  # our own parent rewrote them already
        while stack:
            p = stack.pop()
            if p in visited:
                continue
            visited.add(p)
            entry = self._events.get(p)
            if entry is None and not view:
                # Not known here: most likely pruned for us, maybe wanted there.
                raise _PartialView
            if entry is None or matches_any(summary, entry[1].attributes):
                out.add(p)  # wanted there, or not known here: named as it is
                continue
            if budget <= 0:
                # An unwanted ancestor past the walk's reach: its link is dropped
                # (naming it would hold the event back for one that never comes).
                changed = True
                continue
            budget -= 1
            changed = True
            seen = self._seen_parents.get(p)
            if seen is not None and not view:
                raise _PartialView
            stack.extend(entry[1].parents if seen is None else seen)
        if not changed:
            return None
        out = self._reduced(out, ev.parents)
        # The newest first when there are too many (their clocks bound the rest).
        ranked = sorted(out, key=lambda c: self._clock_of(c), reverse=True)
        return sort_parents(ranked[:MAX_SEEN_PARENTS])

    def _reduced(self, out: set[CID], own: tuple[CID, ...]) -> set[CID]:
        """``out`` without the events that are ancestors of another of its events:
        the receiver delivers those before that one anyway (it waits for its parents
        as they come named, recursively), and finds them through its links if lost.
        The event's own parents (``own``) stay, so that none of them is taken for
        one pruned (``_learn_seen_parents``); so do events this node does not hold.
        A walk of at most ``_WALK_BUDGET`` events, never below the oldest candidate's
        clock; what it does not reach stays (a longer list, never a wrong one)."""
        if len(out) < 2:
            return out
        clocks = {c: self._clock_of(c) for c in out if c not in own}
        removable = {c: k for c, k in clocks.items() if k >= 0}
        if not removable:
            return out
        floor = min(removable.values())
        redundant: set[CID] = set()
        visited: set[CID] = set()
        stack = sorted(out, key=lambda c: self._clock_of(c))  # the newest popped first
        budget = _WALK_BUDGET
        events = self._events
        while stack and budget > 0:
            entry = events.get(stack.pop())
            if entry is None:
                continue
            budget -= 1
            for p in self._parents_of(entry[1].cid, entry[1]):
                if p in visited:
                    continue
                visited.add(p)
                if p in removable:
                    redundant.add(p)
                if self._clock_of(p) > floor:
                    stack.append(p)
        return out - redundant if redundant else out

    def _clock_of(self, cid: CID) -> int:
        entry = self._events.get(cid)
        return -1 if entry is None else int(entry[1].clock)

    def _first_hop(
        self, tree: Tree, ev: EventDescriptor
    ) -> dict[str, tuple[CID, ...] | None] | None:
        """(tree filters) A publisher's first hop: for each member of the root's list
        whose summary matches ``ev``, the ``parents`` it gets (None: unchanged); the
        others are pruned. None when the first hop cannot be pruned soundly: a
        member's parents would need events our own parent did not send us (the event
        then goes by the tree, which prunes from a complete view)."""
        out: dict[str, tuple[CID, ...] | None] = {}
        own = self._own_filters(tree)
        pruned = 0
        for m in tree.members:
            if m == tree.parent or m in tree.children or m == self.peer_id:
                continue
            summary = self._target_summary(tree, m)
            if summary is None:
                out[m] = None
                continue
            if not matches_any(summary, ev.attributes):
                pruned += 1
                continue
            covered = own is None or all(any(covers(o, s) for o in own) for s in summary)
            try:
                out[m] = self._parents_for(summary, ev, view=covered)
            except _PartialView:
                return None
        self._forward_counts["pruned"] += pruned
        return out

    def _prune_edge(self, tree: Tree, peer: str, cid: CID, *, count: bool = True) -> None:
        """``cid`` is not sent to ``peer``: its subtree does not want it (``count``:
        a send pruned here, not one the publisher's first hop pruned)."""
        edge = tree.edge(peer)
        edge.known.add(cid)
        edge.skipped.add(cid)
        if count:
            self._forward_counts["pruned"] += 1

    def _late_parents(
        self,
        now: float,
        tree: Tree,
        ev: EventDescriptor,
        parents: tuple[CID, ...],
        recovered: bool,
    ) -> None:
        """The tree's copy of an event that came first another way (a filtered fast
        group's copy names the event's own parents) names them as our subtree sees
        them: if the event still waits for a parent we will never get, offer it
        again with these, and call off the fetches (still within ``parent_grace``)
        of the parents nothing else waits for."""
        cid = ev.cid
        if cid in self._delivered or self._seen_parents.get(cid) is not None:
            return
        self._learn_seen_parents(tree, ev, parents)
        self._offer(now, tree, cid, recovered)
        kept = set(parents)
        for p in ev.parents:
            waiting = self._waiting.get(p)
            if p in kept or waiting is None:
                continue
            if all(c in self._delivered for _, c, _ in waiting):
                del self._waiting[p]
                self._waiting_count -= len(waiting)
                f = self._fetches.get(p)
                if f is not None and not f.outstanding and f.kind == "event":
                    del self._fetches[p]

    def _learn_seen_parents(
        self, tree: Tree, ev: EventDescriptor, parents: tuple[CID, ...] | None
    ) -> None:
        """An EVENT came with ``parents`` (our parent pruned some of ``ev``'s): keep
        them, and the pruned ones are outside our history, not missing."""
        if parents is None:
            return
        self._seen_parents.put(ev.cid, parents)
        if tree.history is not None and len(parents) < MAX_SEEN_PARENTS:
            # (A list cut at MAX_SEEN_PARENTS may have left out a wanted parent.)
            kept = set(parents)
            tree.history.note_outside(p for p in ev.parents if p not in kept)
