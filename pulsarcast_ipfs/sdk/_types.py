"""What the SDK hands back: frozen dataclasses parsed from the sidecar's JSON.

Each ``from_json`` checks the fields docs/http-api.md ("Objects", "Endpoints")
promises and raises :class:`InvalidResponse` when the sidecar sent something else,
so an application never meets a half-parsed object. Fields the contract does not
name are ignored (a newer sidecar may add some).
"""

from __future__ import annotations

import base64
import binascii
import enum
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal

from pulsarcast_ipfs.addresses import http_url
from pulsarcast_ipfs.sdk._errors import InvalidResponse

__all__ = [
    "DEFAULT_API",
    "AttributeValue",
    "ClientConfig",
    "Delivery",
    "Event",
    "EventLinking",
    "Health",
    "HistoryOrder",
    "HistoryPage",
    "NodeStatus",
    "PeerSet",
    "PublishOutcome",
    "Topic",
    "TopicStatus",
]

DEFAULT_API = "http://127.0.0.1:5050"

AttributeValue = str | int | float
"""The value of an event attribute: a string or a finite number (docs/sdk.md)."""


def normalise_api(api: str) -> str:
    """``127.0.0.1:5050`` (the sidecar's own ``--api`` form) or a Kubo-style multiaddr
    (``/ip4/127.0.0.1/tcp/5050``, ``/ip6/::1/tcp/5050``, ``/dns4/HOST/tcp/5050``) →
    ``http://127.0.0.1:5050``."""
    api = api.strip().rstrip("/")
    if not api:
        raise ValueError("the sidecar API address is empty")
    api = http_url(api)
    if not api.startswith(("http://", "https://")):
        raise ValueError(f"the sidecar API must be an http(s) URL, got {api!r}")
    return api


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientConfig:
    """How to reach a sidecar.

    ``api`` is the sidecar's HTTP API (``host:port`` is taken as ``http://host:port``);
    ``token`` the bearer token it wants when bound beyond loopback. ``timeout`` bounds
    every request but the delivery stream's waits for the next line (those wait
    forever; a dropped stream is resumed). A dropped stream is retried
    ``reconnect_attempts`` times in a row, ``reconnect_delay`` seconds apart (doubling,
    at most 5 s); a delivery received resets the count.
    """

    api: str = DEFAULT_API
    token: str | None = None
    timeout: float = 30.0
    reconnect_attempts: int = 5
    reconnect_delay: float = 0.2

    def __post_init__(self) -> None:
        object.__setattr__(self, "api", normalise_api(self.api))
        if self.token is not None and not self.token.strip():
            raise ValueError("token must not be empty (use None for no token)")
        if not self.timeout > 0:
            raise ValueError(f"timeout must be positive, got {self.timeout!r}")
        if self.reconnect_attempts < 0:
            raise ValueError("reconnect_attempts must be >= 0")
        if self.reconnect_delay < 0:
            raise ValueError("reconnect_delay must be >= 0")

    @classmethod
    def from_env(
        cls, *, api: str | None = None, token: str | None = None, **kwargs: Any
    ) -> ClientConfig:
        """Explicit values first, then ``PULSARCAST_API`` / ``PULSARCAST_API_TOKEN``."""
        return cls(
            api=api or os.environ.get("PULSARCAST_API") or DEFAULT_API,
            token=token or os.environ.get("PULSARCAST_API_TOKEN") or None,
            **kwargs,
        )


class EventLinking(enum.StrEnum):
    """How a topic's events choose their ``parents`` (docs/protocol.md §5 "Event linking"):
    ``LAST_SEEN`` links every head the publisher knows, ``CUSTOM`` the one given."""

    LAST_SEEN = "LAST_SEEN"
    CUSTOM = "CUSTOM"


# -- parsing helpers -------------------------------------------------------------------


