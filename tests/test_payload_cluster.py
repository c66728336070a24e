"""Large payloads on real Kubo daemons (docs/protocol.md "Payload size").

Three Kubo daemons with a sidecar each: node 0 authors the topic and publishes,
nodes 1 and 2 subscribe. An event is one dag-cbor block holding its payload, so a
payload is at most 512 KiB (``MAX_PAYLOAD_SIZE``): the block (≤ 528 KiB) stays
under Kubo's block limit and the EVENT frame under ``MAX_FRAME_SIZE`` (1 MiB).

- 256 KiB and 512 KiB (the maximum) events reach every subscriber byte for byte,
  and come back the same from the history and from ``GET /v1/events/{cid}`` on a
  node that fetches the block from Kubo;
- one byte over the maximum, and 2 MiB (over the request body limit too), are
  refused with 413 ``payload_too_large`` naming the maximum, and nothing is
  written: the history, the retained count and the subscribers' deliveries stay
  as they were; the CLI says so in one line.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.core import MAX_PAYLOAD_SIZE
from pulsarcast_ipfs.testing import api, ok, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.kubo, pytest.mark.anyio, pytest.mark.timeout(300)]

PUB, SUBS = 0, [1, 2]


@pytest.fixture(scope="module")
async def sc(anyio_backend: str) -> AsyncIterator[LocalSidecarCluster]:
    async with LocalSidecarCluster(nodes=3, run="payload") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def topic(sc: LocalSidecarCluster) -> str:
    cid = str((await ok(sc, PUB, "POST", "/v1/topics", json={"name": "large"}))["cid"])
    for i in SUBS:
        await ok(sc, i, "POST", f"/v1/topics/{cid}/subscribe")

    async def joined() -> bool:
        for i in SUBS:
            status = await ok(sc, i, "GET", "/v1/status")
            st = next((t for t in status["topics"] if t["root_cid"] == cid), None)
            if st is None or st["parent"] is None:
                return False
        return True

    await wait_until(joined, deadline=60, what="the subscribers joined", interval=0.3)
    return cid


async def delivered(sc: LocalSidecarCluster, i: int, topic: str) -> dict[str, bytes]:
    """Event cid → payload of every delivery node ``i`` logged for ``topic``."""
    async with sc.client(i, timeout=60) as c:
        r = await c.get("/v1/deliveries", params={"topic": topic, "after": 0, "follow": "false"})
    assert r.status_code == 200, r.text
    lines = [json.loads(line) for line in r.text.splitlines() if line.strip()]
    return {d["cid"]: base64.b64decode(d["payload"]) for d in lines}


async def history(sc: LocalSidecarCluster, i: int, topic: str) -> dict[str, bytes]:
    page = await ok(sc, i, "GET", f"/v1/topics/{topic}/history", params={"limit": 50})
    assert page["complete"], page["missing"]
    return {e["cid"]: base64.b64decode(e["payload"]) for e in page["events"]}


async def retained(sc: LocalSidecarCluster, i: int, topic: str) -> int:
    status = await ok(sc, i, "GET", "/v1/status")
    return int(next(t for t in status["topics"] if t["root_cid"] == topic)["retained"])


async def test_large_events_reach_every_subscriber_byte_for_byte(
    sc: LocalSidecarCluster, topic: str
) -> None:
    payloads = {n: os.urandom(n) for n in (256 * 1024, MAX_PAYLOAD_SIZE)}
    cids: dict[int, str] = {}
    for n, data in payloads.items():
        res = await ok(
            sc,
            PUB,
            "POST",
            f"/v1/topics/{topic}/publish",
            json={"payload": base64.b64encode(data).decode(), "ack": "local"},
        )
        cids[n] = str(res["event"])

    for i in SUBS:

        async def arrived(i: int = i) -> bool:
            return set(cids.values()) <= set(await delivered(sc, i, topic))

        await wait_until(arrived, deadline=60, what=f"node{i} got both events", interval=0.3)
        got = await delivered(sc, i, topic)
        for n, cid in cids.items():
            assert got[cid] == payloads[n], f"node{i}: the {n}-byte payload differs"
        hist = await history(sc, i, topic)
        for n, cid in cids.items():
            assert hist[cid] == payloads[n], f"node{i}: history's {n}-byte payload differs"
    # Fetched from Kubo by a node: the event block itself.
    for n, cid in cids.items():
        event = await ok(sc, SUBS[-1], "GET", f"/v1/events/{cid}")
        assert base64.b64decode(event["payload"]) == payloads[n]


@pytest.mark.parametrize("size", [MAX_PAYLOAD_SIZE + 1, 2 * 1024 * 1024])
async def test_over_the_maximum_is_refused_and_nothing_is_written(
    sc: LocalSidecarCluster, topic: str, size: int
) -> None:
    before_history = await history(sc, PUB, topic)
    before_retained = await retained(sc, PUB, topic)
    before_delivered = {i: await delivered(sc, i, topic) for i in SUBS}
    r = await api(
        sc,
        PUB,
        "POST",
        f"/v1/topics/{topic}/publish",
        json={"payload": base64.b64encode(os.urandom(size)).decode(), "ack": "local"},
    )
    assert r.status_code == 413, r.text
    err = r.json()["error"]
    assert err["code"] == "payload_too_large"
    assert str(MAX_PAYLOAD_SIZE) in err["message"] and "512 KiB" in err["message"]
    # A message that would have been published had time to arrive by now.
    await ok(sc, PUB, "POST", f"/v1/topics/{topic}/publish", json={"text": "after"})
    for i in SUBS:

        async def marker(i: int = i) -> bool:
            return b"after" in (await delivered(sc, i, topic)).values()

        await wait_until(marker, deadline=60, what=f"node{i} got the marker", interval=0.3)
    after_history = await history(sc, PUB, topic)
    added = set(after_history) - set(before_history)
    assert [after_history[c] for c in added] == [b"after"]
    assert await retained(sc, PUB, topic) == before_retained + 1
    for i in SUBS:
        new = set(await delivered(sc, i, topic)) - set(before_delivered[i])
        assert new == added, f"node{i} delivered something else"


async def test_cli_refuses_over_the_maximum_in_one_line(
    sc: LocalSidecarCluster, topic: str
) -> None:
    cli = Path(sys.executable).with_name("pulsarcast")
    with anyio.fail_after(60):
        proc = await anyio.run_process(
            [str(cli), "--api", sc.sidecars[PUB].api_url, "pub", "--raw", topic, "-"],
            input=os.urandom(MAX_PAYLOAD_SIZE + 1),
            check=False,
        )
    assert proc.returncode != 0
    lines = proc.stderr.decode().strip().splitlines()
    assert lines == [
        f"Error: payload over the limit of {MAX_PAYLOAD_SIZE} bytes (512 KiB) (payload_too_large)"
    ], proc.stderr
