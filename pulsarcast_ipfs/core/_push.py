"""The first hop of an event: a publisher sends it straight to the root and its children
(docs/protocol-notes.md "First hop").

Theory of operation
-------------------
In a tree an event from a publisher that is not the root crosses two hops or more
(publisher → root → the others); under WAN delay each hop costs a full latency.
Kubo's gossipsub floods a node's own message to every topic peer it knows: one hop.
Pulsarcast does the same within a bound, the lazy half of Plumtree's eager/lazy push:

* A root (the author, or an acting root) tells its children who it and its
  children are: MEMBERS ``{epoch, members}`` (the root, then at most
  ``MAX_MEMBERS - 1`` children: the direct fan-out bound), at most every
  ``members_interval`` while that set changes. Every node below passes the list
  on to its own children, unchanged.
* Deltas (wire 2.6): a child that holds the root's previous list gets only what
  changed (``base``, the peers added or re-summarised, ``removed``); any other child
  the whole list. A relay passes a delta it could apply down unchanged. A node that
  cannot apply one (it holds another epoch) keeps its list and asks its parent for
  the whole one (MEMBERS_WANT, at most once per ``members_interval``).
* A node that publishes sends the EVENT, marked ``pushed=epoch``, to its tree
  neighbours as always *and* straight to the members of that epoch (the root
  included): one hop to the root and its children, two at most to the nodes below
  them (their parents forward it down).
* A node that receives a ``pushed`` event of the epoch it holds itself does not
  send it up the tree (the root has it from the publisher), only down; of another
  epoch (a stale list, a root that failed), up as well. The root sends it only to
  its children outside that epoch's members (new ones, beyond the bound, or all if it no longer
  remembers the epoch; it keeps 8). Anti-entropy counts the members as having it.
* A member takes a ``pushed`` EVENT from its *publisher* although that is no tree
  neighbour (from anyone else it is a stale edge: LEAVE), and verifies it like any
  EVENT: topic version, allowed publisher, signatures, at every hop.

Flat trees: a node below a child of the root that gets a MEMBERS list with room
(fewer than ``flat_fanout`` names, 64 by default) and is not in it JOINs the root
directly (``_room_at_root``, a membership entry point), keeping its parent until
the root accepts (make before break, as when a parent lags), once per epoch; its
subtree moves up with it. With every peer known, JOINs already go
straight to the author, but a JOIN that went through another peer (the author not
yet in the routing view, a parent left for lag) left the tree deeper than the
fan-out bound needs, and every level below the root's children costs a hop (under
500 ± 300 ms, trees of 20 nodes were 2-3 deep after the lag fix). The root's
fan-out stays bounded by ``MAX_MEMBERS`` (64): the list it sends names at most that
many, and nobody moves up when it is full.

Nothing else changes: deduplication by CID absorbs any overlap; an event whose
direct push was lost reaches its member through anti-entropy (DIGEST) and a fetch;
a member list that is stale only costs a LEAVE from a peer that left, or a root
forward to a new child.
"""

from __future__ import annotations

from pulsarcast_ipfs.core._cid import CID

from ._base import NodeBase
from ._codec import MAX_MEMBERS, Members, MembersWant, encode_frame
from ._filters import MATCH_ALL, Filter, matches_any, parse_summary, render_filter
from ._tree import Tree
from ._treestate import ROOT_STATES, tree_state

__all__ = ["FirstHopPush"]

_EPOCHS_KEPT = 8
"""Member sets a root remembers (a ``pushed`` event names one of the recent epochs)."""