def _obj(doc: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        raise InvalidResponse(f"{what}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _str(doc: Mapping[str, Any], key: str, what: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidResponse(f"{what}: field {key!r} must be a non-empty string, got {value!r}")
    return value


def _opt_str(doc: Mapping[str, Any], key: str, what: str) -> str | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidResponse(f"{what}: field {key!r} must be a string or null, got {value!r}")
    return value


def _bool(doc: Mapping[str, Any], key: str, what: str) -> bool:
    value = doc.get(key)
    if not isinstance(value, bool):
        raise InvalidResponse(f"{what}: field {key!r} must be a boolean, got {value!r}")
    return value


def _int(doc: Mapping[str, Any], key: str, what: str) -> int:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidResponse(f"{what}: field {key!r} must be an integer, got {value!r}")
    return value


def _number(doc: Mapping[str, Any], key: str, what: str) -> float:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidResponse(f"{what}: field {key!r} must be a number, got {value!r}")
    return float(value)


def _strs(doc: Mapping[str, Any], key: str, what: str) -> tuple[str, ...]:
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidResponse(f"{what}: field {key!r} must be a list of strings, got {value!r}")
    return tuple(value)


def format_created(when: datetime) -> str:
    """The contract's time form: ``2026-11-21T09:00:00.000000Z`` (UTC)."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _created(doc: Mapping[str, Any], what: str) -> datetime:
    text = _str(doc, "created", what)
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidResponse(f"{what}: 'created' is not an ISO-8601 time: {text!r}") from exc
    if when.tzinfo is None:
        raise InvalidResponse(f"{what}: 'created' has no time zone: {text!r}")
    return when


# -- objects ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerSet:
    """A topic's ``allowedPublishers`` or ``requestToPublish`` (docs/protocol.md §4).

    ``allowed_publishers``: disabled means anyone may publish; enabled, only ``peers``.
    ``request_to_publish``: enabled with no ``peers`` means anyone may ask.
    """

    enabled: bool = False
    peers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "peers", tuple(self.peers))
        if not all(isinstance(p, str) and p for p in self.peers):
            raise ValueError(f"peers must be non-empty peer ID strings, got {self.peers!r}")

    @classmethod
    def of(cls, value: PeerSet | bool | Sequence[str]) -> PeerSet:
        """``True``/``False`` → enabled (anyone) / disabled; a list → enabled for those."""
        if isinstance(value, PeerSet):
            return value
        if isinstance(value, bool):
            return cls(enabled=value)
        if isinstance(value, str):
            raise TypeError("give a list of peer IDs, not a single string")
        return cls(enabled=True, peers=tuple(value))

    def to_json(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "peers": list(self.peers)}

    @classmethod
    def from_json(cls, doc: Any, what: str) -> PeerSet:
        d = _obj(doc, what)
        return cls(enabled=_bool(d, "enabled", what), peers=_strs(d, "peers", what))


@dataclass(frozen=True, slots=True, kw_only=True)
class Topic:
    """A topic descriptor version (docs/protocol.md §4), as ``GET /v1/topics/{cid}`` shows it.

    ``root_cid`` is the topic's first version (its stable identity); ``latest`` the
    newest version the sidecar knows (only on ``get_topic``).
    """

    cid: str
    root_cid: str
    name: str
    author: str
    parent: str | None
    sub_topics: Mapping[str, str]
    created: datetime
    protocol_version: str
    allowed_publishers: PeerSet
    request_to_publish: PeerSet
    event_linking: EventLinking
    latest: str | None = None

    @property
    def meta(self) -> str | None:
        """The CID of the topic's meta topic (``#.meta``)."""
        return self.sub_topics.get("meta")

    def to_json(self) -> dict[str, Any]:
        """The contract's JSON form (what ``from_json`` reads)."""
        doc: dict[str, Any] = {
            "cid": self.cid,
            "root_cid": self.root_cid,
            "name": self.name,
            "author": self.author,
            "parent": self.parent,
            "sub_topics": dict(self.sub_topics),
            "created": format_created(self.created),
            "protocol_version": self.protocol_version,
            "allowed_publishers": self.allowed_publishers.to_json(),
            "request_to_publish": self.request_to_publish.to_json(),
            "event_linking": self.event_linking.value,
        }
        if self.latest is not None:
            doc["latest"] = self.latest
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> Topic:
        what = "topic"
        d = _obj(doc, what)
        subs = _obj(d.get("sub_topics", {}), "topic.sub_topics")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in subs.items()):
            raise InvalidResponse(f"topic.sub_topics must map names to CIDs, got {subs!r}")
        linking = _str(d, "event_linking", what)
        try:
            event_linking = EventLinking(linking)
        except ValueError as exc:
            raise InvalidResponse(f"topic: unknown event_linking {linking!r}") from exc
        return cls(
            cid=_str(d, "cid", what),
            root_cid=_str(d, "root_cid", what),
            name=_str(d, "name", what),
            author=_str(d, "author", what),
            parent=_opt_str(d, "parent", what),
            sub_topics=dict(subs),
            created=_created(d, what),
            protocol_version=_str(d, "protocol_version", what),
            allowed_publishers=PeerSet.from_json(
                d.get("allowed_publishers"), "topic.allowed_publishers"
            ),
            request_to_publish=PeerSet.from_json(
                d.get("request_to_publish"), "topic.request_to_publish"
            ),
            event_linking=event_linking,
            latest=_opt_str(d, "latest", what),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """An event descriptor (docs/protocol.md §4); ``payload`` decoded from base64.

    ``parents`` are the events it links in the topic's history DAG (protocol 2:
    every head its publisher knew, at most 16), ``clock`` its Lamport clock (0
    without parents, else one more than its parents' largest). The history order
    is ``(clock, CID)``. Delivery-log lines written by a protocol 1 sidecar carry a
    single ``parent``: it becomes ``parents``, and ``clock`` is 0.
    """

    cid: str
    topic: str
    author: str
    publisher: str
    parents: tuple[str, ...]
    clock: int
    created: datetime
    protocol_version: str
    payload: bytes = field(repr=False)
    attributes: Mapping[str, AttributeValue] = field(
        default_factory=lambda: MappingProxyType({}), hash=False
    )
    """The event's attributes (empty when it has none, or from an older sidecar)."""

    @property
    def text(self) -> str:
        """The payload as UTF-8 text (undecodable bytes replaced)."""
        return self.payload.decode("utf-8", errors="replace")

    def to_json(self) -> dict[str, Any]:
        """The contract's JSON form (payload in base64)."""
        return {
            "cid": self.cid,
            "topic": self.topic,
            "author": self.author,
            "publisher": self.publisher,
            "parents": list(self.parents),
            "clock": self.clock,
            "created": format_created(self.created),
            "protocol_version": self.protocol_version,
            "payload": base64.b64encode(self.payload).decode("ascii"),
            "attributes": dict(self.attributes),
        }

    @classmethod
    def from_json(cls, doc: Any, what: str = "event") -> Event:
        d = _obj(doc, what)
        raw = d.get("payload")
        if not isinstance(raw, str):
            raise InvalidResponse(f"{what}: field 'payload' must be base64 text, got {raw!r}")
        try:
            payload = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidResponse(f"{what}: 'payload' is not valid base64") from exc
        if "parents" in d or "parent" not in d:
            parents = _strs(d, "parents", what)
            clock = _int(d, "clock", what)
            if clock < 0:
                raise InvalidResponse(f"{what}: negative clock {clock}")
        else:  # a protocol 1 line of the delivery log
            legacy = _opt_str(d, "parent", what)
            parents, clock = ((legacy,) if legacy else ()), 0
        return cls(
            cid=_str(d, "cid", what),
            topic=_str(d, "topic", what),
            author=_str(d, "author", what),
            publisher=_str(d, "publisher", what),
            parents=parents,
            clock=clock,
            created=_created(d, what),
            protocol_version=_str(d, "protocol_version", what),
            payload=payload,
            attributes=_attributes(d, what),
        )


def _attributes(doc: Mapping[str, Any], what: str) -> Mapping[str, AttributeValue]:
    value = doc.get("attributes", {})
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str | int | float) and not isinstance(v, bool)
        for k, v in value.items()
    ):
        raise InvalidResponse(
            f"{what}: field 'attributes' must map names to strings or numbers, got {value!r}"
        )
    return MappingProxyType(dict(value))


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """One line of ``GET /v1/deliveries``: an event handed to this node's applications.

    ``seq`` is the sidecar's delivery cursor (resume with ``after=seq``);
    ``recovered`` marks events found by gap repair (docs/protocol.md §5 "History and
    eventual delivery"); ``delivered_at`` is the sidecar's clock, in Unix seconds.
    """

    seq: int
    event: Event
    topic_root: str
    topic_name: str
    recovered: bool
    delivered_at: float

    @property
    def cid(self) -> str:
        return self.event.cid

    @property
    def payload(self) -> bytes:
        return self.event.payload

    def to_json(self) -> dict[str, Any]:
        """The contract's stream line (an Event plus the delivery fields)."""
        doc = self.event.to_json()
        doc.update(
            seq=self.seq,
            topic_root=self.topic_root,
            topic_name=self.topic_name,
            recovered=self.recovered,
            delivered_at=self.delivered_at,
        )
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> Delivery:
        what = "delivery"
        d = _obj(doc, what)
        seq = _int(d, "seq", what)
        if seq < 0:
            raise InvalidResponse(f"delivery: negative seq {seq}")
        return cls(
            seq=seq,
            event=Event.from_json(d, what),
            topic_root=_str(d, "topic_root", what),
            topic_name=_str(d, "topic_name", what),
            recovered=_bool(d, "recovered", what),
            delivered_at=_number(d, "delivered_at", what),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishOutcome:
    """The answer to a publish: ``published`` (``event`` is its CID) or ``requested``
    (a request to publish went up the tree; ``request_id`` names it, docs/protocol.md §5)."""

    status: Literal["published", "requested"]
    event: str | None
    request_id: str | None
    ack: int | Literal["local"] = "local"
    """The level the answer waited for: ``"local"``, or N other nodes."""
    holders: tuple[str, ...] = ()
    """The other nodes that said they hold the event (stored and pinned)."""
    repeated: bool = False
    """The idempotency key named an earlier publish: no new event was made."""

    @property
    def published(self) -> bool:
        return self.status == "published"

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "event": self.event,
            "request_id": self.request_id,
            "ack": self.ack,
            "holders": list(self.holders),
            "repeated": self.repeated,
        }

    @classmethod
    def from_json(cls, doc: Any) -> PublishOutcome:
        what = "publish outcome"
        d = _obj(doc, what)
        status = d.get("status")
        event = _opt_str(d, "event", what)
        request_id = _opt_str(d, "request_id", what)
        ack = d.get("ack", "local")
        if ack != "local" and (isinstance(ack, bool) or not isinstance(ack, int)):
            raise InvalidResponse(f"publish outcome: bad ack {ack!r}")
        holders = d.get("holders", [])
        if not isinstance(holders, list) or not all(isinstance(h, str) for h in holders):
            raise InvalidResponse("publish outcome: holders must be a list of peer IDs")
        repeated = d.get("repeated", False)
        if not isinstance(repeated, bool):
            raise InvalidResponse("publish outcome: repeated must be a bool")
        extra = {"ack": ack, "holders": tuple(holders), "repeated": repeated}
        if status == "published":
            if event is None:
                raise InvalidResponse("publish outcome: 'published' without an event CID")
            return cls(status="published", event=event, request_id=request_id, **extra)
        if status == "requested":
            return cls(status="requested", event=event, request_id=request_id, **extra)
        raise InvalidResponse(f"publish outcome: unknown status {status!r}")


