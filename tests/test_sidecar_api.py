"""The HTTP API against a sidecar driver running in-process beside one real Kubo daemon:
validation and error answers of docs/http-api.md, delivery stream resume, metrics, auth."""

from __future__ import annotations

import base64
import functools
import json
import socket
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from pulsarcast_ipfs.cluster import ClusterConfig, LocalCluster
from pulsarcast_ipfs.core import MAX_PAYLOAD_SIZE, compute_cid
from pulsarcast_ipfs.testing import Scrape, wait_until
from sidecar import Driver, load_config, serve_api

pytestmark = [pytest.mark.kubo, pytest.mark.anyio]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
async def api(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[httpx.AsyncClient]:
    async with LocalCluster(config=ClusterConfig(nodes=1)) as cluster:
        cfg = load_config(
            env={},
            flags={
                "kubo_api": cluster[0].api_url,
                "api": f"127.0.0.1:{_port()}",
                "state_dir": str(tmp_path_factory.mktemp("sidecar")),
                "max_body": 1024 * 1024,
                "resource_interval": 0.5,
            },
        )
        driver = Driver(cfg)
        async with anyio.create_task_group() as tg:
            await tg.start(functools.partial(driver.run, services=[serve_api]))
            async with httpx.AsyncClient(
                base_url=f"http://{cfg.api}", trust_env=False, timeout=30
            ) as client:
                yield client
            driver.stop()


def err(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] == code and body["error"]["message"]


async def test_health_status_openapi(api: httpx.AsyncClient) -> None:
    assert (await api.get("/health")).json() == {"status": "ok", "kubo": "ok"}
    st = (await api.get("/v1/status")).json()
    assert st["peer_id"].startswith("12D3") and st["kubo_version"]
    assert (await api.get("/openapi.json")).json()["openapi"] == "3.1.0"
    err(await api.get("/v1/nothing"), 404, "not_found")


async def test_topic_validation(api: httpx.AsyncClient) -> None:
    err(await api.post("/v1/topics", content=b"{not json"), 400, "bad_request")
    err(await api.post("/v1/topics", json={"name": ""}), 400, "bad_request")
    err(await api.post("/v1/topics", json=["x"]), 400, "bad_request")
    r = await api.post(
        "/v1/topics", json={"name": "t", "allowed_publishers": {"enabled": True, "peers": ["nope"]}}
    )
    err(r, 400, "bad_request")
    assert "peer" in r.json()["error"]["message"]
    err(
        await api.post("/v1/topics", json={"name": "t", "event_linking": "RANDOM"}),
        400,
        "bad_request",
    )
    err(await api.get("/v1/topics/notacid"), 400, "bad_request")
    unknown = str(compute_cid(b"\xa1aa\x01"))  # a dag-cbor CID nobody has
    err(
        await api.post(f"/v1/topics/{unknown}/publish", json={"ack": "local", "text": "x"}),
        404,
        "unknown_topic",
    )
    err(await api.post(f"/v1/topics/{unknown}/unsubscribe"), 404, "unknown_topic")
    # Not known here and nobody announces it: looked up, then a clear 404.
    r = await api.get(f"/v1/topics/{unknown}/history")
    err(r, 404, "unknown_topic")
    assert "no node announces it" in r.json()["error"]["message"]


async def test_publish_validation_and_deliveries(api: httpx.AsyncClient) -> None:
    r = await api.post("/v1/topics", json={"name": "news"})
    assert r.status_code == 201, r.text
    topic = r.json()
    assert topic["root_cid"] == topic["cid"] and set(topic["sub_topics"]) == {"meta"}
    cid = topic["cid"]
    err(await api.post(f"/v1/topics/{cid}/publish", json={}), 400, "bad_request")
    err(
        await api.post(
            f"/v1/topics/{cid}/publish", json={"ack": "local", "text": "a", "payload": "YQ=="}
        ),
        400,
        "bad_request",
    )
    err(
        await api.post(f"/v1/topics/{cid}/publish", json={"ack": "local", "payload": "***"}),
        400,
        "bad_request",
    )
    big = base64.b64encode(b"x" * (MAX_PAYLOAD_SIZE + 1)).decode()
    err(
        await api.post(f"/v1/topics/{cid}/publish", json={"ack": "local", "payload": big}),
        413,
        "payload_too_large",
    )
    err(
        await api.post(f"/v1/topics/{cid}/publish", content=b"x" * (2 * 1024 * 1024)),
        413,
        "payload_too_large",
    )
    # LAST_SEEN topic: choosing a parent is refused.
    err(
        await api.post(
            f"/v1/topics/{cid}/publish", json={"ack": "local", "text": "a", "parent": cid}
        ),
        400,
        "bad_request",
    )
    # A live stream, then two publishes, then a resumed replay: no gap, no duplicate.
    seen: list[dict[str, object]] = []
    opened = anyio.Event()

    async def follow() -> None:
        async with api.stream("GET", "/v1/deliveries", params={"topic": cid}) as resp:
            assert resp.headers["content-type"].startswith("application/x-ndjson")
            opened.set()  # the sidecar listens before it answers: no delivery is missed
            async for line in resp.aiter_lines():
                if line.strip():
                    seen.append(json.loads(line))
                    if len(seen) == 2:
                        return

    events = []
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await opened.wait()
            for text in ("one", "two"):
                r = await api.post(f"/v1/topics/{cid}/publish", json={"ack": "local", "text": text})
                assert r.status_code == 200 and r.json()["status"] == "published", r.text
                events.append(r.json()["event"])
    assert [d["cid"] for d in seen] == events
    first_seq = int(seen[0]["seq"])  # type: ignore[call-overload]
    r = await api.get(
        "/v1/deliveries", params={"after": first_seq, "follow": "false", "topic": cid}
    )
    assert [json.loads(x)["cid"] for x in r.text.splitlines() if x.strip()] == events[1:]
    err(await api.get("/v1/deliveries", params={"after": "x"}), 400, "bad_request")
    ev = (await api.get(f"/v1/events/{events[1]}")).json()
    assert (ev["parents"], ev["clock"]) == ([events[0]], 1) and "parent" not in ev
    assert base64.b64decode(ev["payload"]) == b"two"
    assert (seen[0]["parents"], seen[0]["clock"]) == ([], 0)
    err(await api.get(f"/v1/events/{cid}"), 404, "unknown_event")
    metrics = Scrape.parse((await api.get("/metrics")).text)
    # two events and the topic on its meta topic
    assert metrics.value("pulsarcast_records_total", kind="event_published") == 3
    assert metrics.value("pulsarcast_deliveries_total") == 2
    await _history_pages_and_bad_queries(api, cid, events)

    def gauge(text: str, name: str) -> float:
        return Scrape.parse(text).value(name)

    async def announced() -> bool:
        # The topic and its meta topic, pinned and announced once each when they were
        # created (with fast-provide-root: Kubo's ``pinned`` strategy announces the
        # pin); subscribing to them on their author's node adds no second pin and no
        # ``provide/once``. Never one announcement per event.
        text = (await api.get("/metrics")).text
        tries = gauge(text, "pulsarcast_blocks_provided_total")
        tries += gauge(text, "pulsarcast_blocks_provide_failed_total")
        return (
            gauge(text, "pulsarcast_topics_announced_total") == 2
            and gauge(text, "pulsarcast_own_pins_added_total") >= 2
            and gauge(text, "pulsarcast_pins_added_total") == 0
            and tries == 0
        )

    await wait_until(announced, deadline=10, what="both topics announced")


async def _history_pages_and_bad_queries(
    api: httpx.AsyncClient, cid: str, events: list[str]
) -> None:
    """``GET /v1/topics/{cid}/history``: pages both ways, cursors, and 400s."""
    url = f"/v1/topics/{cid}/history"
    h = (await api.get(url, params={"limit": 1})).json()
    assert [e["cid"] for e in h["events"]] == [events[1]] and h["next"] == events[1]
    assert (h["complete"], h["missing"], h["heads"], h["retained"], h["order"]) == (
        True,
        [],
        [events[1]],
        2,
        "newest",
    )
    h = (await api.get(url, params={"limit": 1, "after": h["next"]})).json()
    assert [e["cid"] for e in h["events"]] == [events[0]] and h["next"] is None
    h = (await api.get(url, params={"limit": 1, "before": events[1]})).json()  # old name
    assert [e["cid"] for e in h["events"]] == [events[0]]
    h = (await api.get(url, params={"order": "oldest", "limit": 1})).json()
    assert [e["cid"] for e in h["events"]] == [events[0]] and h["next"] == events[0]
    assert h["order"] == "oldest"
    h = (await api.get(url, params={"order": "oldest", "after": events[0]})).json()
    assert [e["cid"] for e in h["events"]] == [events[1]] and h["next"] is None
    h = (await api.get(url, params={"order": "oldest"})).json()
    assert [e["clock"] for e in h["events"]] == [0, 1]
    other = (await api.post("/v1/topics", json={"name": "other"})).json()["cid"]
    other_ev = (
        await api.post(f"/v1/topics/{other}/publish", json={"ack": "local", "text": "x"})
    ).json()["event"]
    for params, fragment in [
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"order": "sideways"}, "order"),
        ({"order": "NEWEST"}, "order"),
        ({"after": "notacid"}, "cursor"),
        ({"after": events[0], "before": events[1]}, "not both"),
        ({"order": "oldest", "before": events[1]}, "after="),
        ({"after": cid}, "cursor"),  # a topic, not an event
        ({"after": other_ev}, "another topic"),
    ]:
        r = await api.get(url, params=params)
        err(r, 400, "bad_request")
        assert fragment in r.json()["error"]["message"], (params, r.text)


async def test_an_idle_connection_outlives_a_clients_keep_alive(api: httpx.AsyncClient) -> None:
    """A connection idle for httpx's whole keep-alive (5 s) is still served: the
    server gives connections up later than its clients (``KEEP_ALIVE``), so a pooled
    request never meets a connection the server is closing (the ReadError of one
    subscription in 762 on a saturated 100-node run)."""
    host, port = str(api.base_url.host), int(api.base_url.port or 80)
    request = f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    stream = await anyio.connect_tcp(host, port)
    async with stream:
        for wait in (5.5, 0):  # first longer than httpx's keepalive_expiry
            await stream.send(request)
            with anyio.fail_after(10):
                got = await stream.receive()
            assert got.startswith(b"HTTP/1.1 200"), got[:100]
            await anyio.sleep(wait)
