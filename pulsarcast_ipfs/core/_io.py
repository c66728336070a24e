"""Outputs of the protocol core and the values its API returns (docs/core-api.md).

A :class:`~pulsarcast_ipfs.core.PulsarcastNode` never calls out: every input
appends outputs to its queue, and the driver (simulator or sidecar) carries them
out in order after :meth:`~pulsarcast_ipfs.core.PulsarcastNode.take_outputs`.
Metric records (:class:`pulsarcast_ipfs.records.MetricRecord`) are outputs too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.records import MetricRecord

from ._codec import Rpc
from ._descriptors import EventDescriptor, TopicDescriptor

__all__ = [
    "Deliver",
    "DisconnectPeer",
    "FetchBlock",
    "HistoryPage",
    "OperationDone",
    "Output",
    "Pending",
    "PublishResult",
    "ReleaseBlocks",
    "Role",
    "SendRpc",
    "SignRequest",
    "StoreBlock",
    "TopicState",
    "TopicUpdated",
]

Role = Literal["root", "subscriber", "relay", "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SendRpc:
    """Send ``rpc`` to ``peer`` on the long-lived connection to it (§6).

    ``data`` is the encoded frame (``encode_frame(rpc)``), already computed by
    the core for its ``rpc_sent`` record: send these exact bytes.
    """

    peer: str
    rpc: Rpc
    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreBlock:
    """Store these exact bytes as a dag-cbor block (docs/protocol.md §5 "Persistence").

    Fire-and-forget: the core never waits for it (§8). ``own``: a block this node
    made (a topic version it authored, an event it published, also for a
    requester): the driver pins it; other blocks (forwarded, delivered, recovered)
    are kept without pinning them (docs/sidecar.md "Providing"). Only ``announce``
    blocks are announced in the DHT one by one: never an event (the topic
    is announced once per subscriber, a missed event is fetched from neighbours).
    """

    cid: CID
    data: bytes
    own: bool = False
    announce: bool = False
    """A topic version this node authored: announce it (``provide``) so that a node
    subscribing by CID finds it. Events are never announced one by one."""
    retain: bool = False
    """An event of a topic whose history this node keeps (its retention policy): pin
    it, without announcing it (the topic is announced once, not each event)."""
    urgent: bool = False
    """(acknowledgement levels) The event's publisher waits for this node to hold it:
    store and pin it without waiting for a fuller batch, then tell the core
    (``blocks_held``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseBlocks:
    """These events fell out of the retention policy (or the topic was left): unpin
    them (the driver keeps own blocks pinned: they are announced)."""

    cids: tuple[CID, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchBlock:
    """Get block ``cid`` (local store, then IPFS); answer with ``node.block_fetched``."""

    cid: CID


@dataclass(frozen=True, slots=True, kw_only=True)
class Deliver:
    """Hand an event to the local application (``recovered``: found by gap repair)."""

    topic_cid: CID
    """The first version of the topic (stable across updates)."""
    event_cid: CID
    event: EventDescriptor
    recovered: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicUpdated:
    """A subscribed topic has a new version (arrived through its meta topic, §5)."""

    old_cid: CID
    new_cid: CID
    topic: TopicDescriptor


@dataclass(frozen=True, slots=True, kw_only=True)
class DisconnectPeer:
    """Close every connection with ``peer`` and refuse it until ``until`` (flood protection).

    Emitted when a peer keeps exceeding its rate limits (docs/security.md). The node
    itself already ignores the peer until then; a driver without connections (the
    simulator) may ignore this output.
    """

    peer: str
    reason: str
    until: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SignRequest:
    """Sign ``data`` with this node's own key, Kubo ``key/sign`` format (docs/security.md).

    Answer with ``node.signed(now, request_id, signature)`` (the 64 signature bytes),
    or ``node.sign_failed(now, request_id, reason)``. Only emitted when
    ``NodeConfig.require_signatures`` is on.
    """

    request_id: str
    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Pending:
    """What an API command returns while it waits for signatures.

    It finishes with an :class:`OperationDone` output carrying the same ``op``.
    """

    op: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationDone:
    """An API command that returned :class:`Pending` has finished.

    ``result``: what the command returns when signatures are off (a topic CID for
    ``create_topic``/``update_topic``, a :class:`PublishResult` for ``publish``);
    ``None`` with ``error`` when it failed (signing failed, the topic went away).
    """

    op: str
    result: CID | PublishResult | None
    error: str | None


Output = (
    SendRpc
    | StoreBlock
    | ReleaseBlocks
    | FetchBlock
    | Deliver
    | TopicUpdated
    | DisconnectPeer
    | SignRequest
    | OperationDone
    | MetricRecord
)
"""Anything :meth:`PulsarcastNode.take_outputs` returns."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishResult:
    """What ``publish`` did: published here, or sent a request to publish (Algorithm 3/4)."""

    status: Literal["published", "requested"]
    event_cid: CID | None
    request_id: str | None
    inject_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicState:
    """This node's view of one topic's dissemination tree."""

    topic_cid: CID
    """First version (the key of the tree)."""
    latest_cid: CID
    name: str
    author: str
    role: Role
    parent: str | None
    children: tuple[str, ...]
    subscribed: bool
    joined: bool
    """In the tree: acknowledged by a parent, or the (acting) root."""
    acting_root: bool
    """Root of its tree although not the author (root failover, §6)."""
    heads: tuple[CID, ...]
    """Most recent event CIDs seen, newest first (bounded)."""
    synced: bool = False
    """In the tree, and its parent's HEADS arrived (a root: always): what the
    neighbours advertised is known, so a reader's back-fill has started."""
    retained: int = 0
    """Events of the topic this node keeps (its retention policy; 0: it keeps none)."""
    retained_bytes: int = 0
    """Their encoded size (the bytes pinned for the topic's events)."""
    members: tuple[str, ...] = ()
    """The root's member list (MEMBERS: the root and its children) as this node holds
    it: the root's own current list, a node below it the last list its parent passed
    on; empty while unknown."""
    whole_history: bool = True
    """This node keeps every event of the topic (within its retention): no tree
    filter prunes what reaches it. ``False``: its subtree's summary does, so it holds
    only the events its subtree wants (and its own)."""
    partial_members: tuple[str, ...] = ()
    """(tree filters) The peers of ``members`` whose subtree summary prunes: like this
    node when ``whole_history`` is ``False``, they hold part of the history."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryPage:
    """One page of a topic's history (§5 "History and eventual delivery").

    The order is ``(clock, CID bytes)`` (docs/protocol-notes.md "History DAG"):
    ``newest`` first (descending) or ``oldest`` first.
    """

    events: tuple[tuple[CID, EventDescriptor], ...]
    next: CID | None
    """Cursor of the next page (the last event of this one); ``None``: no more."""
    complete: bool
    """Every ancestor of every retained event is held (down to the retention
    horizon); ``False`` while gap repair still fetches ``missing``."""
    missing: tuple[CID, ...] = ()
    """Linked events not held yet (being fetched)."""
    heads: tuple[CID, ...] = ()
    """The retained events that no retained event links (newest first)."""
    retained: int = 0
    """How many events of the topic this node retains."""
