"""The state of fast groups (FastDelivery) and the publisher's placement rule.

Plain containers (kept in :class:`~._tree.Tree.fast`) and one pure function,
:func:`plan_group`, that decides which members a publisher serves itself and which
a helper serves. The protocol that moves them is in :mod:`._fastgroup`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from ._codec import MAX_GROUP_ASSIGN
from ._filters import Filter

__all__ = [
    "Assignment",
    "FastState",
    "GroupMember",
    "Membership",
    "PublisherGroup",
    "plan_group",
]

MAX_GROUP_MEMBERS: Final = 4096
"""Members of one publisher's group of one topic, whatever the capacity (memory)."""


@dataclass(slots=True, kw_only=True)
class GroupMember:
    """(publisher) One member of this node's group of a topic."""

    spare: int
    """Members it offered to serve as a helper."""
    expires: float
    """Dropped then unless it refreshes (GROUP_JOIN) before."""
    seq: int
    """Join order (the placement keeps earlier members where they are)."""
    helper: str | None = None
    """The helper that forwards to it; ``None``: the publisher (or it is a helper)."""
    filter: Filter | None = None
    """Its subscription filter (GROUP_JOIN's ``filter``): it gets only what matches."""


@dataclass(slots=True)
class PublisherGroup:
    """(publisher) This node's group of one topic."""

    members: dict[str, GroupMember] = field(default_factory=dict)
    helpers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Helper -> the members it forwards to."""
    epoch: int = 0
    """Of the last GROUP_ASSIGN sent."""
    seq: int = 0


@dataclass(slots=True, kw_only=True)
class Membership:
    """(member) This node in one publisher's group of a topic."""

    expires: float
    """Acknowledged until then (or, not acknowledged yet: given up then)."""
    acked: bool = False
    helper: str | None = None
    """Who forwards the publisher's events to it (``None``: the publisher)."""


@dataclass(slots=True, kw_only=True)
class Assignment:
    """(helper) Members a publisher asked this node to forward its events to."""

    epoch: int
    members: tuple[str, ...]
    expires: float
    filters: dict[str, Filter] = field(default_factory=dict)
    """Members with a filter (GROUP_ASSIGN's ``filters``): forwarded only what matches."""


@dataclass(slots=True)
class FastState:
    """A tree's fast-group state (any of the three roles, or several)."""

    wanted: bool = False
    """The local subscription asked for fast delivery (``subscribe(fast=True)``)."""
    joined: dict[str, Membership] = field(default_factory=dict)
    """(member) publisher -> membership."""
    refused: dict[str, float] = field(default_factory=dict)
    """(member) publisher -> not asked again before (it refused, or went silent)."""
    group: PublisherGroup | None = None
    """(publisher) this node's group."""
    assigned: dict[str, Assignment] = field(default_factory=dict)
    """(helper) publisher -> what to forward to whom."""

    def idle(self) -> bool:
        return (
            not self.wanted
            and not self.joined
            and not self.assigned
            and (self.group is None or not self.group.members)
        )


def plan_group(
    members: Mapping[str, tuple[int, int]], capacity: int
) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]] | None:
    """Place a publisher's group: ``members`` maps each member to ``(spare, seq)``.

    Returns ``(direct, helpers)``: the members the publisher sends to itself, and
    each helper's members; the publisher then sends each event to at most
    ``capacity`` peers (``direct`` and the helpers), a helper to at most its spare
    (and ``MAX_GROUP_ASSIGN``), and every member is reached in two hops at most.
    ``None`` if that is impossible (too few spare places). Deterministic: helpers
    are the members with the most spare (then the earliest), as few as needed; the
    others keep join order, the earliest direct.
    """
    order = sorted(members, key=lambda p: (members[p][1], p))
    n = len(order)
    if n <= capacity:
        return tuple(order), {}
    candidates = sorted(
        (p for p in order if members[p][0] > 0),
        key=lambda p: (-members[p][0], members[p][1], p),
    )
    chosen: list[str] | None = None
    room = 0
    for h in range(1, min(capacity, len(candidates)) + 1):
        room += min(members[candidates[h - 1]][0], MAX_GROUP_ASSIGN)
        if room >= n - capacity:
            chosen = candidates[:h]
            break
    if chosen is None:
        return None
    helpers_set = set(chosen)
    others = [p for p in order if p not in helpers_set]
    direct = others[: capacity - len(chosen)]
    rest = others[capacity - len(chosen) :]
    helpers: dict[str, tuple[str, ...]] = {}
    i = 0
    for h_peer in chosen:
        take = min(members[h_peer][0], MAX_GROUP_ASSIGN)
        helpers[h_peer] = tuple(rest[i : i + take])
        i += take
    return tuple(direct), helpers
