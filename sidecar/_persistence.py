"""When ``state.json`` is saved, and with what (docs/sidecar.md).

:class:`Persistence` owns the "something changed" flag. A change (a delivery, a
consumer's cursor, a subscription dropped at resume) marks the state dirty and the
driver's housekeeping saves it within 2 s, the write (two ``fsync``) in a worker
thread (:meth:`Persistence.save_in_thread`); a subscription or a topic created is
saved at once (:meth:`Persistence.save`). Before each save the state is brought up
to date: the consumers' cursors, and each subscribed or created topic's heads (the
first 16), from the core.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from pulsarcast_ipfs.core import TopicState, cid_from_str, cid_str
from pulsarcast_ipfs.core._cid import CID

from ._state import StateStore

__all__ = ["HEADS_KEPT", "Persistence"]

HEADS_KEPT = 16
"""Heads per topic saved in ``state.json``."""


class Persistence:
    """Saves one driver's ``state.json`` when it changed."""

    def __init__(
        self,
        state: StateStore,
        *,
        topic_state: Callable[[CID], TopicState | None],
        save_consumers: Callable[[], None],
    ) -> None:
        """``topic_state`` reads a topic's heads from the core; ``save_consumers``
        writes the consumers' cursors into the state before each save."""
        self._state = state
        self._topic_state = topic_state
        self._save_consumers = save_consumers
        self.dirty = False
        """Something of ``state.json`` changed since the last save."""

    def mark_dirty(self) -> None:
        """Something of ``state.json`` changed: saved at the next housekeeping tick."""
        self.dirty = True

    def save(self) -> None:
        """Save ``state.json`` now, with fresh heads and the consumers' cursors
        (raises :class:`._state.StateError`)."""
        self._fresh()
        self._state.save()
        self.dirty = False

    async def save_in_thread(self) -> None:
        """:meth:`save`, the write (two ``fsync``) in a worker thread: a loaded disk
        stalled the event loop of every sidecar every 2 s (py-spy)."""
        self._fresh()
        snapshot = self._state.snapshot()
        self.dirty = False
        await anyio.to_thread.run_sync(self._state.write, *snapshot)

    def _fresh(self) -> None:
        self._save_consumers()
        st = self._state.state
        heads: dict[str, list[str]] = {}
        for root in list(st.subscriptions) + list(st.created):
            try:
                topic = self._topic_state(cid_from_str(root))
            except ValueError:
                continue
            if topic is not None:
                heads[root] = [cid_str(c) for c in topic.heads[:HEADS_KEPT]]
        st.heads = heads
