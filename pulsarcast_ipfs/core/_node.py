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
:class:`~._guard.RelayGuard`, ``_fast`` :class:`~._fastgroup.FastGroups`, ``_admission``
:class:`~._admission.Admission`, ``_links`` :class:`~._links.PeerLinks`, ``_requests``
:class:`~._requests.PublishRequests`, ``_keyspace`` :class:`~._keyspace.Keyspace`); the others
are still mixins over :class:`~._base.NodeBase` (the shared state and helpers, and the
signatures one part calls in another, checked by mypy). :mod:`._moves` checks each
tree input against the transition table.

=====================  =========================================================
:mod:`._membership`    JOIN / JOIN_ACK / LEAVE, parent lost, acting root recheck
:mod:`._keyspace`      known peers' keyspace positions, the greedy next hop
                       (Algorithm 2; a component)
:mod:`._treestate`     the tree states and the transition table (data)
:mod:`._dissemination` verify, forward, deliver in causal order; topic versions
:mod:`._repair`        block fetches, gap repair, topic resolution, history fill
:mod:`._liveness`      PING/PONG, parents that lag or die, suspects (the link
                       figures and decisions: :mod:`._links`, a component)
:mod:`._admission`     token buckets and bans (flood protection; a component)
:mod:`._signqueue`     operations waiting for signatures; signature checks
                       (a component)
:mod:`._publish`       publish (Algorithm 3)
:mod:`._requests`      request to publish (Algorithm 4; a component)
:mod:`._topics`        create / update topic, subscribe, unsubscribe, read
:mod:`._historypages`  pages of the retained history (bodies read by the driver)
:mod:`._antientropy`   HEADS deltas and DIGESTs
:mod:`._push`          MEMBERS: a publisher's direct first hop
:mod:`._fastgroup`     fast groups: a publisher's events straight to the members
                       that asked, two hops at most (:mod:`._groupstate`;
                       a component)
