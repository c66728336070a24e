"""The sidecar's HTTP API for applications (contract docs/http-api.md).

A Starlette app served by uvicorn inside the driver's task group. Every error is
``{"error": {"code", "message"}}`` with a status and code of the contract's table
(:mod:`pulsarcast_ipfs.api_errors`). The errors of the core, the driver and the
Kubo client become answers in one place, :data:`REFUSALS`, by their type: never
by the text of their message.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import nullcontext
from typing import Any, Final

import anyio
import anyio.abc
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from pulsarcast_ipfs.api_errors import (
    BAD_REQUEST,
    CONFLICT,
    INVALID_PARENT,
    KUBO_UNAVAILABLE,
    NOT_ACKNOWLEDGED,
    NOT_ALLOWED,
    SIGNING_FAILED,
    TIMEOUT,
    UNKNOWN_TOPIC,
    ErrorCode,
)
from pulsarcast_ipfs.core import (
    MAX_PAYLOAD_SIZE,
    BodiesNeeded,
    DescriptorError,
    EventDescriptor,
    EventLinking,
    Filter,
    FilterSyntaxError,
    HistoryOrder,
    HistoryPage,
    InvalidParent,
    LocalProtocolError,
    NotAllowedToPublish,
    PeerPolicy,
    TopicConflict,
    TopicDescriptor,
    TopicOptions,
    UnknownTopic,
    cid_from_str,
    cid_str,
    parse_filter,
    render_filter,
    validate_attributes,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kademlia import InvalidPeerId, validate_peer_id
from pulsarcast_ipfs.kubo import KuboError, KuboNotFound, KuboTimeout, KuboUnavailable

from ._acklevels import (
    DEFAULT_ACK,
    DEFAULT_ACK_TIMEOUT,
    MAX_ACK_TIMEOUT,
    NotAcknowledged,
    parse_ack,
    parse_idempotency_key,
)
from ._consumers import Consumer, ConsumerConflict, TooManyConsumers, check_name
from ._dashboard import cookie_login, dashboard_cookie_ok
from ._dashboard import routes as dashboard_routes
from ._driver import VERSION, Driver, SigningFailed, event_json
from ._openapi import openapi_document
from ._prometheus import CONTENT_TYPE as METRICS_CONTENT_TYPE
from ._record_pages import MAX_LIMIT, CursorError, parse_cursor
from ._status import topic_status
from ._subscriptions import consumer_json

__all__ = ["REFUSALS", "ApiError", "bind_api", "build_app", "serve_api"]

log = logging.getLogger("pulsarcast.sidecar.api")

DESCRIPTOR_TIMEOUT = 10.0
MAX_HISTORY_LIMIT = 500
NO_HOLDER_WAIT = 5.0
"""How long an unknown topic's descriptor is looked for when no node announces it."""
READ_WAIT = 20.0
"""Longest a history request waits for a new reader to gather the topic's history
(holders looked up, tree joined, back-fill complete); then it answers with what it
has and ``"complete": false``."""


def _ack_fields(body: dict[str, Any], header: str | None) -> tuple[int, float, str | None]:
    """A publish's ``ack`` (default 1), ``ack_timeout`` (seconds) and idempotency key
    (``idempotency_key`` or the ``Idempotency-Key`` header; both: the same)."""
    try:
        ack = parse_ack(body.get("ack", DEFAULT_ACK))
    except ValueError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    t = body.get("ack_timeout", DEFAULT_ACK_TIMEOUT)
    if (
        isinstance(t, bool)
        or not isinstance(t, int | float)
        or not 0 < t <= MAX_ACK_TIMEOUT
        or t != t
    ):
        raise ApiError(
            400,
            "bad_request",
            f"ack_timeout must be a number of seconds in (0, {MAX_ACK_TIMEOUT:g}]",
        )
    key = body.get("idempotency_key")
    if header is not None:
        if key is not None and key != header:
            raise ApiError(
                400, "bad_request", "the Idempotency-Key header and idempotency_key differ"
            )
        key = header
    if key is not None:
        try:
            key = parse_idempotency_key(key)
        except ValueError as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
    return ack, float(t), key


