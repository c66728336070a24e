"""A real :class:`sidecar.Driver` and its HTTP API on the in-process fakes (no daemon).

:func:`sidecar_at` runs one on a state directory with a :class:`FakeKubo` and a
:class:`FakeTransport`, its API reached through ``httpx.ASGITransport``; :func:`create_topic`
and :func:`expect_error` are the two calls most API tests make on it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from pulsarcast_ipfs.testing._fakekubo import FAKE_KUBO_URL
from pulsarcast_ipfs.testing._fakenet import FakePeers, FakeTransport, running
from sidecar import Driver, SidecarConfig, build_app

__all__ = ["CLOCK_OFFSET", "Sidecar", "create_topic", "expect_error", "sidecar_at"]

CLOCK_OFFSET = 1_000_000.0
"""The driver's clock runs this far ahead of the machine's (it is injected)."""


@dataclass
class Sidecar:
    """A running driver, a client of its API, its fake Kubo and its state directory."""

    driver: Driver
    api: httpx.AsyncClient
    kubo: Any
    state_dir: Path


@asynccontextmanager
async def sidecar_at(state_dir: Path, kubo: Any, **options: Any) -> AsyncIterator[Sidecar]:
    """A sidecar on ``state_dir`` and the fake Kubo ``kubo`` (a restart reuses both);
    ``options``: more :class:`SidecarConfig` fields."""
    peers = FakePeers(kubo.signer.peer_id, kubo)
    config = SidecarConfig(
        kubo_api=FAKE_KUBO_URL, api="127.0.0.1:0", state_dir=state_dir, **options
    )
    driver = Driver(
        config,
        kubo=kubo.client(),
        transport_factory=functools.partial(FakeTransport, peers=peers),
        clock=lambda: time.time() + CLOCK_OFFSET,
    )
    api = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=build_app(driver)), base_url="http://sidecar"
    )
    async with api, running(driver):
        yield Sidecar(driver=driver, api=api, kubo=kubo, state_dir=state_dir)


def expect_error(r: httpx.Response, status: int, code: str) -> str:
    """Assert ``r`` is the API's error ``code`` with ``status`` and a message; the message."""
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] == code, body
    message: str = body["error"]["message"]
    assert message
    return message


async def create_topic(sc: Sidecar, name: str = "news", linking: str = "LAST_SEEN") -> str:
    """Create a topic through the API (asserting 201); its root CID."""
    r = await sc.api.post("/v1/topics", json={"name": name, "event_linking": linking})
    assert r.status_code == 201, r.text
    cid: str = r.json()["cid"]
    return cid
