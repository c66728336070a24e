"""The one percentile definition (nearest rank, :mod:`pulsarcast_ipfs.stats`) and that
every figure outside Spark uses it."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsarcast_ipfs.stats import median, percentile, percentile_of_counts

ROOT = Path(__file__).resolve().parent.parent
PS = st.sampled_from([0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0]) | st.floats(0.001, 1.0)


def _by_definition(values: list[int], p: float) -> int:
    """The smallest value with at least ``p`` of the values at or below it."""
    n = len(values)
    return min(v for v in values if sum(x <= v for x in values) >= p * n - 1e-9)


@given(st.lists(st.integers(-50, 50), min_size=1, max_size=60), PS)
def test_percentile_is_the_nearest_rank(values: list[int], p: float) -> None:
    assert percentile(values, p) == _by_definition(values, p)
    assert percentile_of_counts(Counter(values), p) == percentile(values, p)


def test_known_values_and_edges() -> None:
    xs = [15, 20, 35, 40, 50]  # the textbook example of the nearest-rank method
    assert [percentile(xs, p) for p in (0.05, 0.3, 0.4, 0.5, 1.0)] == [15, 20, 20, 35, 50]
    assert median([1, 2, 3, 4]) == 2  # the lower middle: always one of the values
    assert percentile([], 0.5) is None and percentile_of_counts({}, 0.5) is None
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="percentile is in"):
            percentile(xs, bad)


def test_no_other_percentile_in_the_project() -> None:
    """Interpolated quantiles and floor-index ranks give other numbers on the same
    data; outside Spark (``percentile_approx``, the same rank) none is left."""
    other = re.compile(r"statistics\.(quantiles|median)|\[int\([a-z_]+ \* len\(")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("pulsarcast_ipfs", "sidecar", "benchmarks")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if other.search(line) and path.name != "stats.py"
    ]
    assert offenders == []