:mod:`._summaries`     subtree summaries of filters (JOIN's summary, SUMMARY)
:mod:`._pruning`       pruning on the summaries (forward, ``parents``, what is wanted)
:mod:`._acks`          acknowledgement levels: the outbox, STORED from holders
                       (a component)
:mod:`._relays`        relays that lie: witnesses, parent scores, idle probes and
                       silent children (the decisions: :mod:`._guard`, a component)
=====================  =========================================================
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kademlia import InvalidPeerId
from pulsarcast_ipfs.records import RecordKind

from ._acks import AckBook
from ._admission import Admission
from ._antientropy import AntiEntropy
from ._codec import (
    Digest,
    Event,
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
from ._fastgroup import GROUP_RPCS, FastGroups, FastGroupState
from ._guard import RelayGuard
from ._historypages import HistoryPages
from ._io import Output
from ._joingate import JoinGate
from ._keyspace import Keyspace
from ._links import PeerLinks
from ._liveness import Liveness
from ._membership import Membership
from ._pruning import Pruning
from ._publish import Publishing
from ._push import FirstHopPush
from ._relays import RelayDefence
from ._repair import Repair
from ._requests import PublishRequests
from ._signqueue import SigningQueue
from ._summaries import Summaries
from ._topics import Topics
from ._tree import LRU, TreeDues

__all__ = ["PulsarcastNode"]


class PulsarcastNode(
    Topics,
    HistoryPages,
    Publishing,
    Dissemination,
    Repair,
    Membership,
    Liveness,
    AntiEntropy,
    FirstHopPush,
    Summaries,
    Pruning,
    RelayDefence,
):
    """One Pulsarcast node as a pure state machine (contract: docs/core-api.md).

    This class routes the inputs to the parts of the node (mixins over
    :class:`~._base.NodeBase`, and the components it holds) and collects their outputs
    and deadlines.
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
        self._keyspace = Keyspace(peer_id)
        self._outputs = []
        self._trees = {}
        self._tree_dues = TreeDues()
        self._version_of = {}
        c = self.config
        self._topic_blocks = LRU(1024)
        self._events = LRU(c.event_cache_size)  # cid -> (tree key, EventDescriptor)
        self._seen = LRU(c.seen_cache_size)
        self._linked = LRU(c.seen_cache_size)  # CIDs some seen event names as a parent
        self._delivered = LRU(c.delivered_cache_size)
        self._gave_up = LRU(c.seen_cache_size)
        self._waiting = {}  # parent -> (tree, ev, rec)
        self._waiting_count = 0
        self._stash = {}  # version -> events
        self._fetches = {}
        self._resolving = {}
        self._resume_since = {}
        self._pending_filters = {}  # subscribe(filter=) of a topic being resolved
        self._read_holders = {}  # read() -> _read_tree()
        self._links = PeerLinks(slow_parent_after=c.slow_parent_after, suspect_ttl=c.suspect_ttl)
        self._stale_told = LRU(c.rate_limit_peers)  # (peer, topic) -> LEAVE sent at
        self._admission = Admission(
            config=c, drop=self._drop, emit=self._emit, peer_failed=self._peer_failed
        )
        self._signing = SigningQueue(
            peer_id=peer_id,
            require_signatures=c.require_signatures,
            delegate_margin=c.delegate_margin,
            emit=self._emit,
            now=now,
        )
        self._requests = PublishRequests(
            peer_id=peer_id, config=c, trees=self._trees, signing=self._signing, host=self
        )
        self._seq = 0
        self._ping_at = now + rng.uniform(0.0, c.ping_interval)
        self._heads_at = now + rng.uniform(0.0, c.heads_interval)
        self._heads_tick = 0
        self._forward_counts = {"down": 0, "false_positive": 0, "pruned": 0}
        self._seen_parents = LRU(c.event_cache_size)  # event -> parents a pruned edge gave
        self._fast = FastGroups(
            peer_id=peer_id, config=c, trees=self._trees, seen=self._seen, host=self
        )
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
            subnet_watchers=c.subnet_children,
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
        if self._admission.banned(now, peer):
            return  # disconnected for flooding: ignored, without records, until the ban ends
        if not self._admission.admit(now, peer, rpc):
            return
        self._links.heard(now, peer)
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
            if (
                self._guard.was_witness(rpc.topic, peer)
                and not self._is_neighbour(rpc.topic, peer)
                and (rpc.heads or self._guard.is_witness(rpc.topic, peer))
            ):
                # (An empty HEADS from a former witness is no announcement: an idle
                # probe from a former parent, answered in _on_heads.)
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
            self._requests.on_request(now, peer, rpc)
        elif isinstance(rpc, RequestAck):
            self._requests.on_ack(now, peer, rpc)
        elif isinstance(rpc, Summary):
            self._on_summary(now, peer, rpc)
        elif isinstance(rpc, GROUP_RPCS):
            self._fast.receive(now, peer, rpc)
        elif isinstance(rpc, Stored):
            self._on_stored(now, peer, rpc)

    # ------------------------------------------------------------------ timers

    def get_timer(self) -> float | None:
        """The next deadline (seconds since the epoch), or ``None`` if there is none."""
        # The minimum over every deadline, without building a list (called after each input).
        best: float | None = None
        if self._trees:
            best = self._ping_at if self._ping_at <= self._heads_at else self._heads_at
            dues = self._tree_dues  # the trees' earliest, kept as they change
            earliest = dues.best if dues.valid else dues.earliest(self._trees.values())
            if earliest < best:
                best = earliest
        at = self._links.due
        if at is not None and (best is None or at < best):
            best = at
        at = self._fast.due
        if at is not None and (best is None or at < best):
            best = at
        at = self._guard.next_due()
        if at is not None and (best is None or at < best):
            best = at
        for f in self._fetches.values():
            if best is None or f.due < best:
                best = f.due
        at = self._requests.due
        if at is not None and (best is None or at < best):
            best = at
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
        at = self._links.due
        if at is not None and now >= at:
            self._check_lag(now)
        at = self._fast.due
        if at is not None and now >= at:
            self._fast.tick(now)
        at = self._guard.next_due()
        if at is not None and now >= at:
            self._score_parents(now)
        # The trees' deadlines, when one is due (a timer that fired for another
        # deadline does not walk every tree).
        dues = self._tree_dues
        if dues.earliest(self._trees.values()) <= now:
            for key, tree in list(self._trees.items()):
                if key not in self._trees:  # dropped meanwhile (the key is tree.key)
                    continue
                if tree.join is not None and tree.join.deadline <= now:
                    self._join_timed_out(now, tree)
                elif tree.recheck_at is not None and tree.recheck_at <= now:
                    self._recheck_root(now, tree)
        if dues.earliest(self._trees.values()) <= now:
            for tree in list(self._trees.values()):
                if tree.heads_due is not None and tree.heads_due <= now:
                    self._heads_due(now, tree)
                if tree.members_due is not None and tree.members_due <= now:
                    self._send_members(now, tree)
                if tree.summary_due is not None and tree.summary_due <= now:
                    self._summary_timer(now, tree)
        self._fetch_timers(now)
        self._requests.timers(now)
        if self._acks.waiting:
            self._offer_again(now)

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

    # ------------------------------------------------------ fast groups (._fastgroup)

    def fast_state(self, topic_cid: CID) -> FastGroupState:
        """This node's fast groups of a topic (any version's CID)."""
        return self._fast.state(self._tree_for(topic_cid))

    @property
    def fast_counts(self) -> dict[str, int]:
        """Deliveries of fast topics by the path of the first copy: ``group`` (from the
        publisher), ``helper`` (from a helper), ``tree``."""
        return self._fast.counts

    @property
    def banned_peers(self) -> dict[str, float]:
        """Peers ignored for flooding, with the time until which they are."""
        return self._admission.peers

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
            "requests": self._requests.waiting,
            "trees": len(self._trees),
        }
