"""Consumers through the HTTP API (docs/http-api.md "Consumers"), against a real
:class:`sidecar.Driver` with the in-process fakes of :func:`pulsarcast_ipfs.testing.sidecar_at`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pulsarcast_ipfs.core.testing import make_signers
from pulsarcast_ipfs.testing import (
    FakeKubo,
    Sidecar,
    create_topic,
    expect_error,
    sidecar_at,
    wait_until,
)

pytestmark = pytest.mark.anyio

POSTS = [
    ("a", {"ups": 3}),
    ("b", {"ups": 12, "user": "alice"}),
    ("c", {"user": "bob"}),
    ("d", {"ups": 40}),
    ("e", {}),
]


async def _publish_all(sc: Sidecar, topic: str) -> None:
    for text, attrs in POSTS:
        r = await sc.api.post(
            f"/v1/topics/{topic}/publish", json={"ack": "local", "text": text, "attributes": attrs}
        )
        assert r.status_code == 200, r.text


async def _open(sc: Sidecar, topic: str, **body: Any) -> dict[str, Any]:
    r = await sc.api.post(f"/v1/topics/{topic}/consumers", json=body)
    assert r.status_code in (200, 201), r.text
    doc: dict[str, Any] = r.json()
    return doc


async def _served(sc: Sidecar, consumer: str, **params: Any) -> list[str]:
    r = await sc.api.get(
        "/v1/deliveries", params={"consumer": consumer, "follow": "false", **params}
    )
    assert r.status_code == 200, r.text
    return [base64_text(json.loads(x)) for x in r.text.split("\n") if x.strip()]


def base64_text(delivery: dict[str, Any]) -> str:
    import base64

    return base64.b64decode(delivery["payload"]).decode()


async def _topic_status(sc: Sidecar, topic: str) -> dict[str, Any]:
    st = (await sc.api.get("/v1/status")).json()
    for t in st["topics"]:
        if topic in (t["cid"], t["root_cid"]):
            found: dict[str, Any] = t
            return found
    raise AssertionError(f"{topic} not in status")


async def test_two_consumers_get_their_own_matches_and_the_node_wants_the_union(
    sc: Sidecar,
) -> None:
    topic = await create_topic(sc)
    # the author's explicit subscription (made by create) goes: only consumers hold it
    r = await sc.api.post(f"/v1/topics/{topic}/unsubscribe")
    assert r.json()["subscribed"] is False
    hot = await _open(sc, topic, filter="ups >= 10")
    alice = await _open(sc, topic, filter="user in ['alice', 'bob']")
    assert hot["id"].startswith("anon-") and hot["filter"] == "ups >= 10" and not hot["durable"]
    st = await _topic_status(sc, topic)
    assert st["subscribed"] and not st["explicit"] and st["consumers"] == 2
    assert sorted(st["filters"]) == ["ups >= 10", 'user in ["alice", "bob"]']
    await _publish_all(sc, topic)
    assert await _served(sc, hot["id"]) == ["b", "d"]
    assert await _served(sc, alice["id"]) == ["b", "c"]
    # the node's own stream holds the union (what its consumers want), no more
    node = (await sc.api.get("/v1/deliveries", params={"after": 0, "follow": "false"})).text
    assert sorted(base64_text(json.loads(x)) for x in node.split()) == ["b", "c", "d"]
    # each consumer's cursor passed the whole log
    got = (await sc.api.get(f"/v1/consumers/{hot['id']}")).json()
    assert got["cursor"] == sc.driver.last_seq and got["streams"] == 0
    assert got["expires"] == pytest.approx(got["idle_since"] + 60.0)

    # a third joins unfiltered (the union is everything), then leaves
    third = await _open(sc, topic)
    st = await _topic_status(sc, topic)
    assert st["filters"] is None and st["filter"] is None and st["consumers"] == 3
    r = await sc.api.delete(f"/v1/consumers/{third['id']}")
    assert r.json() == {
        "id": third["id"],
        "closed": True,
        "topic": st["root_cid"],
        "subscribed": True,
    }
    st = await _topic_status(sc, topic)
    assert sorted(st["filters"]) == ["ups >= 10", 'user in ["alice", "bob"]']
    expect_error(
        await sc.api.get("/v1/deliveries", params={"consumer": third["id"]}), 404, "not_found"
    )

    # the last consumer gone, the node (not subscribed explicitly) leaves the topic
    await sc.api.delete(f"/v1/consumers/{hot['id']}")
    await sc.api.delete(f"/v1/consumers/{alice['id']}")
    st = await _topic_status(sc, topic)
    assert not st["subscribed"] and st["consumers"] == 0
    state = json.loads((sc.state_dir / "state.json").read_text())
    assert st["root_cid"] not in state["subscriptions"] and state["consumers"] == []


async def test_an_explicit_subscription_stays_when_its_consumers_go(sc: Sidecar) -> None:
    topic = await create_topic(sc)
    r = await sc.api.post(f"/v1/topics/{topic}/subscribe", json={"filter": "ups > 100"})
    assert r.status_code == 200, r.text
    c = await _open(sc, topic, filter="ups < 5")
    st = await _topic_status(sc, topic)
    assert st["explicit"] and sorted(st["filters"]) == ["ups < 5", "ups > 100"]
    await _publish_all(sc, topic)
    assert await _served(sc, c["id"]) == ["a"]
    await sc.api.delete(f"/v1/consumers/{c['id']}")
    st = await _topic_status(sc, topic)
    assert st["subscribed"] and st["filters"] == ["ups > 100"] and st["consumers"] == 0
    # unsubscribing explicitly while a consumer holds the topic keeps the node in it
    c = await _open(sc, topic, filter="ups < 5")
    r = await sc.api.post(f"/v1/topics/{topic}/unsubscribe")
    assert r.json()["subscribed"] is True and r.json()["consumers"] == 1
    st = await _topic_status(sc, topic)
    assert not st["explicit"] and st["filters"] == ["ups < 5"]


async def test_an_idle_consumer_is_closed_after_the_grace(sc: Sidecar) -> None:
    topic = await create_topic(sc)
    await sc.api.post(f"/v1/topics/{topic}/unsubscribe")
    c = await _open(sc, topic, filter="ups >= 10")
    now = sc.driver.clock()
    sc.driver.subs.expire(now + 59.0)
    assert (await sc.api.get(f"/v1/consumers/{c['id']}")).status_code == 200
    sc.driver.subs.expire(now + 61.0)
    expect_error(await sc.api.get(f"/v1/consumers/{c['id']}"), 404, "not_found")
    st = await _topic_status(sc, topic)
    assert not st["subscribed"]


async def test_the_sidecar_closes_an_idle_consumer_by_itself(tmp_path: Path) -> None:
    """The housekeeping loop (every 2 s) closes a consumer idle past its grace; one
    with an open stream stays."""
    kubo = FakeKubo(make_signers(1, seed=3)[0])
    async with sidecar_at(tmp_path, kubo, consumer_grace=0.5) as sc:
        topic = await create_topic(sc)
        await sc.api.post(f"/v1/topics/{topic}/unsubscribe")
        idle = await _open(sc, topic, filter="ups >= 10")
        busy = await _open(sc, topic, filter="ups < 10")
        busy_c = sc.driver.subs.registry.get(busy["id"])
        assert busy_c is not None
        sc.driver.subs.registry.attach(busy_c)  # as a stream does while it is open

        async def gone() -> bool:
            return (await sc.api.get(f"/v1/consumers/{idle['id']}")).status_code == 404

        await wait_until(gone, deadline=10, what="the idle consumer closed")
        assert (await sc.api.get(f"/v1/consumers/{busy['id']}")).status_code == 200
        st = await _topic_status(sc, topic)
        assert st["filters"] == ["ups < 10"] and st["consumers"] == 1
        sc.driver.subs.registry.detach(sc.driver.clock(), busy_c)

        async def left() -> bool:
            return not (await _topic_status(sc, topic))["subscribed"]

        await wait_until(left, deadline=10, what="the node leaving the topic")


async def test_a_named_consumer_resumes_from_its_cursor_after_a_restart(tmp_path: Path) -> None:
    kubo = FakeKubo(make_signers(1, seed=3)[0])
    async with sidecar_at(tmp_path, kubo) as first:
        topic = await create_topic(first)
        await first.api.post(f"/v1/topics/{topic}/unsubscribe")
        c = await _open(first, topic, name="reader", filter="ups >= 10")
        assert c["id"] == "reader" and c["durable"]
        await _publish_all(first, topic)
        assert await _served(first, "reader") == ["b", "d"]
        # published while the reader is away: kept for it
        r = await first.api.post(
            f"/v1/topics/{topic}/publish",
            json={"ack": "local", "text": "f", "attributes": {"ups": 99}},
        )
        assert r.status_code == 200
        await first.api.post(
            f"/v1/topics/{topic}/publish",
            json={"ack": "local", "text": "g", "attributes": {"ups": 1}},
        )
    async with sidecar_at(tmp_path, kubo) as second:
        got = (await second.api.get("/v1/consumers/reader")).json()
        assert got["filter"] == "ups >= 10"
        # reopened by name: its own cursor, not "only new ones"
        again = await _open(second, topic, name="reader", filter="ups >= 10")
        assert again["cursor"] == got["cursor"]
        assert await _served(second, "reader") == ["f"]
        assert await _served(second, "reader") == []


async def test_bad_consumer_requests_are_clear(sc: Sidecar) -> None:
    topic = await create_topic(sc)
    for body, says in [
        ({"name": "bad name"}, "bad consumer name"),
        ({"after": -1}, "after must be"),
        ({"fast": "yes"}, "fast must be"),
        ({"filter": "ups >="}, "expected a value"),
        ({"nope": 1}, "unknown field"),
    ]:
        r = await sc.api.post(f"/v1/topics/{topic}/consumers", json=body)
        assert says in expect_error(r, 400, "bad_request")
    other = await create_topic(sc, "other")
    await _open(sc, topic, name="n")
    assert "follows topic" in expect_error(
        await sc.api.post(f"/v1/topics/{other}/consumers", json={"name": "n"}), 409, "conflict"
    )
    expect_error(await sc.api.delete("/v1/consumers/nobody"), 404, "not_found")
    r = await sc.api.get("/v1/deliveries", params={"consumer": "n", "topic": topic})
    assert "not both" in expect_error(r, 400, "bad_request")
