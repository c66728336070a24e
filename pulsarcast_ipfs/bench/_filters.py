"""Subscription filters for the benchmark: about ``selectivity`` of each
topic's events match each subscription, the same filters for every system of a run set.

Every (node, topic) subscription of a :class:`Schedule` gets one filter over the
workload's event attributes (``ups``, ``downs``, ``controversiality``, ``user``:
:meth:`Publication.attributes`). Its *shape* is a seeded choice per subscription
(:func:`filter_rng`: the run's seed, the node and the topic), and each shape is
calibrated on the topic's scheduled events so that the share of them it matches
is the achievable share nearest to ``selectivity``:

``ups-at-least``
    ``ups >= T``: ``T`` is the topic's ``ups`` value at the ``1 - selectivity``
    quantile (the best-rated comments).
``ups-at-most``
    ``ups <= T``: the worst-rated comments.
``users``
    ``user in [...]``: the topic's publishing users in a seeded order, each added
    while it brings the share nearer to ``selectivity`` (at most
    :data:`MAX_IN_VALUES` users).

``downs`` and ``controversiality`` are 0 in every event of the shipped Reddit 2007
files, so no shape selects on them. ``ups`` has ties (a third of the comments have
1), so a threshold shape hits the target only as near as the ties let it: when
its nearest share is off by more than :data:`TOLERANCE` of the target (e.g.
``ups <= T`` for 30 %: 15 % or 52 %), the subscription gets the ``users`` shape
instead, which can come near any target. The
:attr:`FilterPlan.measured` selectivity — matching ÷ all expected deliveries, over
every subscription — says how near the plan came. Matching is the core's own
:func:`matches`, the very predicate the sidecar applies.

A topic without scheduled events (``--events`` thins small topics out) is
calibrated on the whole schedule.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from random import Random
from typing import Any, Final

from pulsarcast_ipfs.bench._config import BenchError
from pulsarcast_ipfs.bench._schedule import Schedule, ScheduledEvent
from pulsarcast_ipfs.core import MAX_IN_VALUES, AttributeValue, matches, parse_filter

__all__ = ["SHAPES", "FilterPlan", "SubscriptionFilter", "assign_filters", "filter_rng"]

SHAPES: Final = ("ups-at-least", "ups-at-most", "users")
"""The filter shapes a subscription's seed chooses among (module docstring)."""

TOLERANCE: Final = 0.25
"""A threshold shape whose nearest share of the topic's events is off the target by
more than this fraction of the target gives way to the ``users`` shape."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionFilter:
    """The filter of one (node, topic) subscription, and what it selects of the schedule."""

    node: int
    topic: str
    filter: str
    """Filter text (docs/http-api.md "Filters"), as the subscription sends it."""
    shape: str
    matching: int
    """Scheduled events of the topic that the filter matches."""
    events: int
    """Scheduled events of the topic."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FilterPlan:
    """Every subscription's filter for one schedule (:func:`assign_filters`)."""

    selectivity: float
    """The target share of a topic's events that a subscription's filter matches."""
    seed: int
    subscriptions: tuple[SubscriptionFilter, ...]

    def filter_for(self, node: int, topic: str) -> str | None:
        """The filter of ``node``'s subscription to ``topic`` (``None``: none assigned)."""
        for s in self.subscriptions:
            if s.node == node and s.topic == topic:
                return s.filter
        return None

    @property
    def matching(self) -> int:
        """Expected deliveries the filters let through (publisher included)."""
        return sum(s.matching for s in self.subscriptions)

    @property
    def expected(self) -> int:
        """Expected deliveries without filters (the schedule's own count)."""
        return sum(s.events for s in self.subscriptions)

    @property
    def measured(self) -> float | None:
        """:attr:`matching` ÷ :attr:`expected`: the plan's selectivity on this schedule."""
        return self.matching / self.expected if self.expected else None

    def by_shape(self) -> dict[str, tuple[int, float | None]]:
        """Per shape: (subscriptions, selectivity over their expected deliveries)."""
        out: dict[str, tuple[int, float | None]] = {}
        for shape in SHAPES:
            subs = [s for s in self.subscriptions if s.shape == shape]
            exp = sum(s.events for s in subs)
            out[shape] = (len(subs), sum(s.matching for s in subs) / exp if exp else None)
        return out

    def describe(self) -> str:
        """One line for the run output: target and measured selectivity, by shape."""
        m = self.measured
        shapes = ", ".join(
            f"{shape} {n}" + ("" if sel is None else f" ({100 * sel:.1f} %)")
            for shape, (n, sel) in self.by_shape().items()
        )
        return (
            f"filters on {len(self.subscriptions)} subscriptions (seed {self.seed}): "
            f"target {100 * self.selectivity:.1f} %, measured "
            f"{'n/a' if m is None else f'{100 * m:.2f} %'} of {self.expected:,} expected "
            f"deliveries match ({self.matching:,}); by shape: {shapes}"
        )

    def document(self, events: Sequence[ScheduledEvent]) -> dict[str, Any]:
        """``filters.json`` of a run: the plan, and every scheduled event's attributes
        by ``inject_id`` (what the summary matches deliveries against)."""
        return {
            "selectivity": self.selectivity,
            "seed": self.seed,
            "measured": self.measured,
            "expected": self.expected,
            "matching": self.matching,
            "subscriptions": [
                {
                    "node": s.node,
                    "topic": s.topic,
                    "filter": s.filter,
                    "shape": s.shape,
                    "matching": s.matching,
                    "events": s.events,
                }
                for s in self.subscriptions
            ],
            "attributes": {e.inject_id: dict(e.attributes) for e in events},
        }


