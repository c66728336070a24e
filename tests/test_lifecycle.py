"""``async with`` of the closed and the started-and-stopped objects (``_lifecycle``)."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from pulsarcast_ipfs._lifecycle import AsyncClosing, AsyncService

pytestmark = pytest.mark.anyio


class Closing(AsyncClosing):
    def __init__(self) -> None:
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


class Service(AsyncService):
    def __init__(self) -> None:
        self.log: list[str] = []

    async def start(self) -> None:
        self.log.append("start")

    async def stop(self) -> None:
        await anyio.lowlevel.checkpoint()  # a cancelled scope would raise here
        self.log.append("stop")


async def test_closing_gives_itself_and_closes_once_also_on_an_error() -> None:
    c = Closing()
    async with c as got:
        assert got is c and c.closed == 0
    assert c.closed == 1
    with pytest.raises(RuntimeError):
        async with Closing() as c2:
            raise RuntimeError
    assert c2.closed == 1


async def test_a_service_is_stopped_even_when_its_block_is_cancelled() -> None:
    s = Service()
    with anyio.CancelScope() as scope:
        async with s:
            assert s.log == ["start"]
            scope.cancel()
            await anyio.sleep(1)
    assert s.log == ["start", "stop"]
