"""The metrics pipeline in PySpark local mode, on small hand-made record sets.

Every expected value below is computed by hand in the comments from the records
listed in ``records_r1`` (:mod:`pulsarcast_ipfs.testing`) and ``_run2`` (see
docs/metrics.md for the definitions).
"""

from __future__ import annotations

import gzip
import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import spark as job
from pulsarcast_ipfs.cli import main as cli_main
from pulsarcast_ipfs.records import validate_record
from pulsarcast_ipfs.testing import ReportRecord, records_r1, report_record
from spark._render import plotted_topics

pytestmark = pytest.mark.spark


def _run2() -> list[ReportRecord]:
    """Run r2 (floodsub): X publishes f1 to t1, Y receives it, X does not deliver to itself.

    Plus: t1's descriptor m1 on meta-t1 (a meta topic: t1 exists), delivered to
    Y; g2 on meta-x (a workload topic: there is no topic x), no subscriber; t0
    with a subscriber and no event.
    """

    def r(kind: str, ts: float, node: str, **f: Any) -> ReportRecord:
        return report_record("r2", "floodsub", kind, ts, node, **f)

    return [
        r("subscribed", 0, "X", topic="t1"),
        r("subscribed", 0, "Y", topic="t1"),
        r("event_published", 0.5, "X", topic="meta-t1", event="m1"),
        r("event_delivered", 0.6, "Y", topic="meta-t1", event="m1", latency=0.1, recovered=False),
        r("event_injected", 1, "X", topic="t1", inject_id="j1"),
        r("event_published", 1, "X", topic="t1", event="f1", inject_id="j1"),
        r("event_delivered", 1.01, "Y", topic="t1", event="f1", latency=0.01, recovered=False),
        r("event_injected", 2, "X", topic="meta-x", inject_id="j2"),
        r("event_published", 2, "X", topic="meta-x", event="g2", inject_id="j2"),
        r("subscribed", 0, "Y", topic="t0"),
        # one resource sample: no rate, so CPU and network are n/a, with the reason
        r("resource_sample", 1, "X", process="sidecar", cpu_seconds=1.0, rss_bytes=100),
    ]


def _run3() -> list[ReportRecord]:
    """Run r3 (sim) died early: P created t5 (descriptor m5 on meta-t5) and nothing else."""

    def r(kind: str, ts: float, node: str, **f: Any) -> ReportRecord:
        return report_record("r3", "sim", kind, ts, node, **f)

    return [
        r("subscribed", 0, "P", topic="t5"),
        r("event_published", 0, "P", topic="meta-t5", event="m5"),
        r("rpc_sent", 0, "P", op="event", bytes=40, peer="Q", topic="meta-t5"),
        r("rpc_received", 0, "Q", op="event", bytes=40, peer="P", topic="meta-t5"),
    ]


BAD_LINES = {
    "not json{": "malformed",
    '[{"v": 1}]': "malformed",
    json.dumps(report_record("r1", "pulsarcast", "subscribed", 1, "A", topic="t1") | {"v": 2}): (
        "unsupported_version"
    ),
    json.dumps(
        report_record(
            "r1", "pulsarcast", "event_delivered", 1, "A", topic="t1", event="e1", recovered=False
        )
    ): "missing_field:latency",
    json.dumps(report_record("r1", "pulsarcast", "gossip_heartbeat", 1, "A")): "unknown_kind",
    json.dumps(
        report_record("r1", "pulsarcast", "subscribed", 1, "A", topic="t1") | {"ts": "x"}
    ): "bad_type",
}


def _write_jsonl(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(line + "\n" for line in lines)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(data.encode()))
    else:
        path.write_text(data)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = job.get_session(job.SessionConfig(master="local[2]", shuffle_partitions=1))
    yield session
    session.stop()


