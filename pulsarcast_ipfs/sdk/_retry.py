"""Reconnect policy of the delivery stream, shared by both clients."""

from __future__ import annotations

import httpx

from pulsarcast_ipfs.sdk._errors import SidecarUnavailable
from pulsarcast_ipfs.sdk._types import ClientConfig

__all__ = ["Reconnects", "describe"]

MAX_DELAY = 5.0
STABLE = 10.0  # a connection that lasted this long was not a failed attempt


def _refused(exc: BaseException) -> bool:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ConnectionRefusedError) or "refused" in str(cur).lower():
            return True
        if isinstance(cur, BaseExceptionGroup):
            return any(_refused(e) for e in cur.exceptions)
        cur = cur.__cause__ or cur.__context__
    return False


def describe(exc: BaseException, config: ClientConfig) -> str:
    """A short reason for :class:`SidecarUnavailable`."""
    if isinstance(exc, httpx.ConnectError):
        return "connection refused" if _refused(exc) else f"cannot connect: {exc}"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {config.timeout:g} s"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"connection dropped: {exc}"
    return str(exc) or type(exc).__name__


class Reconnects:
    """Counts failed stream attempts in a row; says how long to wait or gives up."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.failures = 0

    def delivered(self) -> None:
        self.failures = 0

    def failed(self, exc: BaseException | None, lasted: float) -> float:
        """Record a dropped (``exc``) or ended stream; the delay before the next try.

        Raises :class:`SidecarUnavailable` once ``reconnect_attempts`` tries in a row
        have failed.
        """
        if lasted >= STABLE:
            self.failures = 0
        self.failures += 1
        if self.failures > self.config.reconnect_attempts:
            reason = describe(exc, self.config) if exc is not None else "the stream kept ending"
            err = SidecarUnavailable(
                self.config.api, f"{reason}; gave up after {self.failures} tries"
            )
            raise err from exc
        return min(self.config.reconnect_delay * 2.0 ** (self.failures - 1), MAX_DELAY)
