"""Tree membership: JOIN, JOIN_ACK, LEAVE, parent lost, acting root (Algorithm 2, §5-§6).

The tree state these methods move between, and the table they follow, are in
:mod:`._treestate`. Its inputs enter here (``_new_tree``, ``_ensure_joined``,
``_on_join``, ``_on_join_ack``, ``_join_timed_out``, ``_on_leave``, ``_peer_failed``,
``_maybe_leave``, ``_recheck_root``, ``_room_at_root``), and through ``_read_tree``
(:mod:`._topics`) and ``_parent_lagging`` (:mod:`._liveness`): no other code changes a tree's
``joined``, ``parent``, ``join`` or ``leaf`` (tests/test_core_treestate.py checks
it). Every edge goes from a peer to one strictly closer to the author (a reader's
leaf edge excepted: it takes no children), so joins terminate.

(:class:`Membership` is a part of :class:`~._node.PulsarcastNode`: a mixin
over :class:`~._base.NodeBase`, which declares the state and methods they share.)
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kademlia import peer_position
from pulsarcast_ipfs.records import RecordKind

from ._base import NodeBase
from ._codec import MAX_MEMBERS, Join, JoinAck, Leave
from ._descriptors import TopicDescriptor, cid_str, decode_cached
from ._errors import DescriptorError
from ._io import Role
from ._moves import entry_point
from ._tree import JoinAttempt, Tree
from ._treestate import ACTING_ROOT_STATES, ROOT_STATES, TreeState, tree_state

__all__ = ["Membership"]


class Membership(NodeBase):
    """Tree membership (a part of :class:`~._node.PulsarcastNode`)."""

    def _role(self, tree: Tree) -> Role:
        if tree_state(tree, self.peer_id) in ROOT_STATES:
            return "root"
        if tree.subscribed:
            return "subscriber"
        if tree.joined or tree.children or tree.join is not None:
            return "relay"
        return "none"

    def _tree_changed(self, now: float, tree: Tree, *, force: bool = False) -> None:
        tree.role = self._role(tree)
        self._summary_changed(now, tree)
        self._members_changed(now, tree)
        self._send_due_history(now, tree)
        self._record(
            now,
            RecordKind.TREE_CHANGED,
            topic=tree.name,
            topic_cid=cid_str(tree.key),
            role=tree.role,
            parent=tree.parent,
            children=list(tree.children),
        )

    @entry_point
    def _new_tree(self, now: float, root: TopicDescriptor) -> Tree:
        tree = self._trees.get(root.cid)
        if tree is not None:
            return tree
        tree = Tree(root=root, author_pos=peer_position(root.author), latest=root, since=now)
        tree.versions[root.cid] = root
        tree.depth[root.cid] = 0
        self._trees[root.cid] = tree
        tree.dues = self._tree_dues  # no deadline yet: the earliest stands
        self._version_of[root.cid] = root.cid
        self._topic_blocks.put(root.cid, root)
        if root.author == self.peer_id:
            tree.joined = True
            self._update_retention(now, tree)
        return tree

    def _drop_tree(self, tree: Tree) -> None:
        self._release_history(tree)
        gone = self._trees.pop(tree.key, None)
        if gone is not None:
            gone.dues = None
            self._tree_dues.valid = False  # its deadlines no longer count
        self._guard.forget(tree.key)
        for v in tree.versions:
            if self._version_of.get(v) == tree.key:
                del self._version_of[v]

    def _wanted(self, tree: Tree) -> bool:
        return (
            tree.author == self.peer_id
            or tree.subscribed
            or tree.publishing
            or bool(tree.followers)
            or bool(tree.children)
            or tree.reading_until is not None
        )

    def _next_hop(
        self, now: float, tree: Tree, exclude: Iterable[str] = (), *, suspects: bool = False
    ) -> str | None:
        """Algorithm 2: the known live peer closest to the author, strictly closer than us.

        ``suspects``: consider peers that failed recently too (an acting root's periodic
        recheck: a peer that failed during start-up or a partition may be back).
        """
        skip = set(exclude)
        skip.update(tree.children)  # never below one's own child (a reader's leaf JOIN)
        skip.update(self._guard.penalised_peers(now))  # found lying: avoided a while
        excluded = None
        if not suspects and (self._admission.any_banned or self._links.any_suspect):
            excluded = functools.partial(self._is_suspect, now)
        return self._keyspace.next_hop(tree.author_pos, skip, excluded)

    @entry_point
    def _ensure_joined(self, now: float, tree: Tree) -> None:
        """Algorithm 2: join towards the author unless already in the tree or joining."""
        if tree.author == self.peer_id:
            tree.joined = True
            return
        if tree.joined or tree.join is not None:
            return
        self._join_next(now, tree, set())

    def _reads_only(self, tree: Tree) -> bool:
        """A reader and nothing else: it may hang below a holder as a leaf."""
        return (
            tree.reading_until is not None
            and not (tree.subscribed or tree.publishing or tree.followers or tree.children)
            and tree.author != self.peer_id
        )

    def _leaf_hop(self, now: float, tree: Tree, tried: set[str]) -> str | None:
        """A reader's first choice: a holder of the history not tried yet."""
        if not tree.holders or not self._reads_only(tree):
            return None
        for peer in tree.holders:
            if peer not in tried and peer != tree.parent and not self._is_suspect(now, peer):
                return peer
        return None

    def _join_next(self, now: float, tree: Tree, tried: set[str]) -> None:
        move = tree.join
        if move is not None and move.single and tree.parent is not None:
            heard = self._links.last_heard(tree.parent)
            if move.away_since is None or (heard is not None and heard >= move.away_since):
                tree.join = None  # a move that did not happen: stay with the parent
                return
            # Away from a lagging parent that has been silent since: it may be dead
            # (not just slow), so go on to the next peers as a lost parent would.
        leaf = self._leaf_hop(now, tree, tried)
        if leaf is not None:
            tried.add(leaf)
            self._send_join(now, tree, leaf, tried, leaf=True)
            return
        hop = self._next_hop(now, tree, tried)
        if hop is None and tree.parent is not None:
            # Moving away from a lagging parent, and nobody else took us: stay with it.
            tree.join = None
            return
        if hop is None:
            # No live peer strictly closer to the author: act as root (§6 root failover)
            # and look again later (the author may return, peers may appear).
            tree.join = None
            was = (tree.joined, tree.parent)
            tree.joined = True
            tree.parent = None
            tree.recheck_at = now + self.config.root_recheck_interval
            if was != (True, None):
                self._tree_changed(now, tree)
            return
        tried.add(hop)
        self._send_join(now, tree, hop, tried)

    def _send_join(
        self,
        now: float,
        tree: Tree,
        hop: str,
        tried: set[str],
        *,
        leaf: bool = False,
        single: bool = False,
        up: bool = False,
        away: bool = False,
    ) -> None:
        """JOIN ``hop``; ``tried`` (which includes it) is skipped if it fails; a
        ``single`` try (a joined node moving: up to the root, or away from a lagging
        parent) is given up instead. ``up``: the move up of a flat tree (the root
        refuses it when its list is full). ``away``: a move away from a lagging parent
        (:attr:`JoinAttempt.away_since`)."""
        tree.join = JoinAttempt(
            peer=hop,
            deadline=now + self.config.join_timeout,
            tried=tried,
            leaf=leaf,
            single=single or away,
            away_since=now if away else None,
        )
        rpc = Join(
            topic=tree.key,
            descriptor=tree.root.encode(),
            leaf=leaf,
            up=up,
            summary=self._join_summary(tree),
            want_meta=True if self._meta_wanted(tree) else None,
        )
        self._send(now, hop, rpc, tree.name)

    @entry_point
    def _room_at_root(self, now: float, tree: Tree) -> None:
        """MEMBERS from the parent (flat trees, :mod:`._push`): below a child of the
        root, with room in the root's list (fewer than ``flat_fanout`` names), JOIN
        the root, once per epoch, keeping the parent until it accepts."""
        root = tree.members[0] if tree.members else None
        if (
            root is None
            or root == tree.parent
            or root == self.peer_id
            or self.peer_id in tree.members
            or len(tree.members) >= min(self.config.flat_fanout, MAX_MEMBERS)
            or tree.join is not None
            or tree.leaf
            or not tree.joined
            or tree.flattened_at == tree.members_epoch
            or root in tree.children
            or self._is_suspect(now, root)
        ):
            return
        tree.flattened_at = tree.members_epoch
        self._send_join(now, tree, root, {root}, single=True, up=True)

    @entry_point
    def _join_timed_out(self, now: float, tree: Tree) -> None:
        assert tree.join is not None
        self._join_next(now, tree, tree.join.tried)  # retry via the next closest

    @entry_point
    def _recheck_root(self, now: float, tree: Tree) -> None:
        """An acting root looks for a live peer closer to the author (§6). One with a
        JOIN in flight leaves it alone: the JOIN's timeout decides (the next peer, or
        acting root again with a recheck)."""
        tree.recheck_at = None
        if tree_state(tree, self.peer_id) is TreeState.ACTING_ROOT:
            hop = self._next_hop(now, tree) or self._next_hop(now, tree, suspects=True)
            if hop is None:
                tree.recheck_at = now + self.config.root_recheck_interval
            else:
                self._send_join(now, tree, hop, {hop})

    def _parent_lost(self, now: float, tree: Tree, *, avoid: str | None) -> None:
        """§6: a node that lost its parent re-joins through another peer; children stay."""
        tree.parent = None
        tree.joined = False
        tree.join = None
        tree.leaf = False
        tree.recheck_at = None
        self._tree_changed(now, tree)
        if not self._wanted(tree):
            self._drop_tree(tree)
            return
        self._join_next(now, tree, {avoid} if avoid else set())

    def _stale_edge(self, now: float, peer: str, topic: CID, name: str | None) -> None:
        """``peer`` sent a tree message (EVENT, HEADS, DIGEST) over an edge this node
        does not have (it moved, or left the topic): LEAVE tells it, at most once per
        ``ping_interval`` per peer and topic. Until the LEAVE lands every frame on the
        edge comes back here, and answering each was about half of the LEAVEs of an
        overloaded 50-node network (``benchmarks/lag_churn.py``: 2,003 of 4,270)."""
        told = self._stale_told.get((peer, topic))
        if told is not None and now - told < self.config.ping_interval:
            return
        self._stale_told.put((peer, topic), now)
        self._send(now, peer, Leave(topic=topic), name)

    @entry_point
    def _maybe_leave(self, now: float, tree: Tree) -> None:
        """§5 Unsubscribe: an empty relay leaves its parent, which may leave in turn."""
        if self._wanted(tree) or tree.key not in self._trees:
            return
        joining = tree.join.peer if tree.join else None
        for peer in dict.fromkeys(p for p in (tree.parent, joining) if p):  # in this order
            self._send(now, peer, Leave(topic=tree.key), tree.name)
        tree.parent = None
        tree.joined = False
        tree.join = None
        self._tree_changed(now, tree)
        self._drop_tree(tree)

    @entry_point
    def _peer_failed(self, now: float, peer: str) -> None:
        """A neighbour is gone: drop it from every tree, re-join where it was the parent."""
        self._links.suspect(now, peer)
        self._links.forget(peer)
        for tree in list(self._trees.values()):
            changed = False
            if peer in tree.children:
                del tree.children[peer]
                tree.edges.pop(peer, None)
                changed = True
                # Told so: a child that is alive after all (the failure report was
                # about a send before it restarted and JOINed again) re-joins, rather
                # than keep a parent that no longer sends it anything. A dead one
                # never gets it (and its failure is reported again, now a no-op).
                self._send(now, peer, Leave(topic=tree.key), tree.name)
            if tree.parent == peer:
                self._parent_lost(now, tree, avoid=peer)
                continue
            if tree.join is not None and tree.join.peer == peer:
                self._join_next(now, tree, tree.join.tried)
            if changed:
                self._tree_changed(now, tree)
                self._maybe_leave(now, tree)
        self._requests.peer_failed(now, peer)
        self._fast.peer_failed(now, peer)

    def set_known_peers(self, now: float, peers: Iterable[str]) -> None:
        """Routing-table snapshot plus connected peers (§3); replaces the previous one."""
        self._keyspace.set_known(peers)
        for tree in self._trees.values():
            if tree_state(tree, self.peer_id) in ACTING_ROOT_STATES:
                if tree.recheck_at is None or tree.recheck_at > now:
                    tree.recheck_at = now

    def peer_unreachable(self, now: float, peer: str) -> None:
        """The driver gave up on ``peer`` after bounded retries (§6 "Failure handling")."""
        if peer != self.peer_id:
            self._peer_failed(now, peer)

    @entry_point
    def _on_join(self, now: float, peer: str, rpc: Join) -> None:
        """Algorithm 2, receiving side: adopt the sender as a child, join upward if needed."""
        try:
            root = decode_cached(TopicDescriptor, rpc.descriptor, expected_cid=rpc.topic)
        except DescriptorError:
            self._drop(now, "invalid", peer=peer)
            return
        tree = self._trees.get(rpc.topic)
        if tree is None or peer not in tree.children:
            # Sybil joins (._joingate): a network's share of the children, and of JOINs.
            why = self._gate.admit(now, rpc.topic, peer, tree.children if tree else ())
            if why is not None:
                self._drop(now, why, topic=root.name, peer=peer)
                if why == "colocated":
                    self._send(now, peer, JoinAck(topic=rpc.topic, ok=False), root.name)
                return  # join_flood: dropped unanswered (the joiner times out, goes on)
        refused = self._signing.topic_refused(root) if tree is None else None
        if refused is not None:
            self._drop(now, refused, topic=root.name, peer=peer)
            self._send(now, peer, JoinAck(topic=rpc.topic, ok=False), root.name)
            return
        if tree is None:
            if len(self._trees) >= self.config.max_topics:
                self._drop(now, "too_many_topics", peer=peer)
                self._send(now, peer, JoinAck(topic=rpc.topic, ok=False), root.name)
                return
            tree = self._new_tree(now, root)
        if self._guard.penalised(now, peer):
            refuse = True  # found lying (a silent child, a withholding parent): not for a while
        elif rpc.leaf:
            # A reader asks to hang below a holder of the history, whatever its
            # distance: it takes no children there, so no cycle can form.
            refuse = tree.parent == peer or tree.history is None or not tree.joined
        else:
            # Only a peer farther from the author may hang below us: no cycles. A
            # leaf takes no children at all, nor does a node becoming one.
            refuse = (
                tree.parent == peer
                or tree.leaf
                or (tree.join is not None and tree.join.leaf)
                or (
                    tree.author != self.peer_id
                    and self._keyspace.distance(peer, tree.author_pos)
                    <= self._keyspace.my_distance(tree.author_pos)
                )
                or (
                    rpc.up
                    and peer not in tree.children
                    and len(tree.children) >= min(self.config.flat_fanout, MAX_MEMBERS) - 1
                )
            )
        if refuse:
            self._send(now, peer, JoinAck(topic=tree.key, ok=False), tree.name)
            if not self._wanted(tree) and tree.join is None and not tree.joined:
                self._drop_tree(tree)
            return
        self._set_child_summary(now, tree, peer, rpc.summary)
        self._adopt_child(now, tree, peer, meta=rpc.want_meta is True)

    def _adopt_child(self, now: float, tree: Tree, peer: str, *, meta: bool = False) -> None:
        """Take ``peer`` as a child; ``meta``: its JOIN asked for the meta-topic
        descriptor (sent with the JOIN_ACK if held)."""
        new = peer not in tree.children
        if new:
            self._gate.adopted(now, tree.key, peer)
            self._readopted(tree, peer)
            self._stale_told.pop((peer, tree.key))
        tree.children[peer] = None
        self._links.heard(now, peer)
        block = self._meta_block(tree) if meta else None
        self._send(now, peer, JoinAck(topic=tree.key, ok=True, meta=block), tree.name)
        if new:
            tree.edges.pop(peer, None)
            self._tree_changed(now, tree)
            self._send_history(now, tree, peer)
            self._members_to_new_child(now, tree, peer)
        self._ensure_joined(now, tree)

    @entry_point
    def _on_join_ack(self, now: float, peer: str, rpc: JoinAck) -> None:
        tree = self._trees.get(rpc.topic)
        if tree is None or tree.join is None or tree.join.peer != peer:
            if rpc.ok and (tree is None or tree.parent != peer):
                # A late acknowledgement from a peer we no longer want as parent.
                self._send(now, peer, Leave(topic=rpc.topic), tree.name if tree else None)
            return
        if not rpc.ok:
            self._join_next(now, tree, tree.join.tried)
            return
        old_parent = tree.parent
        self._stale_told.pop((peer, tree.key))
        tree.leaf = tree.join.leaf
        tree.join = None
        tree.parent = peer
        tree.joined = True
        tree.recheck_at = None
        self._links.heard(now, peer)
        self._tree_changed(now, tree)
        # Events published while outside the tree, then HEADS (repair after (re)join).
        for cid in tree.unsent:
            self._forward(now, tree, cid, exclude=None, only=peer)
        if old_parent is not None and old_parent != peer:
            # Moved away from a lagging parent (make before break): what we sent it
            # lately may still sit in its backlog; the new parent gets the last few
            # seconds' events at once (it drops those it has) rather than by HEADS
            # and block fetches.
            self._send(now, old_parent, Leave(topic=tree.key), tree.name)
            horizon = now - 4 * self.config.slow_parent_after
            for cid, created in list(tree.recent.items()):
                if created >= horizon and cid not in tree.unsent:
                    self._forward(now, tree, cid, exclude=None, only=peer)
        tree.unsent.clear()
        self._send_history(now, tree, peer)

    @entry_point
    def _on_leave(self, now: float, peer: str, rpc: Leave) -> None:
        tree = self._trees.get(rpc.topic)
        if tree is None:
            return
        if peer in tree.children:
            del tree.children[peer]
            tree.edges.pop(peer, None)
            self._tree_changed(now, tree)
            self._maybe_leave(now, tree)
        elif tree.parent == peer:
            self._parent_lost(now, tree, avoid=peer)
        elif tree.join is not None and tree.join.peer == peer:
            self._join_next(now, tree, tree.join.tried)
