"""Waiting, before the first publication, until every node is ready to take part.

A Pulsarcast subscription answers once the sidecar knows the topic; the JOIN then
travels up the tree in the background (docs/sdk.md). The runner therefore waits,
after subscribing and before the first publication, until every node of the
schedule that subscribes to a topic or publishes in it reports, in its
``GET /v1/status``, that it has joined that topic's tree: a subscriber is
``subscribed`` with a parent, the topic's creator is its ``root``; a node standing
in for an unreachable root (``acting_root``) is not joined. Kubo's pubsub needs
no wait: a ``pubsub/sub`` that answered is ready.

The wait has a timeout (``BenchConfig.join_timeout``, ``--join-timeout``): past
it the run fails with an error naming every node and topic still waiting.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import anyio

from pulsarcast_ipfs.bench._config import BenchError

__all__ = ["JOIN_POLL_INTERVAL", "topic_waiting", "wait_until_ready"]

JOIN_POLL_INTERVAL: Final = 0.5
"""Seconds between two looks at every node's status while waiting."""

NAMED_IN_ERROR: Final = 20
"""How many waiting (node, topic) pairs the timeout error names (then ``+N more``)."""


def topic_waiting(status: Mapping[str, Any] | None, *, subscriber: bool) -> str | None:
    """Why one node is not yet ready in one topic, from its ``TopicStatus`` (the JSON
    of ``GET /v1/status``, ``None`` when the node does not list the topic); ``None``
    when it is ready. ``subscriber``: the schedule subscribes this node to the topic
    (else it only publishes in it, as the topic's creator)."""
    if status is None:
        return "not in the tree"
    if subscriber and not status.get("subscribed"):
        return f"{status.get('role')}, not subscribed"
    if status.get("acting_root"):
        return "acting root (the root is unreachable)"
    if status.get("parent") is None and status.get("role") != "root":
        return f"{status.get('role')}, no parent"
    return None


async def wait_until_ready(
    pending: Callable[[], Awaitable[Sequence[str]]],
    *,
    total: int,
    limit: float,
    progress: Callable[[int, int], None],
    interval: float = JOIN_POLL_INTERVAL,
) -> float:
    """Call ``pending`` (which lists what is still waiting, one text per node and
    topic, e.g. ``node4 in news (relay, no parent)``) until it lists nothing; return
    the seconds it took. ``progress(ready, total)`` is told after every look. Raises
    :class:`BenchError` naming what still waits when ``limit`` seconds have passed."""
    start = time.monotonic()
    while True:
        waiting = list(await pending())
        elapsed = time.monotonic() - start
        progress(max(0, total - len(waiting)), total)
        if not waiting:
            return elapsed
        if elapsed >= limit:
            named = "; ".join(waiting[:NAMED_IN_ERROR])
            more = len(waiting) - NAMED_IN_ERROR
            raise BenchError(
                f"{len(waiting)} of {total} subscriptions and publishers had not joined "
                f"their topic's tree after {limit:g} s (--join-timeout): {named}"
                + (f"; +{more} more" if more > 0 else "")
            )
        await anyio.sleep(min(interval, max(0.0, limit - elapsed)))
