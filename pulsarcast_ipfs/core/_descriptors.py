"""Topic and event descriptors: immutable dag-cbor blocks (docs/protocol.md §3, §4).

Theory of operation
-------------------
A descriptor is a frozen dataclass that validates itself on construction and
computes, once, its canonical dag-cbor bytes and (on first use) its CID (CIDv1, dag-cbor,
sha2-256). The CID is always *recomputed* from the bytes, never trusted from the
wire: :meth:`TopicDescriptor.decode` decodes strictly (exact key set, types,
supported ``protocolVersion``, link targets that are CIDv1 dag-cbor sha2-256,
canonical peer IDs, canonical bytes: re-encoding must give the input back) and
checks ``expected_cid`` if given. Every failure is a :class:`DescriptorError`.

Wire shapes (docs/protocol.md §4; links are CBOR tag 42)::

    topic = {"name": str, "author": peer-id, "parent": CID | null,
             "#": {"meta": CID, "<sub-topic name>": CID, ...},
             "metadata": {"created": str, "protocolVersion": str,
                          "allowedPublishers": {"enabled": bool, "peers": [peer-id]},
                          "requestToPublish": {"enabled": bool, "peers": [peer-id]},
                          "eventLinking": "LAST_SEEN" | "CUSTOM"}}
    event = {"topic": CID, "author": peer-id, "publisher": peer-id,
             "parents": [CID, ...], "clock": int,
             "payload": bytes, "metadata": {"created": str, "protocolVersion": str},
             "attributes": {name: str | int | float}}      (2.0.1 / 2.1.1 / 2.2.1 only)

Protocol 2 (docs/protocol-notes.md "History DAG"): an event links *every* head its
publisher knows (``parents``: at most :data:`MAX_PARENTS` distinct CIDs in ascending
byte order, empty for the first event) and carries a Lamport ``clock``: 0 without
parents, else greater than every parent's (the publisher writes 1 + the largest).
The history order is ``(clock, CID bytes)``. Protocol 1 events (one ``parent``) are
refused with a clear error; protocol 1 topic descriptors (same shape) are read as
they are.

``protocolVersion`` ``"2.1.0"`` (and ``"1.1.0"`` for topics; docs/security.md "Signatures") adds a
``"signature": bytes`` (64, Ed25519 by ``author``) to a topic and a
``"signatures": {"author": bytes, "publisher": bytes}`` map to an event; ``"1.0.0"``
has neither. A signature is over :meth:`~TopicDescriptor.signing_bytes` (the
canonical dag-cbor of the descriptor *without* its signature field(s)); an event's
author signature is over :meth:`EventDescriptor.author_statement` (tree, author,
created, payload: what a requester can sign before a publisher is chosen). The CID
covers everything, signatures included. The decoders check the *shape* only; the
node verifies the signatures (it knows the tree an event travels in).

``"2.2.0"`` (a delegated key, docs/security.md "Delegated signing keys") adds the
delegation to ``signatures``; ``"2.3.0"`` ("One signature") has one signature,
``{"publisher", "delegation"}``, over :meth:`EventDescriptor.one_statement`.

``protocolVersion`` ``"2.0.1"`` (unsigned), ``"2.1.1"`` (signed), ``"2.2.1"`` and
``"2.3.1"`` (delegated key) are 2.0.0, 2.1.0, 2.2.0 and 2.3.0 with an
``"attributes"`` map (rules in core/_filters.py): the patch digit 1 says
"carries attributes", the minor digit keeps its meaning. The map is non-empty, at
most 16 names to strings or finite numbers, covered by the CID, the publisher's
signature and the author's statement. An event without attributes is
written exactly as before (2.0.0/2.1.0, same bytes, same CID); a node that does not
know 2.0.1/2.1.1 refuses only the events that carry attributes.

``created`` is ISO-8601 UTC with microseconds (``2026-01-01T00:00:00.000000Z``;
``+00:00`` is accepted on decoding). It comes from the ``now`` given to the core.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import functools
import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final, TypeVar

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kademlia import InvalidPeerId, validate_peer_id

from . import _dagcbor
from ._delegation import Delegation
from ._errors import DescriptorError, LocalProtocolError
from ._filters import AttributeValue, validate_attributes

__all__ = [
    "ATTRIBUTES_VERSION",
    "ATTRIBUTE_VERSIONS",
    "DELEGATED_ATTRIBUTES_VERSION",
    "DELEGATED_VERSION",
    "MAX_PARENTS",
    "MAX_PAYLOAD_SIZE",
    "ONE_SIGNATURE_ATTRIBUTES_VERSION",
    "ONE_SIGNATURE_VERSION",
    "PROTOCOL_VERSION",
    "SIGNED_ATTRIBUTES_VERSION",
    "SIGNED_VERSION",
    "EventDescriptor",
    "EventLinking",
    "PeerPolicy",
    "TopicDescriptor",
    "TopicOptions",
    "author_statement",
    "cid_from_str",
    "cid_str",
    "compute_cid",
    "decode_descriptor",
    "event_version",
    "format_created",
    "parse_created",
    "sort_parents",
]

PROTOCOL_VERSION: Final = "2.0.0"
"""The unsigned ``protocolVersion`` (docs/protocol.md §4), written when signatures are off."""
SIGNED_VERSION: Final = "2.1.0"
"""The signed ``protocolVersion`` (docs/security.md "Signatures")."""
DELEGATED_VERSION: Final = "2.2.0"
"""A signed event whose ``signatures`` also carry the :class:`~._delegation.Delegation`
of the key that made them (docs/security.md "Delegated signing keys"); author ==
publisher. Events only: topic descriptors are always signed by the author's own key."""
ATTRIBUTES_VERSION: Final = "2.0.1"
"""An unsigned event with ``attributes`` (docs/protocol-notes.md "Attributes")."""
SIGNED_ATTRIBUTES_VERSION: Final = "2.1.1"
"""A signed event with ``attributes``."""
DELEGATED_ATTRIBUTES_VERSION: Final = "2.2.1"
"""A delegated-signed event with ``attributes`` (the patch digit 1: attributes)."""
ONE_SIGNATURE_VERSION: Final = "2.3.0"
"""A delegated-signed event (author == publisher) with *one* signature, over
:meth:`EventDescriptor.one_statement`, standing for both the author's and the
publisher's (docs/security.md "One signature"): ``signatures`` is ``{publisher,
delegation}``. What the node writes for its own events with a delegated key."""
ONE_SIGNATURE_ATTRIBUTES_VERSION: Final = "2.3.1"
"""2.3.0 with ``attributes`` (the patch digit 1: attributes)."""
ONE_SIGNATURE_VERSIONS: Final = frozenset({ONE_SIGNATURE_VERSION, ONE_SIGNATURE_ATTRIBUTES_VERSION})
"""Event versions with one signature (no ``signatures.author``)."""
DELEGATED_VERSIONS: Final = (
    frozenset({DELEGATED_VERSION, DELEGATED_ATTRIBUTES_VERSION}) | ONE_SIGNATURE_VERSIONS
)
"""Event versions whose ``signatures`` carry a delegation."""
SIGNED_VERSIONS: Final = (
    frozenset({"1.1.0", SIGNED_VERSION, SIGNED_ATTRIBUTES_VERSION}) | DELEGATED_VERSIONS
)
"""Versions whose descriptors carry signatures."""
ATTRIBUTE_VERSIONS: Final = frozenset(
    {
        ATTRIBUTES_VERSION,
        SIGNED_ATTRIBUTES_VERSION,
        DELEGATED_ATTRIBUTES_VERSION,
        ONE_SIGNATURE_ATTRIBUTES_VERSION,
    }
)
"""Event versions with an ``attributes`` map (and only they have one)."""
EVENT_VERSIONS: Final = (
    frozenset({PROTOCOL_VERSION, SIGNED_VERSION, DELEGATED_VERSION, ONE_SIGNATURE_VERSION})
    | ATTRIBUTE_VERSIONS
)
"""Event descriptors: protocol 2 only (multi-parent links and a clock)."""
SUPPORTED_VERSIONS: Final = frozenset({PROTOCOL_VERSION, SIGNED_VERSION, "1.0.0", "1.1.0"})
"""Topic descriptors: protocol 1 topics have the same shape and are read as they are."""
MAX_PARENTS: Final = 16
"""Most parents an event links (a LAST_SEEN publisher links its newest heads)."""
MAX_CLOCK: Final = 2**53
SIGNATURE_SIZE: Final = 64
MAX_PAYLOAD_SIZE: Final = 512 * 1024
"""Largest event payload, so that an EVENT frame fits the default frame limit."""
MAX_DESCRIPTOR_SIZE: Final = MAX_PAYLOAD_SIZE + 16 * 1024
MAX_NAME_LENGTH: Final = 256
MAX_LINKS: Final = 256
MAX_PEERS: Final = 1024

