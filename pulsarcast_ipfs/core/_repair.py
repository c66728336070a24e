"""Repair: block fetches, topic resolution and the retained history (§5 History).

Gap repair fetches the parents an event names and this node lacks (after a grace
for a live event's parent that may still come); a subscribe or read of an unknown
topic fetches its descriptor chain; a node that keeps the history pins it and
back-fills the parents it lacks. Each fetch is bounded in attempts and in number.

(:class:`Repair` is a part of :class:`~._node.PulsarcastNode`: a mixin
over :class:`~._base.NodeBase`, which declares the state and methods they share.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pulsarcast_ipfs.core._cid import CID

from ._base import _MAX_VERSIONS, NodeBase
from ._descriptors import (
    EventDescriptor,
    TopicDescriptor,
    cid_str,
    decode_cached,
)
from ._errors import DescriptorError
from ._history import TopicHistory
from ._io import FetchBlock, ReleaseBlocks, StoreBlock
from ._tree import Tree

__all__ = ["Repair"]

_HISTORY_FETCHES = 32  # history back-fill fetches in flight per node


@dataclass(slots=True, kw_only=True)
class _Fetch:
    kind: Literal["event", "topic", "history"]
    tree: CID | None
    hint: str | None
    attempts: int
    due: float
    outstanding: bool
    wait_only: bool = False
    """(tree filters) Not fetched at ``due``: what waited for it goes then."""


class Repair(NodeBase):
    """Repair (a part of :class:`~._node.PulsarcastNode`)."""

    def _retains(self, tree: Tree) -> bool:
        """Whether this node keeps the topic's history (docs/protocol.md §5 Persistence)."""
        return (
            tree.author == self.peer_id
            or tree.subscribed
            or bool(tree.followers)
            or tree.reading_until is not None
        )

    def _retain_version(self, tree: Tree, desc: TopicDescriptor) -> None:
        """A topic version of a retained history is pinned too: the events name it, and
        a reader must be able to check them after the author is gone."""
        own = desc.author == self.peer_id
        self._emit(StoreBlock(cid=desc.cid, data=desc.encode(), own=own, retain=True, announce=own))

    def _release_history(self, tree: Tree) -> None:
        """Stop keeping ``tree``'s history: unpin its events and topic versions."""
        if tree.history is None:
            return
        released = tree.history.clear()
        tree.history = None
        released += [c for c, d in tree.versions.items() if d.author != self.peer_id]
        if released:
            self._emit(ReleaseBlocks(cids=tuple(released)))

    def _update_retention(self, now: float, tree: Tree) -> None:
        """Start keeping the history when the tree becomes retained; stop (unpin) when not."""
        if self._retains(tree) and tree.key in self._trees:
            if tree.history is None:
                tree.history = TopicHistory(policy=self.config.retention)
                for desc in tree.versions.values():
                    self._retain_version(tree, desc)
                # What this node already holds of the topic seeds it.
                for cid, entry in self._events.items():
                    if entry[0] == tree.key:
                        self._retain(now, tree, cid, entry[1])
            return
        self._release_history(tree)

    def _retain(self, now: float, tree: Tree, cid: CID, ev: EventDescriptor) -> bool:
        """Keep ``ev`` in the retained history (pin it), evict what falls out, back-fill.

        Whether it was kept (and a ``StoreBlock`` with ``retain`` emitted)."""
        h = tree.history
        if h is None:
            return False
        if not self._keeps(tree, ev):
            h.note_outside((cid,))  # tree filters: our subtree does not want it
            return False
        if not h.add(cid, ev, now):
            return False
        own = ev.publisher == self.peer_id
        urgent = self._acks.urgent(cid)  # a publisher waits (._acks)
        self._emit(StoreBlock(cid=cid, data=ev.encode(), own=own, retain=True, urgent=urgent))
        evicted = h.enforce(now)
        if evicted:
            self._emit(ReleaseBlocks(cids=tuple(evicted)))
        if h.missing and tree.reading_until is not None:
            # A reader back-fills at once (an API call waits for it). Elsewhere a
            # missing parent is usually in flight (concurrent events arrive out of
            # order) or fetched by gap repair: the HEADS round back-fills what is left.
            self._fill_history(now, tree)
        return True

    def _fill_history(self, now: float, tree: Tree) -> None:
        """§5 History: fetch the parents the retained history links but lacks, so that
        every event of the topic (within retention) is reachable from any node."""
        h = tree.history
        if h is None:
            return
        in_flight = sum(1 for f in self._fetches.values() if f.kind == "history")
        for cid in sorted(h.missing, key=bytes):
            if cid in h:
                continue
            entry = self._events.get(cid)
            if entry is not None and entry[0] == tree.key:
                self._retain(now, tree, cid, entry[1])
                continue
            if cid in self._fetches:
                continue
            if in_flight >= _HISTORY_FETCHES:
                break
            hint = tree.parent or (tree.join.peer if tree.join is not None else None)
            self._fetch(now, cid, "history", tree.key, hint)
            in_flight += 1

    def _fetch(
        self,
        now: float,
        cid: CID,
        kind: Literal["event", "topic", "history"],
        tree: CID | None,
        hint: str | None,
        *,
        grace: float = 0.0,
        wait_only: bool = False,
    ) -> None:
        """Fetch ``cid`` (``FetchBlock``); after ``grace`` seconds if it may still
        arrive by itself (a live event's parent, on its way along another path).
        ``wait_only``: not fetched at all; after ``grace`` what waits for it goes
        (a filtered node's unknown parent: most likely one its parent pruned)."""
        pending = self._fetches.get(cid)
        if pending is not None:
            if pending.wait_only and not wait_only:
                # Anti-entropy or history wants it after all: a real fetch.
                pending.wait_only = False
                pending.kind = kind
                pending.hint = hint or pending.hint
                if not grace:
                    pending.outstanding = True
                    pending.due = now + self.config.fetch_timeout
                    self._emit(FetchBlock(cid=cid))
            return
        if len(self._fetches) >= self.config.max_pending_fetches:
            if kind == "event":
                self._release(now, cid)
            return
        self._fetches[cid] = _Fetch(
            kind=kind,
            tree=tree,
            hint=hint,
            attempts=1,
            due=now + (grace or self.config.fetch_timeout),
            outstanding=not grace,
            wait_only=wait_only,
        )
        if not grace:
            self._emit(FetchBlock(cid=cid))

    def _refetch_evicted(self, now: float, key: CID, cid: CID) -> None:
        """An event held back for causal order left the event cache before its turn
        came (a long gap repair: a restarted sidecar walks its history back to the
        subscription's start, thousands of events through a cache of
        ``event_cache_size``). Being seen, it would never be taken again (a duplicate)
        and what waits for it never delivered: it is forgotten as seen and fetched
        again (its block is held here), then delivered with ``recovered``."""
        if cid in self._delivered or cid in self._gave_up:
            return
        self._seen.pop(cid)
        self._fetch(now, cid, "event", key, None)

    def _fetch_now(self, now: float, cid: CID) -> None:
        """A fetch of ``cid`` still in its grace: start it now (what it waited for
        will not come by itself)."""
        f = self._fetches.get(cid)
        if f is not None and not f.outstanding and not f.wait_only:
            f.outstanding = True
            f.due = now + self.config.fetch_timeout
            self._emit(FetchBlock(cid=cid))

    def _fetch_timers(self, now: float) -> None:
        """Fetches due: start the ones that waited out their grace, retry the others."""
        for cid, f in list(self._fetches.items()):
            if f.due > now:
                continue
            if f.outstanding:
                self._fetch_failed(now, cid, f)
            elif f.wait_only:
                # Not come: pruned for us (or lost: then a DIGEST finds it), so not
                # missing from our history either.
                del self._fetches[cid]
                tree = self._trees.get(f.tree) if f.tree is not None else None
                if tree is not None and tree.history is not None:
                    tree.history.note_outside((cid,))
                self._release(now, cid)
            else:
                f.outstanding = True
                f.due = now + self.config.fetch_timeout
                self._emit(FetchBlock(cid=cid))

    def _fetch_failed(self, now: float, cid: CID, f: _Fetch) -> None:
        if f.attempts < self.config.fetch_attempts:
            f.attempts += 1
            f.outstanding = False
            f.due = now + self.config.fetch_retry_delay
            return
        del self._fetches[cid]
        if f.kind == "event" or (f.kind == "history" and cid in self._waiting):
            self._drop(now, "unrecoverable", event=cid_str(cid))
            self._release(now, cid)
        elif f.kind == "topic":
            self._stash.pop(cid, None)
            self._read_holders.pop(cid, None)
            if self._resolving.pop(cid, None) is not None:
                self._drop(now, "topic_unavailable", event=cid_str(cid))

    def block_fetched(self, now: float, cid: CID, data: bytes | None) -> None:
        """The answer to a :class:`FetchBlock` (``None``: not found or timed out)."""
        f = self._fetches.get(cid)
        if f is None or not f.outstanding:
            return
        if data is None:
            self._fetch_failed(now, cid, f)
            return
        del self._fetches[cid]
        if f.kind == "topic":
            desc = self._checked_topic(data, cid)
            if isinstance(desc, str):
                if desc != "invalid":
                    self._drop(now, desc, event=cid_str(cid))
                f.attempts = self.config.fetch_attempts
                self._fetches[cid] = f
                self._fetch_failed(now, cid, f)
                return
            self._topic_blocks.put(cid, desc)
            tree = self._trees.get(f.tree) if f.tree is not None else None
            if tree is not None and desc.name == tree.name and desc.author == tree.author:
                self._learn_version(now, tree, desc)
            self._continue_resolutions(now)
            return
        try:
            ev = decode_cached(EventDescriptor, data, expected_cid=cid)
        except DescriptorError:
            self._drop(now, "invalid", event=cid_str(cid))
            self._release(now, cid)
            return
        tree = self._trees.get(f.tree) if f.tree is not None else None
        if tree is None:
            return
        if f.kind == "history":
            # Back-fill of the retained history: kept (and delivered if it is due);
            # sent on, like gap repair, only if the subtree may still want it (created
            # since the subscription); then the next missing parents are fetched.
            if cid in self._seen:
                entry = self._known_event(cid)
                if entry is not None and isinstance(entry[1], EventDescriptor):
                    self._retain(now, tree, cid, entry[1])
            elif not self._accept_event(
                now,
                tree,
                ev,
                sender=f.hint,
                recovered=True,
                forward=bool(tree.children) and ev.created_ts >= tree.since,
            ):
                self._release(now, cid)
            if tree.history is not None and cid not in tree.history:
                if self._keeps(tree, ev):
                    tree.history.add(cid, ev, now)  # outside the policy: remembered as such
                else:
                    tree.history.note_outside((cid,))
            self._fill_history(now, tree)
            return
        if not self._accept_event(now, tree, ev, sender=f.hint, recovered=True):
            self._release(now, cid)

    def _checked_topic(self, data: bytes, cid: CID) -> TopicDescriptor | str:
        """A topic block that should be ``cid``: the descriptor, or why it is refused
        (``invalid``: not that block, or no descriptor)."""
        try:
            desc = TopicDescriptor.decode(data, expected_cid=cid)
        except DescriptorError:
            return "invalid"
        refused = self._signing.topic_refused(desc)
        return refused if refused is not None else desc

    def _continue_resolutions(self, now: float) -> None:
        for cid in list(self._resolving):
            root = self._resolve(now, cid)
            if root is None:
                continue
            # The loop body can re-enter this method and resolve ``cid`` first.
            purposes = self._resolving.pop(cid, None)
            if purposes is None:
                continue
            chain = self._chain(cid)
            tree = self._new_tree(now, root)
            for desc in reversed(chain):
                self._learn_version(now, tree, desc)
            for purpose, key in purposes:
                if purpose == "subscribe":
                    self._subscribe_tree(now, tree)
                elif purpose == "read":
                    self._read_tree(now, tree, self._read_holders.pop(cid, ()))
                elif key is not None and key in self._trees:
                    self._follow(now, tree, self._trees[key])

    def _chain(self, cid: CID) -> list[TopicDescriptor]:
        out: list[TopicDescriptor] = []
        cur: TopicDescriptor | None = self._topic_blocks.get(cid)
        while cur is not None and len(out) < _MAX_VERSIONS:
            out.append(cur)
            if cur.parent is None:
                break
            nxt: TopicDescriptor | None = self._topic_blocks.get(cur.parent)
            if nxt is None or nxt.name != cur.name:
                break
            cur = nxt
        return out

    def _resolve(self, now: float, cid: CID) -> TopicDescriptor | None:
        """The first version of the topic ``cid`` is a version of (fetching what lacks)."""
        cur: TopicDescriptor | None = self._topic_blocks.get(cid)
        if cur is None:
            self._fetch(now, cid, "topic", None, None)
            return None
        for _ in range(_MAX_VERSIONS):
            if cur.parent is None:
                return cur
            if cur.parent in self._version_of:
                return self._trees[self._version_of[cur.parent]].root
            parent: TopicDescriptor | None = self._topic_blocks.get(cur.parent)
            if parent is None:
                self._fetch(now, cur.parent, "topic", None, None)
                return None
            if parent.name != cur.name:
                return cur  # a sub-topic: its own first version
            cur = parent
        return cur
