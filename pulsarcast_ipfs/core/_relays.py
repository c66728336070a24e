"""Relays that lie, the node's side: witnesses chosen and watched, parents scored and
left, children probed and dropped (docs/protocol-notes.md "Relays that lie").

The decisions are :class:`~._guard.RelayGuard`'s (a component that owns its state);
this mixin of :class:`~._node.PulsarcastNode` feeds it what the node sees and carries
out what it answers: WATCHes and announcements, LEAVEs, re-joins, idle probes.
"""

from __future__ import annotations

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.records import RecordKind

from ._base import NodeBase
from ._codec import Heads, Leave, Watch
from ._filters import matches_any, parse_filter
from ._guard import ACK_HEADS, Blame, WatchVerdict
from ._moves import entry_point
from ._tree import Tree

__all__ = ["RelayDefence"]


class RelayDefence(NodeBase):
    """The relay-guard half of :class:`~._node.PulsarcastNode` (a mixin)."""

    def _is_neighbour(self, topic: CID, peer: str) -> bool:
        tree = self._trees.get(topic)
        return tree is not None and (peer == tree.parent or peer in tree.children)

    def _publisher_of(self, cid: CID) -> str | None:
        entry = self._events.get(cid)
        return entry[1].publisher if entry is not None else None

    def _event_of(self, cid: CID) -> tuple[str, float] | None:
        if cid not in self._seen:
            return None
        entry = self._events.get(cid)
        return (entry[1].publisher, entry[1].created_ts) if entry is not None else None

    def _parent_of(self, key: CID) -> str | None:
        tree = self._trees.get(key)
        return tree.parent if tree is not None else None

    def _guard_round(self, now: float) -> None:
        """Every heads round: choose and refresh witnesses; probe idle children, drop
        silent ones."""
        guard = self._guard
        for tree in list(self._trees.values()):
            if tree.key not in self._trees:
                continue
            parent = tree.parent
            eligible = tree.joined and parent is not None and parent != tree.author
            plan = guard.plan(
                now,
                tree.key,
                eligible=eligible,
                members=self._members_known(tree),
                author=tree.author,
                exclude={
                    self.peer_id,
                    *(p for p in (parent, tree.join.peer if tree.join else None) if p),
                    *tree.children,
                },
            )
            if plan.sends:
                own = self._own_filters(tree)
                texts = tree.summary_sent if own is not None else None
                for peer, ttl in plan.sends:
                    filters = texts if ttl else None
                    self._send(
                        now, peer, Watch(topic=tree.key, ttl=ttl, filters=filters), tree.name
                    )
            if tree.children:
                silent, probes = guard.child_round(tree.key, tree.children)
                for child in silent:
                    self._evict_silent(now, tree, child)
                for child in probes:
                    if child in tree.children:
                        # An idle probe: a child answers with a HEADS (._guard).
                        self._send(now, child, Heads(topic=tree.key, heads=()), tree.name)

    @entry_point
    def _evict_silent(self, now: float, tree: Tree, child: str) -> None:
        """A child taking events but no anti-entropy: dropped, refused a while (._joingate)."""
        self._guard.penalise(now, child)
        self._gate.struck(now, child, now + self.config.penalty_ttl)
        self._record(
            now, RecordKind.PEER_PENALISED, topic=tree.name, peer=child, reason="silent_child"
        )
        self._release_child(now, tree, child)

    def _release_child(self, now: float, tree: Tree, child: str) -> None:
        """Drop ``child`` and tell it (LEAVE)."""
        del tree.children[child]
        tree.edges.pop(child, None)
        self._send(now, child, Leave(topic=tree.key), tree.name)
        self._tree_changed(now, tree)
        self._members_changed(now, tree)
        self._maybe_leave(now, tree)

    def _on_watch(self, now: float, peer: str, rpc: Watch) -> None:
        """(witness) A node asks for announcements of a topic's events."""
        tree = self._trees.get(rpc.topic)
        if tree is None or not tree.joined:
            return  # not in that tree (yet): the watcher finds another witness
        if rpc.ttl and peer in tree.children:
            # Nobody watches its own parent (or the peer it is joining): a child
            # that moved and whose LEAVE was lost. Let go and told so (a child that
            # does take us for its parent, its WATCH overtaken by its JOIN, joins
            # again), not kept to be probed and dropped as silent.
            self._release_child(now, tree, peer)
            if rpc.topic not in self._trees:
                return
        filters = None
        if rpc.filters is not None:
            filters = tuple(parse_filter(t) for t in rpc.filters)  # checked by the codec
        verdict = self._guard.on_watch(
            now, tree.key, peer, rpc.ttl, filters, subnet=self._gate.subnet(peer)
        )
        if verdict is WatchVerdict.FULL and tree.author == self.peer_id:
            # The witness of last resort cannot take it: it sends the root's list
            # instead, witnesses the watcher's parent did not choose (wire 2.12).
            self._offer_members(now, tree, peer)
        if verdict is not WatchVerdict.TAKEN:
            return
        # The answer: our newest few events it wants (maybe none), at once.
        entries: list[tuple[CID, float]] = []
        for cid, created in reversed(tree.recent.items()):
            if len(entries) >= ACK_HEADS:
                break
            entry = self._events.get(cid)
            if filters is not None and (
                entry is None or not matches_any(filters, entry[1].attributes)
            ):
                continue
            entries.append((cid, created))
        self._send(now, peer, Heads(topic=tree.key, heads=tuple(entries)), tree.name)

    def _on_announce(self, now: float, peer: str, rpc: Heads) -> None:
        """(watcher) A witness's HEADS: fetch, after the grace, what has not come."""
        tree = self._trees.get(rpc.topic)
        if tree is None:
            return
        cids = self._guard.announced(
            now,
            tree.key,
            peer,
            rpc.heads,
            parent=tree.parent,
            publisher_of=self._publisher_of,
            seen=self._seen.__contains__,
        )
        if not cids:
            return
        bound = self._heads_bound(now, tree)
        grace = self.config.witness_grace
        if tree.parent is not None:
            grace += max(0.0, self._links.lag_limit(tree.parent) - self.config.slow_parent_after)
        hint = tree.parent if tree.parent is not None else peer
        created = dict(rpc.heads)
        for cid in cids:
            if cid in self._seen or cid in self._fetches or created[cid] < bound:
                continue
            # The fetched copy is not sent back to the parent (hint): the parent's own
            # copy, if it comes, is what scores it.
            self._fetch(now, cid, "event", tree.key, hint, grace=grace)

    def _score_parents(self, now: float) -> None:
        for blame in self._guard.due(now, parent_of=self._parent_of, event_of=self._event_of):
            tree = self._trees.get(blame.tree)
            if tree is not None and tree.parent == blame.parent:
                self._leave_bad_parent(now, tree, blame)
        for key, cid in self._guard.own_due(now):
            self._push_own_again(now, key, cid)

    def _watch_own(self, now: float, tree: Tree, cid: CID) -> None:
        """(publisher) Below a parent that is not the author, an own event is checked:
        a witness must announce it back (._guard "Own events seen"). Only one our
        WATCH lets the witnesses announce (our subtree's filters)."""
        parent = tree.parent
        if not tree.joined or parent is None or parent == tree.author:
            return
        if self._own_filters(tree) is not None:
            wanted = tree.summary_filters
            entry = self._events.get(cid)
            if wanted is None or entry is None or not matches_any(wanted, entry[1].attributes):
                return
        self._guard.published(now, tree.key, cid)

    def _push_own_again(self, now: float, key: CID, cid: CID) -> None:
        """No witness announced our event back: straight to the witnesses and the
        author (epoch 0: they send it up and down the tree), not to tree neighbours."""
        tree = self._trees.get(key)
        if tree is None or cid not in self._events:
            return
        direct: dict[str, tuple[CID, ...] | None] = dict.fromkeys(self._guard.watched(key))
        direct[tree.author] = None
        direct.pop(self.peer_id, None)
        self._forward(now, tree, cid, skip=set(tree.neighbours()), direct=direct, pushed=0)

    @entry_point
    def _leave_bad_parent(self, now: float, tree: Tree, blame: Blame) -> None:
        """A parent that withheld what witnesses announced: LEAVE it, avoid it a while,
        re-join through another peer (children kept)."""
        guard = self._guard
        guard.penalise(now, blame.parent)
        self._gate.struck(now, blame.parent, now + self.config.penalty_ttl)
        guard.parent_left(tree.key, blame.parent)
        self._record(
            now,
            RecordKind.PEER_PENALISED,
            topic=tree.name,
            peer=blame.parent,
            reason="withheld",
            publisher=blame.publisher,
            misses=blame.misses,
        )
        self._send(now, blame.parent, Leave(topic=tree.key), tree.name)
        self._parent_lost(now, tree, avoid=blame.parent)
