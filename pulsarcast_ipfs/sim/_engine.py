"""The discrete-event engine: an event heap with a virtual clock, and seeded substreams.

Theory of operation
-------------------
Every happening of a simulation (a message arriving, a timer firing, a block
fetch completing, a publish call, a crash) is an entry ``(time, seq, kind,
a, b, c)`` in a binary heap. ``seq`` is a counter unique over the run, so
entries with equal times pop in insertion order and the payload fields are
never compared: the order of the run is a pure function of the order of the
pushes, which is a pure function of the seed. The virtual clock is the time of
the entry last popped; it never goes backwards, and an entry pushed for the
past is refused.

All randomness comes from :func:`substream` — one :class:`random.Random` per
purpose, seeded from the run seed and the purpose's name (string seeds are
hashed with SHA-512 by :mod:`random`, independent of ``PYTHONHASHSEED``), so
adding a draw for one purpose never shifts the draws of another.
"""

from __future__ import annotations

import heapq
import random
from typing import Any

__all__ = ["EventHeap", "SimulationError", "substream"]


class SimulationError(RuntimeError):
    """The simulation was driven incorrectly (e.g. an event scheduled in the past)."""


def substream(seed: int, name: str) -> random.Random:
    """An independent, reproducible random stream for one purpose of a run."""
    return random.Random(f"pulsarcast-sim:{seed}:{name}")


Entry = tuple[float, int, int, Any, Any, Any]


class EventHeap:
    """Pending happenings ordered by ``(time, seq)``, and the virtual clock."""

    __slots__ = ("_heap", "_seq", "now")

    def __init__(self, *, start: float = 0.0) -> None:
        self._heap: list[Entry] = []
        self._seq = 0
        self.now = start
        """The virtual clock: the time of the last entry popped."""

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, time: float, kind: int, a: Any = None, b: Any = None, c: Any = None) -> int:
        """Schedule ``kind`` with its fields at ``time`` (not before :attr:`now`); return seq."""
        if time < self.now:
            raise SimulationError(f"cannot schedule at {time!r}, before the clock ({self.now!r})")
        seq = self._seq
        self._seq = seq + 1
        heapq.heappush(self._heap, (time, seq, kind, a, b, c))
        return seq

    def peek_time(self) -> float | None:
        """Time of the next entry, or ``None`` when empty."""
        return self._heap[0][0] if self._heap else None

    def pop(self) -> Entry:
        """Remove the earliest entry and advance the clock to its time."""
        entry = heapq.heappop(self._heap)
        self.now = entry[0]
        return entry
