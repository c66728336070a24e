"""Tree RPC messages and their frames (docs/protocol.md §6).

Theory of operation
-------------------
A frame is an unsigned varint (minimal, at most 9 bytes) giving the body length,
then the body: one canonical dag-cbor map with an ``op`` field. Each message is a
frozen dataclass that validates itself; :func:`encode_frame` turns it into bytes
and :class:`FrameDecoder` turns bytes that arrive in arbitrary pieces back into
messages. Anything malformed — a bad varint, a frame over the size limit, bad
dag-cbor, an unknown op, a missing or extra field, a wrong type, a bad CID or
peer ID — raises :class:`RemoteProtocolError` and nothing else; after that the
decoder refuses further input (the stream is out of sync and must be closed).
Only the errors the lower layers document are translated (the dag-cbor decoder's
``CborError``, the validators' ``LocalProtocolError``): any other exception is a bug
of the decoder and escapes as itself, so that a fuzzer can find it.

Messages (``topic`` is always the CID of the topic's *first version*, which keys
the dissemination tree across updates)::

    JOIN               {op, topic, descriptor, leaf, up}  descriptor = first-version block;
                        leaf: a childless reader asks a holder of the history to take
                        it whatever its distance to the author (it takes no children);
                        up: a joined node moving up to the root (flat trees)
    JOIN_ACK           {op, topic, ok}
    LEAVE              {op, topic}
    EVENT              {op, topic, event, topicBlock, pushed[, ack]}
                        event block; topic-version block or null; pushed: the MEMBERS
                        epoch the publisher pushed this event to directly, or null;
                        ack (wire 2.9): true from a publisher that waits for holders
                        (left out otherwise)
    STORED             {op, topic, event}   wire 2.9: a holder to the event's publisher
                        that asked (EVENT ack): the event is stored and pinned here
    REQUEST_TO_PUBLISH {op, topic, descriptor, requestId, author, payload, parent, created,
                        injectId, signature[, attributes]}   signature: the author's
                        (1.1.0) or null; attributes: the event's, a key
                        present only when the event has them (older nodes' shape else)
    REQUEST_ACK        {op, topic, requestId, ok, event}
    PING / PONG        {op, nonce}
    HEADS              {op, topic, heads: [[CID, created seconds], ...]}
    MEMBERS            {op, topic, epoch, members: [peer ID, ...][, base, removed]}
                        root -> its children; with base (wire 2.6): a delta from
                        the list of epoch base, removed: the peers gone
    MEMBERS_WANT       {op, topic}   a child to its parent: send me the whole list
    SUMMARY            {op, topic, filters: [filter text, ...]}   a child to its parent: the
                        summary of what its subtree wants (NodeConfig.tree_filters)
    WATCH              {op, topic, ttl[, filters]}   wire 2.8: a node below a relay asks a
                        witness (a member of the root's list, or the root) to announce
                        the topic's new events to it in HEADS for ttl seconds (0: stop);
                        filters: what it wants, as in SUMMARY (left out: everything)
    DIGEST             {op, topic, lo, hi, count, sum, ranges, have}
                        ranges: [[upper, count, sum], ...] (an answer: the window
                        split) or []; have: [[CID, created], ...] (the sender's
                        events created in [lo, hi]) or null

Fast groups (wire 2.4, docs/protocol-notes.md "Fast groups")::

    GROUP_JOIN         {op, topic, spare}   member -> publisher: deliver your events
                        to me directly (also a refresh); spare: members I can serve
    GROUP_ACK          {op, topic, ok, helper, ttl}   publisher -> member; helper: the
                        peer that forwards to it (null: the publisher itself)
    GROUP_LEAVE        {op, topic}          member -> publisher, or publisher -> member
    GROUP_ASSIGN       {op, topic, epoch, members, ttl}   publisher -> helper: forward
                        my events to these members ([]: not a helper any more)
    GROUP_EVENT        {op, topic, event, topicBlock}   an event along a group
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, ClassVar, Final

from pulsarcast_ipfs.core._cid import CID

from . import _dagcbor
from ._descriptors import MAX_DESCRIPTOR_SIZE, MAX_PAYLOAD_SIZE, check_link, parse_created
from ._descriptors import _peer as _check_peer
from ._errors import FilterSyntaxError, InvalidAttributes, LocalProtocolError, RemoteProtocolError
from ._filters import AttributeValue, parse_filter, render_filter, validate_attributes

__all__ = [
    "MAX_FRAME_SIZE",
    "MAX_GROUP_ASSIGN",
    "MAX_GROUP_TTL",
    "MAX_HAVE",
    "MAX_HEADS",
    "MAX_MEMBERS",
    "MAX_RANGES",
    "MAX_SEEN_PARENTS",
    "MAX_WATCH_TTL",
    "Digest",
    "Event",
    "FrameDecoder",
    "GroupAck",
    "GroupAssign",
    "GroupEvent",
    "GroupJoin",
    "GroupLeave",
    "Heads",
    "Join",
    "JoinAck",
    "Leave",
    "Members",
    "MembersWant",
    "Ping",
    "Pong",
    "RequestAck",
    "RequestToPublish",
    "Rpc",
    "Stored",
    "Summary",
    "Watch",
    "decode_rpc",
    "encode_frame",
    "encode_rpc",
]

MAX_FRAME_SIZE: Final = 1024 * 1024
"""Default largest frame body (1 MiB)."""
MAX_HEADS: Final = 64
MAX_MEMBERS: Final = 64
"""Peers in one MEMBERS message: the fan-out of a publisher's direct first hop."""
MAX_HAVE: Final = 2048
"""Entries in one DIGEST listing (``have``)."""
MAX_RANGES: Final = 16
"""Ranges in one DIGEST answer (``ranges``)."""
MAX_SUMMARY: Final = 16
"""Filters in one summary (JOIN's ``summary``, SUMMARY's ``filters``)."""
MAX_SEEN_PARENTS: Final = 64
"""Most CIDs in EVENT's ``parents`` (the parents a filtered subtree sees)."""
MAX_GROUP_ASSIGN: Final = 64
"""Members one helper may be assigned (GROUP_ASSIGN), and the largest ``spare``."""
MAX_GROUP_TTL: Final = 3600.0
"""The longest membership a GROUP_ACK / GROUP_ASSIGN may grant (seconds)."""
MAX_ID_LENGTH: Final = 256
_MAX_VARINT_BYTES: Final = 9


