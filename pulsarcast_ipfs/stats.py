"""One percentile definition for every figure outside Spark.

The *p-th percentile* of ``n`` values is **nearest-rank**: the smallest value with at
least ``p`` of the values at or below it, i.e. the value of rank ``max(1, ceil(p n))``
in ascending order. It is always one of the values (no interpolation), so "p99 =
4,631 ms" means some delivery took exactly that. The simulator (over a histogram),
the benchmark summary, the fault report and the micro-benchmarks all use it; the
Spark report's ``percentile_approx(col, p, 10000)`` computes the same rank (exact on
small sets, within 1/10,000 of the rank on large ones: ``spark/_measures.py``).

``statistics.quantiles`` (interpolated) and ``sorted(xs)[int(p * n)]`` (one rank
higher at exact multiples) give other numbers on the same data; neither is used.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

__all__ = ["median", "percentile", "percentile_of_counts"]


def _rank(p: float, n: int) -> int:
    if not 0.0 < p <= 1.0:
        raise ValueError(f"a percentile is in (0, 1], not {p!r}")
    return max(1, math.ceil(p * n))


def percentile(values: Iterable[float], p: float) -> float | None:
    """The nearest-rank ``p`` percentile (``p`` in (0, 1]); ``None`` if no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[_rank(p, len(ordered)) - 1]


def percentile_of_counts(counts: Mapping[int, int], p: float) -> int | None:
    """:func:`percentile` of a histogram (value -> how many times it occurs)."""
    total = sum(counts.values())
    if total == 0:
        return None
    rank = _rank(p, total)
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return value
    raise AssertionError("unreachable: the counts sum to total")


def median(values: Iterable[float]) -> float | None:
    """The nearest-rank 50th percentile (the lower middle value of an even count)."""
    return percentile(values, 0.5)
