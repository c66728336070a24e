"""Unit tests of the benchmark's subscription filters: the seeded
assignment on the real workload schedule, and the summary's matching-delivery accounting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pulsarcast_ipfs.bench import (
    SHAPES,
    BenchConfig,
    BenchError,
    RecordWriter,
    Schedule,
    assign_filters,
    build_schedule,
    filter_table,
    load_bench_workload,
    markdown_table,
    summarise_run,
)
from pulsarcast_ipfs.bench._systems import parse_forward_counts, parse_sent_bytes
from pulsarcast_ipfs.core import matches, parse_filter
from pulsarcast_ipfs.records import RecordKind


@pytest.fixture(scope="module")
def schedule() -> Schedule:
    return build_schedule(load_bench_workload("25k"), nodes=20, rate=5, events=2000)


def test_events_carry_the_workload_attributes(schedule: Schedule) -> None:
    for e in schedule.events[:50]:
        record = json.loads(e.body.split(b" ")[0])
        assert dict(e.attributes) == {
            k: record[k] for k in ("ups", "downs", "controversiality", "user")
        }


@pytest.mark.parametrize("target", [0.1, 0.3])
def test_selectivity_is_near_the_target_on_the_real_schedule(
    schedule: Schedule, target: float
) -> None:
    plan = assign_filters(schedule, selectivity=target, seed=0)
    subs = {(i, t) for i, topics in enumerate(schedule.subscriptions) for t in topics}
    assert {(s.node, s.topic) for s in plan.subscriptions} == subs
    assert plan.expected == schedule.expected_deliveries()
    assert plan.measured == pytest.approx(target, abs=0.02)
    # Each subscription of a large topic is calibrated on its own, not just on average.
    for s in plan.subscriptions:
        if s.events >= 300:
            assert s.matching / s.events == pytest.approx(target, abs=0.05), s
    # Every shape is used, and the counts are the core's own matching of the attributes.
    assert {s.shape for s in plan.subscriptions} == set(SHAPES)
    events = {t: [e for e in schedule.events if e.topic == t] for t in {t for _, t in subs}}
    for s in plan.subscriptions[:40]:
        where = parse_filter(s.filter)
        assert s.matching == sum(1 for e in events[s.topic] if matches(where, e.attributes))


def test_assignment_is_deterministic_by_seed(schedule: Schedule) -> None:
    a = assign_filters(schedule, selectivity=0.1, seed=7)
    assert assign_filters(schedule, selectivity=0.1, seed=7) == a
    b = assign_filters(schedule, selectivity=0.1, seed=8)
    assert [s.filter for s in a.subscriptions] != [s.filter for s in b.subscriptions]
    assert a.filter_for(0, schedule.subscriptions[0][0]) == a.subscriptions[0].filter
    assert a.filter_for(0, "no such topic") is None


def test_selectivity_bounds() -> None:
    with pytest.raises(BenchError, match="selectivity"):
        BenchConfig(selectivity=0.0)
    with pytest.raises(BenchError, match="selectivity"):
        BenchConfig(selectivity=1.5)
    assert BenchConfig(systems=("gossipsub", "pulsarcast-filtered")).filtered
    assert not BenchConfig(systems=("gossipsub",)).filtered
    assert BenchConfig(systems=("gossipsub",), filters=True).filtered


def _filtered_run(d: Path, system: str) -> None:
    """Nodes A, B, C on topic t; A wants ``ups >= 10``, B ``user = "x"``, C
    ``ups <= 0`` but subscribes after e1. Events e1 (ups 12, user x), e2 (ups 1,
    user y), e3 (ups 20, user y). A Pulsarcast run names events by CID (``c1``...),
    mapped to the inject id by its ``event_published`` record."""
    d.mkdir()
    filtered = system == "pulsarcast-filtered"
    (d / "run.json").write_text(
        json.dumps(
            {
                "system": system,
                "condition": "normal",
                "nodes": 3,
                "topics": ["t"],
                "peers": ["A", "B", "C"],
                "expected_deliveries": 9,
            }
        )
    )
    attrs = {
        "e1": {"ups": 12, "downs": 0, "controversiality": 0, "user": "x"},
        "e2": {"ups": 1, "downs": 0, "controversiality": 0, "user": "y"},
        "e3": {"ups": 20, "downs": 0, "controversiality": 0, "user": "y"},
    }
    subs = [
        {"node": 0, "topic": "t", "filter": "ups >= 10", "shape": "ups-at-least"},
        {"node": 1, "topic": "t", "filter": 'user = "x"', "shape": "users"},
        {"node": 2, "topic": "t", "filter": "ups <= 0", "shape": "ups-at-most"},
    ]
    (d / "filters.json").write_text(
        json.dumps(
            {"selectivity": 0.1, "measured": 0.11, "subscriptions": subs, "attributes": attrs}
        )
    )
    w = {n: RecordWriter(d / f"node-{n}.jsonl", run="r", system=system, node=n) for n in "ABC"}
    w["A"].write(RecordKind.SUBSCRIBED, {"topic": "t"}, ts=1.0)
    w["B"].write(RecordKind.SUBSCRIBED, {"topic": "t"}, ts=1.0)
    w["C"].write(RecordKind.SUBSCRIBED, {"topic": "t"}, ts=15.0)
    ids = {"e1": "c1", "e2": "c2", "e3": "c3"} if system.startswith("pulsarcast") else {}
    for ev, t in (("e1", 10.0), ("e2", 20.0), ("e3", 30.0)):
        w["A"].write(RecordKind.EVENT_INJECTED, {"topic": "t", "inject_id": ev}, ts=t)
        w["A"].write(
            RecordKind.EVENT_PUBLISHED,
            {"topic": "t", "event": ids.get(ev, ev), "inject_id": ev},
            ts=t,
        )

    def deliver(n: str, ev: str, lat: float) -> None:
        w[n].write(
            RecordKind.EVENT_DELIVERED,
            {"topic": "t", "event": ids.get(ev, ev), "latency": lat, "recovered": False},
            ts=0.0,
        )

    # What a node delivers: everything (the application filters), or what matches.
    got = (
        {"A": ["e1", "e3"], "B": ["e1"], "C": []}
        if filtered
        else {
            "A": ["e1", "e2", "e3"],
            "B": ["e1", "e2"],  # B misses e3 (unwanted anyway)
            "C": ["e2", "e3"],
        }
    )
    for n, evs in got.items():
        for i, ev in enumerate(evs):
            deliver(n, ev, 0.010 * (i + 1))
    for n in "ABC":
        for ts, total in ((0.0, 0), (100.0, 1000)):
            w[n].write(
                RecordKind.RESOURCE_SAMPLE,
                {
                    "process": "kubo",
                    "cpu_seconds": 1.0,
                    "rss_bytes": 2**20,
                    "bw_total_in": total,
                    "bw_total_out": total,
                    "bw_protocols": {"/meshsub/1.3.0": {"in": total // 2, "out": total // 2}},
                },
                ts=ts,
            )
    for x in w.values():
        x.close()


@pytest.mark.parametrize("system", ["gossipsub", "pulsarcast", "pulsarcast-filtered"])
def test_summary_counts_matching_deliveries(tmp_path: Path, system: str) -> None:
    d = tmp_path / f"{system}-normal"
    _filtered_run(d, system)
    s = summarise_run(d)
    # Expected matching: A wants e1, e3; B e1; C (from 15 s) wants none of e2, e3.
    assert s.expected_matching == 3
    assert s.received_matching == 3
    assert s.coverage_matching == pytest.approx(1.0)
    # Unwanted at the application: A e2, B e2, C e2 + e3 — none when the node filters.
    assert s.unwanted_deliveries == (0 if system == "pulsarcast-filtered" else 4)
    assert s.filters_applied_by == ("node" if system == "pulsarcast-filtered" else "application")
    assert s.selectivity == pytest.approx(0.11)
    assert s.matching_latency_p50 == pytest.approx(0.010)  # A e1, B e1, A e3
    # wire bytes (3 × 2000) / 2 = 3000, ÷ 3 matching deliveries
    assert s.bytes_per_matching_delivery == pytest.approx(1000.0)
    assert s.pubsub_bytes_per_matching_delivery == pytest.approx(500.0)
    assert s.complete == (system == "pulsarcast-filtered")
    table = filter_table([s])
    assert f"| {s.filters_applied_by} | 11.00 % | 3 | 100.00 % | {s.unwanted_deliveries} |" in table
    assert "| 1,000 / 500 |" in table
    if system == "pulsarcast-filtered":
        assert "coverage of matching events" in markdown_table([s])


def test_summary_reports_the_tree_forwards(tmp_path: Path) -> None:
    d = tmp_path / "pulsarcast-filtered-normal"
    _filtered_run(d, "pulsarcast-filtered")
    assert summarise_run(d).forwards == {} and "| — |" in filter_table([summarise_run(d)])
    (d / "forwards.json").write_text(
        '{"nodes": 3, "down": 400, "pruned": 3600, "false_positive": 20}'
    )
    s = summarise_run(d)
    assert s.forwards == {"down": 400, "pruned": 3600, "false_positive": 20}
    assert s.false_positive_share == pytest.approx(0.05)
    assert "| 400 / 3,600 / 20 (5.00 %) |" in filter_table([s])
    metrics = (
        "# TYPE x gauge\npulsarcast_forwards_down_total 4.0\n"
        "pulsarcast_forwards_pruned_total 36.0\npulsarcast_forwards_false_positive_total 0.0\n"
    )
    assert parse_forward_counts(metrics) == {"down": 4, "pruned": 36, "false_positive": 0}
    assert parse_forward_counts("pulsarcast_forwards_down_total 4.0\n") is None
    sent = (
        'pulsarcast_rpc_bytes_total{direction="sent",op="EVENT"} 1200\n'
        'pulsarcast_rpc_bytes_total{direction="received",op="EVENT"} 900\n'
        'pulsarcast_rpc_bytes_total{direction="sent",op="DIGEST"} 3.0\n'
        'pulsarcast_rpc_bytes_total{direction="sent",op="BAD"} x\n'
    )
    assert parse_sent_bytes(sent) == {"EVENT": 1200, "DIGEST": 3}


def test_summary_catches_a_missed_matching_delivery(tmp_path: Path) -> None:
    d = tmp_path / "gossipsub-normal"
    _filtered_run(d, "gossipsub")
    lines = (d / "node-A.jsonl").read_text().splitlines()
    drop = next(i for i, x in enumerate(lines) if '"event_delivered"' in x and '"e3"' in x)
    (d / "node-A.jsonl").write_text("\n".join(lines[:drop] + lines[drop + 1 :]) + "\n")
    s = summarise_run(d)
    assert (s.expected_matching, s.received_matching) == (3, 2)
    assert s.bytes_per_matching_delivery == pytest.approx(1500.0)


def test_summary_without_filters_has_no_matching_figures(tmp_path: Path) -> None:
    d = tmp_path / "gossipsub-normal"
    _filtered_run(d, "gossipsub")
    (d / "filters.json").unlink()
    s = summarise_run(d)
    assert s.filters_applied_by is None
    assert s.coverage_matching is None and s.bytes_per_matching_delivery is None
    assert s.received == 7  # A 3, B 2, C 2 (e2 and e3 come after its subscription)
    assert filter_table([s]) == ""
