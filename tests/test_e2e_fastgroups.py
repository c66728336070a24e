"""Fast groups on a real cluster: Kubo daemons and sidecars, subscribers
with ``"fast": true``, a group capacity of 1 so that a helper carries the group.

Checks: the publisher's group holds every fast subscriber, with one helper; every
subscriber receives GROUP_EVENT frames (from the publisher or its helper) and
delivers every event exactly once; after the helper is killed the publisher places
its members again and nothing is lost.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.testing import Scrape, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.anyio]

NODES = 5


@pytest.fixture(scope="module")
async def sc(anyio_backend: str) -> AsyncIterator[LocalSidecarCluster]:
    async with LocalSidecarCluster(
        nodes=NODES,
        routing_k=1,
        run="e2e-fast",
        extra_args=["--group-capacity", "1", "--group-refresh", "2"],
    ) as cluster:
        yield cluster


async def ok(sc: LocalSidecarCluster, i: int, method: str, path: str, **kw: Any) -> Any:
    async with sc.client(i) as c:
        r: httpx.Response = await c.request(method, path, **kw)
    assert r.status_code in (200, 201), f"node{i} {method} {path}: {r.status_code} {r.text}"
    return r.json() if method != "GET" or not path.startswith("/metrics") else r.text


async def delivered(sc: LocalSidecarCluster, i: int, topic: str) -> list[str]:
    async with sc.client(i) as c:
        r = await c.get("/v1/deliveries", params={"topic": topic, "after": 0, "follow": "false"})
    assert r.status_code == 200, r.text
    return [json.loads(line)["cid"] for line in r.text.splitlines() if line.strip()]


async def fast_of(sc: LocalSidecarCluster, i: int, topic: str) -> dict[str, Any] | None:
    st = await ok(sc, i, "GET", "/v1/status")
    for t in st["topics"]:
        if t["root_cid"] == topic:
            fast: dict[str, Any] | None = t["fast"]
            return fast
    return None


async def group_event_bytes(sc: LocalSidecarCluster, i: int) -> int:
    scrape = Scrape.parse(await ok(sc, i, "GET", "/metrics"))
    return int(scrape.value("pulsarcast_rpc_bytes_total", direction="received", op="GROUP_EVENT"))


async def test_fast_subscribers_get_group_traffic_exactly_once_and_survive_a_helper(
    sc: LocalSidecarCluster,
) -> None:
    topic = (await ok(sc, 0, "POST", "/v1/topics", json={"name": "fast-news"}))["cid"]
    subs = list(range(1, NODES))
    for i in subs:
        r = await ok(sc, i, "POST", f"/v1/topics/{topic}/subscribe", json={"fast": True})
        assert r["fast"] is True

    async def grouped() -> bool:
        g = await fast_of(sc, 0, topic)
        return g is not None and g["group"]["members"] == len(subs) and bool(g["group"]["helpers"])

    await wait_until(grouped, deadline=60, what="every fast subscriber in the group", interval=0.5)
    group = (await fast_of(sc, 0, topic))["group"]  # type: ignore[index]
    assert len(group["direct"]) + len(group["helpers"]) <= 1  # the capacity
    (helper,) = group["helpers"]
    assert sorted(group["helpers"][helper]) == sorted(
        sc.cluster[i].peer_id for i in subs if sc.cluster[i].peer_id != helper
    )

    before = {i: await group_event_bytes(sc, i) for i in subs}
    cids = [
        (
            await ok(
                sc, 0, "POST", f"/v1/topics/{topic}/publish", json={"ack": "local", "text": f"e{n}"}
            )
        )["event"]
        for n in range(10)
    ]

    async def all_delivered(nodes: list[int], want: list[str]) -> bool:
        for i in nodes:
            got = await delivered(sc, i, topic)
            if sorted(set(got)) != sorted(want):
                return False
        return True

    await wait_until(
        lambda: all_delivered(subs, cids), deadline=60, what="every event", interval=0.5
    )
    for i in subs:
        got = await delivered(sc, i, topic)
        assert len(got) == len(cids), f"node{i}: a duplicate"  # exactly once
        # every subscriber got group frames: the helper from the publisher, the others
        # from the helper
        assert await group_event_bytes(sc, i) > before[i], f"node{i} got no GROUP_EVENT"

    # the helper dies: its members are placed again, and nothing is lost
    victim = next(i for i in subs if sc.cluster[i].peer_id == helper)
    await sc.kill_sidecar(victim)
    rest = [i for i in subs if i != victim]
    more = [
        (
            await ok(
                sc,
                0,
                "POST",
                f"/v1/topics/{topic}/publish",
                json={"ack": "local", "text": f"late{n}"},
            )
        )["event"]
        for n in range(5)
    ]

    async def replaced() -> bool:
        g = await fast_of(sc, 0, topic)
        return (
            g is not None
            and helper not in g["group"]["helpers"]
            and (g["group"]["members"] == len(rest))
        )

    await wait_until(replaced, deadline=90, what="the dead helper replaced", interval=1.0)
    await wait_until(
        lambda: all_delivered(rest, cids + more),
        deadline=90,
        what="every event after the helper's death",
        interval=1.0,
    )
    for i in rest:
        got = await delivered(sc, i, topic)
        assert len(got) == len(cids) + len(more), f"node{i}: a duplicate"
