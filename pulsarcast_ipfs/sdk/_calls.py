"""The sans-I/O half of the clients: requests to build and answers to parse.

Both :class:`~pulsarcast_ipfs.sdk.AsyncClient` and :class:`~pulsarcast_ipfs.sdk.Client`
turn a method call into a :class:`Call` here, send it with their own httpx client,
and hand the answer back to :meth:`Call.parse`; the delivery stream's resume logic
is :class:`DeliveryCursor`. The public builders below (``health`` to ``get_event``)
have the clients' signatures and docstrings: each is one method of both clients
(:mod:`pulsarcast_ipfs.sdk._endpoints`). So the two clients cannot drift apart, and
all of this is tested without a socket.
"""

from __future__ import annotations

import base64
import json
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

from pulsarcast_ipfs.sdk._errors import InvalidResponse, error_from_response
from pulsarcast_ipfs.sdk._types import (
    AttributeValue,
    ClientConfig,
    Consumer,
    Delivery,
    Event,
    EventLinking,
    Health,
    HistoryOrder,
    HistoryPage,
    NodeStatus,
    PeerSet,
    PublishOutcome,
    Topic,
)

__all__ = ["Call", "DeliveryCursor", "LineSplitter"]

T = TypeVar("T")
Peers = PeerSet | bool | Sequence[str] | None

MAX_HISTORY_LIMIT = 500
MAX_LINE = 4 * 1024 * 1024  # a delivery line carries at most a 512 KiB payload, base64'd


@dataclass(frozen=True, slots=True, kw_only=True)
class Call(Generic[T]):
    """One request of docs/http-api.md and how to read its answer."""

    method: str
    path: str
    parse_json: Callable[[Any], T]
    params: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    ok: tuple[int, ...] = (200, 201)

    def parse(self, status: int, content: bytes) -> T:
        """The typed answer, or the typed error (:func:`error_from_response`)."""
        if status not in self.ok:
            raise error_from_response(status, content)
        try:
            doc = json.loads(content)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidResponse(
                f"{self.method} {self.path}: the answer is not JSON: {content[:200]!r}"
            ) from exc
        return self.parse_json(doc)


def _seg(cid: str, what: str = "topic") -> str:
    if not isinstance(cid, str) or not cid.strip():
        raise ValueError(f"{what} CID must be a non-empty string, got {cid!r}")
    return quote(cid.strip(), safe="")


def _text(value: object, what: str) -> str:
    """``value``, which must be a string (a filter's syntax is the sidecar's to check)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {type(value).__name__}")
    return value


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be a bool, got {type(value).__name__}")
    return value


def _options(
    *,
    parent: str | None,
    allowed_publishers: Peers,
    request_to_publish: Peers,
    event_linking: EventLinking | str | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if parent is not None:
        _seg(parent, "parent")
        body["parent"] = parent
    if allowed_publishers is not None:
        body["allowed_publishers"] = PeerSet.of(allowed_publishers).to_json()
    if request_to_publish is not None:
        body["request_to_publish"] = PeerSet.of(request_to_publish).to_json()
    if event_linking is not None:
        body["event_linking"] = EventLinking(event_linking).value
    return body


def http_options(config: ClientConfig) -> dict[str, Any]:
    """The keyword arguments of both clients' ``httpx`` client, but the transport."""
    headers = {"User-Agent": "pulsarcast-sdk", "Accept": "application/json"}
    if config.token:
        headers["Authorization"] = f"Bearer {config.token}"
    return {
        "base_url": config.api,
        "headers": headers,
        "timeout": config.timeout,
        "trust_env": False,
    }


def health() -> Call[Health]:
    """``GET /health`` (raises :class:`KuboUnavailable` when Kubo is down)."""
    return Call(method="GET", path="/health", parse_json=Health.from_json, ok=(200,))


def status() -> Call[NodeStatus]:
    """``GET /v1/status``: peer ID, versions, and every topic's tree position."""
    return Call(method="GET", path="/v1/status", parse_json=NodeStatus.from_json, ok=(200,))


