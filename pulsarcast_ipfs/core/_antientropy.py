"""Anti-entropy between tree neighbours: HEADS deltas and DIGESTs.

Theory of operation
-------------------
Events travel the tree eagerly (EVENT). Anti-entropy finds what a neighbour may
still lack, without resending what just crossed the edge:

* **Per-edge knowledge.** For each neighbour a node keeps the set of event CIDs the
  neighbour has or has been told of (:class:`~._tree.EdgeSync`): received from it,
  sent to it, or advertised either way. A HEADS round (every ``heads_interval``)
  sends each neighbour only the delta: the recent CIDs outside that set. On a busy,
  loss-free tree the delta is empty, so HEADS rounds send nothing, and nothing at
  all when the topic is idle.
* **New edges** (a JOIN accepted, a JOIN_ACK received) get the whole window, HEADS
  then the older CIDs, as before: the neighbour may have missed anything.
* **DIGEST** (every ``heads_refresh_every`` rounds, when it changed): a fingerprint
  of the events created in the window ``[lo, hi]``: their count and the sum of their
  CIDs' last eight digest bytes modulo 2**64 (order-free, like Negentropy's
  fingerprints). ``lo`` is where the sender's window is complete (its delivery
  bound, or the newest event it has dropped from its bounded window); ``hi`` is
  half a ``heads_interval`` ago, so that events in flight do not count.

  - The receiver whose window covers ``[lo, hi]`` compares: equal, nothing more;
    different, it answers with the window split in at most ``MAX_RANGES`` ranges
    (``ranges``: upper bound, count, sum). The first sender lists its events in each
    range that differs (``have``); the listing's receiver fetches what it lacks
    (gap repair) and answers with a HEADS of what the listing lacks, which the other
    side fetches in turn: four messages, a few hundred bytes plus the listing of
    the ranges that differ.
  - A receiver whose window starts later (a leaf subscribed later) answers with its
    own fingerprint from its ``lo``; the first sender's window covers that, so it
    compares. Answers only ever move ``lo`` up: no loops.

  - Each side learns where the other's window starts (``peer_lo``) and sends its
    DIGESTs from there on, so that both can compare.
  - An unchanged DIGEST is repeated after 1, 2, 4 and 8 rounds, then no more (a
    lost DIGEST must not stall a repair; an idle topic then sends nothing), unless
    the neighbour's own DIGEST of the same window (same ``lo``, count and sum) has
    compared equal here (``EdgeSync.confirmed``): each side then knows that both
    compared, and a change of an edge's window costs one DIGEST each way, where
    it cost five (the sparse edges of a filtered tree change seldom, so nearly
    every change was repeated four times on both sides). An edge that found a
    difference compares every round until a DIGEST matches.

  That catches an EVENT lost on an edge (a stream that broke, a message dropped
  under load) within ``heads_refresh_every * heads_interval`` plus the fetch.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import replace

from pulsarcast_ipfs.core._cid import CID

from ._base import NodeBase
from ._codec import MAX_HAVE, MAX_HEADS, MAX_RANGES, Digest, Heads, Leave, encode_frame
from ._filters import Filter, matches_any
from ._tree import Tree
from ._window import FINGERPRINT_MASK, cid_term

__all__ = ["DIGEST_REPEATS", "AntiEntropy", "fingerprint"]

DIGEST_REPEATS = 4
"""An unchanged DIGEST is sent again this many times (after 1, 2, 4, 8 rounds),
unless the neighbour's DIGEST of the same window compared equal."""
CONFIRMED_KEPT = 4
"""Windows known equal on both sides kept per edge (``EdgeSync.confirmed``)."""


def fingerprint(cids: Iterable[CID]) -> tuple[int, int]:
    """``(count, sum)`` of a set of event CIDs: the sum of each CID's last eight
    bytes (the end of its sha2-256 digest) modulo 2**64."""
    count = 0
    total = 0
    for cid in cids:
        count += 1
        total += cid_term(cid)
    return count, total & FINGERPRINT_MASK


