"""Filters in the tree, first part (issue 15 point 3): subtree summaries.

Theory of operation
-------------------
With ``NodeConfig.tree_filters`` each node tells its parent, per topic, what its
*subtree* wants: the disjunction of its own interest and its children's summaries,
merged (:func:`~._filters.merge`: wider, never narrower) down to
``summary_bound`` filters. Its own interest is ``[filter or *]`` when it is
subscribed, ``[*]`` when it keeps the history without subscribing (the author, a
reader) or follows a meta topic, and nothing for a pure relay. The summary goes up

- in every JOIN (``summary``; a re-join after a repair carries it, so a repaired
  tree knows it again at once), and
- in a SUMMARY message when it changes (subscribe, unsubscribe, a filter replaced, a
  child's summary changed, a child gone), at most every ``summary_interval`` per
  tree: changes in between are coalesced into one message. SUMMARY is rate-limited
  with JOIN (the same token bucket per peer, :mod:`._admission`).

A parent keeps each child's summary, merged down to ``summary_bound`` filters
whatever the child sent (at most ``MAX_SUMMARY`` on the wire); a child without one
(an older node, or ``tree_filters`` off) wants everything. A SUMMARY from a peer
that is not a child is dropped (``not_child``).

What it is used for so far: counting **false-positive forwards** — an EVENT sent
down to a child whose summary does not match it: nobody in that subtree wanted it
(:attr:`filter_forwards`). Events still go to every neighbour: pruning on the
summaries needs causal delivery, gap repair, anti-entropy and history completeness
to stop waiting for (and fetching) the events a subtree does not want
(docs/protocol-notes.md "Filters in the tree" lists what is left).

(:class:`Summaries` is a part of :class:`~._node.PulsarcastNode`: a mixin over
:class:`~._base.NodeBase`, which declares the state and methods they share.)
"""

from __future__ import annotations

from multiformats import CID

from ._base import NodeBase
from ._codec import Summary
from ._descriptors import EventDescriptor
from ._filters import MATCH_ALL, Filter, matches_any, merge, parse_filter, render_filter
from ._tree import Tree

__all__ = ["Summaries"]


class Summaries(NodeBase):
    """Subtree summaries (a part of :class:`~._node.PulsarcastNode`)."""

    def _own_interest(self, tree: Tree) -> list[Filter]:
        if tree.subscribed:
            return [tree.filter if tree.filter is not None else MATCH_ALL]
        if tree.history is not None or tree.followers:
            return [MATCH_ALL]  # keeps the whole history (author, reader) or a meta topic
        return []

    def _subtree_summary(self, tree: Tree) -> tuple[Filter, ...]:
        """What this node's subtree wants: its own interest and its children's."""
        for gone in [p for p in tree.child_summaries if p not in tree.children]:
            del tree.child_summaries[gone]
        filters = self._own_interest(tree)
        for child in tree.children:
            filters.extend(tree.child_summaries.get(child, (MATCH_ALL,)))
        return merge(filters, self.config.summary_bound)

    def subtree_summary(self, topic_cid: CID) -> tuple[str, ...]:
        """The canonical texts of this node's subtree summary of a topic (for tests,
        status pages): what it tells (or would tell) its parent."""
        tree = self._tree_for(topic_cid)
        return tuple(render_filter(f) for f in self._subtree_summary(tree))

    def _summary_changed(self, now: float, tree: Tree) -> None:
        """Something the summary depends on changed: send SUMMARY soon (rate-limited)."""
        if not self.config.tree_filters or tree.parent is None or tree.summary_due is not None:
            return
        tree.summary_due = max(now, tree.summary_at + self.config.summary_interval)

    def _summary_timer(self, now: float, tree: Tree) -> None:
        tree.summary_due = None
        if tree.parent is None or not tree.joined:
            return  # the next JOIN carries it
        texts = self.subtree_summary(tree.key)
        if texts == tree.summary_sent:
            return
        tree.summary_sent = texts
        tree.summary_at = now
        self._send(now, tree.parent, Summary(topic=tree.key, filters=texts), tree.name)

    def _join_summary(self, tree: Tree) -> tuple[str, ...] | None:
        """JOIN's ``summary`` (None: ``tree_filters`` off, the older JOIN)."""
        if not self.config.tree_filters:
            return None
        texts = self.subtree_summary(tree.key)
        tree.summary_sent = texts
        return texts

    def _on_summary(self, now: float, peer: str, rpc: Summary) -> None:
        tree = self._trees.get(rpc.topic)
        if tree is None or peer not in tree.children:
            self._drop(now, "not_child", peer=peer, topic=tree.name if tree else None)
            return
        self._set_child_summary(now, tree, peer, rpc.filters)

    def _set_child_summary(
        self, now: float, tree: Tree, peer: str, texts: tuple[str, ...] | None
    ) -> None:
        """A child's summary (from its JOIN or a SUMMARY; None: it wants everything),
        kept within ``summary_bound`` filters."""
        if texts is None:
            tree.child_summaries.pop(peer, None)
        else:
            # the codec checked the texts: canonical filters
            parsed = [parse_filter(t) for t in texts]
            tree.child_summaries[peer] = merge(parsed, self.config.summary_bound)
        self._summary_changed(now, tree)

    def _count_forward(self, tree: Tree, peer: str, ev: EventDescriptor) -> None:
        """An EVENT sent to ``peer``: count it if it went down to a child, and as a
        false positive if that child's subtree summary does not match it."""
        if not self.config.tree_filters or peer not in tree.children:
            return
        self._forward_counts["down"] += 1
        summary = tree.child_summaries.get(peer)
        if summary is not None and not matches_any(summary, ev.attributes):
            self._forward_counts["false_positive"] += 1

    @property
    def filter_forwards(self) -> dict[str, int]:
        """(tree_filters) EVENTs sent down to children (``down``), and of those the
        ones into a subtree whose summary did not match (``false_positive``)."""
        return dict(self._forward_counts)
