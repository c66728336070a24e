"""The Spark report and :mod:`pulsarcast_ipfs.measures` agree on the same records.

The same record sets (run r1 of :func:`~pulsarcast_ipfs.testing.records_r1` and two
seeded bench-like runs of two systems) go to the Spark job, in PySpark local mode,
and to the pure module; per (run, system, topic) the tables must be equal: events,
expected and received deliveries, coverage, duplicates, latency percentiles and RPC
bytes.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import spark as job
from pulsarcast_ipfs import measures
from pulsarcast_ipfs.records import validate_record
from pulsarcast_ipfs.testing import ReportRecord, records_r1, records_random

pytestmark = pytest.mark.spark

_RUNS: dict[str, list[ReportRecord]] = {
    "r1": records_r1(),
    "bench-pulsarcast": records_random("bench-pulsarcast", "pulsarcast", seed=11),
    "bench-gossipsub": records_random("bench-gossipsub", "gossipsub", seed=12),
}
_COUNTS = tuple(f.name for f in fields(measures.TopicMeasures) if f.type == "int")
_TOPIC_COLUMNS = (*_COUNTS, "meta", "coverage_injected", "coverage_published")
_Key = tuple[str, str, str]


@pytest.fixture(scope="module")
def result(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> job.ReportResult:
    base = tmp_path_factory.mktemp("runs")
    dirs = []
    for run, recs in _RUNS.items():
        by_node: dict[str, list[str]] = {}
        for rec in recs:
            validate_record(rec)
            by_node.setdefault(rec["node"], []).append(json.dumps(rec) + "\n")
        for node, lines in by_node.items():
            (base / run).mkdir(exist_ok=True)
            (base / run / f"{node}.jsonl").write_text("".join(lines))
        dirs.append(str(base / run))
    out = tmp_path_factory.mktemp("out")
    cfg = job.ReportConfig(run_dirs=tuple(dirs), out=str(out), plots=False)
    return job.run_report(spark, cfg)


def _pure() -> dict[str, measures.RunRecords]:
    found = {}
    for run, recs in _RUNS.items():
        found[run] = measures.RunRecords()
        for rec in recs:
            found[run].add(rec)
    return found


def _system(run: str) -> str:
    return str(_RUNS[run][0]["system"])


def test_topic_tables_equal(result: job.ReportResult) -> None:
    spark_rows = {
        (r["run"], r["system"], r["topic"]): tuple(r[c] for c in _TOPIC_COLUMNS)
        for r in result.topics
    }
    pure_rows: dict[_Key, tuple[Any, ...]] = {}
    for run, rr in _pure().items():
        for topic, m in measures.topic_table(rr).items():
            pure_rows[(run, _system(run), topic)] = tuple(getattr(m, c) for c in _TOPIC_COLUMNS)
    assert pure_rows == spark_rows
    # the record sets exercise what the definitions distinguish
    named = {c: sum(row[i] for row in pure_rows.values()) for i, c in enumerate(_COUNTS)}
    assert all(named[c] > 0 for c in ("duplicates", "recovered", "late", "unpublished"))
    assert named["expected_injected"] != named["expected_published"]


def test_latency_tables_equal(result: job.ReportResult) -> None:
    spark_rows = {
        (r["run"], r["system"], r["topic"], r["class"]): (
            r["count"],
            r["p50"],
            r["p95"],
            r["p99"],
            r["max"],
        )
        for r in result.latency
    }
    pure_rows = {
        (run, _system(run), topic, cls): (lat.count, lat.p50, lat.p95, lat.p99, lat.max)
        for run, rr in _pure().items()
        for (topic, cls), lat in measures.latency_table(rr).items()
    }
    assert pure_rows == spark_rows
    assert len(pure_rows) > 20


def test_rpc_bytes_equal(result: job.ReportResult) -> None:
    spark_rows = {
        (r["run"], r["system"], r["topic"]): (r["bytes_sent"], r["bytes_received"])
        for r in result.rpc_topics
    }
    pure_rows = {
        (run, _system(run), topic): sent_received
        for run, rr in _pure().items()
        for topic, sent_received in measures.rpc_bytes_table(rr).items()
    }
    assert pure_rows == spark_rows


def test_run_totals_equal(result: job.ReportResult) -> None:
    """The run-wide sums of the workload topics (meta topics left out), and the
    duplicates over every topic as the benchmark summary counts them."""
    pure = _pure()
    for row in result.runs:
        rr = pure[row["run"]]
        topics = measures.topic_table(rr)
        work = [m for m in topics.values() if not m.meta]
        assert len(work) < len(topics) or row["run"] == "r1"
        assert row["deliveries"] == sum(m.deliveries for m in work)
        assert row["received"] == sum(m.received for m in work)
        assert row["expected_published"] == sum(m.expected_published for m in work)
        assert row["duplicates"] == sum(m.duplicates for m in work)
        assert rr.duplicates == sum(m.duplicates for m in topics.values())


def test_bench_summary_reads_the_same_figures(tmp_path: Path) -> None:
    """The benchmark summary of a run directory holding these records reports the
    module's coverage, duplicates and latency (no Spark needed to compare, but the
    tables above tie the module to Spark)."""
    from pulsarcast_ipfs.bench._summary import summarise_run

    run = "bench-pulsarcast"
    d = tmp_path / run
    d.mkdir()
    (d / "all.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _RUNS[run]))
    (d / "run.json").write_text(json.dumps({"system": "pulsarcast", "topics": ["a", "b", "c"]}))
    s = summarise_run(d)
    rr = _pure()[run]
    topics = [m for m in measures.topic_table(rr).values() if m.injected or m.published]
    assert s.received == sum(m.received for m in topics)
    assert s.expected_published == sum(m.expected_published for m in topics)
    assert s.duplicates == rr.duplicates
    lat = measures.latency_table(rr)[(measures.ALL, "all")]
    assert (s.latency_p50, s.latency_p99, s.latency_max) == (lat.p50, lat.p99, lat.max)
