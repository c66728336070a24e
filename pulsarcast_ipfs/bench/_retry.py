"""A publish call that never reached its node is tried again (both kinds of system).

On an overloaded machine (100 nodes: 200 processes on 2 cores) a publish call to a
node's local API sometimes cannot even connect within the client's connect timeout
(BENCHMARKS.md, 100 nodes: 37 of 200 calls to Kubo's ``pubsub/pub`` and 46 of 200
to the sidecar's API, all ``ConnectTimeout``). Nothing was sent then, so the node
cannot have published: trying again publishes the event at most once, as an
application would. Any other failure (refused, no answer after sending) is not
retried — the request may have arrived — and is counted as a failed publish call.
The latency of a retried event still counts from its ``created`` time, before the
first try.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import httpx

__all__ = ["PUBLISH_TRIES", "never_sent", "with_connect_retries"]

PUBLISH_TRIES: Final = 3
"""Tries of one publish call whose connection could not be made (nothing sent)."""

T = TypeVar("T")


def never_sent(exc: BaseException) -> str | None:
    """The reason a call failed before sending anything (its connection could not be
    made: ``ConnectTimeout``, ``ConnectError``), also when wrapped (a ``KuboError``
    raised from it); None for any other failure."""
    seen: BaseException | None = exc
    for _ in range(4):  # the error itself and a few causes deep
        if seen is None:
            return None
        if isinstance(seen, httpx.ConnectTimeout | httpx.ConnectError):
            return type(seen).__name__
        seen = seen.__cause__
    return None


async def with_connect_retries(
    call: Callable[[], Awaitable[T]],
    *,
    retried: Callable[[str], None],
    tries: int = PUBLISH_TRIES,
) -> T:
    """``await call()``, again (at most ``tries`` in all) while it fails before sending
    anything; ``retried(reason)`` for each retry. The last error, or any other,
    is raised."""
    for attempt in range(1, tries + 1):
        try:
            return await call()
        except Exception as exc:
            reason = never_sent(exc)
            if reason is None or attempt == tries:
                raise
            retried(reason)
    raise AssertionError("unreachable")  # pragma: no cover