def filter_rng(seed: int, node: int, topic: str) -> Random:
    """The seeded stream of one subscription's filter (string seeds are hashed with
    SHA-512 by :mod:`random`, whatever ``PYTHONHASHSEED``)."""
    return Random(f"pulsarcast-bench:{seed}:filters:{node}:{topic}")


def _nearest(counts: Mapping[int, int], total: int, target: float, *, above: bool) -> int:
    """The threshold ``T`` whose ``ups >= T`` (``above``) or ``ups <= T`` share of
    ``total`` is nearest to ``target`` (ties: the larger share)."""
    best: tuple[float, int, int] | None = None
    running = 0
    for value in sorted(counts, reverse=above):
        running += counts[value]
        key = (abs(running / total - target), -running, value)
        if best is None or key < best:
            best = key
    assert best is not None
    return best[2]


def _users_filter(users: Counter[str], total: int, target: float, rng: Random) -> str:
    order = sorted(users)
    rng.shuffle(order)
    chosen: list[str] = []
    count = 0
    goal = target * total
    for user in order:
        if len(chosen) == MAX_IN_VALUES:
            break
        if not chosen or abs(count + users[user] - goal) < abs(count - goal):
            chosen.append(user)
            count += users[user]
    values = ", ".join(json.dumps(u, ensure_ascii=True) for u in sorted(chosen))
    return f"user in [{values}]"


def _ups(attrs: Mapping[str, AttributeValue]) -> int:
    v = attrs.get("ups")
    return v if isinstance(v, int) else 0


def assign_filters(schedule: Schedule, *, selectivity: float = 0.1, seed: int = 0) -> FilterPlan:
    """Give every subscription of ``schedule`` a filter (module docstring); the same
    ``schedule``, ``selectivity`` and ``seed`` always give the same plan."""
    if not (math.isfinite(selectivity) and 0 < selectivity < 1):
        raise BenchError(f"selectivity must be between 0 and 1 (exclusive), got {selectivity}")
    by_topic: dict[str, list[ScheduledEvent]] = defaultdict(list)
    for e in schedule.events:
        by_topic[e.topic].append(e)
    subs: list[SubscriptionFilter] = []
    for node, topics in enumerate(schedule.subscriptions):
        for topic in topics:
            events = by_topic.get(topic, [])
            basis = events or list(schedule.events)
            if not basis:
                raise BenchError("the schedule has no events to calibrate filters on")
            rng = filter_rng(seed, node, topic)
            shape = SHAPES[rng.randrange(len(SHAPES))]
            ups = Counter(_ups(e.attributes) for e in basis)
            text = ""
            if shape != "users":
                above = shape == "ups-at-least"
                threshold = _nearest(ups, len(basis), selectivity, above=above)
                share = sum(
                    n for v, n in ups.items() if (v >= threshold if above else v <= threshold)
                )
                if abs(share / len(basis) - selectivity) <= TOLERANCE * selectivity:
                    text = f"ups {'>=' if above else '<='} {threshold}"
                else:
                    shape = "users"  # the ties of ``ups`` keep the threshold too far off
            if not text:
                users = Counter(str(e.attributes.get("user", "")) for e in basis)
                text = _users_filter(users, len(basis), selectivity, rng)
            where = parse_filter(text)
            subs.append(
                SubscriptionFilter(
                    node=node,
                    topic=topic,
                    filter=text,
                    shape=shape,
                    matching=sum(1 for e in events if matches(where, e.attributes)),
                    events=len(events),
                )
            )
    return FilterPlan(selectivity=selectivity, seed=seed, subscriptions=tuple(subs))