HistoryOrder = Literal["newest", "oldest"]


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryPage:
    """One page of a topic's history (docs/protocol.md §5 "History").

    The order is ``(clock, CID)``, the same on every node: ``newest`` first (the
    default) or ``oldest`` first. ``next`` is the cursor of the following page
    (pass it as ``after``), ``None`` after the last. ``complete``: the node holds
    every event of the topic within its retention policy (``False`` while it still
    fetches ``missing`` ones, or when a node that had to look the topic up ran out
    of time). ``heads`` are the newest events (no event links them), ``retained``
    how many events the node keeps.
    """

    events: tuple[Event, ...]
    next: str | None
    complete: bool = True
    missing: tuple[str, ...] = ()
    heads: tuple[str, ...] = ()
    retained: int = 0
    order: HistoryOrder = "newest"

    def to_json(self) -> dict[str, Any]:
        return {
            "events": [e.to_json() for e in self.events],
            "next": self.next,
            "complete": self.complete,
            "missing": list(self.missing),
            "heads": list(self.heads),
            "retained": self.retained,
            "order": self.order,
        }

    @classmethod
    def from_json(cls, doc: Any) -> HistoryPage:
        what = "history page"
        d = _obj(doc, what)
        events = d.get("events")
        if not isinstance(events, list):
            raise InvalidResponse(f"history page: 'events' must be a list, got {events!r}")
        order = d.get("order", "newest")
        if order not in ("newest", "oldest"):
            raise InvalidResponse(f"history page: unknown order {order!r}")
        retained = _int(d, "retained", what)
        if retained < 0:
            raise InvalidResponse(f"history page: negative retained {retained}")
        return cls(
            events=tuple(Event.from_json(e, "history event") for e in events),
            next=_opt_str(d, "next", what),
            complete=_bool(d, "complete", what),
            missing=_strs(d, "missing", what),
            heads=_strs(d, "heads", what),
            retained=retained,
            order="newest" if order == "newest" else "oldest",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicStatus:
    """This node's place in one topic's dissemination tree (docs/protocol.md §5).

    ``role`` is ``root``, ``subscriber``, ``relay`` or ``none``; ``parent`` and
    ``children`` are tree neighbours (peer IDs); ``acting_root`` is set while this
    node stands in for an unreachable author; ``heads`` are the newest event CIDs.
    """

    cid: str
    root_cid: str
    name: str
    role: str
    parent: str | None
    children: tuple[str, ...]
    subscribed: bool
    acting_root: bool
    heads: tuple[str, ...]
    filter: str | None = None
    """The node's subscription filter (canonical text), if it has one: the union of
    its consumers' and its explicit subscription's, merged into one if several."""
    filters: tuple[str, ...] | None = None
    """That union exactly (None: every event, or not subscribed)."""
    consumers: int = 0
    """Consumers of the topic on this sidecar (docs/sdk.md "Consumers")."""
    summary: tuple[str, ...] = ()
    """The subtree summary this node tells its parent (canonical filter texts)."""
    retained: int = 0
    """Events of the topic this node keeps (its retention policy)."""
    retained_bytes: int = 0
    """Their size in bytes."""
    fast: Mapping[str, Any] | None = None
    """The topic's fast groups as ``/v1/status`` gives them (docs/http-api.md), or None."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Fields of the answer this SDK does not know (a newer sidecar), kept for
    :meth:`to_json`."""

    def to_json(self) -> dict[str, Any]:
        """Every field the API returned, known or not."""
        doc: dict[str, Any] = {
            **self.extra,
            "cid": self.cid,
            "root_cid": self.root_cid,
            "name": self.name,
            "role": self.role,
            "parent": self.parent,
            "children": list(self.children),
            "subscribed": self.subscribed,
            "filter": self.filter,
            "acting_root": self.acting_root,
            "heads": list(self.heads),
            "retained": self.retained,
            "retained_bytes": self.retained_bytes,
            "fast": _plain(self.fast),
        }
        doc["filters"] = list(self.filters) if self.filters is not None else None
        doc["consumers"] = self.consumers
        doc["summary"] = list(self.summary)
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> TopicStatus:
        what = "topic status"
        d = _obj(doc, what)
        return cls(
            cid=_str(d, "cid", what),
            root_cid=_str(d, "root_cid", what),
            name=_str(d, "name", what),
            role=_str(d, "role", what),
            parent=_opt_str(d, "parent", what),
            children=_strs(d, "children", what),
            subscribed=_bool(d, "subscribed", what),
            acting_root=_bool(d, "acting_root", what),
            heads=_strs(d, "heads", what),
            filter=_opt_str(d, "filter", what),
            filters=_strs(d, "filters", what) if d.get("filters") is not None else None,
            consumers=_int(d, "consumers", what) if "consumers" in d else 0,
            summary=_strs(d, "summary", what),
            retained=_count(d, "retained", what),
            retained_bytes=_count(d, "retained_bytes", what),
            fast=_opt_obj(d, "fast", what),
            extra=MappingProxyType({k: v for k, v in d.items() if k not in _TOPIC_STATUS_FIELDS}),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Consumer:
    """One application's subscription on the sidecar (docs/sdk.md "Consumers"): its
    own ``filter`` and ``cursor`` (the ``seq`` its streams passed). A ``name`` makes
    it durable: it outlives the application and the sidecar's restarts."""

    id: str
    topic: str
    """The topic's first version (root CID)."""
    filter: str | None
    name: str | None
    fast: bool
    cursor: int
    streams: int
    idle_since: float | None
    """Since when no stream is open (epoch seconds; None: one is)."""
    expires: float | None
    """When the sidecar closes it if no stream opens before (None: one is open)."""

    @property
    def durable(self) -> bool:
        return self.name is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "durable": self.durable,
            "topic": self.topic,
            "filter": self.filter,
            "fast": self.fast,
            "cursor": self.cursor,
            "streams": self.streams,
            "idle_since": self.idle_since,
            "expires": self.expires,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Consumer:
        what = "consumer"
        d = _obj(doc, what)
        idle, expires = d.get("idle_since"), d.get("expires")
        return cls(
            id=_str(d, "id", what),
            topic=_str(d, "topic", what),
            filter=_opt_str(d, "filter", what),
            name=_opt_str(d, "name", what),
            fast=_bool(d, "fast", what),
            cursor=_int(d, "cursor", what),
            streams=_int(d, "streams", what),
            idle_since=None if idle is None else _number(d, "idle_since", what),
            expires=None if expires is None else _number(d, "expires", what),
        )


_TOPIC_STATUS_FIELDS = frozenset(
    {"cid", "root_cid", "name", "role", "parent", "children", "subscribed", "filter"}
    | {"acting_root", "heads", "retained", "retained_bytes", "fast"}
    | {"filters", "consumers", "summary"}
)


def _count(doc: Mapping[str, Any], key: str, what: str) -> int:
    value = doc.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidResponse(f"{what}: field {key!r} must be a count, got {value!r}")
    return value


def _opt_obj(doc: Mapping[str, Any], key: str, what: str) -> Mapping[str, Any] | None:
    value = doc.get(key)
    if value is None:
        return None
    return MappingProxyType(dict(_obj(value, f"{what} {key}")))


def _plain(value: Any) -> Any:
    """A read-only mapping (and what it holds) as plain JSON-able values."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeStatus:
    """``GET /v1/status``: who this node is and its topics."""

    peer_id: str
    version: str
    kubo_version: str
    api: str
    topics: tuple[TopicStatus, ...]

    def topic(self, cid: str) -> TopicStatus | None:
        """The status of the topic whose ``cid`` or ``root_cid`` is ``cid``."""
        for t in self.topics:
            if cid in (t.cid, t.root_cid):
                return t
        return None

    extra: Mapping[str, Any] = field(default_factory=dict)
    """Fields of the answer this SDK does not know, kept for :meth:`to_json`."""

    def to_json(self) -> dict[str, Any]:
        """Every field the API returned, known or not."""
        return {
            **self.extra,
            "peer_id": self.peer_id,
            "version": self.version,
            "kubo_version": self.kubo_version,
            "api": self.api,
            "topics": [t.to_json() for t in self.topics],
        }

    @classmethod
    def from_json(cls, doc: Any) -> NodeStatus:
        what = "status"
        d = _obj(doc, what)
        topics = d.get("topics", [])
        if not isinstance(topics, list):
            raise InvalidResponse(f"status: 'topics' must be a list, got {topics!r}")
        return cls(
            peer_id=_str(d, "peer_id", what),
            version=_str(d, "version", what),
            kubo_version=_str(d, "kubo_version", what),
            api=_str(d, "api", what),
            topics=tuple(TopicStatus.from_json(t) for t in topics),
            extra=MappingProxyType(
                {
                    k: v
                    for k, v in d.items()
                    if k not in ("peer_id", "version", "kubo_version", "api", "topics")
                }
            ),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Health:
    """``GET /health``: the sidecar answers and so does its Kubo."""

    status: str
    kubo: str

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.kubo == "ok"

    @classmethod
    def from_json(cls, doc: Any) -> Health:
        d = _obj(doc, "health")
        return cls(status=_str(d, "status", "health"), kubo=_str(d, "kubo", "health"))
