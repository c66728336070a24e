"""Fast groups (FastDelivery): a publisher sends its events straight to the
subscribers that asked for them, in two hops at most (docs/protocol-notes.md
"Fast groups").

Theory of operation
-------------------
A subscriber that wants fast delivery (``subscribe(fast=True)``) asks each publisher
of the topic it learns of (the topic's author at once, then the ``publisher`` of
every event delivered to it, up to ``fast_publishers``) to join its group:
GROUP_JOIN ``{topic, spare}``, repeated every ``group_refresh`` as a refresh. The
publisher answers GROUP_ACK ``{ok, helper, ttl}``.

* **Bounds.** A publisher sends each event to at most ``group_capacity`` peers.
  While the group is no larger, every member is *direct*. Beyond that it recruits
  *helpers*: the members that declared the most spare (as few as needed,
  :func:`~._groupstate.plan_group`); it sends each helper GROUP_ASSIGN ``{epoch,
  members, ttl}`` and each member the ACK naming its helper. A join that cannot be
  placed is refused: the tree still delivers to that subscriber.
* **Two hops.** The publisher sends GROUP_EVENT to its direct members (not those
  that have the EVENT from the same call: its tree neighbours and the members of the
  root's MEMBERS list, :mod:`._push`) and to every helper. A helper forwards a
  GROUP_EVENT to its assigned members only when the publisher itself sent it; a
  GROUP_EVENT from a helper is never sent on.
* **Checks.** A GROUP_EVENT is taken only from the publisher of a group this node
  is in (or helps) or from the helper that publisher named; anything else is
  dropped (``not_member``) and a publisher is told GROUP_LEAVE. A taken event
  goes through the same acceptance as a tree EVENT: topic version, allowed
  publisher, signatures, causal clock, duplicates by CID, causal delivery.
* **The tree is unchanged.** An event that came first along a group is *not* sent
  into the tree then: the tree's own copy, when it comes (a duplicate), is
  forwarded as it would have been. The tree's traffic is what it is without
  groups, and what the group adds is one GROUP_EVENT per member. (A publisher's
  ``pushed`` first-hop copy counts as the tree's.) A lost tree copy
  is repaired by anti-entropy as before (the node holds the event and advertises it).
* **Failures.** A membership not refreshed for ``3 x group_refresh`` expires (a
  crashed member is dropped); so does a helper's assignment. A peer the driver
  reports unreachable leaves every group at once; the publisher places the members
  of a failed helper again (they get an ACK with their new helper). Whatever a
  member misses meanwhile the tree delivers.

Layout
------
:class:`FastGroups` is a component of the node (``node._fast``): it owns the
fast-group state, each tree's :attr:`~._tree.Tree.fast` (:mod:`._groupstate`, which
no other part writes) and its own tables (the path each event came by first, the
tree copies still to forward, the events it forwarded as a helper, the delivery
counts, the fast subscriptions waiting for their topic, the next refresh round).
The node calls it with its inputs (:meth:`~FastGroups.receive` for the GROUP_* RPCs,
:meth:`~FastGroups.tick`, and its own events: subscribe, unsubscribe, publish,
deliver, a tree copy of a group event, a peer unreachable); it reaches the node
only through what it is given at construction: the trees and the seen events to
read, and four calls (:class:`GroupHost`).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pulsarcast_ipfs.core._cid import CID

from ._codec import (
    MAX_GROUP_ASSIGN,
    GroupAck,
    GroupAssign,
    GroupEvent,
    GroupJoin,
    GroupLeave,
    encode_frame,
)
from ._config import NodeConfig
from ._descriptors import EventDescriptor, cid_str, decode_cached
from ._errors import DescriptorError
from ._filters import MATCH_ALL, Filter, matches, merge, parse_filter, render_filter
from ._groupstate import (
    MAX_GROUP_MEMBERS,
    Assignment,
    FastState,
    GroupMember,
    Membership,
    PublisherGroup,
    plan_group,
)
from ._tree import LRU, Tree

__all__ = ["FastGroupState", "FastGroups", "GroupHost"]

GroupRpc = GroupJoin | GroupAck | GroupLeave | GroupAssign | GroupEvent
GROUP_RPCS = (GroupEvent, GroupJoin, GroupAck, GroupAssign, GroupLeave)
"""The RPCs :meth:`FastGroups.receive` handles."""

_MAX_WANTED = 1024
"""``subscribe(fast=True)`` calls kept while their topic resolves (the oldest go)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FastGroupState:
    """A node's fast groups of one topic (:meth:`FastGroups.fast_state`)."""

    topic_cid: CID
    fast: bool
    """The local subscription asked for fast delivery."""
    joined: tuple[tuple[str, str | None], ...]
    """(member) The publishers whose groups it is in, each with its helper (or ``None``)."""
    members: int
    """(publisher) The size of its own group."""
    direct: tuple[str, ...]
    """(publisher) The members it sends to itself."""
    helpers: tuple[tuple[str, tuple[str, ...]], ...]
    """(publisher) Its helpers and the members each forwards to."""
    helping: tuple[tuple[str, tuple[str, ...]], ...]
    """(helper) The publishers it forwards for, and to whom."""