@pytest.fixture(scope="module")
def run_dirs(
    tmp_path_factory: pytest.TempPathFactory, spark: SparkSession
) -> tuple[Path, Path, Path]:
    """r1 spread over plain, gzip, rotated JSONL and Parquet files, shuffled;
    plus the bad lines; r2 and r3 in their own directories."""
    base = tmp_path_factory.mktemp("runs")
    rng = random.Random(7)
    recs = records_r1()
    for rec in recs:
        validate_record(rec)  # the hand-made set itself follows the schema
    by_node: dict[str, list[str]] = {}
    for rec in recs:
        by_node.setdefault(rec["node"], []).append(json.dumps(rec))
    for lines in by_node.values():
        rng.shuffle(lines)  # records out of order
    d1 = base / "r1"
    _write_jsonl(d1 / "A.jsonl", by_node["A"])
    _write_jsonl(d1 / "sub" / "B.jsonl.gz", by_node["B"])
    half = len(by_node["C"]) // 2
    _write_jsonl(d1 / "C.jsonl.1.gz", by_node["C"][:half])  # rotated
    _write_jsonl(d1 / "C.jsonl", by_node["C"][half:])
    _write_jsonl(d1 / "bad.jsonl", list(BAD_LINES))
    (d1 / "notes.txt").write_text("not a record file\n")
    d_rows = [json.loads(x) for x in by_node["D"]]
    cols = (
        "v bigint, ts double, run string, system string, node string, kind string, "
        "topic string, inject_id string, event string, latency double, recovered boolean"
    )
    names = [c.split()[0] for c in cols.split(", ")]
    floats = {"ts", "latency"}

    def cell(row: ReportRecord, n: str) -> Any:
        v = row.get(n)
        return float(v) if n in floats and v is not None else v

    df = spark.createDataFrame([tuple(cell(r, n) for n in names) for r in d_rows], cols)
    df.coalesce(1).write.parquet(str(d1 / "D.parquet"))
    d2 = base / "r2"
    _write_jsonl(d2 / "X.jsonl", [json.dumps(x) for x in _run2()])
    d3 = base / "r3"
    _write_jsonl(d3 / "P.jsonl", [json.dumps(x) for x in _run3()])
    return d1, d2, d3


