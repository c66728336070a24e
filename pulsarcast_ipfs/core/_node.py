"""The Pulsarcast node: docs/protocol.md §5-§7 as a pure state machine.

Theory of operation
-------------------
A :class:`PulsarcastNode` is driven by exactly these inputs, each with ``now``:
an API command (create/update topic, subscribe, unsubscribe, publish), an RPC
received from an authenticated peer, a block fetched, a peer declared
unreachable, a routing-table snapshot, and a timer fired. It answers by queueing
outputs (``SendRpc``, ``StoreBlock``, ``FetchBlock``, ``Deliver``,
``TopicUpdated``, ``MetricRecord``). It owns no clock, no socket and no global
random state (the ``rng`` is injected); every timer is a deadline reported by
:meth:`get_timer` and served by :meth:`handle_timer`.

Per topic the node keeps one :class:`~._tree.Tree` (its fields are documented
there), keyed by the CID of the topic's *first version* (so a dissemination tree
survives topic updates).

A tree's place in the dissemination tree is a :class:`~._treestate.TreeState`, read
from those fields by :func:`~._treestate.tree_state`; the transition table is data in
:mod:`._treestate` (docs/protocol-notes.md renders it, with the roles reported).

Events (§5 "Forward") are verified, deduplicated, stored, forwarded and delivered
in causal order by :mod:`._dissemination` (an unknown parent is fetched: gap repair,
:mod:`._repair`, delivered with ``recovered=True``); anti-entropy between tree
neighbours (:mod:`._antientropy`) closes the gaps a lost leaf event leaves, and a
publisher's first hop goes straight to the root and its children (:mod:`._push`).

Layout
------
This module is the coordinator: :class:`PulsarcastNode` builds the state, routes
each input to the part that handles it and reports the next deadline. Some parts
are components, objects that own their state and touch no other part's (the node
holds one of each: ``_signing`` :class:`~._signqueue.SigningQueue`, ``_acks``
:class:`~._acks.AckBook`, ``_gate`` :class:`~._joingate.JoinGate`, ``_guard``
:class:`~._guard.RelayGuard`); the others are still mixins over
:class:`~._base.NodeBase` (the shared state and helpers, and the signatures one part
calls in another, checked by mypy). :mod:`._moves` checks each tree input against
the transition table.

=====================  =========================================================
:mod:`._membership`    JOIN / JOIN_ACK / LEAVE, parent lost, acting root recheck
:mod:`._treestate`     the tree states and the transition table (data)
:mod:`._dissemination` verify, forward, deliver in causal order; topic versions
:mod:`._repair`        block fetches, gap repair, topic resolution, history fill
:mod:`._liveness`      PING/PONG, lag detection, suspects
:mod:`._admission`     token buckets and bans (flood protection)
:mod:`._signqueue`     operations waiting for signatures; signature checks
                       (a component)
:mod:`._publish`       publish (Algorithm 3)
:mod:`._requests`      request to publish (Algorithm 4)
:mod:`._topics`        create / update topic, subscribe, unsubscribe, read
:mod:`._historypages`  pages of the retained history (bodies read by the driver)
:mod:`._antientropy`   HEADS deltas and DIGESTs
:mod:`._push`          MEMBERS: a publisher's direct first hop
:mod:`._fastgroup`     fast groups: a publisher's events straight to the members
                       that asked, two hops at most (:mod:`._groupstate`)
:mod:`._summaries`     subtree summaries of filters (JOIN's summary, SUMMARY)
:mod:`._pruning`       pruning on the summaries (forward, ``parents``, what is wanted)
:mod:`._acks`          acknowledgement levels: the outbox, STORED from holders
                       (a component)
=====================  =========================================================
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kademlia import InvalidPeerId, peer_position
from pulsarcast_ipfs.records import RecordKind

from ._acks import AckBook
from ._admission import Admission
from ._antientropy import AntiEntropy
from ._codec import (
    Digest,
    Event,
    GroupAck,
    GroupAssign,
    GroupEvent,
    GroupJoin,
    GroupLeave,
    Heads,
    Join,
    JoinAck,
    Leave,
    Members,
    MembersWant,
    Ping,
    Pong,
    RequestAck,
    RequestToPublish,
    Rpc,
    Stored,
    Summary,
    Watch,
    encode_frame,
)
from ._config import NodeConfig
from ._delegation import DelegateKey
from ._descriptors import _canonical_peer
from ._dissemination import Dissemination
from ._errors import LocalProtocolError
from ._fastgroup import FastGroups
from ._filters import matches_any, parse_filter
from ._guard import ACK_HEADS, Blame, RelayGuard
from ._historypages import HistoryPages
from ._io import Output
from ._joingate import JoinGate
from ._liveness import Liveness
from ._membership import Membership
from ._moves import entry_point
from ._pruning import Pruning
from ._publish import Publishing
from ._push import FirstHopPush
from ._repair import Repair
from ._requests import Requests
from ._signqueue import SigningQueue
from ._summaries import Summaries
from ._topics import Topics
from ._tree import LRU, Tree

__all__ = ["PulsarcastNode"]


class PulsarcastNode(
    Topics,
    HistoryPages,
    Publishing,
    Requests,
    Dissemination,
    Repair,
    Membership,
    Liveness,
    Admission,
    AntiEntropy,
    FirstHopPush,
    FastGroups,
    Summaries,
    Pruning,
):
    """One Pulsarcast node as a pure state machine (contract: docs/core-api.md).

    This class routes the inputs to the parts of the node (one mixin per concern,
    over :class:`~._base.NodeBase`) and collects their outputs and deadlines.
    """

    def __init__(
        self,
        *,
        peer_id: str,
        config: NodeConfig | None = None,
        rng: random.Random,
        now: float,
    ) -> None:
        try:
            canonical = _canonical_peer(peer_id)
        except InvalidPeerId as exc:
            raise LocalProtocolError(str(exc)) from exc
        if canonical != peer_id:
            raise LocalProtocolError(f"peer ID must be in canonical form ({canonical})")
        if not isinstance(rng, random.Random):
            raise LocalProtocolError("rng must be a random.Random (seeded by the driver)")
        self.peer_id = peer_id
        self.config = config if config is not None else NodeConfig()
        self._rng = rng
        self._pos = peer_position(peer_id)
        self._outputs = []
        self._trees = {}
        self._version_of = {}
        c = self.config
        self._topic_blocks = LRU(1024)
        self._events = LRU(c.event_cache_size)  # cid -> (tree key, EventDescriptor)
        self._seen = LRU(c.seen_cache_size)
        self._linked = LRU(c.seen_cache_size)  # CIDs some seen event names as a parent
        self._delivered = LRU(c.delivered_cache_size)
        self._gave_up = LRU(c.seen_cache_size)
        self._published_requests = LRU(c.request_cache_size)  # request id -> event CID
        self._waiting = {}  # parent -> (tree, ev, rec)
        self._waiting_count = 0
        self._stash = {}  # version -> events
        self._fetches = {}
        self._resolving = {}
        self._resume_since = {}
        self._pending_filters = {}  # subscribe(filter=) of a topic being resolved
        self._read_holders = {}  # read() -> _read_tree()
        self._requests = {}
        self._known = {}  # peer -> keyspace position
        self._suspect = {}
        self._last_heard = {}
        self._pings = {}  # parent -> PINGs it has not answered
        self._next_probe = {}  # parent -> no late-event probe before
        self._srtt = {}  # parent -> smoothed PING round trip (in time)
        self._rtt_min = {}  # parent -> shortest PING round trip seen (its link's delay)
        self._lag_at = None  # when the next _PingWait falls due (or earlier)
        self._buckets = LRU(c.rate_limit_peers)  # (peer, class) -> _Bucket
        self._strikes = LRU(c.rate_limit_peers)  # peer -> [window start, count]
        self._stale_told = LRU(c.rate_limit_peers)  # (peer, topic) -> LEAVE sent at
        self._banned = {}  # peer -> until
        self._limits = {
            "join": (c.join_rate, c.join_burst),
            "event": (c.event_rate, c.event_burst),
            "request": (c.request_rate, c.request_burst),
        }
        self._signing = SigningQueue(
            peer_id=peer_id,
            require_signatures=c.require_signatures,
            delegate_margin=c.delegate_margin,
            emit=self._emit,
            now=now,
        )
        self._signing_requests = set()  # requests to publish being signed
        self._seq = 0
        self._ping_at = now + rng.uniform(0.0, c.ping_interval)
        self._heads_at = now + rng.uniform(0.0, c.heads_interval)
        self._heads_tick = 0
        self._forward_counts = {"down": 0, "false_positive": 0, "pruned": 0}
        self._seen_parents = LRU(c.event_cache_size)  # event -> parents a pruned edge gave
        self._group_at = None  # fast groups: the next refresh and expiry round
        self._paths = LRU(c.event_cache_size)  # event -> the group path it came by first
        self._group_pending = LRU(c.event_cache_size)  # event -> tree: tree copy to forward
        self._helped = LRU(c.event_cache_size)  # events forwarded as a helper
        self._fast_counts = {}
        self._fast_wanted = {}  # subscribe(fast=True) calls waiting for their topic
        self._acks = AckBook(
            retry=c.ack_retry,
            retry_max=c.ack_retry_max,
            outbox_size=c.outbox_size,
            held=c.event_cache_size,
        )
        self._guard = RelayGuard(
            witnesses=c.witnesses,
            witness_grace=c.witness_grace,
            blame_window=c.blame_window,
            penalty_ttl=c.penalty_ttl,
            silent_rounds=max(6, math.ceil(c.silent_child_after / c.heads_interval))
            if c.silent_child_after > 0
            else 0,
            rng=rng,
        )
        self._gate = JoinGate(
            subnet_children=c.subnet_children,
            subnet_join_rate=c.subnet_join_rate,
            subnet_join_burst=c.subnet_join_burst,
            established_after=c.established_after,
            buckets=c.rate_limit_peers,
        )

    def signed(self, now: float, request_id: str, signature: bytes) -> None:
        """The answer to a :class:`SignRequest` (:meth:`SigningQueue.signed`)."""
        self._signing.signed(now, request_id, signature)

    def sign_failed(self, now: float, request_id: str, reason: str) -> None:
        """The driver could not sign: the operation fails (:meth:`SigningQueue.sign_failed`)."""
        self._signing.sign_failed(now, request_id, reason)

    def use_delegate(self, now: float, key: DelegateKey | None) -> None:
        """Sign own events with ``key`` from now on (:meth:`SigningQueue.use_delegate`)."""
        self._signing.use_delegate(now, key)

    @property
    def pending_signatures(self) -> int:
        """Operations waiting for (or queued behind) signatures."""
        return self._signing.pending

    def receive_rpc(self, now: float, peer: str, rpc: Rpc, *, size: int | None = None) -> None:
        """An RPC from the authenticated ``peer`` (§6)."""
        if peer == self.peer_id:
            raise LocalProtocolError("an RPC from this node itself")
        if self._banned and self._is_banned(now, peer):
            return  # disconnected for flooding: ignored, without records, until the ban ends
        if not self._admit(now, peer, rpc):
            return
        self._last_heard[peer] = now
        if self.config.rpc_records:
            topic_cid = rpc.topic_cid
            tree = self._trees.get(topic_cid) if topic_cid is not None else None
            self._record(
                now,
                RecordKind.RPC_RECEIVED,
                op=rpc.op,
                bytes=size if size is not None else len(encode_frame(rpc)),
                peer=peer,
                topic=tree.name if tree else None,
            )
        if isinstance(rpc, Event):
            self._on_event(now, peer, rpc)
        elif isinstance(rpc, Ping):
            self._send(now, peer, Pong(nonce=rpc.nonce), None)
        elif isinstance(rpc, Pong):
            self._on_pong(now, peer, rpc)
        elif isinstance(rpc, Heads):
            self._guard.child_heard(rpc.topic, peer)
            if self._guard.was_witness(rpc.topic, peer) and not self._is_neighbour(rpc.topic, peer):
                self._on_announce(now, peer, rpc)
            else:
                self._on_heads(now, peer, rpc)
        elif isinstance(rpc, Digest):
            self._guard.child_heard(rpc.topic, peer)
            self._on_digest(now, peer, rpc)
        elif isinstance(rpc, Watch):
            self._on_watch(now, peer, rpc)
        elif isinstance(rpc, Members):
            self._on_members(now, peer, rpc)
        elif isinstance(rpc, MembersWant):
            self._on_members_want(now, peer, rpc)
        elif isinstance(rpc, Join):
            self._on_join(now, peer, rpc)
        elif isinstance(rpc, JoinAck):
            self._on_join_ack(now, peer, rpc)
            if rpc.ok:
                self._join_ack_meta(now, peer, rpc)  # after: it may start another tree
        elif isinstance(rpc, Leave):
            self._on_leave(now, peer, rpc)
        elif isinstance(rpc, RequestToPublish):
            self._on_request(now, peer, rpc)
        elif isinstance(rpc, RequestAck):
            self._on_request_ack(now, peer, rpc)
        elif isinstance(rpc, Summary):
            self._on_summary(now, peer, rpc)
        elif isinstance(rpc, GroupEvent):
            self._on_group_event(now, peer, rpc)
        elif isinstance(rpc, GroupJoin):
            self._on_group_join(now, peer, rpc)
        elif isinstance(rpc, GroupAck):
            self._on_group_ack(now, peer, rpc)
        elif isinstance(rpc, GroupAssign):
            self._on_group_assign(now, peer, rpc)
        elif isinstance(rpc, GroupLeave):
            self._on_group_leave(now, peer, rpc)
        elif isinstance(rpc, Stored):
            self._on_stored(now, peer, rpc)

    # ------------------------------------------------------------------ timers

    def get_timer(self) -> float | None:
        """The next deadline (seconds since the epoch), or ``None`` if there is none."""
        # The minimum over every deadline, without building a list (called after each input).
        best: float | None = None
        if self._trees:
            best = self._ping_at if self._ping_at <= self._heads_at else self._heads_at
            for tree in self._trees.values():
                join = tree.join
                if join is not None and join.deadline < best:
                    best = join.deadline
                at = tree.recheck_at
                if at is not None and at < best:
                    best = at
                at = tree.heads_due
                if at is not None and at < best:
                    best = at
                at = tree.members_due
                if at is not None and at < best:
                    best = at
                at = tree.summary_due
                if at is not None and at < best:
                    best = at
        at = self._lag_at
        if at is not None and (best is None or at < best):
            best = at
        at = self._group_at
        if at is not None and (best is None or at < best):
            best = at
        at = self._guard.next_due()
        if at is not None and (best is None or at < best):
            best = at
        for f in self._fetches.values():
            if best is None or f.due < best:
                best = f.due
        for r in self._requests.values():
            if best is None or r.due < best:
                best = r.due
        if self._acks.waiting:
            at = self._acks.due()
            if at is not None and (best is None or at < best):
                best = at
        return best

    def handle_timer(self, now: float) -> None:
        """Serve every deadline that is due at ``now``."""
        c = self.config
        if now >= self._ping_at:
            self._ping_at = now + c.ping_interval
            self._keep_alive(now)
        if now >= self._heads_at:
            self._heads_at = now + c.heads_interval
            self._heads_tick += 1
            self._heads_round(now)
            self._guard_round(now)
        if self._lag_at is not None and now >= self._lag_at:
            self._check_lag(now)
        if self._group_at is not None and now >= self._group_at:
            self._group_tick(now)
        at = self._guard.next_due()
        if at is not None and now >= at:
            self._score_parents(now)
        for tree in list(self._trees.values()):
            if tree.key not in self._trees:
                continue
            if tree.join is not None and tree.join.deadline <= now:
                self._join_timed_out(now, tree)
            elif tree.recheck_at is not None and tree.recheck_at <= now:
                self._recheck_root(now, tree)
        for tree in list(self._trees.values()):
            if tree.heads_due is not None and tree.heads_due <= now:
                self._heads_due(now, tree)
            if tree.members_due is not None and tree.members_due <= now:
                self._send_members(now, tree)
            if tree.summary_due is not None and tree.summary_due <= now:
                self._summary_timer(now, tree)
        self._fetch_timers(now)
        self._request_timers(now)
        if self._acks.waiting:
            self._offer_again(now)

    # ------------------------------------------------- relays that lie (._guard)

    def _is_neighbour(self, topic: CID, peer: str) -> bool:
        tree = self._trees.get(topic)
        return tree is not None and (peer == tree.parent or peer in tree.children)

    def _publisher_of(self, cid: CID) -> str | None:
        entry = self._events.get(cid)
        return entry[1].publisher if entry is not None else None

    def _event_of(self, cid: CID) -> tuple[str, float] | None:
        if cid not in self._seen:
            return None
        entry = self._events.get(cid)
        return (entry[1].publisher, entry[1].created_ts) if entry is not None else None

    def _parent_of(self, key: CID) -> str | None:
        tree = self._trees.get(key)
        return tree.parent if tree is not None else None

    def _guard_round(self, now: float) -> None:
        """Every heads round: choose and refresh witnesses; probe idle children, drop
        silent ones."""
        guard = self._guard
        for tree in list(self._trees.values()):
            if tree.key not in self._trees:
                continue
            parent = tree.parent
            eligible = tree.joined and parent is not None and parent != tree.author
            plan = guard.plan(
                now,
                tree.key,
                eligible=eligible,
                members=self._members_known(tree),
                author=tree.author,
                exclude={
                    self.peer_id,
                    *(p for p in (parent, tree.join.peer if tree.join else None) if p),
                    *tree.children,
                },
            )
            if plan.sends:
                own = self._own_filters(tree)
                texts = tree.summary_sent if own is not None else None
                for peer, ttl in plan.sends:
                    filters = texts if ttl else None
                    self._send(
                        now, peer, Watch(topic=tree.key, ttl=ttl, filters=filters), tree.name
                    )
            if tree.children:
                silent, probes = guard.child_round(tree.key, tree.children)
                for child in silent:
                    self._evict_silent(now, tree, child)
                for child in probes:
                    if child in tree.children:
                        # An idle probe: a child answers with a HEADS (._guard).
                        self._send(now, child, Heads(topic=tree.key, heads=()), tree.name)

    @entry_point
    def _evict_silent(self, now: float, tree: Tree, child: str) -> None:
        """A child taking events but no anti-entropy: dropped, refused a while (._joingate)."""
        self._guard.penalise(now, child)
        self._gate.struck(now, child, now + self.config.penalty_ttl)
        self._record(
            now, RecordKind.PEER_PENALISED, topic=tree.name, peer=child, reason="silent_child"
        )
        self._release_child(now, tree, child)

    def _release_child(self, now: float, tree: Tree, child: str) -> None:
        """Drop ``child`` and tell it (LEAVE)."""
        del tree.children[child]
        tree.edges.pop(child, None)
        self._send(now, child, Leave(topic=tree.key), tree.name)
        self._tree_changed(now, tree)
        self._members_changed(now, tree)
        self._maybe_leave(now, tree)

    def _on_watch(self, now: float, peer: str, rpc: Watch) -> None:
        """(witness) A node asks for announcements of a topic's events."""
        tree = self._trees.get(rpc.topic)
        if tree is None or not tree.joined:
            return  # not in that tree (yet): the watcher finds another witness
        if rpc.ttl and peer in tree.children:
            # Nobody watches its own parent (or the peer it is joining): a child
            # that moved and whose LEAVE was lost. Let go and told so (a child that
            # does take us for its parent, its WATCH overtaken by its JOIN, joins
            # again), not kept to be probed and dropped as silent.
            self._release_child(now, tree, peer)
            if rpc.topic not in self._trees:
                return
        filters = None
        if rpc.filters is not None:
            filters = tuple(parse_filter(t) for t in rpc.filters)  # checked by the codec
        if not self._guard.on_watch(now, tree.key, peer, rpc.ttl, filters):
            return
        # The answer: our newest few events it wants (maybe none), at once.
        entries: list[tuple[CID, float]] = []
        for cid, created in reversed(tree.recent.items()):
            if len(entries) >= ACK_HEADS:
                break
            entry = self._events.get(cid)
            if filters is not None and (
                entry is None or not matches_any(filters, entry[1].attributes)
            ):
                continue
            entries.append((cid, created))
        self._send(now, peer, Heads(topic=tree.key, heads=tuple(entries)), tree.name)

    def _on_announce(self, now: float, peer: str, rpc: Heads) -> None:
        """(watcher) A witness's HEADS: fetch, after the grace, what has not come."""
        tree = self._trees.get(rpc.topic)
        if tree is None:
            return
        cids = self._guard.announced(
            now,
            tree.key,
            peer,
            rpc.heads,
            parent=tree.parent,
            publisher_of=self._publisher_of,
            seen=self._seen.__contains__,
        )
        if not cids:
            return
        bound = self._heads_bound(now, tree)
        grace = self.config.witness_grace
        if tree.parent is not None:
            grace += max(0.0, self._lag_limit(tree.parent) - self.config.slow_parent_after)
        hint = tree.parent if tree.parent is not None else peer
        created = dict(rpc.heads)
        for cid in cids:
            if cid in self._seen or cid in self._fetches or created[cid] < bound:
                continue
            # The fetched copy is not sent back to the parent (hint): the parent's own
            # copy, if it comes, is what scores it.
            self._fetch(now, cid, "event", tree.key, hint, grace=grace)

    def _score_parents(self, now: float) -> None:
        for blame in self._guard.due(now, parent_of=self._parent_of, event_of=self._event_of):
            tree = self._trees.get(blame.tree)
            if tree is not None and tree.parent == blame.parent:
                self._leave_bad_parent(now, tree, blame)

    @entry_point
    def _leave_bad_parent(self, now: float, tree: Tree, blame: Blame) -> None:
        """A parent that withheld what witnesses announced: LEAVE it, avoid it a while,
        re-join through another peer (children kept)."""
        guard = self._guard
        guard.penalise(now, blame.parent)
        self._gate.struck(now, blame.parent, now + self.config.penalty_ttl)
        guard.parent_left(tree.key, blame.parent)
        self._record(
            now,
            RecordKind.PEER_PENALISED,
            topic=tree.name,
            peer=blame.parent,
            reason="withheld",
            publisher=blame.publisher,
            misses=blame.misses,
        )
        self._send(now, blame.parent, Leave(topic=tree.key), tree.name)
        self._parent_lost(now, tree, avoid=blame.parent)

    # ------------------------------------------------------- Sybil joins (._joingate)

    def set_peer_subnets(self, now: float, subnets: Mapping[str, str]) -> None:
        """Peer -> colocation key (the network of its address: ``colocation_key`` of a
        multiaddr, a /24 or /64); replaces the previous mapping, which the node only
        reads (a driver may share one between nodes). Peers not in it are not
        counted by subnet (docs/protocol-notes.md "Sybil joins")."""
        if not isinstance(subnets, Mapping):
            raise LocalProtocolError("subnets must be a mapping of peer ID to key")
        self._gate.set_subnets(subnets)

    @property
    def join_gate_counts(self) -> dict[str, int]:
        """JOINs refused as colocated, and dropped as a subnet's flood."""
        return self._gate.counts

    @property
    def guard_counts(self) -> dict[str, int]:
        """Parents left as withholding, silent children dropped, silent witnesses."""
        return self._guard.counts

    # ----------------------------------------------------------------- outputs

    def take_outputs(self) -> list[Output]:
        """Drain the output queue, in order."""
        out, self._outputs = self._outputs, []
        return out

    @property
    def memory_usage(self) -> dict[str, int]:
        """Sizes of the bounded structures (for tests and resource samples)."""
        return {
            "seen": len(self._seen),
            "delivered": len(self._delivered),
            "events": len(self._events),
            "fetches": len(self._fetches),
            "waiting": self._waiting_count,
            "requests": len(self._requests),
            "trees": len(self._trees),
        }
