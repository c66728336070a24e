"""Publishing: Algorithm 3 (publish here) and the start of Algorithm 4.

An allowed publisher links its event (LAST_SEEN heads or a CUSTOM parent), signs
it if signatures are on, stores, forwards and delivers it in the same call; a
node that may not publish sends a request to publish (:mod:`._requests`).

(:class:`Publishing` is a part of :class:`~._node.PulsarcastNode`: a mixin
over :class:`~._base.NodeBase`, which declares the state and methods they share.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.records import RecordKind

from ._base import NodeBase
from ._codec import RequestToPublish, Stored
from ._descriptors import (
    MAX_PAYLOAD_SIZE,
    EventDescriptor,
    EventLinking,
    author_statement,
    cid_str,
    decode_cached,
    event_version,
    format_created,
)
from ._errors import (
    DescriptorError,
    InvalidParent,
    LocalProtocolError,
    NotAllowedToPublish,
    TopicConflict,
    UnknownTopic,
)
from ._filters import AttributeValue, validate_attributes
from ._interned import event_entry
from ._io import Pending, PublishResult, StoreBlock
from ._requests import _Request
from ._signqueue import _Steps
from ._tree import Tree

__all__ = ["Publishing"]

_MAX_UNSENT = 256


class Publishing(NodeBase):
    """Publishing (a part of :class:`~._node.PulsarcastNode`)."""

    def publish(
        self,
        now: float,
        topic_cid: CID,
        payload: bytes,
        *,
        parent: CID | None = None,
        inject_id: str | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        ack: int = 0,
    ) -> PublishResult | Pending:
        """Algorithms 3 and 4: publish here if allowed, else request an allowed node to.

        With ``require_signatures`` this returns :class:`Pending`; the
        :class:`PublishResult` comes in an :class:`OperationDone` once signed.
        ``attributes`` (core/_filters.py rules; ``InvalidAttributes`` if broken) go
        into the event descriptor; None or an empty map means none. ``ack``: how many
        other nodes are to hold the event (:mod:`._acks`; 0: none, the outbox is not
        used); their STOREDs are counted in :meth:`holders` / :meth:`acknowledged`.
        A request to publish (this node may not publish itself) asks for none.
        """
        tree = self._tree_for(topic_cid)
        if not isinstance(payload, bytes):
            raise LocalProtocolError("payload must be bytes")
        if len(payload) > MAX_PAYLOAD_SIZE:
            raise LocalProtocolError(f"payload larger than {MAX_PAYLOAD_SIZE} bytes")
        if inject_id is None:
            inject_id = f"{self.peer_id}/{self._next_seq()}"
        elif not isinstance(inject_id, str) or not inject_id or len(inject_id) > 256:
            raise LocalProtocolError("inject_id must be a non-empty string of at most 256")
        attrs = validate_attributes(attributes) if attributes else None
        ack = self._acks.check(ack)
        version = tree.latest
        parent = self._check_parent(tree, parent)
        if not version.may_publish(self.peer_id) and not version.may_request(self.peer_id):
            raise NotAllowedToPublish(
                f"{self.peer_id} may neither publish in {tree.name!r} nor request to publish"
            )
        self._record(
            now,
            RecordKind.EVENT_INJECTED,
            topic=tree.name,
            topic_cid=cid_str(tree.key),
            inject_id=inject_id,
            size=len(payload),
        )
        return self._signing.run(
            now, self._publish(tree.key, payload, parent, inject_id, attrs, ack)
        )

    def _publish(
        self,
        key: CID,
        payload: bytes,
        parent: CID | None,
        inject_id: str,
        attributes: dict[str, AttributeValue] | None,
        ack: int = 0,
    ) -> _Steps[PublishResult]:
        tree = self._trees.get(key)
        if tree is None:
            raise UnknownTopic(f"unknown topic {key}")
        version = tree.latest
        created = format_created(self._signing.now)
        if version.may_publish(self.peer_id):
            links: tuple[tuple[CID, ...], int]
            if version.event_linking == EventLinking.CUSTOM:
                pentry = self._known_event(parent) if parent is not None else None
                links = ((parent,), pentry[1].clock + 1) if pentry and parent else ((), 0)
            else:
                links = self._link_heads(tree)
            draft = EventDescriptor(
                topic=version.cid,
                author=self.peer_id,
                publisher=self.peer_id,
                parents=links[0],
                clock=links[1],
                payload=payload,
                created=created,
                protocol_version=event_version(
                    signed=self.config.require_signatures, attributes=attributes is not None
                ),
                attributes=attributes,
            )
            ev = yield from self._signing.signed_event(draft, key)
            if key not in self._trees:
                raise UnknownTopic(f"topic {tree.name!r} was left while signing")
            cid = self._publish_event(
                self._signing.now, tree, ev, via="direct", inject_id=inject_id, ack=ack
            )
            return PublishResult(
                status="published", event_cid=cid, request_id=None, inject_id=inject_id
            )
        signature: bytes | None = None
        if self.config.require_signatures:
            statement = author_statement(
                tree=key,
                author=self.peer_id,
                created=created,
                payload=payload,
                attributes=attributes,
            )
            signature = (yield {"author": statement})["author"]
        request_id = f"{self.peer_id}/{self._rng.getrandbits(64):016x}"
        rpc = RequestToPublish(
            topic=tree.key,
            descriptor=tree.root.encode(),
            request_id=request_id,
            author=self.peer_id,
            payload=payload,
            parent=parent,
            created=created,
            inject_id=inject_id,
            signature=signature,
            attributes=attributes,
        )
        req = _Request(
            tree=tree.key,
            name=tree.name,
            author=tree.author,
            rpc=rpc,
            attempts=0,
            due=self._signing.now,
            via=None,
        )
        self._requests.request(self._signing.now, req)
        return PublishResult(
            status="requested", event_cid=None, request_id=request_id, inject_id=inject_id
        )

    def _check_parent(self, tree: Tree, parent: CID | None) -> CID | None:
        """§5 Event linking: CUSTOM names a known parent of the same topic; LAST_SEEN none."""
        if parent is None:
            return None
        if tree.latest.event_linking != EventLinking.CUSTOM:
            raise LocalProtocolError(
                f"topic {tree.name!r} uses LAST_SEEN linking: the parent is chosen by the node"
            )
        if not isinstance(parent, CID):
            raise LocalProtocolError("parent must be an event CID")
        entry = self._known_event(parent)
        if entry is None:
            raise InvalidParent(f"unknown parent event {parent}")
        if entry[0] != tree.key:
            raise TopicConflict(f"parent event {parent} belongs to another topic")
        return parent

    def _publish_event(
        self,
        now: float,
        tree: Tree,
        ev: EventDescriptor,
        *,
        via: Literal["direct", "request"],
        inject_id: str | None,
        ack: int = 0,
    ) -> CID:
        """Store, record, deliver locally, send to every neighbour — in this very call.

        Dissemination never waits for the block to be provided (§5 Persistence, §8).
        """
        cid = ev.cid
        self._seen.put(cid)
        self._events.put(cid, event_entry(tree.key, ev))
        if not self._retain(now, tree, cid, ev):
            self._emit(StoreBlock(cid=cid, data=ev.encode(), own=True))
        self._note_recent(tree, cid, ev)
        if ack:
            self._acks.add(now, tree.key, ev, ack)  # before the sends: they carry ``ack``
        self._record(
            now,
            RecordKind.EVENT_PUBLISHED,
            topic=tree.name,
            topic_cid=cid_str(tree.key),
            event=cid_str(cid),
            inject_id=inject_id,
            author=ev.author,
            publisher=ev.publisher,
            parent=cid_str(ev.parents[0]) if len(ev.parents) == 1 else None,
            parents=[cid_str(p) for p in ev.parents],
            size=len(ev.payload),
            via=via,
        )
        if not tree.joined and tree.author != self.peer_id:
            # Outside the tree: join it and send the event on JOIN_ACK.
            tree.publishing = True
            if len(tree.unsent) < _MAX_UNSENT:
                tree.unsent.append(cid)
            self._ensure_joined(now, tree)
        self._push_own(now, tree, cid)
        self._watch_own(now, tree, cid)  # (._relays) a witness must announce it back
        self._fast.publish(now, tree, ev)
        self._offer(now, tree, cid, False)
        # An early HEADS round: a neighbour the EVENT did not go to (one that joined
        # meanwhile) hears of it soon, not at the next round (deltas only).
        if tree.heads_due is None:
            tree.heads_due = now + self.config.heads_after_publish
        return cid

    # ------------------------------------------ acknowledgement levels (._acks)

    def holders(self, cid: CID) -> tuple[str, ...] | None:
        """The peers that said they hold this node's event ``cid`` (in the order they
        did), while it waits in the outbox; ``None`` once it has enough (or was never
        there): see :meth:`acknowledged`."""
        return self._acks.holders(cid)

    def acknowledged(self, cid: CID) -> tuple[str, ...] | None:
        """The holders of ``cid`` once it reached its level (``None``: not yet, or
        unknown)."""
        return self._acks.acknowledged(cid)

    @property
    def outbox(self) -> dict[CID, tuple[int, tuple[str, ...]]]:
        """The events waiting for holders: CID -> (needed, holders so far)."""
        return self._acks.outbox

    def resume_outbox(self, now: float, topic_cid: CID, event: bytes, *, needed: int) -> CID:
        """After a restart: this node's event ``event`` (its block) of topic
        ``topic_cid`` waits for ``needed`` holders again; offered at once. Its CID."""
        tree = self._tree_for(topic_cid)
        needed = self._acks.check(needed)
        try:
            ev = decode_cached(EventDescriptor, event)
        except DescriptorError as exc:
            raise LocalProtocolError(f"not an event block: {exc}") from exc
        if ev.publisher != self.peer_id:
            raise LocalProtocolError("an event another node published")
        cid = ev.cid
        if cid not in self._events:
            self._seen.put(cid)
            self._events.put(cid, event_entry(tree.key, ev))
            self._note_recent(tree, cid, ev)
            if not self._retain(now, tree, cid, ev):
                # (its put may not have happened before the crash)
                self._emit(StoreBlock(cid=cid, data=ev.encode(), own=True))
        if needed:
            self._acks.resume(now, tree.key, ev, needed)
        return cid

    def _on_stored(self, now: float, peer: str, rpc: Stored) -> None:
        self._acks.stored(peer, rpc.topic, rpc.event)

    def _offer_again(self, now: float) -> None:
        """Timer: each outbox event due is offered again to who may hold it: the tree
        neighbours and the members of the root's list that have not said so."""
        for entry in self._acks.take_due(now):
            tree = self._trees.get(entry.tree)
            if tree is None:
                continue
            cid = entry.event.cid
            if cid not in self._events:
                self._events.put(cid, event_entry(tree.key, entry.event))
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