def create_topic(
    name: str,
    *,
    parent: str | None = None,
    allowed_publishers: Peers = None,
    request_to_publish: Peers = None,
    event_linking: EventLinking | str | None = None,
) -> Call[Topic]:
    """Create a topic (docs/protocol.md §5 "Create topic"); with ``parent``, a sub-topic
    or new version sharing the parent's meta topic. Options left ``None`` take the
    sidecar's defaults; a list of peers enables the set for exactly those peers."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a topic needs a non-empty name, got {name!r}")
    body = {"name": name}
    body.update(
        _options(
            parent=parent,
            allowed_publishers=allowed_publishers,
            request_to_publish=request_to_publish,
            event_linking=event_linking,
        )
    )
    return Call(method="POST", path="/v1/topics", body=body, parse_json=Topic.from_json)


def get_topic(cid: str) -> Call[Topic]:
    """A topic descriptor (fetched from IPFS if the sidecar lacks it)."""
    return Call(method="GET", path=f"/v1/topics/{_seg(cid)}", parse_json=Topic.from_json, ok=(200,))


def update_topic(
    cid: str,
    *,
    allowed_publishers: Peers = None,
    request_to_publish: Peers = None,
    event_linking: EventLinking | str | None = None,
) -> Call[Topic]:
    """Publish a new version of a topic on its meta topic (docs/protocol.md §5)."""
    body = _options(
        parent=None,
        allowed_publishers=allowed_publishers,
        request_to_publish=request_to_publish,
        event_linking=event_linking,
    )
    return Call(
        method="POST",
        path=f"/v1/topics/{_seg(cid)}/update",
        body=body,
        parse_json=Topic.from_json,
    )


def _subscription(doc: Any) -> str:
    if (
        not isinstance(doc, dict)
        or not isinstance(doc.get("subscribed"), bool)
        or not isinstance(doc.get("topic"), str)
    ):
        raise InvalidResponse(f"not a subscription answer: {doc!r}")
    return str(doc["topic"])


def subscribe(cid: str, *, fast: bool = False, filter: str | None = None) -> Call[str]:
    """Subscribe this node (docs/protocol.md §5 "Subscribe"); returns the topic's root CID.

    ``fast``: also join the fast group of each publisher of the topic, which then
    sends its events here directly, in two hops at most (docs/sdk.md "Fast
    subscriptions"); subscribing again with another ``fast`` changes only that.

    ``filter`` (docs/http-api.md "Filters"), e.g. ``"ups >= 10 and user = 'alice'"``:
    the node delivers only the events it matches (live and recovered, fast-group
    copies included); subscribing again replaces it, and without it the subscription
    has none. A filter that does not parse is a :class:`BadRequest` saying at which
    position and what was expected.
    """
    return _subscribe(cid, on=True, fast=fast, filter=filter)


def unsubscribe(cid: str) -> Call[str]:
    """Unsubscribe this node; it may stay in the tree as a relay."""
    return _subscribe(cid, on=False)


def _subscribe(cid: str, *, on: bool, fast: bool = False, filter: str | None = None) -> Call[str]:
    action = "subscribe" if on else "unsubscribe"
    body: dict[str, Any] = {"fast": True} if _flag(fast, "fast") and on else {}
    if filter is not None:
        body["filter"] = _text(filter, "filter")
    return Call(
        method="POST",
        path=f"/v1/topics/{_seg(cid)}/{action}",
        body=body,
        parse_json=_subscription,
    )


def open_consumer(
    topic: str,
    *,
    filter: str | None = None,
    name: str | None = None,
    fast: bool = False,
    after: int | None = None,
) -> Call[Consumer]:
    """Open a consumer of ``topic``: this application's own subscription, with its
    own ``filter`` and cursor, beside any other application's on the same sidecar
    (the node subscribes with the union of them all). Read it with
    ``deliveries(consumer=c.id)``; close it with :meth:`close_consumer`.

    Without ``name`` the sidecar closes it once no stream of it has been open for
    its grace (60 s by default). With ``name`` it is durable: opening the same name
    again (also after a restart of the application or the sidecar) takes it up
    with its own cursor, and the new ``filter``/``fast``. ``after``: start after
    that delivery ``seq`` instead (default: only new deliveries, or the named
    consumer's cursor).

    ``POST /v1/topics/{cid}/consumers`` (201 a new one, 200 a named one taken up again).
    """
    body: dict[str, Any] = {}
    if filter is not None:
        body["filter"] = _text(filter, "filter")
    if name is not None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a consumer name must be a non-empty string, got {name!r}")
        body["name"] = name
    if _flag(fast, "fast"):
        body["fast"] = True
    if after is not None:
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ValueError(f"after must be a seq >= 0, got {after!r}")
        body["after"] = after
    return Call(
        method="POST",
        path=f"/v1/topics/{_seg(topic)}/consumers",
        body=body,
        parse_json=Consumer.from_json,
    )


def _consumer_seg(consumer_id: str) -> str:
    if not isinstance(consumer_id, str) or not consumer_id.strip():
        raise ValueError(f"a consumer id must be a non-empty string, got {consumer_id!r}")
    return quote(consumer_id.strip(), safe="")


def get_consumer(consumer_id: str) -> Call[Consumer]:
    """One consumer (:class:`NotFound` once it is closed or expired)."""
    return Call(
        method="GET",
        path=f"/v1/consumers/{_consumer_seg(consumer_id)}",
        parse_json=Consumer.from_json,
        ok=(200,),
    )


def _consumers(doc: Any) -> tuple[Consumer, ...]:
    if not isinstance(doc, dict) or not isinstance(doc.get("consumers"), list):
        raise InvalidResponse(f"not a consumer list: {doc!r}")
    return tuple(Consumer.from_json(c) for c in doc["consumers"])


def consumers() -> Call[tuple[Consumer, ...]]:
    """Every consumer of the sidecar (all applications')."""
    return Call(method="GET", path="/v1/consumers", parse_json=_consumers, ok=(200,))


def _closed(doc: Any) -> bool:
    if not isinstance(doc, dict) or doc.get("closed") is not True:
        raise InvalidResponse(f"not a consumer close answer: {doc!r}")
    return bool(doc.get("subscribed"))


def close_consumer(consumer_id: str) -> Call[bool]:
    """Close a consumer (its streams end); the node leaves the topic with its last
    consumer unless it was subscribed explicitly. Whether it is still subscribed."""
    return Call(
        method="DELETE",
        path=f"/v1/consumers/{_consumer_seg(consumer_id)}",
        parse_json=_closed,
        ok=(200,),
    )


def _attributes(attributes: Mapping[str, AttributeValue] | None) -> dict[str, AttributeValue]:
    """Check the shape here (the sidecar checks the rules: names, lengths, finiteness)."""
    if attributes is None:
        return {}
    if not isinstance(attributes, Mapping):
        raise TypeError(f"attributes must be a mapping, got {type(attributes).__name__}")
    out: dict[str, AttributeValue] = {}
    for name, value in attributes.items():
        if not isinstance(name, str):
            raise TypeError(f"attribute names are strings, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise TypeError(f"attribute {name!r}: a string or a number, got {value!r}")
        out[name] = value
    return out


def publish(
    topic: str,
    data: bytes | str,
    *,
    parent: str | None = None,
    inject_id: str | None = None,
    attributes: Mapping[str, AttributeValue] | None = None,
    ack: int | Literal["local"] | None = None,
    ack_timeout: float | None = None,
    idempotency_key: str | None = None,
) -> Call[PublishOutcome]:
    """Publish ``data`` (docs/protocol.md §5 "Publish"): ``str`` travels as UTF-8 text,
    ``bytes`` as they are. A node that may only request to publish gets
    ``status == "requested"``; one that may do neither gets :class:`NotAllowed`.
    ``inject_id`` labels the publish in the metric records (benchmarks).
    ``attributes`` (at most 16 names to strings or finite numbers; docs/sdk.md)
    go into the event descriptor, for subscribers' filters to select on.
    ``ack``: ``"local"`` (answered once the event is in this node), or how many
    *other* nodes must hold it (stored and pinned) first — the sidecar's default
    is 1 — for at most ``ack_timeout`` seconds, else :class:`NotAcknowledged`
    (the event exists and is offered on). ``idempotency_key``: a retry with the
    same key makes no second event (docs/http-api.md "Publish")."""
    body: dict[str, Any]
    if isinstance(data, str):
        body = {"text": data}
    elif isinstance(data, bytes | bytearray | memoryview):
        body = {"payload": base64.b64encode(bytes(data)).decode("ascii")}
    else:
        raise TypeError(f"data must be bytes or str, got {type(data).__name__}")
    if parent is not None:
        _seg(parent, "parent")
        body["parent"] = parent
    if inject_id is not None:
        body["inject_id"] = inject_id
    if attrs := _attributes(attributes):
        body["attributes"] = attrs
    if ack is not None:
        if ack != "local" and (isinstance(ack, bool) or not isinstance(ack, int) or ack < 1):
            raise ValueError(f'ack must be "local" or a number of other nodes >= 1, got {ack!r}')
        body["ack"] = ack
    if ack_timeout is not None:
        if isinstance(ack_timeout, bool) or not isinstance(ack_timeout, int | float):
            raise TypeError(f"ack_timeout must be a number of seconds, got {ack_timeout!r}")
        body["ack_timeout"] = ack_timeout
    if idempotency_key is not None:
        if not isinstance(idempotency_key, str) or not idempotency_key:
            raise ValueError("idempotency_key must be a non-empty string")
        body["idempotency_key"] = idempotency_key
    return Call(
        method="POST",
        path=f"/v1/topics/{_seg(topic)}/publish",
        body=body,
        parse_json=PublishOutcome.from_json,
    )


def history(
    topic: str,
    *,
    order: HistoryOrder = "newest",
    after: str | None = None,
    limit: int = 50,
    before: str | None = None,
    where: str | None = None,
) -> Call[HistoryPage]:
    """One page of the topic's history (docs/protocol.md §5 "History"), in the order
    ``(clock, CID)`` that is the same on every node: ``newest`` first or ``oldest``
    first, strictly after the cursor ``after`` (the previous page's ``next``).
    ``before`` is the deprecated old name of ``after`` (newest first only).
    ``where``: only the events this filter matches; a page may then be short, or
    empty with a ``next``: go on from ``next`` (:meth:`iter_history` does)."""
    cursor = history_cursor(order, after, before, stacklevel=4)
    return history_page(topic, order=order, after=cursor, limit=limit, where=where)


def history_page(
    cid: str,
    *,
    order: HistoryOrder = "newest",
    after: str | None = None,
    limit: int = 50,
    where: str | None = None,
) -> Call[HistoryPage]:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError("limit must be an integer")
    if not 1 <= limit <= MAX_HISTORY_LIMIT:
        raise ValueError(f"limit must be in 1..{MAX_HISTORY_LIMIT}, got {limit}")
    if order not in ("newest", "oldest"):
        raise ValueError(f'order must be "newest" or "oldest", got {order!r}')
    params = {"limit": str(limit), "order": order}
    if after is not None:
        _seg(after, "after")
        params["after"] = after.strip()
    if where is not None:
        params["where"] = _text(where, "where")
    return Call(
        method="GET",
        path=f"/v1/topics/{_seg(cid)}/history",
        params=params,
        parse_json=HistoryPage.from_json,
        ok=(200,),
    )


def history_cursor(
    order: HistoryOrder, after: str | None, before: str | None, *, stacklevel: int = 3
) -> str | None:
    """``after``, or the deprecated ``before`` (its old name, newest first only); the
    warning names the frame ``stacklevel`` up (the caller of the client's method)."""
    if before is None:
        return after
    warnings.warn(
        "history(before=...) is deprecated: the cursor is now after=",
        DeprecationWarning,
        stacklevel,
    )
    if after is not None:
        raise ValueError("give after= (the cursor) or before=, not both")
    if order != "newest":
        raise ValueError("before= is the newest-first cursor: use after= with order='oldest'")
    return before


def get_event(cid: str) -> Call[Event]:
    """An event descriptor by CID (from any node, through IPFS)."""
    return Call(
        method="GET", path=f"/v1/events/{_seg(cid, 'event')}", parse_json=Event.from_json, ok=(200,)
    )


class HistoryWalk:
    """The cursor of :meth:`iter_history`: asks for pages until ``next`` is ``None``.

    Each page starts strictly after the last event of the previous one in the
    history order, so events that arrive meanwhile are never repeated nor skipped
    (docs/http-api.md). Stops with :class:`InvalidResponse` if the sidecar hands the
    same cursor back (a loop would otherwise never end).
    """

    def __init__(
        self,
        cid: str,
        *,
        order: HistoryOrder = "newest",
        after: str | None = None,
        page_size: int = 50,
        where: str | None = None,
    ) -> None:
        self.cid = cid
        self.order = order
        self.after = after
        self.page_size = page_size
        self.where = where
        self.done = False
        self._seen: set[str] = set()
        self.call()  # bad arguments fail here, before any request

    def call(self) -> Call[HistoryPage]:
        return history_page(
            self.cid, order=self.order, after=self.after, limit=self.page_size, where=self.where
        )

    def advance(self, page: HistoryPage) -> None:
        # A filtered page (``where``) may be empty and still have a ``next``: go on.
        if page.next is None or (not page.events and self.where is None):
            self.done = True
            return
        if page.next in self._seen or page.next == self.after:
            raise InvalidResponse(f"history of {self.cid}: the cursor {page.next} repeats")
        self._seen.add(page.next)
        self.after = page.next


class LineSplitter:
    """Splits an NDJSON byte stream into lines, whatever the chunking."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        self._buf += chunk
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                break
            line = bytes(self._buf[:nl]).strip()
            del self._buf[: nl + 1]
            if line:
                yield line
        if len(self._buf) > MAX_LINE:
            raise InvalidResponse(f"a delivery line is longer than {MAX_LINE} bytes")

    def pending(self) -> bool:
        """Whether a partial line is left (the stream was cut in the middle of one)."""
        return bool(self._buf.strip())

    def reset(self) -> None:
        self._buf.clear()


class DeliveryCursor:
    """Resume state of ``GET /v1/deliveries`` (docs/http-api.md).

    Remembers the last ``seq`` handed to the application; a reconnect asks for
    ``after=<that seq>``, so the sidecar replays what was missed and nothing twice.
    A line with a ``seq`` not above the last one (a replay overlapping what was
    already seen) is dropped. Before the first delivery the cursor is the caller's
    ``after`` (``None``: only new deliveries, so a drop before the first one can
    lose what arrives while reconnecting). With ``consumer`` (docs/http-api.md
    "Consumers") the stream is that consumer's, and ``after=None`` starts from the
    consumer's own cursor on the sidecar, which has none of that limit.
    """

    def __init__(
        self,
        *,
        topic: str | None,
        after: int | None,
        follow: bool,
        consumer: str | None = None,
    ) -> None:
        if after is not None and (isinstance(after, bool) or after < 0):
            raise ValueError(f"after must be a seq >= 0, got {after!r}")
        if topic is not None:
            _seg(topic)
        if consumer is not None:
            _consumer_seg(consumer)
            if topic is not None:
                raise ValueError("give topic or consumer, not both")
        self.topic = topic
        self.consumer = consumer
        self.last = after
        self.follow = follow
        self.splitter = LineSplitter()

    def params(self) -> dict[str, str]:
        params = {"follow": "true" if self.follow else "false"}
        if self.topic is not None:
            params["topic"] = self.topic
        if self.consumer is not None:
            params["consumer"] = self.consumer
        if self.last is not None:
            params["after"] = str(self.last)
        return params

    def feed(self, chunk: bytes) -> Iterator[Delivery]:
        for line in self.splitter.feed(chunk):
            try:
                doc = json.loads(line)
            except (ValueError, UnicodeDecodeError) as exc:
                raise InvalidResponse(f"a delivery line is not JSON: {line[:200]!r}") from exc
            delivery = Delivery.from_json(doc)
            if self.last is not None and delivery.seq <= self.last:
                continue
            self.last = delivery.seq
            yield delivery

    def reconnecting(self) -> None:
        """Forget a partial line: the replay from ``last`` sends it again whole."""
        self.splitter.reset()
