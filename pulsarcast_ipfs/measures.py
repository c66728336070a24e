"""The measures of a run, defined once in pure Python (docs/metrics.md).

The simulator's summary (:mod:`pulsarcast_ipfs.sim`), the benchmark's summary
(:mod:`pulsarcast_ipfs.bench`) and the tests take their figures from here; the Spark
report (``spark/_measures.py``) computes the same figures as DataFrame jobs at scale,
and a differential test requires its tables equal to :func:`topic_table`,
:func:`latency_table` and :func:`rpc_bytes_table` on the same records.

* **Percentiles** are nearest-rank (:mod:`pulsarcast_ipfs.stats`).
* **Coverage** is received ÷ expected, ``None`` (n/a) when nothing was expected.
* **Expected** deliveries of an event are the nodes subscribed to its topic at its
  time (``event_injected`` ts against injected, ``event_published`` ts against
  published), the publisher included when subscribed; **received** are the distinct
  (node, event) deliveries of published events to nodes subscribed at the event's
  publication. A node is subscribed on [``subscribed`` ts, next ``unsubscribed`` ts);
  a repeated ``subscribed`` is the same interval; at equal times the
  ``unsubscribed`` comes first.
* **Duplicates** are the copies of an event a node delivered beyond its first.
* **Latency** is that of a node's first delivery of an event, over the workload's
  topics: a *meta topic* ``meta-X`` of a topic ``X`` of the same run carries topic
  descriptors (control traffic) and is left out.
* **Wire bytes** of a cluster over a window are (Σ Δ bytes in + Σ Δ bytes out) ÷ 2:
  each byte is counted once sent and once received.
* **CPU** of a process over a window is Δ cpu_seconds ÷ Δ ts (cores); CPU per
  delivery is the CPU seconds ÷ deliveries received, in µs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pulsarcast_ipfs.stats import percentile, percentile_of_counts

__all__ = [
    "ALL",
    "CoverageFigures",
    "Delivery",
    "Latency",
    "RunRecords",
    "Subscriptions",
    "TopicMeasures",
    "coverage",
    "cpu_cores",
    "cpu_seconds",
    "cpu_us_per_delivery",
    "latency",
    "latency_of_counts",
    "latency_table",
    "percentile",
    "ratio",
    "rpc_bytes_table",
    "topic_table",
    "wire_bytes",
]

ALL: Final = "(all)"
"""The topic label of figures over every topic (as in the Spark tables)."""
NO_TOPIC: Final = "(none)"
"""The topic label of RPCs that carry no topic."""


def ratio(part: float | None, whole: float) -> float | None:
    """``part ÷ whole``; ``None`` when ``part`` is unknown or ``whole`` is 0."""
    return None if part is None or not whole else part / whole


def coverage(received: int, expected: int) -> float | None:
    """Received ÷ expected deliveries; ``None`` (n/a) when nothing was expected."""
    return ratio(received, expected)


def wire_bytes(bytes_in: float, bytes_out: float) -> float:
    """Bytes on the wire from a cluster's Σ Δ bytes in and Σ Δ bytes out."""
    return (bytes_in + bytes_out) / 2


def cpu_seconds(cpu_first: float, cpu_last: float) -> float:
    """CPU seconds used between two samples of a process's counter; a counter that
    went back (a restarted process) counts as none."""
    return max(0.0, cpu_last - cpu_first)


def cpu_cores(cpu_first: float, cpu_last: float, ts_first: float, ts_last: float) -> float | None:
    """Mean cores used between two samples; ``None`` without time between them."""
    if ts_last <= ts_first:
        return None
    return cpu_seconds(cpu_first, cpu_last) / (ts_last - ts_first)


def cpu_us_per_delivery(cpu_seconds: float | None, deliveries: int) -> float | None:
    """CPU seconds ÷ deliveries received, in µs."""
    return ratio(None if cpu_seconds is None else 1e6 * cpu_seconds, deliveries)


@dataclass(frozen=True, slots=True)
class Latency:
    """Delivery latencies (seconds): how many, nearest-rank p50 / p95 / p99, the maximum."""

    count: int
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None


def latency(values: Iterable[float]) -> Latency:
    """:class:`Latency` of some latencies."""
    xs = sorted(values)
    return Latency(
        count=len(xs),
        p50=percentile(xs, 0.5),
        p95=percentile(xs, 0.95),
        p99=percentile(xs, 0.99),
        max=xs[-1] if xs else None,
    )


def latency_of_counts(hist: Mapping[int, int], scale: float, top: float | None) -> Latency:
    """:class:`Latency` of a histogram of latencies in units of ``1 / scale`` seconds
    (the simulator's, kept in bounded memory), with the exact maximum ``top``."""

    def at(p: float) -> float | None:
        v = percentile_of_counts(hist, p)
        return None if v is None else v / scale

    return Latency(count=sum(hist.values()), p50=at(0.5), p95=at(0.95), p99=at(0.99), max=top)


