"""History pages read their events from Kubo: the core keeps an index, not the
bodies (docs/sidecar.md "Retention"). A sidecar whose core caches only two event
descriptors serves every page of a 12-event history, both orders and filtered,
with each event's payload and attributes as published (against a real Kubo)."""

from __future__ import annotations

import base64
import dataclasses
import functools
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from pulsarcast_ipfs.cluster import ClusterConfig, LocalCluster
from sidecar import Driver, load_config, serve_api

pytestmark = [pytest.mark.kubo, pytest.mark.anyio]

CACHED = 2
"""Event descriptors the core keeps (``NodeConfig.event_cache_size``)."""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def api(
    anyio_backend: str, tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, Driver]]:
    async with LocalCluster(config=ClusterConfig(nodes=1)) as cluster:
        cfg = load_config(
            env={},
            flags={
                "kubo_api": cluster[0].api_url,
                "api": f"127.0.0.1:{_port()}",
                "state_dir": str(tmp_path / "sidecar"),
            },
        )
        driver = Driver(cfg)
        driver.node_config = dataclasses.replace(driver.node_config, event_cache_size=CACHED)
        async with anyio.create_task_group() as tg:
            await tg.start(functools.partial(driver.run, services=[serve_api]))
            async with httpx.AsyncClient(
                base_url=f"http://{cfg.api}", trust_env=False, timeout=30
            ) as client:
                yield client, driver
            driver.stop()


async def _pages(api: httpx.AsyncClient, url: str, **params: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    after: str | None = None
    for _ in range(20):
        q = dict(params, **({"after": after} if after else {}))
        r = await api.get(url, params=q)
        assert r.status_code == 200, r.text
        page = r.json()
        out += page["events"]
        after = page["next"]
        if after is None:
            return out
    raise AssertionError("the pages did not end")


async def test_pages_read_the_events_the_core_does_not_hold(
    api: tuple[httpx.AsyncClient, Driver],
) -> None:
    client, driver = api
    r = await client.post("/v1/topics", json={"name": "bodies"})
    assert r.status_code == 201, r.text
    topic = r.json()["cid"]
    published: list[tuple[str, bytes, dict[str, Any]]] = []
    for i in range(12):
        attrs = {"n": i, "kind": "odd" if i % 2 else "even"}
        text = f"event {i} " + "x" * 200
        r = await client.post(
            f"/v1/topics/{topic}/publish", json={"text": text, "attributes": attrs, "ack": "local"}
        )
        assert r.status_code == 200 and r.json()["status"] == "published", r.text
        published.append((r.json()["event"], text.encode(), attrs))
    # The core holds CACHED descriptors at most: the others come from Kubo.
    assert driver.node.memory_usage["events"] <= CACHED
    url = f"/v1/topics/{topic}/history"
    want = [(c, p, a) for c, p, a in published]

    def got(events: list[dict[str, Any]]) -> list[tuple[str, bytes, dict[str, Any]]]:
        return [(e["cid"], base64.b64decode(e["payload"]), e["attributes"]) for e in events]

    assert got(await _pages(client, url, limit=5)) == want[::-1]
    assert got(await _pages(client, url, limit=5, order="oldest")) == want
    odd = [x for x in want if x[2]["kind"] == "odd"]
    assert got(await _pages(client, url, limit=2, where="kind = 'odd'")) == odd[::-1]
    # A cursor the core has in its index but not in its cache.
    r = await client.get(url, params={"limit": 3, "after": want[5][0], "order": "oldest"})
    assert got(r.json()["events"]) == want[6:9]