_CREATED_RE: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?(Z|\+00:00)\Z"
)
_MAX_TS: Final = 253402300799.0  # 9999-12-31T23:59:59Z


class EventLinking(enum.StrEnum):
    """How a publisher chooses an event's ``parents`` (docs/protocol.md §5 "Event linking")."""

    LAST_SEEN = "LAST_SEEN"
    """``parents`` are the heads the publisher knows in the topic (its newest
    :data:`MAX_PARENTS`): events it has seen that no event it has seen links."""
    CUSTOM = "CUSTOM"
    """The one parent is named by the publish call; it must exist in the same topic."""


def compute_cid(data: bytes) -> CID:
    """The CID of a dag-cbor block: CIDv1, dag-cbor, sha2-256, base32 text (§3)."""
    return _dagcbor.sha256_cid(data)


@functools.lru_cache(maxsize=4096)
def cid_from_str(text: str) -> CID:
    """The CID of its text form (memoised); ``ValueError`` if ``text`` is not one.

    The inverse of :func:`cid_str` for the protocol's base32 CIDv1 text, without
    ``multiformats``' validated decoder (~200 µs a call: 12 % of a loaded sidecar's
    event-loop time went to decoding its own topic roots every 2 s); other texts go
    through ``CID.decode``.
    """
    if not isinstance(text, str) or not text:
        raise ValueError("not a CID: empty")
    if text[0] == "b" and text == text.lower() and text[1:].isalnum():
        body = text[1:].upper()
        try:
            raw = base64.b32decode(body + "=" * (-len(body) % 8))
        except ValueError as exc:  # binascii.Error, or non-ASCII text
            raise ValueError(f"not a CID: {text[:80]!r}") from exc
        try:
            cid = _dagcbor.cid_from_bytes(raw)
        except _dagcbor.CborError as exc:
            raise ValueError(f"not a CID: {text[:80]!r}: {exc}") from exc
        if cid_str(cid) != text:
            raise ValueError(f"not a CID in canonical form: {text[:80]!r}")
        return cid
    try:
        return CID.decode(text)
    except (ValueError, LookupError) as exc:  # multiformats' errors
        raise ValueError(f"not a CID: {text[:80]!r}") from exc


