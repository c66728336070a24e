"""Attributes and filters through the HTTP API, against a real
:class:`sidecar.Driver` with the in-process fakes of :func:`pulsarcast_ipfs.testing.sidecar_at`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from pulsarcast_ipfs.bench._systems import parse_forward_counts
from pulsarcast_ipfs.core.testing import make_signers
from pulsarcast_ipfs.testing import (
    FakeKubo,
    Scrape,
    Sidecar,
    create_topic,
    expect_error,
    sidecar_at,
)

pytestmark = pytest.mark.anyio


async def _publish(sc: Sidecar, topic: str, text: str, attrs: dict[str, Any] | None) -> str:
    body: dict[str, Any] = {"ack": "local", "text": text}
    if attrs is not None:
        body["attributes"] = attrs
    r = await sc.api.post(f"/v1/topics/{topic}/publish", json=body)
    assert r.status_code == 200, r.text
    cid: str = r.json()["event"]
    return cid


async def test_attributes_are_published_and_read_back(sc: Sidecar) -> None:
    topic = await create_topic(sc)
    attrs = {"ups": 12, "downs": 0, "ratio": 0.25, "user": "alice"}
    cid = await _publish(sc, topic, "post", attrs)
    plain = await _publish(sc, topic, "plain", None)
    ev = (await sc.api.get(f"/v1/events/{cid}")).json()
    # own events: the delegated key, one signature, 2.3.x (x = 1: attributes)
    assert ev["attributes"] == attrs and ev["protocol_version"] == "2.3.1"
    ev = (await sc.api.get(f"/v1/events/{plain}")).json()
    assert ev["attributes"] == {} and ev["protocol_version"] == "2.3.0"
    lines = (await sc.api.get("/v1/deliveries", params={"after": 0, "follow": "false"})).text
    got = {d["cid"]: d["attributes"] for d in map(json.loads, lines.split()) if d}
    assert got == {cid: attrs, plain: {}}
    h = (await sc.api.get(f"/v1/topics/{topic}/history", params={"order": "oldest"})).json()
    assert [e["attributes"] for e in h["events"]] == [attrs, {}]


@pytest.mark.parametrize(
    ("attrs", "says"),
    [
        ([["ups", 1]], "attributes must be an object"),
        ("ups=1", "attributes must be an object"),
        ({"ups": True}, "a bool is not a number"),
        ({"ups": None}, "a string or a finite number"),
        ({"ups": {"n": 1}}, "a string or a finite number"),
        ({"ups": 2**60}, "2**53"),
        ({"bad-name": 1}, "attribute name 'bad-name'"),
        ({"between": 1}, "keyword"),
        ({f"a{i}": i for i in range(17)}, "at most 16 attributes"),
        ({"user": "x" * 257}, "longer than 256"),
    ],
)
async def test_bad_attributes_are_400_saying_why(sc: Sidecar, attrs: object, says: str) -> None:
    topic = await create_topic(sc)
    r = await sc.api.post(
        f"/v1/topics/{topic}/publish", json={"ack": "local", "text": "x", "attributes": attrs}
    )
    assert says in expect_error(r, 400, "bad_request")
    h = (await sc.api.get(f"/v1/topics/{topic}/history")).json()
    assert h["events"] == []  # nothing published


async def test_nan_in_the_json_body_is_refused(sc: Sidecar) -> None:
    topic = await create_topic(sc)
    body = b'{"text": "x", "attributes": {"ups": NaN}}'
    r = await sc.api.post(
        f"/v1/topics/{topic}/publish", content=body, headers={"content-type": "application/json"}
    )
    assert "not finite" in expect_error(r, 400, "bad_request")


# -- filters on subscriptions ---------------------------------------------------------------


REDDIT = [
    ({"ups": 12, "controversiality": 1, "user": "alice"}, True),
    ({"ups": 3, "controversiality": 1, "user": "bob"}, False),
    (None, False),
    ({"ups": 10, "controversiality": 1}, True),
    ({"ups": 50, "controversiality": 0}, False),
    ({"ups": "12", "controversiality": 1}, False),  # a string is no number
    ({"ups": 99.5, "controversiality": 1.0}, True),
]
WHERE = "ups >= 10 and controversiality = 1"


async def _deliveries(sc: Sidecar, after: int = 0) -> list[dict[str, Any]]:
    r = await sc.api.get("/v1/deliveries", params={"after": after, "follow": "false"})
    return [json.loads(x) for x in r.text.splitlines() if x.strip()]


async def test_a_filtered_subscription_delivers_exactly_the_matches_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    kubo = FakeKubo(make_signers(1, seed=3)[0])
    async with sidecar_at(tmp_path, kubo) as sc:
        topic = await create_topic(sc)
        r = await sc.api.post(f"/v1/topics/{topic}/subscribe", json={"filter": WHERE})
        canonical = "controversiality = 1 and ups >= 10"
        assert r.json() == {
            "topic": topic,
            "subscribed": True,
            "fast": False,
            "filter": canonical,
        }
        sent = [(await _publish(sc, topic, f"m{i}", a), ok) for i, (a, ok) in enumerate(REDDIT)]
        assert [d["cid"] for d in await _deliveries(sc)] == [c for c, ok in sent if ok]
        st = (await sc.api.get("/v1/status")).json()
        assert st["topics"][0]["filter"] == canonical
        metrics = (await sc.api.get("/metrics")).text
        scrape = Scrape.parse(metrics)
        assert scrape.value("pulsarcast_filtered_subscriptions") == 1
        assert scrape.family("pulsarcast_forwards_false_positive_total").type == "counter"
        assert scrape.value("pulsarcast_forwards_false_positive_total") == 0
        # what the benchmark reads from every sidecar (forwards.json)
        assert parse_forward_counts(metrics) == {"down": 0, "pruned": 0, "false_positive": 0}
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["filters"] == {topic: canonical}
    async with sidecar_at(tmp_path, kubo) as sc:  # a restart: the filter is kept
        st = (await sc.api.get("/v1/status")).json()
        for _ in range(200):
            if st["topics"] and st["topics"][0]["subscribed"]:
                break
            await anyio.sleep(0.02)
            st = (await sc.api.get("/v1/status")).json()
        assert st["topics"][0]["filter"] == canonical
        last = (await _deliveries(sc))[-1]["seq"]
        more = [(await _publish(sc, topic, f"n{i}", a), ok) for i, (a, ok) in enumerate(REDDIT)]
        assert [d["cid"] for d in await _deliveries(sc, last)] == [c for c, ok in more if ok]
        # subscribing again without a filter removes it
        r = await sc.api.post(f"/v1/topics/{topic}/subscribe")
        assert r.json()["filter"] is None
        cid = await _publish(sc, topic, "plain", None)
        assert (await _deliveries(sc))[-1]["cid"] == cid
    assert json.loads((tmp_path / "state.json").read_text())["filters"] == {}


@pytest.mark.parametrize(
    ("text", "position", "expected"),
    [
        ("ups >=", 6, "a value"),
        ("ups >= 10 or x = 1", 10, "'and' or the end"),
        ("user = 'alice", 13, "a closing '"),
        ("ups in [1, 'a']", 11, "same kind"),
    ],
)
async def test_a_malformed_filter_is_a_400_with_position_and_expected(
    sc: Sidecar, text: str, position: int, expected: str
) -> None:
    topic = await create_topic(sc)
    r = await sc.api.post(f"/v1/topics/{topic}/subscribe", json={"filter": text})
    message = expect_error(r, 400, "bad_request")
    err = r.json()["error"]
    assert err["position"] == position and expected in err["expected"]
    assert f"at position {position}" in message
    r = await sc.api.get(f"/v1/topics/{topic}/history", params={"where": text})
    assert expect_error(r, 400, "bad_request") == message
    assert r.json()["error"]["position"] == position
    r = await sc.api.post(f"/v1/topics/{topic}/subscribe", json={"filter": 5})
    assert "filter must be a string" in expect_error(r, 400, "bad_request")
    assert json.loads((sc.state_dir / "state.json").read_text()).get("filters", {}) == {}


async def test_filtered_history_pages_skip_the_others(sc: Sidecar) -> None:
    topic = await create_topic(sc)
    sent = [(await _publish(sc, topic, f"m{i}", a), ok) for i, (a, ok) in enumerate(REDDIT * 3)]
    wanted = [c for c, ok in sent if ok]
    for order, expect in (("oldest", wanted), ("newest", wanted[::-1])):
        got: list[str] = []
        params: dict[str, Any] = {"where": WHERE, "limit": 2, "order": order}
        for _ in range(20):
            h = (await sc.api.get(f"/v1/topics/{topic}/history", params=params)).json()
            assert len(h["events"]) <= 2
            got += [e["cid"] for e in h["events"]]
            if h["next"] is None:
                break
            params["after"] = h["next"]
        assert got == expect, order
    unfiltered = (await sc.api.get(f"/v1/topics/{topic}/history", params={"limit": 100})).json()
    assert len(unfiltered["events"]) == len(sent)
