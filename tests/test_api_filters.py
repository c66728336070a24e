"""Attributes and filters through the HTTP API (issue 15), against a real
:class:`sidecar.Driver` with the in-process fake Kubo of tests/test_api_fake.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_api_fake import Sidecar, _error, _topic, sc

__all__ = ["sc"]  # the fixture, imported for the tests below

pytestmark = pytest.mark.anyio


async def _publish(sc: Sidecar, topic: str, text: str, attrs: dict[str, Any] | None) -> str:
    body: dict[str, Any] = {"text": text}
    if attrs is not None:
        body["attributes"] = attrs
    r = await sc.api.post(f"/v1/topics/{topic}/publish", json=body)
    assert r.status_code == 200, r.text
    cid: str = r.json()["event"]
    return cid


async def test_attributes_are_published_and_read_back(sc: Sidecar) -> None:
    topic = await _topic(sc)
    attrs = {"ups": 12, "downs": 0, "ratio": 0.25, "user": "alice"}
    cid = await _publish(sc, topic, "post", attrs)
    plain = await _publish(sc, topic, "plain", None)
    ev = (await sc.api.get(f"/v1/events/{cid}")).json()
    assert ev["attributes"] == attrs and ev["protocol_version"] == "2.1.1"
    ev = (await sc.api.get(f"/v1/events/{plain}")).json()
    assert ev["attributes"] == {} and ev["protocol_version"] == "2.1.0"
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
    topic = await _topic(sc)
    r = await sc.api.post(f"/v1/topics/{topic}/publish", json={"text": "x", "attributes": attrs})
    assert says in _error(r, 400, "bad_request")
    h = (await sc.api.get(f"/v1/topics/{topic}/history")).json()
    assert h["events"] == []  # nothing published


async def test_nan_in_the_json_body_is_refused(sc: Sidecar) -> None:
    topic = await _topic(sc)
    body = b'{"text": "x", "attributes": {"ups": NaN}}'
    r = await sc.api.post(
        f"/v1/topics/{topic}/publish", content=body, headers={"content-type": "application/json"}
    )
    assert "not finite" in _error(r, 400, "bad_request")
