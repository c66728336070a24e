"""A stand-in for sidecars' ``GET /v1/records``, for tests of ``pulsarcast collect``.

:class:`RecordSources` answers, through ``httpx.MockTransport``, as each sidecar it
knows would: pages from a real :class:`sidecar._metrics.MetricsWriter`'s files
(``sidecar._record_pages``), with the answer's shape of docs/http-api.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from sidecar._record_pages import CursorError, parse_cursor, read_page

__all__ = ["RecordSources"]


@dataclass
class RecordSources:
    """``url -> (run, node, live file)``; :meth:`transport` serves them."""

    sources: dict[str, tuple[str, str, Path]] = field(default_factory=dict)
    requests: int = 0

    def add(self, url: str, *, run: str, node: str, live: Path) -> None:
        self.sources[url] = (run, node, live)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        base = f"{request.url.scheme}://{request.url.netloc.decode()}"
        if base not in self.sources or request.url.path != "/v1/records":
            raise httpx.ConnectError(f"nothing listens at {base}", request=request)
        run, node, live = self.sources[base]
        q = request.url.params
        try:
            cursor = parse_cursor(q["after"]) if q.get("after") else None
            page = read_page(live, cursor, int(q.get("limit", "1000")))
        except CursorError as exc:
            err = {"error": {"code": "bad_request", "message": str(exc)}}
            return httpx.Response(400, json=err)
        body = {
            "run": run,
            "node": node,
            "next": page.next,
            "more": page.more,
            "records": [json.loads(x) for x in page.lines],
        }
        return httpx.Response(200, json=body)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)
