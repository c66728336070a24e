"""The synchronous client of the sidecar's HTTP API (same methods as :class:`AsyncClient`)."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import ParamSpec, Self, TypeVar

import httpx

from pulsarcast_ipfs.sdk import _calls
from pulsarcast_ipfs.sdk._endpoints import Endpoints
from pulsarcast_ipfs.sdk._errors import SdkError, SidecarUnavailable, error_from_response
from pulsarcast_ipfs.sdk._retry import Reconnects, describe
from pulsarcast_ipfs.sdk._types import ClientConfig, Consumer, Delivery, Event, HistoryOrder

__all__ = ["Client"]

T = TypeVar("T")
P = ParamSpec("P")


class Client(Endpoints):
    """``with Client(config=ClientConfig(api=...)) as pc:`` — one sidecar, blocking calls.

    Every method maps to one endpoint of docs/http-api.md and raises the typed
    errors of :mod:`pulsarcast_ipfs.sdk` (``ApiError`` subclasses for refusals,
    :class:`SidecarUnavailable` when nothing answers). ``transport`` replaces the
    network (``httpx.MockTransport`` in unit tests).
    """

    def __init__(
        self,
        *,
        config: ClientConfig | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.config = config or ClientConfig()
        self._http = httpx.Client(transport=transport, **_calls.http_options(self.config))

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: _calls.Call[T]) -> T:
        try:
            resp = self._http.request(
                call.method, call.path, params=call.params or None, json=call.body
            )
        except httpx.TransportError as exc:
            raise SidecarUnavailable(self.config.api, describe(exc, self.config)) from exc
        return call.parse(resp.status_code, resp.content)

    def _bind(self, build: Callable[P, _calls.Call[T]]) -> Callable[P, T]:
        def method(*args: P.args, **kwargs: P.kwargs) -> T:
            return self._send(build(*args, **kwargs))

        return functools.wraps(build)(method)

    @contextmanager
    def subscription(
        self,
        topic: str,
        *,
        filter: str | None = None,
        name: str | None = None,
        fast: bool = False,
        after: int | None = None,
    ) -> Iterator[Consumer]:
        """``with pc.subscription(topic, filter=...) as c:`` — :meth:`open_consumer` for
        the block, read with ``pc.deliveries(consumer=c.id)``. An anonymous consumer is
        closed when the block ends (also on an error); a named one stays, to be taken
        up again."""
        c = self.open_consumer(topic, filter=filter, name=name, fast=fast, after=after)
        try:
            yield c
        finally:
            if c.name is None:
                with contextlib.suppress(SdkError):
                    self.close_consumer(c.id)

    def iter_history(
        self,
        topic: str,
        *,
        order: HistoryOrder = "newest",
        after: str | None = None,
        page_size: int = 50,
        before: str | None = None,
        where: str | None = None,
    ) -> Iterator[Event]:
        """Every event of the topic, page after page (``order`` and ``where`` as for
        :meth:`history`)."""
        cursor = _calls.history_cursor(order, after, before)
        walk = _calls.HistoryWalk(
            topic, order=order, after=cursor, page_size=page_size, where=where
        )
        while not walk.done:
            page = self._send(walk.call())
            yield from page.events
            walk.advance(page)

    def deliveries(
        self,
        topic: str | None = None,
        *,
        after: int | None = None,
        follow: bool = True,
        consumer: str | None = None,
    ) -> Iterator[Delivery]:
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
                with self._http.stream(
                    "GET", "/v1/deliveries", params=cursor.params(), timeout=timeout
                ) as resp:
                    if resp.status_code != 200:
                        raise error_from_response(resp.status_code, resp.read())
                    for chunk in resp.iter_bytes():
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
            time.sleep(delay)
