"""Dissemination: verify, forward and deliver events in causal order (§5 "Forward").

An EVENT is checked (topic version of the tree, allowed publisher, signatures,
causal clock), deduplicated, stored, forwarded to every neighbour but the sender
and offered for delivery: it is delivered once all its parents are, an unknown
parent being fetched (gap repair, :mod:`._repair`). Topic versions learnt from
events or the meta topic are kept here too.

(:class:`Dissemination` is a part of :class:`~._node.PulsarcastNode`: a mixin
over :class:`~._base.NodeBase`, which declares the state and methods they share.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.records import RecordKind

from ._base import _MAX_VERSIONS, NodeBase
from ._codec import Event, Heads, Stored, encode_frame
from ._descriptors import (
    MAX_PARENTS,
    EventDescriptor,
    TopicDescriptor,
    cid_str,
    decode_cached,
    sort_parents,
)
from ._errors import DescriptorError, LocalProtocolError
from ._filters import Filter, matches_any
from ._history import RetainedEvent
from ._interned import event_entry
from ._io import Deliver, StoreBlock, TopicUpdated
from ._tree import Tree

__all__ = ["Dissemination"]

_MAX_STASH = 256
_NO_PEERS: Mapping[str, tuple[CID, ...] | None] = MappingProxyType({})


_MAX_TIPS = 256  # DAG heads tracked per topic for LAST_SEEN linking


class Dissemination(NodeBase):
    """Dissemination (a part of :class:`~._node.PulsarcastNode`)."""

    def _version_for(
        self, now: float, tree: Tree, version: CID, block: bytes | None
    ) -> TopicDescriptor | str | None:
        """The topic version an event names; a drop reason if its block is refused."""
        desc = tree.versions.get(version)
        if desc is not None:
            return desc
        if block is None:
            return None
        try:
            desc = decode_cached(TopicDescriptor, block, expected_cid=version)
        except DescriptorError:
            return None
        if desc.name != tree.name or desc.author != tree.author:
            return None
        refused = self._signing.topic_refused(desc)
        if refused is not None:
            return refused
        self._learn_version(now, tree, desc)
        return desc

    def _on_event(self, now: float, peer: str, rpc: Event) -> None:
        tree = self._trees.get(rpc.topic)
        if tree is None:
            self._drop(now, "unknown_topic", peer=peer)
            self._stale_edge(now, peer, rpc.topic, None)
            return
        try:
            ev = decode_cached(EventDescriptor, rpc.event)
        except DescriptorError:
            self._drop(now, "invalid", topic=tree.name, peer=peer)
            return
        if peer not in tree.children and peer != tree.parent:
            if rpc.pushed is None or ev.publisher != peer:
                # A stale edge (e.g. a JOIN acknowledged too late): tell the sender.
                # (A publisher's direct first hop is no edge: docs "First hop".)
                self._stale_edge(now, peer, tree.key, tree.name)
        if peer == tree.parent:
            self._guard.parent_sent(tree.key, peer, ev.cid)  # (witnesses score the parent)
        if peer == tree.parent and now - ev.created_ts > self._links.lag_limit(peer) / 2:
            self._probe_parent(now, peer)  # a late event: is the parent lagging?
        asking = rpc.ack is not None and self._ack_before(peer, tree, rpc, ev)
        seen_parents = rpc.parents
        if seen_parents is not None and (
            (peer != tree.parent and ev.publisher != peer) or self._own_filters(tree) is None
        ):
            # Only who prunes for us (our parent, a publisher's first hop) says, and
            # only when our summary lets them prune anything.
            seen_parents = None
        self._accept_event(
            now,
            tree,
            ev,
            sender=peer,
            recovered=False,
            block=rpc.topic_block,
            pushed=rpc.pushed,
            seen_parents=seen_parents,
        )
        if asking:
            self._ack_after(now, peer, tree, ev)

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
        pushed: int | None = None,
        seen_parents: tuple[CID, ...] | None = None,
    ) -> bool:
        """§5 Forward: verify, drop duplicates, store, forward, deliver.

        ``forward=False``: history back-fill (kept and offered, not sent on).
        ``seen_parents``: the EVENT's ``parents`` (our parent pruned some of the
        event's: :mod:`._pruning`)."""
        cid = ev.cid
        self._edge_knows(tree, sender, cid)
        if sender in tree.children and self._target_summary(tree, sender) is not None:
            tree.edge(sender).up.add(cid)  # (tree filters) it went up that edge
        pending = self._fetches.get(cid)
        if pending is not None and not pending.outstanding and pending.kind == "event":
            del self._fetches[cid]  # it came by itself within its grace
        if cid in self._seen:
            self._drop(now, "duplicate", topic=tree.name, event=cid_str(cid), peer=sender)
            if seen_parents is not None:
                self._late_parents(now, tree, ev, seen_parents, recovered)
            if forward:
                self._fast.tree_copy(now, tree, cid, sender, pushed)
            return True
        version = self._version_for(now, tree, ev.topic, block)
        if isinstance(version, str):
            self._drop(now, version, topic=tree.name, event=cid_str(cid), peer=sender)
            return False
        if version is None:
            if block is None and ev.topic not in self._fetches and len(self._stash) < _MAX_STASH:
                # A recovered event naming a topic version we do not know: fetch it first.
                self._stash.setdefault(ev.topic, []).append((tree.key, ev.encode(), sender))
                self._fetch(now, ev.topic, "topic", tree.key, sender)
                return True
            self._drop(now, "wrong_topic", topic=tree.name, event=cid_str(cid), peer=sender)
            return False
        if not version.may_publish(ev.publisher):
            # §8: forwarders check that the publisher is allowed by that topic version.
            self._drop(now, "not_allowed", topic=tree.name, event=cid_str(cid), peer=sender)
            return False
        refused = self._signing.event_refused(tree, ev)
        if refused is not None:
            # docs/security.md: unsigned, forged or tampered events stop at the first hop.
            self._drop(now, refused, topic=tree.name, event=cid_str(cid), peer=sender)
            return False
        for p in ev.parents:
            pentry = self._events.get(p)
            if pentry is not None and pentry[1].clock >= ev.clock:
                # The history order must be causal: a child's clock exceeds its parents'.
                self._drop(now, "invalid", topic=tree.name, event=cid_str(cid), peer=sender)
                return False
        self._seen.put(cid)
        self._events.put(cid, event_entry(tree.key, ev))
        self._learn_seen_parents(tree, ev, seen_parents)
        if not recovered:
            self._count_received(tree, sender, ev)
        if not self._retain(now, tree, cid, ev):
            self._emit(StoreBlock(cid=cid, data=ev.encode(), own=ev.publisher == self.peer_id))
        self._note_recent(tree, cid, ev)
        if forward:
            self._forward_received(now, tree, cid, sender, pushed)
            self._announce_to_watchers(now, tree, ev, sender)
        self._offer(now, tree, cid, recovered)
        return True

    def _announce_to_watchers(
        self, now: float, tree: Tree, ev: EventDescriptor, sender: str | None
    ) -> None:
        """(witness) A new event: one HEADS entry to each watcher that wants it, the
        event's own publisher too although it sent it (it checks that its event got
        out: docs/protocol-notes.md "Relays that lie")."""
        guard = self._guard
        guard.accepted_elsewhere(tree.key, sender)
        watchers = guard.watchers(now, tree.key)
        if not watchers:
            return
        rpc = Heads(topic=tree.key, heads=((ev.cid, ev.created_ts),))
        data = encode_frame(rpc)
        for peer, filters in watchers:
            if (peer != sender or peer == ev.publisher) and (
                filters is None or matches_any(filters, ev.attributes)
            ):
                self._send(now, peer, rpc, tree.name, data)

    def _note_recent(self, tree: Tree, cid: CID, ev: EventDescriptor) -> None:
        created = ev.created_ts
        tree.recent_seq += 1
        if tree.older.pop(cid, None) is None and cid not in tree.recent:
            tree.window.add(cid, created)
        tree.recent[cid] = created
        tree.recent.move_to_end(cid)
        while len(tree.recent) > self.config.heads_size:
            old, ts = tree.recent.popitem(last=False)
            # Older CIDs stay advertisable (history HEADS on new edges, DIGESTs).
            tree.older[old] = ts
            if len(tree.older) > self.config.history_size:
                dropped, dropped_ts = tree.older.popitem(last=False)
                tree.window.discard(dropped, dropped_ts)
                self._window_dropped(tree, dropped, dropped_ts)
        # LAST_SEEN heads: an event seen is a head until an event seen links it.
        tips = tree.tips
        for p in self._parents_of(cid, ev):
            tips.pop(p, None)
            self._linked.put(p)
        if cid not in self._linked:
            tips[cid] = ev.clock
            if len(tips) > _MAX_TIPS:
                del tips[min(tips, key=lambda c: (tips[c], bytes(c)))]

    def _link_heads(self, tree: Tree) -> tuple[tuple[CID, ...], int]:
        """LAST_SEEN: the parents of a new event (the newest known heads, at most
        ``MAX_PARENTS``) and its clock (one more than theirs)."""
        tips = tree.tips
        newest = sorted(tips, key=lambda c: (tips[c], bytes(c)), reverse=True)[:MAX_PARENTS]
        if not newest:
            return (), 0
        return sort_parents(newest), 1 + tips[newest[0]]

    def _known_event(self, cid: CID) -> tuple[CID, EventDescriptor | RetainedEvent] | None:
        """(tree key, descriptor) of an event held in the cache, or (tree key, index
        entry) of one in a retained history (which holds no descriptors)."""
        entry: tuple[CID, EventDescriptor] | None = self._events.get(cid)
        if entry is not None:
            return entry
        for t in self._trees.values():
            if t.history is not None:
                ev = t.history.get(cid)
                if ev is not None:
                    return t.key, ev
        return None

    def _forward(
        self,
        now: float,
        tree: Tree,
        cid: CID,
        *,
        exclude: str | None = None,
        only: str | None = None,
        skip: frozenset[str] | set[str] = frozenset(),
        direct: Mapping[str, tuple[CID, ...] | None] = _NO_PEERS,
        pushed: int | None = None,
    ) -> None:
        """EVENT ``cid`` to every tree neighbour (or ``only`` one) but ``exclude`` and
        ``skip``, pruned by their summaries (tree filters); also to ``direct`` peers (a
        publisher's first hop, ``pushed``), each with its ``parents`` if not None."""
        entry = self._events.get(cid)
        if entry is None:
            return
        targets = [
            peer
            for peer in ([only] if only is not None else tree.neighbours())
            if peer != exclude and peer not in skip
        ]
        if not targets and not direct:
            return  # a leaf, the event from its parent: nothing to encode
        ev: EventDescriptor = entry[1]
        block = None
        if ev.topic != tree.key:
            desc = tree.versions.get(ev.topic)
            block = desc.encode() if desc is not None else None
        rpc = Event(topic=tree.key, event=ev.encode(), topic_block=block, pushed=pushed)
        data = encode_frame(rpc)  # one frame for every neighbour (but pruned edges)
        plain_rpc, plain_data = rpc, data
        asked: frozenset[str] = frozenset()
        if self._acks.waiting and self._acks.waits(cid):
            # (._acks) This node's event waits for holders: these peers are asked.
            asked = self._acks.ask_whom(tree, cid, targets, direct)
            ask_rpc = replace(rpc, ack=True)
            ask_data = encode_frame(ask_rpc)
        for peer in targets:
            if asked:
                rpc, data = (ask_rpc, ask_data) if peer in asked else (plain_rpc, plain_data)
            summary = self._target_summary(tree, peer) if peer != tree.parent else None
            if peer == tree.parent:
                self._guard.parent_sent(tree.key, peer, cid, up=True)  # it has it
                if self._own_filters(tree) is not None:
                    tree.edge(peer).up.add(cid)  # (tree filters) repaired like the rest
            if summary is None:
                self._send(now, peer, rpc, tree.name, data)
            elif not matches_any(summary, ev.attributes):
                self._prune_edge(tree, peer, cid)  # nobody there wants it
                continue
            else:
                self._send_pruned(now, tree, peer, rpc, data, summary, ev)
            tree.edge(peer).known.add(cid)
            self._count_forward(tree, peer, ev)
            if peer != tree.parent and now - ev.created_ts < self.config.heads_interval:
                # A live event changes the child's DIGEST window: it owes a DIGEST.
                self._guard.forwarded(tree.key, peer)
        for peer, parents in direct.items():
            if asked:
                rpc, data = (ask_rpc, ask_data) if peer in asked else (plain_rpc, plain_data)
            else:
                rpc, data = plain_rpc, plain_data
            if parents is None:
                self._send(now, peer, rpc, tree.name, data)
            else:  # a pruned first hop (:meth:`_first_hop`)
                self._send(now, peer, replace(rpc, parents=parents), tree.name)

    def _send_pruned(
        self,
        now: float,
        tree: Tree,
        peer: str,
        rpc: Event,
        data: bytes,
        summary: tuple[Filter, ...],
        ev: EventDescriptor,
    ) -> None:
        """An EVENT to a filtered subtree: with ``parents`` as it sees them, if it
        would not receive some of the event's own."""
        parents = self._parents_for(summary, ev)
        if parents is None:
            self._send(now, peer, rpc, tree.name, data)
        else:
            self._send(now, peer, replace(rpc, parents=parents), tree.name)

    def _offer(self, now: float, tree: Tree, cid: CID, recovered: bool) -> None:
        """Deliver ``cid`` once, after all its parents (causal order), or park it (gap
        repair: an unknown parent is fetched, on every branch of the DAG)."""
        stack: list[tuple[CID, CID, bool]] = [(tree.key, cid, recovered)]
        while stack:
            key, cur, rec = stack.pop()
            t = self._trees.get(key)
            if t is None or not (t.subscribed or t.followers) or cur in self._delivered:
                continue
            entry = self._events.get(cur)
            if entry is None:
                self._refetch_evicted(now, key, cur)  # (._repair) it waited too long
                continue
            ev: EventDescriptor = entry[1]
            if ev.created_ts < t.since:
                # History from before the subscription: not delivered, but it is the
                # boundary of the gap walk, so what waited for it can go now.
                for item in self._waiting.pop(cur, []):
                    self._waiting_count -= 1
                    stack.append(item)
                continue
            wait_on: CID | None = None
            unwanted = self._unwanted(t, ev)  # tree filters: nobody below wants it
            if self._waiting_count < self.config.max_waiting_events:
                for parent in self._parents_of(cur, ev):
                    if parent in self._delivered or parent in self._gave_up:
                        continue
                    pentry = self._events.get(parent)
                    if pentry is not None:
                        if pentry[1].clock >= ev.clock:
                            continue  # not an ancestor (a forged EVENT 'parents')
                        if pentry[0] != key or pentry[1].created_ts < t.since:
                            continue
                        if parent not in self._waiting and parent not in self._fetches:
                            # known but itself undelivered: offer it first
                            stack.append((key, parent, rec))
                    elif parent in self._seen:
                        continue  # seen long ago, evicted from the cache
                    elif unwanted:
                        continue  # its unknown parents are not ours to fetch
                    elif self._own_filters(t) is not None:
                        # Tree filters: most likely one our parent pruned for us.
                        # Wait a moment for it, never fetch it: a matching event
                        # lost on the way is anti-entropy's (per-edge DIGESTs).
                        grace = self.config.parent_grace
                        self._fetch(now, parent, "event", key, None, grace=grace, wait_only=True)
                    else:
                        # A live event's parent is usually on its way (concurrent
                        # publishers, another path): fetch it only if it does not come.
                        grace = 0.0 if rec else self.config.parent_grace
                        self._fetch(now, parent, "event", key, None, grace=grace)
                    if wait_on is None:
                        wait_on = parent
            if wait_on is not None:
                # Re-offered when ``wait_on`` is delivered; then the next parent counts.
                self._waiting.setdefault(wait_on, []).append((key, cur, rec))
                self._waiting_count += 1
                continue
            self._deliver(now, t, cur, ev, rec)
            for item in self._waiting.pop(cur, []):
                self._waiting_count -= 1
                stack.append(item)

    def restore_delivered(self, now: float, cids: Iterable[CID]) -> None:
        """The driver, at start: these events were delivered before a restart (its
        delivery log, oldest first). Gap repair's walk back stops at them, so the
        events a restart missed are delivered in causal order without first
        fetching the whole history again; they are not delivered a second time."""
        if self._trees:
            raise LocalProtocolError("restore_delivered comes before any subscription")
        for cid in cids:
            if not isinstance(cid, CID):
                raise LocalProtocolError("restore_delivered takes CIDs")
            self._delivered.put(cid)

    def _release(self, now: float, cid: CID) -> None:
        """Gap repair gave up on ``cid``: deliver what waited for it."""
        self._gave_up.put(cid)
        for key, ev_cid, rec in self._waiting.pop(cid, []):
            self._waiting_count -= 1
            tree = self._trees.get(key)
            if tree is not None:
                self._offer(now, tree, ev_cid, rec)

    def _deliver(
        self, now: float, tree: Tree, cid: CID, ev: EventDescriptor, recovered: bool
    ) -> None:
        self._delivered.put(cid)
        if tree.subscribed and (tree.filters is None or matches_any(tree.filters, ev.attributes)):
            self._emit(Deliver(topic_cid=tree.key, event_cid=cid, event=ev, recovered=recovered))
            # Fast topics say by which path the event came first (group, helper, tree).
            path = self._fast.delivered(now, tree, cid, ev)
            self._record(
                now,
                RecordKind.EVENT_DELIVERED,
                topic=tree.name,
                topic_cid=cid_str(tree.key),
                event=cid_str(cid),
                latency=max(0.0, now - ev.created_ts),
                recovered=recovered,
                **({} if path is None else {"path": path}),
            )
        else:
            self._fast.skipped(tree, cid)
        if tree.followers:
            self._on_meta_event(now, tree, ev)

    def _on_meta_event(self, now: float, meta: Tree, ev: EventDescriptor) -> None:
        """§5 Updating: a topic version published on the meta topic."""
        try:
            desc = TopicDescriptor.decode(ev.payload)
        except DescriptorError:
            self._drop(now, "invalid", topic=meta.name, event=cid_str(ev.cid))
            return
        refused = self._signing.topic_refused(desc) if ev.author != self.peer_id else None
        if refused is not None:
            self._drop(now, refused, topic=meta.name, event=cid_str(ev.cid))
            return
        for key in sorted(meta.followers, key=bytes):  # a set's order varies by process
            tree = self._trees.get(key)
            if tree is not None and desc.name == tree.name and desc.author == tree.author:
                self._learn_version(now, tree, desc)

    def _learn_version(self, now: float, tree: Tree, desc: TopicDescriptor) -> None:
        if desc.cid in tree.versions or len(tree.versions) >= _MAX_VERSIONS:
            return
        tree.versions[desc.cid] = desc
        self._version_of[desc.cid] = tree.key
        self._topic_blocks.put(desc.cid, desc)
        if tree.history is not None:
            self._retain_version(tree, desc)
        # Assign depths along known parent links; the deepest version is the latest.
        progress = True
        while progress:
            progress = False
            for cid, d in tree.versions.items():
                if cid not in tree.depth and d.parent is not None and d.parent in tree.depth:
                    tree.depth[cid] = tree.depth[d.parent] + 1
                    progress = True
                    if tree.depth[cid] > tree.depth[tree.latest.cid]:
                        old = tree.latest
                        tree.latest = d
                        self._emit(TopicUpdated(old_cid=old.cid, new_cid=cid, topic=d))
        if desc.cid not in tree.depth and desc.parent is not None:
            if desc.parent not in tree.versions:
                self._fetch(now, desc.parent, "topic", tree.key, None)
        for key, data, sender in self._stash.pop(desc.cid, []):
            t = self._trees.get(key)
            if t is not None:
                self._accept_event(
                    now, t, EventDescriptor.decode(data), sender=sender, recovered=True
                )

    # ------------------------------ acknowledgement levels: a holder (._acks)

    def blocks_held(self, now: float, cids: list[CID] | tuple[CID, ...]) -> None:
        """The driver: these blocks are stored and pinned here (retained events); the
        publishers waiting for them are told (STORED)."""
        for peer, key, cid in self._acks.held(cids):
            tree = self._trees.get(key)
            rpc = Stored(topic=key, event=cid)
            self._send(now, peer, rpc, tree.name if tree is not None else None, encode_frame(rpc))

    def _ack_before(self, peer: str, tree: Tree, rpc: Event, ev: EventDescriptor) -> bool:
        """An EVENT with ``ack``: whether its publisher itself asks (a relay forwards no
        ``ack``); a new event's block is then stored ``urgent``."""
        if rpc.ack is not True or ev.publisher != peer:
            return False
        if ev.cid not in self._seen:
            self._acks.ask(ev.cid, peer, tree.key)
        return True

    def _ack_after(self, now: float, peer: str, tree: Tree, ev: EventDescriptor) -> None:
        """...and once it is accepted (or a duplicate): answer when this node holds it."""
        acks = self._acks
        cid = ev.cid
        if tree.history is None or cid not in tree.history:
            acks.forget(cid)  # not retained here: no holder
            return
        if acks.is_held(cid):
            acks.forget(cid)
            self._send(now, peer, Stored(topic=tree.key, event=cid), tree.name)
            return
        if not acks.asked(cid):
            # Held before this node knew (a restart): the driver says so again.
            self._emit(StoreBlock(cid=cid, data=ev.encode(), own=False, retain=True, urgent=True))
        acks.ask(cid, peer, tree.key)
