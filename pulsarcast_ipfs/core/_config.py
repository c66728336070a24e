"""Configuration of a protocol node (timers, limits). All times in seconds."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ._codec import MAX_FRAME_SIZE, MAX_GROUP_TTL
from ._errors import LocalProtocolError
from ._history import RetentionPolicy

__all__ = ["NodeConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    """Timers and limits of a :class:`PulsarcastNode` (see docs/protocol-notes.md)."""

    ping_interval: float = 5.0
    """A child PINGs each of its parents this often (keep-alive, §6)."""
    dead_after: int = 3
    """A parent is dead after this many ping intervals without hearing from it;
    a child after twice as many (children ping, parents only answer)."""
    slow_parent_after: float = 1.0
    """A parent that leaves a PING unanswered this long, and then a probe PING as long
    again, or answers one later than this, is lagging (an overloaded or
    bandwidth-starved link): the child joins another peer closer to the author, if
    there is one, and leaves the laggard once accepted (§6 repair, make before break);
    the laggard is avoided for ``suspect_ttl``. An event from the parent that arrives
    more than half this after its ``created`` time sends a probe at once, which waits
    four smoothed round trips of that link (0.25 s at least, this at most)."""
    join_timeout: float = 2.0
    """A JOIN not acknowledged in time is retried through the next closest peer (§5)."""
    root_recheck_interval: float = 10.0
    """An acting root (root failover) looks for a closer live peer this often."""
    suspect_ttl: float = 30.0
    """A failed peer is avoided for this long, then tried again (the author may return)."""
    heads_interval: float = 5.0
    """Tree neighbours exchange HEADS (recent event CIDs) this often when they changed."""
    heads_after_publish: float = 0.5
    """A publisher runs an early HEADS round this soon after publishing (deltas: only
    to neighbours its EVENT did not go to)."""
    heads_refresh_every: int = 1
    """Every this many HEADS intervals, a DIGEST (fingerprint of the window) goes to
    each neighbour, if it changed (anti-entropy: catches an EVENT lost on an edge)."""
    heads_size: int = 64
    """Recent event CIDs kept per topic; a HEADS round sends each neighbour those it
    is not known to have."""
    history_size: int = 1024
    """Older event CIDs kept per topic beyond ``heads_size``, sent (in HEADS frames)
    on every new tree edge, and compared by DIGESTs (anti-entropy)."""
    members_interval: float = 5.0
    """A root sends its children MEMBERS (who its children are: a publisher's direct
    first hop) at most this often while that set changes."""
    flat_fanout: int = 64
    """Flat trees (docs/protocol-notes.md "First hop"): a node below a child of the
    root moves up to the root while the root's MEMBERS list names fewer than this
    many peers (at most 64, the list's bound). 0: trees keep the shape the JOINs'
    routing gave them (relays below the root)."""
    group_capacity: int = 16
    """Fast groups (docs/protocol-notes.md "Fast groups"): the peers a publisher sends
    each of its events to directly along its group of a topic (direct members and
    helpers). Beyond that it recruits helpers among the members that declared spare
    capacity; a join it cannot place is refused (the tree still delivers). 0: this
    node runs no groups."""
    group_spare: int = 8
    """Members of a publisher's group this node offers to forward to as a helper
    (GROUP_JOIN ``spare``, at most 64; 0: never a helper)."""
    group_refresh: float = 10.0
    """A member refreshes each group membership this often; a membership (and a
    helper's assignment) not refreshed for three times this long expires (at most
    1,200 s: the longest membership a GROUP_ACK may grant is an hour)."""
    fast_publishers: int = 16
    """Groups a fast subscriber joins per topic (the publishers it saw first)."""
    request_timeout: float = 3.0
    """A REQUEST_TO_PUBLISH not acknowledged in time is sent again (same request id)."""
    request_attempts: int = 20
    fetch_timeout: float = 10.0
    """A FetchBlock not answered in time is retried."""
    parent_grace: float = 1.0
    """A live event's unknown parent is fetched (``FetchBlock``) only if it has not
    arrived this long after (concurrent publishers: it is usually on its way along
    another path); a recovered event's parents are fetched at once."""
    fetch_retry_delay: float = 2.0
    fetch_attempts: int = 4
    """After this many failed fetches, gap repair gives up on that event."""
    seen_cache_size: int = 65536
    """Event CIDs remembered for duplicate suppression (LRU)."""
    delivered_cache_size: int = 65536
    event_cache_size: int = 4096
    """Event descriptors kept for linking, history and HEADS (LRU)."""
    max_pending_fetches: int = 1024
    max_waiting_events: int = 4096
    """Events held back until their parent is delivered (causal order)."""
    request_cache_size: int = 4096
    """Request ids already published, so retried requests publish once."""
    max_frame_size: int = MAX_FRAME_SIZE
    join_rate: float = 200.0
    """JOINs accepted per second from one peer (token bucket; flood protection, see
    docs/security.md). Generous: legitimate traffic is never limited."""
    join_burst: float = 2000.0
    event_rate: float = 1000.0
    """EVENTs and HEADS accepted per second from one peer (token bucket)."""
    event_burst: float = 5000.0
    request_rate: float = 100.0
    """REQUEST_TO_PUBLISH messages accepted per second from one peer (token bucket)."""
    request_burst: float = 1000.0
    abuse_limit: int = 500
    """A peer refused this many times (rate limit) within ``abuse_window`` is
    disconnected (``DisconnectPeer``) and ignored for ``ban_time``."""
    abuse_window: float = 60.0
    ban_time: float = 300.0
    max_topics: int = 16384
    """Dissemination trees a node takes part in; a JOIN for a new topic beyond this
    is refused (bounded memory against a flood of made-up topics)."""
    rate_limit_peers: int = 4096
    """Peers whose buckets are remembered (LRU): bounded memory under a sybil flood."""
    rpc_records: bool = True
    """Emit ``rpc_sent`` / ``rpc_received`` metric records."""
    require_signatures: bool = False
    """Sign what this node authors and publishes (protocolVersion 2.1.0, through
    ``SignRequest`` outputs) and drop unsigned (2.0.0) events, topic versions and
    requests to publish (docs/security.md "Signatures"). Signatures are
    verified whatever this says. Needs an Ed25519 peer ID."""
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    """What a subscriber (or the author, or a reader) keeps of each topic's history
    (``StoreBlock.retain``; evicted events come in ``ReleaseBlocks``)."""
    reader_ttl: float = 300.0
    """A node that reads a topic's history without subscribing (``read``) stays in
    its tree this long after the last read."""
    delegate_margin: float = 60.0
    """A delegated signing key (``use_delegate``) signs an event only if its
    delegation runs at least this much longer than the event's ``created``: a
    receiver whose clock is a little ahead still accepts it; nearer the end the node
    signs through the driver until the driver renews the delegation."""
    tree_filters: bool = True
    """(docs/protocol-notes.md "Filters in the tree", wire 2.5)
    Tell the parent what this node's subtree wants — JOIN's ``summary`` and SUMMARY —
    and prune by the children's summaries: an event goes down only into subtrees
    that want it (:mod:`._pruning`). Off: every event goes to every tree neighbour,
    and no frame carries the tree-filter fields (JOIN's ``summary``, SUMMARY,
    MEMBERS' ``summaries``; EVENT's ``parents`` is ignored)."""
    summary_bound: int = 8
    """Filters kept per neighbour entry: a child's summary, or this node's subtree
    summary, merged (``core/_filters.merge``: wider, never narrower) down to this."""
    summary_interval: float = 1.0
    """At most one SUMMARY per tree this often (changes in between are coalesced)."""

    witnesses: int = 2
    """(docs/protocol-notes.md "Relays that lie") A node whose parent is not the author asks
    this many witnesses — members of the root's list, else the author — to announce
    the topic's events to it (WATCH); an announced event its parent does not send is
    fetched and counted against the parent. 0: off (at most 8)."""
    witness_grace: float = 1.0
    """An announced event not come is fetched this long after the announcement (the
    parent's copy normally wins; a slow link adds its lag limit)."""
    blame_window: float = 2.0
    """...and the parent is scored this long after that: a copy from it by then (a
    parent repairing too) counts as delivered."""
    penalty_ttl: float = 600.0
    """A parent found withholding, or a silent child, is avoided this long (no JOIN to
    it, none accepted from it)."""
    silent_child_after: float = 30.0
    """A child sent live events in this many seconds' worth of heads rounds (six at
    least), and heard from by no DIGEST or HEADS since, takes part in no
    anti-entropy: it is dropped. 0: off."""

    ack_retry: float = 1.0
    """(acknowledgement levels, :mod:`._acks`) An event of the outbox that is not held
    by enough nodes yet is offered again (EVENT with ``ack``) to the tree neighbours
    and the root's list that do not hold it, first this long after publishing, then
    at twice the interval each time, up to :attr:`ack_retry_max`."""
    ack_retry_max: float = 30.0
    outbox_size: int = 10_000
    """Events waiting for holders at most (a publish asking for holders beyond it is
    refused: ``OutboxFull``)."""
    subnet_children: int = 4
    """(docs/protocol-notes.md "Sybil joins") Children of one tree that may share a
    colocation key (the network of their address, a /24 or /64, from
    ``set_peer_subnets``); a JOIN beyond it is refused and the joiner goes one level
    lower. The same bound holds for a witness's watchers of one topic
    (docs/protocol.md §11.3). Peers without a key are not counted. 0: no bound."""
    subnet_join_rate: float = 200.0
    """JOINs accepted per second from new children of one colocation key, together
    (token bucket): by default what one peer may send (``join_rate``), so that many
    identities on one network JOIN no faster than one peer."""
    subnet_join_burst: float = 2000.0
    established_after: float = 60.0
    """A root whose children overflow its MEMBERS list lists one child per network
    first, then children adopted at least this long ago before fresher ones."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "retention":
                if not isinstance(value, RetentionPolicy):
                    raise LocalProtocolError("retention must be a RetentionPolicy")
                continue
            if f.name in (
                "group_capacity",
                "group_spare",
                "flat_fanout",
                "witnesses",
                "outbox_size",
                "subnet_children",
            ):
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise LocalProtocolError(f"NodeConfig.{f.name} must be an integer >= 0")
                if f.name == "group_spare" and value > 64:
                    raise LocalProtocolError("NodeConfig.group_spare must be at most 64")
                if f.name == "witnesses" and value > 8:
                    raise LocalProtocolError("NodeConfig.witnesses must be at most 8")
                continue
            if f.name in ("rpc_records", "require_signatures", "tree_filters"):
                if not isinstance(value, bool):
                    raise LocalProtocolError(f"{f.name} must be a bool")
                continue
            if f.name == "silent_child_after":
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    raise LocalProtocolError(f"NodeConfig.{f.name} must be a number >= 0")
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise LocalProtocolError(f"NodeConfig.{f.name} must be a positive number")
        if 3 * self.group_refresh > MAX_GROUP_TTL:
            raise LocalProtocolError(
                f"NodeConfig.group_refresh must be at most {MAX_GROUP_TTL / 3:g} seconds"
            )