class ApiError(Exception):
    """An error answer: HTTP ``status``, contract ``code``, human ``message``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


REFUSALS: tuple[tuple[type[Exception], ErrorCode, str], ...] = (
    (SigningFailed, SIGNING_FAILED, "could not sign through Kubo: "),
    (UnknownTopic, UNKNOWN_TOPIC, ""),
    (NotAllowedToPublish, NOT_ALLOWED, ""),
    (InvalidParent, INVALID_PARENT, ""),
    (TopicConflict, CONFLICT, ""),
    (LocalProtocolError, BAD_REQUEST, ""),
    (KuboUnavailable, KUBO_UNAVAILABLE, "Kubo's API cannot be reached: "),
    (KuboTimeout, TIMEOUT, ""),
    (KuboError, KUBO_UNAVAILABLE, "Kubo failed: "),
)
"""The answer to an error of the core, the driver or the Kubo client: the row of the
contract's table and a prefix of its message. The first entry whose type the error
is an instance of wins (subclasses before their bases)."""

_REFUSED = tuple(t for t, _, _ in REFUSALS)


def refusal(exc: Exception) -> JSONResponse:
    """The error answer to ``exc`` (an instance of one of the types of :data:`REFUSALS`).

    A filter that does not parse also says where and what was expected, as fields
    ``position`` and ``expected`` of the error object (docs/http-api.md "Filters")."""
    for kind, row, prefix in REFUSALS:
        if isinstance(exc, kind):
            resp = _error_response(row.status, row.code, f"{prefix}{exc}")
            if isinstance(exc, FilterSyntaxError):
                error: dict[str, Any] = {"code": row.code, "message": f"{prefix}{exc}"}
                error.update(position=exc.position, expected=exc.expected)
                resp = JSONResponse({"error": error}, status_code=row.status)
            return resp
    raise TypeError(f"no answer for {type(exc).__name__}") from exc


# -- input parsing ---------------------------------------------------------------------


def parse_cid(text: str, what: str = "CID") -> CID:
    try:
        cid = cid_from_str(text)
    except ValueError:
        raise ApiError(400, "bad_request", f"bad {what}: {text!r} is not a CID") from None
    if cid.version != 1 or cid.codec.name != "dag-cbor":
        raise ApiError(400, "bad_request", f"bad {what}: {text} is not a CIDv1 dag-cbor CID")
    return cid


def parse_where(value: object, what: str) -> Filter | None:
    """A filter from the body (``filter``) or the query (``where``); None if absent.
    A text that does not parse raises :class:`FilterSyntaxError` (a 400 saying where)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ApiError(400, "bad_request", f"{what} must be a string (docs/http-api.md)")
    return parse_filter(value)


def _policy(body: dict[str, Any], key: str) -> PeerPolicy:
    value = body.get(key)
    if value is None:
        return PeerPolicy()
    if not isinstance(value, dict) or set(value) - {"enabled", "peers"}:
        raise ApiError(400, "bad_request", f'{key} must be {{"enabled": bool, "peers": [...]}}')
    enabled = value.get("enabled", False)
    peers = value.get("peers", [])
    if not isinstance(enabled, bool):
        raise ApiError(400, "bad_request", f"{key}.enabled must be true or false")
    if not isinstance(peers, list) or not all(isinstance(p, str) for p in peers):
        raise ApiError(400, "bad_request", f"{key}.peers must be a list of peer IDs")
    for p in peers:
        try:
            validate_peer_id(p)
        except InvalidPeerId:
            raise ApiError(400, "bad_request", f"{key}.peers: bad peer ID {p!r}") from None
    try:
        return PeerPolicy(enabled=enabled, peers=tuple(peers))
    except LocalProtocolError as exc:
        raise ApiError(400, "bad_request", f"{key}: {exc}") from None


def parse_options(body: dict[str, Any]) -> TopicOptions:
    linking = body.get("event_linking", "LAST_SEEN")
    if linking not in ("LAST_SEEN", "CUSTOM"):
        raise ApiError(400, "bad_request", 'event_linking must be "LAST_SEEN" or "CUSTOM"')
    return TopicOptions(
        allowed_publishers=_policy(body, "allowed_publishers"),
        request_to_publish=_policy(body, "request_to_publish"),
        event_linking=EventLinking(linking),
    )


PAYLOAD_TOO_LARGE = f"payload over the limit of {MAX_PAYLOAD_SIZE} bytes (512 KiB)"
"""The one answer to an over-limit payload, whether the payload or the whole request
body was found too large (docs/http-api.md "Errors")."""


async def read_json(
    request: Request, max_body: int, *, too_large: str | None = None
) -> dict[str, Any]:
    """The JSON object body, read with a size limit (413 before reading everything,
    saying ``too_large`` if given)."""
    message = too_large or f"request body over {max_body} bytes"
    length = request.headers.get("content-length")
    if length is not None:
        try:
            if int(length) > max_body:
                raise ApiError(413, "payload_too_large", message)
        except ValueError:
            raise ApiError(400, "bad_request", "bad Content-Length") from None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_body:
            raise ApiError(413, "payload_too_large", message)
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, "bad_request", f"malformed JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ApiError(400, "bad_request", "the body must be a JSON object")
    return doc