class FirstHopPush(NodeBase):
    """The MEMBERS half of :class:`~._node.PulsarcastNode` (a mixin)."""

    def _is_root(self, tree: Tree) -> bool:
        return tree_state(tree, self.peer_id) in ROOT_STATES

    def _members_changed(self, now: float, tree: Tree) -> None:
        """The root's children changed: send MEMBERS soon (at most every
        ``members_interval``)."""
        if self._is_root(tree) and tree.children and tree.members_due is None:
            tree.members_due = now + self.config.members_interval

    def _root_list(self, now: float, tree: Tree) -> tuple[str, ...]:
        """(root) The member list it sends: itself and its children, at most
        ``MAX_MEMBERS - 1`` of them: when more, one per network first, established
        ones before fresh ones (:meth:`~._joingate.JoinGate.ranked`)."""
        return (self.peer_id, *self._gate.ranked(now, tree.key, tree.children, MAX_MEMBERS - 1))

    def _members_known(self, tree: Tree) -> tuple[str, ...]:
        """The root's member list as this node holds it (``TopicState.members``); a
        root with more children than the list holds: the list it last sent."""
        if self._is_root(tree):
            if len(tree.children) > MAX_MEMBERS - 1 and tree.members_listed:
                return tree.members_listed
            return (self.peer_id, *sorted(tree.children)[: MAX_MEMBERS - 1])
        if tree.members_epoch is not None and tree.members_from == tree.parent:
            return tree.members
        return ()

    def _partial_members(self, tree: Tree) -> tuple[str, ...]:
        """(tree filters) The members of :meth:`_members_known` whose subtree summary
        prunes: they keep only part of the topic's history (``TopicState``)."""
        if not self.config.tree_filters:
            return ()
        summaries = tree.child_summaries if self._is_root(tree) else tree.member_summaries
        partial = []
        for m in self._members_known(tree):
            summary = summaries.get(m)
            if summary is not None and MATCH_ALL not in summary:
                partial.append(m)
        return tuple(partial)

    def _send_members(self, now: float, tree: Tree) -> None:
        tree.members_due = None
        if not self._is_root(tree) or not tree.children:
            return
        members = self._root_list(now, tree)
        summaries = self._member_summaries(tree, members)
        last = tree.member_sets.get(tree.member_epoch)
        if last is not None and last == frozenset(members) and summaries == tree.summaries_listed:
            return  # what the children were told already
        before = tree.member_epoch if last is not None else None
        delta = None
        if before is not None:
            delta = _delta(tree.members_listed, tree.summaries_listed, members, summaries)
        tree.summaries_listed = summaries
        tree.members_listed = members
        if not tree.member_sets:
            # A random first epoch: a list from an earlier root (failover) that is
            # still passed on below a relay cannot name one of this root's epochs.
            tree.member_epoch = self._rng.getrandbits(40)
        tree.member_epoch += 1
        epoch = tree.member_epoch
        tree.member_sets[epoch] = frozenset(members)
        for old in [e for e in tree.member_sets if e <= epoch - _EPOCHS_KEPT]:
            del tree.member_sets[old]
        whole = Members(topic=tree.key, epoch=epoch, members=members, summaries=summaries)
        whole_data = encode_frame(whole)
        small: Members | None = None
        small_data = b""
        if delta is not None:
            added, added_summaries, removed = delta
            small = Members(
                topic=tree.key,
                epoch=epoch,
                members=added,
                summaries=added_summaries,
                base=before,
                removed=removed,
            )
            small_data = encode_frame(small)
        sent: dict[str, int] = {}
        for peer in tree.children:
            # A child that holds the previous list gets what changed (wire 2.6); one
            # that does not (new, or moved here since) the whole list.
            if small is not None and tree.members_sent.get(peer) == before:
                self._send(now, peer, small, tree.name, small_data)
            else:
                self._send(now, peer, whole, tree.name, whole_data)
            sent[peer] = epoch
        tree.members_sent = sent

    def _member_summaries(
        self, tree: Tree, members: tuple[str, ...]
    ) -> tuple[tuple[str, ...], ...] | None:
        """(tree filters) Each member's summary for MEMBERS (the root's own: ``*``)."""
        if not self.config.tree_filters:
            return None
        everything = (render_filter(MATCH_ALL),)
        out = []
        for m in members:
            summary = tree.child_summaries.get(m)
            out.append(everything if summary is None else tuple(map(render_filter, summary)))
        return tuple(out)

    def _on_members(self, now: float, peer: str, rpc: Members) -> None:
        tree = self._trees.get(rpc.topic)
        if tree is None:
            return
        if tree.parent != peer and (tree.join is None or tree.join.peer != peer):
            # Only a root's children use its list; anything else is stale. But the
            # parent we are joining sends its list right after its JOIN_ACK, and on
            # a transport that does not keep order the list can come first: kept, it
            # is used once the JOIN_ACK makes that peer our parent.
            if rpc.offer and peer == tree.author:
                # The author refused our WATCH and sent its list: witnesses to choose
                # from that our parent did not pick (._guard).
                self._guard.author_list(now, tree.key, peer, rpc.members)
            return
        summaries: dict[str, tuple[Filter, ...]]
        if rpc.base is None:
            members = rpc.members
            summaries = {}
        elif tree.members_epoch != rpc.base or tree.members_from != peer:
            # A delta from a list we do not hold (lost on a broken stream, or a list
            # from another parent): keep ours until the whole one comes.
            self._want_members(now, tree)
            return
        else:
            gone = set(rpc.removed or ())
            gone.update(rpc.members)
            rest = sorted({m for m in tree.members[1:] if m not in gone} | set(rpc.members))
            if tree.members and tree.members[0] in rest:
                rest.remove(tree.members[0])
            members = (*tree.members[:1], *rest)
            if len(members) > MAX_MEMBERS:
                self._want_members(now, tree)
                return
            # the kept members' summaries; the delta's own come below
            listed = set(members)  # not the tuple: a scan per kept member
            summaries = {m: f for m, f in tree.member_summaries.items() if m in listed}
        tree.members = members
        tree.members_epoch = rpc.epoch
        tree.members_from = peer
        if rpc.summaries is not None and self.config.tree_filters:
            # The codec checked the texts: canonical filters.
            for m, texts in zip(rpc.members, rpc.summaries, strict=True):
                summaries[m] = parse_summary(texts)
        tree.member_summaries = summaries
        # Deeper nodes push straight to the root's children too (two hops at most
        # for the rest): the list goes down the tree unchanged. A delta applies below
        # as here: our children hold the list we held (we sent them each one).
        if tree.children:  # encoded once for all of them, and not for none
            data = encode_frame(rpc)
            for child in tree.children:
                self._send(now, child, rpc, tree.name, data)
        self._room_at_root(now, tree)

    def _want_members(self, now: float, tree: Tree) -> None:
        """Ask the parent for the whole list (MEMBERS_WANT), at most once per
        ``members_interval``."""
        if tree.parent is None or now - tree.members_wanted_at < self.config.members_interval:
            return
        tree.members_wanted_at = now
        self._send(now, tree.parent, MembersWant(topic=tree.key), tree.name)

    def _on_members_want(self, now: float, peer: str, rpc: MembersWant) -> None:
        """A child asks for the whole list: the root's last one, or the one this node
        holds from its parent."""
        tree = self._trees.get(rpc.topic)
        if tree is None or peer not in tree.children:
            return
        if self._is_root(tree):
            if tree.member_epoch not in tree.member_sets:
                return  # no list sent yet: it comes when due
            whole = Members(
                topic=tree.key,
                epoch=tree.member_epoch,
                members=tree.members_listed,
                summaries=tree.summaries_listed,
            )
            self._send(now, peer, whole, tree.name)
            tree.members_sent[peer] = tree.member_epoch
            return
        self._members_to_new_child(now, tree, peer)

    def _offer_members(self, now: float, tree: Tree, peer: str) -> None:
        """(author) A WATCH it cannot take: the root's list instead (as it stands, sent
        or not yet), for the watcher to choose witnesses its parent did not
        (``._guard``). Not a child's list: ``members_sent`` is left alone."""
        if not self._is_root(tree):
            return
        members = self._members_known(tree)
        if len(members) > 1:
            rpc = Members(topic=tree.key, epoch=tree.member_epoch, members=members, offer=True)
            self._send(now, peer, rpc, tree.name)

    def _members_to_new_child(self, now: float, tree: Tree, peer: str) -> None:
        """A new child of a non-root node gets the root's list it holds."""
        if tree.members_epoch is not None and tree.members_from == tree.parent:
            summaries = None
            if tree.member_summaries and all(m in tree.member_summaries for m in tree.members):
                # the list as the root sent it, summaries included
                summaries = tuple(
                    tuple(render_filter(f) for f in tree.member_summaries[m]) for m in tree.members
                )
            # Built and encoded once per list: a relay adopting child after child
            # (JOIN churn) sends each the same message.
            made = (tree.members_epoch, tree.members, summaries)
            held = tree.members_frame
            if held is None or held[0] != made:
                rpc = Members(
                    topic=tree.key,
                    epoch=tree.members_epoch,
                    members=tree.members,
                    summaries=summaries,
                )
                held = tree.members_frame = (made, rpc, encode_frame(rpc))
            self._send(now, peer, held[1], tree.name, held[2])

    def _push_own(self, now: float, tree: Tree, cid: CID) -> None:
        """Send an event this node published: to its tree neighbours, and straight to
        the members of the root's list (the root and its children)."""
        if tree.members_epoch is None or tree.parent is None or tree.members_from != tree.parent:
            author = tree.author
            if (
                tree.parent is not None
                and author not in (tree.parent, self.peer_id)
                and author not in tree.children
            ):
                # No list from our parent (it just changed): at least the author
                # directly, as the list would have it first. Through the parent
                # alone the event reaches no one if that parent withholds it.
                # (Epoch 0: one no root names, epochs start at random; the root
                # forwards it to all its children.)
                self._forward(now, tree, cid, direct={author: None}, pushed=0)
                return
            self._forward(now, tree, cid)
            return
        entry = self._events.get(cid)
        direct: dict[str, tuple[CID, ...] | None] | None
        if tree.member_summaries and entry is not None:
            direct = self._first_hop(tree, entry[1])  # tree filters: pruned
            if direct is None:
                self._forward(now, tree, cid)  # not soundly: by the tree
                return
        else:
            direct = {
                m: None
                for m in tree.members
                if m != tree.parent and m not in tree.children and m != self.peer_id
            }
        self._forward(now, tree, cid, direct=direct, pushed=tree.members_epoch)

    def _forward_received(
        self, now: float, tree: Tree, cid: CID, sender: str | None, pushed: int | None
    ) -> None:
        """Send a received event on: to every neighbour but the sender, less what the
        publisher's direct first hop covered."""
        skip: set[str] = set()
        if sender is not None:
            skip.add(sender)
        if pushed is not None:
            if self._is_root(tree):
                covered = tree.member_sets.get(pushed)
                if covered is not None:
                    ev = self._events.get(cid)
                    for p in covered:
                        if p in tree.children and p != sender:
                            # The publisher sent it (or pruned it: tree filters).
                            summary = self._target_summary(tree, p)
                            if summary is not None and ev is not None:
                                if not matches_any(summary, ev[1].attributes):
                                    self._prune_edge(tree, p, cid, count=False)
                                    continue
                            tree.edge(p).known.add(cid)
                            if (
                                ev is not None
                                and now - ev[1].created_ts < self.config.heads_interval
                            ):
                                # A live event it got from the publisher: its DIGEST
                                # window changed, so it owes one (silent children).
                                self._guard.forwarded(tree.key, p)
                    skip |= covered
            elif (
                tree.parent is not None
                and tree.members_epoch == pushed
                and tree.members_from == tree.parent
            ):
                # The publisher used our root's list, so it sent the event to that
                # root itself: not up the tree. (A list from another epoch may be
                # stale, e.g. from a root that failed: then up, as any event.)
                tree.edge(tree.parent).known.add(cid)
                skip.add(tree.parent)
        self._forward(now, tree, cid, skip=skip, pushed=pushed)


def _delta(
    before: tuple[str, ...],
    before_summaries: tuple[tuple[str, ...], ...] | None,
    members: tuple[str, ...],
    summaries: tuple[tuple[str, ...], ...] | None,
) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...] | None, tuple[str, ...]] | None:
    """What changed from one list to the next: (peers added or given a new summary,
    their summaries, peers removed); None when the whole list is as short. Both
    lists start with the root, which a delta never changes."""
    if not before or not members or before[0] != members[0]:
        return None
    if (before_summaries is None) != (summaries is None):
        return None
    old: dict[str, tuple[str, ...] | None] = dict.fromkeys(before)
    new: dict[str, tuple[str, ...] | None] = dict.fromkeys(members)
    if before_summaries is not None and summaries is not None:
        old.update(zip(before, before_summaries, strict=True))
        new.update(zip(members, summaries, strict=True))
    added = tuple(m for m in members if m not in old or old[m] != new[m])
    removed = tuple(m for m in before if m not in new)
    if len(added) + len(removed) >= len(members):
        return None
    if summaries is None:
        return added, None, removed
    return added, tuple(new[m] or () for m in added), removed