class Subscriptions:
    """Who was subscribed to which topic when, from ``subscribed`` / ``unsubscribed``."""

    def __init__(self) -> None:
        self._changes: dict[tuple[str, str], list[tuple[float, bool]]] = defaultdict(list)
        self._intervals: dict[str, list[tuple[str, float, float | None]]] | None = None

    def add(self, node: str, topic: str, ts: float, subscribed: bool) -> None:
        self._changes[(node, topic)].append((ts, subscribed))
        self._intervals = None

    def intervals(self) -> dict[str, list[tuple[str, float, float | None]]]:
        """Topic → (node, start, end) intervals; ``end`` ``None``: to the end of the run."""
        if self._intervals is None:
            out: dict[str, list[tuple[str, float, float | None]]] = defaultdict(list)
            for (node, topic), changes in self._changes.items():
                start: float | None = None
                for ts, sub in sorted(changes):
                    if sub and start is None:
                        start = ts
                    elif not sub and start is not None:
                        out[topic].append((node, start, ts))
                        start = None
                if start is not None:
                    out[topic].append((node, start, None))
            self._intervals = dict(out)
        return self._intervals

    def at(self, topic: str, t: float) -> list[str]:
        """The nodes subscribed to ``topic`` at time ``t``."""
        return [
            n
            for n, start, end in self.intervals().get(topic, ())
            if start <= t and (end is None or t < end)
        ]

    def subscribed(self, node: str, topic: str, t: float) -> bool:
        return node in self.at(topic, t)

    def subscribers(self, topic: str) -> int:
        """Nodes that were ever subscribed to ``topic``."""
        return len({n for n, _s, _e in self.intervals().get(topic, ())})


@dataclass(slots=True)
class Delivery:
    """A node's first delivery of an event, and how many copies it delivered."""

    ts: float
    latency: float
    topic: str
    recovered: bool
    path: str | None
    copies: int = 1


class CoverageFigures:
    """Coverage of figures that count received and expected deliveries (a base of
    :class:`TopicMeasures` and of the benchmark's summaries)."""

    __slots__ = ()
    received: int
    expected_injected: int
    expected_published: int

    @property
    def coverage_injected(self) -> float | None:
        return coverage(self.received, self.expected_injected)

    @property
    def coverage_published(self) -> float | None:
        return coverage(self.received, self.expected_published)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMeasures(CoverageFigures):
    """One topic's events and coverage (the Spark report's topic table)."""

    topic: str
    subscribers: int
    injected: int
    published: int
    expected_injected: int
    expected_published: int
    deliveries: int
    """Distinct (node, event) deliveries."""
    received: int
    """Deliveries of published events to nodes subscribed at their publication."""
    duplicates: int
    recovered: int
    late: int
    """Deliveries of published events to nodes not subscribed at their publication."""
    unpublished: int
    """Deliveries of events with no ``event_published`` record."""
    meta: bool
    """A meta topic (control traffic): see :meth:`RunRecords.is_meta`."""


_EVENT_KINDS: Final = frozenset(
    {"subscribed", "unsubscribed", "event_injected", "event_published", "event_delivered"}
)


