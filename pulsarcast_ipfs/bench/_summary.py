"""A quick, dependency-free summary of benchmark runs (the Spark report is the full one).

Reads every record under ``RUN_DIR/<system>-<condition>/`` and computes, with the
definitions of :mod:`pulsarcast_ipfs.measures` (which the Spark report computes
the same; docs/metrics.md):

* coverage against events injected and against events published: received ÷
  expected, where expected = Σ over events of the nodes subscribed to the
  event's topic at its injection (resp. publication) time — the publisher
  included when subscribed — and received = distinct (node, event) deliveries
  of published events to nodes subscribed at the publication time (a node is
  subscribed from ``subscribed`` to ``unsubscribed``);
* delivery latency percentiles (nearest rank) over distinct deliveries;
* only the workload's topics (``run.json``) count: the events Pulsarcast publishes
  on a topic's meta topic when it is created are protocol traffic, not workload;
* bytes on the wire per delivered event from Kubo's ``stats/bw``: wire bytes =
  (Σ over nodes of Δ bytes in + Σ Δ bytes out) ÷ 2 between the first and last
  sample (each byte is counted once sent and once received), in total and for
  the system's dissemination protocols;
* RPC messages per node (Pulsarcast's ``rpc_sent`` / ``rpc_received``; Kubo's
  pubsub exposes none), mean CPU (cores) and peak RSS per node, and wall time;
* CPU per delivery: the CPU seconds the whole cluster's dissemination processes
  (the sidecars for Pulsarcast, Kubo for gossipsub/floodsub) spent between the
  runner's first and last sample, ÷ deliveries received, in µs.

CPU and bytes are taken over the same window for every system: each node's first
and last sample *written by the runner* (a Pulsarcast sidecar also samples
itself and its Kubo, on its own schedule and from its own start).

A set of runs (:func:`set_report`, :func:`set_document`) is grouped by
combination (node count, rate, from ``run.json``), and each system's *knee*
(:func:`knees`) is the highest rate it sustains in the ``normal`` condition.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, Any, Final

from pulsarcast_ipfs.bench._config import SYSTEMS, payload_label, rate_label
from pulsarcast_ipfs.core import Filter, FilterSyntaxError, matches, parse_filter
from pulsarcast_ipfs.measures import (
    CoverageFigures,
    RunRecords,
    cpu_cores,
    cpu_seconds,
    cpu_us_per_delivery,
    latency,
    ratio,
    topic_table,
    wire_bytes,
)
from pulsarcast_ipfs.records import RecordError, validate_record

__all__ = [
    "KNEE_CONDITION",
    "KNEE_P99_SECONDS",
    "PUBLISHED",
    "Knee",
    "RateOutcome",
    "RunSummary",
    "TopicCoverage",
    "filter_table",
    "iter_records",
    "knee_table",
    "knees",
    "markdown_table",
    "protocol_table",
    "set_document",
    "set_report",
    "shortfall",
    "summarise_run",
    "summarise_set",
    "sustained",
    "write_summary",
]

PUBLISHED: Final[dict[tuple[str, str], tuple[float | None, float | None]]] = {
    ("pulsarcast", "normal"): (0.99, 0.99),
    ("pulsarcast", "latency"): (0.51, 0.86),
    ("pulsarcast-ordered", "normal"): (0.37, 0.80),
    ("pulsarcast-ordered", "latency"): (0.32, 0.62),
    ("floodsub", "normal"): (0.41, 0.41),
    ("floodsub", "latency"): (0.31, 0.31),
}
"""The extended report's coverage figures (against injected, against published),
100 nodes, 500 ± 300 ms for ``latency``; Floodsub makes no distinction. The
evaluation had no Gossipsub run."""

PUBSUB_PREFIXES: Final = ("/meshsub/", "/floodsub/", "/x/pulsarcast/")

KNEE_P99_SECONDS: Final = 0.25
"""A rate is *sustained* when its run's p99 delivery latency is under this bound
(and every expected delivery was made): :func:`sustained`."""

KNEE_CONDITION: Final = "normal"
"""The knee is measured on the runs of this network condition only."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicCoverage(CoverageFigures):
    topic: str
    injected: int
    published: int
    expected_injected: int
    expected_published: int
    received: int


