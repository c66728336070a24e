"""The core's bounded LRU as it was first written: one ``OrderedDict``.

Kept as the reference that ``tests/test_core_lru.py`` checks the compact
:class:`pulsarcast_ipfs.core._tree.LRU` (a ``dict`` and a queue of keys) against:
the same operations give the same answers, contents and order. Not used by the core.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

__all__ = ["ReferenceLRU"]


class ReferenceLRU:
    """An insertion-ordered set/map with a size limit (oldest evicted first)."""

    __slots__ = ("_d", "limit")

    def __init__(self, limit: int) -> None:
        self._d: OrderedDict[Any, Any] = OrderedDict()
        self.limit = limit

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def __len__(self) -> int:
        return len(self._d)

    def get(self, key: Any) -> Any:
        return self._d.get(key)

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._d.items())

    def pop(self, key: Any) -> Any:
        return self._d.pop(key, None)

    def put(self, key: Any, value: Any = None) -> None:
        self._d[key] = value
        self._d.move_to_end(key)
        while len(self._d) > self.limit:
            self._d.popitem(last=False)
