"""``async with`` for the objects that are closed (``aclose``) or started and stopped.

Clients, streams and clusters all enter and leave the same way; they inherit it
from here instead of writing ``__aenter__``/``__aexit__`` again each time.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

import anyio

__all__ = ["AsyncClosing", "AsyncService"]


class AsyncClosing:
    """``async with x:`` gives ``x`` and closes it at the end (:meth:`aclose`), also
    on an error. A subclass that must open something on entry overrides
    ``__aenter__``."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        raise NotImplementedError


class AsyncService(AsyncClosing):
    """``async with x:`` starts ``x`` (:meth:`start`) and stops it at the end
    (:meth:`stop`), shielded from cancellation so that no process is left behind;
    :meth:`aclose` is that shielded stop."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.stop()

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError
