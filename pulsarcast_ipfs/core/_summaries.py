"""Filters in the tree, first part: subtree summaries.

Theory of operation
-------------------
With ``NodeConfig.tree_filters`` each node tells its parent, per topic, what its
*subtree* wants: the disjunction of its own interest and its children's summaries,
merged (:func:`~._filters.merge`: wider, never narrower) down to
``summary_bound`` filters. Its own interest is its subscription's filters (a
sidecar's: the union of its consumers'; ``[*]`` without a filter) when it is
subscribed, ``[*]`` when it keeps the history without subscribing (the author, a
reader) or follows a meta topic, and nothing for a pure relay. The summary goes up

- in every JOIN (``summary``; a re-join after a repair carries it, so a repaired
  tree knows it again at once), and
- in a SUMMARY message when it changes (subscribe, unsubscribe, a filter replaced, a
  child's summary changed, a child gone), at most every ``summary_interval`` per
  tree: changes in between are coalesced into one message. SUMMARY is rate-limited
  with JOIN (the same token bucket per peer, :mod:`._admission`).
- SUMMARY has no acknowledgement, and a lost one is not harmless: the parent goes on
  pruning by the summary before, so a subtree that came to want more never gets it
  (the pruned events are no gap on either side). So a SUMMARY is sent again,
  unchanged, :data:`SUMMARY_REPEATS` times, 4, 16 and 64 ``summary_interval`` after
  it (a change in between goes at once, as before, and starts the repeats again); a
  parent takes an unchanged summary as a no-op. The first copy to arrive makes the
  parent owe the child what it pruned and the summary now matches (HEADS, DIGEST).
  (In the 1,000-node simulation with 5 % loss and 10 % crashes, 16 of 40,629 live
  deliveries were missing for good without the repeats: three subscribers whose
  subtree's wider SUMMARY was lost.)

A parent keeps each child's summary, merged down to ``summary_bound`` filters
whatever the child sent (at most ``MAX_SUMMARY`` on the wire); a child without one
(an older node, or ``tree_filters`` off) wants everything. A SUMMARY from a peer
that is not a child is dropped (``not_child``).

The parent prunes by the summaries (:mod:`._pruning`): an event goes down only
into the subtrees whose summary matches it. What is counted
(:attr:`filter_forwards`): EVENTs sent down (``down``), those into a subtree whose
summary did not match after all (``false_positive``: a merge widened it, or the
summary changed on the way), and the sends pruned (``pruned``).

(:class:`Summaries` is a part of :class:`~._node.PulsarcastNode`: a mixin over
:class:`~._base.NodeBase`, which declares the state and methods they share.)
"""

from __future__ import annotations

from pulsarcast_ipfs.core._cid import CID

from ._base import NodeBase
from ._codec import Summary
from ._descriptors import EventDescriptor
from ._filters import (
    MATCH_ALL,
    Filter,
    matches_any,
    merge,
    parse_summary,
    render_filter,
)
from ._tree import Tree

__all__ = ["Summaries"]

_FORMER_KEPT = 64
"""Summaries of former children kept per tree (``Tree.former_summaries``)."""
SUMMARY_REPEATS = 3
"""Times a SUMMARY is sent again unchanged, 4, 16 and 64 ``summary_interval`` after
it: with 5 % of messages lost, all four are lost once in 160,000 changes."""