def topic_json(
    cid: CID, desc: TopicDescriptor, *, root: CID | None, latest: CID | None
) -> dict[str, Any]:
    """The Topic object of docs/http-api.md."""
    opts = desc.options
    return {
        "cid": cid_str(cid),
        "root_cid": cid_str(root) if root is not None else None,
        "name": desc.name,
        "author": desc.author,
        "parent": cid_str(desc.parent) if desc.parent is not None else None,
        "sub_topics": {k: cid_str(v) for k, v in desc.links.items()},
        "created": desc.created,
        "protocol_version": desc.protocol_version,
        "allowed_publishers": opts.allowed_publishers.to_ipld(),
        "request_to_publish": opts.request_to_publish.to_ipld(),
        "event_linking": opts.event_linking.value,
        "latest": cid_str(latest) if latest is not None else cid_str(cid),
    }


# -- the app ---------------------------------------------------------------------------


class _Api:
    def __init__(self, driver: Driver) -> None:
        self.d = driver
        self.max_body = driver.config.max_body

    # helpers

    async def block(self, cid: CID, max_wait: float = DESCRIPTOR_TIMEOUT) -> bytes:
        try:
            return await self.d.block(cid, max_wait)
        except KuboTimeout:
            raise ApiError(504, "timeout", f"fetching {cid} from IPFS took too long") from None
        except KuboNotFound:
            raise ApiError(404, "not_found", f"block {cid} not found") from None

    async def topic_descriptor(
        self, cid: CID, max_wait: float = DESCRIPTOR_TIMEOUT
    ) -> TopicDescriptor:
        try:
            data = await self.block(cid, max_wait)
        except ApiError as exc:
            if exc.code == "not_found":
                raise ApiError(404, "unknown_topic", f"unknown topic {cid}") from None
            raise
        try:
            return TopicDescriptor.decode(data, expected_cid=cid)
        except DescriptorError as exc:
            raise ApiError(
                404, "unknown_topic", f"{cid} is not a topic descriptor: {exc}"
            ) from None

    async def event_descriptor(self, cid: CID) -> EventDescriptor:
        try:
            data = await self.block(cid)
        except ApiError as exc:
            if exc.code == "not_found":
                raise ApiError(404, "unknown_event", f"unknown event {cid}") from None
            raise
        try:
            return EventDescriptor.decode(data, expected_cid=cid)
        except DescriptorError as exc:
            raise ApiError(
                404, "unknown_event", f"{cid} is not an event descriptor: {exc}"
            ) from None

    async def root_of(self, cid: CID, desc: TopicDescriptor) -> CID:
        """Walk ``parent`` links to the first version (sub-topics keep their own root)."""
        known = self.d.known_root(cid)
        if known is not None:
            return known
        cur, cur_desc = cid, desc
        for _ in range(256):
            if cur_desc.parent is None:
                return cur
            parent_desc = await self.topic_descriptor(cur_desc.parent)
            if parent_desc.name != cur_desc.name:
                return cur  # a sub-topic: its parent is another topic
            cur, cur_desc = cur_desc.parent, parent_desc
        return cur

    def tree_key(self, cid: CID) -> CID:
        root = self.d.known_root(cid)
        if root is None:
            raise ApiError(
                404,
                "unknown_topic",
                f"topic {cid} is not known to this node (subscribe to it first)",
            )
        return root

    # endpoints

    async def health(self, request: Request) -> Response:
        if not await self.d.kubo_alive():
            return _error_response(503, "kubo_unavailable", "Kubo's API cannot be reached")
        return JSONResponse({"status": "ok", "kubo": "ok"})

    async def status(self, request: Request) -> Response:
        return JSONResponse(
            {
                "peer_id": self.d.peer_id,
                "version": VERSION,
                "kubo_version": self.d.kubo_version,
                "api": self.d.config.api,
                "topics": [topic_status(self.d, st) for st in self.d.topic_states()],
                "outbox": sorted(self.d.acks.outbox.waiting),
            }
        )

    async def create_topic(self, request: Request) -> Response:
        body = await read_json(request, self.max_body)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "bad_request", "name must be a non-empty string")
        parent = body.get("parent")
        parent_cid = None
        if parent is not None:
            if not isinstance(parent, str):
                raise ApiError(400, "bad_request", "parent must be a topic CID")
            parent_cid = parse_cid(parent, "parent")
            self.tree_key(parent_cid)
        options = parse_options(body)
        cid = await self.d.create_topic(name, options=options, parent=parent_cid)
        root = self.d.known_root(cid) or cid
        desc = self.d.local_topic(cid) or await self.topic_descriptor(cid)
        return JSONResponse(topic_json(cid, desc, root=root, latest=cid), status_code=201)

    async def get_topic(self, request: Request) -> Response:
        cid = parse_cid(request.path_params["cid"], "topic CID")
        desc = self.d.local_topic(cid) or await self.topic_descriptor(cid)
        root = await self.root_of(cid, desc)
        latest = self.d.latest_version(cid)
        return JSONResponse(topic_json(cid, desc, root=root, latest=latest))

    async def update_topic(self, request: Request) -> Response:
        cid = parse_cid(request.path_params["cid"], "topic CID")
        body = await read_json(request, self.max_body)
        self.tree_key(cid)
        options = parse_options(body)
        new = await self.d.update_topic(cid, options=options)
        desc = self.d.local_topic(new) or await self.topic_descriptor(new)
        return JSONResponse(
            topic_json(new, desc, root=self.d.known_root(new), latest=new), status_code=201
        )

    async def subscribe(self, request: Request) -> Response:
        cid = parse_cid(request.path_params["cid"], "topic CID")
        body = await read_json(request, self.max_body)
        fast = body.get("fast", False)
        if not isinstance(fast, bool):
            raise ApiError(400, "bad_request", "fast must be true or false")
        unknown = sorted(set(body) - {"fast", "filter"})
        if unknown:
            raise ApiError(400, "bad_request", f"unknown field(s) {', '.join(unknown)}")
        where = parse_where(body.get("filter"), "filter")
        desc = self.d.local_topic(cid) or await self.topic_descriptor(cid)
        root = await self.root_of(cid, desc)
        # The core may first fetch the descriptor (and its meta topic) through the
        # block store; answer once it knows the topic, so that a publish right after
        # this call finds it.
        if not await self.d.subscribe(
            cid, root=root, name=desc.name, max_wait=DESCRIPTOR_TIMEOUT, fast=fast, filter=where
        ):
            raise ApiError(504, "timeout", f"resolving topic {cid} took too long")
        return JSONResponse(
            {
                "topic": cid_str(root),
                "subscribed": True,
                "fast": fast,
                "filter": render_filter(where) if where is not None else None,
            }
        )

    async def unsubscribe(self, request: Request) -> Response:
        cid = parse_cid(request.path_params["cid"], "topic CID")
        root = self.tree_key(cid)
        still = self.d.unsubscribe(cid, root)
        return JSONResponse(
            {
                "topic": cid_str(root),
                "subscribed": still,
                "consumers": len(self.d.subs.registry.of_topic(cid_str(root))),
            }
        )

    # consumers (docs/http-api.md "Consumers")

    async def open_consumer(self, request: Request) -> Response:
        cid = parse_cid(request.path_params["cid"], "topic CID")
        body = await read_json(request, self.max_body)
        unknown = sorted(set(body) - {"fast", "filter", "name", "after"})
        if unknown:
            raise ApiError(400, "bad_request", f"unknown field(s) {', '.join(unknown)}")
        fast = body.get("fast", False)
        if not isinstance(fast, bool):
            raise ApiError(400, "bad_request", "fast must be true or false")
        name = body.get("name")
        if name is not None:
            try:
                check_name(name)
            except ValueError as exc:
                raise ApiError(400, "bad_request", str(exc)) from None
        after = body.get("after")
        if after is not None and (
            not isinstance(after, int) or isinstance(after, bool) or after < 0
        ):
            raise ApiError(400, "bad_request", "after must be an integer seq >= 0")
        where = parse_where(body.get("filter"), "filter")
        desc = self.d.local_topic(cid) or await self.topic_descriptor(cid)
        root = await self.root_of(cid, desc)
        try:
            opened = await self.d.subs.open(
                cid,
                root=root,
                topic_name=desc.name,
                filter=where,
                name=name,
                fast=fast,
                after=after,
                max_wait=DESCRIPTOR_TIMEOUT,
            )
        except ConsumerConflict as exc:
            raise ApiError(409, "conflict", str(exc)) from None
        except TooManyConsumers as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
        if opened is None:
            raise ApiError(504, "timeout", f"resolving topic {cid} took too long")
        consumer, new = opened
        return JSONResponse(self.consumer_json(consumer), status_code=201 if new else 200)

    def consumer_json(self, c: Consumer) -> dict[str, Any]:
        return consumer_json(c, self.d.subs.registry.policy)

    def consumer(self, consumer_id: str) -> Consumer:
        c = self.d.subs.registry.get(consumer_id)
        if c is None:
            raise ApiError(
                404,
                "not_found",
                f"no consumer {consumer_id!r} (closed, or idle past its grace)",
            )
        return c

    async def list_consumers(self, request: Request) -> Response:
        return JSONResponse({"consumers": [self.consumer_json(c) for c in self.d.subs.registry]})

    async def get_consumer(self, request: Request) -> Response:
        return JSONResponse(self.consumer_json(self.consumer(request.path_params["id"])))

    async def close_consumer(self, request: Request) -> Response:
        c = self.consumer(request.path_params["id"])
        self.d.subs.close(c.id)
        return JSONResponse(
            {
                "id": c.id,
                "closed": True,
                "topic": c.topic,
                "subscribed": self.d.subs.subscribed(c.topic),
            }
        )

    async def publish(self, request: Request) -> Response:
        cid = parse_cid(request.path_params["cid"], "topic CID")
        body = await read_json(request, self.max_body, too_large=PAYLOAD_TOO_LARGE)
        has_payload, has_text = "payload" in body, "text" in body
        if has_payload == has_text:
            raise ApiError(400, "bad_request", "give exactly one of payload (base64) or text")
        if has_payload:
            if not isinstance(body["payload"], str):
                raise ApiError(400, "bad_request", "payload must be a base64 string")
            try:
                payload = base64.b64decode(body["payload"], validate=True)
            except (binascii.Error, ValueError):
                raise ApiError(400, "bad_request", "payload is not valid base64") from None
        else:
            if not isinstance(body["text"], str):
                raise ApiError(400, "bad_request", "text must be a string")
            payload = body["text"].encode("utf-8")
        if len(payload) > MAX_PAYLOAD_SIZE:
            raise ApiError(413, "payload_too_large", PAYLOAD_TOO_LARGE)
        parent = None
        if body.get("parent") is not None:
            if not isinstance(body["parent"], str):
                raise ApiError(400, "bad_request", "parent must be an event CID")
            parent = parse_cid(body["parent"], "parent")
        inject_id = body.get("inject_id")
        if inject_id is not None and not isinstance(inject_id, str):
            raise ApiError(400, "bad_request", "inject_id must be a string")
        ack, ack_timeout, key = _ack_fields(body, request.headers.get("idempotency-key"))
        attributes = body.get("attributes")
        if attributes is not None:
            if not isinstance(attributes, dict):
                raise ApiError(
                    400, "bad_request", 'attributes must be an object {"name": string | number}'
                )
            validate_attributes(attributes)  # InvalidAttributes: 400 bad_request, saying why
        self.tree_key(cid)
        try:
            out = await self.d.publish(
                cid,
                payload,
                parent=parent,
                inject_id=inject_id,
                attributes=attributes or None,
                ack=ack,
                ack_timeout=ack_timeout,
                key=key,
            )
        except NotAcknowledged as exc:
            return JSONResponse(
                {
                    "error": {
                        "code": NOT_ACKNOWLEDGED.code,
                        "message": str(exc),
                        "event": cid_str(exc.event),
                        "holders": list(exc.holders),
                        "ack": exc.needed,
                    }
                },
                status_code=NOT_ACKNOWLEDGED.status,
            )
        res = out.result
        return JSONResponse(
            {
                "status": res.status,
                "event": cid_str(res.event_cid) if res.event_cid is not None else None,
                "request_id": res.request_id,
                "ack": out.ack if out.ack else "local",
                "holders": list(out.holders),
                "repeated": out.repeated,
            }
        )

    async def history(self, request: Request) -> Response:
        """docs/protocol.md §5 "History": one page of the topic's retained history in the
        history order ``(clock, CID bytes)``, newest or oldest first, after a cursor.

        A node that keeps no history of the topic (it never subscribed, or only
        relays it) becomes a *reader*: it looks the topic's holders up in the DHT,
        connects to them, joins the tree and back-fills the history (bounded wait;
        ``complete`` says whether it got everything in time).
        """
        cid = parse_cid(request.path_params["cid"], "topic CID")
        q = request.query_params
        limit_s = q.get("limit", "50")
        try:
            limit = int(limit_s)
        except ValueError:
            raise ApiError(
                400, "bad_request", f"limit must be an integer in 1..{MAX_HISTORY_LIMIT}"
            ) from None
        if not 1 <= limit <= MAX_HISTORY_LIMIT:
            raise ApiError(400, "bad_request", f"limit must be in 1..{MAX_HISTORY_LIMIT}")
        order_s = q.get("order", "newest")
        if order_s not in ("newest", "oldest"):
            raise ApiError(
                400, "bad_request", f'order must be "newest" or "oldest", not {order_s!r}'
            )
        order: HistoryOrder = "newest" if order_s == "newest" else "oldest"
        after_s, before_s = q.get("after"), q.get("before")
        if after_s and before_s:
            raise ApiError(400, "bad_request", "give after= (the cursor) or before=, not both")
        if before_s and order != "newest":
            raise ApiError(
                400,
                "bad_request",
                "before= is the old name of the newest-first cursor: use after=",
            )
        cursor_s = after_s or before_s
        cursor = parse_cid(cursor_s, "cursor") if cursor_s else None
        where = parse_where(q.get("where"), "where")
        settled = await self.gather_history(cid)
        page = await self.history_page(cid, order, cursor, limit, where)
        return JSONResponse(
            {
                "events": [event_json(c, ev) for c, ev in page.events],
                "next": cid_str(page.next) if page.next is not None else None,
                "complete": page.complete and settled,
                "missing": [cid_str(c) for c in page.missing],
                "heads": [cid_str(c) for c in page.heads],
                "retained": page.retained,
                "order": order,
            }
        )

    async def gather_history(self, cid: CID) -> bool:
        """Make sure the node keeps topic ``cid``'s history; whether it is gathered.

        A subscriber or author answers at once. Otherwise (first read, or a reader
        whose time ran out) the node finds the topic's holders, connects, calls
        ``node.read`` and waits (bounded) for the back-fill; a reader that asks again
        just extends its stay (``reader_ttl``).
        """
        d = self.d
        root = d.known_root(cid)
        if root is not None and d.reading.keeps_history(cid):
            if d.reading.is_reader(root):
                d.reading.start_reading(cid)  # extend the reader's stay
            return True
        async with d.reading.lock(cid):
            root = d.known_root(cid)
            if root is not None and d.reading.keeps_history(cid):
                return True  # another request made it a reader meanwhile
            return await self.become_reader(cid, root)

    async def become_reader(self, cid: CID, root: CID | None) -> bool:
        d = self.d
        began = time.monotonic()
        found, connected = await d.reading.find_holders(cid)
        if root is None:
            # Not a topic this node knows: check it is one (a clear 404 otherwise),
            # then look for the holders of its first version (subscribers announce it).
            desc = d.local_topic(cid)
            if desc is None:
                try:
                    desc = await self.topic_descriptor(
                        cid, DESCRIPTOR_TIMEOUT if found else NO_HOLDER_WAIT
                    )
                except ApiError as exc:
                    if found or exc.code != "timeout":
                        raise
                    raise ApiError(
                        404,
                        "unknown_topic",
                        f"topic {cid} is not known to this node and no node announces it",
                    ) from None
            root = await self.root_of(cid, desc)
        if root != cid:  # a later version: subscribers announce the first one
            more, more_connected = await d.reading.find_holders(root)
            found, connected = found + more, connected + more_connected
        settled = await d.reading.read_history(
            cid,
            root,
            found=found,
            connected=connected,
            resolve_wait=DESCRIPTOR_TIMEOUT,
            max_wait=max(1.0, READ_WAIT - (time.monotonic() - began)),
        )
        if settled is None:
            raise ApiError(504, "timeout", f"resolving topic {cid} took too long")
        return settled

    async def history_page(
        self,
        cid: CID,
        order: HistoryOrder,
        cursor: CID | None,
        limit: int,
        where: Filter | None = None,
    ) -> HistoryPage:
        try:
            return await self._read_page(cid, order, cursor, limit, where)
        except LocalProtocolError:
            if cursor is None:
                raise
        # A cursor event this node does not hold (a page from another node, or
        # evicted since): its descriptor carries its place in the order.
        try:
            ev = await self.event_descriptor(cursor)
        except ApiError as exc:
            if exc.status == 404:
                raise ApiError(400, "bad_request", f"bad cursor: {exc.message}") from None
            raise
        try:
            return await self._read_page(cid, order, ev, limit, where)
        except LocalProtocolError as exc:
            raise ApiError(400, "bad_request", f"bad cursor: {exc}") from None

    async def _read_page(
        self,
        cid: CID,
        order: HistoryOrder,
        after: CID | EventDescriptor | None,
        limit: int,
        where: Filter | None,
    ) -> HistoryPage:
        """A page of the core's history index, with the events it lists that the core
        does not hold read from Kubo (the core keeps an index, docs/sidecar.md
        "Retention"). Events retained meanwhile may call for more reads: a few rounds."""
        read: dict[CID, EventDescriptor] = {}
        for _ in range(_PAGE_READ_ROUNDS):
            try:
                return self.d.history(
                    cid, order=order, after=after, limit=limit, where=where, read=read.get
                )
            except BodiesNeeded as need:
                for c in need.cids:
                    read[c] = await self.event_descriptor(c)
        raise ApiError(504, "timeout", "the history changed while its page was read: try again")

    async def get_event(self, request: Request) -> Response:
        cid = parse_cid(request.path_params["cid"], "event CID")
        ev = await self.event_descriptor(cid)
        return JSONResponse(event_json(cid, ev))

    async def deliveries(self, request: Request) -> Response:
        q = request.query_params
        topic: str | None = None
        if q.get("topic"):
            tcid = parse_cid(q["topic"], "topic CID")
            root = self.d.known_root(tcid)
            topic = cid_str(root or tcid)
        after: int | None = None
        if q.get("after") is not None:
            try:
                after = int(q["after"])
            except ValueError:
                raise ApiError(400, "bad_request", "after must be an integer seq") from None
            if after < 0:
                raise ApiError(400, "bad_request", "after must not be negative")
        follow_s = q.get("follow", "true").lower()
        if follow_s not in ("true", "false", "1", "0"):
            raise ApiError(400, "bad_request", "follow must be true or false")
        follow = follow_s in ("true", "1")
        consumer: Consumer | None = None
        if q.get("consumer") is not None:
            if topic is not None:
                raise ApiError(400, "bad_request", "give topic= or consumer=, not both")
            consumer = self.consumer(q["consumer"])
            topic = consumer.topic
            if after is None:
                after = consumer.cursor
        lst = self.d.listen()  # before reading the log: no gap between replay and live
        start = after if after is not None else self.d.last_seq
        d, registry = self.d, self.d.subs.registry

        def wanted(obj: dict[str, Any]) -> bool:
            if consumer is not None:
                return consumer.wants(obj)  # its own filter, not the node's union
            return not topic or obj.get("topic_root") == topic

        def passed(seq: int) -> None:
            if consumer is not None and registry.advance(consumer, seq):
                d.mark_dirty()

        def open_() -> bool:
            return consumer is None or registry.get(consumer.id) is consumer

        async def lines() -> AsyncIterator[bytes]:
            last = start
            if consumer is not None:
                registry.attach(consumer)
            try:
                if after is not None and after < d.last_seq:
                    for obj in d.replay(after, topic):
                        last = obj["seq"]
                        if wanted(obj):
                            yield (json.dumps(obj, separators=(",", ":")) + "\n").encode()
                        passed(last)
                while follow and not d.is_stopping and open_():
                    if not lst.items:
                        lst.wake = anyio.Event()
                        with anyio.move_on_after(15):
                            await lst.wake.wait()
                        if not lst.items:
                            if open_():
                                yield b"\n"  # keep-alive (an empty line; clients skip it)
                            continue
                    while lst.items:
                        obj = lst.items.popleft()
                        if obj["seq"] <= last:
                            continue
                        last = obj["seq"]
                        if wanted(obj):
                            yield (json.dumps(obj, separators=(",", ":")) + "\n").encode()
                        passed(last)
            finally:
                d.unlisten(lst)
                if consumer is not None:
                    registry.detach(d.clock(), consumer)

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    async def records(self, request: Request) -> Response:
        """A page of this sidecar's metric records, from its files (``._record_pages``)."""
        q = request.query_params
        limit = 1000
        if q.get("limit") is not None:
            try:
                limit = int(q["limit"])
            except ValueError:
                raise ApiError(400, "bad_request", "limit must be an integer") from None
            if not 0 <= limit <= MAX_LIMIT:
                raise ApiError(400, "bad_request", f"limit must be 0..{MAX_LIMIT}")
        try:
            cursor = parse_cursor(q["after"]) if "after" in q else None
            page = self.d.record_page(cursor, limit)
        except CursorError as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
        if page is None:
            raise ApiError(404, "not_found", "this sidecar has not opened its metric records yet")
        head = json.dumps({"run": self.d.config.run, "node": self.d.peer_id, "next": page.next})
        body = b"".join(
            [
                head[:-1].encode(),
                b', "more": ',
                b"true" if page.more else b"false",
                b', "records": [',
                b",".join(page.lines),
                b"]}",
            ]
        )
        return Response(body, media_type="application/json")

    async def metrics(self, request: Request) -> Response:
        return Response(self.d.metrics_text(), media_type=METRICS_CONTENT_TYPE)

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document())


