"""One polling helper: wait for a condition with a deadline.

Polling is for state that changes on another clock (Kubo daemons, sidecar processes,
the block store's writer): where an event exists (``Driver.wait_for``, anyio events)
wait on it instead. The CLI's demo, the fault scenarios, the driver micro-benchmark
and the integration tests (``pulsarcast_ipfs.testing.wait_until``) all use this one.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

import anyio

__all__ = ["poll_until", "wait_until"]

Predicate = Callable[[], bool] | Callable[[], Awaitable[bool]]


async def _holds(predicate: Predicate) -> bool:
    value = predicate()
    if inspect.isawaitable(value):
        value = await value
    return bool(value)


async def poll_until(predicate: Predicate, *, deadline: float, interval: float = 0.05) -> bool:
    """Check ``predicate`` (sync or async) every ``interval`` s until it holds, at most
    ``deadline`` s; whether it held."""
    with anyio.move_on_after(deadline):
        while not await _holds(predicate):  # noqa: ASYNC110 - polling another process
            await anyio.sleep(interval)
        return True
    return False


async def wait_until(
    predicate: Predicate, *, deadline: float, what: str, interval: float = 0.05
) -> None:
    """:func:`poll_until`, raising ``TimeoutError`` naming ``what`` if it never held."""
    if not await poll_until(predicate, deadline=deadline, interval=interval):
        raise TimeoutError(f"gave up after {deadline} s waiting for {what}")
