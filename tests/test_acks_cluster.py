"""Acknowledgement levels and the persisted outbox on real Kubo daemons
(docs/http-api.md "Publish", docs/faults.md "Acknowledgement levels").

Three Kubo daemons with a sidecar each: node 0 authors the topics and publishes,
nodes 1 and 2 subscribe. A holder is a node that says STORED once its Kubo stored
and pinned the event; the scenarios that kill sidecars come last.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.testing import api, ok, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.kubo, pytest.mark.anyio]

PUB, SUB1, SUB2 = 0, 1, 2


@pytest.fixture(scope="module")
async def sc(anyio_backend: str) -> AsyncIterator[LocalSidecarCluster]:
    async with LocalSidecarCluster(nodes=3, run="acks") as cluster:
        yield cluster


async def topic_with(sc: LocalSidecarCluster, name: str, subs: list[int]) -> str:
    topic = str((await ok(sc, PUB, "POST", "/v1/topics", json={"name": name}))["cid"])
    for i in subs:
        await ok(sc, i, "POST", f"/v1/topics/{topic}/subscribe")

    async def joined() -> bool:
        for i in subs:
            status = await ok(sc, i, "GET", "/v1/status")
            st = next((t for t in status["topics"] if t["root_cid"] == topic), None)
            if st is None or st["parent"] is None:
                return False
        return True

    await wait_until(joined, deadline=60, what="the subscribers joined", interval=0.3)
    return topic


async def delivered(sc: LocalSidecarCluster, i: int, topic: str) -> list[str]:
    r = await api(
        sc, i, "GET", "/v1/deliveries", params={"topic": topic, "after": 0, "follow": "false"}
    )
    assert r.status_code == 200, r.text
    return [json.loads(line)["cid"] for line in r.text.splitlines() if line.strip()]


async def outbox(sc: LocalSidecarCluster, i: int) -> list[str]:
    return list((await ok(sc, i, "GET", "/v1/status"))["outbox"])


async def test_ack_1_names_a_holder_and_ack_2_both(sc: LocalSidecarCluster) -> None:
    topic = await topic_with(sc, "acks-holders", [SUB1, SUB2])
    peers = {sc.cluster[SUB1].peer_id, sc.cluster[SUB2].peer_id}
    url = f"/v1/topics/{topic}/publish"
    t0 = time.monotonic()
    one = await ok(sc, PUB, "POST", url, json={"text": "a", "ack": 1})
    took = time.monotonic() - t0
    assert one["ack"] == 1 and len(one["holders"]) >= 1, one
    assert set(one["holders"]) <= peers
    assert took < 10
    two = await ok(sc, PUB, "POST", url, json={"text": "b", "ack": 2})
    assert set(two["holders"]) == peers, two
    # A holder holds: the event is pinned in its Kubo (the retention index links it).
    for i in (SUB1, SUB2):
        got = await delivered(sc, i, topic)
        assert one["event"] in got and two["event"] in got
    assert await outbox(sc, PUB) == []
    # ack=3 cannot be met by two other nodes: not_acknowledged names both.
    r = await api(sc, PUB, "POST", url, json={"text": "c", "ack": 3, "ack_timeout": 3})
    assert r.status_code == 504, r.text
    err = r.json()["error"]
    assert err["code"] == "not_acknowledged" and set(err["holders"]) == peers, err
    assert err["event"] in await outbox(sc, PUB)


async def test_idempotent_retry_makes_one_event(sc: LocalSidecarCluster) -> None:
    topic = await topic_with(sc, "acks-retry", [SUB1])
    url = f"/v1/topics/{topic}/publish"
    body = {"text": "once", "ack": 1, "idempotency_key": "order-17"}
    first = await ok(sc, PUB, "POST", url, json=body)
    second = await ok(sc, PUB, "POST", url, json=body)
    assert second["event"] == first["event"] and second["repeated"] is True
    # a cut connection: the request is sent whole, the socket closed before the answer
    sc_url = httpx.URL(sc[PUB].api_url)
    payload = json.dumps({"text": "cut", "ack": 1, "idempotency_key": "order-18"}).encode()
    request = (
        f"POST {url} HTTP/1.1\r\nHost: {sc_url.host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode() + payload
    stream = await anyio.connect_tcp(sc_url.host, sc_url.port or 80)
    await stream.send(request)
    await stream.aclose()
    await anyio.sleep(1)
    third = await ok(
        sc, PUB, "POST", url, json={"text": "cut", "ack": 1, "idempotency_key": "order-18"}
    )
    assert third["repeated"] is True  # the cut call made the event; the retry made none
    await anyio.sleep(2)
    got = await delivered(sc, SUB1, topic)
    assert got.count(first["event"]) == 1
    assert got.count(third["event"]) == 1
    assert len(got) == 2, got  # no second event for either key


async def test_no_holder_times_out_and_the_event_is_delivered_once_later(
    sc: LocalSidecarCluster,
) -> None:
    topic = await topic_with(sc, "acks-later", [SUB1])
    await sc.kill_sidecar(SUB1)  # the only subscriber is gone: nobody can hold it
    r = await api(
        sc,
        PUB,
        "POST",
        f"/v1/topics/{topic}/publish",
        json={"text": "while away", "ack": 1, "ack_timeout": 2},
    )
    assert r.status_code == 504, r.text
    err = r.json()["error"]
    assert err["code"] == "not_acknowledged" and err["holders"] == []
    ev = err["event"]
    assert ev in await outbox(sc, PUB)
    await sc.start_sidecar(SUB1)  # it comes back (its subscription resumes)

    async def held() -> bool:
        return ev not in await outbox(sc, PUB)

    await wait_until(held, deadline=90, what="the event held by the subscriber", interval=0.5)
    await anyio.sleep(2)
    assert (await delivered(sc, SUB1, topic)).count(ev) == 1


async def test_outbox_survives_sigkill_of_the_publisher(sc: LocalSidecarCluster) -> None:
    topic = await topic_with(sc, "acks-crash", [SUB1])
    await sc.kill_sidecar(SUB1)
    url = f"/v1/topics/{topic}/publish"
    r = await api(
        sc,
        PUB,
        "POST",
        url,
        json={"text": "survives", "ack": 1, "ack_timeout": 1, "idempotency_key": "crash-1"},
    )
    assert r.status_code == 504, r.text
    ev = r.json()["error"]["event"]
    state: Path = sc[PUB].state_dir
    lines = (state / "outbox.ndjson").read_text().splitlines()
    assert any(json.loads(x).get("add") == ev for x in lines)
    await sc.kill_sidecar(PUB)  # SIGKILL: no graceful shutdown
    await sc.start_sidecar(PUB)
    assert ev in await outbox(sc, PUB)
    # the key survived too: a retry after the crash makes no second event
    r = await api(
        sc,
        PUB,
        "POST",
        url,
        json={"text": "survives", "ack": 1, "ack_timeout": 1, "idempotency_key": "crash-1"},
    )
    assert r.status_code == 504 and r.json()["error"]["event"] == ev, r.text
    await sc.start_sidecar(SUB1)

    async def held() -> bool:
        return ev not in await outbox(sc, PUB)

    await wait_until(held, deadline=120, what="the event held after the restarts", interval=0.5)
    await anyio.sleep(2)
    got = await delivered(sc, SUB1, topic)
    assert got.count(ev) == 1, got
    assert len(got) == 1, got