_TOPIC_COUNTS: Final = tuple(f.name for f in fields(TopicCoverage) if f.name != "topic")
"""The counts of :class:`TopicCoverage`, as :class:`~pulsarcast_ipfs.measures.TopicMeasures`
has them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary(CoverageFigures):
    """The headline figures of one (system, condition) run."""

    system: str
    condition: str
    nodes: int
    records: int
    rejected: int
    injected: int
    published: int
    deliveries: int
    duplicates: int
    expected_injected: int
    expected_published: int
    received: int
    latency_p50: float | None
    latency_p95: float | None
    latency_p99: float | None
    latency_max: float | None
    wire_bytes: float | None
    wire_bytes_pubsub: float | None
    wire_bytes_by_protocol: dict[str, float] = field(default_factory=dict)
    rpc_sent_per_node: float | None = None
    rpc_received_per_node: float | None = None
    cpu_per_node: float | None = None
    rss_max_per_node: float | None = None
    wall_seconds: float | None = None
    kubo_version: str | None = None
    status: str | None = None
    topics: tuple[TopicCoverage, ...] = ()
    chain_forks: int = 0
    """Published events of a workload topic whose parent is also another event's
    parent (or a second event without a known parent): 0 when every topic's events
    form one chain, as ``pulsarcast-ordered`` promises."""
    chain_out_of_order: int = 0
    """Subscribers' per-topic delivery sequences that do not follow the chain's
    order (counted only for topics whose events form one chain)."""
    chain_sequences: int = 0
    """Per-(subscriber, topic) delivery sequences checked for chain order."""
    delivery_paths: dict[str, int] = field(default_factory=dict)
    """``pulsarcast-fast``: workload deliveries by the path of the first copy (the
    ``path`` of ``event_delivered``): ``group`` (one hop, from the publisher),
    ``helper`` (two hops), ``tree``."""
    path_p99: dict[str, float] = field(default_factory=dict)
    """p99 delivery latency (seconds) per path."""
    expected_scheduled: int | None = None
    """The runner's own count (``run.json``): the schedule's subscriptions × events.
    More than ``expected_injected`` when a node wrote no ``subscribed`` records
    (e.g. a sidecar whose metric records were lost), which the record-based
    coverage cannot see."""
    rate: float | None = None
    """The aggregate rate the run was scheduled at (``run.json``), events/s."""
    payload: int | None = None
    """The synthetic payload size of every event, bytes (``run.json``, ``--payload``);
    ``None``: the workload's own records."""
    max_publish_delay: float | None = None
    """The largest delay of a publication's completion behind its schedule
    (``run.json``), seconds: how far the publishers fell behind ``rate``."""
    cpu_seconds_by_process: dict[str, float] = field(default_factory=dict)
    """CPU seconds the whole cluster spent per process kind (``kubo``,
    ``sidecar``) between each node's first and last runner sample."""
    filters_applied_by: str | None = None
    """Runs with filters (``filters.json``): ``node`` for ``pulsarcast-filtered``
    (the subscriber's node filters), ``application`` for the others (the summary
    applies each subscription's filter to what the node delivered, as an
    application without the feature would); ``None``: no filters."""
    selectivity: float | None = None
    """The filter plan's selectivity on the schedule (``filters.json``)."""
    expected_matching: int = 0
    """As ``expected_published``, counting only the events each subscriber's filter
    matches."""
    received_matching: int = 0
    """Distinct deliveries of matching events to nodes subscribed at publication."""
    unwanted_deliveries: int = 0
    """Distinct deliveries of events the subscriber's filter does not match: what the
    application receives and throws away (0 when the node filters)."""
    matching_latency_p50: float | None = None
    matching_latency_p95: float | None = None
    matching_latency_p99: float | None = None
    forwards: dict[str, int] = field(default_factory=dict)
    """Filters in the tree (``forwards.json``, Pulsarcast): EVENTs sent ``down`` tree
    edges, sends ``pruned``, and ``false_positive`` events received that nobody in the
    receiver's subtree wanted, summed over the nodes; empty for other systems."""
    publish_failures: dict[str, int] = field(default_factory=dict)
    """Publish calls that failed or were refused, by reason (``run.json``'s
    ``publish_failures``; a run set from before it has only the count of its
    ``errors``, under ``(reason not recorded)``): events injected, never published."""

    @property
    def cpu_process(self) -> str:
        """The process that disseminates this system's events: ``sidecar`` for
        Pulsarcast, ``kubo`` for Kubo's own pubsub."""
        return "sidecar" if self.system.startswith("pulsarcast") else "kubo"

    @property
    def cpu_us_per_delivery(self) -> float | None:
        """:attr:`cpu_process` CPU seconds, whole cluster, ÷ deliveries received, in µs."""
        cpu = self.cpu_seconds_by_process.get(self.cpu_process)
        return cpu_us_per_delivery(cpu, self.received)

    @property
    def false_positive_share(self) -> float | None:
        """False-positive forwards ÷ EVENTs sent down (tree filters)."""
        if "down" not in self.forwards:
            return None
        return ratio(self.forwards.get("false_positive", 0), self.forwards["down"])

    @property
    def coverage_matching(self) -> float | None:
        """Matching events received ÷ expected (runs with filters)."""
        if self.filters_applied_by is None:
            return None
        return ratio(self.received_matching, self.expected_matching)

    @property
    def bytes_per_matching_delivery(self) -> float | None:
        """Total wire bytes ÷ matching deliveries: what one delivery the application
        wants costs, comparable between filtered and unfiltered systems."""
        if self.filters_applied_by is None:
            return None
        return ratio(self.wire_bytes, self.received_matching)

    @property
    def pubsub_bytes_per_matching_delivery(self) -> float | None:
        if self.filters_applied_by is None:
            return None
        return ratio(self.wire_bytes_pubsub, self.received_matching)

    @property
    def complete(self) -> bool:
        """Every expected delivery was made: received = the largest of the expected
        counts (against injected, against published, and the schedule's own); when
        the node filters (``pulsarcast-filtered``), every matching one."""
        if self.filters_applied_by == "node":
            return self.expected_matching > 0 and self.received_matching >= self.expected_matching
        expected = max(
            self.expected_injected, self.expected_published, self.expected_scheduled or 0
        )
        return expected > 0 and self.received >= expected

    @property
    def bytes_per_delivery(self) -> float | None:
        return ratio(self.wire_bytes, self.received)

    @property
    def pubsub_bytes_per_delivery(self) -> float | None:
        return ratio(self.wire_bytes_pubsub, self.received)


