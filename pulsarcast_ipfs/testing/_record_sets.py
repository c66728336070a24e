"""Hand-made record sets for the metrics pipeline (docs/metrics.md), small enough that
the tests compute every expected figure from them by hand.

:func:`report_record` makes one record line; :func:`records_r1` is run r1 (pulsarcast):
nodes A B C D, topics t1 t2 t3 (t3: no subscriber). :func:`records_random` is a
seeded bench-like run, too large to count by hand, for tests that compare two
computations of the same measures.
"""

from __future__ import annotations

import random
from typing import Any

__all__ = ["ReportRecord", "records_r1", "records_random", "report_record"]


ReportRecord = dict[str, Any]
"""One record line as the sidecars write it (docs/metrics.md)."""


def report_record(run: str, system: str, kind: str, ts: float, node: str, **f: Any) -> ReportRecord:
    """One record of ``run`` by ``system``: the common fields, then ``f``."""
    return {"v": 1, "ts": ts, "run": run, "system": system, "node": node, "kind": kind, **f}


def records_r1() -> list[ReportRecord]:
    """Run r1 (pulsarcast), nodes A B C D, topics t1 t2 t3 (t3: no subscriber)."""

    def r(kind: str, ts: float, node: str, **f: Any) -> ReportRecord:
        return report_record("r1", "pulsarcast", kind, ts, node, **f)

    def dl(
        ts: float, node: str, topic: str, ev: str, lat: float, rec: bool = False
    ) -> ReportRecord:
        return r("event_delivered", ts, node, topic=topic, event=ev, latency=lat, recovered=rec)

    return [
        # subscriptions: t1 A [0,∞) B [0,50) C [30,∞) (late); t2 D [0,∞) (twice), A [0,20) [40,∞)
        r("subscribed", 0, "A", topic="t1"),
        r("subscribed", 0, "B", topic="t1"),
        r("unsubscribed", 50, "B", topic="t1"),
        r("subscribed", 30, "C", topic="t1"),
        r("subscribed", 0, "D", topic="t2"),
        r("subscribed", 5, "D", topic="t2"),
        r("subscribed", 0, "A", topic="t2"),
        r("unsubscribed", 20, "A", topic="t2"),
        r("subscribed", 40, "A", topic="t2"),
        # t1 events: i1/e1 by A (10/11), i2/e2 by D (20/35, request to publish), i3 never published
        r("event_injected", 10, "A", topic="t1", inject_id="i1", size=10),
        r("event_published", 11, "A", topic="t1", event="e1", inject_id="i1"),
        r("event_injected", 20, "D", topic="t1", inject_id="i2"),
        r("event_published", 35, "D", topic="t1", event="e2", inject_id="i2"),
        r("event_injected", 60, "B", topic="t1", inject_id="i3"),
        dl(11, "A", "t1", "e1", 0.0),
        dl(11.5, "B", "t1", "e1", 0.5),
        dl(12, "B", "t1", "e1", 1.0),  # duplicate
        dl(31, "C", "t1", "e1", 20.0, True),  # late subscriber, recovered
        dl(35.2, "A", "t1", "e2", 0.2),
        dl(35.4, "B", "t1", "e2", 0.4),
        dl(35.3, "C", "t1", "e2", 0.3),
        dl(36, "A", "t1", "e2", 1.0, True),  # duplicate (first copy was live)
        dl(80, "A", "t1", "e9", 0.05),  # event with no publish record
        # t2 events by C
        r("event_injected", 10, "C", topic="t2", inject_id="i5"),
        r("event_published", 10, "C", topic="t2", event="e5", inject_id="i5"),
        r("event_injected", 30, "C", topic="t2", inject_id="i6"),
        r("event_published", 30, "C", topic="t2", event="e6", inject_id="i6"),
        dl(10.1, "D", "t2", "e5", 0.1),
        dl(10.2, "A", "t2", "e5", 0.2),
        dl(30.3, "D", "t2", "e6", 0.3),
        dl(45, "A", "t2", "e6", 15.0, True),  # A was not subscribed at 30
        # t3: no subscriber
        r("event_injected", 5, "A", topic="t3", inject_id="i7"),
        r("event_published", 5, "A", topic="t3", event="e7", inject_id="i7"),
        dl(6, "B", "t3", "e7", 0.7),
        # RPCs
        r("rpc_sent", 11, "A", op="event", bytes=100, peer="C", topic="t1"),
        r("rpc_sent", 12, "A", op="event", bytes=50, peer="A", topic="t1"),
        r("rpc_sent", 13, "A", op="ping", bytes=10, peer="B"),
        r("rpc_sent", 14, "B", op="event", bytes=200, peer="C", topic="t2"),
        r("rpc_received", 11, "C", op="event", bytes=100, peer="A", topic="t1"),
        r("rpc_received", 14, "C", op="event", bytes=200, peer="B", topic="t2"),
        r("rpc_received", 12, "A", op="event", bytes=50, peer="A", topic="t1"),
        # resources
        r(
            "resource_sample",
            0,
            "A",
            process="sidecar",
            cpu_seconds=0.0,
            rss_bytes=100,
            bw_total_in=0,
            bw_total_out=0,
        ),
        r(
            "resource_sample",
            10,
            "A",
            process="sidecar",
            cpu_seconds=5.0,
            rss_bytes=200,
            bw_total_in=1000,
            bw_total_out=3000,
        ),
        r(
            "resource_sample",
            20,
            "A",
            process="sidecar",
            cpu_seconds=7.0,
            rss_bytes=300,
            bw_total_in=1000,
            bw_total_out=5000,
        ),
        r("resource_sample", 0, "A", process="kubo", cpu_seconds=10.0, rss_bytes=1000),
        r("resource_sample", 10, "A", process="kubo", cpu_seconds=20.0, rss_bytes=1000),
        r(
            "resource_sample",
            5,
            "B",
            process="sidecar",
            cpu_seconds=0.0,
            rss_bytes=500,
            bw_total_in=0,
            bw_total_out=0,
        ),
        r(
            "resource_sample",
            15,
            "B",
            process="sidecar",
            cpu_seconds=1.0,
            rss_bytes=500,
            bw_total_in=500,
            bw_total_out=500,
        ),
        r(
            "resource_sample",
            16,
            "B",
            process="sidecar",
            cpu_seconds=0.5,
            rss_bytes=600,
            bw_total_in=600,
            bw_total_out=600,
        ),  # restart: CPU counter went back
        r("tree_changed", 1, "A", topic="t1", role="root", children=["B"]),
    ]


