"""Pages of a topic's retained history (§5 "History and eventual delivery").

The history (:mod:`._history`) is an index of the retained events, not the events:
a page's descriptors come from the node's bounded event cache, else from the
driver's block store (``read``); what neither holds is asked of the driver with
:class:`~._errors.BodiesNeeded`, which it answers by reading the blocks and asking
for the page again (docs/sidecar.md "Retention").

(:class:`HistoryPages` is a part of :class:`~._node.PulsarcastNode`: a mixin over
:class:`~._base.NodeBase`.)
"""

from __future__ import annotations

from collections.abc import Callable

from pulsarcast_ipfs.core._cid import CID

from ._base import NodeBase
from ._descriptors import EventDescriptor
from ._errors import BodiesNeeded, LocalProtocolError
from ._filters import Filter
from ._history import HistoryKey, HistoryOrder, TopicHistory
from ._io import HistoryPage

__all__ = ["HistoryPages"]


class HistoryPages(NodeBase):
    """History pages (a part of :class:`~._node.PulsarcastNode`)."""

    def history(
        self,
        topic_cid: CID,
        *,
        order: HistoryOrder = "newest",
        after: CID | EventDescriptor | None = None,
        limit: int = 50,
        where: Filter | None = None,
        read: Callable[[CID], EventDescriptor | None] | None = None,
    ) -> HistoryPage:
        """§5 History: one page of the topic's retained history in the history order
        (``(clock, CID bytes)``; ``newest`` first or ``oldest`` first), strictly after
        the cursor ``after`` (an event CID this node knows, or the cursor event's
        descriptor, e.g. fetched by the driver). A node that keeps no history of the
        topic (a relay) raises :class:`LocalProtocolError`: call :meth:`read` first.

        ``where``: only the events the filter matches. The page's ``next`` is then the
        last event *examined* (it may not match, and the page may be short or even
        empty with a ``next``: at most :data:`~._history.MAX_SCAN` events are examined
        per page); the next page starts strictly after it, so no event is listed
        twice or skipped.

        The history holds an index, not the events: a page's descriptors come from the
        node's bounded event cache, else from ``read`` (the driver's block store, by
        CID; ``None``: not held). Any that neither has raise :class:`BodiesNeeded`
        with their CIDs: the driver reads them and asks again with ``read``.
        """
        if where is not None and not isinstance(where, Filter):
            raise LocalProtocolError("where must be a Filter (parse_filter) or None")
        tree = self._tree_for(topic_cid)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            raise LocalProtocolError("limit must be a positive integer")
        if order not in ("newest", "oldest"):
            raise LocalProtocolError(f"order must be 'newest' or 'oldest', not {order!r}")
        h = tree.history
        if h is None:
            raise LocalProtocolError(
                f"this node keeps no history of topic {tree.name!r}: subscribe or read it"
            )
        key: HistoryKey | None = None
        if isinstance(after, EventDescriptor):
            if self._version_of.get(after.topic) not in (None, tree.key):
                raise LocalProtocolError(f"cursor event {after.cid} belongs to another topic")
            key = after.order_key
        elif after is not None:
            entry = self._known_event(after)
            if entry is None:
                raise LocalProtocolError(f"unknown cursor event {after}")
            if entry[0] != tree.key:
                raise LocalProtocolError(f"cursor event {after} belongs to another topic")
            key = entry[1].order_key
        if where is None:
            cids, more = h.page(order=order, after=key, limit=limit)
            nxt = cids[-1] if cids and more else None
        else:
            cids, nxt = h.filtered_page(order=order, after=key, limit=limit, where=where)
        events: list[tuple[CID, EventDescriptor]] = []
        unread: list[CID] = []
        for c in cids:
            entry = self._events.get(c)
            ev = entry[1] if entry is not None else read(c) if read is not None else None
            if ev is None:
                unread.append(c)
            else:
                events.append((c, ev))
        if unread:
            raise BodiesNeeded(tuple(unread))
        return _page_of(h, tuple(events), nxt)

    def history_summary(self, topic_cid: CID) -> HistoryPage:
        """The topic's history as :meth:`history` describes it (complete, missing,
        heads, retained), without events: nothing to read from the block store."""
        tree = self._tree_for(topic_cid)
        h = tree.history
        if h is None:
            raise LocalProtocolError(
                f"this node keeps no history of topic {tree.name!r}: subscribe or read it"
            )
        return _page_of(h, (), None)


def _page_of(
    h: TopicHistory, events: tuple[tuple[CID, EventDescriptor], ...], nxt: CID | None
) -> HistoryPage:
    return HistoryPage(
        events=events,
        next=nxt,
        complete=h.complete,
        missing=tuple(sorted(h.missing, key=bytes)),
        heads=tuple(sorted(h.heads, key=lambda c: h.key_of(c) or (0, b""), reverse=True)),
        retained=len(h),
    )
