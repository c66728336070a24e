"""Deliveries to the application: each event once, recorded, to every live stream.

The core emits ``Deliver``. :class:`Deliveries` suppresses an event the delivery log
already holds (a restart's gap repair finds those again), appends the event to the
log (``StateStore.append_delivery``: exactly once to the application needs the log,
so a log that cannot be written stops the sidecar rather than deliver unrecorded),
marks the state for saving and hands the logged delivery to every live stream
(:class:`Listener`, ``GET /v1/events``).
"""

from __future__ import annotations

import base64
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from pulsarcast_ipfs.core import Deliver, EventDescriptor, cid_str
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.testing._misbehave import Misbehaviour

from ._persistence import Persistence
from ._prometheus import SidecarStats
from ._state import StateError, StateStore

__all__ = ["Deliveries", "Listener", "event_json"]

log = logging.getLogger("pulsarcast.sidecar")


def event_json(cid: CID | str, ev: EventDescriptor) -> dict[str, Any]:
    """The Event object of docs/http-api.md."""
    return {
        "cid": str(cid) if isinstance(cid, str) else cid_str(cid),
        "topic": cid_str(ev.topic),
        "author": ev.author,
        "publisher": ev.publisher,
        "parents": [cid_str(p) for p in ev.parents],
        "clock": ev.clock,
        "created": ev.created,
        "protocol_version": ev.protocol_version,
        "payload": base64.b64encode(ev.payload).decode("ascii"),
        "attributes": dict(ev.attributes) if ev.attributes is not None else {},
    }


@dataclass(slots=True, eq=False)
class Listener:
    """One live delivery stream's inbox."""

    items: deque[dict[str, Any]] = field(default_factory=deque)
    wake: anyio.Event = field(default_factory=anyio.Event)


class Deliveries:
    """The delivery log's writer and the live delivery streams of one driver."""

    def __init__(
        self,
        *,
        state: StateStore,
        stats: SidecarStats,
        persistence: Persistence,
        fail: Callable[[str], None],
        misbehaviour: Misbehaviour | None = None,
    ) -> None:
        """``fail(why)`` stops the sidecar (the log cannot be written);
        ``misbehaviour`` (test only, ``--misbehave lose=N``) drops the N-th delivery."""
        self._state = state
        self._stats = stats
        self._persistence = persistence
        self._fail = fail
        self._misbehaviour = misbehaviour
        self._seen = 0
        """Deliveries handled since start (``--misbehave lose=N`` drops the N-th)."""
        self._listeners: set[Listener] = set()
        self.duplicates_suppressed = 0
        """Deliveries found again by repair after a restart, not delivered twice."""

    def deliver(self, out: Deliver, *, topic_name: str, now: float, stopped: bool) -> None:
        """Deliver ``out`` (of the topic called ``topic_name``) at ``now``; nothing
        once the sidecar has ``stopped`` on its own."""
        cid = cid_str(out.event_cid)
        if cid in self._state.delivered:
            # Gap repair after a restart re-finds events delivered before it.
            self.duplicates_suppressed += 1
            return
        root = cid_str(out.topic_cid)
        if out.recovered:
            self._stats.repaired(out.event_cid, out.topic_cid, topic_name)
        else:
            self._stats.forget_fetch(out.event_cid)
        obj = event_json(cid, out.event)
        obj.update(
            topic_root=root, topic_name=topic_name, recovered=out.recovered, delivered_at=now
        )
        if stopped:
            return
        if self._misbehaviour is not None and self._misbehaviour.kind == "lose":
            self._seen += 1
            if self._seen == self._misbehaviour.nth:  # test only: a planted loss
                log.warning("dropping delivery %s on purpose (test only: lose)", cid)
                return
        try:
            obj = self._state.append_delivery(obj)
        except StateError as exc:
            # Exactly-once to the app needs the log: stop rather than deliver unrecorded.
            # The event is not marked delivered, so a restart's gap repair delivers it.
            self._fail(str(exc))
            return
        self._persistence.mark_dirty()
        for lst in self._listeners:
            lst.items.append(obj)
            lst.wake.set()

    def listen(self) -> Listener:
        """A new live stream's inbox: every delivery from now on."""
        lst = Listener()
        self._listeners.add(lst)
        return lst

    def unlisten(self, lst: Listener) -> None:
        self._listeners.discard(lst)

    def wake_all(self) -> None:
        """Wake every delivery stream (a consumer closed, or the sidecar stops)."""
        for lst in self._listeners:
            lst.wake.set()
