"""Hand-made record sets for the metrics pipeline (docs/metrics.md), small enough that
the tests compute every expected figure from them by hand.

:func:`report_record` makes one record line; :func:`records_r1` is run r1 (pulsarcast):
nodes A B C D, topics t1 t2 t3 (t3: no subscriber).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReportRecord", "records_r1", "report_record"]


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
