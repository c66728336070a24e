"""``GET /metrics`` of real sidecars beside real Kubo daemons, read with
prometheus_client's parser, against known traffic: one node authors a topic and
publishes 6 events, the other subscribes and gets them through the tree.
(tests/test_prometheus.py checks the same families on a fake Kubo, fast.)"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from pulsarcast_ipfs.bench._systems import parse_forward_counts, parse_sent_bytes
from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.testing import Scrape, wait_until
from sidecar._prometheus import FAMILIES

pytestmark = [pytest.mark.kubo, pytest.mark.cluster, pytest.mark.anyio]

AUTHOR, SUBSCRIBER = 0, 1
EVENTS = 6


@pytest.fixture(scope="module")
async def sc(anyio_backend: str) -> AsyncIterator[LocalSidecarCluster]:
    async with LocalSidecarCluster(nodes=2, run="prom") as cluster:
        yield cluster


async def _call(sc: LocalSidecarCluster, i: int, method: str, path: str, **kw: Any) -> Any:
    async with sc.client(i) as c:
        r: httpx.Response = await c.request(method, path, **kw)
    assert r.status_code in (200, 201), f"node{i} {method} {path}: {r.status_code} {r.text}"
    return r


async def _scrape(sc: LocalSidecarCluster, i: int) -> Scrape:
    r = await _call(sc, i, "GET", "/metrics")
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return Scrape.parse(r.text)


async def test_metrics_count_a_topics_traffic_on_both_ends(sc: LocalSidecarCluster) -> None:
    topic = (await _call(sc, AUTHOR, "POST", "/v1/topics", json={"name": "prom"})).json()["cid"]
    await _call(sc, SUBSCRIBER, "POST", f"/v1/topics/{topic}/subscribe")

    async def joined() -> bool:
        st = (await _call(sc, SUBSCRIBER, "GET", "/v1/status")).json()
        return any(t["root_cid"] == topic and t["parent"] for t in st["topics"])

    await wait_until(joined, deadline=60, what="the subscriber joined", interval=0.3)
    for n in range(EVENTS):
        await _call(
            sc,
            AUTHOR,
            "POST",
            f"/v1/topics/{topic}/publish",
            json={"ack": "local", "text": f"p{n}"},
        )

    async def delivered() -> bool:
        r = await _call(
            sc, SUBSCRIBER, "GET", "/v1/deliveries", params={"after": 0, "follow": "false"}
        )
        got = [json.loads(x) for x in r.text.splitlines() if x.strip()]
        return len([d for d in got if d["topic_root"] == topic]) == EVENTS

    await wait_until(delivered, deadline=60, what="every event delivered", interval=0.3)
    prom = {"topic": "prom", "topic_cid": topic}
    author, sub = await _scrape(sc, AUTHOR), await _scrape(sc, SUBSCRIBER)
    types = {
        f.name.removesuffix("_total") if f.type == "counter" else f.name: f.type for f in FAMILIES
    }
    for scrape in (author, sub):
        assert {n: f.type for n, f in scrape.families.items()} == types
        assert all(f.documentation for f in scrape.families.values())
    # the author: six publish calls, six events into the tree, each sent to its child
    assert author.value("pulsarcast_publish_call_seconds_count", **prom) == EVENTS
    assert author.value("pulsarcast_publish_call_seconds_bucket", **prom, le="+Inf") == EVENTS
    assert author.value("pulsarcast_publish_failures_total") == 0
    assert author.value("pulsarcast_events_published_total", **prom) == EVENTS
    assert author.value("pulsarcast_events_delivered_total", **prom) == EVENTS  # subscribed
    assert author.value("pulsarcast_tree_children", **prom) == 1
    assert author.value("pulsarcast_rpc_messages_total", direction="sent", op="EVENT") >= EVENTS
    # what the benchmark reads off every sidecar (forwards.json) reads this exposition
    text = (await _call(sc, AUTHOR, "GET", "/metrics")).text
    sent = author.value("pulsarcast_rpc_bytes_total", direction="sent", op="EVENT")
    assert parse_sent_bytes(text)["EVENT"] >= sent > 0
    assert parse_forward_counts(text) is not None
    # the subscriber: six deliveries through the tree, their latency observed
    assert sub.value("pulsarcast_events_delivered_total", **prom, recovered="false") == EVENTS
    assert sub.value("pulsarcast_delivery_latency_seconds_count", **prom) == EVENTS
    assert sub.value("pulsarcast_delivery_latency_seconds_bucket", **prom, le="+Inf") == EVENTS
    assert 0 < sub.value("pulsarcast_delivery_latency_seconds_sum", **prom) < EVENTS * 60
    assert sub.value("pulsarcast_deliveries_total") == EVENTS
    assert sub.value("pulsarcast_retained_events", **prom) == EVENTS
    assert sub.value("pulsarcast_tree_joined", **prom) == 1
    assert sub.value("pulsarcast_rpc_messages_total", direction="received", op="EVENT") >= EVENTS
    assert sub.value("pulsarcast_rpc_bytes_total", direction="received", op="EVENT") > 0
    assert sub.value("pulsarcast_events_published_total", **prom) == 0
    assert sub.family("pulsarcast_publish_call_seconds").samples == []
    buckets = [
        s.value
        for s in sub.family("pulsarcast_delivery_latency_seconds").samples
        if s.name.endswith("_bucket") and s.labels["topic"] == "prom"
    ]
    assert buckets == sorted(buckets) and buckets[-1] == EVENTS  # cumulative
