"""A publish call is tried again only when nothing was sent (bench/_retry.py)."""

from __future__ import annotations

import socket

import anyio
import httpx
import pytest

from pulsarcast_ipfs.bench._retry import (
    never_sent,
    subscription_timed_out,
    with_connect_retries,
    with_retries,
)
from pulsarcast_ipfs.kubo import KuboError
from pulsarcast_ipfs.kubo._errors import map_transport_errors


def _failing(errors: list[BaseException], result: str = "ok"):  # type: ignore[no-untyped-def]
    calls = {"n": 0}

    async def call() -> str:
        calls["n"] += 1
        if errors:
            raise errors.pop(0)
        return result

    return call, calls


def _kubo(exc: httpx.HTTPError) -> KuboError:
    """What the Kubo client raises for ``exc`` (its own translation)."""
    try:
        with map_transport_errors("pubsub/pub"):
            raise exc
    except KuboError as kubo_exc:
        return kubo_exc
    raise AssertionError("not translated")


def test_connect_failures_are_tried_again_until_one_gets_through() -> None:
    req = httpx.Request("POST", "http://127.0.0.1:1/")
    call, calls = _failing([httpx.ConnectTimeout("t", request=req), httpx.ConnectError("e")])
    retried: list[str] = []
    assert anyio.run(lambda: with_connect_retries(call, retried=retried.append)) == "ok"
    assert calls["n"] == 3 and retried == ["ConnectTimeout", "ConnectError"]


def test_the_last_connect_failure_is_raised() -> None:
    call, calls = _failing([httpx.ConnectError("e") for _ in range(5)])
    retried: list[str] = []
    with pytest.raises(httpx.ConnectError):
        anyio.run(lambda: with_connect_retries(call, retried=retried.append, tries=3))
    assert calls["n"] == 3 and len(retried) == 2


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ReadTimeout("sent, no answer"),
        httpx.ReadError("reset after sending"),
        httpx.RemoteProtocolError("closed"),
        _kubo(httpx.ReadTimeout("sent, no answer")),
        ValueError("anything else"),
    ],
)
def test_a_call_that_may_have_arrived_is_not_retried(exc: Exception) -> None:
    call, calls = _failing([exc])
    retried: list[str] = []
    with pytest.raises(type(exc)):
        anyio.run(lambda: with_connect_retries(call, retried=retried.append))
    assert calls["n"] == 1 and retried == []


def test_the_kubo_clients_connect_failures_are_recognised() -> None:
    assert never_sent(_kubo(httpx.ConnectTimeout("t"))) == "ConnectTimeout"
    assert never_sent(_kubo(httpx.ConnectError("refused"))) == "ConnectError"
    assert never_sent(_kubo(httpx.ReadError("reset"))) is None


def test_a_real_refused_connection_is_never_sent() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there

    async def post() -> httpx.Response:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await client.post(f"http://127.0.0.1:{port}/v1/x", json={})

    retried: list[str] = []
    with pytest.raises(httpx.ConnectError):
        anyio.run(lambda: with_connect_retries(post, retried=retried.append))
    assert retried == ["ConnectError", "ConnectError"]


def test_a_subscription_that_timed_out_is_tried_again() -> None:
    from pulsarcast_ipfs.sdk import BadRequest, SidecarUnavailable, Timeout

    assert subscription_timed_out(Timeout(504, "timeout", "fetching took too long")) == "Timeout"
    assert (
        subscription_timed_out(SidecarUnavailable("http://127.0.0.1:5050", "no answer"))
        == "SidecarUnavailable"
    )
    assert subscription_timed_out(BadRequest(400, "bad_request", "bad filter")) is None
    call, calls = _failing([Timeout(504, "timeout", "slow")])
    retried: list[str] = []
    got = anyio.run(
        lambda: with_retries(call, retry_on=subscription_timed_out, retried=retried.append)
    )
    assert got == "ok" and calls["n"] == 2 and retried == ["Timeout"]
