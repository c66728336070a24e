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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pulsarcast_ipfs.core._cid import CID

from ._base import NodeBase
from ._codec import Event, Stored, encode_frame
from ._descriptors import EventDescriptor, decode_cached
from ._errors import DescriptorError, LocalProtocolError
from ._io import StoreBlock
from ._tree import Tree

__all__ = ["MAX_ACK", "Acknowledgements", "OutboxEntry"]

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
    ``needed + 1`` of them: :meth:`Acknowledgements._ask_whom`)."""


class Acknowledgements(NodeBase):
    """Acknowledgement levels (a part of :class:`~._node.PulsarcastNode`)."""

    # ------------------------------------------------------------------ publisher

    def _outbox_add(self, now: float, tree: Tree, ev: EventDescriptor, needed: int) -> None:
        retry = self.config.ack_retry
        self._outbox[ev.cid] = OutboxEntry(
            tree=tree.key, event=ev, needed=needed, due=now + retry, interval=retry
        )

    def _ask_whom(
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
        all. At least one peer is always asked."""
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

    def _check_ack(self, ack: int) -> int:
        if isinstance(ack, bool) or not isinstance(ack, int) or not 0 <= ack <= MAX_ACK:
            raise LocalProtocolError(f"ack must be an integer from 0 (local) to {MAX_ACK}")
        if ack and len(self._outbox) >= self.config.outbox_size:
            raise LocalProtocolError(
                f"the outbox holds {len(self._outbox)} events waiting for holders: "
                "publish with ack=local or wait"
            )
        return ack

    def holders(self, cid: CID) -> tuple[str, ...] | None:
        """The peers that said they hold this node's event ``cid`` (in the order they
        did), while it waits in the outbox; ``None`` once it has enough (or was never
        there): see :meth:`acknowledged`."""
        entry = self._outbox.get(cid)
        return tuple(entry.holders) if entry is not None else None

    def acknowledged(self, cid: CID) -> tuple[str, ...] | None:
        """The holders of ``cid`` once it reached its level (``None``: not yet, or
        unknown). Kept for the last :data:`_ASKED_MAX` events that reached it."""
        value: tuple[str, ...] | None = self._acked.get(cid)
        return value

    @property
    def outbox(self) -> dict[CID, tuple[int, tuple[str, ...]]]:
        """The events waiting for holders: CID -> (needed, holders so far)."""
        return {c: (e.needed, tuple(e.holders)) for c, e in self._outbox.items()}

    def resume_outbox(self, now: float, topic_cid: CID, event: bytes, *, needed: int) -> CID:
        """After a restart: this node's event ``event`` (its block) of topic
        ``topic_cid`` waits for ``needed`` holders again; offered at once. Its CID."""
        tree = self._tree_for(topic_cid)
        needed = self._check_ack(needed)
        try:
            ev = decode_cached(EventDescriptor, event)
        except DescriptorError as exc:
            raise LocalProtocolError(f"not an event block: {exc}") from exc
        if ev.publisher != self.peer_id:
            raise LocalProtocolError("an event another node published")
        cid = ev.cid
        if cid not in self._events:
            self._seen.put(cid)
            self._events.put(cid, (tree.key, ev))
            self._note_recent(tree, cid, ev)
            if not self._retain(now, tree, cid, ev):
                # (its put may not have happened before the crash)
                self._emit(StoreBlock(cid=cid, data=ev.encode(), own=True))
        if needed:
            self._outbox_add(now, tree, ev, needed)
            self._outbox[cid].due = now
        return cid

    def _on_stored(self, now: float, peer: str, rpc: Stored) -> None:
        entry = self._outbox.get(rpc.event)
        if entry is None or entry.tree != rpc.topic or peer in entry.holders:
            return
        entry.holders[peer] = None
        if len(entry.holders) >= entry.needed:
            del self._outbox[rpc.event]
            self._acked.put(rpc.event, tuple(entry.holders))

    def _ack_due(self) -> float | None:
        best: float | None = None
        for entry in self._outbox.values():
            if best is None or entry.due < best:
                best = entry.due
        return best

    def _offer_again(self, now: float) -> None:
        """Timer: each outbox event due is offered again to who may hold it: the tree
        neighbours and the members of the root's list that have not said so."""
        cap = self.config.ack_retry_max
        for cid, entry in list(self._outbox.items()):
            if entry.due > now:
                continue
            entry.interval = min(cap, entry.interval * 2)
            entry.due = now + entry.interval
            entry.ask_all = True
            tree = self._trees.get(entry.tree)
            if tree is None:
                continue
            if cid not in self._events:
                self._events.put(cid, (tree.key, entry.event))
            skip = set(entry.holders)
            neighbours = set(tree.neighbours())
            if tree.members_epoch is None:
                self._forward(now, tree, cid, skip=skip)
                continue
            direct: dict[str, tuple[CID, ...] | None] = {
                m: None
                for m in tree.members
                if m != self.peer_id and m not in skip and m not in neighbours
            }
            self._forward(now, tree, cid, skip=skip, direct=direct, pushed=tree.members_epoch)

    # ------------------------------------------------------------------ holder

    def _ack_before(self, peer: str, tree: Tree, rpc: Event, ev: EventDescriptor) -> bool:
        """An EVENT with ``ack``: whether its publisher itself asks (a relay forwards no
        ``ack``); a new event's block is then stored ``urgent``."""
        if rpc.ack is not True or ev.publisher != peer:
            return False
        if ev.cid not in self._seen:
            self._asked.put(ev.cid, (peer, tree.key))
        return True

    def _ack_after(self, now: float, peer: str, tree: Tree, cid: CID) -> None:
        """...and once it is accepted (or a duplicate): answer when this node holds it."""
        if tree.history is None or cid not in tree.history:
            self._asked.pop(cid)  # not retained here: no holder
            return
        if cid in self._held:
            self._asked.pop(cid)
            self._send(now, peer, Stored(topic=tree.key, event=cid), tree.name)
            return
        if cid not in self._asked:
            # Held before this node knew (a restart): the driver says so again.
            ev = tree.history.get(cid)
            if ev is not None:
                self._emit(
                    StoreBlock(cid=cid, data=ev.encode(), own=False, retain=True, urgent=True)
                )
        self._asked.put(cid, (peer, tree.key))

    def blocks_held(self, now: float, cids: list[CID] | tuple[CID, ...]) -> None:
        """The driver: these blocks are stored and pinned here (retained events)."""
        for cid in cids:
            if not isinstance(cid, CID):
                raise LocalProtocolError("blocks_held takes CIDs")
            self._held.put(cid)
            asked = self._asked.pop(cid)
            if asked is None:
                continue
            peer, key = asked
            tree = self._trees.get(key)
            rpc = Stored(topic=key, event=cid)
            self._send(now, peer, rpc, tree.name if tree is not None else None, encode_frame(rpc))

    def _urgent_store(self, cid: CID) -> bool:
        return cid in self._asked
