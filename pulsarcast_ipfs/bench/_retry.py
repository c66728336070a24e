"""Calls of the runner that are tried again: a publish that never reached its node, a
subscription that timed out (both kinds of system).

On an overloaded machine (100 nodes: 200 processes on 2 cores) a publish call to a
node's local API sometimes cannot even connect within the client's connect timeout
(docs/benchmark-history.md, 100 nodes: 37 of 200 calls to Kubo's ``pubsub/pub`` and 46 of 200
to the sidecar's API, all ``ConnectTimeout``). Nothing was sent then, so the node
cannot have published: trying again publishes the event at most once, as an
application would. Any other failure of a publish (refused, no answer after
sending) is not retried — the request may have arrived — and is counted as a
failed publish call. The latency of a retried event still counts from its
``created`` time, before the first try.

A subscription is idempotent (subscribing again to the same topic with the same
filter changes nothing), so one that timed out — the sidecar's fetch of the
topic's descriptor from IPFS (HTTP 504), or no answer at all — is tried again too
(a 100-node run stopped on one such 504 before publishing).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import httpx

__all__ = [
    "TRIES",
    "never_sent",
    "subscription_timed_out",
    "with_connect_retries",
    "with_retries",
]

TRIES: Final = 3
"""Tries of one call that is retried (a publish whose connection could not be made,
a subscription that timed out)."""

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


def subscription_timed_out(exc: BaseException) -> str | None:
    """The reason a subscription failed, when it timed out (HTTP 504, or no answer
    from the sidecar): it may be tried again; else None."""
    from pulsarcast_ipfs.sdk import SidecarUnavailable, Timeout

    if isinstance(exc, Timeout | SidecarUnavailable):
        return type(exc).__name__
    return None


async def with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    retry_on: Callable[[BaseException], str | None],
    retried: Callable[[str], None],
    tries: int = TRIES,
) -> T:
    """``await call()``, again (at most ``tries`` in all) while it fails with an error
    ``retry_on`` names a reason for; ``retried(reason)`` for each retry. The last
    error, or any other, is raised."""
    for attempt in range(1, tries + 1):
        try:
            return await call()
        except Exception as exc:
            reason = retry_on(exc)
            if reason is None or attempt == tries:
                raise
            retried(reason)
    raise AssertionError("unreachable")  # pragma: no cover


async def with_connect_retries(
    call: Callable[[], Awaitable[T]],
    *,
    retried: Callable[[str], None],
    tries: int = TRIES,
) -> T:
    """:func:`with_retries` for a call that may be tried again only when nothing was
    sent (:func:`never_sent`): a publish."""
    return await with_retries(call, retry_on=never_sent, retried=retried, tries=tries)
