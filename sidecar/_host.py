"""What a part of the sidecar may ask of the driver that composes it.

The driver (:mod:`._driver`) imports its parts; a part never imports the driver.
A part that feeds the core or waits on it takes a :class:`NodeHost` (or a
``Protocol`` of its own that extends it with the little more it needs), which the
driver satisfies structurally. So the arrows run one way and a part can be driven
by a stand-in in a unit test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from pulsarcast_ipfs.core import PulsarcastNode
from pulsarcast_ipfs.core._cid import CID

__all__ = ["NodeHost"]

T = TypeVar("T")


class NodeHost(Protocol):
    """Feeding the core one input at a time and waiting for it to move on."""

    @property
    def node(self) -> PulsarcastNode:
        """The running core (the driver asserts it exists)."""
        ...

    @property
    def peer_id(self) -> str: ...

    @property
    def clock(self) -> Callable[[], float]:
        """The injected clock: wall-clock seconds of every input to the core."""
        ...

    def call(self, fn: Callable[[float], T]) -> T:
        """Run one input on the node with ``now = clock()``, then carry out its outputs."""
        ...

    async def wait_for(self, predicate: Callable[[], bool], *, max_wait: float) -> bool:
        """Wait until ``predicate()`` holds after some input; False on timeout."""
        ...

    def known_root(self, cid: CID) -> CID | None:
        """The first version of topic ``cid`` if the node has it in a tree."""
        ...
