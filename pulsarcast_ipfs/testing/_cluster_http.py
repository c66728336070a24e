"""HTTP helpers shared by the real-cluster sidecar tests (tests/test_history_cluster.py,
tests/test_filters_cluster.py and others): a call to one node's sidecar (any answer, or one
that must succeed), its delivery log, and the wait until every subscriber has joined a
topic's tree."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import httpx

from pulsarcast_ipfs.testing._wait import wait_until

if TYPE_CHECKING:  # the cluster package imports pulsarcast_ipfs.testing
    from pulsarcast_ipfs.cluster import LocalSidecarCluster

__all__ = ["api", "deliveries", "ok", "wait_joined"]


async def api(sc: LocalSidecarCluster, i: int, method: str, path: str, **kw: Any) -> httpx.Response:
    """Node ``i``'s sidecar's answer, whatever its status."""
    async with sc.client(i, timeout=60.0) as c:
        return await c.request(method, path, **kw)


async def ok(sc: LocalSidecarCluster, i: int, method: str, path: str, **kw: Any) -> Any:
    """The JSON answer of node ``i``'s sidecar, which must be 200 or 201."""
    r = await api(sc, i, method, path, **kw)
    assert r.status_code in (200, 201), f"node{i} {method} {path}: {r.status_code} {r.text}"
    return r.json()


async def deliveries(sc: LocalSidecarCluster, i: int, topic: str) -> list[dict[str, Any]]:
    """Every delivery node ``i`` logged for ``topic``, oldest first."""
    r = await api(
        sc, i, "GET", "/v1/deliveries", params={"topic": topic, "after": 0, "follow": "false"}
    )
    assert r.status_code == 200, r.text
    return [json.loads(line) for line in r.text.splitlines() if line.strip()]


async def wait_joined(sc: LocalSidecarCluster, topic: str, nodes: Iterable[int]) -> None:
    """Wait (30 s at most) until every node of ``nodes`` has a parent in ``topic``'s
    tree and none stands in for an unreachable root."""
    nodes = list(nodes)

    async def joined() -> bool:
        for i in nodes:
            status = await ok(sc, i, "GET", "/v1/status")
            st = next((t for t in status["topics"] if t["root_cid"] == topic), None)
            if st is None or st["parent"] is None or st["acting_root"]:
                return False
        return True

    await wait_until(joined, deadline=30, what="every subscriber in the tree")
