"""The Pulsarcast node: PROTOCOL.md §5-§7 as a pure state machine.

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

Per topic the node keeps one :class:`Tree`, keyed by the CID of the topic's
*first version* (so a dissemination tree survives topic updates). Its state:

==============  ==============================================================
``parent``      the neighbour towards the author (``None``: root or not joined)
``children``    neighbours that joined through this node
``joined``      in the tree: acknowledged by ``parent``, or (acting) root
``join``        a JOIN in flight: peer, deadline, peers already tried
``subscribed``  the local app is subscribed (deliver events to it)
``followers``   (meta topics) topic trees that follow this meta topic
``since``       events created before this are history, not delivered
``recent``      the newest event CIDs seen (bounded; HEADS deltas, DIGESTs)
==============  ==============================================================

A tree's place in the dissemination tree (none, joining, joined, leaf, switching,
acting root, root) is a :class:`~._treestate.TreeState`, read from those fields by
:func:`~._treestate.tree_state`; the transition table is data in
:mod:`._treestate` (docs/protocol-notes.md renders it). The role reported in
``tree_changed`` records and ``TopicState.role``: ``root`` in the root states
(author, acting root), else ``subscriber`` if subscribed, ``relay`` if in the tree,
joining or with children, else ``none`` (the tree state is dropped).

Events (§5 "Forward"): verify (CID recomputed, topic version belongs to the
tree, publisher allowed by that version), drop duplicates (bounded seen-set),
store, forward to every neighbour but the sender, deliver in causal order
(an event waits until its parent is delivered; an unknown parent is fetched,
walking back until a known event or one created before ``since``; what is
found that way is delivered with ``recovered=True``). Anti-entropy between tree
neighbours (HEADS deltas and DIGESTs, :mod:`._antientropy`) closes the gaps that a
lost leaf event leaves in the DAG; a publisher's first hop goes straight to the
root and its children (MEMBERS, :mod:`._push`). Tree state: :mod:`._tree`.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, TypeVar

from multiformats import CID

from pulsarcast_ipfs.kademlia import InvalidPeerId, peer_position
from pulsarcast_ipfs.records import MetricRecord, RecordKind

from ._antientropy import AntiEntropy
from ._codec import (
    Digest,
    Event,
    Heads,
    Join,
    JoinAck,
    Leave,
    Members,
    Ping,
    Pong,
    RequestAck,
    RequestToPublish,
    Rpc,
    encode_frame,
)
from ._config import NodeConfig
from ._descriptors import (
    MAX_PARENTS,
    MAX_PAYLOAD_SIZE,
    PROTOCOL_VERSION,
    SIGNED_VERSION,
    EventDescriptor,
    EventLinking,
    PeerPolicy,
    TopicDescriptor,
    TopicOptions,
    _canonical_peer,
    author_statement,
    cid_str,
    decode_cached,
    format_created,
    sort_parents,
)
from ._errors import (
    DescriptorError,
    LocalProtocolError,
    NotAllowedToPublish,
    UnknownTopic,
)
from ._history import HistoryKey, HistoryOrder, TopicHistory
from ._io import (
    Deliver,
    DisconnectPeer,
    FetchBlock,
    HistoryPage,
    OperationDone,
    Output,
    Pending,
    PublishResult,
    ReleaseBlocks,
    Role,
    SendRpc,
    SignRequest,
    StoreBlock,
    TopicState,
    TopicUpdated,
)
from ._push import FirstHopPush
from ._signing import verify_signature
from ._tree import LRU, JoinAttempt, Tree
from ._treestate import ACTING_ROOT_STATES, ROOT_STATES, tree_state

__all__ = ["PulsarcastNode"]

_R = TypeVar("_R")
_Steps = Generator[dict[str, bytes], dict[str, bytes], _R]
"""An operation that may wait for signatures: it yields ``{label: data to sign}``
and is resumed with ``{label: signature}`` (docs/security.md "Signatures")."""

_MAX_VERSIONS = 256
_MAX_UNSENT = 256
_MAX_STASH = 256
_MAX_TIPS = 256  # DAG heads tracked per topic for LAST_SEEN linking
_HISTORY_FETCHES = 32  # history back-fill fetches in flight per node


def _in_force(until: dict[str, float], peer: str, now: float) -> bool:
    """Whether ``peer``'s entry in an expiring table (suspects, bans) still holds;
    an expired entry is removed."""
    end = until.get(peer)
    if end is None:
        return False
    if end <= now:
        del until[peer]
        return False
    return True


@dataclass(slots=True)
class _Bucket:
    """A token bucket (flood protection): ``tokens`` as of ``last``."""

    tokens: float
    last: float

    def take(self, now: float, rate: float, burst: float) -> bool:
        if now > self.last:
            self.tokens = min(burst, self.tokens + (now - self.last) * rate)
            self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


_LIMITED_OPS = {
    "JOIN": "join",
    "EVENT": "event",
    "HEADS": "event",
    "DIGEST": "event",
    "MEMBERS": "event",
    "REQUEST_TO_PUBLISH": "request",
}


_MIN_PROBE_WAIT: Final = 0.25
"""Seconds a probe PING after a late event waits at least (however short the link's
round trip): scheduling hiccups of a loaded machine are not lag."""


@dataclass(slots=True, kw_only=True)
class _PingWait:
    """PINGs to a parent not answered yet (lag detection, ``slow_parent_after``)."""

    since: float
    """When the oldest unanswered PING was sent."""
    sent: dict[int, float]
    """nonce -> when it was sent (bounded)."""
    probe_due: float | None = None
    """A probe PING went out after ``since`` overran; unanswered by then: lagging."""

    def due(self, slow_after: float) -> float:
        return self.probe_due if self.probe_due is not None else self.since + slow_after


@dataclass(slots=True, kw_only=True)
class _Fetch:
    kind: Literal["event", "topic", "history"]
    tree: CID | None
    hint: str | None
    attempts: int
    due: float
    outstanding: bool


@dataclass(slots=True, kw_only=True)
class _Request:
    tree: CID
    name: str
    author: str
    rpc: RequestToPublish
    attempts: int
    due: float
    via: str | None


@dataclass(slots=True, kw_only=True)
class _Op:
    """An operation waiting in the signing queue (one runs at a time, FIFO)."""

    id: str
    steps: _Steps[Any]
    public: bool
    """An API command: finish with an ``OperationDone`` output."""
    on_fail: Callable[[float, str], None] | None = None
    waiting: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # sign id -> label, data
    got: dict[str, bytes] = field(default_factory=dict)
    started: bool = False


class PulsarcastNode(AntiEntropy, FirstHopPush):
    """One Pulsarcast node as a pure state machine (contract: docs/core-api.md)."""

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
        self._outputs: list[Output] = []
        self._trees: dict[CID, Tree] = {}
        self._version_of: dict[CID, CID] = {}
        c = self.config
        self._topic_blocks = LRU(1024)
        self._events = LRU(c.event_cache_size)  # cid -> (tree key, EventDescriptor)
        self._seen = LRU(c.seen_cache_size)
        self._linked = LRU(c.seen_cache_size)  # CIDs some seen event names as a parent
        self._delivered = LRU(c.delivered_cache_size)
        self._gave_up = LRU(c.seen_cache_size)
        self._published_requests = LRU(c.request_cache_size)  # request id -> event CID
        self._waiting: dict[CID, list[tuple[CID, CID, bool]]] = {}  # parent -> (tree, ev, rec)
        self._waiting_count = 0
        self._stash: dict[CID, list[tuple[CID, bytes, str | None]]] = {}  # version -> events
        self._fetches: dict[CID, _Fetch] = {}
        self._resolving: dict[CID, list[tuple[str, CID | None]]] = {}
        self._resume_since: dict[CID, float] = {}
        self._read_holders: dict[CID, tuple[str, ...]] = {}  # read() -> _read_tree()
        self._requests: dict[str, _Request] = {}
        self._known: dict[str, int] = {}  # peer -> keyspace position
        self._suspect: dict[str, float] = {}
        self._last_heard: dict[str, float] = {}
        self._pings: dict[str, _PingWait] = {}  # parent -> PINGs it has not answered
        self._next_probe: dict[str, float] = {}  # parent -> no late-event probe before
        self._srtt: dict[str, float] = {}  # parent -> smoothed PING round trip (in time)
        self._lag_at: float | None = None  # when the next _PingWait falls due (or earlier)
        self._buckets = LRU(c.rate_limit_peers)  # (peer, class) -> _Bucket
        self._strikes = LRU(c.rate_limit_peers)  # peer -> [window start, count]
        self._banned: dict[str, float] = {}  # peer -> until
        self._limits = {
            "join": (c.join_rate, c.join_burst),
            "event": (c.event_rate, c.event_burst),
            "request": (c.request_rate, c.request_burst),
        }
        self._verified = LRU(4096)  # CIDs of topic versions whose signature checked out
        self._ops: deque[_Op] = deque()
        self._sign_waits: dict[str, _Op] = {}
        self._signing_requests: set[str] = set()  # requests to publish being signed
        self._op_now = now
        self._op_seq = 0
        self._seq = 0
        self._ping_at = now + rng.uniform(0.0, c.ping_interval)
        self._heads_at = now + rng.uniform(0.0, c.heads_interval)
        self._heads_tick = 0

    # ------------------------------------------------------------------ helpers

    def _emit(self, out: Output) -> None:
        self._outputs.append(out)

    def _record(self, now: float, kind: RecordKind, **fields: Any) -> None:
        self._emit(MetricRecord(kind=kind, ts=now, node=self.peer_id, fields=fields))

    def _send(
        self, now: float, peer: str, rpc: Rpc, topic: str | None, data: bytes | None = None
    ) -> None:
        """Queue ``rpc`` for ``peer``; ``data``: its frame, when already encoded."""
        if data is None:
            data = encode_frame(rpc)
        self._emit(SendRpc(peer=peer, rpc=rpc, data=data))
        if self.config.rpc_records:
            self._record(
                now, RecordKind.RPC_SENT, op=rpc.op, bytes=len(data), peer=peer, topic=topic
            )

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _dist(self, peer: str, tree: Tree) -> int:
        pos = self._known.get(peer)
        if pos is None:
            pos = peer_position(peer)
        return pos ^ tree.author_pos

    def _my_dist(self, tree: Tree) -> int:
        return self._pos ^ tree.author_pos

    def _is_suspect(self, now: float, peer: str) -> bool:
        return self._is_banned(now, peer) or _in_force(self._suspect, peer, now)

    def _next_hop(
        self, now: float, tree: Tree, exclude: Iterable[str] = (), *, suspects: bool = False
    ) -> str | None:
        """Algorithm 2: the known live peer closest to the author, strictly closer than us.

        ``suspects``: consider peers that failed recently too (an acting root's periodic
        recheck: a peer that failed during start-up or a partition may be back).
        """
        skip = set(exclude)
        skip.update(tree.children)  # never below one's own child (a reader's leaf JOIN)
        mine = self._my_dist(tree)
        best: tuple[int, str] | None = None
        target = tree.author_pos
        if not suspects and (self._banned or self._suspect):
            for peer, pos in self._known.items():
                if peer in skip or self._is_suspect(now, peer):
                    continue
                d = pos ^ target
                if d < mine and (best is None or (d, peer) < best):
                    best = (d, peer)
            return None if best is None else best[1]
        # Nobody is suspect or banned (or suspects count): only the distance matters,
        # and the skip set is consulted for the candidates that would win.
        for peer, pos in self._known.items():
            d = pos ^ target
            if d < mine and (best is None or (d, peer) < best) and peer not in skip:
                best = (d, peer)
        return None if best is None else best[1]

    def _tree_for(self, topic_cid: CID) -> Tree:
        if not isinstance(topic_cid, CID):
            raise LocalProtocolError(f"expected a topic CID, got {type(topic_cid).__name__}")
        key = self._version_of.get(topic_cid)
        tree = self._trees.get(key) if key is not None else None
        if tree is None:
            raise UnknownTopic(f"unknown topic {topic_cid}")
        return tree

    def _role(self, tree: Tree) -> Role:
        if tree_state(tree, self.peer_id) in ROOT_STATES:
            return "root"
        if tree.subscribed:
            return "subscriber"
        if tree.joined or tree.children or tree.join is not None:
            return "relay"
        return "none"

    def _tree_changed(self, now: float, tree: Tree, *, force: bool = False) -> None:
        tree.role = self._role(tree)
        self._members_changed(now, tree)
        self._send_due_history(now, tree)
        self._record(
            now,
            RecordKind.TREE_CHANGED,
            topic=tree.name,
            topic_cid=cid_str(tree.key),
            role=tree.role,
            parent=tree.parent,
            children=list(tree.children),
        )

    def _new_tree(self, now: float, root: TopicDescriptor) -> Tree:
        tree = self._trees.get(root.cid)
        if tree is not None:
            return tree
        tree = Tree(root=root, author_pos=peer_position(root.author), latest=root, since=now)
        tree.versions[root.cid] = root
        tree.depth[root.cid] = 0
        self._trees[root.cid] = tree
        self._version_of[root.cid] = root.cid
        self._topic_blocks.put(root.cid, root)
        if root.author == self.peer_id:
            tree.joined = True
            self._update_retention(now, tree)
        return tree

    def _drop_tree(self, tree: Tree) -> None:
        self._release_history(tree)
        self._trees.pop(tree.key, None)
        for v in tree.versions:
            if self._version_of.get(v) == tree.key:
                del self._version_of[v]

    def _wanted(self, tree: Tree) -> bool:
        return (
            tree.author == self.peer_id
            or tree.subscribed
            or tree.publishing
            or bool(tree.followers)
            or bool(tree.children)
            or tree.reading_until is not None
        )

    def _retains(self, tree: Tree) -> bool:
        """Whether this node keeps the topic's history (PROTOCOL.md §5 Persistence)."""
        return (
            tree.author == self.peer_id
            or tree.subscribed
            or bool(tree.followers)
            or tree.reading_until is not None
        )

    def _retain_version(self, tree: Tree, desc: TopicDescriptor) -> None:
        """A topic version of a retained history is pinned too: the events name it, and
        a reader must be able to check them after the author is gone."""
        own = desc.author == self.peer_id
        self._emit(StoreBlock(cid=desc.cid, data=desc.encode(), own=own, retain=True, announce=own))

    def _release_history(self, tree: Tree) -> None:
        """Stop keeping ``tree``'s history: unpin its events and topic versions."""
        if tree.history is None:
            return
        released = tree.history.clear()
        tree.history = None
        released += [c for c, d in tree.versions.items() if d.author != self.peer_id]
        if released:
            self._emit(ReleaseBlocks(cids=tuple(released)))

    def _update_retention(self, now: float, tree: Tree) -> None:
        """Start keeping the history when the tree becomes retained; stop (unpin) when not."""
        if self._retains(tree) and tree.key in self._trees:
            if tree.history is None:
                tree.history = TopicHistory(policy=self.config.retention)
                for desc in tree.versions.values():
                    self._retain_version(tree, desc)
                # What this node already holds of the topic seeds it.
                for cid, entry in self._events.items():
                    if entry[0] == tree.key:
                        self._retain(now, tree, cid, entry[1])
            return
        self._release_history(tree)

    def _retain(self, now: float, tree: Tree, cid: CID, ev: EventDescriptor) -> bool:
        """Keep ``ev`` in the retained history (pin it), evict what falls out, back-fill.

        Whether it was kept (and a ``StoreBlock`` with ``retain`` emitted)."""
        h = tree.history
        if h is None or not h.add(cid, ev, now):
            return False
        own = ev.publisher == self.peer_id
        self._emit(StoreBlock(cid=cid, data=ev.encode(), own=own, retain=True))
        evicted = h.enforce(now)
        if evicted:
            self._emit(ReleaseBlocks(cids=tuple(evicted)))
        if h.missing and tree.reading_until is not None:
            # A reader back-fills at once (an API call waits for it). Elsewhere a
            # missing parent is usually in flight (concurrent events arrive out of
            # order) or fetched by gap repair: the HEADS round back-fills what is left.
            self._fill_history(now, tree)
        return True

    def _fill_history(self, now: float, tree: Tree) -> None:
        """§5 History: fetch the parents the retained history links but lacks, so that
        every event of the topic (within retention) is reachable from any node."""
        h = tree.history
        if h is None:
            return
        in_flight = sum(1 for f in self._fetches.values() if f.kind == "history")
        for cid in sorted(h.missing, key=bytes):
            if cid in h:
                continue
            entry = self._events.get(cid)
            if entry is not None and entry[0] == tree.key:
                self._retain(now, tree, cid, entry[1])
                continue
            if cid in self._fetches:
                continue
            if in_flight >= _HISTORY_FETCHES:
                break
            hint = tree.parent or (tree.join.peer if tree.join is not None else None)
            self._fetch(now, cid, "history", tree.key, hint)
            in_flight += 1

    # ------------------------------------------------------------ tree upkeep

    def _ensure_joined(self, now: float, tree: Tree) -> None:
        """Algorithm 2: join towards the author unless already in the tree or joining."""
        if tree.author == self.peer_id:
            tree.joined = True
            return
        if tree.joined or tree.join is not None:
            return
        self._join_next(now, tree, set())

    def _reads_only(self, tree: Tree) -> bool:
        """A reader and nothing else: it may hang below a holder as a leaf."""
        return (
            tree.reading_until is not None
            and not (tree.subscribed or tree.publishing or tree.followers or tree.children)
            and tree.author != self.peer_id
        )

    def _leaf_hop(self, now: float, tree: Tree, tried: set[str]) -> str | None:
        """A reader's first choice: a holder of the history not tried yet."""
        if not tree.holders or not self._reads_only(tree):
            return None
        for peer in tree.holders:
            if peer not in tried and peer != tree.parent and not self._is_suspect(now, peer):
                return peer
        return None

    def _join_next(self, now: float, tree: Tree, tried: set[str]) -> None:
        leaf = self._leaf_hop(now, tree, tried)
        if leaf is not None:
            tried.add(leaf)
            self._send_join(now, tree, leaf, tried, leaf=True)
            return
        hop = self._next_hop(now, tree, tried)
        if hop is None and tree.parent is not None:
            # Moving away from a lagging parent, and nobody else took us: stay with it.
            tree.join = None
            return
        if hop is None:
            # No live peer strictly closer to the author: act as root (§6 root failover)
            # and look again later (the author may return, peers may appear).
            tree.join = None
            was = (tree.joined, tree.parent)
            tree.joined = True
            tree.parent = None
            tree.recheck_at = now + self.config.root_recheck_interval
            if was != (True, None):
                self._tree_changed(now, tree)
            return
        tried.add(hop)
        self._send_join(now, tree, hop, tried)

    def _send_join(
        self, now: float, tree: Tree, hop: str, tried: set[str], *, leaf: bool = False
    ) -> None:
        """JOIN ``hop``; ``tried`` (which includes it) is skipped if it fails."""
        tree.join = JoinAttempt(
            peer=hop, deadline=now + self.config.join_timeout, tried=tried, leaf=leaf
        )
        rpc = Join(topic=tree.key, descriptor=tree.root.encode(), leaf=leaf)
        self._send(now, hop, rpc, tree.name)

    def _join_timed_out(self, now: float, tree: Tree) -> None:
        assert tree.join is not None
        self._join_next(now, tree, tree.join.tried)  # retry via the next closest

    def _recheck_root(self, now: float, tree: Tree) -> None:
        """An acting root looks for a live peer closer to the author (§6)."""
        tree.recheck_at = None
        if tree_state(tree, self.peer_id) in ACTING_ROOT_STATES:
            hop = self._next_hop(now, tree) or self._next_hop(now, tree, suspects=True)
            if hop is None:
                tree.recheck_at = now + self.config.root_recheck_interval
            else:
                self._send_join(now, tree, hop, {hop})

    def _parent_lost(self, now: float, tree: Tree, *, avoid: str | None) -> None:
        """§6: a node that lost its parent re-joins through another peer; children stay."""
        tree.parent = None
        tree.joined = False
        tree.join = None
        tree.leaf = False
        tree.recheck_at = None
        self._tree_changed(now, tree)
        if not self._wanted(tree):
            self._drop_tree(tree)
            return
        self._join_next(now, tree, {avoid} if avoid else set())

    def _maybe_leave(self, now: float, tree: Tree) -> None:
        """§5 Unsubscribe: an empty relay leaves its parent, which may leave in turn."""
        if self._wanted(tree) or tree.key not in self._trees:
            return
        for peer in {p for p in (tree.parent, tree.join.peer if tree.join else None) if p}:
            self._send(now, peer, Leave(topic=tree.key), tree.name)
        tree.parent = None
        tree.joined = False
        tree.join = None
        self._tree_changed(now, tree)
        self._drop_tree(tree)

    def _peer_failed(self, now: float, peer: str) -> None:
        """A neighbour is gone: drop it from every tree, re-join where it was the parent."""
        self._suspect[peer] = now + self.config.suspect_ttl
        self._last_heard.pop(peer, None)
        self._pings.pop(peer, None)
        for tree in list(self._trees.values()):
            changed = False
            if peer in tree.children:
                del tree.children[peer]
                tree.edges.pop(peer, None)
                changed = True
            if tree.parent == peer:
                self._parent_lost(now, tree, avoid=peer)
                continue
            if tree.join is not None and tree.join.peer == peer:
                self._join_next(now, tree, tree.join.tried)
            if changed:
                self._tree_changed(now, tree)
                self._maybe_leave(now, tree)
        for req in self._requests.values():
            if req.via == peer:
                req.due = now

    # ------------------------------------------------------------------ inputs

    def set_known_peers(self, now: float, peers: Iterable[str]) -> None:
        """Routing-table snapshot plus connected peers (§3); replaces the previous one."""
        known: dict[str, int] = {}
        for peer in peers:
            if peer == self.peer_id:
                continue
            pos = self._known.get(peer)
            if pos is None:
                try:
                    pos = peer_position(peer)
                except InvalidPeerId as exc:
                    raise LocalProtocolError(str(exc)) from exc
            known[peer] = pos
        self._known = known
        for tree in self._trees.values():
            if tree_state(tree, self.peer_id) in ACTING_ROOT_STATES:
                if tree.recheck_at is None or tree.recheck_at > now:
                    tree.recheck_at = now

    def peer_unreachable(self, now: float, peer: str) -> None:
        """The driver gave up on ``peer`` after bounded retries (§6 "Failure handling")."""
        if peer != self.peer_id:
            self._peer_failed(now, peer)

    # ------------------------------------------------------- flood protection

    def _is_banned(self, now: float, peer: str) -> bool:
        return _in_force(self._banned, peer, now)

    def _admit(self, now: float, peer: str, rpc: Rpc) -> bool:
        """Per-peer token buckets for JOIN, EVENT/HEADS and REQUEST_TO_PUBLISH.

        Over the limit: drop (``event_dropped`` reason ``rate_limited``). A peer
        refused ``abuse_limit`` times within ``abuse_window`` is disconnected
        (:class:`DisconnectPeer`), dropped from every tree, and ignored for
        ``ban_time``. Pure: time comes from ``now``.
        """
        cls = _LIMITED_OPS.get(rpc.op)
        if cls is None:
            return True
        c = self.config
        rate, burst = self._limits[cls]
        key = (peer, cls)
        bucket: _Bucket | None = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(tokens=burst, last=now)
        self._buckets.put(key, bucket)
        if bucket.take(now, rate, burst):
            return True
        strikes: list[float] | None = self._strikes.get(peer)
        if strikes is None or now - strikes[0] > c.abuse_window:
            strikes = [now, 0.0]
        strikes[1] += 1
        self._strikes.put(peer, strikes)
        self._drop(now, "rate_limited", peer=peer)
        if strikes[1] >= c.abuse_limit:
            until = now + c.ban_time
            self._banned[peer] = until
            self._strikes.put(peer, [now, 0.0])
            self._emit(DisconnectPeer(peer=peer, reason=f"{rpc.op} flood", until=until))
            self._peer_failed(now, peer)
        return False

    @property
    def banned_peers(self) -> dict[str, float]:
        """Peers ignored for flooding, with the time until which they are."""
        return dict(self._banned)

    # ------------------------------------------------------------ signatures

    @property
    def _version(self) -> str:
        """The ``protocolVersion`` this node writes."""
        return SIGNED_VERSION if self.config.require_signatures else PROTOCOL_VERSION

    def _run(self, now: float, steps: _Steps[_R], *, public: bool = True) -> _R | Pending:
        """Run an operation: at once when signatures are off, else through the queue.

        Signing operations run one at a time, in order, so a node's own events
        chain (LAST_SEEN) exactly as they would without signatures.
        """
        if not self.config.require_signatures:
            self._op_now = now
            try:
                steps.send(None)  # type: ignore[arg-type]
            except StopIteration as stop:
                result: _R = stop.value
                return result
            steps.close()
            raise AssertionError("an operation asked for a signature with signatures off")
        self._op_seq += 1
        op = _Op(id=f"op-{self._op_seq}", steps=steps, public=public)
        self._ops.append(op)
        self._advance(now)
        return Pending(op=op.id)

    def _advance(self, now: float, value: dict[str, bytes] | None = None) -> None:
        """Start or resume the operation at the head of the queue, then the next ones."""
        while self._ops:
            op = self._ops[0]
            if op.started and value is None:
                return  # still waiting for its signatures
            op.started = True
            self._op_now = now
            try:
                want = op.steps.send(value)  # type: ignore[arg-type]
            except StopIteration as stop:
                self._finish(now, op, stop.value, None)
                value = None
                continue
            except LocalProtocolError as exc:
                self._finish(now, op, None, str(exc))
                value = None
                continue
            op.waiting.clear()
            op.got.clear()
            for label, data in want.items():
                self._op_seq += 1
                rid = f"sign-{self._op_seq}"
                op.waiting[rid] = (label, data)
                self._sign_waits[rid] = op
                self._emit(SignRequest(request_id=rid, data=data))
            return

    def _finish(self, now: float, op: _Op, result: Any, error: str | None) -> None:
        if self._ops and self._ops[0] is op:
            self._ops.popleft()
        for rid in op.waiting:
            self._sign_waits.pop(rid, None)
        op.waiting.clear()
        if op.public:
            self._emit(OperationDone(op=op.id, result=result, error=error))
        if error is not None and op.on_fail is not None:
            op.on_fail(now, error)

    def signed(self, now: float, request_id: str, signature: bytes) -> None:
        """The answer to a :class:`SignRequest`: this node's signature over its ``data``.

        A signature that does not verify against this node's peer ID (the driver
        signed with another key) fails the operation, as :meth:`sign_failed` does.
        """
        op = self._sign_waits.pop(request_id, None)
        if op is None:
            return  # its operation failed meanwhile (another signature of it failed)
        label, data = op.waiting.pop(request_id)
        if not isinstance(signature, bytes) or not verify_signature(self.peer_id, data, signature):
            self._abort(now, op, f"the signature for {request_id} is not {self.peer_id}'s")
            return
        op.got[label] = signature
        if not op.waiting:
            self._advance(now, dict(op.got))

    def sign_failed(self, now: float, request_id: str, reason: str) -> None:
        """The driver could not sign (Kubo down, no Ed25519 key): the operation fails."""
        op = self._sign_waits.pop(request_id, None)
        if op is None:
            return
        op.waiting.pop(request_id, None)
        self._abort(now, op, f"signing failed: {reason}")

    def _abort(self, now: float, op: _Op, error: str) -> None:
        op.steps.close()
        self._finish(now, op, None, error)
        self._advance(now)

    @property
    def pending_signatures(self) -> int:
        """Operations waiting for (or queued behind) signatures."""
        return len(self._ops)

    def _signed_topic(self, draft: TopicDescriptor) -> _Steps[TopicDescriptor]:
        if not draft.is_draft:
            return draft
        sigs = yield {"topic": draft.signing_bytes()}
        return draft.with_signature(sigs["topic"])

    def _signed_event(
        self, draft: EventDescriptor, tree: CID, author_signature: bytes | None = None
    ) -> _Steps[EventDescriptor]:
        if not draft.is_draft:
            return draft
        want = {"publisher": draft.signing_bytes()}
        if author_signature is None:
            want["author"] = draft.author_statement(tree)
        sigs = yield want
        author = author_signature if author_signature is not None else sigs["author"]
        return draft.with_signatures(author=author, publisher=sigs["publisher"])

    def _topic_refused(self, desc: TopicDescriptor) -> str | None:
        """Why a topic version from outside is refused (``unsigned``, ``bad_signature``)."""
        if desc.protocol_version == PROTOCOL_VERSION:
            return "unsigned" if self.config.require_signatures else None
        if desc.cid in self._verified:
            return None
        assert desc.signature is not None
        if not verify_signature(desc.author, desc.signing_bytes(), desc.signature):
            return "bad_signature"
        self._verified.put(desc.cid)
        return None

    def _event_refused(self, tree: Tree, ev: EventDescriptor) -> str | None:
        """Why an event is refused: unsigned, or a signature that does not check out."""
        if ev.protocol_version == PROTOCOL_VERSION:
            return "unsigned" if self.config.require_signatures else None
        assert ev.publisher_signature is not None and ev.author_signature is not None
        if not verify_signature(ev.publisher, ev.signing_bytes(), ev.publisher_signature):
            return "bad_signature"
        if not verify_signature(ev.author, ev.author_statement(tree.key), ev.author_signature):
            return "bad_signature"
        return None

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
            self._on_heads(now, peer, rpc)
        elif isinstance(rpc, Digest):
            self._on_digest(now, peer, rpc)
        elif isinstance(rpc, Members):
            self._on_members(now, peer, rpc)
        elif isinstance(rpc, Join):
            self._on_join(now, peer, rpc)
        elif isinstance(rpc, JoinAck):
            self._on_join_ack(now, peer, rpc)
        elif isinstance(rpc, Leave):
            self._on_leave(now, peer, rpc)
        elif isinstance(rpc, RequestToPublish):
            self._on_request(now, peer, rpc)
        elif isinstance(rpc, RequestAck):
            self._on_request_ack(now, peer, rpc)

    def _drop(self, now: float, reason: str, **fields: Any) -> None:
        self._record(now, RecordKind.EVENT_DROPPED, reason=reason, **fields)

    def _on_join(self, now: float, peer: str, rpc: Join) -> None:
        """Algorithm 2, receiving side: adopt the sender as a child, join upward if needed."""
        try:
            root = decode_cached(TopicDescriptor, rpc.descriptor, expected_cid=rpc.topic)
        except DescriptorError:
            self._drop(now, "invalid", peer=peer)
            return
        tree = self._trees.get(rpc.topic)
        refused = self._topic_refused(root) if tree is None else None
        if refused is not None:
            self._drop(now, refused, topic=root.name, peer=peer)
            self._send(now, peer, JoinAck(topic=rpc.topic, ok=False), root.name)
            return
        if tree is None:
            if len(self._trees) >= self.config.max_topics:
                self._drop(now, "too_many_topics", peer=peer)
                self._send(now, peer, JoinAck(topic=rpc.topic, ok=False), root.name)
                return
            tree = self._new_tree(now, root)
        if rpc.leaf:
            # A reader asks to hang below a holder of the history, whatever its
            # distance: it takes no children there, so no cycle can form.
            refuse = tree.parent == peer or tree.history is None or not tree.joined
        else:
            # Only a peer farther from the author may hang below us: no cycles. A
            # leaf takes no children at all, nor does a node becoming one.
            refuse = (
                tree.parent == peer
                or tree.leaf
                or (tree.join is not None and tree.join.leaf)
                or (tree.author != self.peer_id and self._dist(peer, tree) <= self._my_dist(tree))
            )
        if refuse:
            self._send(now, peer, JoinAck(topic=tree.key, ok=False), tree.name)
            if not self._wanted(tree) and tree.join is None and not tree.joined:
                self._drop_tree(tree)
            return
        self._adopt_child(now, tree, peer)

    def _adopt_child(self, now: float, tree: Tree, peer: str) -> None:
        new = peer not in tree.children
        tree.children[peer] = None
        self._last_heard[peer] = now
        self._send(now, peer, JoinAck(topic=tree.key, ok=True), tree.name)
        if new:
            tree.edges.pop(peer, None)
            self._tree_changed(now, tree)
            self._send_history(now, tree, peer)
            self._members_to_new_child(now, tree, peer)
        self._ensure_joined(now, tree)

    def _on_join_ack(self, now: float, peer: str, rpc: JoinAck) -> None:
        tree = self._trees.get(rpc.topic)
        if tree is None or tree.join is None or tree.join.peer != peer:
            if rpc.ok and (tree is None or tree.parent != peer):
                # A late acknowledgement from a peer we no longer want as parent.
                self._send(now, peer, Leave(topic=rpc.topic), tree.name if tree else None)
            return
        if not rpc.ok:
            self._join_next(now, tree, tree.join.tried)
            return
        old_parent = tree.parent
        tree.leaf = tree.join.leaf
        tree.join = None
        tree.parent = peer
        tree.joined = True
        tree.recheck_at = None
        self._last_heard[peer] = now
        self._tree_changed(now, tree)
        # Events published while outside the tree, then HEADS (repair after (re)join).
        for cid in tree.unsent:
            self._forward(now, tree, cid, exclude=None, only=peer)
        if old_parent is not None and old_parent != peer:
            # Moved away from a lagging parent (make before break): what we sent it
            # lately may still sit in its backlog; the new parent gets the last few
            # seconds' events at once (it drops those it has) rather than by HEADS
            # and block fetches.
            self._send(now, old_parent, Leave(topic=tree.key), tree.name)
            horizon = now - 4 * self.config.slow_parent_after
            for cid, created in list(tree.recent.items()):
                if created >= horizon and cid not in tree.unsent:
                    self._forward(now, tree, cid, exclude=None, only=peer)
        tree.unsent.clear()
        self._send_history(now, tree, peer)

    def _on_leave(self, now: float, peer: str, rpc: Leave) -> None:
        tree = self._trees.get(rpc.topic)
        if tree is None:
            return
        if peer in tree.children:
            del tree.children[peer]
            tree.edges.pop(peer, None)
            self._tree_changed(now, tree)
            self._maybe_leave(now, tree)
        elif tree.parent == peer:
            self._parent_lost(now, tree, avoid=peer)
        elif tree.join is not None and tree.join.peer == peer:
            self._join_next(now, tree, tree.join.tried)

    # ------------------------------------------------------------------ events

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
        refused = self._topic_refused(desc)
        if refused is not None:
            return refused
        self._learn_version(now, tree, desc)
        return desc

    def _on_event(self, now: float, peer: str, rpc: Event) -> None:
        tree = self._trees.get(rpc.topic)
        if tree is None:
            self._drop(now, "unknown_topic", peer=peer)
            self._send(now, peer, Leave(topic=rpc.topic), None)
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
                self._send(now, peer, Leave(topic=tree.key), tree.name)
        if peer == tree.parent and now - ev.created_ts > self.config.slow_parent_after / 2:
            self._probe_parent(now, peer)  # a late event: is the parent lagging?
        self._accept_event(
            now,
            tree,
            ev,
            sender=peer,
            recovered=False,
            block=rpc.topic_block,
            pushed=rpc.pushed,
        )

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
    ) -> bool:
        """§5 Forward: verify, drop duplicates, store, forward, deliver.

        ``forward=False``: history back-fill (kept and offered, not sent on)."""
        cid = ev.cid
        self._edge_knows(tree, sender, cid)
        pending = self._fetches.get(cid)
        if pending is not None and not pending.outstanding and pending.kind == "event":
            del self._fetches[cid]  # it came by itself within its grace
        if cid in self._seen:
            self._drop(now, "duplicate", topic=tree.name, event=cid_str(cid), peer=sender)
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
        refused = self._event_refused(tree, ev)
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
        self._events.put(cid, (tree.key, ev))
        if not self._retain(now, tree, cid, ev):
            self._emit(StoreBlock(cid=cid, data=ev.encode(), own=ev.publisher == self.peer_id))
        self._note_recent(tree, cid, ev)
        if forward:
            self._forward_received(now, tree, cid, sender, pushed)
        self._offer(now, tree, cid, recovered)
        return True

    def _note_recent(self, tree: Tree, cid: CID, ev: EventDescriptor) -> None:
        created = ev.created_ts
        tree.older.pop(cid, None)
        tree.recent[cid] = created
        tree.recent.move_to_end(cid)
        while len(tree.recent) > self.config.heads_size:
            old, ts = tree.recent.popitem(last=False)
            # Older CIDs stay advertisable (history HEADS on new edges, DIGESTs).
            tree.older[old] = ts
            if len(tree.older) > self.config.history_size:
                self._window_dropped(tree, *tree.older.popitem(last=False))
        # LAST_SEEN heads: an event seen is a head until an event seen links it.
        tips = tree.tips
        for p in ev.parents:
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

    def _known_event(self, cid: CID) -> tuple[CID, EventDescriptor] | None:
        """(tree key, descriptor) of an event held in the cache or a retained history."""
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
        direct: tuple[str, ...] = (),
        pushed: int | None = None,
    ) -> None:
        """EVENT ``cid`` to every tree neighbour (or ``only`` one) but ``exclude`` and
        ``skip``; also to ``direct`` peers (a publisher's first hop, ``pushed``)."""
        entry = self._events.get(cid)
        if entry is None:
            return
        ev: EventDescriptor = entry[1]
        block = None
        if ev.topic != tree.key:
            desc = tree.versions.get(ev.topic)
            block = desc.encode() if desc is not None else None
        rpc = Event(topic=tree.key, event=ev.encode(), topic_block=block, pushed=pushed)
        targets = [only] if only is not None else tree.neighbours()
        data = encode_frame(rpc)  # one frame for every neighbour
        for peer in targets:
            if peer != exclude and peer not in skip:
                self._send(now, peer, rpc, tree.name, data)
                tree.edge(peer).known.add(cid)
        for peer in direct:
            self._send(now, peer, rpc, tree.name, data)

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
            if self._waiting_count < self.config.max_waiting_events:
                for parent in ev.parents:
                    if parent in self._delivered or parent in self._gave_up:
                        continue
                    pentry = self._events.get(parent)
                    if pentry is not None:
                        if pentry[0] != key or pentry[1].created_ts < t.since:
                            continue
                        if parent not in self._waiting and parent not in self._fetches:
                            # known but itself undelivered: offer it first
                            stack.append((key, parent, rec))
                    elif parent in self._seen:
                        continue  # seen long ago, evicted from the cache
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
        if tree.subscribed:
            self._emit(Deliver(topic_cid=tree.key, event_cid=cid, event=ev, recovered=recovered))
            self._record(
                now,
                RecordKind.EVENT_DELIVERED,
                topic=tree.name,
                topic_cid=cid_str(tree.key),
                event=cid_str(cid),
                latency=max(0.0, now - ev.created_ts),
                recovered=recovered,
            )
        if tree.followers:
            self._on_meta_event(now, tree, ev)

    def _on_meta_event(self, now: float, meta: Tree, ev: EventDescriptor) -> None:
        """§5 Updating: a topic version published on the meta topic."""
        try:
            desc = TopicDescriptor.decode(ev.payload)
        except DescriptorError:
            self._drop(now, "invalid", topic=meta.name, event=cid_str(ev.cid))
            return
        refused = self._topic_refused(desc) if ev.author != self.peer_id else None
        if refused is not None:
            self._drop(now, refused, topic=meta.name, event=cid_str(ev.cid))
            return
        for key in list(meta.followers):
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

    # ------------------------------------------------------------------ fetches

    def _fetch(
        self,
        now: float,
        cid: CID,
        kind: Literal["event", "topic", "history"],
        tree: CID | None,
        hint: str | None,
        *,
        grace: float = 0.0,
    ) -> None:
        """Fetch ``cid`` (``FetchBlock``); after ``grace`` seconds if it may still
        arrive by itself (a live event's parent, on its way along another path)."""
        if cid in self._fetches:
            return
        if len(self._fetches) >= self.config.max_pending_fetches:
            if kind == "event":
                self._release(now, cid)
            return
        self._fetches[cid] = _Fetch(
            kind=kind,
            tree=tree,
            hint=hint,
            attempts=1,
            due=now + (grace or self.config.fetch_timeout),
            outstanding=not grace,
        )
        if not grace:
            self._emit(FetchBlock(cid=cid))

    def _fetch_failed(self, now: float, cid: CID, f: _Fetch) -> None:
        if f.attempts < self.config.fetch_attempts:
            f.attempts += 1
            f.outstanding = False
            f.due = now + self.config.fetch_retry_delay
            return
        del self._fetches[cid]
        if f.kind == "event" or (f.kind == "history" and cid in self._waiting):
            self._drop(now, "unrecoverable", event=cid_str(cid))
            self._release(now, cid)
        elif f.kind == "topic":
            self._stash.pop(cid, None)
            self._read_holders.pop(cid, None)
            if self._resolving.pop(cid, None) is not None:
                self._drop(now, "topic_unavailable", event=cid_str(cid))

    def block_fetched(self, now: float, cid: CID, data: bytes | None) -> None:
        """The answer to a :class:`FetchBlock` (``None``: not found or timed out)."""
        f = self._fetches.get(cid)
        if f is None or not f.outstanding:
            return
        if data is None:
            self._fetch_failed(now, cid, f)
            return
        del self._fetches[cid]
        if f.kind == "topic":
            try:
                desc = TopicDescriptor.decode(data, expected_cid=cid)
                refused = self._topic_refused(desc)
            except DescriptorError:
                refused = "invalid"
            if refused is not None:
                if refused != "invalid":
                    self._drop(now, refused, event=cid_str(cid))
                f.attempts = self.config.fetch_attempts
                self._fetches[cid] = f
                self._fetch_failed(now, cid, f)
                return
            self._topic_blocks.put(cid, desc)
            tree = self._trees.get(f.tree) if f.tree is not None else None
            if tree is not None and desc.name == tree.name and desc.author == tree.author:
                self._learn_version(now, tree, desc)
            self._continue_resolutions(now)
            return
        try:
            ev = decode_cached(EventDescriptor, data, expected_cid=cid)
        except DescriptorError:
            self._drop(now, "invalid", event=cid_str(cid))
            self._release(now, cid)
            return
        tree = self._trees.get(f.tree) if f.tree is not None else None
        if tree is None:
            return
        if f.kind == "history":
            # Back-fill of the retained history: kept (and delivered if it is due);
            # sent on, like gap repair, only if the subtree may still want it (created
            # since the subscription); then the next missing parents are fetched.
            if cid in self._seen:
                entry = self._known_event(cid)
                if entry is not None:
                    self._retain(now, tree, cid, entry[1])
            elif not self._accept_event(
                now,
                tree,
                ev,
                sender=f.hint,
                recovered=True,
                forward=bool(tree.children) and ev.created_ts >= tree.since,
            ):
                self._release(now, cid)
            if tree.history is not None and cid not in tree.history:
                tree.history.add(cid, ev, now)  # outside the policy: remembered as such
            self._fill_history(now, tree)
            return
        if not self._accept_event(now, tree, ev, sender=f.hint, recovered=True):
            self._release(now, cid)

    # ---------------------------------------------------- subscribe resolution

    def _continue_resolutions(self, now: float) -> None:
        for cid in list(self._resolving):
            root = self._resolve(now, cid)
            if root is None:
                continue
            # The loop body can re-enter this method and resolve ``cid`` first.
            purposes = self._resolving.pop(cid, None)
            if purposes is None:
                continue
            chain = self._chain(cid)
            tree = self._new_tree(now, root)
            for desc in reversed(chain):
                self._learn_version(now, tree, desc)
            for purpose, key in purposes:
                if purpose == "subscribe":
                    self._subscribe_tree(now, tree)
                elif purpose == "read":
                    self._read_tree(now, tree, self._read_holders.pop(cid, ()))
                elif key is not None and key in self._trees:
                    self._follow(now, tree, self._trees[key])

    def _chain(self, cid: CID) -> list[TopicDescriptor]:
        out: list[TopicDescriptor] = []
        cur: TopicDescriptor | None = self._topic_blocks.get(cid)
        while cur is not None and len(out) < _MAX_VERSIONS:
            out.append(cur)
            if cur.parent is None:
                break
            nxt: TopicDescriptor | None = self._topic_blocks.get(cur.parent)
            if nxt is None or nxt.name != cur.name:
                break
            cur = nxt
        return out

    def _resolve(self, now: float, cid: CID) -> TopicDescriptor | None:
        """The first version of the topic ``cid`` is a version of (fetching what lacks)."""
        cur: TopicDescriptor | None = self._topic_blocks.get(cid)
        if cur is None:
            self._fetch(now, cid, "topic", None, None)
            return None
        for _ in range(_MAX_VERSIONS):
            if cur.parent is None:
                return cur
            if cur.parent in self._version_of:
                return self._trees[self._version_of[cur.parent]].root
            parent: TopicDescriptor | None = self._topic_blocks.get(cur.parent)
            if parent is None:
                self._fetch(now, cur.parent, "topic", None, None)
                return None
            if parent.name != cur.name:
                return cur  # a sub-topic: its own first version
            cur = parent
        return cur

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
        at = self._lag_at
        if at is not None and (best is None or at < best):
            best = at
        for f in self._fetches.values():
            if best is None or f.due < best:
                best = f.due
        for r in self._requests.values():
            if best is None or r.due < best:
                best = r.due
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
        if self._lag_at is not None and now >= self._lag_at:
            self._check_lag(now)
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
        for cid, f in list(self._fetches.items()):
            if f.due > now:
                continue
            if f.outstanding:
                self._fetch_failed(now, cid, f)
            else:
                f.outstanding = True
                f.due = now + c.fetch_timeout
                self._emit(FetchBlock(cid=cid))
        for rid, req in list(self._requests.items()):
            if req.due <= now:
                if req.attempts >= c.request_attempts:
                    del self._requests[rid]
                    self._drop(now, "request_timeout", topic=req.name)
                else:
                    self._send_request(now, req)

    def _ping(self, now: float, peer: str) -> None:
        nonce = self._rng.getrandbits(62)
        wait = self._pings.get(peer)
        if wait is None:
            self._pings[peer] = _PingWait(since=now, sent={nonce: now})
            self._lag_check_by(now + self.config.slow_parent_after)
        elif len(wait.sent) < 8:
            wait.sent[nonce] = now
        self._send(now, peer, Ping(nonce=nonce), None)

    def _on_pong(self, now: float, peer: str, rpc: Pong) -> None:
        wait = self._pings.get(peer)
        sent = wait.sent.get(rpc.nonce) if wait is not None else None
        if sent is None:
            return
        rtt = now - sent
        if rtt > self.config.slow_parent_after:
            self._parent_lagging(now, peer)
        else:
            srtt = self._srtt.get(peer)
            self._srtt[peer] = rtt if srtt is None else 0.875 * srtt + 0.125 * rtt
            del self._pings[peer]
            if not self._pings:
                self._lag_at = None

    def _probe_parent(self, now: float, peer: str) -> None:
        """An event came from ``peer`` more than half ``slow_parent_after`` after it was
        created: PING it now. Unanswered within four smoothed round trips of that link
        (at least ``_MIN_PROBE_WAIT``, at most ``slow_parent_after``), it is lagging:
        its PONG waits behind the backlog that makes its events late. Clock skew or an
        old event only costs a PING (at most one per ``slow_parent_after``)."""
        wait = self._pings.get(peer)
        if (wait is not None and wait.probe_due is not None) or self._next_probe.get(
            peer, now
        ) > now:
            return
        slow_after = self.config.slow_parent_after
        self._next_probe[peer] = now + slow_after
        srtt = self._srtt.get(peer)
        patience = slow_after if srtt is None else min(slow_after, max(_MIN_PROBE_WAIT, 4 * srtt))
        self._ping(now, peer)
        self._pings[peer].probe_due = now + patience
        self._lag_check_by(now + patience)

    def _lag_check_by(self, due: float) -> None:
        if self._lag_at is None or due < self._lag_at:
            self._lag_at = due

    def _check_lag(self, now: float) -> None:
        """PINGs overran: probe once (a lost message is not lag), then call it lag."""
        slow_after = self.config.slow_parent_after
        for peer, wait in list(self._pings.items()):
            if wait.due(slow_after) > now:
                continue
            if wait.probe_due is None:
                wait.probe_due = now + slow_after
                self._ping(now, peer)
            else:
                self._parent_lagging(now, peer)
        self._lag_at = min((w.due(slow_after) for w in self._pings.values()), default=None)

    def _parent_lagging(self, now: float, peer: str) -> None:
        """§6 repair for a parent that answers too late: join a closer peer if there is
        one; the laggard stays the parent until the new one accepts (then LEAVE)."""
        self._pings.pop(peer, None)
        self._suspect[peer] = now + self.config.suspect_ttl
        for tree in list(self._trees.values()):
            if tree.parent != peer or tree.join is not None:
                continue
            hop = self._next_hop(now, tree, (peer,))
            if hop is None:
                continue  # nobody better: keep the slow parent
            self._send_join(now, tree, hop, {peer, hop})

    def _keep_alive(self, now: float) -> None:
        """§6 keep-alive: children PING parents; silence means the neighbour is dead."""
        c = self.config
        parents = {t.parent for t in self._trees.values() if t.parent is not None}
        dead_parent = c.dead_after * c.ping_interval
        for peer in [p for p in self._pings if p not in parents]:
            del self._pings[peer]
        for table in (self._next_probe, self._srtt):
            for peer in [p for p in table if p not in parents]:
                del table[peer]
        for peer in sorted(parents):
            heard = self._last_heard.setdefault(peer, now)
            if now - heard > dead_parent:
                self._peer_failed(now, peer)
            else:
                self._ping(now, peer)
        dead_child = 2 * c.dead_after * c.ping_interval
        for tree in list(self._trees.values()):
            gone = [
                p for p in tree.children if now - self._last_heard.setdefault(p, now) > dead_child
            ]
            for peer in gone:
                del tree.children[peer]
                tree.edges.pop(peer, None)
            if gone:
                self._tree_changed(now, tree)
                self._maybe_leave(now, tree)
        live = {p for t in self._trees.values() for p in t.neighbours()}
        for peer in [p for p in self._last_heard if p not in live]:
            del self._last_heard[peer]

    # ------------------------------------------------------------ API commands

    def _store_topic(self, desc: TopicDescriptor) -> None:
        self._topic_blocks.put(desc.cid, desc)
        self._emit(StoreBlock(cid=desc.cid, data=desc.encode(), own=True, announce=True))

    def create_topic(
        self,
        now: float,
        name: str,
        *,
        options: TopicOptions | None = None,
        parent: CID | None = None,
    ) -> CID | Pending:
        """Algorithm 1: create a topic (with its meta topic), or a sub-topic of ``parent``.

        Returns the topic's CID; with ``require_signatures``, :class:`Pending` (the
        CID comes in an :class:`OperationDone` once the descriptors are signed).
        """
        if not isinstance(name, str) or not name:
            raise LocalProtocolError("a topic name must be a non-empty string")
        if options is not None and not isinstance(options, TopicOptions):
            raise LocalProtocolError("options must be TopicOptions")
        if parent is not None:
            ptree = self._tree_for(parent)
            if ptree.author != self.peer_id:
                raise LocalProtocolError("only the author of a topic may create its sub-topics")
            if name == ptree.name:
                return self.update_topic(now, parent, options=options or ptree.latest.options)
            return self._run(now, self._create_sub_topic(ptree.key, name, options))
        return self._run(now, self._create_topic(name, options))

    # Every signature an operation needs is made before the operation changes any
    # state: a signing failure part-way leaves the node as it was (no topic
    # without its announcement, no sub-topic missing from its parent's links).

    def _create_topic(self, name: str, options: TopicOptions | None) -> _Steps[CID]:
        meta = yield from self._signed_topic(
            TopicDescriptor.new(
                name=f"meta-{name}",
                author=self.peer_id,
                now=self._op_now,
                options=TopicOptions(allowed_publishers=PeerPolicy(enabled=True)),  # author only
                protocol_version=self._version,
            )
        )
        topic = yield from self._signed_topic(
            TopicDescriptor.new(
                name=name,
                author=self.peer_id,
                now=self._op_now,
                options=options,
                links={"meta": meta.cid},
                protocol_version=self._version,
            )
        )
        announce = yield from self._signed_event(
            self._meta_draft(meta.cid, ((), 0), topic), meta.cid
        )
        now = self._op_now
        self._store_topic(meta)
        self._store_topic(topic)
        meta_tree = self._new_tree(now, meta)
        tree = self._new_tree(now, topic)
        self._subscribe_tree(now, tree)
        self._publish_event(now, meta_tree, announce, via="direct", inject_id=None)
        return topic.cid

    def _create_sub_topic(
        self, parent_key: CID, name: str, options: TopicOptions | None
    ) -> _Steps[CID]:
        ptree = self._trees.get(parent_key)
        if ptree is None:
            raise UnknownTopic(f"unknown topic {parent_key}")
        meta_cid = ptree.latest.meta
        assert meta_cid is not None
        topic = yield from self._signed_topic(
            TopicDescriptor.new(
                name=name,
                author=self.peer_id,
                now=self._op_now,
                options=options,
                parent=ptree.latest.cid,
                links={"meta": meta_cid},
                protocol_version=self._version,
            )
        )
        first = yield from self._signed_announcement(meta_cid, topic, None)
        # The parent gets a new version that links the sub-topic in its "#" map.
        links = dict(ptree.latest.links)
        links[name] = topic.cid
        version = yield from self._signed_version(parent_key, ptree.latest.options, links)
        second = yield from self._signed_announcement(ptree.root.meta, version, first)
        now = self._op_now
        self._store_topic(topic)
        tree = self._new_tree(now, topic)
        self._subscribe_tree(now, tree)
        self._announce(meta_cid, first)
        self._apply_version(parent_key, version)
        self._announce(ptree.root.meta, second)
        return topic.cid

    def _meta_draft(
        self, meta_version: CID, parents: tuple[tuple[CID, ...], int], topic: TopicDescriptor
    ) -> EventDescriptor:
        """The meta-topic event that announces ``topic`` (a new topic or version)."""
        return EventDescriptor(
            topic=meta_version,
            author=self.peer_id,
            publisher=self.peer_id,
            parents=parents[0],
            clock=parents[1],
            payload=topic.encode(),
            created=format_created(self._op_now),
            protocol_version=self._version,
        )

    def _signed_announcement(
        self, meta_key: CID | None, topic: TopicDescriptor, after: EventDescriptor | None
    ) -> _Steps[EventDescriptor | None]:
        """Sign the meta-topic event for ``topic`` (``None``: no meta tree here);
        it follows ``after`` (an announcement not yet published) or LAST_SEEN."""
        meta_tree = self._trees.get(meta_key) if meta_key is not None else None
        if meta_tree is None:
            return None
        links = (
            ((after.cid,), after.clock + 1) if after is not None else self._link_heads(meta_tree)
        )
        draft = self._meta_draft(meta_tree.latest.cid, links, topic)
        return (yield from self._signed_event(draft, meta_tree.key))

    def _announce(self, meta_key: CID | None, ev: EventDescriptor | None) -> None:
        meta_tree = self._trees.get(meta_key) if meta_key is not None else None
        if ev is not None and meta_tree is not None:
            self._publish_event(self._op_now, meta_tree, ev, via="direct", inject_id=None)

    def _signed_version(
        self, key: CID, options: TopicOptions, links: dict[str, CID]
    ) -> _Steps[TopicDescriptor]:
        tree = self._trees.get(key)
        if tree is None:
            raise UnknownTopic(f"unknown topic {key}")
        return (
            yield from self._signed_topic(
                TopicDescriptor.new(
                    name=tree.name,
                    author=self.peer_id,
                    now=self._op_now,
                    options=options,
                    parent=tree.latest.cid,
                    links=links,
                    protocol_version=self._version,
                )
            )
        )

    def _apply_version(self, key: CID, desc: TopicDescriptor) -> None:
        tree = self._trees[key]
        self._store_topic(desc)
        self._learn_version(self._op_now, tree, desc)

    def update_topic(self, now: float, topic_cid: CID, *, options: TopicOptions) -> CID | Pending:
        """§5 Updating: a new version (``parent`` = the latest), published on the meta topic.

        Returns the new version's CID, or :class:`Pending` (``require_signatures``).
        """
        tree = self._tree_for(topic_cid)
        if tree.author != self.peer_id:
            raise LocalProtocolError("only the author of a topic may update it")
        if not isinstance(options, TopicOptions):
            raise LocalProtocolError("options must be TopicOptions")
        return self._run(now, self._new_update(tree.key, options))

    def _new_update(self, key: CID, options: TopicOptions) -> _Steps[CID]:
        tree = self._trees.get(key)
        if tree is None:
            raise UnknownTopic(f"unknown topic {key}")
        version = yield from self._signed_version(key, options, dict(tree.latest.links))
        announce = yield from self._signed_announcement(tree.root.meta, version, None)
        self._apply_version(key, version)
        self._announce(tree.root.meta, announce)
        return version.cid

    def subscribe(self, now: float, topic_cid: CID, *, since: float | None = None) -> None:
        """Algorithm 2: subscribe to any version of a topic (fetching it if unknown).

        ``since`` (a restarted driver resuming a subscription, given the topic's first
        version): deliver events created from then on, recovering the ones missed.
        """
        if not isinstance(topic_cid, CID):
            raise LocalProtocolError("subscribe expects a topic CID")
        if since is not None and since < now:
            self._resume_since[topic_cid] = since
        self._when_resolved(now, topic_cid, "subscribe", self._subscribe_tree)

    def _subscribe_tree(self, now: float, tree: Tree) -> None:
        if tree.subscribed:
            return
        tree.subscribed = True
        tree.since = min(now, self._resume_since.pop(tree.key, now))
        self._update_retention(now, tree)
        self._record(now, RecordKind.SUBSCRIBED, topic=tree.name, topic_cid=cid_str(tree.key))
        meta_cid = tree.root.meta
        if meta_cid is not None:
            if meta_cid in self._trees:
                self._follow(now, self._trees[meta_cid], tree)
            else:
                self._resolving.setdefault(meta_cid, []).append(("follow", tree.key))
                self._continue_resolutions(now)
        self._ensure_joined(now, tree)
        self._tree_changed(now, tree)

    def _follow(self, now: float, meta: Tree, tree: Tree) -> None:
        if not tree.subscribed or tree.key in meta.followers:
            return
        if not meta.followers and not meta.subscribed:
            meta.since = now
        meta.followers.add(tree.key)
        self._update_retention(now, meta)
        self._ensure_joined(now, meta)

    def unsubscribe(self, now: float, topic_cid: CID) -> None:
        """§5 Unsubscribe: stay as a relay while children remain, else leave (pruning)."""
        if isinstance(topic_cid, CID) and topic_cid in self._resolving:
            self._resolving[topic_cid] = [
                p for p in self._resolving[topic_cid] if p[0] != "subscribe"
            ]
            if not self._resolving[topic_cid]:
                del self._resolving[topic_cid]
            return
        tree = self._tree_for(topic_cid)
        if not tree.subscribed:
            return
        tree.subscribed = False
        self._record(now, RecordKind.UNSUBSCRIBED, topic=tree.name, topic_cid=cid_str(tree.key))
        self._update_retention(now, tree)
        meta_cid = tree.root.meta
        if meta_cid is not None and meta_cid in self._trees:
            meta = self._trees[meta_cid]
            meta.followers.discard(tree.key)
            self._update_retention(now, meta)
            self._maybe_leave(now, meta)
        for lst in self._resolving.values():
            lst[:] = [p for p in lst if p != ("follow", tree.key)]
        self._tree_changed(now, tree)
        self._maybe_leave(now, tree)

    def publish(
        self,
        now: float,
        topic_cid: CID,
        payload: bytes,
        *,
        parent: CID | None = None,
        inject_id: str | None = None,
    ) -> PublishResult | Pending:
        """Algorithms 3 and 4: publish here if allowed, else request an allowed node to.

        With ``require_signatures`` this returns :class:`Pending`; the
        :class:`PublishResult` comes in an :class:`OperationDone` once signed.
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
        return self._run(now, self._publish(tree.key, payload, parent, inject_id))

    def _publish(
        self, key: CID, payload: bytes, parent: CID | None, inject_id: str
    ) -> _Steps[PublishResult]:
        tree = self._trees.get(key)
        if tree is None:
            raise UnknownTopic(f"unknown topic {key}")
        version = tree.latest
        created = format_created(self._op_now)
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
                protocol_version=self._version,
            )
            ev = yield from self._signed_event(draft, key)
            if key not in self._trees:
                raise UnknownTopic(f"topic {tree.name!r} was left while signing")
            cid = self._publish_event(self._op_now, tree, ev, via="direct", inject_id=inject_id)
            return PublishResult(
                status="published", event_cid=cid, request_id=None, inject_id=inject_id
            )
        signature: bytes | None = None
        if self.config.require_signatures:
            statement = author_statement(
                tree=key, author=self.peer_id, created=created, payload=payload
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
        )
        req = _Request(
            tree=tree.key,
            name=tree.name,
            author=tree.author,
            rpc=rpc,
            attempts=0,
            due=self._op_now,
            via=None,
        )
        self._requests[request_id] = req
        self._send_request(self._op_now, req)
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
            raise LocalProtocolError(f"unknown parent event {parent}")
        if entry[0] != tree.key:
            raise LocalProtocolError(f"parent event {parent} belongs to another topic")
        return parent

    def _publish_event(
        self,
        now: float,
        tree: Tree,
        ev: EventDescriptor,
        *,
        via: Literal["direct", "request"],
        inject_id: str | None,
    ) -> CID:
        """Store, record, deliver locally, send to every neighbour — in this very call.

        Dissemination never waits for the block to be provided (§5 Persistence, §8).
        """
        cid = ev.cid
        self._seen.put(cid)
        self._events.put(cid, (tree.key, ev))
        if not self._retain(now, tree, cid, ev):
            self._emit(StoreBlock(cid=cid, data=ev.encode(), own=True))
        self._note_recent(tree, cid, ev)
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
        self._offer(now, tree, cid, False)
        # An early HEADS round: a neighbour the EVENT did not go to (one that joined
        # meanwhile) hears of it soon, not at the next round (deltas only).
        if tree.heads_due is None:
            tree.heads_due = now + self.config.heads_after_publish
        return cid

    def _send_request(self, now: float, req: _Request) -> None:
        """Algorithm 4: REQUEST_TO_PUBLISH goes to ONE peer up the tree, never flooded."""
        tree = self._trees.get(req.tree)
        hop: str | None = None
        if tree is not None and tree.parent is not None:
            hop = tree.parent
        elif tree is not None:
            hop = self._next_hop(now, tree)
        req.attempts += 1
        req.due = now + self.config.request_timeout
        req.via = hop
        if hop is not None:
            self._send(now, hop, req.rpc, req.name)

    def _on_request(self, now: float, peer: str, rpc: RequestToPublish) -> None:
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
            hop = self._next_hop(now, probe, {peer})
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
        refused = self._topic_refused(root) if tree is None else None
        if refused is None:
            refused = self._request_refused(rpc)
        if refused is not None:
            self._refuse_request(now, rpc, root.name, refused)
            return
        if tree is None:
            tree = self._new_tree(now, root)
        parents, clock = self._link_heads(tree)
        if version.event_linking == EventLinking.CUSTOM:
            parent = rpc.parent
            pentry = self._known_event(parent) if parent is not None else None
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
            protocol_version=SIGNED_VERSION if signed else PROTOCOL_VERSION,
        )
        self._signing_requests.add(rpc.request_id)

        def failed(now: float, error: str) -> None:
            self._signing_requests.discard(rpc.request_id)
            self._refuse_request(now, rpc, root.name, "sign_failed")

        relink = version.event_linking != EventLinking.CUSTOM
        steps = self._publish_for(tree.key, rpc, root.name, draft, relink=relink)
        if not self.config.require_signatures:
            self._run(now, steps)
            return
        self._op_seq += 1
        self._ops.append(_Op(id=f"op-{self._op_seq}", steps=steps, public=False, on_fail=failed))
        self._advance(now)

    def _request_refused(self, rpc: RequestToPublish) -> str | None:
        """``unsigned`` / ``bad_signature`` for the requester's author signature."""
        if rpc.signature is None:
            return "unsigned" if self.config.require_signatures else None
        statement = author_statement(
            tree=rpc.topic, author=rpc.author, created=rpc.created, payload=rpc.payload
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
                parents, clock = self._link_heads(current)
                if parents != draft.parents:
                    draft = replace(draft, parents=parents, clock=clock)
        ev = yield from self._signed_event(draft, key, rpc.signature)
        self._signing_requests.discard(rpc.request_id)
        tree = self._trees.get(key)
        if tree is None:
            self._refuse_request(self._op_now, rpc, name, "unknown_topic")
            return
        now = self._op_now
        cid = self._publish_event(now, tree, ev, via="request", inject_id=rpc.inject_id)
        self._published_requests.put(rpc.request_id, cid)
        self._send(
            now,
            rpc.author,
            RequestAck(topic=rpc.topic, request_id=rpc.request_id, ok=True, event=cid),
            name,
        )

    def _on_request_ack(self, now: float, peer: str, rpc: RequestAck) -> None:
        req = self._requests.pop(rpc.request_id, None)
        if req is not None and not rpc.ok:
            self._drop(now, "request_refused", topic=req.name, peer=peer)

    # ----------------------------------------------------------------- queries

    def history(
        self,
        topic_cid: CID,
        *,
        order: HistoryOrder = "newest",
        after: CID | EventDescriptor | None = None,
        limit: int = 50,
    ) -> HistoryPage:
        """§5 History: one page of the topic's retained history in the history order
        (``(clock, CID bytes)``; ``newest`` first or ``oldest`` first), strictly after
        the cursor ``after`` (an event CID this node knows, or the cursor event's
        descriptor, e.g. fetched by the driver). A node that keeps no history of the
        topic (a relay) raises :class:`LocalProtocolError`: call :meth:`read` first.
        """
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
        events, more = h.page(order=order, after=key, limit=limit)
        return HistoryPage(
            events=tuple(events),
            next=events[-1][0] if events and more else None,
            complete=h.complete,
            missing=tuple(sorted(h.missing, key=bytes)),
            heads=tuple(sorted(h.heads, key=lambda c: h.key_of(c) or (0, b""), reverse=True)),
            retained=len(h),
        )

    def read(self, now: float, topic_cid: CID, *, holders: Iterable[str] = ()) -> None:
        """Read a topic's history without subscribing (a *reader*, PROTOCOL.md §5).

        The node resolves the topic (fetching its descriptor), joins its tree like a
        relay, keeps its history within the retention policy and back-fills it from
        its tree neighbours' HEADS and the events' parent links; it delivers nothing.
        It stays ``reader_ttl`` seconds after the last call, then leaves unless
        otherwise wanted. ``history`` pages through what it has gathered.

        ``holders``: peers known to hold the history (the driver found them in the
        DHT). While it only reads, the node first JOINs one of them as a *leaf*,
        whatever its distance to the author, and takes no children there: the tree's
        path towards the author may end at an acting root that holds nothing when
        the author is gone (docs/protocol-notes.md "Readers").
        """
        if not isinstance(topic_cid, CID):
            raise LocalProtocolError("read expects a topic CID")
        found: list[str] = []
        for peer in holders:
            if not isinstance(peer, str):
                raise LocalProtocolError("read: holders must be peer IDs")
            if peer != self.peer_id and peer not in found:
                found.append(peer)
        if found:
            if len(self._read_holders) >= 64:
                del self._read_holders[next(iter(self._read_holders))]
            self._read_holders[topic_cid] = tuple(found[:16])
        self._when_resolved(
            now,
            topic_cid,
            "read",
            lambda t, tree: self._read_tree(t, tree, self._read_holders.pop(topic_cid, ())),
        )

    def _when_resolved(
        self, now: float, topic_cid: CID, purpose: str, then: Callable[[float, Tree], None]
    ) -> None:
        """``then(now, tree)`` for topic ``topic_cid``'s tree, now if it is known, else
        once its descriptor chain is fetched (``purpose`` names it in the queue)."""
        key = self._version_of.get(topic_cid)
        if key is not None:
            then(now, self._trees[key])
            return
        self._resolving.setdefault(topic_cid, []).append((purpose, None))
        self._continue_resolutions(now)

    def _read_tree(self, now: float, tree: Tree, holders: tuple[str, ...] = ()) -> None:
        tree.reading_until = now + self.config.reader_ttl
        if holders:
            tree.holders = holders
        self._update_retention(now, tree)
        if tree.author != self.peer_id:
            if (
                holders
                and tree.join is None
                and tree.parent not in tree.holders
                and self._leaf_hop(now, tree, set()) is not None
            ):
                self._join_next(now, tree, set())  # below a holder (make before break)
            else:
                self._ensure_joined(now, tree)
        self._tree_changed(now, tree)

    def topic_state(self, topic_cid: CID) -> TopicState:
        """This node's place in the topic's tree."""
        tree = self._tree_for(topic_cid)
        return TopicState(
            topic_cid=tree.key,
            latest_cid=tree.latest.cid,
            name=tree.name,
            author=tree.author,
            role=self._role(tree),
            parent=tree.parent,
            children=tuple(tree.children),
            subscribed=tree.subscribed,
            joined=tree.joined,
            acting_root=tree_state(tree, self.peer_id) in ACTING_ROOT_STATES,
            heads=tuple(reversed(tree.recent)),
            synced=tree.joined and (tree.parent is None or tree.parent in tree.heads_from),
            retained=len(tree.history) if tree.history is not None else 0,
            retained_bytes=tree.history.bytes if tree.history is not None else 0,
        )

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
