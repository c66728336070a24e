"""The asynchronous client (anyio: asyncio or trio) of the sidecar's HTTP API."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Literal, Self, TypeVar

import anyio
import httpx

from pulsarcast_ipfs.sdk import _calls
from pulsarcast_ipfs.sdk._errors import SdkError, SidecarUnavailable, error_from_response
from pulsarcast_ipfs.sdk._retry import Reconnects, describe
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

__all__ = ["AsyncClient"]

T = TypeVar("T")
Peers = PeerSet | bool | Sequence[str] | None


class AsyncClient:
    """``async with AsyncClient(config=ClientConfig(api=...)) as pc:`` — one sidecar.

    Every method maps to one endpoint of docs/http-api.md and raises the typed
    errors of :mod:`pulsarcast_ipfs.sdk` (``ApiError`` subclasses for refusals,
    :class:`SidecarUnavailable` when nothing answers). ``transport`` replaces the
    network (``httpx.MockTransport`` in unit tests).
    """

    def __init__(
        self,
        *,
        config: ClientConfig | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config or ClientConfig()
        headers = {"User-Agent": "pulsarcast-sdk", "Accept": "application/json"}
        if self.config.token:
            headers["Authorization"] = f"Bearer {self.config.token}"
        self._http = httpx.AsyncClient(
            base_url=self.config.api,
            headers=headers,
            timeout=self.config.timeout,
            transport=transport,
            trust_env=False,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _calls.Call[T]) -> T:
        try:
            resp = await self._http.request(
                call.method, call.path, params=call.params or None, json=call.body
            )
        except httpx.TransportError as exc:
            raise SidecarUnavailable(self.config.api, describe(exc, self.config)) from exc
        return call.parse(resp.status_code, resp.content)

    # -- node ----------------------------------------------------------------------------

    async def health(self) -> Health:
        """``GET /health`` (raises :class:`KuboUnavailable` when Kubo is down)."""
        return await self._send(_calls.health())

    async def status(self) -> NodeStatus:
        """``GET /v1/status``: peer ID, versions, and every topic's tree position."""
        return await self._send(_calls.status())

    # -- topics --------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        *,
        parent: str | None = None,
        allowed_publishers: Peers = None,
        request_to_publish: Peers = None,
        event_linking: EventLinking | str | None = None,
    ) -> Topic:
        """Create a topic (docs/protocol.md §5 "Create topic"); with ``parent``, a sub-topic
        or new version sharing the parent's meta topic. Options left ``None`` take the
        sidecar's defaults; a list of peers enables the set for exactly those peers."""
        return await self._send(
            _calls.create_topic(
                name,
                parent=parent,
                allowed_publishers=allowed_publishers,
                request_to_publish=request_to_publish,
                event_linking=event_linking,
            )
        )

    async def get_topic(self, cid: str) -> Topic:
        """A topic descriptor (fetched from IPFS if the sidecar lacks it)."""
        return await self._send(_calls.get_topic(cid))

    async def update_topic(
        self,
        cid: str,
        *,
        allowed_publishers: Peers = None,
        request_to_publish: Peers = None,
        event_linking: EventLinking | str | None = None,
    ) -> Topic:
        """Publish a new version of a topic on its meta topic (docs/protocol.md §5)."""
        return await self._send(
            _calls.update_topic(
                cid,
                allowed_publishers=allowed_publishers,
                request_to_publish=request_to_publish,
                event_linking=event_linking,
            )
        )

    async def subscribe(self, cid: str, *, fast: bool = False, filter: str | None = None) -> str:
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
        return await self._send(_calls.subscribe(cid, on=True, fast=fast, filter=filter))

    async def unsubscribe(self, cid: str) -> str:
        """Unsubscribe this node; it may stay in the tree as a relay."""
        return await self._send(_calls.subscribe(cid, on=False))

    # -- consumers (docs/sdk.md "Consumers") ---------------------------------------------

    async def open_consumer(
        self,
        topic: str,
        *,
        filter: str | None = None,
        name: str | None = None,
        fast: bool = False,
        after: int | None = None,
    ) -> Consumer:
        """Open a consumer of ``topic``: this application's own subscription, with its
        own ``filter`` and cursor, beside any other application's on the same sidecar
        (the node subscribes with the union of them all). Read it with
        ``deliveries(consumer=c.id)``; close it with :meth:`close_consumer`.

        Without ``name`` the sidecar closes it once no stream of it has been open for
        its grace (60 s by default). With ``name`` it is durable: opening the same name
        again (also after a restart of the application or the sidecar) takes it up
        with its own cursor, and the new ``filter``/``fast``. ``after``: start after
        that delivery ``seq`` instead (default: only new deliveries, or the named
        consumer's cursor)."""
        return await self._send(
            _calls.open_consumer(topic, filter=filter, name=name, fast=fast, after=after)
        )

    @asynccontextmanager
    async def subscription(
        self,
        topic: str,
        *,
        filter: str | None = None,
        name: str | None = None,
        fast: bool = False,
        after: int | None = None,
    ) -> AsyncIterator[Consumer]:
        """``async with pc.subscription(topic, filter=...) as c:`` — :meth:`open_consumer`
        for the block, read with ``pc.deliveries(consumer=c.id)``. An anonymous consumer
        is closed when the block ends (also on an error or a cancellation); a named one
        stays, to be taken up again."""
        c = await self.open_consumer(topic, filter=filter, name=name, fast=fast, after=after)
        try:
            yield c
        finally:
            if c.name is None:
                with anyio.CancelScope(shield=True), contextlib.suppress(SdkError):
                    await self.close_consumer(c.id)

    async def get_consumer(self, consumer_id: str) -> Consumer:
        """One consumer (:class:`NotFound` once it is closed or expired)."""
        return await self._send(_calls.get_consumer(consumer_id))

    async def consumers(self) -> tuple[Consumer, ...]:
        """Every consumer of the sidecar (all applications')."""
        return await self._send(_calls.consumers())

    async def close_consumer(self, consumer_id: str) -> bool:
        """Close a consumer (its streams end); the node leaves the topic with its last
        consumer unless it was subscribed explicitly. Whether it is still subscribed."""
        return await self._send(_calls.close_consumer(consumer_id))

    # -- events --------------------------------------------------------------------------

    async def publish(
        self,
        topic: str,
        data: bytes | str,
        *,
        parent: str | None = None,
        inject_id: str | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        ack: int | Literal["local"] | None = None,
        ack_timeout: float | None = None,
        idempotency_key: str | None = None,
    ) -> PublishOutcome:
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
        return await self._send(
            _calls.publish(
                topic,
                data,
                parent=parent,
                inject_id=inject_id,
                attributes=attributes,
                ack=ack,
                ack_timeout=ack_timeout,
                idempotency_key=idempotency_key,
            )
        )

    async def get_event(self, cid: str) -> Event:
        """An event descriptor by CID (from any node, through IPFS)."""
        return await self._send(_calls.get_event(cid))

    async def history(
        self,
        topic: str,
        *,
        order: HistoryOrder = "newest",
        after: str | None = None,
        limit: int = 50,
        before: str | None = None,
        where: str | None = None,
    ) -> HistoryPage:
        """One page of the topic's history (docs/protocol.md §5 "History"), in the order
        ``(clock, CID)`` that is the same on every node: ``newest`` first or ``oldest``
        first, strictly after the cursor ``after`` (the previous page's ``next``).
        ``before`` is the deprecated old name of ``after`` (newest first only).
        ``where``: only the events this filter matches; a page may then be short, or
        empty with a ``next``: go on from ``next`` (:meth:`iter_history` does)."""
        cursor = _calls.history_cursor(order, after, before)
        return await self._send(
            _calls.history(topic, order=order, after=cursor, limit=limit, where=where)
        )

    async def iter_history(
        self,
        topic: str,
        *,
        order: HistoryOrder = "newest",
        after: str | None = None,
        page_size: int = 50,
        before: str | None = None,
        where: str | None = None,
    ) -> AsyncIterator[Event]:
        """Every event of the topic, page after page (``order`` and ``where`` as for
        :meth:`history`)."""
        cursor = _calls.history_cursor(order, after, before)
        walk = _calls.HistoryWalk(
            topic, order=order, after=cursor, page_size=page_size, where=where
        )
        while not walk.done:
            page = await self._send(walk.call())
            for event in page.events:
                yield event
            walk.advance(page)

    async def deliveries(
        self,
        topic: str | None = None,
        *,
        after: int | None = None,
        follow: bool = True,
        consumer: str | None = None,
    ) -> AsyncIterator[Delivery]:
        """The node's deliveries as they come (``GET /v1/deliveries``), oldest first.

        ``after`` replays every delivery with a larger ``seq`` first; ``follow=False``
        ends after the replay. A dropped connection is resumed from the last ``seq``
        seen (no gap, no duplicate); :class:`SidecarUnavailable` after
        ``config.reconnect_attempts`` failed tries in a row.

        ``consumer`` (an id from :meth:`open_consumer`; not with ``topic``): that
        consumer's stream, only its own filter's matches, from its own cursor on the
        sidecar unless ``after`` is given; the cursor moves as lines are sent.
        """
        cursor = _calls.DeliveryCursor(topic=topic, after=after, follow=follow, consumer=consumer)
        retry = Reconnects(self.config)
        timeout = httpx.Timeout(self.config.timeout, read=None)
        while True:
            began = time.monotonic()
            try:
                async with self._http.stream(
                    "GET", "/v1/deliveries", params=cursor.params(), timeout=timeout
                ) as resp:
                    if resp.status_code != 200:
                        raise error_from_response(resp.status_code, await resp.aread())
                    async for chunk in resp.aiter_bytes():
                        for delivery in cursor.feed(chunk):
                            retry.delivered()
                            yield delivery
                if not follow and not cursor.splitter.pending():
                    return
                failure: BaseException | None = None
            except httpx.TransportError as exc:
                failure = exc
            delay = retry.failed(failure, time.monotonic() - began)
            cursor.reconnecting()
            await anyio.sleep(delay)