def cid_str(cid: CID) -> str:
    """Canonical text form of a CID (base32, ``bafyrei…``; CIDv0 stays ``Qm…``).

    The project's CID keeps its text once made (:class:`~._cid.CID`); a
    ``multiformats.CID`` is encoded directly for CIDv1 (``b`` + RFC 4648 base32, lower
    case, unpadded, of its bytes): multiformats' validated encoder costs ~100 µs.
    """
    if type(cid) is CID:
        return str(cid)
    raw = bytes(cid)
    if raw[:1] == b"\x01":
        return "b" + base64.b32encode(raw).decode("ascii").lower().rstrip("=")
    return str(cid.encode("base32"))


def check_link(value: object, where: str) -> CID:
    """Return ``value`` if it is a CIDv1 dag-cbor sha2-256 link, else raise ``ValueError``."""
    if not isinstance(value, CID):
        raise ValueError(f"{where}: expected a CID link, got {type(value).__name__}")
    if not _dagcbor.is_dag_cbor_sha256_link(value):
        raise ValueError(f"{where}: link target must be CIDv1 dag-cbor sha2-256, got {value}")
    return value


def format_created(now: float) -> str:
    """``now`` (seconds since the epoch) as the ``created`` string of a descriptor."""
    if not isinstance(now, int | float) or not math.isfinite(now) or not 0 <= now <= _MAX_TS:
        raise LocalProtocolError(f"now must be a finite time since the epoch, got {now!r}")
    dt = datetime.fromtimestamp(now, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_created(text: str) -> float:
    """Parse a ``created`` string strictly; return seconds since the epoch.

    Raises ``ValueError`` on anything but ISO-8601 UTC (``Z`` or ``+00:00``).
    """
    if not isinstance(text, str):
        # Checked before the memo: a list or map from the wire is unhashable.
        raise ValueError("created must be a string")
    return _parse_created(text)


@functools.lru_cache(maxsize=16384)
def _parse_created(text: str) -> float:
    m = _CREATED_RE.match(text)
    if m is None:
        raise ValueError(f"created must be ISO-8601 UTC, got {text!r}")
    y, mo, d, h, mi, s, frac, _tz = m.groups()
    micro = int((frac or "0").ljust(6, "0"))
    try:
        dt = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), micro, tzinfo=UTC)
    except ValueError as exc:
        raise ValueError(f"created is not a valid date: {text!r}") from exc
    return dt.timestamp()


@functools.lru_cache(maxsize=16384)
def _canonical_peer(peer: str) -> str:
    return validate_peer_id(peer)