def _bad(msg: str) -> ValueError:
    return ValueError(msg)


def _cid(value: object, where: str) -> CID:
    return check_link(value, where)


def _opt_cid(value: object, where: str) -> CID | None:
    return None if value is None else check_link(value, where)


def _bytes(value: object, where: str, limit: int) -> bytes:
    if not isinstance(value, bytes):
        raise _bad(f"{where}: expected bytes")
    if len(value) > limit:
        raise _bad(f"{where}: larger than {limit} bytes")
    return value


def _ident(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH:
        raise _bad(f"{where}: expected a non-empty string of at most {MAX_ID_LENGTH}")
    return value


def _bool(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(f"{where}: expected a bool")
    return value


class _Message:
    """Base of the RPC messages: ``op`` on the wire, validation on construction."""

    __slots__ = ()
    op: ClassVar[str]
    _wire: ClassVar[dict[str, str]]  # python field -> wire key
    _optional: ClassVar[frozenset[str]] = frozenset()
    """Fields whose key is left out when None (added to a message after its first
    version, so that a message without them keeps the older shape)."""

    def _validate(self) -> None:
        raise NotImplementedError

    def __post_init__(self) -> None:
        try:
            self._validate()
        except ValueError as exc:
            raise LocalProtocolError(f"invalid {self.op} message: {exc}") from exc

    def to_ipld(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"op": self.op}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.name in self._optional:
                continue
            if isinstance(value, Mapping):
                value = dict(value)
            if isinstance(value, tuple):
                value = [list(v) if isinstance(v, tuple) else v for v in value]
            obj[self._wire.get(f.name, f.name)] = value
        return obj

    @property
    def topic_cid(self) -> CID | None:
        return getattr(self, "topic", None)


@dataclass(frozen=True, slots=True, kw_only=True)
class Join(_Message):
    """JOIN (Algorithm 2): the sender asks to become a child in ``topic``'s tree."""

    op: ClassVar[str] = "JOIN"
    _wire: ClassVar[dict[str, str]] = {"want_meta": "wantMeta"}
    topic: CID
    descriptor: bytes
    """The first-version topic block, so the receiver can route without a fetch."""
    leaf: bool = False
    """A reader's JOIN to a holder of the history, whatever its distance to the author:
    the sender takes no children while it hangs there (so no cycle can form)."""
    up: bool = False
    """A joined node moving up to the root (flat trees): the root takes it only while
    it has fewer than ``flat_fanout - 1`` children (the fan-out bound holds however
    many move up on one MEMBERS list)."""
    summary: tuple[str, ...] | None = None
    """(``NodeConfig.tree_filters``) What the sender's subtree wants, as in
    SUMMARY; left out (None) by a node that does not send summaries: it wants all."""
    want_meta: bool | None = None
    """(wire 2.7) True: the sender does not hold the topic's meta-topic descriptor yet
    and asks for it in the JOIN_ACK (``meta``) instead of fetching it over bitswap;
    left out otherwise (never false on the wire)."""
    _optional: ClassVar[frozenset[str]] = frozenset({"summary", "want_meta"})

    def _validate(self) -> None:
        _cid(self.topic, "topic")
        _bytes(self.descriptor, "descriptor", MAX_DESCRIPTOR_SIZE)
        _bool(self.leaf, "leaf")
        _bool(self.up, "up")
        if self.leaf and self.up:
            raise ValueError("a JOIN is not both leaf and up")
        if self.summary is not None:
            _summary(self.summary, "summary")
        if self.want_meta is not None and self.want_meta is not True:
            raise ValueError("wantMeta: true when present")


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinAck(_Message):
    """JOIN_ACK: ``ok`` true if the sender became the receiver's parent."""

    op: ClassVar[str] = "JOIN_ACK"
    _wire: ClassVar[dict[str, str]] = {}
    topic: CID
    ok: bool
    meta: bytes | None = None
    """(wire 2.7) The first-version descriptor of the topic's meta topic, for a JOIN
    that asked (``wantMeta``) and was accepted by a node that holds it; the receiver
    checks it against the CID its topic descriptor links (``#.meta``)."""
    _optional: ClassVar[frozenset[str]] = frozenset({"meta"})

    def _validate(self) -> None:
        _cid(self.topic, "topic")
        _bool(self.ok, "ok")
        if self.meta is not None:
            _bytes(self.meta, "meta", MAX_DESCRIPTOR_SIZE)
            if not self.ok:
                raise ValueError("meta: only in an accepting JOIN_ACK")


@dataclass(frozen=True, slots=True, kw_only=True)
class Leave(_Message):
    """LEAVE: the sender is no longer the receiver's child (or parent) in ``topic``."""

    op: ClassVar[str] = "LEAVE"
    _wire: ClassVar[dict[str, str]] = {}
    topic: CID

    def _validate(self) -> None:
        _cid(self.topic, "topic")


@dataclass(frozen=True, slots=True, kw_only=True)
class Event(_Message):
    """EVENT: an event block travelling along the tree (§5 "Forward")."""

    op: ClassVar[str] = "EVENT"
    _wire: ClassVar[dict[str, str]] = {"topic_block": "topicBlock"}
    topic: CID
    event: bytes
    topic_block: bytes | None = None
    """The block of the topic version the event names, when it is not the first version."""
    pushed: int | None = None
    """Set by a publisher that sent this event straight to the members of the root's
    MEMBERS list of this epoch (and to its parent): the root does not send it to them
    again, and a member takes it from the publisher although it is no tree neighbour."""
    parents: tuple[CID, ...] | None = None
    """(wire 2.5, tree filters) The event's parents as the receiver's filtered subtree
    sees them: each parent the sender did not (and will not) send there because the
    receiver's summary does not match it is replaced by *its* parents, recursively
    (docs/protocol-notes.md "Filters in the tree"). Left out when nothing was pruned."""
    ack: bool | None = None
    """(wire 2.9) True: sent by the event's publisher, which waits for the receiver to
    answer STORED once it holds the event (stored and pinned: it retains the topic's
    history). Left out otherwise (never false on the wire)."""
    _optional: ClassVar[frozenset[str]] = frozenset({"parents", "ack"})

    def _validate(self) -> None:
        _cid(self.topic, "topic")
        _bytes(self.event, "event", MAX_DESCRIPTOR_SIZE)
        if self.topic_block is not None:
            _bytes(self.topic_block, "topicBlock", MAX_DESCRIPTOR_SIZE)
        if self.pushed is not None:
            _uint(self.pushed, "pushed")
        if self.ack is not None and self.ack is not True:
            raise _bad("ack: true when present")
        if self.parents is not None:
            if not isinstance(self.parents, tuple) or len(self.parents) > MAX_SEEN_PARENTS:
                raise _bad(f"parents: expected at most {MAX_SEEN_PARENTS} CIDs")
            for c in self.parents:
                _cid(c, "parents[]")
            if len(set(self.parents)) != len(self.parents):
                raise _bad("parents: a CID is given twice")


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestToPublish(_Message):
    """REQUEST_TO_PUBLISH (Algorithm 4): travels up the tree to the first allowed node."""

    op: ClassVar[str] = "REQUEST_TO_PUBLISH"
    _wire: ClassVar[dict[str, str]] = {"request_id": "requestId", "inject_id": "injectId"}
    topic: CID
    descriptor: bytes
    request_id: str
    author: str
    payload: bytes
    parent: CID | None = None
    created: str
    inject_id: str | None = None
    signature: bytes | None = None
    """The requester's Ed25519 signature over the event's ``author_statement``
    (docs/security.md "Signatures"); ``None`` from an unsigned (1.0.0) requester."""
    attributes: Mapping[str, AttributeValue] | None = None
    """The event's attributes (core/_filters.py), or None: then the key is absent."""
    _optional: ClassVar[frozenset[str]] = frozenset({"attributes"})

    def _validate(self) -> None:
        if self.attributes is not None:
            if not self.attributes:
                raise _bad("attributes: an empty map is written as no key")
            try:
                attrs = validate_attributes(self.attributes)
            except InvalidAttributes as exc:
                raise _bad(f"attributes: {exc}") from exc
            object.__setattr__(self, "attributes", MappingProxyType(attrs))
        _cid(self.topic, "topic")
        _bytes(self.descriptor, "descriptor", MAX_DESCRIPTOR_SIZE)
        if self.signature is not None and (
            not isinstance(self.signature, bytes) or len(self.signature) != 64
        ):
            raise _bad("signature: expected 64 bytes or null")
        _ident(self.request_id, "requestId")
        _check_peer(self.author, "author")
        _bytes(self.payload, "payload", MAX_PAYLOAD_SIZE)
        _opt_cid(self.parent, "parent")
        parse_created(self.created)
        if self.inject_id is not None:
            _ident(self.inject_id, "injectId")


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestAck(_Message):
    """REQUEST_ACK: sent by the publishing node straight to the requester."""

    op: ClassVar[str] = "REQUEST_ACK"
    _wire: ClassVar[dict[str, str]] = {"request_id": "requestId"}
    topic: CID
    request_id: str
    ok: bool
    event: CID | None = None

    def _validate(self) -> None:
        _cid(self.topic, "topic")
        _ident(self.request_id, "requestId")
        _bool(self.ok, "ok")
        _opt_cid(self.event, "event")


@dataclass(frozen=True, slots=True, kw_only=True)
class Stored(_Message):
    """STORED (wire 2.9, docs/protocol.md §6): the sender holds ``event`` of ``topic``
    — stored in its Kubo and pinned, as part of the topic's retained history — and
    tells the event's publisher, which asked for it (EVENT ``ack``). One per event
    per holder (and per ask); the publisher counts holders for its acknowledgement
    levels (docs/http-api.md "Publish")."""

    op: ClassVar[str] = "STORED"
    _wire: ClassVar[dict[str, str]] = {}
    topic: CID
    event: CID

    def _validate(self) -> None:
        _cid(self.topic, "topic")
        _cid(self.event, "event")


_CANONICAL_KEPT: Final = 4096
_canonical: set[str] = set()
"""Filter texts found canonical (bounded: cleared when full). Whether a text is
canonical is a function of the text alone, and a MEMBERS list carries the same few
summaries for every member, so each text is parsed and rendered once, not once per
member per message (what a root's MEMBERS cost its receivers in a Sybil run)."""


def _summary(value: object, where: str) -> tuple[str, ...]:
    """Canonical filter texts (core/_filters.py), at most MAX_SUMMARY, distinct."""
    if not isinstance(value, tuple) or len(value) > MAX_SUMMARY:
        raise _bad(f"{where}: expected at most {MAX_SUMMARY} filter texts")
    for text in value:
        if not isinstance(text, str):
            raise _bad(f"{where}: filters are texts")
        if text in _canonical:
            continue
        try:
            canonical = render_filter(parse_filter(text))
        except FilterSyntaxError as exc:
            raise _bad(f"{where}: {exc}") from None
        if canonical != text:
            raise _bad(f"{where}: {text!r} is not in canonical form ({canonical!r})")
        if len(_canonical) >= _CANONICAL_KEPT:
            _canonical.clear()
        _canonical.add(text)
    if len(set(value)) != len(value):
        raise _bad(f"{where}: a filter is given twice")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary(_Message):
    """SUMMARY: a child tells its parent what its subtree wants — a
    disjunction of filters (an empty list: nothing; ``"*"``: everything). Sent when it
    changes, at most every ``NodeConfig.summary_interval``; only with ``tree_filters``."""

    op: ClassVar[str] = "SUMMARY"
    _wire: ClassVar[dict[str, str]] = {}
    topic: CID
    filters: tuple[str, ...]

    def _validate(self) -> None:
        _cid(self.topic, "topic")
        _summary(self.filters, "filters")


MAX_WATCH_TTL: Final = 600
"""The longest a WATCH asks to be announced to (seconds); it is refreshed before."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Watch(_Message):
    """WATCH (wire 2.8, docs/protocol-notes.md "Relays that lie"): a node whose parent is
    not the root asks a *witness* — a peer fed independently of that parent — to
    announce the topic's new events to it (HEADS, one per event it accepts) for ``ttl``
    seconds; ``ttl = 0`` ends it. ``filters``: the events the watcher's subtree wants
    (canonical filter texts, as SUMMARY; ``None``: every event)."""

    op: ClassVar[str] = "WATCH"
    _wire: ClassVar[dict[str, str]] = {}
    _optional: ClassVar[frozenset[str]] = frozenset({"filters"})
    topic: CID
    ttl: int
    filters: tuple[str, ...] | None = None

    def _validate(self) -> None:
        _cid(self.topic, "topic")
        if not isinstance(self.ttl, int) or isinstance(self.ttl, bool):
            raise _bad("ttl: expected an integer")
        if not 0 <= self.ttl <= MAX_WATCH_TTL:
            raise _bad(f"ttl: expected 0 to {MAX_WATCH_TTL} seconds")
        if self.filters is not None:
            _summary(self.filters, "filters")


def _uint(value: object, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise _bad(f"{where}: expected an integer in [0, 2**63)")
    return value


def _entries(value: object, where: str, limit: int) -> None:
    """``[[CID, created], ...]`` entries (HEADS, DIGEST listings)."""
    if not isinstance(value, tuple) or len(value) > limit:
        raise _bad(f"{where}: expected at most {limit} entries")
    is_link = _dagcbor.is_dag_cbor_sha256_link
    isfinite = math.isfinite
    for entry in value:
        if type(entry) is not tuple or len(entry) != 2:
            if not isinstance(entry, tuple) or len(entry) != 2:
                raise _bad(f"{where}: entries are [CID, created]")
        cid, ts = entry
        if not is_link(cid):
            _cid(cid, f"{where}[].cid")  # raises with the reason
        if type(ts) is not float or not isfinite(ts):
            if not isinstance(ts, float) or not isfinite(ts):
                raise _bad(f"{where}[].created: expected a finite float")


def _nonce(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise _bad("nonce: expected an integer in [0, 2**63)")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Ping(_Message):
    """PING: keep-alive on a tree edge (child → parent)."""

    op: ClassVar[str] = "PING"
    _wire: ClassVar[dict[str, str]] = {}
    nonce: int

    def _validate(self) -> None:
        _nonce(self.nonce)


@dataclass(frozen=True, slots=True, kw_only=True)
class Pong(_Message):
    """PONG: answer to a PING."""

    op: ClassVar[str] = "PONG"
    _wire: ClassVar[dict[str, str]] = {}
    nonce: int

    def _validate(self) -> None:
        _nonce(self.nonce)


@dataclass(frozen=True, slots=True, kw_only=True)
class Heads(_Message):
    """HEADS: the sender's most recent event CIDs in ``topic`` (gap repair, §5)."""

    op: ClassVar[str] = "HEADS"
    _wire: ClassVar[dict[str, str]] = {}
    topic: CID
    heads: tuple[tuple[CID, float], ...]

    def _validate(self) -> None:
        _cid(self.topic, "topic")
        _entries(self.heads, "heads", MAX_HEADS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Members(_Message):
    """MEMBERS: a root tells its children who its children are (epoch ``epoch``), so
    that a child publishing an event sends it to them directly: one hop
    (docs/protocol-notes.md "First hop").

    Two forms. The *whole list* (``base`` left out): ``members`` is the list of epoch
    ``epoch``, the root first. A *delta* (wire 2.6, ``base`` set): the list of epoch
    ``epoch`` is that of epoch ``base`` without ``removed``, with ``members`` added
    (or, when already listed, given a new summary); a receiver that does not hold
    epoch ``base`` asks for the whole list (MEMBERS_WANT)."""

    op: ClassVar[str] = "MEMBERS"
    _wire: ClassVar[dict[str, str]] = {}
    topic: CID
    epoch: int
    members: tuple[str, ...]
    summaries: tuple[tuple[str, ...], ...] | None = None
    """(wire 2.5, tree filters) Each member's subtree summary, in the order of
    ``members`` (``("*",)``: everything): a publisher pushes an event only to the
    members whose summary matches it."""
    base: int | None = None
    """(wire 2.6) A delta from the list of this epoch (smaller than ``epoch``)."""
    removed: tuple[str, ...] | None = None
    """(wire 2.6, deltas only) The peers of epoch ``base``'s list that are gone."""
    offer: bool | None = None
    """(wire 2.12) True: the author's whole list sent to a watcher instead of taking its
    WATCH (the author's watcher table full), as witness candidates; not a list for a
    child. Left out otherwise (never false on the wire)."""
    _optional: ClassVar[frozenset[str]] = frozenset({"summaries", "base", "removed", "offer"})

    def _validate(self) -> None:
        _cid(self.topic, "topic")
        _uint(self.epoch, "epoch")
        if not isinstance(self.members, tuple) or len(self.members) > MAX_MEMBERS:
            raise _bad(f"members: expected at most {MAX_MEMBERS} peer IDs")
        for peer in self.members:
            _check_peer(peer, "members[]")
        if self.summaries is not None:
            if not isinstance(self.summaries, tuple) or len(self.summaries) != len(self.members):
                raise _bad("summaries: expected one summary per member")
            for summary in self.summaries:
                _summary(summary, "summaries[]")
        if self.offer is not None and self.offer is not True:
            raise _bad("offer: true when present")
        if self.base is None:
            if self.removed is not None:
                raise _bad("removed: only in a delta (with base)")
            return
        if self.offer is not None:
            raise _bad("offer: only with a whole list, not a delta")
        _uint(self.base, "base")
        if self.base >= self.epoch:
            raise _bad("base: expected an epoch before epoch")
        if len(set(self.members)) != len(self.members):
            raise _bad("members: a peer is listed twice in a delta")
        removed = () if self.removed is None else self.removed
        if not isinstance(removed, tuple) or len(removed) > MAX_MEMBERS:
            raise _bad(f"removed: expected at most {MAX_MEMBERS} peer IDs")
        for peer in removed:
            _check_peer(peer, "removed[]")
        if len(set(removed)) != len(removed):
            raise _bad("removed: a peer is listed twice")
        if set(removed) & set(self.members):
            raise _bad("removed: a peer is both added and removed")


@dataclass(frozen=True, slots=True, kw_only=True)
class MembersWant(_Message):
    """MEMBERS_WANT (wire 2.6): a child that got a MEMBERS delta whose ``base`` it
    does not hold asks its parent for the whole list."""

    op: ClassVar[str] = "MEMBERS_WANT"
    _wire: ClassVar[dict[str, str]] = {}
    topic: CID

    def _validate(self) -> None:
        _cid(self.topic, "topic")


@dataclass(frozen=True, slots=True, kw_only=True)
class Digest(_Message):
    """DIGEST: anti-entropy between tree neighbours (docs/protocol-notes.md
    "Anti-entropy"). The fingerprint (``count`` events, ``sum`` of their CIDs' last
    eight digest bytes modulo 2**64) of the sender's events created in ``[lo, hi]``;
    with ``have``, the listing of those events itself (sent when fingerprints differ)."""

    op: ClassVar[str] = "DIGEST"
    _wire: ClassVar[dict[str, str]] = {}
    topic: CID
    lo: float
    hi: float
    count: int
    sum: int
    ranges: tuple[tuple[float, int, int], ...] = ()
    """The answer to a DIGEST that differed: the same window split in at most
    ``MAX_RANGES`` ranges ``(upper bound, count, sum)``, each from just above the
    previous bound (the first from ``lo``) to its own, inclusive; the last ends at
    ``hi``. Only the ranges that differ are then listed."""
    have: tuple[tuple[CID, float], ...] | None = None

    def _validate(self) -> None:
        _cid(self.topic, "topic")
        for name in ("lo", "hi"):
            value = getattr(self, name)
            if type(value) is not float or not math.isfinite(value):
                raise _bad(f"{name}: expected a finite float")
        if not self.lo <= self.hi:
            raise _bad("lo: must not exceed hi")
        _uint(self.count, "count")
        if not isinstance(self.sum, int) or isinstance(self.sum, bool) or not 0 <= self.sum < 2**64:
            raise _bad("sum: expected an integer in [0, 2**64)")
        if not isinstance(self.ranges, tuple) or len(self.ranges) > MAX_RANGES:
            raise _bad(f"ranges: expected at most {MAX_RANGES} entries")
        prev = self.lo
        for entry in self.ranges:
            if not isinstance(entry, tuple) or len(entry) != 3:
                raise _bad("ranges: entries are [upper, count, sum]")
            upper, count, total = entry
            if type(upper) is not float or not prev <= upper <= self.hi:
                raise _bad("ranges[].upper: expected ascending floats within [lo, hi]")
            prev = upper
            _uint(count, "ranges[].count")
            if not isinstance(total, int) or isinstance(total, bool) or not 0 <= total < 2**64:
                raise _bad("ranges[].sum: expected an integer in [0, 2**64)")
        if self.have is not None:
            _entries(self.have, "have", MAX_HAVE)


def _ttl(value: object) -> float:
    if type(value) is not float or not math.isfinite(value) or not 0.0 < value <= MAX_GROUP_TTL:
        raise _bad(f"ttl: expected a float in (0, {MAX_GROUP_TTL:g}] seconds")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupJoin(_Message):
    """GROUP_JOIN: the sender asks the receiver (a publisher of ``topic``) to send it
    its events directly (a fast group), or refreshes that membership; ``spare``:
    how many other members the sender offers to forward to, as a helper."""

    op: ClassVar[str] = "GROUP_JOIN"
    _wire: ClassVar[dict[str, str]] = {}
    topic: CID
    spare: int
    filter: str | None = None
    """(wire 2.5) The member's subscription filter, canonical text: the group sends
    it only the events that match (left out: every event)."""
    _optional: ClassVar[frozenset[str]] = frozenset({"filter"})

    def _validate(self) -> None:
        _cid(self.topic, "topic")
        if (
            not isinstance(self.spare, int)
            or isinstance(self.spare, bool)
            or not 0 <= self.spare <= MAX_GROUP_ASSIGN
        ):
            raise _bad(f"spare: expected an integer in [0, {MAX_GROUP_ASSIGN}]")
        if self.filter is not None:
            _summary((self.filter,), "filter")


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupAck(_Message):
    """GROUP_ACK: the publisher's answer to a GROUP_JOIN (``ok``: a member for ``ttl``
    seconds unless refreshed), sent again when the member's ``helper`` changes
    (``None``: the publisher sends to it itself)."""

    op: ClassVar[str] = "GROUP_ACK"
    _wire: ClassVar[dict[str, str]] = {}
    topic: CID
    ok: bool
    helper: str | None = None
    ttl: float

    def _validate(self) -> None:
        _cid(self.topic, "topic")
        _bool(self.ok, "ok")
        if self.helper is not None:
            _check_peer(self.helper, "helper")
        _ttl(self.ttl)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupLeave(_Message):
    """GROUP_LEAVE: a member leaves a publisher's group, or the publisher drops it."""

    op: ClassVar[str] = "GROUP_LEAVE"
    _wire: ClassVar[dict[str, str]] = {}
    topic: CID

    def _validate(self) -> None:
        _cid(self.topic, "topic")


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupAssign(_Message):
    """GROUP_ASSIGN: a publisher asks a member (a helper) to forward the events it
    gets from the publisher to ``members`` for ``ttl`` seconds (renewed with each of
    the helper's own refreshes); ``members=()``: not a helper any more."""

    op: ClassVar[str] = "GROUP_ASSIGN"
    _wire: ClassVar[dict[str, str]] = {}
    topic: CID
    epoch: int
    members: tuple[str, ...]
    ttl: float
    filters: tuple[str, ...] | None = None
    """(wire 2.5) Each member's filter, canonical text, in the order of ``members``
    (``"*"``: every event): the helper forwards it only what matches."""
    _optional: ClassVar[frozenset[str]] = frozenset({"filters"})

    def _validate(self) -> None:
        _cid(self.topic, "topic")
        _uint(self.epoch, "epoch")
        if not isinstance(self.members, tuple) or len(self.members) > MAX_GROUP_ASSIGN:
            raise _bad(f"members: expected at most {MAX_GROUP_ASSIGN} peer IDs")
        for peer in self.members:
            _check_peer(peer, "members[]")
        if len(set(self.members)) != len(self.members):
            raise _bad("members: a peer is listed twice")
        _ttl(self.ttl)
        if self.filters is not None:
            if not isinstance(self.filters, tuple) or len(self.filters) != len(self.members):
                raise _bad("filters: expected one filter per member")
            for text in self.filters:
                _summary((text,), "filters[]")


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupEvent(_Message):
    """GROUP_EVENT: an event sent along a fast group, by its publisher or by a helper
    (never further: two hops at most)."""

    op: ClassVar[str] = "GROUP_EVENT"
    _wire: ClassVar[dict[str, str]] = {"topic_block": "topicBlock"}
    topic: CID
    event: bytes
    topic_block: bytes | None = None

    def _validate(self) -> None:
        _cid(self.topic, "topic")
        _bytes(self.event, "event", MAX_DESCRIPTOR_SIZE)
        if self.topic_block is not None:
            _bytes(self.topic_block, "topicBlock", MAX_DESCRIPTOR_SIZE)


Rpc = (
    Join
    | JoinAck
    | Leave
    | Event
    | RequestToPublish
    | RequestAck
    | Stored
    | Ping
    | Pong
    | Heads
    | Members
    | MembersWant
    | Digest
    | Summary
    | Watch
    | GroupJoin
    | GroupAck
    | GroupLeave
    | GroupAssign
    | GroupEvent
)
"""Any tree RPC message."""

_ALL: Final[tuple[type[_Message], ...]] = (
    Join,
    JoinAck,
    Leave,
    Event,
    RequestToPublish,
    RequestAck,
    Stored,
    Ping,
    Pong,
    Heads,
    Members,
    MembersWant,
    Digest,
    Summary,
    Watch,
    GroupJoin,
    GroupAck,
    GroupLeave,
    GroupAssign,
    GroupEvent,
)
_BY_OP: Final[dict[str, type[_Message]]] = {cls.op: cls for cls in _ALL}
_WIRE_NAMES: Final[dict[str, tuple[dict[str, str], frozenset[str]]]] = {
    cls.op: (
        names := {f.name: cls._wire.get(f.name, f.name) for f in fields(cls)},  # type: ignore[arg-type]
        frozenset({"op", *names.values()}),
    )
    for cls in _ALL
}
"""Per op: python field -> wire key, and every wire key with ``op`` (computed once:
``dataclasses.fields`` per decoded frame was ~3 % of a received event)."""


def _plan(
    cls: type[_Message], *, optional: bool = False
) -> tuple[bytes, tuple[tuple[bytes, str | None], ...]]:
    """The map header and, in canonical key order, each key's bytes and field name;
    ``optional``: the optional fields' keys too (the header then counts them all)."""
    keys: list[tuple[bytes, str | None]] = [(b"op", None)]
    keys += [
        (cls._wire.get(f.name, f.name).encode(), f.name)
        for f in fields(cls)  # type: ignore[arg-type]
        if optional or f.name not in cls._optional  # left out when None: the usual shape
    ]
    keys.sort(key=lambda kv: (len(kv[0]), kv[0]))
    head = bytearray()
    _dagcbor._head(5, len(keys), head)
    items = []
    for kb, name in keys:
        enc = bytearray()
        _dagcbor._head(3, len(kb), enc)
        enc += kb
        if name is None:
            _dagcbor._enc(cls.op, enc, 1)
        items.append((bytes(enc), name))
    return bytes(head), tuple(items)


_PLANS: Final = {cls: _plan(cls) for cls in _ALL}
_FULL_PLANS: Final = {cls: _plan(cls, optional=True)[1] for cls in _ALL if cls._optional}
"""Every key of the messages with optional fields: those set are written, in the same
canonical order (leaving keys out does not reorder the others)."""


_HEADS_MEMO_SIZE: Final = 65536
_heads_memo: dict[CID, tuple[float, bytes]] = {}


def _encode_heads(heads: tuple[tuple[CID, float], ...], out: bytearray) -> None:
    # [[link, float64], ...]: what _dagcbor._enc writes for this shape, without its
    # per-item type dispatch (HEADS carry up to MAX_HEADS entries, sent on every edge).
    # An entry's bytes are memoised by CID (with its timestamp): the same CIDs are
    # advertised on every edge, round after round.
    _dagcbor._head(4, len(heads), out)
    memo = _heads_memo
    for cid, ts in heads:
        hit = memo.get(cid)
        if hit is not None and hit[0] == ts and ts != 0.0:  # (0.0 == -0.0, not same bytes)
            out += hit[1]
            continue
        raw = _dagcbor._cid_bytes(cid)
        entry = bytearray(b"\x82\xd8\x2a")
        _dagcbor._head(2, len(raw) + 1, entry)
        entry += b"\x00"
        entry += raw
        entry += b"\xfb"
        entry += struct.pack(">d", ts)
        if len(memo) >= _HEADS_MEMO_SIZE:
            del memo[next(iter(memo))]
        memo[cid] = (ts, bytes(entry))
        out += entry


def encode_rpc(rpc: Rpc) -> bytes:
    """The dag-cbor body of one message (no length prefix).

    Same bytes as ``_dagcbor.encode(rpc.to_ipld())`` (tests/test_sim_fastpath.py
    checks it): the map header, key order and ``op`` bytes of each message type are
    computed once; values are encoded by the dag-cbor encoder. Messages are
    validated on construction, so the values are encodable.
    """
    optional = rpc._optional
    if optional and any(getattr(rpc, n) is not None for n in optional):
        # Optional fields set: the keys of those set and of the others (a MEMBERS
        # list with its summaries, a JOIN with its summary: went through to_ipld).
        items = tuple(
            (kb, name)
            for kb, name in _FULL_PLANS[type(rpc)]
            if name is None or name not in optional or getattr(rpc, name) is not None
        )
        out = bytearray()
        _dagcbor._head(5, len(items), out)
        for kb, name in items:
            out += kb
            if name is not None:
                value = getattr(rpc, name)
                if isinstance(value, Mapping):
                    value = dict(value)  # event attributes (a read-only mapping)
                _dagcbor._enc(value, out, 1)
        return bytes(out)
    head, items = _PLANS[type(rpc)]
    out = bytearray(head)
    enc = _dagcbor._enc
    for kb, name in items:
        out += kb
        if name is not None:
            if name == "heads":
                _encode_heads(rpc.heads, out)  # type: ignore[union-attr]
            elif name == "have" and rpc.have is not None:  # type: ignore[union-attr]
                _encode_heads(rpc.have, out)  # type: ignore[union-attr]
            else:
                enc(getattr(rpc, name), out, 1)
    return bytes(out)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_frame(rpc: Rpc) -> bytes:
    """One frame: unsigned-varint body length, then the dag-cbor body (§6)."""
    body = encode_rpc(rpc)
    n = len(body)
    return (bytes((n,)) if n < 0x80 else _varint(n)) + body


def decode_rpc(body: bytes) -> Rpc:
    """Decode one frame body strictly; only :class:`RemoteProtocolError`."""
    try:
        obj = _dagcbor.decode(bytes(body))
    except _dagcbor.CborError as exc:  # anything else is a bug and escapes as itself
        raise RemoteProtocolError(f"RPC body is not valid dag-cbor: {exc}") from exc
    if not isinstance(obj, dict):
        raise RemoteProtocolError("RPC body must be a dag-cbor map")
    op = obj.get("op")
    if not isinstance(op, str) or op not in _BY_OP:
        raise RemoteProtocolError(f"unknown RPC op {op!r}")
    cls = _BY_OP[op]
    names, every = _WIRE_NAMES[op]
    expected = every
    if cls._optional:
        expected = every - {names[n] for n in cls._optional if names[n] not in obj}
    if obj.keys() != expected:
        raise RemoteProtocolError(
            f"{op}: missing fields {sorted(expected - set(obj))}, "
            f"unknown fields {sorted(set(obj) - expected)}"
        )
    kwargs: dict[str, Any] = {}
    for name, wire in names.items():
        if wire not in obj:
            continue  # an optional field left out
        value: Any = obj[wire]
        if value is None and name in cls._optional:
            raise RemoteProtocolError(f"{op}: {wire} is left out, not null, when absent")
        if name in ("heads", "have") and value is not None:
            if not isinstance(value, list):
                raise RemoteProtocolError(f"{op}: {name} must be a list")
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        elif name == "ranges":
            if not isinstance(value, list):
                raise RemoteProtocolError("DIGEST: ranges must be a list")
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        elif name in ("members", "removed"):
            if not isinstance(value, list):
                raise RemoteProtocolError(f"{op}: {name} must be a list")
            value = tuple(value)
        elif name in ("filters", "summary", "parents"):
            if not isinstance(value, list):
                raise RemoteProtocolError(f"{op}: {name} must be a list")
            value = tuple(value)
        elif name == "summaries":
            if not isinstance(value, list) or not all(isinstance(v, list) for v in value):
                raise RemoteProtocolError(f"{op}: summaries must be a list of lists")
            value = tuple(tuple(v) for v in value)
        kwargs[name] = value
    try:
        rpc = cls(**kwargs)
    except LocalProtocolError as exc:  # what the validators raise on a bad value
        raise RemoteProtocolError(str(exc)) from exc
    return rpc  # type: ignore[return-value]


class FrameDecoder:
    """Incremental frame decoder: feed bytes in any pieces, get whole messages.

    Bad input raises only :class:`RemoteProtocolError`; once it has, the decoder
    refuses more input. (Any other exception is a bug, and is not translated.)
    """

    __slots__ = ("_broken", "_buf", "max_frame_size")

    def __init__(self, *, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        if not isinstance(max_frame_size, int) or max_frame_size <= 0:
            raise LocalProtocolError("max_frame_size must be a positive integer")
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._broken: RemoteProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a whole frame."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Rpc]:
        """Add ``data``; return every message completed by it, in order."""
        return [rpc for rpc, _ in self.feed_sized(data)]

    def feed_sized(self, data: bytes) -> list[tuple[Rpc, int]]:
        """:meth:`feed`, each message with the size of its frame on the wire (length
        prefix included: ``len(encode_frame(rpc))`` of a canonical frame)."""
        if self._broken is not None:
            raise RemoteProtocolError(f"stream already failed: {self._broken}")
        try:
            self._buf += data
            out: list[tuple[Rpc, int]] = []
            while True:
                parsed = self._next_length()
                if parsed is None:
                    return out
                length, header = parsed
                if len(self._buf) < header + length:
                    return out
                body = bytes(self._buf[header : header + length])
                del self._buf[: header + length]
                out.append((decode_rpc(body), header + length))
        except RemoteProtocolError as exc:
            self._broken = exc
            raise

    def _next_length(self) -> tuple[int, int] | None:
        value = 0
        for i, byte in enumerate(self._buf[:_MAX_VARINT_BYTES]):
            value |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                if i > 0 and byte == 0:
                    raise RemoteProtocolError("frame length varint is not minimal")
                if value > self.max_frame_size:
                    raise RemoteProtocolError(
                        f"frame of {value} bytes exceeds the limit of {self.max_frame_size}"
                    )
                if value == 0:
                    raise RemoteProtocolError("empty frame")
                return value, i + 1
            if value > self.max_frame_size:
                raise RemoteProtocolError(
                    f"frame length exceeds the limit of {self.max_frame_size}"
                )
        if len(self._buf) >= _MAX_VARINT_BYTES:
            raise RemoteProtocolError("frame length varint too long")
        return None
