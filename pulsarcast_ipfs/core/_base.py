"""What the parts of :class:`~._node.PulsarcastNode` share: its state and helpers.

The node is one object whose methods live in modules by concern (membership,
dissemination, repair, liveness, admission, signing queue, publishing, requests
to publish, topic commands, anti-entropy, first-hop push). Each module defines a
mixin over :class:`NodeBase`, which declares, once, the state they share (set in
``PulsarcastNode.__init__``) and the signatures of the methods one module calls in
another (for the type checker only: at run time the method resolution order finds
the one definition). mypy checks every definition against its declaration here.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.records import MetricRecord, RecordKind

from ._codec import (
    Digest,
    Event,
    Heads,
    Join,
    JoinAck,
    Leave,
    Members,
    MembersWant,
    Pong,
    Rpc,
    encode_frame,
)
from ._config import NodeConfig
from ._descriptors import EventDescriptor, TopicDescriptor
from ._errors import LocalProtocolError, UnknownTopic
from ._filters import Filter
from ._guard import RelayGuard
from ._history import RetainedEvent
from ._io import (
    Output,
    Role,
    SendRpc,
)
from ._joingate import JoinGate
from ._tree import LRU, Tree, TreeDues

if TYPE_CHECKING:
    from ._acks import AckBook
    from ._admission import Admission
    from ._fastgroup import FastGroups
    from ._keyspace import Keyspace
    from ._links import PeerLinks
    from ._repair import _Fetch
    from ._requests import PublishRequests
    from ._signqueue import SigningQueue

__all__ = ["NodeBase"]

_MAX_VERSIONS = 256


class NodeBase:
    """The state and helpers every part of the node uses (see the module docstring)."""

    # The node's state, shared by the modules (set in PulsarcastNode.__init__).
    peer_id: str
    config: NodeConfig
    _rng: random.Random
    _outputs: list[Output]
    _trees: dict[CID, Tree]
    _tree_dues: TreeDues
    """The earliest deadline of ``_trees`` (every tree in it has ``dues`` set to this)."""
    _version_of: dict[CID, CID]
    _topic_blocks: LRU
    _events: LRU
    _seen: LRU
    _linked: LRU
    _delivered: LRU
    _gave_up: LRU
    _waiting: dict[CID, list[tuple[CID, CID, bool]]]
    _waiting_count: int
    _stash: dict[CID, list[tuple[CID, bytes, str | None]]]
    _fetches: dict[CID, _Fetch]
    _resolving: dict[CID, list[tuple[str, CID | None]]]
    _resume_since: dict[CID, float]
    _pending_filters: dict[CID, tuple[Filter, ...] | None]
    _read_holders: dict[CID, tuple[str, ...]]
    _requests: PublishRequests
    _keyspace: Keyspace
    _links: PeerLinks
    _in_tree_input: bool = False  # inside a checked tree input (._moves)
    _stale_told: LRU
    _admission: Admission
    _signing: SigningQueue
    _seq: int
    _ping_at: float
    _heads_at: float
    _heads_tick: int
    _forward_counts: dict[str, int]
    _seen_parents: LRU
    _fast: FastGroups
    _guard: RelayGuard
    _acks: AckBook
    _gate: JoinGate

    if TYPE_CHECKING:
        # Methods defined in one module (named above each group) and called from another.

        # _membership
        def _role(self, tree: Tree) -> Role: ...

        def _tree_changed(self, now: float, tree: Tree, *, force: bool = False) -> None: ...

        def _new_tree(self, now: float, root: TopicDescriptor) -> Tree: ...

        def _next_hop(
            self, now: float, tree: Tree, exclude: Iterable[str] = (), *, suspects: bool = False
        ) -> str | None: ...

        def _ensure_joined(self, now: float, tree: Tree) -> None: ...

        def _leaf_hop(self, now: float, tree: Tree, tried: set[str]) -> str | None: ...

        def _join_next(self, now: float, tree: Tree, tried: set[str]) -> None: ...

        def _send_join(
            self,
            now: float,
            tree: Tree,
            hop: str,
            tried: set[str],
            *,
            leaf: bool = False,
            single: bool = False,
            up: bool = False,
            away: bool = False,
        ) -> None: ...

        def _join_timed_out(self, now: float, tree: Tree) -> None: ...

        def _recheck_root(self, now: float, tree: Tree) -> None: ...

        def _maybe_leave(self, now: float, tree: Tree) -> None: ...

        def _stale_edge(self, now: float, peer: str, topic: CID, name: str | None) -> None: ...

        def _parent_lost(self, now: float, tree: Tree, *, avoid: str | None) -> None: ...

        def _heads_bound(self, now: float, tree: Tree) -> float: ...

        def _peer_failed(self, now: float, peer: str) -> None: ...

        def _on_join(self, now: float, peer: str, rpc: Join) -> None: ...

        def _adopt_child(
            self, now: float, tree: Tree, peer: str, *, meta: bool = False
        ) -> None: ...

        def _on_join_ack(self, now: float, peer: str, rpc: JoinAck) -> None: ...

        def _on_leave(self, now: float, peer: str, rpc: Leave) -> None: ...

        # _dissemination
        def _on_event(self, now: float, peer: str, rpc: Event) -> None: ...

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
        ) -> bool: ...

        def _note_recent(self, tree: Tree, cid: CID, ev: EventDescriptor) -> None: ...

        def _link_heads(self, tree: Tree) -> tuple[tuple[CID, ...], int]: ...

        def _known_event(self, cid: CID) -> tuple[CID, EventDescriptor | RetainedEvent] | None: ...

        def _forward(
            self,
            now: float,
            tree: Tree,
            cid: CID,
            *,
            exclude: str | None = None,
            only: str | None = None,
            skip: frozenset[str] | set[str] = frozenset(),
            direct: Mapping[str, tuple[CID, ...] | None] = ...,
            pushed: int | None = None,
        ) -> None: ...

        def _offer(self, now: float, tree: Tree, cid: CID, recovered: bool) -> None: ...

        def _release(self, now: float, cid: CID) -> None: ...

        def _learn_version(self, now: float, tree: Tree, desc: TopicDescriptor) -> None: ...

        # _repair
        def _fetch_now(self, now: float, cid: CID) -> None: ...

        def _refetch_evicted(self, now: float, key: CID, cid: CID) -> None: ...

        def _checked_topic(self, data: bytes, cid: CID) -> TopicDescriptor | str: ...

        def _retain_version(self, tree: Tree, desc: TopicDescriptor) -> None: ...

        def _release_history(self, tree: Tree) -> None: ...

        def _update_retention(self, now: float, tree: Tree) -> None: ...

        def _retain(self, now: float, tree: Tree, cid: CID, ev: EventDescriptor) -> bool: ...

        def _fill_history(self, now: float, tree: Tree) -> None: ...

        def _fetch(
            self,
            now: float,
            cid: CID,
            kind: Literal["event", "topic", "history"],
            tree: CID | None,
            hint: str | None,
            *,
            grace: float = 0.0,
            wait_only: bool = False,
        ) -> None: ...

        def _fetch_timers(self, now: float) -> None: ...

        def _continue_resolutions(self, now: float) -> None: ...

        # _liveness
        def _is_suspect(self, now: float, peer: str) -> bool: ...

        def _on_pong(self, now: float, peer: str, rpc: Pong) -> None: ...

        def _probe_parent(self, now: float, peer: str) -> None: ...

        def _check_lag(self, now: float) -> None: ...

        def _keep_alive(self, now: float) -> None: ...

        # _publish
        def _publish_event(
            self,
            now: float,
            tree: Tree,
            ev: EventDescriptor,
            *,
            via: Literal["direct", "request"],
            inject_id: str | None,
        ) -> CID: ...

        # _topics
        def _subscribe_tree(self, now: float, tree: Tree) -> None: ...

        def _follow(self, now: float, meta: Tree, tree: Tree) -> None: ...

        def _read_tree(self, now: float, tree: Tree, holders: tuple[str, ...] = ()) -> None: ...

        def _meta_wanted(self, tree: Tree) -> bool: ...

        def _meta_block(self, tree: Tree) -> bytes | None: ...

        def _join_ack_meta(self, now: float, peer: str, rpc: JoinAck) -> None: ...

        # _antientropy
        def _edge_knows(self, tree: Tree, peer: str | None, cid: CID) -> None: ...

        @staticmethod
        def _window_dropped(tree: Tree, cid: CID, created: float) -> None: ...

        def _send_history(self, now: float, tree: Tree, peer: str) -> None: ...

        def _send_due_history(self, now: float, tree: Tree) -> None: ...

        def _on_heads(self, now: float, peer: str, rpc: Heads) -> None: ...

        def _heads_round(self, now: float) -> None: ...

        def _heads_due(self, now: float, tree: Tree) -> None: ...

        def _on_digest(self, now: float, peer: str, rpc: Digest) -> None: ...

        # _summaries
        def _summary_changed(self, now: float, tree: Tree) -> None: ...

        def _join_summary(self, tree: Tree) -> tuple[str, ...] | None: ...

        def _set_child_summary(
            self, now: float, tree: Tree, peer: str, texts: tuple[str, ...] | None
        ) -> None: ...

        def _count_forward(self, tree: Tree, peer: str, ev: EventDescriptor) -> None: ...

        def _readopted(self, tree: Tree, peer: str) -> None: ...

        def _count_received(self, tree: Tree, sender: str | None, ev: EventDescriptor) -> None: ...

        # _pruning
        @staticmethod
        def _own_filters(tree: Tree) -> tuple[Filter, ...] | None: ...

        def _unwanted(self, tree: Tree, ev: EventDescriptor) -> bool: ...

        def _keeps(self, tree: Tree, ev: EventDescriptor) -> bool: ...

        def _target_summary(self, tree: Tree, peer: str) -> tuple[Filter, ...] | None: ...

        def _parents_of(self, cid: CID, ev: EventDescriptor) -> tuple[CID, ...]: ...

        def _parents_for(
            self, summary: tuple[Filter, ...], ev: EventDescriptor, *, view: bool = True
        ) -> tuple[CID, ...] | None: ...

        def _prune_edge(self, tree: Tree, peer: str, cid: CID, *, count: bool = True) -> None: ...

        def _first_hop(
            self, tree: Tree, ev: EventDescriptor
        ) -> dict[str, tuple[CID, ...] | None] | None: ...

        def _late_parents(
            self,
            now: float,
            tree: Tree,
            ev: EventDescriptor,
            parents: tuple[CID, ...],
            recovered: bool,
        ) -> None: ...

        def _learn_seen_parents(
            self, tree: Tree, ev: EventDescriptor, parents: tuple[CID, ...] | None
        ) -> None: ...

        # _push
        def _members_changed(self, now: float, tree: Tree) -> None: ...

        def _send_members(self, now: float, tree: Tree) -> None: ...

        def _members_known(self, tree: Tree) -> tuple[str, ...]: ...

        def _partial_members(self, tree: Tree) -> tuple[str, ...]: ...

        def _on_members(self, now: float, peer: str, rpc: Members) -> None: ...

        def _on_members_want(self, now: float, peer: str, rpc: MembersWant) -> None: ...

        def _members_to_new_child(self, now: float, tree: Tree, peer: str) -> None: ...

        def _offer_members(self, now: float, tree: Tree, peer: str) -> None: ...

        def _room_at_root(self, now: float, tree: Tree) -> None: ...

        def _push_own(self, now: float, tree: Tree, cid: CID) -> None: ...

        def _forward_received(
            self, now: float, tree: Tree, cid: CID, sender: str | None, pushed: int | None
        ) -> None: ...

        # _relays
        def _watch_own(self, now: float, tree: Tree, cid: CID) -> None: ...

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

    def _drop(self, now: float, reason: str, **fields: Any) -> None:
        self._record(now, RecordKind.EVENT_DROPPED, reason=reason, **fields)

    def _tree_for(self, topic_cid: CID) -> Tree:
        if not isinstance(topic_cid, CID):
            raise LocalProtocolError(f"expected a topic CID, got {type(topic_cid).__name__}")
        key = self._version_of.get(topic_cid)
        tree = self._trees.get(key) if key is not None else None
        if tree is None:
            raise UnknownTopic(f"unknown topic {topic_cid}")
        return tree
