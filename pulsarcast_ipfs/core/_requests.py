"""Request to publish: Algorithm 4 (REQUEST_TO_PUBLISH, REQUEST_ACK).

A request goes to ONE peer up the tree (the parent, or the greedy next hop) and
is passed one hop up by each node that may not publish; the first allowed node
checks the requester, publishes with it as author, remembers the request id and
acknowledges. The requester retries until acknowledged (bounded).

:class:`PublishRequests` is a component of :class:`~._node.PulsarcastNode`: it owns
the requests this node sent and waits on, the request ids it published for others
(a retry is acknowledged again, never published twice) and those whose signature is
on its way; it uses the node through :class:`RequestHost` (sends, drops, the tree's
next hop and LAST_SEEN, publishing) and the signing queue.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kademlia import peer_position

from ._codec import RequestAck, RequestToPublish, Rpc
from ._config import NodeConfig
from ._descriptors import (
    EventDescriptor,
    EventLinking,
    TopicDescriptor,
    author_statement,
    event_version,
)
from ._errors import DescriptorError
from ._signing import verify_signature
from ._signqueue import SigningQueue, _Steps
from ._tree import LRU, Tree

if TYPE_CHECKING:
    from ._history import RetainedEvent

__all__ = ["PublishRequests", "RequestHost"]


@dataclass(slots=True, kw_only=True)
class _Request:
    tree: CID
    name: str
    author: str
    rpc: RequestToPublish
    attempts: int
    due: float
    via: str | None


class RequestHost(Protocol):
    """What requests to publish use of the node."""

    def _send(
        self, now: float, peer: str, rpc: Rpc, topic: str | None, data: bytes | None = None
    ) -> None: ...

    def _drop(self, now: float, reason: str, **fields: Any) -> None: ...

    def _next_hop(
        self, now: float, tree: Tree, exclude: Iterable[str] = (), *, suspects: bool = False
    ) -> str | None: ...

    def _new_tree(self, now: float, root: TopicDescriptor) -> Tree: ...

    def _link_heads(self, tree: Tree) -> tuple[tuple[CID, ...], int]: ...

    def _known_event(self, cid: CID) -> tuple[CID, EventDescriptor | RetainedEvent] | None: ...

    def _publish_event(
        self,
        now: float,
        tree: Tree,
        ev: EventDescriptor,
        *,
        via: Literal["direct", "request"],
        inject_id: str | None,
    ) -> CID: ...


class PublishRequests:
    """Requests to publish, both ends (see the module doc)."""

    def __init__(
        self,
        *,
        peer_id: str,
        config: NodeConfig,
        trees: Mapping[CID, Tree],
        signing: SigningQueue,
        host: RequestHost,
    ) -> None:
        self.peer_id = peer_id
        self.config = config
        self._trees = trees
        self._signing = signing
        self._host = host
        self._send = host._send
        self._drop = host._drop
        self._requests: dict[str, _Request] = {}
        """Requests this node sent, not acknowledged yet."""
        self._published_requests = LRU(config.request_cache_size)  # request id -> event CID
        self._signing_requests: set[str] = set()  # requests to publish being signed

    @property
    def waiting(self) -> int:
        """Own requests not acknowledged yet."""
        return len(self._requests)

    @property
    def due(self) -> float | None:
        """When the next own request is to be sent again (or given up)."""
        return min((r.due for r in self._requests.values()), default=None)

    def request(self, now: float, req: _Request) -> None:
        """Send an own request to publish (``publish`` where this node may not)."""
        self._requests[req.rpc.request_id] = req
        self._send_request(now, req)

    def peer_failed(self, now: float, peer: str) -> None:
        """Requests that went through ``peer`` go again at the next timer."""
        for req in self._requests.values():
            if req.via == peer:
                req.due = now

    def timers(self, now: float) -> None:
        """Requests to publish not acknowledged in time: again, or give up."""
        for rid, req in list(self._requests.items()):
            if req.due <= now:
                if req.attempts >= self.config.request_attempts:
                    del self._requests[rid]
                    self._drop(now, "request_timeout", topic=req.name)
                else:
                    self._send_request(now, req)

    def _send_request(self, now: float, req: _Request) -> None:
        """Algorithm 4: REQUEST_TO_PUBLISH goes to ONE peer up the tree, never flooded."""
        tree = self._trees.get(req.tree)
        hop: str | None = None
        if tree is not None and tree.parent is not None:
            hop = tree.parent
        elif tree is not None:
            hop = self._host._next_hop(now, tree)
        req.attempts += 1
        req.due = now + self.config.request_timeout
        req.via = hop
        if hop is not None:
            self._send(now, hop, req.rpc, req.name)

    def on_request(self, now: float, peer: str, rpc: RequestToPublish) -> None:
        """A REQUEST_TO_PUBLISH: publish it here if allowed, else pass it one hop up."""
        try:
            root = TopicDescriptor.decode(rpc.descriptor, expected_cid=rpc.topic)
        except DescriptorError:
            self._drop(now, "invalid", peer=peer)
            return
        done = self._published_requests.get(rpc.request_id)
        if done is not None:  # a retry: acknowledge again, never publish twice
            self._send(
                now,
                rpc.author,
                RequestAck(topic=rpc.topic, request_id=rpc.request_id, ok=True, event=done),
                root.name,
            )
            return
        if rpc.request_id in self._signing_requests:
            return  # a retry while the publisher's signature is on its way
        tree = self._trees.get(rpc.topic)
        version = tree.latest if tree is not None else root
        if version.may_publish(self.peer_id):
            self._publish_requested(now, peer, rpc, root, tree, version)
            return
        # Not allowed here: pass it one step up (parent, else towards the author).
        hop = tree.parent if tree is not None and tree.parent is not None else None
        if hop is None:
            probe = (
                tree
                if tree is not None
                else Tree(root=root, author_pos=peer_position(root.author), latest=root)
            )
            hop = self._host._next_hop(now, probe, {peer})
        if hop is None or hop == peer:
            self._drop(now, "no_route", topic=root.name, peer=rpc.author)
            return
        self._send(now, hop, rpc, root.name)

    def _refuse_request(self, now: float, rpc: RequestToPublish, name: str, reason: str) -> None:
        self._drop(now, reason, topic=name, peer=rpc.author)
        self._send(
            now,
            rpc.author,
            RequestAck(topic=rpc.topic, request_id=rpc.request_id, ok=False),
            name,
        )

    def _publish_requested(
        self,
        now: float,
        peer: str,
        rpc: RequestToPublish,
        root: TopicDescriptor,
        tree: Tree | None,
        version: TopicDescriptor,
    ) -> None:
        """Algorithm 4 at the first allowed node: check the requester, then publish."""
        # The first allowed node: check the REQUESTER against the whitelist (§8).
        if not version.may_request(rpc.author):
            self._refuse_request(now, rpc, root.name, "not_allowed")
            return
        refused = self._signing.topic_refused(root) if tree is None else None
        if refused is None:
            refused = self._request_refused(rpc)
        if refused is not None:
            self._refuse_request(now, rpc, root.name, refused)
            return
        if tree is None:
            tree = self._host._new_tree(now, root)
        parents, clock = self._host._link_heads(tree)
        if version.event_linking == EventLinking.CUSTOM:
            parent = rpc.parent
            pentry = self._host._known_event(parent) if parent is not None else None
            if parent is not None and pentry is None:
                self._refuse_request(now, rpc, root.name, "unknown_parent")
                return
            parents = (parent,) if parent is not None else ()
            clock = pentry[1].clock + 1 if pentry is not None else 0
        # Under signatures the event carries the requester's own signature, checked
        # above and again at every hop; the publisher adds its own over everything.
        signed = self.config.require_signatures and rpc.signature is not None
        draft = EventDescriptor(
            topic=version.cid,
            author=rpc.author,
            publisher=self.peer_id,
            parents=parents,
            clock=clock,
            payload=rpc.payload,
            created=rpc.created,
            protocol_version=event_version(signed=signed, attributes=rpc.attributes is not None),
            attributes=rpc.attributes,
        )
        self._signing_requests.add(rpc.request_id)

        def failed(now: float, error: str) -> None:
            self._signing_requests.discard(rpc.request_id)
            self._refuse_request(now, rpc, root.name, "sign_failed")

        relink = version.event_linking != EventLinking.CUSTOM
        steps = self._publish_for(tree.key, rpc, root.name, draft, relink=relink)
        if not self.config.require_signatures:
            self._signing.run(now, steps)
            return
        self._signing.run(now, steps, public=False, on_fail=failed)

    def _request_refused(self, rpc: RequestToPublish) -> str | None:
        """``unsigned`` / ``bad_signature`` for the requester's author signature."""
        if rpc.signature is None:
            return "unsigned" if self.config.require_signatures else None
        statement = author_statement(
            tree=rpc.topic,
            author=rpc.author,
            created=rpc.created,
            payload=rpc.payload,
            attributes=rpc.attributes,
        )
        if not verify_signature(rpc.author, statement, rpc.signature):
            return "bad_signature"
        return None

    def _publish_for(
        self, key: CID, rpc: RequestToPublish, name: str, draft: EventDescriptor, *, relink: bool
    ) -> _Steps[None]:
        if relink:
            # LAST_SEEN is read when the operation runs, not when the request came:
            # requests queued behind another's signatures must not share a parent.
            current = self._trees.get(key)
            if current is not None:
                parents, clock = self._host._link_heads(current)
                if parents != draft.parents:
                    draft = replace(draft, parents=parents, clock=clock)
        ev = yield from self._signing.signed_event(draft, key, rpc.signature)
        self._signing_requests.discard(rpc.request_id)
        tree = self._trees.get(key)
        if tree is None:
            self._refuse_request(self._signing.now, rpc, name, "unknown_topic")
            return
        now = self._signing.now
        cid = self._host._publish_event(now, tree, ev, via="request", inject_id=rpc.inject_id)
        self._published_requests.put(rpc.request_id, cid)
        self._send(
            now,
            rpc.author,
            RequestAck(topic=rpc.topic, request_id=rpc.request_id, ok=True, event=cid),
            name,
        )

    def on_ack(self, now: float, peer: str, rpc: RequestAck) -> None:
        req = self._requests.pop(rpc.request_id, None)
        if req is not None and not rpc.ok:
            self._drop(now, "request_refused", topic=req.name, peer=peer)