def records_random(run: str, system: str, seed: int, *, nodes: int = 8) -> list[ReportRecord]:
    """A seeded run of ``system``: ``nodes`` nodes, topics a b c (and a's meta topic),
    subscriptions that start late, end and resume, events injected and published
    (some never), deliveries with duplicates, recovered copies, late subscribers and
    events with no publish record, and RPCs with and without a topic.

    Times and latencies are whole milliseconds, so that every computation reads the
    same floats.
    """
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(nodes)]
    topics = ["a", "b", "c"]
    out: list[ReportRecord] = []

    def r(kind: str, ts: float, node: str, **f: Any) -> ReportRecord:
        rec = report_record(run, system, kind, round(ts, 3), node, **f)
        out.append(rec)
        return rec

    for node in names:
        for topic in topics:
            if rng.random() < 0.3:
                continue
            t = rng.choice([0.0, 0.0, rng.uniform(0, 20)])
            r("subscribed", t, node, topic=topic)
            if rng.random() < 0.3:
                r("subscribed", t + rng.uniform(0, 5), node, topic=topic)  # the same interval
            if rng.random() < 0.3:
                end = t + rng.uniform(1, 20)
                r("unsubscribed", end, node, topic=topic)
                if rng.random() < 0.5:
                    r("subscribed", end + rng.uniform(0, 10), node, topic=topic)
    r("event_published", 0.5, names[0], topic="meta-a", event="meta-a-1")
    r("event_delivered", 0.6, names[1], topic="meta-a", event="meta-a-1", latency=0.1)
    for i in range(60):
        topic = rng.choice(topics)
        publisher = rng.choice(names)
        t = rng.uniform(0, 40)
        inject_id, event = f"i{i}", f"e{i}"
        r("event_injected", t, publisher, topic=topic, inject_id=inject_id)
        if rng.random() < 0.1:
            continue  # never published
        tp = t + rng.choice([0.0, rng.uniform(0, 2)])
        r("event_published", tp, publisher, topic=topic, event=event, inject_id=inject_id)
        for node in names:
            if rng.random() < 0.25:
                continue
            for _copy in range(rng.choice([1, 1, 1, 2, 3])):
                lat = round(rng.choice([rng.uniform(0, 0.3), rng.uniform(0, 5)]), 3)
                recovered = rng.random() < 0.1
                r(
                    "event_delivered",
                    tp + lat,
                    node,
                    topic=topic,
                    event=event,
                    latency=lat,
                    recovered=recovered,
                )
    # boundaries: edge1 subscribed on [50, 52), edge2 on [40, 52) and again from 52
    # (at equal times the unsubscribe comes first); e-edge injected at 50, published at 52
    r("subscribed", 50, "edge1", topic="c")
    r("unsubscribed", 52, "edge1", topic="c")
    r("subscribed", 40, "edge2", topic="c")
    r("subscribed", 52, "edge2", topic="c")
    r("unsubscribed", 52, "edge2", topic="c")
    r("event_injected", 50, names[0], topic="c", inject_id="i-edge")
    r("event_published", 52, names[0], topic="c", event="e-edge", inject_id="i-edge")
    for node in ("edge1", "edge2"):
        r("event_delivered", 52.5, node, topic="c", event="e-edge", latency=0.5)
    for j in range(5):  # delivered, never published
        r("event_delivered", 45, rng.choice(names), topic="b", event=f"x{j}", latency=0.2)
    for _ in range(80):
        kind = rng.choice(["rpc_sent", "rpc_received"])
        rpc_topic = rng.choice([*topics, None])
        f: dict[str, Any] = {"op": "event", "bytes": rng.randrange(40, 4000)}
        f["peer"] = rng.choice(names)
        if rpc_topic is not None:
            f["topic"] = rpc_topic
        r(kind, rng.uniform(0, 45), rng.choice(names), **f)
    for rec in out:
        if rec["kind"] == "event_delivered":
            rec.setdefault("recovered", False)
    return out