class Summaries(NodeBase):
    """Subtree summaries (a part of :class:`~._node.PulsarcastNode`)."""

    def _own_interest(self, tree: Tree) -> list[Filter]:
        if tree.subscribed:
            return list(tree.filters) if tree.filters is not None else [MATCH_ALL]
        if tree.history is not None or tree.followers:
            return [MATCH_ALL]  # keeps the whole history (author, reader) or a meta topic
        return []

    def _subtree_summary(self, tree: Tree) -> tuple[Filter, ...]:
        """What this node's subtree wants: its own interest and its children's."""
        for gone in [p for p in tree.child_summaries if p not in tree.children]:
            # Kept a while: a child adopted back without a JOIN (it still took us
            # for its parent) is pruned for as before, its window not sent whole.
            tree.former_summaries[gone] = tree.child_summaries.pop(gone)
            tree.former_summaries.move_to_end(gone)
            while len(tree.former_summaries) > _FORMER_KEPT:
                tree.former_summaries.popitem(last=False)
            tree.child_wants.pop(gone, None)
        filters = self._own_interest(tree)
        for child in tree.children:
            filters.extend(tree.child_summaries.get(child, (MATCH_ALL,)))
        return merge(filters, self.config.summary_bound)

    def subtree_summary(self, topic_cid: CID) -> tuple[str, ...]:
        """The canonical texts of this node's subtree summary of a topic (for tests,
        status pages): what it tells (or would tell) its parent."""
        tree = self._tree_for(topic_cid)
        return tuple(render_filter(f) for f in self._subtree_summary(tree))

    def child_summaries(self, topic_cid: CID) -> dict[str, tuple[str, ...]]:
        """Each child's subtree summary as this node holds it and prunes by (canonical
        texts; ``("*",)`` for a child that sent none): for status pages and tests."""
        tree = self._tree_for(topic_cid)
        return {
            child: tuple(render_filter(f) for f in tree.child_summaries.get(child, (MATCH_ALL,)))
            for child in tree.children
        }

    def _summary_changed(self, now: float, tree: Tree) -> None:
        """Something the summary depends on changed: send SUMMARY soon (rate-limited)."""
        if not self.config.tree_filters or tree.parent is None:
            return
        due = max(now, tree.summary_at + self.config.summary_interval)
        if tree.summary_due is None or due < tree.summary_due:  # (a repeat is later)
            tree.summary_due = due

    def _summary_timer(self, now: float, tree: Tree) -> None:
        tree.summary_due = None
        if tree.parent is None or not tree.joined:
            return  # the next JOIN carries it
        texts = self._note_summary_sent(tree)
        if texts is not None:
            tree.summary_repeats = SUMMARY_REPEATS
        elif tree.summary_repeats > 0 and tree.summary_sent is not None:
            tree.summary_repeats -= 1  # the same again, in case it was lost
            texts = tree.summary_sent
        else:
            return
        tree.summary_at = now
        self._send(now, tree.parent, Summary(topic=tree.key, filters=texts), tree.name)
        if tree.summary_repeats > 0:
            sent = SUMMARY_REPEATS - tree.summary_repeats  # 0, 1, 2
            tree.summary_due = now + self.config.summary_interval * 4 ** (sent + 1)

    def _join_summary(self, tree: Tree) -> tuple[str, ...] | None:
        """JOIN's ``summary`` (None: ``tree_filters`` off, the older JOIN)."""
        if not self.config.tree_filters:
            return None
        self._note_summary_sent(tree)
        tree.summary_repeats = 0  # a JOIN is answered (JOIN_ACK), and sent again if not
        return tree.summary_sent

    def _note_summary_sent(self, tree: Tree) -> tuple[str, ...] | None:
        """The summary the parent is now told (its texts; None: unchanged). From then
        on the parent prunes by it, so this node wants only what it matches."""
        filters = self._subtree_summary(tree)
        texts = tuple(render_filter(f) for f in filters)
        if texts == tree.summary_sent:
            return None
        tree.summary_sent = texts
        tree.summary_filters = filters
        return texts

    def _on_summary(self, now: float, peer: str, rpc: Summary) -> None:
        tree = self._trees.get(rpc.topic)
        if tree is None or peer not in tree.children:
            self._drop(now, "not_child", peer=peer, topic=tree.name if tree else None)
            return
        parsed = parse_summary(rpc.filters)  # the codec checked them
        if tree.child_wants.get(peer) == parsed:
            return  # a repeat of what it told us (SUMMARY_REPEATS)
        self._set_child_summary(now, tree, peer, rpc.filters, parsed=parsed)

    def _set_child_summary(
        self,
        now: float,
        tree: Tree,
        peer: str,
        texts: tuple[str, ...] | None,
        *,
        parsed: tuple[Filter, ...] | None = None,
    ) -> None:
        """A child's summary (from its JOIN or a SUMMARY; None: it wants everything),
        kept within ``summary_bound`` filters. ``parsed``: ``texts`` parsed already."""
        if texts is None:
            tree.child_summaries.pop(peer, None)
            tree.child_wants.pop(peer, None)
        else:
            if parsed is None:  # the codec checked the texts: canonical filters
                parsed = parse_summary(texts)
            tree.child_summaries[peer] = merge(parsed, self.config.summary_bound)
            tree.child_wants[peer] = parsed
        edge = tree.edges.get(peer)
        if edge is not None and edge.skipped:
            # What was pruned by the old summary but the new one matches is owed
            # to the child again (HEADS delta, DIGEST windows): a child whose
            # subtree wants more (a new subscriber below, a wider filter, a reader
            # below a filtered holder) would otherwise never get it.
            summary = tree.child_summaries.get(peer)
            for c in list(edge.skipped):
                entry = self._events.get(c)
                if (
                    summary is None
                    or MATCH_ALL in summary
                    or (entry is not None and matches_any(summary, entry[1].attributes))
                ):
                    edge.skipped.discard(c)
                    edge.known.discard(c)
                    edge.delta_seq = -1
        self._summary_changed(now, tree)
        self._members_changed(now, tree)  # a root lists its children's summaries

    def _readopted(self, tree: Tree, peer: str) -> None:
        """``peer`` became our child again without a JOIN (no summary sent): what it
        told us when it was our child holds until its next SUMMARY."""
        if peer not in tree.child_summaries:
            former = tree.former_summaries.pop(peer, None)
            if former is not None:
                tree.child_summaries[peer] = former

    def _count_forward(self, tree: Tree, peer: str, ev: EventDescriptor) -> None:
        """An EVENT sent to ``peer``: count it if it went down to a child."""
        if self.config.tree_filters and peer in tree.children:
            self._forward_counts["down"] += 1

    def _count_received(self, tree: Tree, sender: str | None, ev: EventDescriptor) -> None:
        """A new event from our parent or its publisher's first hop: a false positive
        if nobody in this subtree wants it, by the filters as they were before any
        merge (this node's own interest, each child's summary as it sent it)."""
        if not self.config.tree_filters or sender is None or sender in tree.children:
            return
        if tree.summary_filters is None or MATCH_ALL in tree.summary_filters:
            return  # we asked for everything
        if matches_any(self._own_interest(tree), ev.attributes):
            return
        for summary in tree.child_wants.values():
            if matches_any(summary, ev.attributes):
                return
        self._forward_counts["false_positive"] += 1

    @property
    def filter_forwards(self) -> dict[str, int]:
        """(tree_filters) EVENTs sent down to children (``down``), of those the ones
        into a subtree whose summary did not match (``false_positive``), and the sends
        pruned: to a child or a member whose summary did not match (``pruned``)."""
        return dict(self._forward_counts)
