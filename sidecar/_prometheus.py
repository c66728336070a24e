"""``GET /metrics``: the sidecar's Prometheus exposition, through ``prometheus_client``.

Theory of operation
-------------------
Each driver has its own :class:`~prometheus_client.CollectorRegistry` (never the
process-wide one: two sidecars in one process, as the tests run them, must neither
share nor clash) holding one collector, :class:`SidecarCollector`, which builds every
family when it is scraped:

- what the driver, its block store, transport, readers and core already count
  (blocks stored, pins, frames, signatures, fast groups, …) is read at that moment,
  through :class:`Scraped` (what the collector may read of the driver: it never
  imports the driver);
- what exists nowhere else is kept here, in :class:`SidecarStats`: counts of the
  metric records the node writes (by kind, drop reason, RPC op, topic), and three
  histograms: delivery latency (from the ``event_delivered`` records), publish-call
  time (the driver's ``publish``) and repair time (a missing event's first fetch to
  its delivery, ``recovered``).

Families are listed in :data:`FAMILIES` (name, type, help): the collector emits
exactly these, and docs/metrics.md and the Grafana dashboard in ``compose/`` are
checked against them (tests/test_prometheus.py).

Topic labels and their bound
----------------------------
Per-topic families carry ``topic`` (its name) and ``topic_cid`` (its first version).
A node may see any number of topics, so :class:`TopicLabels` gives their own labels
to the first ``limit`` topics it counts (``SidecarConfig.metrics_topics``, 32 by
default) and counts every later one under ``topic="other", topic_cid="other"``. The
assignment never changes while the sidecar runs, so a counter's series never goes
backwards; a per-topic family has at most ``limit + 1`` label sets (times its buckets
for a histogram).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector

from pulsarcast_ipfs.core import FastGroupState, PulsarcastNode, TopicState, cid_from_str, cid_str
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.records import MetricRecord, RecordKind

from ._readers import Readers
from ._signing import KuboSigner
from ._state import StateStore
from ._store import BlockStore
from ._subscriptions import Subscriptions
from ._transport import Transport

__all__ = [
    "CONTENT_TYPE",
    "DELIVERY_BUCKETS",
    "FAMILIES",
    "OTHER",
    "PUBLISH_BUCKETS",
    "REPAIR_BUCKETS",
    "Family",
    "Scraped",
    "SidecarCollector",
    "SidecarStats",
    "TopicLabels",
    "fast_gauges",
    "registry_for",
]

CONTENT_TYPE: Final = CONTENT_TYPE_PLAIN_0_0_4
"""Prometheus' text format 0.0.4, which every Prometheus version reads."""

OTHER: Final = "other"
"""The ``topic`` and ``topic_cid`` of the topics beyond the label bound."""

DELIVERY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
"""Delivery latency (s): a LAN hop is milliseconds; a repaired event minutes."""
PUBLISH_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 30)
"""Publish call (s): in-memory signing is a millisecond; Kubo ``key/sign`` more; the
call gives up after 30 s (``OPERATION_TIMEOUT``)."""
REPAIR_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""Repair (s): one Bitswap fetch at best; several attempts of ``fetch_timeout`` at worst."""

_PENDING_REPAIRS: Final = 4096
"""Missing events whose fetch start is remembered (oldest forgotten first)."""

TOPIC: Final = ("topic", "topic_cid")


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family of ``/metrics``: its full name (``_total`` included for a
    counter), type and help line, and its labels."""

    name: str
    type: str
    help: str
    labels: tuple[str, ...] = ()


def _f(name: str, type_: str, help_: str, labels: tuple[str, ...] = ()) -> Family:
    return Family(name, type_, help_, labels)


_C, _G, _H = "counter", "gauge", "histogram"

