"""The fingerprint index of a tree's window (the CIDs a DIGEST compares).

A node sends each tree neighbour a DIGEST every HEADS round: the count and sum of
the CIDs it holds created within ``[lo, hi]`` (:func:`._antientropy.fingerprint`).
Scanning ``recent`` and ``older`` (up to 1,088 CIDs) for it, every round, on every
tree, was a third of a 300-node simulation's time. :class:`WindowIndex` keeps the
same CIDs sorted by ``created`` with each one's fingerprint term beside it, so a
window is two bisections and a sum over a slice. ``_note_recent`` is the one place
that adds to or drops from a tree's window, and it keeps the index in step;
``tests/test_core_window.py`` checks the index against the scan. Pure.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Final

from pulsarcast_ipfs.core._cid import CID

from ._interned import cid_term, shared_term

__all__ = ["FINGERPRINT_MASK", "WindowIndex", "cid_term"]

FINGERPRINT_MASK: Final = (1 << 64) - 1
"""Fingerprint sums are modulo 2**64."""


class WindowIndex:
    """The window's ``created`` times, ascending, and each CID's fingerprint term."""

    __slots__ = ("_terms", "_times")

    def __init__(self) -> None:
        self._times: list[float] = []
        self._terms: list[int] = []

    def __len__(self) -> int:
        return len(self._times)

    def add(self, cid: CID, created: float) -> None:
        """``cid`` joined the window (it must not be in it)."""
        i = bisect_right(self._times, created)
        self._times.insert(i, created)
        self._terms.insert(i, shared_term(cid))  # one int per CID for all nodes

    def discard(self, cid: CID, created: float) -> None:
        """``cid`` (created at ``created``) left the window."""
        term = cid_term(cid)
        times = self._times
        i = bisect_left(times, created)
        while i < len(times) and times[i] == created:
            if self._terms[i] == term:
                del times[i]
                del self._terms[i]
                return
            i += 1

    def fingerprint(self, lo: float, hi: float) -> tuple[int, int]:
        """``(count, sum)`` of the CIDs created within ``[lo, hi]``."""
        times = self._times
        i = bisect_left(times, lo)
        j = bisect_right(times, hi)
        if j <= i:
            return 0, 0
        return j - i, sum(self._terms[i:j]) & FINGERPRINT_MASK