def _peer(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a peer ID string")
    try:
        canonical = _canonical_peer(value)
    except InvalidPeerId as exc:
        raise ValueError(f"{where}: {exc}") from exc
    if canonical != value:
        raise ValueError(f"{where}: peer ID not in canonical form ({canonical})")
    return value


def _name(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_LENGTH:
        raise ValueError(f"{where}: expected a non-empty string of at most {MAX_NAME_LENGTH}")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerPolicy:
    """``{"enabled": bool, "peers": [peer-id]}`` of ``allowedPublishers`` / ``requestToPublish``."""

    enabled: bool = False
    peers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise LocalProtocolError("PeerPolicy.enabled must be a bool")
        given: object = self.peers
        if isinstance(given, str) or not isinstance(given, Sequence):
            raise LocalProtocolError("PeerPolicy.peers must be a sequence of peer IDs")
        if len(self.peers) > MAX_PEERS:
            raise LocalProtocolError(f"PeerPolicy.peers: at most {MAX_PEERS} peers")
        try:
            peers = tuple(_peer(p, "peers") for p in self.peers)
        except ValueError as exc:
            raise LocalProtocolError(str(exc)) from exc
        if len(set(peers)) != len(peers):
            raise LocalProtocolError("PeerPolicy.peers: duplicate peer")
        object.__setattr__(self, "peers", peers)

    def to_ipld(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "peers": list(self.peers)}


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicOptions:
    """The publish rules of a topic version (``metadata`` of §4).

    ``allowed_publishers.enabled``: only the listed peers (and the author, always)
    may publish; disabled: anyone may. ``request_to_publish.enabled``: the listed
    peers (empty = anyone) may ask an allowed node to publish for them.
    """

    allowed_publishers: PeerPolicy = field(default_factory=PeerPolicy)
    request_to_publish: PeerPolicy = field(default_factory=PeerPolicy)
    event_linking: EventLinking = EventLinking.LAST_SEEN

    def __post_init__(self) -> None:
        if not isinstance(self.allowed_publishers, PeerPolicy) or not isinstance(
            self.request_to_publish, PeerPolicy
        ):
            raise LocalProtocolError("TopicOptions policies must be PeerPolicy objects")
        try:
            object.__setattr__(self, "event_linking", EventLinking(self.event_linking))
        except ValueError as exc:
            raise LocalProtocolError(f"unknown event linking {self.event_linking!r}") from exc


def _signature(value: object, where: str) -> bytes:
    if not isinstance(value, bytes) or len(value) != SIGNATURE_SIZE:
        raise ValueError(f"{where}: expected {SIGNATURE_SIZE} signature bytes")
    return value


def _check_signed(version: str, signatures: Sequence[bytes | None], *, draft: bool) -> None:
    """x.0.0: no signature; x.1.0: all of them (or none: a draft being signed)."""
    given = [sig for sig in signatures if sig is not None]
    signed = version in SIGNED_VERSIONS
    if not signed and given:
        raise ValueError(f"protocolVersion {version} descriptors carry no signatures")
    if signed and given and len(given) != len(signatures):
        raise ValueError("every signature or none (a draft)")
    if signed and not given and not draft:
        raise ValueError(f"protocolVersion {version} descriptors must be signed")
    for sig in given:
        _signature(sig, "signature")


def _delegation(value: object) -> Delegation:
    m = _exact_keys(value, {"key", "expires", "signature"}, "signatures.delegation")
    try:
        return Delegation(key=m["key"], expires=m["expires"], signature=m["signature"])
    except LocalProtocolError as exc:
        raise ValueError(str(exc)) from exc


def _encode(obj: Any) -> bytes:
    return _dagcbor.encode(obj)


def _decode_map(data: object) -> dict[str, Any]:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DescriptorError("descriptor data must be bytes")
    raw = bytes(data)
    if len(raw) > MAX_DESCRIPTOR_SIZE:
        raise DescriptorError(f"descriptor larger than {MAX_DESCRIPTOR_SIZE} bytes")
    try:
        obj = _dagcbor.decode(raw)
    except _dagcbor.CborError as exc:  # anything else is a bug and escapes as itself
        raise DescriptorError(f"not valid dag-cbor: {exc}") from exc
    if not isinstance(obj, dict):
        raise DescriptorError("a descriptor must be a dag-cbor map")
    return obj


def _exact_keys(obj: object, keys: set[str], where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a map")
    got = set(obj)
    if got != keys:
        missing, extra = sorted(keys - got), sorted(got - keys)
        raise ValueError(f"{where}: missing fields {missing}, unknown fields {extra}")
    return obj


def event_version(
    *, signed: bool, attributes: bool, delegated: bool = False, one_signature: bool = False
) -> str:
    """The ``protocolVersion`` an event is written with: signed (by a delegated key,
    with one signature or two) or not, with ``attributes`` or not (an event without
    them keeps 2.0.0/2.1.0/2.2.0/2.3.0 and its CID; with them the patch digit is 1)."""
    if one_signature:
        if not delegated:
            raise LocalProtocolError("one signature is for delegated-signed events only")
        return ONE_SIGNATURE_ATTRIBUTES_VERSION if attributes else ONE_SIGNATURE_VERSION
    if delegated:
        return DELEGATED_ATTRIBUTES_VERSION if attributes else DELEGATED_VERSION
    if attributes:
        return SIGNED_ATTRIBUTES_VERSION if signed else ATTRIBUTES_VERSION
    return SIGNED_VERSION if signed else PROTOCOL_VERSION


def _check_version(metadata: object, supported: frozenset[str] = SUPPORTED_VERSIONS) -> str:
    if not isinstance(metadata, dict):
        raise DescriptorError("metadata: expected a map")
    version = metadata.get("protocolVersion")
    if not isinstance(version, str):
        raise DescriptorError("metadata.protocolVersion: expected a string")
    if version not in supported:
        if supported is EVENT_VERSIONS and version in SUPPORTED_VERSIONS:
            raise DescriptorError(
                f"event protocolVersion {version!r} is protocol 1 (one 'parent' link), "
                f"which protocol 2 nodes do not read: upgrade the publishing node "
                f"(supported: {sorted(supported)}; docs/protocol-notes.md)"
            )
        raise DescriptorError(
            f"unsupported protocolVersion {version!r} (supported: {sorted(supported)})"
        )
    return version


def _parents(value: object) -> tuple[CID, ...]:
    """An event's ``parents``: distinct links in ascending byte order, at most MAX_PARENTS."""
    if not isinstance(value, list | tuple):
        raise ValueError("parents must be a list of event CIDs")
    if len(value) > MAX_PARENTS:
        raise ValueError(f"more than {MAX_PARENTS} parents")
    out = tuple(check_link(p, "parents") for p in value)
    raw = [bytes(p) for p in out]
    if any(a >= b for a, b in itertools.pairwise(raw)):
        raise ValueError("parents must be distinct and in ascending byte order")
    return out


def _policy_from_ipld(obj: object, where: str) -> PeerPolicy:
    m = _exact_keys(obj, {"enabled", "peers"}, where)
    if not isinstance(m["enabled"], bool) or not isinstance(m["peers"], list):
        raise ValueError(f"{where}: enabled must be bool and peers a list")
    try:
        return PeerPolicy(enabled=m["enabled"], peers=tuple(m["peers"]))
    except LocalProtocolError as exc:
        raise ValueError(f"{where}: {exc}") from exc


class _Block:
    """What both descriptors are: canonical dag-cbor bytes (``_data``, set by the
    descriptor) and the CID of those bytes, which is also their identity."""

    __slots__ = ()
    _data: bytes
    _cid: CID | None

    def encode(self) -> bytes:
        """Canonical dag-cbor bytes of this descriptor."""
        return self._data

    @property
    def cid(self) -> CID:
        """CIDv1 dag-cbor sha2-256 of :meth:`encode` (computed, never read from the wire)."""
        cid = self._cid
        if cid is None:
            cid = compute_cid(self._data)
            object.__setattr__(self, "_cid", cid)
        return cid

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self.cid == other.cid

    def __hash__(self) -> int:
        return hash(self.cid)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class TopicDescriptor(_Block):
    """A topic descriptor (docs/protocol.md §4). Equal when their CIDs are equal."""

    name: str
    author: str
    parent: CID | None = None
    links: Mapping[str, CID] = field(default_factory=dict)
    """The ``#`` map: ``meta`` → the meta topic, sub-topic name → sub-topic."""
    created: str
    protocol_version: str = PROTOCOL_VERSION
    allowed_publishers: PeerPolicy = field(default_factory=PeerPolicy)
    request_to_publish: PeerPolicy = field(default_factory=PeerPolicy)
    event_linking: EventLinking = EventLinking.LAST_SEEN
    signature: bytes | None = field(default=None, repr=False)
    """Ed25519 by ``author`` over :meth:`signing_bytes` (1.1.0); ``None`` in 1.0.0
    (and in a 1.1.0 *draft*, which the node signs and never sends)."""
    _data: bytes = field(init=False, repr=False)
    _cid: CID | None = field(init=False, default=None, repr=False)
    """Computed on first use: a draft (signed next) never needs its CID."""

    def __post_init__(self) -> None:
        try:
            _name(self.name, "name")
            _peer(self.author, "author")
            if self.parent is not None:
                check_link(self.parent, "parent")
            if not isinstance(self.links, Mapping) or len(self.links) > MAX_LINKS:
                raise ValueError(f"#: expected a map of at most {MAX_LINKS} links")
            links = dict(sorted(self.links.items()))
            for key, value in links.items():
                _name(key, "# key")
                check_link(value, f"#.{key}")
            parse_created(self.created)
            if self.protocol_version not in SUPPORTED_VERSIONS:
                raise ValueError(f"unsupported protocolVersion {self.protocol_version!r}")
            _check_signed(self.protocol_version, (self.signature,), draft=True)
            linking = EventLinking(self.event_linking)
        except ValueError as exc:
            raise LocalProtocolError(f"invalid topic descriptor: {exc}") from exc
        if not isinstance(self.allowed_publishers, PeerPolicy) or not isinstance(
            self.request_to_publish, PeerPolicy
        ):
            raise LocalProtocolError("invalid topic descriptor: policies must be PeerPolicy")
        object.__setattr__(self, "links", links)
        object.__setattr__(self, "event_linking", linking)
        data = _encode(self.to_ipld())
        object.__setattr__(self, "_data", data)

    @classmethod
    def new(
        cls,
        *,
        name: str,
        author: str,
        now: float,
        options: TopicOptions | None = None,
        parent: CID | None = None,
        links: Mapping[str, CID] | None = None,
        protocol_version: str = PROTOCOL_VERSION,
    ) -> TopicDescriptor:
        """A descriptor created at ``now`` with ``options`` (Algorithm 1).

        With ``protocol_version=SIGNED_VERSION`` this is an unsigned *draft*: sign its
        :meth:`signing_bytes`, then :meth:`with_signature`.
        """
        opts = options if options is not None else TopicOptions()
        return cls(
            name=name,
            author=author,
            parent=parent,
            links=dict(links or {}),
            created=format_created(now),
            protocol_version=protocol_version,
            allowed_publishers=opts.allowed_publishers,
            request_to_publish=opts.request_to_publish,
            event_linking=opts.event_linking,
        )

    @property
    def is_draft(self) -> bool:
        """A 1.1.0 descriptor not signed yet (never sent or stored)."""
        return self.protocol_version in SIGNED_VERSIONS and self.signature is None

    def with_signature(self, signature: bytes) -> TopicDescriptor:
        """This draft, signed (``LocalProtocolError`` if the signature is malformed)."""
        return dataclasses.replace(self, signature=signature)

    def signing_bytes(self) -> bytes:
        """What the author signs: canonical dag-cbor without ``signature``."""
        if self.signature is None:
            return self._data
        return _encode(self._body())

    def to_ipld(self) -> dict[str, Any]:
        body = self._body()
        if self.signature is not None:
            body["signature"] = self.signature
        return body

    def _body(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "author": self.author,
            "parent": self.parent,
            "#": dict(self.links),
            "metadata": {
                "created": self.created,
                "protocolVersion": self.protocol_version,
                "allowedPublishers": self.allowed_publishers.to_ipld(),
                "requestToPublish": self.request_to_publish.to_ipld(),
                "eventLinking": self.event_linking.value,
            },
        }

    @property
    def meta(self) -> CID | None:
        """The meta topic (``#.meta``), ``None`` for a meta topic itself."""
        return self.links.get("meta")

    @property
    def sub_topics(self) -> dict[str, CID]:
        """Sub-topic links (every ``#`` entry but ``meta``)."""
        return {k: v for k, v in self.links.items() if k != "meta"}

    @property
    def created_ts(self) -> float:
        return parse_created(self.created)

    @property
    def options(self) -> TopicOptions:
        return TopicOptions(
            allowed_publishers=self.allowed_publishers,
            request_to_publish=self.request_to_publish,
            event_linking=self.event_linking,
        )

    def may_publish(self, peer: str) -> bool:
        """``allowedPublishers``: disabled → anyone; enabled → the author and the listed peers."""
        return (
            not self.allowed_publishers.enabled
            or peer == self.author
            or peer in self.allowed_publishers.peers
        )

    def may_request(self, peer: str) -> bool:
        """``requestToPublish``: enabled and (empty list or ``peer`` listed)."""
        rtp = self.request_to_publish
        return rtp.enabled and (not rtp.peers or peer in rtp.peers)

    @classmethod
    def decode(cls, data: bytes, *, expected_cid: CID | None = None) -> TopicDescriptor:
        """Decode strictly (see the module docstring); only :class:`DescriptorError`."""
        obj = _decode_map(data)
        version = _check_version(obj.get("metadata"))
        try:
            keys = {"name", "author", "parent", "#", "metadata"}
            if version in SIGNED_VERSIONS:
                keys.add("signature")
            top = _exact_keys(obj, keys, "topic")
            signature = top.get("signature")
            if version in SIGNED_VERSIONS:
                _signature(signature, "signature")
            meta = _exact_keys(
                top["metadata"],
                {
                    "created",
                    "protocolVersion",
                    "allowedPublishers",
                    "requestToPublish",
                    "eventLinking",
                },
                "metadata",
            )
            links = top["#"]
            if not isinstance(links, dict):
                raise ValueError("#: expected a map")
            linking = meta["eventLinking"]
            if not isinstance(linking, str) or linking not in EventLinking.__members__:
                raise ValueError(f"metadata.eventLinking: unknown value {linking!r}")
            desc = cls(
                name=top["name"],
                author=top["author"],
                parent=top["parent"],
                links=links,
                created=meta["created"],
                protocol_version=meta["protocolVersion"],
                allowed_publishers=_policy_from_ipld(
                    meta["allowedPublishers"], "allowedPublishers"
                ),
                request_to_publish=_policy_from_ipld(meta["requestToPublish"], "requestToPublish"),
                event_linking=EventLinking(linking),
                signature=signature,
            )
        except (ValueError, LocalProtocolError) as exc:
            raise DescriptorError(f"invalid topic descriptor: {exc}") from exc
        return _finish_decode(desc, data, expected_cid)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class EventDescriptor(_Block):
    """An event descriptor (docs/protocol.md §4). Equal when their CIDs are equal."""

    topic: CID
    author: str
    publisher: str
    parents: tuple[CID, ...] = ()
    """Every head the publisher knew (LAST_SEEN) or the one named (CUSTOM); sorted."""
    clock: int = 0
    """0 without parents; otherwise greater than every parent's clock."""
    payload: bytes
    created: str
    protocol_version: str = PROTOCOL_VERSION
    author_signature: bytes | None = field(default=None, repr=False)
    """Ed25519 by ``author`` over :meth:`author_statement` (1.1.0)."""
    publisher_signature: bytes | None = field(default=None, repr=False)
    """Ed25519 by ``publisher`` over :meth:`signing_bytes` (1.1.0)."""
    delegation: Delegation | None = field(default=None, repr=False)
    """:data:`DELEGATED_VERSION`: the publisher's delegation of the key that made
    both signatures (``None`` in a draft and in every other version)."""
    attributes: Mapping[str, AttributeValue] | None = None
    """Named strings and numbers a subscription's filter selects on (core/_filters.py);
    only in the :data:`ATTRIBUTE_VERSIONS`, never empty (no attributes = None)."""
    _data: bytes = field(init=False, repr=False)
    _cid: CID | None = field(init=False, default=None, repr=False)
    """Computed on first use: a draft (signed next) never needs its CID."""
    _created_ts: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            check_link(self.topic, "topic")
            _peer(self.author, "author")
            _peer(self.publisher, "publisher")
            object.__setattr__(self, "parents", _parents(self.parents))
            if type(self.clock) is not int or not 0 <= self.clock <= MAX_CLOCK:
                raise ValueError(f"clock must be an integer in 0..{MAX_CLOCK}")
            if (self.clock == 0) != (not self.parents):
                raise ValueError("clock is 0 exactly when there are no parents")
            if not isinstance(self.payload, bytes):
                raise ValueError("payload must be bytes")
            if len(self.payload) > MAX_PAYLOAD_SIZE:
                raise ValueError(f"payload larger than {MAX_PAYLOAD_SIZE} bytes")
            created_ts = parse_created(self.created)
            if self.protocol_version not in EVENT_VERSIONS:
                raise ValueError(f"unsupported protocolVersion {self.protocol_version!r}")
            if self.attributes is not None:
                if not self.attributes:
                    raise ValueError("attributes: an event without attributes has no map")
                attrs = validate_attributes(self.attributes)
                object.__setattr__(self, "attributes", MappingProxyType(attrs))
            if (self.attributes is not None) != (self.protocol_version in ATTRIBUTE_VERSIONS):
                raise ValueError(
                    f"attributes are carried exactly by protocolVersion "
                    f"{sorted(ATTRIBUTE_VERSIONS)} events (this one: {self.protocol_version!r})"
                )
            if self.protocol_version in ONE_SIGNATURE_VERSIONS:
                if self.author_signature is not None:
                    raise ValueError(
                        f"protocolVersion {self.protocol_version} carries one signature "
                        "(signatures.publisher), no author signature"
                    )
                _check_signed(self.protocol_version, (self.publisher_signature,), draft=True)
            else:
                _check_signed(
                    self.protocol_version,
                    (self.author_signature, self.publisher_signature),
                    draft=True,
                )
            if self.protocol_version in DELEGATED_VERSIONS:
                if self.author != self.publisher:
                    raise ValueError("a delegated signature needs author == publisher")
                if (self.delegation is None) != (self.publisher_signature is None):
                    raise ValueError("signatures.delegation goes with the signatures")
                if self.delegation is not None and not isinstance(self.delegation, Delegation):
                    raise ValueError("signatures.delegation: expected a Delegation")
            elif self.delegation is not None:
                raise ValueError(f"protocolVersion {self.protocol_version} has no delegation")
        except ValueError as exc:
            raise LocalProtocolError(f"invalid event descriptor: {exc}") from exc
        data = _encode(self.to_ipld())
        object.__setattr__(self, "_data", data)
        object.__setattr__(self, "_created_ts", created_ts)

    @property
    def is_draft(self) -> bool:
        """A 1.1.0 event not signed yet (never sent or stored)."""
        return self.protocol_version in SIGNED_VERSIONS and self.publisher_signature is None

    def with_signatures(
        self, *, author: bytes, publisher: bytes, delegation: Delegation | None = None
    ) -> EventDescriptor:
        """This draft, signed (``LocalProtocolError`` if a signature is malformed);
        ``delegation`` for a :data:`DELEGATED_VERSION` draft."""
        return dataclasses.replace(
            self, author_signature=author, publisher_signature=publisher, delegation=delegation
        )

    def with_one_signature(self, *, signature: bytes, delegation: Delegation) -> EventDescriptor:
        """This :data:`ONE_SIGNATURE_VERSION` draft, signed: ``signature`` by the
        delegated key over :meth:`one_statement`."""
        return dataclasses.replace(self, publisher_signature=signature, delegation=delegation)

    def signing_bytes(self) -> bytes:
        """What the publisher signs: canonical dag-cbor without ``signatures``."""
        if self.publisher_signature is None:
            return self._data
        return _encode(self._body())

    def one_statement(self, tree: CID) -> bytes:
        """What the one signature of a :data:`ONE_SIGNATURE_VERSION` event covers: the
        dag-cbor map ``{"tree": tree key, "event": signing bytes}`` — the whole event
        (the publisher's part) and the tree it travels in (the author's statement
        names it). Its key set is no descriptor's, author statement's or
        delegation's, so no other signature passes for it."""
        return _encode({"tree": tree, "event": self.signing_bytes()})

    def author_statement(self, tree: CID) -> bytes:
        """What the author signs (see :func:`author_statement`)."""
        return author_statement(
            tree=tree,
            author=self.author,
            created=self.created,
            payload=self.payload,
            attributes=self.attributes,
        )

    def to_ipld(self) -> dict[str, Any]:
        body = self._body()
        if self.publisher_signature is not None:
            sigs: dict[str, Any] = {"publisher": self.publisher_signature}
            if self.author_signature is not None:  # none in the ONE_SIGNATURE_VERSIONS
                sigs["author"] = self.author_signature
            if self.delegation is not None:
                sigs["delegation"] = self.delegation.to_ipld()
            body["signatures"] = sigs
        return body

    def _body(self) -> dict[str, Any]:
        body = {
            "topic": self.topic,
            "author": self.author,
            "publisher": self.publisher,
            "parents": list(self.parents),
            "clock": self.clock,
            "payload": self.payload,
            "metadata": {"created": self.created, "protocolVersion": self.protocol_version},
        }
        if self.attributes is not None:
            body["attributes"] = dict(self.attributes)
        return body

    @property
    def created_ts(self) -> float:
        return self._created_ts

    @property
    def order_key(self) -> tuple[int, bytes]:
        """This event's place in the history order: ``(clock, CID bytes)``."""
        return (self.clock, bytes(self.cid))

    @classmethod
    def decode(cls, data: bytes, *, expected_cid: CID | None = None) -> EventDescriptor:
        """Decode strictly (see the module docstring); only :class:`DescriptorError`."""
        obj = _decode_map(data)
        version = _check_version(obj.get("metadata"), EVENT_VERSIONS)
        try:
            keys = {"topic", "author", "publisher", "parents", "clock", "payload", "metadata"}
            if version in SIGNED_VERSIONS:
                keys.add("signatures")
            if version in ATTRIBUTE_VERSIONS:
                keys.add("attributes")
            top = _exact_keys(obj, keys, "event")
            meta = _exact_keys(top["metadata"], {"created", "protocolVersion"}, "metadata")
            sigs: dict[str, Any] = {"author": None, "publisher": None}
            delegation: Delegation | None = None
            if version in SIGNED_VERSIONS:
                one = version in ONE_SIGNATURE_VERSIONS
                names = {"publisher"} if one else {"author", "publisher"}
                if version in DELEGATED_VERSIONS:
                    names.add("delegation")
                sigs = _exact_keys(top["signatures"], names, "signatures")
                if one:
                    sigs = {**sigs, "author": None}
                else:
                    _signature(sigs["author"], "signatures.author")
                _signature(sigs["publisher"], "signatures.publisher")
                if version in DELEGATED_VERSIONS:
                    delegation = _delegation(sigs["delegation"])
            desc = cls(
                topic=top["topic"],
                author=top["author"],
                publisher=top["publisher"],
                parents=top["parents"],
                clock=top["clock"],
                payload=top["payload"],
                created=meta["created"],
                protocol_version=meta["protocolVersion"],
                author_signature=sigs["author"],
                publisher_signature=sigs["publisher"],
                attributes=_attribute_map(top.get("attributes"), version),
                delegation=delegation,
            )
        except (ValueError, LocalProtocolError) as exc:
            raise DescriptorError(f"invalid event descriptor: {exc}") from exc
        return _finish_decode(desc, data, expected_cid)


def sort_parents(parents: Iterable[CID]) -> tuple[CID, ...]:
    """``parents`` as an event stores them: distinct, in ascending byte order."""
    return tuple(sorted(set(parents), key=bytes))


def _attribute_map(value: object, version: str) -> Mapping[str, AttributeValue] | None:
    if version not in ATTRIBUTE_VERSIONS:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"attributes: expected a map, got {type(value).__name__}")
    return value


def author_statement(
    *,
    tree: CID,
    author: str,
    created: str,
    payload: bytes,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> bytes:
    """What an event's author signs: ``{"tree", "author", "created", "payload"}``,
    and ``"attributes"`` when the event has them (so a publisher cannot change them).

    ``tree`` is the topic's *first version* (the tree key): a requester signs this
    before it knows which node will publish, under which topic version and with
    which ``parents`` (LAST_SEEN) — those the publisher's signature covers. The key
    set differs from both descriptors', so no signature can be taken for another.
    """
    statement: dict[str, Any] = {
        "tree": tree,
        "author": author,
        "created": created,
        "payload": payload,
    }
    if attributes:
        statement["attributes"] = dict(attributes)
    return _encode(statement)


_D = TypeVar("_D", TopicDescriptor, EventDescriptor)


def _finish_decode(desc: _D, data: bytes, expected_cid: CID | None) -> _D:
    if desc.encode() != bytes(data):
        raise DescriptorError("descriptor bytes are not canonical dag-cbor")
    if expected_cid is not None and desc.cid != expected_cid:
        raise DescriptorError(f"descriptor CID {desc.cid} does not match expected {expected_cid}")
    return desc


def decode_descriptor(
    data: bytes, *, expected_cid: CID | None = None
) -> TopicDescriptor | EventDescriptor:
    """Decode either kind of descriptor (an event has a ``topic`` field, a topic a ``name``)."""
    obj = _decode_map(data)
    if "topic" in obj:
        return EventDescriptor.decode(data, expected_cid=expected_cid)
    return TopicDescriptor.decode(data, expected_cid=expected_cid)


_DECODE_CACHE_SIZE = 8192
"""How many decoded descriptors :func:`decode_cached` keeps (the process's bound)."""
_decoded: dict[bytes, TopicDescriptor | EventDescriptor] = {}


def set_decode_cache_size(size: int) -> None:
    """Bound :func:`decode_cached`'s memo to ``size`` descriptors (0: none kept).

    The memo pays where one process runs many nodes (the simulator, ``CoreNet``: the
    same event arrives at each), and the default suits that. A sidecar runs one node:
    a block reaches it once or a few times, and 8,192 decoded events (their bytes and
    their objects, ~4.5 KB each with a 1 KB payload) are ~35 MiB held for little; it
    sets a small bound (``decode_cache`` in its configuration)."""
    global _DECODE_CACHE_SIZE
    if not isinstance(size, int) or size < 0:
        raise ValueError("the decode cache size must be an int >= 0")
    _DECODE_CACHE_SIZE = size
    while len(_decoded) > size:
        del _decoded[next(iter(_decoded))]


def decode_cached(cls: type[_D], data: bytes, *, expected_cid: CID | None = None) -> _D:
    """``cls.decode(data, expected_cid=...)``, memoised by the exact bytes (bounded).

    A descriptor, its validity and its CID are functions of its bytes alone (§3: the
    CID is recomputed from the bytes, never trusted), so a block already decoded —
    the same event arriving at many nodes of one process, or a JOIN's topic block —
    is decoded, validated and hashed once. ``expected_cid`` is still checked on every
    call; invalid bytes are not remembered (they raise every time). Descriptors are
    immutable, so sharing one object is safe.
    """
    if type(data) is not bytes:
        return cls.decode(data, expected_cid=expected_cid)
    desc = _decoded.get(data)
    if type(desc) is not cls:
        desc = cls.decode(data)
        if _DECODE_CACHE_SIZE:
            if len(_decoded) >= _DECODE_CACHE_SIZE:
                del _decoded[next(iter(_decoded))]
            _decoded[data] = desc
    if expected_cid is not None and desc.cid != expected_cid:
        raise DescriptorError(f"descriptor CID {desc.cid} does not match expected {expected_cid}")
    return desc