FAMILIES: Final[tuple[Family, ...]] = (
    # -- from the metric records (SidecarStats) --
    _f("pulsarcast_records_total", _C, "Metric records written, by kind.", ("kind",)),
    _f(
        "pulsarcast_events_dropped_total",
        _C,
        "Incoming events and requests refused, by reason.",
        ("reason",),
    ),
    _f(
        "pulsarcast_rpc_bytes_total",
        _C,
        "Tree RPC bytes, by direction and op.",
        ("direction", "op"),
    ),
    _f(
        "pulsarcast_rpc_messages_total",
        _C,
        "Tree RPC messages, by direction and op.",
        ("direction", "op"),
    ),
    _f("pulsarcast_events_published_total", _C, "Events that entered a tree here.", TOPIC),
    _f(
        "pulsarcast_events_delivered_total",
        _C,
        "Events handed to the application, by topic and whether gap repair found them.",
        (*TOPIC, "recovered"),
    ),
    _f(
        "pulsarcast_delivery_latency_seconds",
        _H,
        "Delivery latency: from the event's created time to its delivery here.",
        TOPIC,
    ),
    _f(
        "pulsarcast_publish_call_seconds",
        _H,
        "Time of a publish call (signing included), answered or failed.",
        TOPIC,
    ),
    _f("pulsarcast_publish_failures_total", _C, "Publish calls that failed.", TOPIC),
    _f(
        "pulsarcast_repair_seconds",
        _H,
        "Gap repair: from this node's first fetch of a missing event to its delivery.",
        TOPIC,
    ),
    # -- per topic, read from the core's tree state on scrape --
    _f("pulsarcast_tree_children", _G, "Children in the topic's tree.", TOPIC),
    _f(
        "pulsarcast_tree_joined",
        _G,
        "Whether in the topic's tree (acknowledged by a parent, or its root).",
        TOPIC,
    ),
    _f("pulsarcast_retained_events", _G, "Events of the topic this node keeps.", TOPIC),
    _f("pulsarcast_retained_bytes", _G, "Encoded bytes of the events it keeps.", TOPIC),
    # -- read from the driver on scrape --
    _f("pulsarcast_topics", _G, "Trees this node has been in."),
    _f("pulsarcast_subscriptions", _G, "Topics the application subscribed to."),
    _f("pulsarcast_filtered_subscriptions", _G, "Subscriptions with a filter."),
    _f("pulsarcast_consumers", _G, "Consumers (applications' subscriptions) open."),
    _f(
        "pulsarcast_parents_left_withholding_total",
        _C,
        "Parents left for withholding events that witnesses announced.",
    ),
    _f(
        "pulsarcast_silent_children_dropped_total",
        _C,
        "Children dropped for taking events and joining no anti-entropy.",
    ),
    _f("pulsarcast_witnesses_dropped_total", _C, "Witnesses dropped as silent."),
    _f(
        "pulsarcast_own_events_pushed_again_total",
        _C,
        "Own events no witness announced back, pushed again to the witnesses and the author.",
    ),
    _f(
        "pulsarcast_watches_refused_total",
        _C,
        "WATCHes not taken: the topic's watcher table full, or the watcher's network at its bound.",
    ),
    _f("pulsarcast_neighbour_connections", _G, "Open tree connections."),
    _f("pulsarcast_deliveries_total", _C, "Deliveries appended to the delivery log."),
    _f(
        "pulsarcast_duplicates_suppressed_total",
        _C,
        "Deliveries found again by repair after a restart, not delivered twice.",
    ),
    _f("pulsarcast_blocks_stored_total", _C, "Blocks stored in Kubo."),
    _f("pulsarcast_block_put_calls_total", _C, "Kubo block put requests (dag/import batches)."),
    _f("pulsarcast_blocks_store_pending", _G, "Blocks waiting to be stored or pinned."),
    _f("pulsarcast_blocks_put_again_total", _C, "Blocks put again after a Kubo repo gc."),
    _f("pulsarcast_blocks_provided_total", _C, "Kubo provide/once calls that succeeded."),
    _f("pulsarcast_blocks_provide_failed_total", _C, "Kubo provide/once calls that failed."),
    _f(
        "pulsarcast_blocks_retained_pinned",
        _G,
        "Retained events the pinned retention index links now.",
    ),
    _f("pulsarcast_pins_added_total", _C, "Retained events linked and topics pinned."),
    _f("pulsarcast_own_pins_added_total", _C, "Own blocks (authored, published) pinned."),
    _f("pulsarcast_pins_removed_total", _C, "Pins removed."),
    _f("pulsarcast_pin_failed_total", _C, "Pin calls that failed."),
    _f("pulsarcast_pin_calls_total", _C, "Batched pin/add, pin/rm and retention index updates."),
    _f("pulsarcast_topics_announced_total", _C, "Topic announcements in the DHT."),
    _f(
        "pulsarcast_topics_left_to_announcers",
        _G,
        "Subscribed topics this node leaves to closer announcers.",
    ),
    _f("pulsarcast_history_reads_total", _C, "History reads of topics not kept here."),
    _f("pulsarcast_history_read_providers_total", _C, "Providers the history reads found."),
    _f(
        "pulsarcast_history_read_connected_total",
        _C,
        "Providers the history reads connected to.",
    ),
    _f("pulsarcast_history_read_incomplete_total", _C, "History reads answered incomplete."),
    _f("pulsarcast_readers", _G, "History reads in progress."),
    _f("pulsarcast_frames_in_total", _C, "Tree RPC frames received."),
    _f("pulsarcast_frames_out_total", _C, "Tree RPC frames sent."),
    _f("pulsarcast_socket_writes_total", _C, "Socket writes of tree RPC frames."),
    _f("pulsarcast_bad_frames_total", _C, "Frames that did not decode (the peer sent garbage)."),
    _f("pulsarcast_signatures_total", _C, "Signatures made through Kubo key/sign."),
    _f("pulsarcast_sign_failures_total", _C, "Kubo key/sign calls that failed."),
    _f("pulsarcast_sign_seconds_total", _C, "Time spent in Kubo key/sign."),
    _f("pulsarcast_delegations_total", _C, "Delegated signing keys made."),
    _f("pulsarcast_delegation_failures_total", _C, "Delegations that could not be made."),
    _f("pulsarcast_peers_disconnected_total", _C, "Peers disconnected for misbehaviour."),
    _f("pulsarcast_connections_refused_total", _C, "Tree connections refused."),
    _f("pulsarcast_forwards_down_total", _C, "EVENTs sent down the tree."),
    _f("pulsarcast_forwards_pruned_total", _C, "EVENTs not sent down: tree filters pruned them."),
    _f(
        "pulsarcast_forwards_false_positive_total",
        _C,
        "EVENTs received that nobody in this subtree wanted.",
    ),
    _f(
        "pulsarcast_fast_deliveries_total",
        _C,
        "Fast subscriptions: deliveries by the path of the first copy.",
        ("path",),
    ),
    _f("pulsarcast_fast_group_members", _G, "Members of this node's fast groups."),
    _f("pulsarcast_fast_group_helpers", _G, "Helpers of this node's fast groups."),
    _f("pulsarcast_fast_helping", _G, "Other publishers' groups this node helps."),
    _f("pulsarcast_fast_groups_joined", _G, "Other publishers' groups this node is in."),
)