def _open(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def iter_records(run_dir: Path) -> Iterator[dict[str, Any] | None]:
    """Every record under ``run_dir`` (``*.jsonl``, rotated, gzip); ``None`` for a bad line."""
    for path in sorted(run_dir.rglob("*.jsonl*")):
        if not path.is_file():
            continue
        with _open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                    validate_record(obj)
                except (json.JSONDecodeError, RecordError):
                    yield None
                    continue
                yield obj


def summarise_run(run_dir: Path) -> RunSummary:
    """Figures of one ``RUN_DIR/<system>-<condition>`` directory (see the module doc)."""
    meta: dict[str, Any] = {}
    if (run_dir / "run.json").is_file():
        meta = json.loads((run_dir / "run.json").read_text())
    run = RunRecords()
    rpc_sent: dict[str, int] = defaultdict(int)
    rpc_recv: dict[str, int] = defaultdict(int)
    samples: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    nodes: set[str] = set()
    parents: dict[str, str | None] = {}
    inject_of: dict[str, str] = {}
    records = rejected = 0
    system = str(meta.get("system", ""))
    for rec in iter_records(run_dir):
        if rec is None:
            rejected += 1
            continue
        records += 1
        system = system or rec["system"]
        node, kind = rec["node"], rec["kind"]
        nodes.add(node)
        run.add(rec)
        if kind == "event_published":
            parents[rec["event"]] = rec.get("parent")
            inject_of[rec["event"]] = rec.get("inject_id") or rec["event"]
        elif kind == "rpc_sent":
            rpc_sent[node] += 1
        elif kind == "rpc_received":
            rpc_recv[node] += 1
        elif kind == "resource_sample":
            samples[(node, rec["process"])].append(rec)

    workload_topics = set(meta.get("topics") or ())
    latencies: list[float] = []
    by_path: dict[str, list[float]] = defaultdict(list)
    for _key, d in run.workload_deliveries(workload_topics):
        latencies.append(d.latency)
        if d.path is not None:
            by_path[d.path].append(d.latency)
    # the topics with events (a topic only subscribed to expects nothing)
    per_topic = {t: m for t, m in topic_table(run).items() if m.injected or m.published}
    topics = tuple(
        TopicCoverage(topic=name, **{f: getattr(m, f) for f in _TOPIC_COUNTS})
        for name, m in per_topic.items()
        if name in workload_topics or not workload_topics
    )

    matching = _matching(run_dir, meta, run, inject_of, workload_topics, system)

    forks, out_of_order, sequences = _chain_check(run, parents, workload_topics or set(per_topic))

    # resources
    wire_in = wire_out = 0.0
    have_bw = False
    proto: dict[str, float] = defaultdict(float)
    cpu_by_node: dict[str, float] = defaultdict(float)
    cpu_by_process: dict[str, float] = defaultdict(float)
    rss_by_node: dict[str, float] = defaultdict(float)
    window: dict[str, tuple[float, float]] = {}
    for (node, process), recs in samples.items():
        recs.sort(key=lambda r: r["ts"])
        if process != "kubo":
            continue
        bw = [r for r in recs if "bw_total_in" in r]
        # A Pulsarcast sidecar also samples its Kubo, with its own protocol only and
        # from an earlier start: count bytes from the one series with every protocol
        # (the runner's), so that all systems are measured over the same window.
        widest = max((len(r.get("bw_protocols") or {}) for r in bw), default=0)
        bw = [r for r in bw if len(r.get("bw_protocols") or {}) == widest]
        if len(bw) >= 2:
            have_bw = True
            window[node] = (bw[0]["ts"], bw[-1]["ts"])
            wire_in += bw[-1]["bw_total_in"] - bw[0]["bw_total_in"]
            wire_out += bw[-1]["bw_total_out"] - bw[0]["bw_total_out"]
            first = bw[0].get("bw_protocols") or {}
            last = bw[-1].get("bw_protocols") or {}
            for name, v in last.items():
                f = first.get(name, {"in": 0, "out": 0})
                proto[name] += wire_bytes(v["in"] - f["in"], v["out"] - f["out"])
    for (node, process), recs in samples.items():
        # The runner samples every process of a node at the same ``ts`` as its Kubo:
        # within the node's window, the first and last CPU samples are the runner's.
        lo, hi = window.get(node, (-math.inf, math.inf))
        cpu = [r for r in recs if "cpu_seconds" in r and lo <= r["ts"] <= hi]
        if len(cpu) >= 2:
            c0, c1 = cpu[0], cpu[-1]
            cores = cpu_cores(c0["cpu_seconds"], c1["cpu_seconds"], c0["ts"], c1["ts"])
            if cores is not None:
                cpu_by_node[node] += cores
                cpu_by_process[process] += cpu_seconds(c0["cpu_seconds"], c1["cpu_seconds"])
        rss = [r["rss_bytes"] for r in recs if "rss_bytes" in r]
        if rss:
            rss_by_node[node] += max(rss)
    pubsub_bytes = sum(v for k, v in proto.items() if k.startswith(PUBSUB_PREFIXES))
    n_nodes = int(meta.get("nodes") or len(nodes) or 1)
    lat = latency(latencies)
    rpc_nodes = nodes if (rpc_sent or rpc_recv) else set()
    return RunSummary(
        system=system,
        condition=str(meta.get("condition", "")),
        nodes=n_nodes,
        records=records,
        rejected=rejected,
        injected=sum(t.injected for t in topics),
        published=sum(t.published for t in topics),
        deliveries=len(latencies),
        duplicates=run.duplicates,
        expected_injected=sum(t.expected_injected for t in topics),
        expected_published=sum(t.expected_published for t in topics),
        received=sum(t.received for t in topics),
        latency_p50=lat.p50,
        latency_p95=lat.p95,
        latency_p99=lat.p99,
        latency_max=lat.max,
        wire_bytes=wire_bytes(wire_in, wire_out) if have_bw else None,
        wire_bytes_pubsub=pubsub_bytes if have_bw else None,
        wire_bytes_by_protocol=dict(sorted(proto.items())),
        rpc_sent_per_node=sum(rpc_sent.values()) / len(rpc_nodes) if rpc_nodes else None,
        rpc_received_per_node=sum(rpc_recv.values()) / len(rpc_nodes) if rpc_nodes else None,
        cpu_per_node=sum(cpu_by_node.values()) / len(cpu_by_node) if cpu_by_node else None,
        rss_max_per_node=max(rss_by_node.values()) if rss_by_node else None,
        wall_seconds=meta.get("wall_seconds"),
        kubo_version=meta.get("kubo_version"),
        status=meta.get("status"),
        topics=topics,
        chain_forks=forks,
        chain_out_of_order=out_of_order,
        chain_sequences=sequences,
        delivery_paths={k: len(v) for k, v in sorted(by_path.items())},
        path_p99={k: p for k, v in sorted(by_path.items()) if (p := latency(v).p99) is not None},
        expected_scheduled=(
            int(meta["expected_deliveries"]) if "expected_deliveries" in meta else None
        ),
        rate=float(meta["rate"]) if meta.get("rate") is not None else None,
        payload=int(meta["payload"]) if meta.get("payload") is not None else None,
        max_publish_delay=(
            float(meta["max_publish_delay"]) if meta.get("max_publish_delay") is not None else None
        ),
        cpu_seconds_by_process=dict(sorted(cpu_by_process.items())),
        publish_failures=_publish_failures(meta),
        forwards=_forwards(run_dir),
        **matching,
    )


def _forwards(run_dir: Path) -> dict[str, int]:
    """``forwards.json`` (see :attr:`RunSummary.forwards`); empty without it."""
    try:
        doc = json.loads((run_dir / "forwards.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {
        k: int(v)
        for k, v in doc.items()
        if k in ("down", "pruned", "false_positive") and isinstance(v, int)
    }


def _publish_failures(meta: dict[str, Any]) -> dict[str, int]:
    """``run.json``'s publish failures by reason (see :attr:`RunSummary.publish_failures`)."""
    found = meta.get("publish_failures")
    if isinstance(found, dict):
        return {str(k): int(v) for k, v in found.items()}
    errors = meta.get("errors")
    count = errors.get("publish", 0) if isinstance(errors, dict) else 0
    return {"(reason not recorded)": int(count)} if count else {}


def _load_filters(
    run_dir: Path, meta: dict[str, Any]
) -> tuple[dict[tuple[str, str], Filter], dict[str, dict[str, Any]], float | None] | None:
    """``filters.json``: (peer, topic) → filter, inject_id → attributes, selectivity;
    ``None`` without filters, or when the run never learned its peers."""
    path = run_dir / "filters.json"
    peers = meta.get("peers")
    if not path.is_file() or not isinstance(peers, list):
        return None
    doc = json.loads(path.read_text())
    out: dict[tuple[str, str], Filter] = {}
    for sub in doc["subscriptions"]:
        try:
            out[(str(peers[sub["node"]]), sub["topic"])] = parse_filter(sub["filter"])
        except (IndexError, FilterSyntaxError):
            continue
    measured = doc.get("measured")
    return out, doc["attributes"], float(measured) if measured is not None else None


def _matching(
    run_dir: Path,
    meta: dict[str, Any],
    run: RunRecords,
    inject_of: dict[str, str],
    workload_topics: set[str],
    system: str,
) -> dict[str, Any]:
    """The :class:`RunSummary` fields of a run with filters (see there); none without."""
    loaded = _load_filters(run_dir, meta)
    if loaded is None:
        return {}
    filters, attributes, selectivity = loaded

    def wanted(node: str, event: str, topic: str) -> bool | None:
        f = filters.get((node, topic))
        attrs = attributes.get(inject_of.get(event, event))
        return None if f is None or attrs is None else matches(f, attrs)

    expected = 0
    for event, (topic, t, _by) in run.published.items():
        if workload_topics and topic not in workload_topics:
            continue
        expected += sum(1 for node in run.subscriptions.at(topic, t) if wanted(node, event, topic))
    received = unwanted = 0
    latencies: list[float] = []
    for (node, event), d in run.delivered.items():
        pub = run.published.get(event)
        if pub is None or (workload_topics and pub[0] not in workload_topics):
            continue
        want = wanted(node, event, pub[0])
        if want is None:
            continue
        if not want:
            unwanted += 1
            continue
        latencies.append(d.latency)
        received += run.received(node, event)
    lat = latency(latencies)
    return {
        "filters_applied_by": "node" if system == "pulsarcast-filtered" else "application",
        "selectivity": selectivity,
        "expected_matching": expected,
        "received_matching": received,
        "unwanted_deliveries": unwanted,
        "matching_latency_p50": lat.p50,
        "matching_latency_p95": lat.p95,
        "matching_latency_p99": lat.p99,
    }


def _chain_check(
    run: RunRecords, parents: dict[str, str | None], topics: set[str]
) -> tuple[int, int, int]:
    """``(forks, out-of-order sequences, sequences checked)``; see :class:`RunSummary`."""
    published = run.published
    events: dict[str, list[str]] = defaultdict(list)
    for event, (topic, _t, _by) in published.items():
        if topic in topics:
            events[topic].append(event)
    forks = 0
    order: dict[str, dict[str, int]] = {}
    for topic, evs in events.items():
        children: dict[str | None, list[str]] = defaultdict(list)
        for e in evs:
            p = parents.get(e)
            children[p if p in published else None].append(e)
        topic_forks = sum(len(c) - 1 for c in children.values() if len(c) > 1)
        forks += topic_forks
        if topic_forks:
            continue
        chain: list[str] = []
        nxt = children.get(None, [])
        while nxt:
            chain.append(nxt[0])
            nxt = children.get(nxt[0], [])
        order[topic] = {e: i for i, e in enumerate(chain)}
    seqs: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    for (node, event), d in run.delivered.items():
        pub = published.get(event)
        if pub is not None and pub[0] in order and event in order[pub[0]]:
            seqs[(node, pub[0])].append((d.ts, order[pub[0]][event]))
    bad = 0
    for seq in seqs.values():
        idx = [i for _ts, i in sorted(seq)]
        bad += idx != sorted(idx)
    return forks, bad, len(seqs)


def summarise_set(out: Path) -> list[RunSummary]:
    """Summaries of every run directory (one holding ``run.json``) under ``out``."""
    return [summarise_run(p.parent) for p in sorted(out.glob("*/run.json"))]


def _p(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.2f} %"


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{1000 * v:.0f}"


def _num(v: float | None, fmt: str = "{:,.0f}") -> str:
    return "n/a" if v is None else fmt.format(v)


def _cpu_cell(s: RunSummary) -> str:
    v = s.cpu_us_per_delivery
    return "n/a" if v is None else f"{v:,.0f} ({s.cpu_process})"


def markdown_table(summaries: Sequence[RunSummary]) -> str:
    """One Markdown table of the runs, with the evaluation's published coverage."""
    head = (
        "| system | condition | nodes | injected | published | coverage (injected) "
        "| coverage (published) | published in the report (inj. / pub.) "
        "| latency p50 / p95 / p99 (ms) | wire bytes per delivery (total / pubsub) "
        "| RPC msgs per node (sent / recv) | CPU per node (cores) "
        "| CPU per delivery (µs) | peak RSS per node (MiB) "
        "| wall time (s) |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for s in summaries:
        pub = PUBLISHED.get((s.system, s.condition))
        pub_txt = "—" if pub is None else f"{_p(pub[0])} / {_p(pub[1])}"
        rpc = (
            "n/a"
            if s.rpc_sent_per_node is None
            else f"{s.rpc_sent_per_node:,.0f} / {_num(s.rpc_received_per_node)}"
        )
        rss = None if s.rss_max_per_node is None else s.rss_max_per_node / 2**20
        name = s.system if s.status in (None, "ok") else f"{s.system} ({s.status})"
        rows.append(
            f"| {name} | {s.condition} | {s.nodes} | {s.injected} | {s.published} "
            f"| {_p(s.coverage_injected)} | {_p(s.coverage_published)} | {pub_txt} "
            f"| {_ms(s.latency_p50)} / {_ms(s.latency_p95)} / {_ms(s.latency_p99)} "
            f"| {_num(s.bytes_per_delivery)} / {_num(s.pubsub_bytes_per_delivery)} "
            f"| {rpc} | {_num(s.cpu_per_node, '{:.2f}')} "
            f"| {_cpu_cell(s)} | {_num(rss)} "
            f"| {_num(s.wall_seconds)} |"
        )
    notes = [
        f"* {s.system} / {s.condition}: the schedule expects {s.expected_scheduled:,} "
        f"deliveries, the records {s.expected_injected:,} (some node's `subscribed` "
        f"records are missing); received ÷ scheduled = "
        f"{_p(s.received / s.expected_scheduled)}"
        for s in summaries
        if s.expected_scheduled and s.expected_scheduled > s.expected_injected
    ]
    notes += [
        f"* {s.system} / {s.condition}: {sum(s.publish_failures.values()):,} publish "
        "calls failed or were refused (injected, never published): "
        + ", ".join(f"{n:,} {why}" for why, n in sorted(s.publish_failures.items()))
        for s in summaries
        if s.publish_failures
    ]
    notes += [
        f"* {s.system} / {s.condition}: one chain per topic — {s.chain_forks} forked "
        f"events, {s.chain_out_of_order} of {s.chain_sequences} subscribers' sequences "
        "out of chain order"
        for s in summaries
        if s.system.endswith("-ordered")
    ]
    notes += [
        f"* {s.system} / {s.condition}: its node delivers only the events each "
        "subscription's filter matches, so the coverage above (of every event) is about "
        "the selectivity; see the filter table for the coverage of matching events"
        for s in summaries
        if s.filters_applied_by == "node"
    ]
    notes += [
        f"* {s.system} / {s.condition}: first copy by "
        + ", ".join(
            f"{k} {n:,} (p99 {_ms(s.path_p99.get(k))} ms)" for k, n in s.delivery_paths.items()
        )
        for s in summaries
        if s.delivery_paths
    ]
    text = head + "\n".join(rows) + "\n"
    if notes:
        text += "\n" + "\n".join(notes) + "\n"
    return text


def filter_table(summaries: Sequence[RunSummary]) -> str:
    """Runs with filters: matching deliveries, the application's unwanted ones, and
    wire bytes per matching delivery (comparable between filtered and unfiltered
    systems); ``""`` when no run had filters."""
    runs = [s for s in summaries if s.filters_applied_by is not None]
    if not runs:
        return ""
    head = (
        "| system | condition | filter applied by | selectivity (schedule) "
        "| matching deliveries expected | coverage of matching events "
        "| unwanted deliveries at the application | matching latency p50 / p95 / p99 (ms) "
        "| wire bytes per matching delivery (total / pubsub) "
        "| tree: sent down / pruned / false positives (share) |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = [
        f"| {s.system} | {s.condition} | {s.filters_applied_by} | {_p(s.selectivity)} "
        f"| {s.expected_matching:,} | {_p(s.coverage_matching)} | {s.unwanted_deliveries:,} "
        f"| {_ms(s.matching_latency_p50)} / {_ms(s.matching_latency_p95)} "
        f"/ {_ms(s.matching_latency_p99)} "
        f"| {_num(s.bytes_per_matching_delivery)} / "
        f"{_num(s.pubsub_bytes_per_matching_delivery)} | {_forwards_cell(s)} |"
        for s in runs
    ]
    return head + "\n".join(rows) + "\n"


def _forwards_cell(s: RunSummary) -> str:
    f = s.forwards
    if "down" not in f:
        return "—"
    return (
        f"{f['down']:,} / {f.get('pruned', 0):,} / {f.get('false_positive', 0):,} "
        f"({_p(s.false_positive_share)})"
    )


def protocol_table(summaries: Sequence[RunSummary]) -> str:
    """Wire bytes by Kubo protocol, whole cluster ((Σ in + Σ out) ÷ 2), in MB."""
    names = sorted({p for s in summaries for p in s.wire_bytes_by_protocol})
    if not names:
        return ""
    head = (
        "| system | condition | total | "
        + " | ".join(f"`{n}`" for n in names)
        + " |\n|---|---|"
        + "---:|" * (len(names) + 1)
        + "\n"
    )
    rows = []
    for s in summaries:
        cells = [_num(None if s.wire_bytes is None else s.wire_bytes / 1e6, "{:.2f}")]
        cells += [_num(s.wire_bytes_by_protocol.get(n, 0.0) / 1e6, "{:.2f}") for n in names]
        rows.append(f"| {s.system} | {s.condition} | " + " | ".join(cells) + " |")
    return head + "\n".join(rows) + "\n"


# sweeps: combinations and knees ----------------------------------------------------


def shortfall(s: RunSummary) -> str | None:
    """``None`` when the run sustained its rate, else the first criterion it missed.

    Sustained: the run completed (status ``ok``), every expected delivery was made
    (:attr:`RunSummary.complete`) and the p99 delivery latency is under
    :data:`KNEE_P99_SECONDS`. A publisher's backlog is not a criterion (latency runs
    from the publish call); :class:`Knee` shows it beside the knee.
    """
    if s.status not in (None, "ok"):
        return f"run {s.status}"
    if not s.complete:
        expected = max(s.expected_injected, s.expected_published, s.expected_scheduled or 0)
        if not expected:
            return "no delivery expected"
        return f"coverage {_p(s.received / expected)}"
    if s.latency_p99 is None or not s.latency_p99 < KNEE_P99_SECONDS:
        return f"p99 {_ms(s.latency_p99)} ms"
    return None


def sustained(s: RunSummary) -> bool:
    """The run sustained its rate (:func:`shortfall` found nothing)."""
    return shortfall(s) is None


@dataclass(frozen=True, slots=True, kw_only=True)
class RateOutcome:
    """One tested rate of a system at one node count (``normal`` condition)."""

    rate: float
    shortfall: str | None
    """``None``: sustained; else why not (:func:`shortfall`)."""
    max_publish_delay: float | None = None

    @property
    def sustained(self) -> bool:
        return self.shortfall is None


@dataclass(frozen=True, slots=True, kw_only=True)
class Knee:
    """A system's knee at one node count: the highest rate such that it *and every
    lower rate tested* were sustained (:func:`shortfall`). A rate sustained above
    one that was not (non-monotone results, e.g. a loaded machine during one run)
    does not raise the knee; :attr:`sustained_above` lists such rates."""

    system: str
    nodes: int
    rates: tuple[RateOutcome, ...]
    """Every rate tested, ascending."""
    payload: int | None = None
    """The runs' payload size (``--payload``); ``None``: the workload's records."""

    @property
    def knee(self) -> float | None:
        """The knee, or ``None`` when even the lowest rate tested was not sustained."""
        best: float | None = None
        for r in self.rates:
            if not r.sustained:
                break
            best = r.rate
        return best

    @property
    def at_max(self) -> bool:
        """Every rate tested was sustained: the true knee is at or above the knee."""
        return bool(self.rates) and all(r.sustained for r in self.rates)

    @property
    def sustained_above(self) -> tuple[float, ...]:
        """Rates sustained above the first rate that was not."""
        failed = next((i for i, r in enumerate(self.rates) if not r.sustained), len(self.rates))
        return tuple(r.rate for r in self.rates[failed:] if r.sustained)

    @property
    def knee_publish_delay(self) -> float | None:
        """The largest publish delay behind the schedule at the knee rate (seconds)."""
        k = self.knee
        return next((r.max_publish_delay for r in self.rates if r.rate == k), None)

    def label(self) -> str:
        """``"50"``, ``"≥ 100"`` (every rate sustained) or ``"none"``."""
        k = self.knee
        if k is None:
            return "none"
        return f"≥ {rate_label(k)}" if self.at_max else rate_label(k)


def _rate_outcome(rate: float, runs: Sequence[RunSummary]) -> RateOutcome:
    """Runs at one (system, nodes, rate): the completed ones must all sustain it; a
    rate with no completed run (failed at start-up, aborted) is not sustained."""
    done = [s for s in runs if s.status in (None, "ok")]
    why = next((w for s in done if (w := shortfall(s)) is not None), None)
    if not done:
        why = shortfall(runs[0])
    delays = [s.max_publish_delay for s in done if s.max_publish_delay is not None]
    return RateOutcome(rate=rate, shortfall=why, max_publish_delay=max(delays, default=None))


def _system_order(name: str) -> tuple[int, str]:
    """The order of :data:`SYSTEMS`; a name not in it after them, by name."""
    return (SYSTEMS.index(name) if name in SYSTEMS else len(SYSTEMS), name)


def knees(summaries: Sequence[RunSummary]) -> list[Knee]:
    """Each system's :class:`Knee` at each node count, from the runs of the
    :data:`KNEE_CONDITION` condition that know their rate (``run.json``)."""
    runs: dict[tuple[str, int, int | None], dict[float, list[RunSummary]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for s in summaries:
        if s.condition == KNEE_CONDITION and s.rate is not None:
            runs[(s.system, s.nodes, s.payload)][s.rate].append(s)
    return [
        Knee(
            system=system,
            nodes=nodes,
            payload=payload,
            rates=tuple(_rate_outcome(r, by_rate[r]) for r in sorted(by_rate)),
        )
        for (system, nodes, payload), by_rate in sorted(
            runs.items(),
            key=lambda kv: (_system_order(kv[0][0]), kv[0][1], kv[0][2] or 0),
        )
    ]


def knee_table(found: Sequence[Knee]) -> str:
    """The knees as Markdown: a rule, a table (system, nodes, knee, every rate tested
    with ✓ or ✗ and why) and a note for each non-monotone result."""
    if not found:
        return ""
    head = (
        f"Knee: the highest rate (events/s) such that it and every lower rate tested were "
        f"sustained in the `{KNEE_CONDITION}` condition — the run completed, made every "
        f"expected delivery and had p99 latency under {1000 * KNEE_P99_SECONDS:.0f} ms. "
        '"≥ R": every rate tested was sustained; "none": not even the lowest.\n\n'
        "| system | nodes | knee (events/s) | rates tested | largest publish delay at the "
        "knee (s) |\n|---|---|---|---|---|\n"
    )
    rows = []
    notes = []
    for k in found:
        tested = ", ".join(
            f"{rate_label(r.rate)} ✓" if r.sustained else f"{rate_label(r.rate)} ✗ {r.shortfall}"
            for r in k.rates
        )
        nodes = str(k.nodes) if k.payload is None else f"{k.nodes} ({payload_label(k.payload)})"
        rows.append(
            f"| {k.system} | {nodes} | {k.label()} | {tested} "
            f"| {'—' if k.knee is None else _num(k.knee_publish_delay, '{:.2f}')} |"
        )
        if k.sustained_above:
            above = ", ".join(rate_label(r) for r in k.sustained_above)
            notes.append(
                f"* {k.system}, {k.nodes} nodes: {above} events/s sustained above a rate that "
                "was not; not counted in the knee"
            )
    text = head + "\n".join(rows) + "\n"
    if notes:
        text += "\n" + "\n".join(notes) + "\n"
    return text


def _combination_key(s: RunSummary) -> tuple[int, float, int]:
    return (s.nodes, -1.0 if s.rate is None else s.rate, -1 if s.payload is None else s.payload)


def _ratio_cell(v: float | None, base: float | None) -> str:
    """``v / base`` as ``0.35×`` (two significant digits below 0.01: ``0.0011×``)."""
    if v is None or not base:
        return "n/a"
    r = v / base
    return f"{r:.2f}×" if r >= 0.01 or r == 0 else f"{r:.2g}×"


def payload_table(summaries: Sequence[RunSummary]) -> str:
    """Runs with a payload size (``--payload``): per payload size and condition, each
    system's coverage, latency and wire bytes per delivery, and their ratios to
    gossipsub's run of the same combination; empty without payload sizes."""
    sized = [s for s in summaries if s.payload is not None]
    if not sized:
        return ""
    rows = []
    for s in sorted(
        sized,
        key=lambda s: (*_combination_key(s), s.condition, _system_order(s.system)),
    ):
        base = next(
            (
                g
                for g in sized
                if g.system == "gossipsub"
                and g.condition == s.condition
                and _combination_key(g) == _combination_key(s)
            ),
            None,
        )
        b_bytes = None if base is None else base.bytes_per_delivery
        b_p50 = None if base is None else base.latency_p50
        b_p99 = None if base is None else base.latency_p99
        assert s.payload is not None
        rows.append(
            f"| {payload_label(s.payload)} | {s.nodes} | {_num(s.rate, '{:g}')} | {s.system} "
            f"| {s.condition} | {_p(s.coverage_published)} "
            f"| {_ms(s.latency_p50)} / {_ms(s.latency_p99)} "
            f"| {_num(s.bytes_per_delivery)} "
            f"| {_ratio_cell(s.bytes_per_delivery, b_bytes)} "
            f"| {_ratio_cell(s.latency_p50, b_p50)} / {_ratio_cell(s.latency_p99, b_p99)} |"
        )
    return (
        "| payload | nodes | rate | system | condition | coverage (published) "
        "| latency p50 / p99 (ms) | wire bytes per delivery | bytes × gossipsub "
        "| p50 / p99 × gossipsub |\n|---|---|---|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )


def set_report(summaries: Sequence[RunSummary]) -> str:
    """``summary.md``: the runs' table and their bytes by Kubo protocol — one of each
    per combination (node count, rate) when the set holds several — then the knees."""
    groups: dict[tuple[int, float, int], list[RunSummary]] = defaultdict(list)
    for s in summaries:
        groups[_combination_key(s)].append(s)
    parts: list[str] = []
    for (nodes, rate, payload), group in sorted(groups.items()):
        text = markdown_table(group)
        filtered = filter_table(group)
        if filtered:
            text += (
                "\nFiltered subscriptions (the same filter per subscription in every system; "
                "applied by the node for pulsarcast-filtered, by the application otherwise):"
                "\n\n" + filtered
            )
        by_protocol = protocol_table(group)
        if by_protocol:
            text += "\nWire bytes by Kubo protocol (MB, whole cluster):\n\n" + by_protocol
        if len(groups) > 1:
            what = "rate unknown" if rate < 0 else f"{rate_label(rate)} events/s"
            if payload >= 0:
                what += f", payload {payload_label(payload)}"
            text = f"### {nodes} nodes, {what}\n\n" + text
        parts.append(text)
    sized = payload_table(summaries)
    if sized:
        parts.append(
            "### Payload sizes\n\nEvery event's payload is exactly the size given (the "
            "workload's timing and topics); ratios are to gossipsub's run of the same "
            "combination and condition.\n\n" + sized
        )
    found = knees(summaries)
    if found:
        parts.append("### Knee\n\n" + knee_table(found) if len(groups) > 1 else knee_table(found))
    return "\n".join(parts)


def _run_doc(s: RunSummary) -> dict[str, Any]:
    doc = asdict(s)
    doc.update(
        coverage_injected=s.coverage_injected,
        coverage_published=s.coverage_published,
        bytes_per_delivery=s.bytes_per_delivery,
        pubsub_bytes_per_delivery=s.pubsub_bytes_per_delivery,
        cpu_process=s.cpu_process,
        cpu_us_per_delivery=s.cpu_us_per_delivery,
        coverage_matching=s.coverage_matching,
        bytes_per_matching_delivery=s.bytes_per_matching_delivery,
        pubsub_bytes_per_matching_delivery=s.pubsub_bytes_per_matching_delivery,
        false_positive_share=s.false_positive_share,
        complete=s.complete,
        shortfall=shortfall(s),
    )
    return doc


def _knee_doc(k: Knee) -> dict[str, Any]:
    return {
        "system": k.system,
        "nodes": k.nodes,
        "payload": k.payload,
        "condition": KNEE_CONDITION,
        "knee": k.knee,
        "at_max": k.at_max,
        "label": k.label(),
        "sustained_above": list(k.sustained_above),
        "knee_publish_delay": k.knee_publish_delay,
        "rates": [
            {
                "rate": r.rate,
                "sustained": r.sustained,
                "shortfall": r.shortfall,
                "max_publish_delay": r.max_publish_delay,
            }
            for r in k.rates
        ],
    }


def set_document(summaries: Sequence[RunSummary]) -> dict[str, Any]:
    """The machine-readable :func:`set_report`: ``runs`` (every figure of each run),
    ``knee_rule`` and ``knees``."""
    return {
        "runs": [_run_doc(s) for s in summaries],
        "knee_rule": {
            "condition": KNEE_CONDITION,
            "p99_under_seconds": KNEE_P99_SECONDS,
            "every_expected_delivery": True,
            "every_lower_rate_sustained": True,
        },
        "knees": [_knee_doc(k) for k in knees(summaries)],
    }


def write_summary(out: Path) -> str:
    """Summarise every run under ``out``: write ``summary.md`` (returned) and add the
    :func:`set_document` to ``bench.json`` (beside the runner's config and machine)."""
    summaries = summarise_set(out)
    text = set_report(summaries)
    (out / "summary.md").write_text(text)
    path = out / "bench.json"
    doc: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    doc.update(set_document(summaries))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)
    return text
