"""``GET /metrics`` through prometheus_client (sidecar/_prometheus.py), read back with
prometheus_client's own parser: on a real driver beside the in-process fake Kubo
(:func:`pulsarcast_ipfs.testing.sidecar_at`), the family catalogue, the histograms'
arithmetic, the bound on topic labels, and the documents that name the families
(docs/metrics.md, the Grafana dashboard in compose/). tests/test_prometheus_kubo.py does it
on real Kubo."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from pulsarcast_ipfs.core import Deliver, FetchBlock, cid_from_str, compute_cid
from pulsarcast_ipfs.core.testing import make_signers
from pulsarcast_ipfs.records import MetricRecord, RecordKind
from pulsarcast_ipfs.testing import FakeKubo, Scrape, Sidecar, create_topic, sidecar_at
from sidecar._prometheus import (
    DELIVERY_BUCKETS,
    FAMILIES,
    OTHER,
    REPAIR_BUCKETS,
    SidecarStats,
    TopicLabels,
)

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "compose"


async def _scrape(sc: Sidecar) -> Scrape:
    r = await sc.api.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return Scrape.parse(r.text)


def _parser_name(name: str, type_: str) -> str:
    return name.removesuffix("_total") if type_ == "counter" else name


@pytest.mark.anyio
async def test_every_family_is_typed_and_helped_and_counts_known_traffic(
    tmp_path: Path,
) -> None:
    async with sidecar_at(tmp_path, FakeKubo(make_signers(1, seed=3)[0])) as sc:
        topic = await create_topic(sc, "news")
        for n in range(3):
            r = await sc.api.post(
                f"/v1/topics/{topic}/publish", json={"ack": "local", "text": f"m{n}"}
            )
            assert r.status_code == 200, r.text
        bad = await sc.api.post(f"/v1/topics/{topic}/publish", json={"ack": "local", "text": 1})
        assert bad.status_code == 400  # refused before the driver: not a publish call
        m = await _scrape(sc)
        text = (await sc.api.get("/metrics")).text
    # exactly the catalogue, each with its type and a HELP line
    want = {_parser_name(f.name, f.type): f for f in FAMILIES}
    assert set(m.families) == set(want)
    for name, fam in m.families.items():
        assert fam.type == want[name].type, name
        assert fam.documentation == want[name].help and fam.documentation, name
    assert len(re.findall(r"^# HELP ", text, re.M)) == len(FAMILIES)
    counters = [f for f in FAMILIES if f.type == "counter"]
    assert len(counters) >= 35 and all(f.name.endswith("_total") for f in counters)
    assert not [f for f in FAMILIES if f.type != "counter" and f.name.endswith("_total")]
    assert {f.name for f in FAMILIES if f.type == "histogram"} == {
        "pulsarcast_delivery_latency_seconds",
        "pulsarcast_publish_call_seconds",
        "pulsarcast_repair_seconds",
    }
    # known traffic: three events published in "news" (the author is subscribed)
    news = {"topic": "news", "topic_cid": topic}
    assert m.value("pulsarcast_events_published_total", **news) == 3
    assert m.value("pulsarcast_events_delivered_total", **news, recovered="false") == 3
    assert m.value("pulsarcast_records_total", kind="event_delivered") == 3
    assert m.value("pulsarcast_records_total", kind="event_injected") == 3
    assert m.value("pulsarcast_deliveries_total") == 3
    assert m.value("pulsarcast_topics") == 1 and m.value("pulsarcast_subscriptions") == 1
    assert m.value("pulsarcast_retained_events", **news) == 3
    assert m.value("pulsarcast_tree_joined", **news) == 1
    assert m.value("pulsarcast_delivery_latency_seconds_count", **news) == 3
    assert m.value("pulsarcast_delivery_latency_seconds_bucket", **news, le="+Inf") == 3
    assert m.value("pulsarcast_publish_call_seconds_count", **news) == 3
    assert 0 < m.value("pulsarcast_publish_call_seconds_sum", **news) < 3 * 30
    assert m.value("pulsarcast_publish_failures_total") == 0
    assert m.family("pulsarcast_repair_seconds").samples == []  # nothing was repaired
    les = [
        s.labels["le"]
        for s in m.family("pulsarcast_delivery_latency_seconds").samples
        if s.name.endswith("_bucket")
    ]
    assert les == [repr(float(b)) for b in DELIVERY_BUCKETS] + ["+Inf"]
    assert m.value("pulsarcast_fast_deliveries_total", path="group") == 0


@pytest.mark.anyio
async def test_topic_labels_are_bounded_with_an_other_bucket(tmp_path: Path) -> None:
    kubo = FakeKubo(make_signers(1, seed=3)[0])
    async with sidecar_at(tmp_path, kubo) as sc:
        sc.driver.prom.topics.limit = 2  # the first two label sets: "t0" and "meta-t0"
        for i in range(4):
            topic = await create_topic(sc, f"t{i}")
            r = await sc.api.post(f"/v1/topics/{topic}/publish", json={"ack": "local", "text": "x"})
            assert r.status_code == 200, r.text
        m = await _scrape(sc)
    assert m.label_values("pulsarcast_events_published_total", "topic") == {"t0", "meta-t0", OTHER}
    assert m.value("pulsarcast_events_published_total", topic="t0") == 1
    # t1..t3 and their meta topics' descriptors: 6 events, counted, not lost
    assert m.value("pulsarcast_events_published_total", topic=OTHER, topic_cid=OTHER) == 6
    assert m.value("pulsarcast_delivery_latency_seconds_count", topic=OTHER) == 3
    assert m.value("pulsarcast_retained_events", topic=OTHER) == 3  # summed on scrape
    for fam in m.families.values():
        values = {s.labels["topic"] for s in fam.samples if "topic" in s.labels}
        assert values <= {"t0", "meta-t0", OTHER}, fam.name


def test_topic_labels_never_move() -> None:
    labels = TopicLabels(1)
    assert labels("bafy-a", "a") == ("a", "bafy-a")
    assert labels("bafy-b", "b") == (OTHER, OTHER)
    assert labels("bafy-a", "a") == ("a", "bafy-a")  # still its own
    assert labels("bafy-b", "b") == (OTHER, OTHER)  # never promoted: its counters stay put
    assert TopicLabels(0)("bafy-a", "a") == (OTHER, OTHER)


def _delivered(latency: float, *, recovered: bool = False) -> MetricRecord:
    return MetricRecord(
        kind=RecordKind.EVENT_DELIVERED,
        ts=1.0,
        node="n",
        fields={
            "topic": "t",
            "topic_cid": "bafy-t",
            "event": "e",
            "latency": latency,
            "recovered": recovered,
        },
    )


def test_histograms_are_cumulative_with_le_inclusive_bounds() -> None:
    s = SidecarStats(topic_limit=4)
    for latency in (0.005, 0.006, 0.3, 1000.0):
        s.record(_delivered(latency))
    h = s.latency[("t", "bafy-t")]
    got = dict(h.buckets())
    assert got["0.005"] == 1  # le: a value on a bound is in that bucket
    assert got["0.01"] == 2 and got["0.25"] == 2 and got["0.5"] == 3
    assert got["300.0"] == 3 and got["+Inf"] == 4
    assert h.sum == pytest.approx(1000.311)


def test_repair_time_runs_from_the_first_fetch_to_the_delivery() -> None:
    s = SidecarStats(topic_limit=4)
    event = compute_cid(b"missing event")
    topic = compute_cid(b"topic")
    s.fetching(event, now=10.0)
    s.fetching(event, now=12.0)  # a retry: the repair started at the first
    assert s.repaired(event, topic, "t", now=13.5) == 3.5
    assert s.repaired(event, topic, "t", now=20.0) is None  # counted once
    other = compute_cid(b"pushed by a neighbour")
    assert s.repaired(other, topic, "t", now=20.0) is None  # never fetched: no repair time
    h = s.repairs[("t", str(topic))]
    assert dict(h.buckets())["5.0"] == 1 and dict(h.buckets())["2.5"] == 0
    assert h.bounds == tuple(float(b) for b in REPAIR_BUCKETS)
    s.fetching(other, now=1.0)
    s.forget_fetch(other)  # fetched, delivered live: not a repair
    assert s.repaired(other, topic, "t", now=2.0) is None


@pytest.mark.anyio
async def test_the_driver_times_a_recovered_delivery(tmp_path: Path) -> None:
    """The driver's wiring: the core's ``FetchBlock`` starts the clock, its ``Deliver``
    with ``recovered`` stops it (the topic's repair histogram gets one), a live
    ``Deliver`` does not."""
    async with sidecar_at(tmp_path, FakeKubo(make_signers(1, seed=3)[0])) as sc:
        topic = await create_topic(sc, "news")
        r = await sc.api.post(f"/v1/topics/{topic}/publish", json={"ack": "local", "text": "m"})
        d = sc.driver
        known = d.node._known_event(cid_from_str(r.json()["event"]))
        assert known is not None
        ev = known[1]
        lacked, live = compute_cid(b"an event this node lacked"), compute_cid(b"live")
        for cid in (lacked, live):
            d.on_fetch_block(None, FetchBlock(cid=cid))  # unknown to the fake Kubo
        root = cid_from_str(topic)
        d.on_deliver(None, Deliver(topic_cid=root, event_cid=live, event=ev, recovered=False))
        d.on_deliver(None, Deliver(topic_cid=root, event_cid=lacked, event=ev, recovered=True))
        m = await _scrape(sc)
    assert m.value("pulsarcast_repair_seconds_count", topic="news", topic_cid=topic) == 1
    assert m.value("pulsarcast_repair_seconds_bucket", topic="news", le="+Inf") == 1
    assert 0 <= m.value("pulsarcast_repair_seconds_sum", topic="news") < 5


# -- the documents that name the families ------------------------------------------------


def _promql_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (``pulsarcast_…`` identifiers)."""
    return set(re.findall(r"\bpulsarcast_[a-z_]+\b", expr))


def _exposed_names() -> set[str]:
    names: set[str] = set()
    for f in FAMILIES:
        names.add(f.name)
        if f.type == "histogram":
            names |= {f"{f.name}_bucket", f"{f.name}_sum", f"{f.name}_count"}
    return names


def test_the_grafana_dashboard_queries_only_exposed_families() -> None:
    board = json.loads((COMPOSE / "grafana" / "dashboards" / "pulsarcast.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 8
    used: set[str] = set()
    for expr in exprs:
        names = _promql_names(expr)
        assert names, expr
        used |= names
    assert used <= _exposed_names(), used - _exposed_names()
    for hist in ("delivery_latency", "publish_call", "repair"):
        assert f"pulsarcast_{hist}_seconds_bucket" in used
    for p in board["panels"]:
        for t in p.get("targets", []):
            assert t["datasource"]["uid"] == "prometheus", p["title"]


def test_docs_list_every_family_with_its_type() -> None:
    text = (ROOT / "docs" / "metrics.md").read_text()
    section = text.split(". Prometheus (`GET /metrics`)\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(pulsarcast_[a-z_]+)` \| (counter|gauge|histogram) \|", section, re.M)
    assert dict(rows) == {f.name: f.type for f in FAMILIES}


def test_prometheus_scrapes_every_sidecar_with_the_token() -> None:
    compose = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    config = yaml.safe_load((COMPOSE / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    # each sidecar shares its Kubo's network namespace: reached at kuboN:5050
    sidecars = sorted(n for n in compose["services"] if n.startswith("sidecar"))
    assert targets == [f"{s.replace('sidecar', 'kubo')}:5050" for s in sidecars]
    for s in sidecars:
        assert "0.0.0.0:5050" in compose["services"][s]["command"]
    token_file = job["authorization"]["credentials_file"]
    prom = compose["services"]["prometheus"]
    assert token_file in " ".join(prom["entrypoint"])
    assert "./prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prom["volumes"]
    grafana = compose["services"]["grafana"]
    mounts = {str(v).split(":")[0]: str(v).split(":")[1] for v in grafana["volumes"]}
    provisioning = yaml.safe_load(
        (COMPOSE / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )
    (source,) = provisioning["datasources"]
    assert source["uid"] == "prometheus" and source["url"] == "http://prometheus:9090"
    dashboards = yaml.safe_load(
        (COMPOSE / "grafana" / "provisioning" / "dashboards" / "pulsarcast.yml").read_text()
    )
    (provider,) = dashboards["providers"]
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