_BY_NAME: Final = {f.name: f for f in FAMILIES}


class TopicLabels:
    """``(topic, topic_cid)`` label values, bounded: the first ``limit`` topics keep
    their own for the life of the process; later ones are :data:`OTHER`."""

    __slots__ = ("_labels", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._labels: dict[str, tuple[str, str]] = {}

    def __call__(self, topic_cid: str | None, name: str) -> tuple[str, str]:
        key = topic_cid or name
        got = self._labels.get(key)
        if got is not None:
            return got
        if len(self._labels) >= self.limit:
            return (OTHER, OTHER)
        got = (name, topic_cid or "")
        self._labels[key] = got
        return got


class _Histogram:
    """Counts per bucket (not cumulative), sum and count; exposed cumulatively."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        acc = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            acc += n
            out.append((_le(bound), acc))
        return out


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class SidecarStats:
    """What only ``/metrics`` needs: counts of the records written, the three
    histograms, and the start times of the gap repairs under way."""

    def __init__(self, *, topic_limit: int) -> None:
        self.topics = TopicLabels(topic_limit)
        self.records: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.rpc_bytes: Counter[tuple[str, str]] = Counter()
        self.rpc_messages: Counter[tuple[str, str]] = Counter()
        self.published: Counter[tuple[str, str]] = Counter()
        self.delivered: Counter[tuple[str, str, str]] = Counter()
        self.publish_failures: Counter[tuple[str, str]] = Counter()
        self.latency: dict[tuple[str, str], _Histogram] = {}
        self.publish_calls: dict[tuple[str, str], _Histogram] = {}
        self.repairs: dict[tuple[str, str], _Histogram] = {}
        self._fetching: OrderedDict[CID, float] = OrderedDict()

    # -- fed by MetricsWriter.write ---------------------------------------------------

    def record(self, rec: MetricRecord) -> None:
        kind = rec.kind
        self.records[kind.value] += 1
        f = rec.fields
        if kind is RecordKind.RPC_SENT or kind is RecordKind.RPC_RECEIVED:
            key = ("sent" if kind is RecordKind.RPC_SENT else "received", str(f.get("op", "")))
            self.rpc_bytes[key] += int(f.get("bytes", 0))
            self.rpc_messages[key] += 1
        elif kind is RecordKind.EVENT_DELIVERED:
            topic = self._topic(f.get("topic_cid"), f.get("topic"))
            recovered = "true" if f.get("recovered") else "false"
            self.delivered[(*topic, recovered)] += 1
            _hist(self.latency, topic, DELIVERY_BUCKETS).observe(float(f.get("latency", 0.0)))
        elif kind is RecordKind.EVENT_PUBLISHED:
            self.published[self._topic(f.get("topic_cid"), f.get("topic"))] += 1
        elif kind is RecordKind.EVENT_DROPPED:
            self.dropped[str(f.get("reason", "unknown"))] += 1

    def _topic(self, topic_cid: object, name: object) -> tuple[str, str]:
        return self.topics(
            topic_cid if isinstance(topic_cid, str) else None,
            name if isinstance(name, str) else "",
        )

    # -- fed by the driver --------------------------------------------------------------

    def publish_call(self, topic_cid: str | None, name: str, seconds: float, *, ok: bool) -> None:
        topic = self.topics(topic_cid, name)
        _hist(self.publish_calls, topic, PUBLISH_BUCKETS).observe(seconds)
        if not ok:
            self.publish_failures[topic] += 1

    def fetching(self, cid: CID, now: float | None = None) -> None:
        """The core asked for block ``cid`` (the first time counts)."""
        if cid in self._fetching:
            return
        self._fetching[cid] = time.monotonic() if now is None else now
        if len(self._fetching) > _PENDING_REPAIRS:
            self._fetching.popitem(last=False)

    def repaired(
        self, cid: CID, topic_cid: CID, name: str, now: float | None = None
    ) -> float | None:
        """Event ``cid`` was delivered ``recovered``: its repair time, if this node
        fetched it (a recovered event may also come from a neighbour unasked)."""
        start = self._fetching.pop(cid, None)
        if start is None:
            return None
        seconds = max(0.0, (time.monotonic() if now is None else now) - start)
        topic = self.topics(cid_str(topic_cid), name)
        _hist(self.repairs, topic, REPAIR_BUCKETS).observe(seconds)
        return seconds

    def forget_fetch(self, cid: CID) -> None:
        """Block ``cid`` arrived and was no event to deliver (or not delivered)."""
        self._fetching.pop(cid, None)


def _hist(
    table: dict[tuple[str, str], _Histogram], key: tuple[str, str], bounds: Sequence[float]
) -> _Histogram:
    h = table.get(key)
    if h is None:
        h = table[key] = _Histogram(bounds)
    return h


def _family(name: str) -> Metric:
    f = _BY_NAME[name]
    if f.type == _C:
        return CounterMetricFamily(f.name, f.help, labels=f.labels)
    if f.type == _G:
        return GaugeMetricFamily(f.name, f.help, labels=f.labels)
    return HistogramMetricFamily(f.name, f.help, labels=f.labels)


def _sample(name: str, value: float, labels: Sequence[str] = ()) -> Metric:
    m = _family(name)
    m.add_metric(list(labels), value)  # type: ignore[attr-defined]
    return m


def _counted(name: str, counts: Iterable[tuple[Sequence[str], float]]) -> Metric:
    m = _family(name)
    for labels, value in sorted(counts):
        m.add_metric(list(labels), value)  # type: ignore[attr-defined]
    return m


def _histograms(name: str, table: dict[tuple[str, str], _Histogram]) -> Metric:
    m = _family(name)
    assert isinstance(m, HistogramMetricFamily)
    for labels, h in sorted(table.items()):
        m.add_metric(list(labels), h.buckets(), h.sum)
    return m


class Scraped(Protocol):
    """What the collector reads of the driver when scraped (its parts' counters)."""

    @property
    def running(self) -> bool: ...

    @property
    def node(self) -> PulsarcastNode: ...

    @property
    def topic_roots(self) -> list[str]: ...

    def topic_states(self) -> list[TopicState]: ...

    def fast_state(self, cid: CID) -> FastGroupState | None: ...

    @property
    def state(self) -> StateStore: ...

    @property
    def subs(self) -> Subscriptions: ...

    @property
    def store(self) -> BlockStore: ...

    @property
    def transport(self) -> Transport: ...

    @property
    def reading(self) -> Readers: ...

    @property
    def duplicates_suppressed(self) -> int:
        """Deliveries found again by repair after a restart (not delivered twice)."""
        ...

    @property
    def topics_left_to_announcers(self) -> int: ...

    @property
    def signer(self) -> KuboSigner: ...


def fast_gauges(d: Scraped) -> dict[str, int]:
    """Fast groups, for ``/metrics``: deliveries by path, group sizes, helpers."""
    counts = d.node.fast_counts if d.running else {}
    members = helpers = helping = joined = 0
    for root in d.topic_roots if d.running else ():
        st = d.fast_state(cid_from_str(root))
        if st is not None:
            members += st.members
            helpers += len(st.helpers)
            helping += len(st.helping)
            joined += len(st.joined)
    return {
        "deliveries_group": counts.get("group", 0),
        "deliveries_helper": counts.get("helper", 0),
        "deliveries_tree": counts.get("tree", 0),
        "group_members": members,
        "group_helpers": helpers,
        "helping": helping,
        "groups_joined": joined,
    }


class SidecarCollector(Collector):
    """Every family of :data:`FAMILIES`, built when scraped."""

    def __init__(self, source: Scraped, stats: SidecarStats) -> None:
        self.d = source
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        d = self.d
        s = self.stats
        yield _counted("pulsarcast_records_total", (((k.value,), s.records[k]) for k in RecordKind))
        yield _counted("pulsarcast_events_dropped_total", (((r,), n) for r, n in s.dropped.items()))
        yield _counted("pulsarcast_rpc_bytes_total", s.rpc_bytes.items())
        yield _counted("pulsarcast_rpc_messages_total", s.rpc_messages.items())
        yield _counted("pulsarcast_events_published_total", s.published.items())
        yield _counted("pulsarcast_events_delivered_total", s.delivered.items())
        yield _histograms("pulsarcast_delivery_latency_seconds", s.latency)
        yield _histograms("pulsarcast_publish_call_seconds", s.publish_calls)
        yield _counted("pulsarcast_publish_failures_total", s.publish_failures.items())
        yield _histograms("pulsarcast_repair_seconds", s.repairs)
        yield from self._trees()
        store, transport, reading = d.store, d.transport, d.reading
        signer = d.signer
        delegates = signer.delegates
        node = d.node if d.running else None
        forwards = node.filter_forwards if node is not None else {}
        guard = node.guard_counts if node is not None else {}
        values: dict[str, float] = {
            "pulsarcast_topics": len(d.topic_roots),
            "pulsarcast_subscriptions": len(d.state.state.subscriptions),
            "pulsarcast_filtered_subscriptions": len(d.state.state.filters),
            "pulsarcast_consumers": len(d.subs.registry),
            "pulsarcast_parents_left_withholding_total": guard.get("detections", 0),
            "pulsarcast_silent_children_dropped_total": guard.get("evictions", 0),
            "pulsarcast_witnesses_dropped_total": guard.get("witness_drops", 0),
            "pulsarcast_own_events_pushed_again_total": guard.get("own_pushes", 0),
            "pulsarcast_watches_refused_total": guard.get("watches_refused", 0),
            "pulsarcast_neighbour_connections": len(transport.neighbours),
            "pulsarcast_deliveries_total": d.state.last_seq,
            "pulsarcast_duplicates_suppressed_total": d.duplicates_suppressed,
            "pulsarcast_blocks_stored_total": store.stored,
            "pulsarcast_block_put_calls_total": store.put_calls,
            "pulsarcast_blocks_store_pending": store.pending,
            "pulsarcast_blocks_put_again_total": store.put_again,
            "pulsarcast_blocks_provided_total": store.provided,
            "pulsarcast_blocks_provide_failed_total": store.provide_failed,
            "pulsarcast_blocks_retained_pinned": store.retained_pinned,
            "pulsarcast_pins_added_total": store.pins_added,
            "pulsarcast_own_pins_added_total": store.own_pins_added,
            "pulsarcast_pins_removed_total": store.pins_removed,
            "pulsarcast_pin_failed_total": store.pin_failed,
            "pulsarcast_pin_calls_total": store.pin_calls,
            "pulsarcast_topics_announced_total": store.topics_announced,
            "pulsarcast_topics_left_to_announcers": d.topics_left_to_announcers,
            "pulsarcast_history_reads_total": reading.reads,
            "pulsarcast_history_read_providers_total": reading.providers,
            "pulsarcast_history_read_connected_total": reading.connected,
            "pulsarcast_history_read_incomplete_total": reading.incomplete,
            "pulsarcast_readers": len(reading),
            "pulsarcast_frames_in_total": transport.frames_in,
            "pulsarcast_frames_out_total": transport.frames_out,
            "pulsarcast_socket_writes_total": transport.writes,
            "pulsarcast_bad_frames_total": transport.bad_frames,
            "pulsarcast_signatures_total": signer.signatures,
            "pulsarcast_sign_failures_total": signer.failures,
            "pulsarcast_sign_seconds_total": signer.seconds,
            "pulsarcast_delegations_total": delegates.renewals if delegates else 0,
            "pulsarcast_delegation_failures_total": delegates.failures if delegates else 0,
            "pulsarcast_peers_disconnected_total": transport.disconnects,
            "pulsarcast_connections_refused_total": transport.refused,
            "pulsarcast_forwards_down_total": forwards.get("down", 0),
            "pulsarcast_forwards_pruned_total": forwards.get("pruned", 0),
            "pulsarcast_forwards_false_positive_total": forwards.get("false_positive", 0),
        }
        for name, value in values.items():
            yield _sample(name, float(value))
        fast = fast_gauges(d)
        yield _counted(
            "pulsarcast_fast_deliveries_total",
            (((p,), fast[f"deliveries_{p}"]) for p in ("group", "helper", "tree")),
        )
        for key in ("group_members", "group_helpers", "helping", "groups_joined"):
            yield _sample(f"pulsarcast_fast_{key}", float(fast[key]))

    def _trees(self) -> Iterator[Metric]:
        """Per topic, from the core's tree state; topics beyond the bound summed."""
        s = self.stats
        children: Counter[tuple[str, str]] = Counter()
        joined: Counter[tuple[str, str]] = Counter()
        retained: Counter[tuple[str, str]] = Counter()
        retained_bytes: Counter[tuple[str, str]] = Counter()
        for st in self.d.topic_states() if self.d.running else ():
            topic = s.topics(cid_str(st.topic_cid), st.name)
            children[topic] += len(st.children)
            joined[topic] += int(st.joined)
            retained[topic] += st.retained
            retained_bytes[topic] += st.retained_bytes
        yield _counted("pulsarcast_tree_children", children.items())
        yield _counted("pulsarcast_tree_joined", joined.items())
        yield _counted("pulsarcast_retained_events", retained.items())
        yield _counted("pulsarcast_retained_bytes", retained_bytes.items())


def registry_for(source: Scraped, stats: SidecarStats) -> CollectorRegistry:
    """A registry of its own for one driver's ``/metrics`` (``source``), with what
    only ``/metrics`` counts (``stats``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SidecarCollector(source, stats))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry's families in Prometheus' text format 0.0.4."""
    return generate_latest(registry)
