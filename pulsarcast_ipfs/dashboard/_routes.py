"""The dashboard's routes: the page, its two assets, one snapshot, and the stream.

The stream (``GET /dashboard/events``, ``text/event-stream``) sends one snapshot a
tick, each an SSE ``data:`` line of compact JSON. A snapshot is built only while a
client reads the stream (each stream builds its own, once a tick); nothing is
computed for a dashboard nobody has open. The page computes rates and the lag
window from two consecutive snapshots, so the server keeps no state per client.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import cache
from importlib import resources
from typing import Any, Final

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["EVENTS_PATH", "PAGE_PATH", "SNAPSHOT_PATH", "TICK", "Snapshot", "dashboard_routes"]

PAGE_PATH: Final = "/dashboard"
EVENTS_PATH: Final = "/dashboard/events"
SNAPSHOT_PATH: Final = "/dashboard/snapshot"

TICK: Final = 1.0
"""Seconds between two snapshots of the stream."""

Snapshot = Callable[[], Awaitable[dict[str, Any]]]
"""Builds the document the page draws: ``{"ts": seconds, "nodes": [...]}``."""

_ASSETS: Final = {
    "index.html": "text/html; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}

_HEADERS: Final = {
    # Everything the page loads comes from this server: no CDN, works offline.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
}


@cache
def asset(name: str) -> bytes:
    """A file of the page (package data of ``pulsarcast_ipfs.dashboard``)."""
    return resources.files(__package__).joinpath("static", name).read_bytes()


def _asset_response(name: str) -> Response:
    return Response(asset(name), media_type=_ASSETS[name], headers=_HEADERS)


def _dumps(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


async def _stream(snapshot: Snapshot, stop: anyio.Event, tick: float) -> AsyncIterator[bytes]:
    yield b"retry: 2000\n\n"
    while not stop.is_set():
        yield b"data: " + _dumps(await snapshot()) + b"\n\n"
        await anyio.sleep(tick)  # a cancel scope a tick would cost more than the check


def dashboard_routes(snapshot: Snapshot, *, stop: anyio.Event, tick: float = TICK) -> list[Route]:
    """The page at :data:`PAGE_PATH`, its assets, :data:`SNAPSHOT_PATH` (one snapshot,
    JSON) and :data:`EVENTS_PATH` (one a ``tick`` until ``stop`` is set or the
    client goes)."""

    async def page(request: Request) -> Response:
        return _asset_response("index.html")

    async def js(request: Request) -> Response:
        return _asset_response("dashboard.js")

    async def css(request: Request) -> Response:
        return _asset_response("dashboard.css")

    async def one(request: Request) -> Response:
        return JSONResponse(await snapshot(), headers={"Cache-Control": "no-store"})

    async def events(request: Request) -> Response:
        return StreamingResponse(
            _stream(snapshot, stop, tick),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    return [
        Route(PAGE_PATH, page, methods=["GET"]),
        Route(f"{PAGE_PATH}/dashboard.js", js, methods=["GET"]),
        Route(f"{PAGE_PATH}/dashboard.css", css, methods=["GET"]),
        Route(SNAPSHOT_PATH, one, methods=["GET"]),
        Route(EVENTS_PATH, events, methods=["GET"]),
    ]
