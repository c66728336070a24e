"""Waiting for a condition on real daemons, with a deadline and a clear failure."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

__all__ = ["wait_until"]


async def wait_until(
    predicate: Callable[[], Awaitable[bool]],
    *,
    deadline: float,
    what: str,
    interval: float = 0.05,
) -> None:
    """Poll ``predicate`` every ``interval`` s until it is true; ``TimeoutError`` after
    ``deadline`` s naming ``what`` was awaited. For integration tests against real
    Kubo daemons, whose state changes on their own clock."""
    with anyio.move_on_after(deadline) as scope:
        while not await predicate():  # noqa: ASYNC110 - polling another process
            await anyio.sleep(interval)
    if scope.cancelled_caught:
        raise TimeoutError(f"gave up after {deadline} s waiting for {what}")
