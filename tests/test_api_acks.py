"""Publish at acknowledgement levels through the HTTP API, on one sidecar with the
in-process fake Kubo (no other node: nobody can hold an event): bad levels, the
timeout's answer, the persisted outbox across a restart, idempotency keys
(docs/http-api.md "Publish"). The real-cluster side: tests/test_acks_cluster.py."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from pulsarcast_ipfs.core import cid_from_str
from pulsarcast_ipfs.core.testing import make_signers
from pulsarcast_ipfs.testing import FakeKubo, Sidecar, sidecar_at
from sidecar._outbox import OUTBOX_FILE

pytestmark = pytest.mark.anyio


def _error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err: dict[str, Any] = r.json()["error"]
    assert err["code"] == code, err
    assert err["message"] and "\n" not in err["message"]
    return err


async def _topic(sc: Sidecar, name: str = "acks") -> str:
    r = await sc.api.post("/v1/topics", json={"name": name})
    assert r.status_code == 201, r.text
    cid: str = r.json()["cid"]
    r = await sc.api.post(f"/v1/topics/{cid}/subscribe")
    assert r.status_code == 200, r.text
    return cid


def _outbox_lines(state_dir: Path) -> list[dict[str, Any]]:
    path = state_dir / OUTBOX_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"ack": 0}, "ack must be"),
        ({"ack": -1}, "ack must be"),
        ({"ack": "abc"}, "ack must be"),
        ({"ack": 65}, "ack must be"),
        ({"ack": 10**12}, "ack must be"),
        ({"ack": "1000"}, "ack must be"),
        ({"ack": True}, "ack must be"),
        ({"ack": 1.5}, "ack must be"),
        ({"ack": None}, "ack must be"),
        ({"ack_timeout": 0}, "ack_timeout"),
        ({"ack_timeout": -3}, "ack_timeout"),
        ({"ack_timeout": 301}, "ack_timeout"),
        ({"ack_timeout": "5"}, "ack_timeout"),
        ({"idempotency_key": ""}, "idempotency key"),
        ({"idempotency_key": "x" * 201}, "idempotency key"),
        ({"idempotency_key": "a\nb"}, "idempotency key"),
        ({"idempotency_key": 7}, "idempotency key"),
    ],
)
async def test_bad_levels_timeouts_and_keys_get_a_clear_400(
    sc: Sidecar, body: dict[str, Any], says: str
) -> None:
    topic = await _topic(sc)
    r = await sc.api.post(f"/v1/topics/{topic}/publish", json={"text": "x", **body})
    assert says in _error(r, 400, "bad_request")["message"]
    # nothing was published, nothing waits
    assert (await sc.api.get(f"/v1/topics/{topic}/history")).json()["events"] == []
    assert (await sc.api.get("/v1/status")).json()["outbox"] == []


async def test_header_and_field_keys_must_agree(sc: Sidecar) -> None:
    topic = await _topic(sc)
    r = await sc.api.post(
        f"/v1/topics/{topic}/publish",
        json={"text": "x", "ack": "local", "idempotency_key": "a"},
        headers={"Idempotency-Key": "b"},
    )
    assert "differ" in _error(r, 400, "bad_request")["message"]


async def test_ack_local_answers_at_once_without_the_outbox(sc: Sidecar) -> None:
    topic = await _topic(sc)
    r = await sc.api.post(f"/v1/topics/{topic}/publish", json={"text": "x", "ack": "local"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ack"] == "local" and body["holders"] == [] and body["repeated"] is False
    assert (await sc.api.get("/v1/status")).json()["outbox"] == []


async def test_default_level_1_with_no_other_node_times_out_and_keeps_the_event(
    sc: Sidecar,
) -> None:
    topic = await _topic(sc)
    t0 = time.monotonic()
    r = await sc.api.post(f"/v1/topics/{topic}/publish", json={"text": "x", "ack_timeout": 0.5})
    waited = time.monotonic() - t0
    err = _error(r, 504, "not_acknowledged")
    assert err["holders"] == [] and err["ack"] == 1
    assert 0.5 <= waited < 5
    ev = err["event"]
    # The event exists (delivered here, in the history) and waits in the outbox.
    hist = (await sc.api.get(f"/v1/topics/{topic}/history")).json()["events"]
    assert [e["cid"] for e in hist] == [ev]
    assert (await sc.api.get("/v1/status")).json()["outbox"] == [ev]
    lines = _outbox_lines(sc.state_dir)
    assert [x.get("add") for x in lines] == [ev]
    assert sc.driver.node.outbox[cid_from_str(ev)] == (1, ())


async def test_the_outbox_survives_a_restart_and_is_offered_again(tmp_path: Path) -> None:
    kubo = FakeKubo(make_signers(1, seed=3)[0])
    async with sidecar_at(tmp_path, kubo) as sc:
        topic = await _topic(sc)
        r = await sc.api.post(
            f"/v1/topics/{topic}/publish",
            json={"text": "x", "ack": 2, "ack_timeout": 0.2, "idempotency_key": "k1"},
        )
        ev = _error(r, 504, "not_acknowledged")["event"]
    # A restart on the same state directory (and Kubo): the event waits again.
    async with sidecar_at(tmp_path, kubo) as sc:
        cid = cid_from_str(ev)
        for _ in range(100):
            if cid in sc.driver.node.outbox:
                break
            await anyio.sleep(0.05)
        assert sc.driver.node.outbox[cid] == (2, ())
        assert (await sc.api.get("/v1/status")).json()["outbox"] == [ev]
        # The key is remembered: a retry makes no second event.
        r = await sc.api.post(
            f"/v1/topics/{topic}/publish",
            json={"text": "x", "ack": 2, "ack_timeout": 0.2, "idempotency_key": "k1"},
        )
        again = _error(r, 504, "not_acknowledged")
        assert again["event"] == ev
        hist = (await sc.api.get(f"/v1/topics/{topic}/history")).json()["events"]
        assert [e["cid"] for e in hist] == [ev]
    # The file was compacted at the start: one line for the one waiting event.
    assert [x.get("add") for x in _outbox_lines(tmp_path)] == [ev]


async def test_an_idempotent_retry_makes_no_second_event(sc: Sidecar) -> None:
    topic = await _topic(sc)
    url = f"/v1/topics/{topic}/publish"
    first = await sc.api.post(url, json={"text": "x", "ack": "local", "idempotency_key": "k"})
    assert first.status_code == 200, first.text
    second = await sc.api.post(
        url, json={"text": "x", "ack": "local"}, headers={"Idempotency-Key": "k"}
    )
    assert second.status_code == 200, second.text
    assert second.json()["event"] == first.json()["event"]
    assert second.json()["repeated"] is True and first.json()["repeated"] is False
    other = await sc.api.post(url, json={"text": "x", "ack": "local", "idempotency_key": "k2"})
    assert other.json()["event"] != first.json()["event"]
    hist = (await sc.api.get(f"/v1/topics/{topic}/history")).json()["events"]
    assert len(hist) == 2
