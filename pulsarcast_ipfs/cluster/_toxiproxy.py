"""A small async client of Toxiproxy's HTTP API (the parts the local cluster uses).

One ``toxiproxy-server`` serves a whole cluster; each node gets one proxy that
listens on a free loopback port and forwards to the node's real swarm port. Toxics
(latency, bandwidth) are added to that proxy at run time.
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["ToxiproxyAPI", "ToxiproxyError"]


class ToxiproxyError(RuntimeError):
    """Toxiproxy refused a request or cannot be reached."""


class ToxiproxyAPI:
    """Calls to one ``toxiproxy-server`` (``base_url`` such as ``http://127.0.0.1:8474``)."""

    def __init__(self, base_url: str, *, timeout: float = 10.0) -> None:
        self.base_url = base_url
        self._timeout = timeout

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            async with httpx.AsyncClient(
                base_url=self.base_url, timeout=self._timeout, trust_env=False
            ) as http:
                response = await http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise ToxiproxyError(f"Toxiproxy at {self.base_url} unreachable: {exc}") from exc
        if response.status_code >= 300:
            raise ToxiproxyError(
                f"Toxiproxy {method} {path} -> HTTP {response.status_code}: {response.text.strip()}"
            )
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    async def version(self) -> str:
        try:
            async with httpx.AsyncClient(
                base_url=self.base_url, timeout=self._timeout, trust_env=False
            ) as http:
                response = await http.get("/version")
        except httpx.HTTPError as exc:
            raise ToxiproxyError(f"Toxiproxy at {self.base_url} unreachable: {exc}") from exc
        return response.text.strip()

    async def create_proxy(self, name: str, *, listen: str, upstream: str) -> str:
        """Create a proxy; return the address it really listens on (``listen`` may use port 0)."""
        doc = await self._request(
            "POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream}
        )
        return str(doc["listen"])

    async def update_proxy(self, name: str, **fields: Any) -> dict[str, Any]:
        doc: dict[str, Any] = await self._request("POST", f"/proxies/{name}", fields)
        return doc

    async def set_toxic(self, proxy: str, name: str, kind: str, stream: str, **attrs: Any) -> None:
        """Create the toxic ``name`` or update it in place if it exists."""
        doc = await self._request("GET", f"/proxies/{proxy}")
        existing = {t["name"] for t in doc.get("toxics") or ()}
        body = {"name": name, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attrs}
        if name in existing:
            await self._request("POST", f"/proxies/{proxy}/toxics/{name}", body)
        else:
            await self._request("POST", f"/proxies/{proxy}/toxics", body)

    async def remove_toxic(self, proxy: str, name: str) -> None:
        doc = await self._request("GET", f"/proxies/{proxy}")
        if name in {t["name"] for t in doc.get("toxics") or ()}:
            await self._request("DELETE", f"/proxies/{proxy}/toxics/{name}")