class RunRecords:
    """What the measures need of one run's records, fed one record at a time
    (:meth:`add`, records as dictionaries in any order)."""

    def __init__(self) -> None:
        self.subscriptions = Subscriptions()
        self.injected: dict[str, tuple[str, float, str]] = {}
        """inject_id → (topic, ts, node) of its earliest ``event_injected``."""
        self.published: dict[str, tuple[str, float, str]] = {}
        """event → (topic, ts, node) of its earliest ``event_published``."""
        self.delivered: dict[tuple[str, str], Delivery] = {}
        """(node, event) → the first delivery."""
        self.copies = 0
        self.topics: set[str] = set()
        self.rpc_bytes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        """topic (:data:`NO_TOPIC` without one) → [bytes sent, bytes received]."""

    def add(self, rec: Mapping[str, Any]) -> None:
        kind = rec["kind"]
        node, ts = rec["node"], float(rec["ts"])
        topic = rec.get("topic")
        if kind in _EVENT_KINDS and isinstance(topic, str):
            self.topics.add(topic)
        if kind == "subscribed" or kind == "unsubscribed":
            self.subscriptions.add(node, rec["topic"], ts, kind == "subscribed")
        elif kind == "event_injected":
            _earliest(self.injected, rec["inject_id"], (rec["topic"], ts, node))
        elif kind == "event_published":
            _earliest(self.published, rec["event"], (rec["topic"], ts, node))
        elif kind == "event_delivered":
            self.copies += 1
            key = (node, rec["event"])
            d = self.delivered.get(key)
            path = rec.get("path")
            lat, recovered = float(rec["latency"]), bool(rec.get("recovered"))
            # the earliest copy; at equal times a live one, then the lowest latency
            if d is None or (ts, recovered, lat) < (d.ts, d.recovered, d.latency):
                new = Delivery(
                    ts=ts,
                    latency=lat,
                    topic=rec["topic"],
                    recovered=recovered,
                    path=path if isinstance(path, str) else None,
                    copies=1 if d is None else d.copies + 1,
                )
                self.delivered[key] = new
            else:
                d.copies += 1
        elif kind == "rpc_sent" or kind == "rpc_received":
            row = self.rpc_bytes[topic if isinstance(topic, str) else NO_TOPIC]
            row[kind == "rpc_received"] += int(rec.get("bytes") or 0)

    @property
    def duplicates(self) -> int:
        """Copies delivered beyond each node's first of each event."""
        return self.copies - len(self.delivered)

    def is_meta(self, topic: str) -> bool:
        """``topic`` is ``meta-X`` for a topic ``X`` of this run: the topic descriptors
        Pulsarcast publishes when it creates ``X`` (docs/protocol.md), not workload."""
        return topic.startswith("meta-") and topic[5:] in self.topics

    def workload_deliveries(
        self, topics: Collection[str] | None = None
    ) -> Iterator[tuple[tuple[str, str], Delivery]]:
        """((node, event), first delivery) of the workload: on one of ``topics``, or,
        without them, on any topic but a meta topic."""
        for key, d in self.delivered.items():
            if d.topic in topics if topics else not self.is_meta(d.topic):
                yield key, d

    def received(self, node: str, event: str) -> bool:
        """``node``'s delivery of ``event`` counts: the event was published, and the
        node subscribed to its topic at its publication."""
        pub = self.published.get(event)
        return pub is not None and self.subscriptions.subscribed(node, pub[0], pub[1])


def _earliest(
    table: dict[str, tuple[str, float, str]], key: str, value: tuple[str, float, str]
) -> None:
    prev = table.get(key)
    if prev is None or (value[1], value[0], value[2]) < (prev[1], prev[0], prev[2]):
        table[key] = value


def topic_table(run: RunRecords, *, exclude_publisher: bool = False) -> dict[str, TopicMeasures]:
    """Per topic: its events, deliveries and coverage (see the module doc);
    ``exclude_publisher``: the publisher neither expected nor counted."""
    subs = run.subscriptions
    counts: dict[str, dict[str, int]] = {t: defaultdict(int) for t in run.topics}

    def expected(topic: str, t: float, by: str) -> int:
        return sum(1 for n in subs.at(topic, t) if not (exclude_publisher and n == by))

    for topic, t, by in run.injected.values():
        counts[topic]["injected"] += 1
        counts[topic]["expected_injected"] += expected(topic, t, by)
    for topic, t, by in run.published.values():
        counts[topic]["published"] += 1
        counts[topic]["expected_published"] += expected(topic, t, by)
    for (node, event), d in run.delivered.items():
        c = counts[d.topic]
        c["deliveries"] += 1
        c["duplicates"] += d.copies - 1
        c["recovered"] += d.recovered
        pub = run.published.get(event)
        if pub is None:
            c["unpublished"] += 1
        elif subs.subscribed(node, d.topic, pub[1]) and not (exclude_publisher and node == pub[2]):
            c["received"] += 1
        else:
            c["late"] += 1
    return {
        topic: TopicMeasures(
            topic=topic,
            subscribers=subs.subscribers(topic),
            injected=c["injected"],
            published=c["published"],
            expected_injected=c["expected_injected"],
            expected_published=c["expected_published"],
            deliveries=c["deliveries"],
            received=c["received"],
            duplicates=c["duplicates"],
            recovered=c["recovered"],
            late=c["late"],
            unpublished=c["unpublished"],
            meta=run.is_meta(topic),
        )
        for topic, c in sorted(counts.items())
    }


def latency_table(run: RunRecords) -> dict[tuple[str, str], Latency]:
    """(topic, class) → :class:`Latency` of first deliveries; class ``live``,
    ``recovered`` or ``all``, topic :data:`ALL` over every topic; meta topics left out."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for _key, d in run.workload_deliveries():
        cls = "recovered" if d.recovered else "live"
        for topic in (d.topic, ALL):
            groups[(topic, cls)].append(d.latency)
            groups[(topic, "all")].append(d.latency)
    return {key: latency(xs) for key, xs in sorted(groups.items())}


def rpc_bytes_table(run: RunRecords) -> dict[str, tuple[int, int]]:
    """Topic → (RPC bytes sent, received); :data:`ALL` over every RPC."""
    out = {t: (s, r) for t, (s, r) in sorted(run.rpc_bytes.items())}
    if out:
        out[ALL] = (sum(s for s, _ in out.values()), sum(r for _, r in out.values()))
    return out
