"""Acknowledgement levels: a publisher's outbox, and holders that say STORED.

Theory of operation
-------------------
A publish may ask for ``ack`` other nodes to *hold* its event — stored in their
Kubo and pinned, as part of the topic's retained history — before its answer
(docs/http-api.md "Publish"). The event is disseminated exactly as without it, in
the same call (§5 "Forward"): only the EVENTs this node sends of its own event,
while it waits, carry ``ack: true``. The wait runs beside dissemination.

Publisher (the *outbox*)::

    publish(ack=N)      -> entry {tree, needed N, holders {}, due now + ack_retry}
    STORED from peer p  -> holders += p (if the entry exists); N reached: entry gone
    timer at due        -> EVENT (ack) again to every tree neighbour and member of the
                           root's list not among the holders; due += interval, the
                           interval doubling up to ack_retry_max
    resume_outbox(...)  -> an entry again after a restart (the driver persisted it)

Holder::

    EVENT ack from its publisher, the event retained here
                        -> held already: STORED at once; else remembered (bounded)
                           and its block stored ``urgent`` (no batching wait)
    blocks_held(cids)   -> the driver says these are stored and pinned: STORED to each
                           publisher that asked

A holder answers only the event's own publisher (the peer that sent the EVENT),
only for an event it retains (a relay that keeps no history is no holder), and
once per ask. Nothing is answered for an event this node does not hold.

:class:`AckBook` owns this state (the outbox, the asks a holder remembers, what the
driver said is held, the holders of events that reached their level) and touches
no other part's; the node asks it and carries out what it answers: the publisher's
side in :mod:`._publish` (the outbox, STORED received, offers again), the holder's in
:mod:`._dissemination` (EVENT with ``ack``, ``blocks_held``), each in a section
"acknowledgement levels".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pulsarcast_ipfs.core._cid import CID

from ._descriptors import EventDescriptor
from ._errors import LocalProtocolError
from ._tree import LRU, Tree

__all__ = ["MAX_ACK", "AckBook", "OutboxEntry"]

MAX_ACK = 64
"""The most holders a publish may ask for (the fan-out of a publisher's first hop)."""
_ASKED_MAX = 4096
"""Events a holder remembers that their publisher waits for (oldest forgotten)."""


@dataclass(slots=True, kw_only=True)
class OutboxEntry:
    """An event of this node waiting for ``needed`` holders."""

    tree: CID
    event: EventDescriptor
    """Kept here: the node's event cache may drop it while it waits."""
    needed: int
    holders: dict[str, None] = field(default_factory=dict)
    due: float
    interval: float
    asked: dict[str, None] = field(default_factory=dict)
    """The peers asked so far (EVENT with ``ack``)."""
    ask_all: bool = False
    """An offer again: every peer it goes to is asked (the first send asks
    ``needed + 1`` of them: :meth:`AckBook.ask_whom`)."""


class AckBook:
    """Acknowledgement levels of one node: its outbox as a publisher, its asks as a
    holder (see the module docstring)."""

    def __init__(self, *, retry: float, retry_max: float, outbox_size: int, held: int) -> None:
        self._retry = retry
        self._retry_max = retry_max
        self._outbox_size = outbox_size
        self._outbox: dict[CID, OutboxEntry] = {}
        self._asked = LRU(_ASKED_MAX)  # event -> (publisher, tree key): waits for our STORED
        self._held = LRU(held)  # events this node holds (stored and pinned), as the driver said
        self._acked = LRU(_ASKED_MAX)  # event -> holders, once it reached its level

    # ------------------------------------------------------------------ publisher

    def check(self, ack: int) -> int:
        """``ack`` of a publish, validated (0: local); refused while the outbox is full."""
        if isinstance(ack, bool) or not isinstance(ack, int) or not 0 <= ack <= MAX_ACK:
            raise LocalProtocolError(f"ack must be an integer from 0 (local) to {MAX_ACK}")
        if ack and len(self._outbox) >= self._outbox_size:
            raise LocalProtocolError(
                f"the outbox holds {len(self._outbox)} events waiting for holders: "
                "publish with ack=local or wait"
            )
        return ack

    def add(self, now: float, tree: CID, ev: EventDescriptor, needed: int) -> None:
        """This node's event ``ev`` waits for ``needed`` holders (before its sends:
        they carry ``ack``)."""
        self._outbox[ev.cid] = OutboxEntry(
            tree=tree, event=ev, needed=needed, due=now + self._retry, interval=self._retry
        )

    def resume(self, now: float, tree: CID, ev: EventDescriptor, needed: int) -> None:
        """After a restart: ``ev`` waits again, offered at once."""
        self.add(now, tree, ev, needed)
        self._outbox[ev.cid].due = now

    @property
    def waiting(self) -> bool:
        """Whether any event waits for holders."""
        return bool(self._outbox)

    def waits(self, cid: CID) -> bool:
        return cid in self._outbox

    def ask_whom(
        self,
        tree: Tree,
        cid: CID,
        targets: list[str],
        direct: Mapping[str, tuple[CID, ...] | None],
    ) -> frozenset[str]:
        """Of the peers an EVENT of this node's waiting event goes to, those asked to
        answer STORED: on the first send ``needed + 1`` of them (the parent first, then
        the members of the root's list in its order, then children), so that holders
        store and pin urgently only what a publisher waits for; on an offer again,
        all."""
        entry = self._outbox[cid]
        going = [*targets, *direct]
        if entry.ask_all:
            chosen = going
        else:
            order = {p: i for i, p in enumerate(tree.members)}
            parent = tree.parent

            def rank(p: str) -> tuple[int, int]:
                return (0 if p == parent else 1, order.get(p, len(order)))

            left = entry.needed + 1 - len(entry.asked)
            chosen = sorted((p for p in going if p not in entry.asked), key=rank)[: max(0, left)]
        entry.asked.update(dict.fromkeys(chosen))
        return frozenset(chosen)

    def stored(self, peer: str, tree: CID, event: CID) -> None:
        """STORED from ``peer``: a holder more; the event leaves the outbox at its level."""
        entry = self._outbox.get(event)
        if entry is None or entry.tree != tree or peer in entry.holders:
            return
        entry.holders[peer] = None
        if len(entry.holders) >= entry.needed:
            del self._outbox[event]
            self._acked.put(event, tuple(entry.holders))

    def due(self) -> float | None:
        """When the next waiting event is offered again."""
        return min((e.due for e in self._outbox.values()), default=None)

    def take_due(self, now: float) -> list[OutboxEntry]:
        """The waiting events due at ``now``, each rescheduled (the interval doubling
        up to ``retry_max``) and from now on asking every peer it goes to."""
        out = []
        for entry in self._outbox.values():
            if entry.due > now:
                continue
            entry.interval = min(self._retry_max, entry.interval * 2)
            entry.due = now + entry.interval
            entry.ask_all = True
            out.append(entry)
        return out

    def holders(self, cid: CID) -> tuple[str, ...] | None:
        """The peers that said they hold ``cid`` while it waits; ``None`` otherwise."""
        entry = self._outbox.get(cid)
        return tuple(entry.holders) if entry is not None else None

    def acknowledged(self, cid: CID) -> tuple[str, ...] | None:
        """The holders of ``cid`` once it reached its level (the last
        :data:`_ASKED_MAX` such events)."""
        value: tuple[str, ...] | None = self._acked.get(cid)
        return value

    @property
    def outbox(self) -> dict[CID, tuple[int, tuple[str, ...]]]:
        """The events waiting for holders: CID -> (needed, holders so far)."""
        return {c: (e.needed, tuple(e.holders)) for c, e in self._outbox.items()}

    # ------------------------------------------------------------------ holder

    def ask(self, cid: CID, publisher: str, tree: CID) -> None:
        """``publisher`` waits for this node's STORED of ``cid``."""
        self._asked.put(cid, (publisher, tree))

    def asked(self, cid: CID) -> bool:
        return cid in self._asked

    def forget(self, cid: CID) -> None:
        self._asked.pop(cid)

    def is_held(self, cid: CID) -> bool:
        return cid in self._held

    def urgent(self, cid: CID) -> bool:
        """Whether a publisher waits for this block: stored and pinned at once."""
        return bool(self._asked) and cid in self._asked

    def held(self, cids: Iterable[CID]) -> list[tuple[str, CID, CID]]:
        """The driver: these blocks are stored and pinned here. The STOREDs owed, as
        (publisher, tree, event)."""
        cids = list(cids)
        if not all(isinstance(cid, CID) for cid in cids):
            raise LocalProtocolError("blocks_held takes CIDs")
        owed = []
        for cid in cids:
            self._held.put(cid)
            asked = self._asked.pop(cid)
            if asked is not None:
                owed.append((asked[0], asked[1], cid))
        return owed