@pytest.fixture(scope="module")
def result(
    spark: SparkSession, run_dirs: tuple[Path, Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> job.ReportResult:
    out = tmp_path_factory.mktemp("out")
    cfg = job.ReportConfig(run_dirs=tuple(map(str, run_dirs)), out=str(out))
    return job.run_report(spark, cfg)


def _topic(res: job.ReportResult, run: str, topic: str) -> dict[str, Any]:
    (row,) = [t for t in res.topics if t["run"] == run and t["topic"] == topic]
    return row


def _run(res: job.ReportResult, run: str) -> dict[str, Any]:
    (row,) = [t for t in res.runs if t["run"] == run]
    return row


def test_rejected_counted_by_reason(result: job.ReportResult) -> None:
    assert result.rejected_by_reason == {
        "malformed": 2,
        "unsupported_version": 1,
        "missing_field:latency": 1,
        "unknown_kind": 1,
        "bad_type": 1,
    }
    assert result.valid_records == len(records_r1()) + len(_run2()) + len(_run3())


def test_topic_t1_late_subscriber_duplicates_unpublished(result: job.ReportResult) -> None:
    t1 = _topic(result, "r1", "t1")
    # injected i1@10 {A,B}, i2@20 {A,B}, i3@60 {A,C} -> 6; published e1@11 {A,B}, e2@35 {A,B,C} -> 5
    assert {k: t1[k] for k in ("subscribers", "injected", "published")} == {
        "subscribers": 3,
        "injected": 3,
        "published": 2,
    }
    assert (t1["expected_injected"], t1["expected_published"]) == (6, 5)
    # distinct: (A,e1) (B,e1) (C,e1) (A,e2) (B,e2) (C,e2) (A,e9); counted: not (C,e1) (A,e9)
    assert (t1["deliveries"], t1["received"], t1["duplicates"]) == (7, 5, 2)
    assert (t1["late"], t1["unpublished"], t1["recovered"]) == (1, 1, 1)
    assert t1["coverage_published"] == pytest.approx(1.0)
    assert t1["coverage_injected"] == pytest.approx(5 / 6)


def test_topic_t2_resubscription(result: job.ReportResult) -> None:
    t2 = _topic(result, "r1", "t2")
    # e5@10 {D,A}; e6@30 {D} (A unsubscribed on [20,40)); A's recovered e6 is not counted
    assert (t2["expected_injected"], t2["expected_published"]) == (3, 3)
    assert (t2["deliveries"], t2["received"], t2["late"], t2["recovered"]) == (4, 3, 1, 1)
    assert t2["subscribers"] == 2
    assert t2["coverage_published"] == pytest.approx(1.0)


def test_topic_without_subscribers_is_na(result: job.ReportResult) -> None:
    t3 = _topic(result, "r1", "t3")
    assert (t3["subscribers"], t3["expected_published"], t3["deliveries"]) == (0, 0, 1)
    assert t3["coverage_injected"] is None and t3["coverage_published"] is None


def test_run_totals_and_comparison(result: job.ReportResult) -> None:
    r1, r2 = _run(result, "r1"), _run(result, "r2")
    assert (r1["injected"], r1["published"], r1["deliveries"], r1["received"]) == (6, 5, 12, 8)
    assert (r1["duplicates"], r1["recovered"], r1["late"], r1["unpublished"]) == (2, 2, 3, 1)
    assert (r1["expected_injected"], r1["expected_published"]) == (9, 8)
    assert r1["coverage_injected"] == pytest.approx(8 / 9)
    assert r1["coverage_published"] == pytest.approx(1.0)
    assert r1["nodes"] == 4 and r1["records"] == len(records_r1())
    # r2: f1@1 expected at X and Y, received by Y only
    assert (r2["system"], r2["expected_published"], r2["received"]) == ("floodsub", 2, 1)
    assert r2["coverage_injected"] == pytest.approx(0.5)
    assert r2["coverage_published"] == pytest.approx(0.5)


def _lat(res: job.ReportResult, run: str, topic: str, cls: str) -> dict[str, Any]:
    (row,) = [r for r in res.latency if (r["run"], r["topic"], r["class"]) == (run, topic, cls)]
    return row


def test_latency_percentiles(result: job.ReportResult) -> None:
    def q(row: dict[str, Any]) -> tuple[Any, ...]:
        return (row["count"], row["p50"], row["p95"], row["p99"], row["max"])

    # t1 live, first copy of each pair: 0, .05, .2, .3, .4, .5 (nearest rank)
    assert q(_lat(result, "r1", "t1", "live")) == (6, 0.2, 0.5, 0.5, 0.5)
    assert _lat(result, "r1", "t1", "live")["mean"] == pytest.approx(1.45 / 6)
    assert q(_lat(result, "r1", "t1", "recovered")) == (1, 20.0, 20.0, 20.0, 20.0)
    assert q(_lat(result, "r1", "t1", "all")) == (7, 0.3, 20.0, 20.0, 20.0)
    # overall live: 0 .05 .1 .2 .2 .3 .3 .4 .5 .7; recovered: 15 20
    assert q(_lat(result, "r1", job.ALL, "live")) == (10, 0.2, 0.7, 0.7, 0.7)
    assert q(_lat(result, "r1", job.ALL, "recovered")) == (2, 15.0, 20.0, 20.0, 20.0)
    assert q(_lat(result, "r1", job.ALL, "all")) == (12, 0.3, 20.0, 20.0, 20.0)
    r1 = _run(result, "r1")
    assert (r1["latency_p50"], r1["latency_max"]) == (0.3, 20.0)


def test_rpc_per_topic_and_node(result: job.ReportResult) -> None:
    rows = {r["topic"]: r for r in result.rpc_topics if r["run"] == "r1"}
    pick = ("sent", "received", "bytes_sent", "bytes_received")
    assert tuple(rows["t1"][k] for k in pick) == (2, 2, 150, 150)
    assert tuple(rows["t2"][k] for k in pick) == (1, 1, 200, 200)
    assert tuple(rows["(none)"][k] for k in pick) == (1, 0, 10, 0)
    assert tuple(rows[job.ALL][k] for k in pick) == (4, 3, 360, 350)
    (s,) = [r for r in result.rpc_summary if r["run"] == "r1"]
    # sent per node A3 B1 C0 D0; received A1 B0 C2 D0
    assert s["nodes"] == 4
    assert s["sent_mean"] == pytest.approx(1.0)
    assert s["sent_std"] == pytest.approx(math.sqrt(1.5))
    assert (s["sent_p95"], s["sent_p99"], s["sent_max"]) == (3, 3, 3)
    assert s["received_mean"] == pytest.approx(0.75)
    assert s["received_std"] == pytest.approx(math.sqrt(0.6875))
    assert (s["received_p95"], s["received_p99"]) == (2, 2)
    (s2,) = [r for r in result.rpc_summary if r["run"] == "r2"]
    assert (s2["nodes"], s2["sent_mean"], s2["sent_std"]) == (2, 0.0, 0.0)


def test_resources(result: job.ReportResult, spark: SparkSession) -> None:
    (r,) = [x for x in result.resources if x["run"] == "r1"]
    # (node, bucket) values: A cpu [1.5, .2] mem [1100, 1200, 300] net [400, 200];
    # B cpu [.1] (restart gives none) mem [500, 550] net [150]
    assert r["nodes"] == 2
    assert r["node_cpu_mean"] == pytest.approx(0.6)
    assert (r["node_cpu_p95"], r["node_cpu_max"]) == pytest.approx((1.5, 1.5))
    assert r["node_mem_mean"] == pytest.approx(730.0)
    assert (r["node_mem_p95"], r["node_mem_p99"]) == pytest.approx((1200.0, 1200.0))
    assert r["node_net_mean"] == pytest.approx(250.0)
    # cluster per bucket: cpu [-, 1.6, .2], mem [1600, 1750, 300], net [-, 550, 200]
    assert (r["cluster_cpu_mean"], r["cluster_cpu_max"]) == pytest.approx((0.9, 1.6))
    assert (r["cluster_mem_mean"], r["cluster_mem_max"]) == pytest.approx((3650 / 3, 1750.0))
    assert (r["cluster_net_mean"], r["cluster_net_p95"]) == pytest.approx((375.0, 550.0))
    assert (r["cluster_bytes_in"], r["cluster_bytes_out"]) == (1600, 5600)
    nodes = spark.read.parquet(f"{result.tables_dir}/resources_nodes").where("run = 'r1'")
    a = nodes.where("node = 'A'").first()
    assert a is not None
    assert (a["cpu_mean"], a["mem_max"], a["bytes_in"], a["bytes_out"]) == pytest.approx(
        (0.85, 1200.0, 1000, 5000)
    )


def test_outputs_written(result: job.ReportResult, spark: SparkSession) -> None:
    md = result.report_path.read_text()
    assert md.count("- why n/a: CPU and network are rates") == 1  # r2's one sample, not r1
    assert "## Rejected records" in md and "| malformed | 2 |" in md.replace("  ", " ")
    assert "| t3 |" in md and "n/a" in md
    assert "88.9 %" in md  # r1 total coverage vs injected, 8/9
    names = sorted(p.name for p in result.plots)
    assert names == sorted(
        [
            "comparison.png",
            "coverage_r1__pulsarcast.png",
            "events_r1__pulsarcast.png",
            "coverage_r2__floodsub.png",
            "events_r2__floodsub.png",
        ]
    )
    for p in result.plots:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rej = spark.read.parquet(f"{result.tables_dir}/rejected")
    raws = {r["raw"] for r in rej.select("raw").collect()}
    assert raws == set(BAD_LINES)
    assert rej.where("source like '%bad.jsonl'").count() == len(BAD_LINES)


def test_exclude_publisher(
    spark: SparkSession, run_dirs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    cfg = job.ReportConfig(
        run_dirs=tuple(map(str, run_dirs)),
        out=str(tmp_path / "out"),
        measures=job.MeasureConfig(exclude_publisher=True),
        plots=False,
    )
    res = job.run_report(spark, cfg)
    t1 = _topic(res, "r1", "t1")
    # e1 by A: {B}; e2 by D: {A,B,C} -> 4; i1 by A {B}, i2 by D {A,B}, i3 by B {A,C} -> 5
    assert (t1["expected_published"], t1["expected_injected"]) == (4, 5)
    assert t1["received"] == 4  # (A,e1) no longer counted
    assert t1["coverage_injected"] == pytest.approx(4 / 5)
    r2 = _run(res, "r2")
    assert (r2["expected_published"], r2["received"], r2["coverage_published"]) == (1, 1, 1.0)


def test_cli_report(
    spark: SparkSession,
    run_dirs: tuple[Path, Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "cli"
    rc = cli_main(["report", str(run_dirs[1]), "--out", str(out), "--no-plots"])
    assert rc == 0
    assert "report:" in capsys.readouterr().out
    md = (out / "report.md").read_text()
    assert "| r2 | floodsub |" in md and "50.0 %" in md
    assert spark.sparkContext._jsc is not None  # the shared session was not stopped


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli_main(["report", str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    assert rc == 1 and "run directory not found" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    rc = cli_main(["report", str(empty), "--out", str(tmp_path / "o")])
    assert rc == 1 and "no records found" in capsys.readouterr().err
    rc = cli_main(["report", str(empty), "--out", str(empty / "x")])
    assert rc == 1 and "inside RUN_DIR" in capsys.readouterr().err


def test_damaged_gzip_inputs_are_salvaged_and_reported(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A node killed while writing leaves a truncated gzip: Spark alone would abort
    the job; the report reads what is readable and names the damaged files."""
    lines = [json.dumps(x) + "\n" for x in _run2()]
    k = len(lines) // 2
    run = tmp_path / "damaged"
    run.mkdir()
    whole = gzip.compress("".join(lines[:k]).encode())
    cut = gzip.compress("".join(lines[k:]).encode())[:15]  # header and 5 bytes of the next member
    (run / "a.jsonl.gz").write_bytes(whole + cut)
    (run / "garbage.jsonl.gz").write_bytes(b"this is not gzip\n")
    (run / "empty.jsonl.gz").write_bytes(b"")
    out = tmp_path / "out"
    rc = cli_main(["report", str(run), "--out", str(out), "--no-plots"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert f"records: {k:,} valid, 0 rejected" in printed
    assert "damaged input files: 2" in printed
    md = (out / "report.md").read_text()
    damaged = md.split("## Damaged input files", 1)[1].split("## ", 1)[0]
    assert "a.jsonl.gz | unexpected end of the gzip stream (truncated file) | " + str(k) in damaged
    assert "garbage.jsonl.gz | corrupt gzip data" in damaged and "empty.jsonl.gz" not in damaged
    assert (run / "a.jsonl.gz").read_bytes() == whole + cut  # inputs are never modified


def test_meta_topics_are_control_traffic(result: job.ReportResult) -> None:
    meta = {t["topic"]: t["meta"] for t in result.topics if t["run"] == "r2"}
    # meta-t1 names an existing topic; meta-x does not (no topic x)
    assert meta == {"t1": False, "meta-t1": True, "meta-x": False, "t0": False}
    r2 = _run(result, "r2")
    # workload: t1 (f1) + meta-x (g2); the descriptor m1 and its delivery are apart
    assert (r2["topics"], r2["injected"], r2["published"], r2["deliveries"]) == (3, 2, 2, 1)
    assert (r2["meta_topics"], r2["meta_events"], r2["meta_deliveries"]) == (1, 1, 1)
    # meta-x has no subscriber (n/a): the total stays f1 at {X, Y}, received by Y
    assert (r2["expected_published"], r2["received"]) == (2, 1)
    # latency over workload deliveries only: (Y, f1) 0.01, not (Y, m1) 0.1
    (lat,) = [
        r for r in result.latency if (r["run"], r["topic"], r["class"]) == ("r2", job.ALL, "all")
    ]
    assert (lat["count"], lat["max"]) == (1, 0.01)
    r2_topics = [t for t in result.topics if t["run"] == "r2"]
    # plotted: workload topics with events, most events first, then by name; t0 is not
    assert [t["topic"] for t in plotted_topics(r2_topics)] == ["meta-x", "t1"]


def test_run_without_events_gets_a_note(result: job.ReportResult) -> None:
    r3 = _run(result, "r3")
    assert (r3["topics"], r3["injected"], r3["published"]) == (1, 0, 0)
    assert r3["coverage_injected"] is None and r3["coverage_published"] is None
    assert (r3["meta_topics"], r3["meta_events"], r3["meta_deliveries"]) == (1, 1, 0)
    md = result.report_path.read_text()
    section = md[md.index("## Run `r3`") :]
    assert "**No workload events in this run**" in section
    # the workload topics as a list, not a table of n/a
    work = section[: section.index("### Control traffic")]
    assert "Subscribers per workload topic: `t5` 1." in work and "| t5 |" not in work
    assert "No deliveries in this run." in section
    # control traffic: meta-t5, 1 event, 0 deliveries, 1 RPC sent
    assert "| meta-t5 | 1 | 0 | 1 |" in section
    assert not any("r3" in p.name for p in result.plots)  # nothing to plot


def test_report_separates_control_traffic(result: job.ReportResult) -> None:
    md = result.report_path.read_text()
    section = md[md.index("## Run `r2`") : md.index("## Run `r3`")]
    work, ctl = section.split("### Control traffic (meta topics)")
    assert "| t0 |" in work and "| meta-x |" in work and "| meta-t1 |" not in work
    assert "1 topic(s) with no event are listed but not plotted." in work
    assert "| meta-t1 | 1 | 1 | 0 |" in ctl and "| **total** | 1 | 1 | 0 |" in ctl