class AntiEntropy(NodeBase):
    """The HEADS and DIGEST half of :class:`~._node.PulsarcastNode` (a mixin: it reads
    the node's trees, caches and configuration)."""

    # ------------------------------------------------------------ bookkeeping

    @staticmethod
    def _is_edge(tree: Tree, peer: str | None) -> bool:
        return peer is not None and (peer in tree.children or peer == tree.parent)

    def _edge_knows(self, tree: Tree, peer: str | None, cid: CID) -> None:
        """``peer`` (if a tree neighbour) has ``cid`` or has been told of it."""
        if peer is not None and (peer in tree.children or peer == tree.parent):
            edge = tree.edge(peer)
            edge.known.add(cid)
            edge.skipped.discard(cid)  # pruned, but it has it after all

    @staticmethod
    def _window_dropped(tree: Tree, cid: CID, created: float) -> None:
        """``cid`` fell out of the bounded window (``older``)."""
        if created > tree.dropped_max:
            tree.dropped_max = created
        for e in tree.edges.values():
            e.known.discard(cid)
            e.skipped.discard(cid)
            e.up.discard(cid)

    def _heads_bound(self, now: float, tree: Tree) -> float:
        """Events created before this are not repaired here. A node with children
        repairs everything advertised (its subtree may have subscribed before it did);
        a leaf only what it could deliver; a reader what its history keeps. (Older
        events reach a subscriber's history through the parent links of what it
        holds: ``_fill_history``.)"""
        bound = tree.since if not tree.children else float("-inf")
        if tree.reading_until is not None:
            bound = min(bound, now - self.config.retention.max_age)
        return bound

    # ------------------------------------------------------------ HEADS

    def _send_entries(
        self, now: float, tree: Tree, peer: str, entries: list[tuple[CID, float]]
    ) -> None:
        """HEADS frames of at most ``heads_size`` entries; at least one (maybe empty)."""
        known = tree.edge(peer).known
        step = min(self.config.heads_size, MAX_HEADS)
        for i in range(0, max(1, len(entries)), step):
            chunk = tuple(entries[i : i + step])
            rpc = Heads(topic=tree.key, heads=chunk)
            self._send(now, peer, rpc, tree.name, encode_frame(rpc))
            known.update(c for c, _ in chunk)
            if peer == tree.parent:
                for c, _ in chunk:
                    self._guard.parent_sent(tree.key, peer, c, up=True)  # told it

    def _send_delta(self, now: float, tree: Tree, peer: str) -> None:
        """HEADS of the recent CIDs ``peer`` is not known to have (if any); tree
        filters: of those its edge carries (the others are pruned for it)."""
        edge = tree.edge(peer)
        if edge.delta_seq == tree.recent_seq:
            return  # it has (or was told of) every recent CID: nothing changed since
        known = edge.known
        delta = [(c, ts) for c, ts in reversed(tree.recent.items()) if c not in known]
        summary = self._edge_summary(tree, peer) if delta and peer != tree.parent else None
        if summary is not None:
            wanted = []
            for c, ts in delta:
                entry = self._events.get(c)
                if entry is not None and not matches_any(summary, entry[1].attributes):
                    self._prune_edge(tree, peer, c, count=False)
                else:
                    wanted.append((c, ts))
            delta = wanted
        if delta:
            self._send_entries(now, tree, peer, delta)
        edge.delta_seq = tree.recent_seq

    def _send_history(self, now: float, tree: Tree, peer: str) -> None:
        """A new edge: HEADS with every CID of the window, newest first, then older
        ones (a neighbour that missed events while partitioned learns them even when
        they are no longer among the newest)."""
        if peer != tree.parent and not self._in_step(tree):
            # Not in step with our own parent yet (a relay joining, or just joined):
            # what we could list now is not what the tree holds. The child gets it
            # once our parent's HEADS are here, or we act as root (a reader would
            # take an empty list for the whole history).
            tree.history_due.add(peer)
            return
        tree.history_due.discard(peer)
        tree.edges.pop(peer, None)
        entries = [(c, ts) for c, ts in reversed(tree.recent.items())]
        entries += [(c, ts) for c, ts in reversed(tree.older.items())]
        # And what we are fetching, as advertised to us: the child fetches it too.
        entries += [(c, ts) for c, ts in tree.fetching.items() if c not in self._seen]
        summary = self._target_summary(tree, peer) if peer != tree.parent else None
        if summary is not None:
            # Tree filters: not what the child's subtree does not want (pruned).
            wanted = []
            for c, ts in entries:
                entry = self._events.get(c)
                if entry is not None and not matches_any(summary, entry[1].attributes):
                    self._prune_edge(tree, peer, c)
                else:
                    wanted.append((c, ts))
            entries = wanted
        self._send_entries(now, tree, peer, entries)

    def _in_step(self, tree: Tree) -> bool:
        """Joined, and holding our parent's HEADS (or acting as root)."""
        if tree.author == self.peer_id:
            return True
        return tree.joined and (tree.parent is None or tree.parent in tree.heads_from)

    def _send_due_history(self, now: float, tree: Tree) -> None:
        """The window owed to new children, once in step."""
        if tree.history_due and self._in_step(tree):
            for child in [c for c in tree.children if c in tree.history_due]:  # set order varies
                self._send_history(now, tree, child)
            tree.history_due.clear()

    def _repair(
        self, now: float, tree: Tree, peer: str, entries: Iterable[tuple[CID, float]]
    ) -> None:
        """Fetch the advertised events this node lacks and would keep or deliver."""
        bound = self._heads_bound(now, tree)
        known = tree.edge(peer).known
        fetching = tree.fetching
        if len(fetching) > self.config.max_pending_fetches:
            for c in [c for c in fetching if c in self._seen or c not in self._fetches]:
                del fetching[c]
        skipped = tree.edge(peer).skipped
        # A quarter of the fetch table stays free for the parents that deliveries
        # wait on: a full table releases an event's waiters as if the parent were
        # unavailable (a child delivered before it). A head not fetched here stays
        # unknown, not given up: the walk back from what is fetched, or a later
        # HEADS or DIGEST, brings it.
        room = self.config.max_pending_fetches - self.config.max_pending_fetches // 4
        for cid, created in entries:
            known.add(cid)
            skipped.discard(cid)
            if cid in self._seen or cid in self._fetches or created < bound:
                continue
            if len(self._fetches) >= room:
                continue
            self._fetch(now, cid, "event", tree.key, peer)
            if cid in self._fetches:
                fetching[cid] = created

    def _edge_tree(self, now: float, peer: str, topic: CID) -> Tree | None:
        """The tree a HEADS or DIGEST from ``peer`` is about, if ``peer`` is a neighbour
        there (a peer that still takes us for its parent is adopted back)."""
        tree = self._trees.get(topic)
        if tree is None:
            self._stale_edge(now, peer, topic, None)
            return None
        if peer not in tree.children and peer != tree.parent:
            if tree.join is not None and tree.join.peer == peer:
                pass  # the parent we are joining: its HEADS can overtake its JOIN_ACK
            elif tree.joined and self._keyspace.distance(
                peer, tree.author_pos
            ) > self._keyspace.my_distance(tree.author_pos):
                self._adopt_child(now, tree, peer)  # it still takes us for its parent
            else:
                self._stale_edge(now, peer, tree.key, tree.name)
                return None
        return tree

    def _on_heads(self, now: float, peer: str, rpc: Heads) -> None:
        if not rpc.heads:
            known = self._trees.get(rpc.topic)
            if known is None or (
                peer != known.parent
                and peer not in known.children
                and (known.join is None or known.join.peer != peer)
            ):
                # An idle probe (._guard) from a former parent that still takes us
                # for its child (our LEAVE was lost): told every time, not once per
                # ping interval, or it drops us as a silent child.
                self._send(now, peer, Leave(topic=rpc.topic), known.name if known else None)
                return
        tree = self._edge_tree(now, peer, rpc.topic)
        if tree is None:
            return
        tree.heads_from.add(peer)
        if len(tree.heads_from) > 64:
            tree.heads_from = {peer}
        self._repair(now, tree, peer, rpc.heads)
        if not rpc.heads and (
            peer == tree.parent or (tree.join is not None and tree.join.peer == peer)
        ):
            # The parent's idle probe (._guard), or that of the peer we are joining
            # (its JOIN_ACK still on its way): answered at once, so that it tells
            # this child from a silent one in a topic where nothing flows.
            self._send(now, peer, Heads(topic=tree.key, heads=()), tree.name)
        if not rpc.heads:
            return  # a probe or its answer: it says nothing of either window
        if peer == tree.parent:
            self._send_due_history(now, tree)
        if self._is_edge(tree, peer):
            self._send_delta(now, tree, peer)  # what it may lack in turn

    def _heads_round(self, now: float) -> None:
        refresh = self._heads_tick % self.config.heads_refresh_every == 0
        for tree in list(self._trees.values()):
            if tree.reading_until is not None and tree.reading_until <= now:
                tree.reading_until = None  # the reader's time is up
                self._update_retention(now, tree)
                self._tree_changed(now, tree)
                self._maybe_leave(now, tree)
                continue
            if tree.history is not None and tree.history.missing:
                self._fill_history(now, tree)  # retry what could not be fetched yet
        for tree in self._trees.values():
            neighbours = tree.neighbours()
            for peer in [p for p in tree.edges if p not in neighbours]:
                del tree.edges[peer]
            if not tree.recent:
                continue
            windows: dict[float, tuple[float, float, int, int]] = {}
            for peer in neighbours:
                self._send_delta(now, tree, peer)
                if refresh:
                    self._send_digest(now, tree, peer, windows)

    def _heads_due(self, now: float, tree: Tree) -> None:
        """A publisher's early HEADS round (``heads_after_publish``)."""
        tree.heads_due = None
        for peer in tree.neighbours():
            self._send_delta(now, tree, peer)

    # ------------------------------------------------------------ DIGEST

    def _window_lo(self, now: float, tree: Tree) -> float:
        """Where this node's window is complete: nothing it would keep was dropped above
        it, and it repairs nothing below it. Finite (dag-cbor has no infinities)."""
        return max(self._heads_bound(now, tree), tree.dropped_max, 0.0)

    def _edge_summary(self, tree: Tree, peer: str | None) -> tuple[Filter, ...] | None:
        """(tree filters) What the edge to ``peer`` carries: a child's summary as we
        hold it, our own toward our parent; None: everything."""
        if peer is None:
            return None
        if peer == tree.parent:
            return self._own_filters(tree)
        if peer in tree.children:
            return self._target_summary(tree, peer)
        return None

    def _window_items(
        self, tree: Tree, lo: float, hi: float, peer: str | None = None
    ) -> list[tuple[CID, float]]:
        """The window ``[lo, hi]`` of the edge to ``peer``. Tree filters: only the
        events that edge carries, the same on both sides (our child's summary here,
        its own there): what we pruned for it, and what we hold but it does not
        want (a back-fill of ours, an event of its own subtree), is no gap of its.
        An event whose descriptor is no longer cached counts (both sides alike)."""
        items = [(c, ts) for c, ts in tree.recent.items() if lo <= ts <= hi]
        items += [(c, ts) for c, ts in tree.older.items() if lo <= ts <= hi]
        edge = tree.edges.get(peer) if peer is not None else None
        if edge is not None and edge.skipped:
            skipped = edge.skipped
            items = [e for e in items if e[0] not in skipped]
        summary = self._edge_summary(tree, peer)
        if summary is not None:
            events = self._events
            up = edge.up if edge is not None else ()
            kept = []
            for e in items:
                entry = events.get(e[0])
                if entry is None or e[0] in up or matches_any(summary, entry[1].attributes):
                    kept.append(e)
            items = kept
        return items

    def _digest_window(
        self, now: float, tree: Tree, lo: float, peer: str, *, own: bool
    ) -> tuple[float, float, int, int]:
        """``own``: the edge has a window of its own (pruned CIDs, or a summary);
        else every CID counts, read from the tree's fingerprint index."""
        hi = max(lo, now - self.config.heads_interval / 2)
        if own:
            count, total = fingerprint(c for c, _ in self._window_items(tree, lo, hi, peer))
        else:
            count, total = tree.window.fingerprint(lo, hi)
        return lo, hi, count, total

    def _send_digest(
        self,
        now: float,
        tree: Tree,
        peer: str,
        windows: dict[float, tuple[float, float, int, int]],
    ) -> None:
        """A DIGEST from where both windows are complete, if it changed (or repeats
        are due, or the edge differs). ``windows``: computed per ``lo`` this round."""
        edge = tree.edge(peer)
        lo = max(self._window_lo(now, tree), edge.peer_lo)
        own = bool(edge.skipped) or self._edge_summary(tree, peer) is not None
        cached = None if own else windows.get(lo)  # a filtered edge: its own window
        if cached is None:
            cached = self._digest_window(now, tree, lo, peer, own=own)
            if not own:
                windows[lo] = cached
        window = cached
        lo, hi, count, total = window
        tick = self._heads_tick
        if edge.digest_sent != (lo, count, total):
            edge.digest_sent = (lo, count, total)
            edge.repeats = 0
            edge.repeat_tick = tick + 1
        elif edge.differs:
            pass
        elif (lo, count, total) in edge.confirmed:
            return  # the neighbour's DIGEST of this very window compared equal here
        elif edge.repeats < DIGEST_REPEATS and tick >= edge.repeat_tick:
            edge.repeats += 1
            edge.repeat_tick = tick + (1 << edge.repeats)
        else:
            return  # unchanged, repeated enough: the neighbour has compared it
        self._send(
            now, peer, Digest(topic=tree.key, lo=lo, hi=hi, count=count, sum=total), tree.name
        )

    def _on_digest(self, now: float, peer: str, rpc: Digest) -> None:
        tree = self._edge_tree(now, peer, rpc.topic)
        if tree is None:
            return
        edge = tree.edge(peer)
        if rpc.have is None:
            edge.peer_lo = rpc.lo
        if rpc.have is not None:
            # Its listing: fetch what we lack, tell it what it lacks; compare again
            # next round (until a DIGEST matches).
            edge.differs = True
            if self._edge_summary(tree, peer) is not None:
                # (tree filters) An event it lists that we hold went up this edge or
                # came another way (a first hop): in our window of this edge from now
                # on, as it is in its.
                held = tree.recent.keys() | tree.older.keys()
                edge.up.update(c for c, _ in rpc.have if c in held and c not in edge.skipped)
            self._repair(now, tree, peer, rpc.have)
            listed = {c for c, _ in rpc.have}
            lacking = [
                e for e in self._window_items(tree, rpc.lo, rpc.hi, peer) if e[0] not in listed
            ]
            if lacking:
                lacking.sort(key=lambda e: e[1], reverse=True)
                self._send_entries(now, tree, peer, lacking)
            return
        if any(f.tree == tree.key for f in self._fetches.values()):
            return  # our window is about to change: compare when the fetches are done
        if rpc.ranges:
            self._list_ranges(now, tree, peer, rpc)
            return
        lo = self._window_lo(now, tree)
        if lo > rpc.lo:
            # Our window starts later: it cannot compare ours, but ours fits in its.
            if lo <= rpc.hi:
                count, total = fingerprint(c for c, _ in self._window_items(tree, lo, rpc.hi, peer))
                self._send(
                    now,
                    peer,
                    Digest(topic=tree.key, lo=lo, hi=rpc.hi, count=count, sum=total),
                    tree.name,
                )
            return
        items = self._window_items(tree, rpc.lo, rpc.hi, peer)
        count, total = fingerprint(c for c, _ in items)
        if (count, total) == (rpc.count, rpc.sum):
            if edge.differs:
                # In step again: say so, so that the neighbour stops comparing too.
                edge.differs = False
                self._send(now, peer, replace(rpc, ranges=(), have=None), tree.name)
            key = (rpc.lo, count, total)
            if key not in edge.confirmed:
                edge.confirmed.append(key)
                del edge.confirmed[:-CONFIRMED_KEPT]
            return
        edge.differs = True
        # Answer with the window split in ranges: the sender lists those that differ.
        items.sort(key=lambda e: e[1])
        answer = Digest(
            topic=tree.key,
            lo=rpc.lo,
            hi=rpc.hi,
            count=count,
            sum=total,
            ranges=_split(items, rpc.hi),
        )
        self._send(now, peer, answer, tree.name)

    def _list_ranges(self, now: float, tree: Tree, peer: str, rpc: Digest) -> None:
        """The answer to our DIGEST: list our events in each range that differs."""
        uppers = [u for u, _, _ in rpc.ranges]
        mine: list[list[tuple[CID, float]]] = [[] for _ in uppers]
        for cid, ts in self._window_items(tree, rpc.lo, rpc.hi, peer):
            i = bisect.bisect_left(uppers, ts)
            if i < len(mine):
                mine[i].append((cid, ts))
        edge = tree.edge(peer)
        for i, (upper, count, total) in enumerate(rpc.ranges):
            items = mine[i]
            if fingerprint(c for c, _ in items) == (count, total):
                continue
            lo = rpc.lo if i == 0 else math.nextafter(uppers[i - 1], math.inf)
            if lo > upper:
                continue
            items.sort(key=lambda e: e[1], reverse=True)
            if len(items) > MAX_HAVE:  # the newest part; the rest on a later round
                items = items[:MAX_HAVE]
                lo = items[-1][1]
            n, fp = fingerprint(c for c, _ in items)
            listing = Digest(topic=tree.key, lo=lo, hi=upper, count=n, sum=fp, have=tuple(items))
            self._send(now, peer, listing, tree.name)
            edge.known.update(c for c, _ in items)


def _split(items: list[tuple[CID, float]], hi: float) -> tuple[tuple[float, int, int], ...]:
    """``items`` (ascending by ``created``) in at most ``MAX_RANGES`` ranges of about
    equal size: ``(upper bound, count, sum)``, the last ending at ``hi``."""
    n = len(items)
    k = max(1, min(MAX_RANGES, n))
    step = -(-n // k)
    out: list[tuple[float, int, int]] = []
    for start in range(0, max(n, 1), max(step, 1)):
        chunk = items[start : start + step]
        upper = hi if start + step >= n else chunk[-1][1]
        # Ties at a bound belong to the range below it (upper bounds are inclusive).
        out.append((upper, *fingerprint(c for c, _ in chunk)))
    # Recount by the bounds themselves: equal timestamps across a cut move down.
    uppers = [u for u, _, _ in out]
    groups: list[list[CID]] = [[] for _ in out]
    for cid, ts in items:
        groups[min(bisect.bisect_left(uppers, ts), len(groups) - 1)].append(cid)
    return tuple((u, *fingerprint(g)) for u, g in zip(uppers, groups, strict=True))
