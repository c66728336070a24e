"""The API's uvicorn server without its ten wake-ups a second (``sidecar._api._Server``):
it serves, renews its ``Date`` header on each tick, ticks once a ``tick`` and stops
as soon as ``should_exit`` is set. No Kubo: a bare ASGI app on loopback."""

from __future__ import annotations

import socket

import anyio
import httpx
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from pulsarcast_ipfs.testing import wait_until
from sidecar._api import _Server

pytestmark = pytest.mark.anyio


async def _hello(scope: Scope, receive: Receive, send: Send) -> None:
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hello"})


def _server(tick: float) -> tuple[_Server, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    config = uvicorn.Config(_hello, host="127.0.0.1", port=port, lifespan="off", log_level="error")
    server = _Server(config)
    server.tick = tick
    return server, port


async def test_serves_ticks_seldom_and_stops_at_once() -> None:
    server, port = _server(tick=0.2)
    ticks = 0
    on_tick = server.on_tick

    async def counting(counter: int) -> bool:
        nonlocal ticks
        ticks += 1
        assert counter % 10 == 0  # every tick renews the Date header
        return await on_tick(counter)

    server.on_tick = counting  # type: ignore[method-assign]
    with anyio.fail_after(20):  # a stop that waited for its 60 s tick fails here
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            await wait_until(lambda: server.started, deadline=10, what="the server")
            async with httpx.AsyncClient(trust_env=False) as client:
                r = await client.get(f"http://127.0.0.1:{port}/")
            assert r.status_code == 200 and r.text == "hello" and r.headers["date"]
            before = ticks
            await anyio.sleep(1.0)
            # 1 s at 0.2 s a tick: about 5 (uvicorn's own loop: 10, at 0.1 s a tick)
            assert 2 <= ticks - before <= 7
            server.tick = 60.0
            await anyio.sleep(0.3)  # the loop is now inside a 60 s wait
            server.should_exit = True
            assert server.should_exit
        # leaving the task group waited for serve() to return


async def test_should_exit_before_serving() -> None:
    server, _ = _server(tick=60.0)
    server.should_exit = True
    server.should_exit = False  # cannot be unset: uvicorn never does
    assert server.should_exit
    with anyio.fail_after(20):
        await server.serve()  # returns after start-up, without a 60 s tick