Handler = Callable[[Request], Awaitable[Response]]


def _wrap(fn: Handler) -> Handler:
    async def handler(request: Request) -> Response:
        try:
            return await fn(request)
        except ApiError as exc:
            return _error_response(exc.status, exc.code, exc.message)
        except _REFUSED as exc:
            return refusal(exc)

    return handler


class _Auth:
    """Bearer-token check (every path but ``/health`` and ``/``, a redirect, when a
    token is set). The dashboard's ``GET`` paths also take the token's cookie, which
    ``/dashboard?token=`` sets (:mod:`._dashboard`)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token and scope["type"] == "http" and scope.get("path") not in OPEN_PATHS:
            headers = dict(scope.get("headers") or [])
            got = headers.get(b"authorization", b"")
            if not hmac.compare_digest(
                got, b"Bearer " + self.token.encode()
            ) and not dashboard_cookie_ok(scope, self.token):
                resp: Response | None = cookie_login(scope, self.token)
                if resp is None:
                    resp = _error_response(401, "unauthorized", "a valid bearer token is required")
                await resp(scope, receive, send)
                return
        await self.app(scope, receive, send)


OPEN_PATHS: Final = frozenset({"/health", "/"})
"""What answers without the token: the health check, and ``/``, which only redirects
to ``/dashboard`` (with its query, so that ``/?token=`` logs a browser in)."""


def build_app(driver: Driver) -> ASGIApp:
    """The ASGI app of the API (used by :func:`serve_api` and by tests)."""
    a = _Api(driver)
    routes = [
        Route("/health", _wrap(a.health), methods=["GET"]),
        Route("/v1/status", _wrap(a.status), methods=["GET"]),
        Route("/v1/topics", _wrap(a.create_topic), methods=["POST"]),
        Route("/v1/topics/{cid}", _wrap(a.get_topic), methods=["GET"]),
        Route("/v1/topics/{cid}/update", _wrap(a.update_topic), methods=["POST"]),
        Route("/v1/topics/{cid}/subscribe", _wrap(a.subscribe), methods=["POST"]),
        Route("/v1/topics/{cid}/unsubscribe", _wrap(a.unsubscribe), methods=["POST"]),
        Route("/v1/topics/{cid}/publish", _wrap(a.publish), methods=["POST"]),
        Route("/v1/topics/{cid}/history", _wrap(a.history), methods=["GET"]),
        Route("/v1/events/{cid}", _wrap(a.get_event), methods=["GET"]),
        Route("/v1/topics/{cid}/consumers", _wrap(a.open_consumer), methods=["POST"]),
        Route("/v1/consumers", _wrap(a.list_consumers), methods=["GET"]),
        Route("/v1/consumers/{id}", _wrap(a.get_consumer), methods=["GET"]),
        Route("/v1/consumers/{id}", _wrap(a.close_consumer), methods=["DELETE"]),
        Route("/v1/deliveries", _wrap(a.deliveries), methods=["GET"]),
        Route("/v1/records", _wrap(a.records), methods=["GET"]),
        Route("/metrics", _wrap(a.metrics), methods=["GET"]),
        Route("/openapi.json", _wrap(a.openapi), methods=["GET"]),
        *dashboard_routes(driver),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error_response(404, "not_found", f"no such endpoint: {request.url.path}")

    async def bad_method(request: Request, exc: Exception) -> Response:
        return _error_response(405, "bad_request", f"method {request.method} not allowed here")

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: bad_method})
    return _Auth(app, driver.config.api_token)


_PAGE_READ_ROUNDS: Final = 4
"""Times a history page is asked for with the event bodies read so far."""
KEEP_ALIVE: Final = 30.0
"""Seconds the API keeps an idle HTTP/1.1 connection open (uvicorn's default is 5 s).
httpx, which the SDK and most Python clients use, reuses a pooled connection for 5 s:
with the same 5 s on both sides, a request sent on a connection the server closes at
that moment fails with ``ReadError`` — what happened to one of 762 subscriptions in
the 100-node benchmark on a saturated machine (docs/benchmark-history.md, session 12). The
server waits longer than the clients, so that the client gives a connection up first."""


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers (the sidecar's main handles signals)
    and without its ten wake-ups a second.

    uvicorn's ``main_loop`` sleeps 0.1 s at a time to notice ``should_exit`` and
    renews its ``Date`` header every tenth turn: 2 % of a busy sidecar's CPU and 7 %
    of an idle one's (py-spy, 20-node cluster). Here it wakes once a second for the
    header, and at once when ``should_exit`` is set (which cannot be unset)."""

    tick: float = 1.0
    """Seconds between two of ``on_tick``'s checks (uvicorn: 0.1)."""

    def __init__(self, config: uvicorn.Config) -> None:
        self._exit = anyio.Event()
        super().__init__(config)

    @property
    def should_exit(self) -> bool:
        return self._exit.is_set()

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        if value:
            self._exit.set()

    def capture_signals(self) -> Any:
        return nullcontext()

    async def main_loop(self) -> None:
        counter = 0  # on_tick renews the Date header when counter % 10 == 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000
            with anyio.move_on_after(self.tick):
                await self._exit.wait()


def bind_api(host: str, port: int) -> socket.socket:
    """The API's listening socket, bound before the sidecar touches Kubo, so that a
    busy port fails first (:class:`OSError` with one line that says which address)."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise OSError(f"cannot serve the API on {host}:{port}: {exc.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        why = exc.strerror or str(exc)
        raise OSError(
            f"cannot serve the API on {host}:{port}: {why} (another pulsarcast-sidecar? "
            "choose another address with --api HOST:PORT)"
        ) from None
    return sock


async def serve_api(
    driver: Driver,
    *,
    sock: socket.socket | None = None,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the API until ``driver`` stops: a driver service
    (``driver.run(services=[serve_api])``); the driver does not know the API.

    ``sock`` is the socket :func:`bind_api` bound ahead (``pulsarcast-sidecar`` binds
    it before anything else); without it the configured address is bound here."""
    cfg = driver.config
    if sock is None:
        sock = bind_api(cfg.api_host, cfg.api_port)
    server = _Server(
        uvicorn.Config(
            build_app(driver),
            host=cfg.api_host,
            port=cfg.api_port,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=2,
            timeout_keep_alive=int(KEEP_ALIVE),
            access_log=False,
        )
    )

    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(server.serve, sockets=[sock]))
        while not server.started:
            if server.should_exit:
                raise OSError(f"cannot serve the API on {cfg.api}")
            await anyio.sleep(0.02)
        host, port = sock.getsockname()[:2]
        log.info("API on http://%s:%d", f"[{host}]" if ":" in host else host, port)
        task_status.started()
        await driver.stopping.wait()
        server.should_exit = True  # serve() answers what is in flight, then returns
