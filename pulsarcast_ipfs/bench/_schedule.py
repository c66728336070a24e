"""The benchmark schedule: the Reddit workload mapped onto the cluster, with times.

Mapping (``workload.py``, :meth:`Workload.scale`): user ``k`` (``node-(k+1)`` in
the file) lives on cluster node ``k mod N``; a node holding several users takes
the union of their subscriptions and all their events; a topic is created by
the node of the user the file names as its creator. Events keep ``internalId``
order; with ``--events E`` the stream is thinned evenly (a stratified sample that
keeps the per-topic and per-user proportions).

Timing: event ``j`` is due ``j / rate`` seconds after the first publication, so
``rate`` is the aggregate rate over the whole cluster.

Payloads: every system gets the very same bytes for an event — a one-line JSON
header ``{"i": inject_id, "t": created}`` (the Kubo baselines carry no
descriptor, so this is how a subscriber learns which event it got and when it
was created) followed by the workload's deterministic 200-600 byte record.
With a payload size (``--payload``) the record is padded with seeded random bytes
so that every published payload, header included, is exactly that long; the
timing, topics and attributes stay the workload's.
Pulsarcast's publishes also carry the record's ``ups``, ``downs``,
``controversiality`` and ``user`` as event attributes, which filters
select on (``_filters.py``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pulsarcast_ipfs.bench._config import BenchError
from pulsarcast_ipfs.workload import (
    ScaledTopic,
    Workload,
    WorkloadError,
    load_workload,
    shipped_workload_path,
)

__all__ = [
    "Schedule",
    "ScheduledEvent",
    "build_schedule",
    "frame_payload",
    "load_bench_workload",
    "unframe_payload",
]

SHIPPED: Final = {"25k": "reddit-2007-25k.jsonl", "10k": "reddit-2007-10k.jsonl"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduledEvent:
    """One publication: which node publishes what, when (seconds after the start)."""

    seq: int
    node: int
    topic: str
    inject_id: str
    at: float
    body: bytes
    """The workload record (200-600 bytes); :func:`frame_payload` adds the header
    (and the padding up to :attr:`size`)."""
    size: int | None = None
    """The exact length of the published payload (``--payload``); ``None``: header
    plus record, whatever their length."""
    attributes: Mapping[str, int | str] = field(default_factory=dict)
    """The event's attributes: ``ups``, ``downs``, ``controversiality`` and
    ``user`` of the workload record. Pulsarcast publishes carry them; the Kubo
    baselines' payloads hold the same fields in the record."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """Topics (with creator nodes), per-node subscriptions and timed publications."""

    nodes: int
    rate: float
    topics: tuple[ScaledTopic, ...]
    subscriptions: tuple[tuple[str, ...], ...]
    events: tuple[ScheduledEvent, ...]

    @property
    def duration(self) -> float:
        """Seconds from the first to the last publication."""
        return self.events[-1].at if self.events else 0.0

    def subscribers(self, topic: str) -> list[int]:
        return [i for i, subs in enumerate(self.subscriptions) if topic in subs]

    def expected_deliveries(self) -> int:
        """Σ over events of the nodes subscribed to its topic (publisher included)."""
        counts = {t.name: len(self.subscribers(t.name)) for t in self.topics}
        return sum(counts[e.topic] for e in self.events)

    def publishers(self) -> set[int]:
        return {e.node for e in self.events}

    def participants(self) -> dict[int, dict[str, bool]]:
        """Each node's topics that must be ready before the first publication: node →
        {topic: whether the node subscribes to it}, for every topic it subscribes to
        or publishes in (a publisher that does not subscribe is the topic's creator)."""
        out: dict[int, dict[str, bool]] = {}
        for i, topics in enumerate(self.subscriptions):
            for t in topics:
                out.setdefault(i, {})[t] = True
        for e in self.events:
            out.setdefault(e.node, {}).setdefault(e.topic, False)
        return {i: dict(sorted(ts.items())) for i, ts in sorted(out.items())}


def load_bench_workload(name: str) -> Workload:
    """A shipped workload by short name (``25k``, ``10k``) or a workload file path."""
    try:
        if name in SHIPPED:
            return load_workload(shipped_workload_path(SHIPPED[name]))
        return load_workload(Path(name))
    except WorkloadError as exc:
        raise BenchError(str(exc)) from exc


def build_schedule(
    workload: Workload,
    *,
    nodes: int,
    rate: float,
    events: int | None = None,
    topics: int | None = None,
    seed: int = 0,
    payload: int | None = None,
) -> Schedule:
    """Scale ``workload`` onto ``nodes`` nodes and time its events at ``rate`` per second;
    with ``payload``, every event's published bytes are exactly that long."""
    if not rate > 0:
        raise BenchError(f"rate must be positive, got {rate}")
    try:
        scaled = workload.scale(nodes=nodes, topics=topics, events=events, seed=seed)
    except WorkloadError as exc:
        raise BenchError(str(exc)) from exc
    evs = tuple(
        ScheduledEvent(
            seq=p.seq,
            node=p.node,
            topic=p.topic,
            inject_id=p.inject_id,
            at=p.seq / rate,
            body=p.payload(seed),
            size=payload,
            attributes=p.attributes(),
        )
        for p in scaled.publications
    )
    return Schedule(
        nodes=nodes,
        rate=rate,
        topics=scaled.topics,
        subscriptions=scaled.subscriptions,
        events=evs,
    )


def frame_payload(inject_id: str, created: float, body: bytes, size: int | None = None) -> bytes:
    """The bytes published: a JSON header line, then the workload record; with
    ``size``, the record padded with random bytes seeded by ``inject_id`` (made here,
    at publication, so that a schedule of large payloads does not hold them all) to
    exactly ``size`` bytes."""
    head = json.dumps({"i": inject_id, "t": created}, separators=(",", ":")).encode()
    if size is None:
        return head + b"\n" + body
    room = size - len(head) - 1 - len(body)
    if room < 0:
        raise BenchError(f"a payload of {size} bytes has no room for event {inject_id!r}")
    return head + b"\n" + body + random.Random(inject_id).randbytes(room)


def unframe_payload(data: bytes) -> tuple[str, float]:
    """``(inject_id, created)`` of a payload made by :func:`frame_payload`."""
    head, sep, _ = data.partition(b"\n")
    try:
        obj: Any = json.loads(head) if sep else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        obj = None
    if (
        not isinstance(obj, dict)
        or not isinstance(obj.get("i"), str)
        or not isinstance(obj.get("t"), int | float)
        or isinstance(obj.get("t"), bool)
    ):
        raise BenchError(f"not a benchmark payload: {data[:60]!r}")
    return obj["i"], float(obj["t"])
