"""``pulsarcast dashboard``: every sidecar's snapshot in one document.

Each tick the view asks every sidecar for ``GET /dashboard/snapshot`` at once and
puts their nodes side by side; a sidecar that does not answer is a node entry with
its ``api`` and an ``error`` line, drawn as such. Several open pages share one round
of requests a tick (a snapshot younger than half a tick is served again).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import anyio
import httpx

from ._routes import SNAPSHOT_PATH, TICK

__all__ = ["ClusterView"]


class ClusterView:
    """The snapshots of the sidecars at ``urls`` (``http://host:port``)."""

    def __init__(
        self, urls: Sequence[str], *, token: str | None = None, timeout: float = 2.0
    ) -> None:
        self.urls = list(urls)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(headers=headers, timeout=timeout, trust_env=False)
        self._last: dict[str, Any] | None = None
        self._lock = anyio.Lock()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _one(self, url: str) -> dict[str, Any]:
        try:
            r = await self._http.get(url + SNAPSHOT_PATH)
        except httpx.HTTPError as exc:
            return {"api": url, "error": f"unreachable: {type(exc).__name__}"}
        if r.status_code != 200:
            return {"api": url, "error": f"HTTP {r.status_code}"}
        try:
            nodes = r.json()["nodes"]
            node = dict(nodes[0])
        except (ValueError, KeyError, IndexError, TypeError):
            return {"api": url, "error": "not a Pulsarcast sidecar's snapshot"}
        node["api"] = url
        return node

    async def snapshot(self) -> dict[str, Any]:
        async with self._lock:
            now = time.time()
            if self._last is not None and now - self._last["ts"] < TICK / 2:
                return self._last
            nodes: list[dict[str, Any]] = [{}] * len(self.urls)

            async def fetch(i: int, url: str) -> None:
                nodes[i] = await self._one(url)

            async with anyio.create_task_group() as tg:
                for i, url in enumerate(self.urls):
                    tg.start_soon(fetch, i, url)
            self._last = {"ts": now, "cluster": True, "nodes": nodes}
            return self._last