class GroupHost(Protocol):
    """What fast groups use of the node: four calls, nothing of its state."""

    def _send(
        self, now: float, peer: str, rpc: GroupRpc, topic: str | None, data: bytes | None = None
    ) -> None:
        """Queue an RPC for ``peer`` (``data``: its frame, when already encoded)."""

    def _drop(self, now: float, reason: str, **fields: Any) -> None:
        """Record a dropped event."""

    def _accept_event(
        self,
        now: float,
        tree: Tree,
        ev: EventDescriptor,
        *,
        sender: str | None,
        recovered: bool,
        block: bytes | None = None,
        forward: bool = True,
    ) -> bool:
        """The tree's acceptance of an event (verify, deduplicate, store, deliver)."""

    def _forward_received(
        self, now: float, tree: Tree, cid: CID, sender: str | None, pushed: int | None
    ) -> None:
        """Forward a received event into the tree, as the tree would have."""


class FastGroups:
    """The fast groups of one node (a component of :class:`~._node.PulsarcastNode`)."""

    def __init__(
        self,
        *,
        peer_id: str,
        config: NodeConfig,
        trees: Mapping[CID, Tree],
        seen: Container[CID],
        host: GroupHost,
    ) -> None:
        self._peer_id = peer_id
        self._config = config
        self._trees = trees  # read only: the node's trees
        self._seen = seen  # read only: the events the node has taken
        self._send = host._send
        self._drop = host._drop
        self._accept = host._accept_event
        self._forward = host._forward_received
        size = config.event_cache_size
        self._due: float | None = None  # the next refresh and expiry round
        self._paths = LRU(size)  # event -> the group path it came by first
        self._pending = LRU(size)  # event -> tree: the tree copy still to forward
        self._helped = LRU(size)  # events forwarded as a helper
        self._counts: dict[str, int] = {}
        self._wanted: dict[CID, None] = {}  # subscribe(fast=True) waiting for its topic

    # ------------------------------------------------------------ the node's calls

    @property
    def due(self) -> float | None:
        """When :meth:`tick` is due (``None``: no fast state anywhere)."""
        return self._due

    def receive(self, now: float, peer: str, rpc: GroupRpc) -> None:
        """A GROUP_* RPC from ``peer`` (one of :data:`GROUP_RPCS`)."""
        if isinstance(rpc, GroupEvent):
            self._on_group_event(now, peer, rpc)
        elif isinstance(rpc, GroupJoin):
            self._on_group_join(now, peer, rpc)
        elif isinstance(rpc, GroupAck):
            self._on_group_ack(now, peer, rpc)
        elif isinstance(rpc, GroupAssign):
            self._on_group_assign(now, peer, rpc)
        else:
            self._on_group_leave(now, peer, rpc)

    def want(self, topic_cid: CID, fast: bool) -> None:
        """``subscribe(fast=...)`` of a topic being resolved: remember (or forget) it."""
        if fast:
            if len(self._wanted) >= _MAX_WANTED:
                self._wanted.pop(next(iter(self._wanted)))
            self._wanted[topic_cid] = None
        else:
            self._wanted.pop(topic_cid, None)

    def wanted(self, versions: Iterable[CID]) -> bool:
        """Whether a subscribe call of one of ``versions`` asked for fast delivery
        (:meth:`want`); those calls are answered."""
        fast = False
        for v in versions:
            if v in self._wanted:
                del self._wanted[v]
                fast = True
        return fast

    def skipped(self, tree: Tree, cid: CID) -> None:
        """An event taken but not delivered here (filtered out, or not subscribed)."""
        if tree.fast is not None:
            self._paths.pop(cid)  # no path to count

    # ------------------------------------------------------------ helpers

    def _fast(self, now: float, tree: Tree) -> FastState:
        fs = tree.fast
        if fs is None:
            fs = tree.fast = FastState()
        if self._due is None:
            self._due = now + self._config.group_refresh
        return fs

    def _group_ttl(self) -> float:
        return 3.0 * self._config.group_refresh

    # ------------------------------------------------------------ member side

    def subscribe(self, now: float, tree: Tree, fast: bool) -> None:
        """``subscribe(fast=...)``: ask for (or stop asking for) fast delivery."""
        if not fast:
            if tree.fast is not None and tree.fast.wanted:
                self.leave_all(now, tree)
            return
        fs = self._fast(now, tree)
        if fs.wanted:
            return
        fs.wanted = True
        if tree.author != self._peer_id:
            self._group_join(now, tree, tree.author)  # the likeliest publisher

    def leave_all(self, now: float, tree: Tree) -> None:
        """Unsubscribed (or no longer fast): leave every group, stop helping."""
        fs = tree.fast
        if fs is None:
            return
        fs.wanted = False
        for pub in sorted(set(fs.joined) | set(fs.assigned)):
            self._send(now, pub, GroupLeave(topic=tree.key), tree.name)
        fs.joined.clear()
        fs.assigned.clear()
        fs.refused.clear()

    def _group_join(self, now: float, tree: Tree, publisher: str) -> None:
        fs = self._fast(now, tree)
        if publisher in fs.joined or publisher == self._peer_id:
            return
        until = fs.refused.get(publisher)
        if until is not None:
            if until > now:
                return
            del fs.refused[publisher]
        if len(fs.joined) >= self._config.fast_publishers:
            return
        fs.joined[publisher] = Membership(expires=now + self._group_ttl())
        self._send(now, publisher, self._group_join_rpc(tree), tree.name)

    def _group_join_rpc(self, tree: Tree) -> GroupJoin:
        """GROUP_JOIN (and its refresh), with this subscription's filter if it has one
        (several: merged into one that matches what any of them does; wire 2.5 has one)."""
        where = None
        if tree.filters is not None:
            one = (merge(tree.filters, 1) or tree.filters)[0]  # () if none can match
            where = None if one == MATCH_ALL else render_filter(one)
        return GroupJoin(topic=tree.key, spare=self._config.group_spare, filter=where)

    def delivered(self, now: float, tree: Tree, cid: CID, ev: EventDescriptor) -> str | None:
        """An event was delivered: in a tree with fast state, its path (for the record
        and the counters; else ``None``); its publisher's group is joined if not yet."""
        if tree.fast is None:
            return None
        path = self._paths.pop(cid) or "tree"
        self._counts[path] = self._counts.get(path, 0) + 1
        fs = tree.fast
        if fs is not None and fs.wanted and tree.subscribed and ev.publisher not in fs.joined:
            self._group_join(now, tree, ev.publisher)
        return str(path)

    def _on_group_ack(self, now: float, peer: str, rpc: GroupAck) -> None:
        tree = self._trees.get(rpc.topic)
        fs = tree.fast if tree is not None else None
        mem = fs.joined.get(peer) if fs is not None else None
        if tree is None or fs is None or mem is None:
            if rpc.ok:
                self._send(now, peer, GroupLeave(topic=rpc.topic), None)  # not wanted
            return
        if not rpc.ok:
            del fs.joined[peer]
            fs.refused[peer] = now + self._group_ttl()
            return
        mem.acked = True
        mem.expires = now + rpc.ttl
        mem.helper = rpc.helper if rpc.helper != self._peer_id else None

    def _on_group_leave(self, now: float, peer: str, rpc: GroupLeave) -> None:
        tree = self._trees.get(rpc.topic)
        fs = tree.fast if tree is not None else None
        if tree is None or fs is None:
            return
        # The publisher dropped us (as a member and a helper)...
        if fs.joined.pop(peer, None) is not None:
            fs.refused[peer] = now + self._group_ttl()
        fs.assigned.pop(peer, None)
        # ...or a member left our group.
        g = fs.group
        if g is not None and peer in g.members:
            del g.members[peer]
            self._regroup(now, tree, g)

    def _on_group_assign(self, now: float, peer: str, rpc: GroupAssign) -> None:
        tree = self._trees.get(rpc.topic)
        fs = tree.fast if tree is not None else None
        if tree is None or fs is None or peer not in fs.joined:
            return  # only a publisher whose group this node is in may recruit it
        old = fs.assigned.get(peer)
        if old is not None and rpc.epoch < old.epoch:
            return  # an older assignment, overtaken
        members = tuple(m for m in rpc.members if m not in (self._peer_id, peer))
        members = members[: min(self._config.group_spare, MAX_GROUP_ASSIGN)]
        if not members:
            fs.assigned.pop(peer, None)
            return
        filters: dict[str, Filter] = {}
        if rpc.filters is not None:
            for m, text in zip(rpc.members, rpc.filters, strict=True):
                f = parse_filter(text)  # the codec checked it: canonical
                if m in members and f != MATCH_ALL:
                    filters[m] = f
        fs.assigned[peer] = Assignment(
            epoch=rpc.epoch, members=members, expires=now + rpc.ttl, filters=filters
        )

    def _on_group_event(self, now: float, peer: str, rpc: GroupEvent) -> None:
        tree = self._trees.get(rpc.topic)
        fs = tree.fast if tree is not None else None
        if tree is None or fs is None:
            self._drop(now, "not_member", peer=peer)
            self._send(now, peer, GroupLeave(topic=rpc.topic), None)
            return
        try:
            ev = decode_cached(EventDescriptor, rpc.event)
        except DescriptorError:
            self._drop(now, "invalid", topic=tree.name, peer=peer)
            return
        publisher = ev.publisher
        direct = peer == publisher
        mem = fs.joined.get(publisher)
        asg = fs.assigned.get(publisher) if self._forwards(direct) else None
        if direct:
            ok = mem is not None or asg is not None
        else:
            ok = mem is not None and mem.helper == peer
        cid = ev.cid
        if not ok:
            self._drop(now, "not_member", topic=tree.name, event=cid_str(cid), peer=peer)
            if direct:
                self._send(now, peer, GroupLeave(topic=tree.key), tree.name)
            return
        seen = cid in self._seen
        if not seen:
            self._paths.put(cid, "group" if direct else "helper")
        accepted = self._accept(
            now, tree, ev, sender=peer, recovered=False, block=rpc.topic_block, forward=False
        )
        if not seen:
            if cid in self._seen:
                # The tree's own copy is forwarded when it comes (it would have been).
                self._pending.put(cid, tree.key)
            else:
                self._paths.pop(cid)
        if (
            accepted
            and asg is not None
            and asg.expires > now
            and cid in self._seen
            and cid not in self._helped
        ):
            # A helper: forward what the publisher itself sent, to its assigned members
            # only (one hop more; never what came from another helper).
            self._helped.put(cid)
            data = encode_frame(rpc)
            for m in asg.members:
                if self._group_wants(tree, m, ev):
                    self._send(now, m, rpc, tree.name, data)

    def _group_wants(self, tree: Tree, member: str, ev: EventDescriptor) -> bool:
        """Whether ``member`` of a group (at the publisher, or at its helper) wants
        ``ev``: its filter (GROUP_JOIN's, passed on to its helper in GROUP_ASSIGN)
        matches it, or it has none. (What it does not get along the group it does
        not want; the tree still brings it everything it does.)"""
        fs = tree.fast
        if fs is None:
            return True
        g = fs.group
        m = g.members.get(member) if g is not None else None
        if m is not None:
            f = m.filter
        else:
            asg = fs.assigned.get(ev.publisher)
            f = asg.filters.get(member) if asg is not None else None
        return f is None or matches(f, ev.attributes)

    @staticmethod
    def _forwards(direct: bool) -> bool:
        """The two-hop rule: a helper forwards a GROUP_EVENT only if the publisher
        itself sent it (``direct``), never one that came from another helper."""
        return direct

    def tree_copy(
        self, now: float, tree: Tree, cid: CID, sender: str | None, pushed: int | None
    ) -> None:
        """A tree copy of an event that came first along a group: forward it now, as the
        tree would have (the group copy was not sent into the tree)."""
        if sender is None or self._pending.get(cid) != tree.key:
            return
        if sender != tree.parent and sender not in tree.children and pushed is None:
            return  # (a publisher's direct first hop counts: docs "First hop")
        self._pending.pop(cid)
        self._forward(now, tree, cid, sender, pushed)

    # ------------------------------------------------------------ publisher side

    def _on_group_join(self, now: float, peer: str, rpc: GroupJoin) -> None:
        ttl = self._group_ttl()
        tree = self._trees.get(rpc.topic)
        if tree is None or self._config.group_capacity == 0:
            self._send(now, peer, GroupAck(topic=rpc.topic, ok=False, ttl=ttl), None)
            return
        fs = self._fast(now, tree)
        g = fs.group
        if g is None:
            g = fs.group = PublisherGroup()
        m = g.members.get(peer)
        where = None if rpc.filter is None else parse_filter(rpc.filter)  # canonical
        if where == MATCH_ALL:
            where = None
        if m is None:
            if len(g.members) >= MAX_GROUP_MEMBERS or not self._placeable(g, peer, rpc.spare):
                self._send(now, peer, GroupAck(topic=tree.key, ok=False, ttl=ttl), tree.name)
                return
            g.seq += 1
            g.members[peer] = GroupMember(
                spare=rpc.spare, expires=now + ttl, seq=g.seq, filter=where
            )
            self._regroup(now, tree, g, quiet=peer)
        else:
            m.expires = now + ttl
            if m.filter != where:
                m.filter = where
                if m.helper is not None and m.helper in g.helpers:
                    # its helper forwards by the new filter from now on
                    self._send(now, m.helper, self._assign_rpc(tree, g, m.helper), tree.name)
            if m.spare != rpc.spare:
                m.spare = rpc.spare
                self._regroup(now, tree, g, quiet=peer)
        m = g.members.get(peer)
        if m is None:
            return  # dropped again by the placement (its spare went)
        self._send(
            now, peer, GroupAck(topic=tree.key, ok=True, helper=m.helper, ttl=ttl), tree.name
        )
        assigned = g.helpers.get(peer)
        if assigned:
            # A helper's refresh renews its assignment too.
            self._send(now, peer, self._assign_rpc(tree, g, peer), tree.name)

    def _assign_rpc(
        self, tree: Tree, g: PublisherGroup, helper: str, members: tuple[str, ...] | None = None
    ) -> GroupAssign:
        """GROUP_ASSIGN of ``helper``'s members (default: its current ones), with their
        filters when any has one."""
        ms = g.helpers.get(helper, ()) if members is None else members
        wheres = [g.members[m].filter if m in g.members else None for m in ms]
        filters = None
        if any(w is not None for w in wheres):
            filters = tuple(render_filter(w if w is not None else MATCH_ALL) for w in wheres)
        return GroupAssign(
            topic=tree.key, epoch=g.epoch, members=ms, ttl=self._group_ttl(), filters=filters
        )

    def _placeable(self, g: PublisherGroup, peer: str, spare: int) -> bool:
        trial = {p: (m.spare, m.seq) for p, m in g.members.items()}
        trial[peer] = (spare, g.seq + 1)
        return plan_group(trial, self._config.group_capacity) is not None

    def _regroup(self, now: float, tree: Tree, g: PublisherGroup, *, quiet: str = "") -> None:
        """Place the group again; tell each helper whose members changed and each member
        whose helper changed (``quiet``: the caller answers that one itself)."""
        ttl = self._group_ttl()
        cap = self._config.group_capacity
        while True:
            plan = plan_group({p: (m.spare, m.seq) for p, m in g.members.items()}, cap)
            if plan is not None:
                break
            # Too few spare places left (a helper went): the newest members go.
            newest = max(g.members, key=lambda p: (g.members[p].seq, p))
            del g.members[newest]
            self._send(now, newest, GroupLeave(topic=tree.key), tree.name)
        _direct, helpers = plan
        changed = {h: ms for h, ms in helpers.items() if g.helpers.get(h) != ms}
        gone = [h for h in g.helpers if h not in helpers]
        if changed or gone:
            g.epoch += 1
        for h in gone:
            if h in g.members:
                rpc = GroupAssign(topic=tree.key, epoch=g.epoch, members=(), ttl=ttl)
                self._send(now, h, rpc, tree.name)
        for h, ms in sorted(changed.items()):
            self._send(now, h, self._assign_rpc(tree, g, h, ms), tree.name)
        g.helpers = helpers
        serves = {m: h for h, ms in helpers.items() for m in ms}
        for p in sorted(g.members):
            m = g.members[p]
            new = serves.get(p)
            if new != m.helper:
                m.helper = new
                if p != quiet:
                    ack = GroupAck(topic=tree.key, ok=True, helper=new, ttl=ttl)
                    self._send(now, p, ack, tree.name)

    def publish(self, now: float, tree: Tree, ev: EventDescriptor) -> None:
        """An event this node published: GROUP_EVENT to its direct members (those that
        are no tree neighbours) and to its helpers."""
        fs = tree.fast
        g = fs.group if fs is not None else None
        if g is None or not g.members:
            return
        block = None
        if ev.topic != tree.key:
            desc = tree.versions.get(ev.topic)
            block = desc.encode() if desc is not None else None
        rpc = GroupEvent(topic=tree.key, event=ev.encode(), topic_block=block)
        data = encode_frame(rpc)
        # Those the EVENT went to in this very call need no second copy: the tree
        # neighbours and the root's MEMBERS list (the first hop, :mod:`._push`).
        neighbours = set(tree.neighbours())
        if tree.members_epoch is not None and tree.members_from == tree.parent:
            neighbours.update(tree.members)
        for p in sorted(g.members):
            m = g.members[p]
            if p in g.helpers:
                # a helper gets what it or one of its members wants
                if self._group_wants(tree, p, ev) or any(
                    self._group_wants(tree, q, ev) for q in g.helpers[p]
                ):
                    self._send(now, p, rpc, tree.name, data)
            elif m.helper is None and p not in neighbours and self._group_wants(tree, p, ev):
                self._send(now, p, rpc, tree.name, data)

    # ------------------------------------------------------------ timers, failures

    def tick(self, now: float) -> None:
        """Every ``group_refresh``: members refresh, expired entries go."""
        c = self._config
        self._due = None
        busy = False
        for tree in list(self._trees.values()):
            fs = tree.fast
            if fs is None:
                continue
            for pub in sorted(fs.joined):
                mem = fs.joined[pub]
                if mem.expires <= now:
                    del fs.joined[pub]  # the publisher went silent
                    fs.refused[pub] = now + self._group_ttl()
                    continue
                self._send(now, pub, self._group_join_rpc(tree), tree.name)
            for pub in [p for p, t in fs.refused.items() if t <= now]:
                del fs.refused[pub]
            for pub in [p for p, a in fs.assigned.items() if a.expires <= now]:
                del fs.assigned[pub]
            g = fs.group
            if g is not None:
                gone = [p for p, m in g.members.items() if m.expires <= now]
                for p in gone:
                    del g.members[p]
                if gone:
                    self._regroup(now, tree, g)
                if not g.members:
                    fs.group = None
            if fs.idle() and not fs.refused:
                tree.fast = None
            else:
                busy = True
        if busy:
            self._due = now + c.group_refresh

    def peer_failed(self, now: float, peer: str) -> None:
        """The driver gave up on ``peer``: out of every group at once."""
        for tree in list(self._trees.values()):
            fs = tree.fast
            if fs is None:
                continue
            if fs.joined.pop(peer, None) is not None:
                fs.refused[peer] = now + self._group_ttl()
            fs.assigned.pop(peer, None)
            for mem in fs.joined.values():
                if mem.helper == peer:
                    mem.helper = None  # the publisher places us again
            g = fs.group
            if g is not None and peer in g.members:
                del g.members[peer]
                self._regroup(now, tree, g)

    # ------------------------------------------------------------ queries

    def state(self, tree: Tree) -> FastGroupState:
        """This node's fast groups of a topic."""
        fs = tree.fast
        if fs is None:
            fs = FastState()
        g = fs.group
        return FastGroupState(
            topic_cid=tree.key,
            fast=fs.wanted,
            joined=tuple((p, m.helper) for p, m in sorted(fs.joined.items()) if m.acked),
            members=len(g.members) if g is not None else 0,
            direct=tuple(
                sorted(p for p, m in g.members.items() if m.helper is None and p not in g.helpers)
            )
            if g is not None
            else (),
            helpers=tuple(sorted(g.helpers.items())) if g is not None else (),
            helping=tuple(sorted((p, a.members) for p, a in fs.assigned.items())),
        )

    @property
    def counts(self) -> dict[str, int]:
        """Deliveries of fast topics by the path of the first copy: ``group`` (from the
        publisher), ``helper`` (from a helper), ``tree``."""
        return dict(self._counts)
