"""The sidecar's live dashboard (docs/dashboard.md): ``GET /dashboard`` and its stream.

The page and the stream are :mod:`pulsarcast_ipfs.dashboard`'s; this module gives
them this node's snapshot and lets a browser in when the API has a token.

A snapshot is built from what ``/v1/status`` and ``/metrics`` already hold: each
topic's entry of ``/v1/status`` less its subscription's fields
(:func:`._status.tree_status`), and the counts and
histograms that ``/metrics`` exposes (:class:`._prometheus.SidecarStats`), read, not
computed again. The parent link's round trip comes from the core's PING/PONG.

Token
-----
A browser cannot send ``Authorization`` on a page load. When the API has a token,
``GET /dashboard?token=TOKEN`` with the right token answers ``303`` to
``/dashboard`` (so the token leaves the address bar and the history) and sets the
cookie :data:`COOKIE` (``HttpOnly``: no script reads it; ``SameSite=Strict``: no other
site's page sends it; ``Path=/dashboard``: no other endpoint takes it). The cookie
opens the dashboard's ``GET`` paths only: every other endpoint still wants the
bearer header, so a page elsewhere cannot make the browser publish.
"""

from __future__ import annotations

import hmac
import time
from http.cookies import CookieError, SimpleCookie
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.types import Scope

from pulsarcast_ipfs.dashboard import PAGE_PATH, dashboard_routes

from ._prometheus import OTHER
from ._status import tree_status
from ._version import VERSION

if TYPE_CHECKING:
    from ._driver import Driver

__all__ = ["COOKIE", "cookie_login", "dashboard_cookie_ok", "node_snapshot", "routes"]

COOKIE: Final = "pulsarcast_dashboard"
"""The cookie that carries the API token for the dashboard's paths."""


def node_snapshot(d: Driver) -> dict[str, Any]:
    """This node for the dashboard: ``/v1/status``'s topics, each with its counts
    from the metrics and its parent link's round trip (docs/dashboard.md)."""
    s = d.telemetry.stats
    topics: list[dict[str, Any]] = []
    for st in d.topic_states() if d.running else ():
        t = tree_status(d, st)
        label = s.topics(t["root_cid"], st.name)
        latency = s.latency.get(label)
        repairs = s.repairs.get(label)
        t.update(
            parent_rtt=d.node.link_rtt(st.parent) if st.parent else None,
            joined=st.joined,
            published=s.published[label],
            delivered=s.delivered[(*label, "false")] + s.delivered[(*label, "true")],
            recovered=s.delivered[(*label, "true")],
            latency_sum=latency.sum if latency else 0.0,
            latency_count=sum(latency.counts) if latency else 0,
            repairs=sum(repairs.counts) if repairs else 0,
            repair_seconds=repairs.sum if repairs else 0.0,
            counts_shared=label == (OTHER, OTHER),
        )
        topics.append(t)
    return {
        "peer_id": d.peer_id,
        "version": VERSION,
        "kubo_version": d.kubo_version,
        "api": d.config.api,
        "neighbours": len(d.transport.neighbours),
        "topics": topics,
    }


def routes(d: Driver) -> list[Route]:
    """The dashboard's routes for ``d``'s API, and ``/`` leading to it."""

    async def snapshot() -> dict[str, Any]:
        return {"ts": time.time(), "cluster": False, "nodes": [node_snapshot(d)]}

    async def root(request: Request) -> Response:
        query = request.url.query
        return RedirectResponse(PAGE_PATH + (f"?{query}" if query else ""), status_code=307)

    return [
        Route("/", root, methods=["GET"]),
        *dashboard_routes(snapshot, stop=d.stopping),
    ]


def _cookie(scope: Scope) -> str:
    for name, value in scope.get("headers") or ():
        if name == b"cookie":
            try:
                jar = SimpleCookie(value.decode("latin-1"))
            except CookieError:
                return ""
            morsel = jar.get(COOKIE)
            return morsel.value if morsel is not None else ""
    return ""


def _is_dashboard_get(scope: Scope) -> bool:
    path = str(scope.get("path", ""))
    return scope.get("method") in ("GET", "HEAD") and (
        path == PAGE_PATH or path.startswith(PAGE_PATH + "/")
    )


def dashboard_cookie_ok(scope: Scope, token: str) -> bool:
    """A ``GET`` of a dashboard path with the token's cookie."""
    return _is_dashboard_get(scope) and hmac.compare_digest(_cookie(scope).encode(), token.encode())


def cookie_login(scope: Scope, token: str) -> Response | None:
    """``GET /dashboard?token=TOKEN`` with the right token: the ``303`` that sets the
    cookie; otherwise ``None`` (the caller refuses as for any request)."""
    if scope.get("path") != PAGE_PATH or scope.get("method") != "GET":
        return None
    given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[-1]
    if not given or not hmac.compare_digest(given.encode(), token.encode()):
        return None
    resp = RedirectResponse(PAGE_PATH, status_code=303, headers={"Cache-Control": "no-store"})
    resp.set_cookie(COOKIE, token, path=PAGE_PATH, httponly=True, samesite="strict")
    return resp
