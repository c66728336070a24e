"""The report job: ingest → validated records → measures → tables, Markdown, plots.

Theory of operation
-------------------
Stages, each one Spark job over files (nothing big is collected):

1. *ingest*: every RUN_DIR is read and validated (``spark._ingest``) and
   written once to ``OUT/tables/records`` (Parquet, partitioned by
   ``kind_part``: the record kind, or ``_rejected``). Later stages read only the
   partitions and columns they need, so the JSON is parsed exactly once.
2. *rejected*: ``OUT/tables/rejected`` (raw line, file, reason) and the counts
   by reason — never silently dropped.
3. *measures* (``spark._measures``): ``deliveries``, ``topics``, ``latency``,
   ``rpc_topics``, ``rpc_nodes``, ``rpc_summary``, ``resources_nodes``,
   ``resources_summary``, ``kinds`` and the comparison table ``runs``.
4. *render*: only the small tables (per topic, per run) come to the driver for
   ``report.md`` and the PNG plots.

The output directory may be any Hadoop path (``s3a://...``) for the tables;
the Markdown and PNGs are written by the driver to a local directory
(``OUT`` itself when it is local, else ``report_dir``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark import _render as R
from spark._ingest import REJECTED, DamagedFile, read_run_dir, salvage_damaged_gzip
from spark._measures import (
    ALL,
    KEY,
    MeasureConfig,
    deliveries,
    kind_counts,
    latency_table,
    resource_tables,
    rpc_tables,
    run_totals,
    subscription_intervals,
    topic_table,
)

__all__ = [
    "InputNotFound",
    "NoRecords",
    "ReportConfig",
    "ReportError",
    "ReportResult",
    "run_report",
]


class ReportError(Exception):
    """The report cannot be made (bad input, nothing to report)."""


class InputNotFound(ReportError):
    """A RUN_DIR does not exist."""


class NoRecords(ReportError):
    """No valid record was found in any RUN_DIR."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportConfig:
    """What to read and where to write."""

    run_dirs: tuple[str, ...]
    out: str
    report_dir: str | None = None
    """Local directory for report.md and plots when ``out`` is not local."""
    measures: MeasureConfig = field(default_factory=MeasureConfig)
    plots: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportResult:
    """What the job produced; the small tables as plain dicts."""

    tables_dir: str
    report_path: Path
    plots: tuple[Path, ...]
    valid_records: int
    rejected_records: int
    rejected_by_reason: dict[str, int]
    runs: tuple[dict[str, Any], ...]
    topics: tuple[dict[str, Any], ...]
    latency: tuple[dict[str, Any], ...]
    rpc_topics: tuple[dict[str, Any], ...]
    rpc_summary: tuple[dict[str, Any], ...]
    resources: tuple[dict[str, Any], ...]
    damaged_files: tuple[DamagedFile, ...] = ()


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def _rows(df: DataFrame) -> tuple[dict[str, Any], ...]:
    return tuple(r.asDict() for r in df.collect())


def _key(r: dict[str, Any]) -> tuple[str, str]:
    return (str(r["run"]), str(r["system"]))


def _sorted(
    rows: Sequence[dict[str, Any]], key: Callable[[dict[str, Any]], Any]
) -> tuple[dict[str, Any], ...]:
    return tuple(sorted(rows, key=key))


def check_inputs(run_dirs: Sequence[str], out: str) -> None:
    """Local RUN_DIRs must exist, and OUT must not lie inside one of them."""
    if not run_dirs:
        raise InputNotFound("give at least one RUN_DIR")
    for d in run_dirs:
        if _is_remote(d):
            continue
        p = Path(_local(d))
        if not p.is_dir():
            raise InputNotFound(f"run directory not found: {d}")
        if not _is_remote(out):
            o = Path(_local(out)).resolve()
            if o == p.resolve() or p.resolve() in o.parents:
                raise ReportError(f"--out {out} is inside RUN_DIR {d}; choose another directory")


def _local_report_dir(cfg: ReportConfig) -> Path:
    """Where the driver writes the Markdown, the plots and salvaged inputs."""
    if cfg.report_dir is None and not _is_remote(cfg.out):
        return Path(_local(cfg.out))
    if cfg.report_dir is not None:
        return Path(cfg.report_dir)
    return Path("pulsarcast-report")


def run_report(
    spark: SparkSession, cfg: ReportConfig, *, progress: Callable[[str], None] = lambda s: None
) -> ReportResult:
    """Run every stage; see the module docstring."""
    check_inputs(cfg.run_dirs, cfg.out)
    t0 = time.monotonic()

    def stage(msg: str) -> None:
        progress(f"[{time.monotonic() - t0:7.1f} s] {msg}")

    tables = cfg.out.rstrip("/") + "/tables"

    def write(df: DataFrame, name: str, *, small: bool = True) -> DataFrame:
        # small aggregates (per topic, per run, per node) go to one file each
        path = f"{tables}/{name}"
        (df.coalesce(1) if small else df).write.mode("overwrite").parquet(path)
        return spark.read.parquet(path)

    local_dir = _local_report_dir(cfg)
    stage("ingest: checking gzip inputs")
    damaged: list[DamagedFile] = []
    parts = []
    for d in cfg.run_dirs:
        bad: tuple[DamagedFile, ...] = ()
        if not _is_remote(d):
            bad = tuple(salvage_damaged_gzip(_local(d), local_dir / "salvaged"))
        for f in bad:
            progress(
                f"warning: damaged input {f.path}: {f.error}; {f.salvaged_lines:,} lines salvaged"
            )
        damaged += bad
        parts.append(read_run_dir(spark, d, damaged=bad))
    stage(f"ingest: reading and validating {len(cfg.run_dirs)} run dir(s)")
    allrec = parts[0]
    for p in parts[1:]:
        allrec = allrec.unionByName(p)
    allrec.write.mode("overwrite").partitionBy("kind_part").parquet(f"{tables}/records")
    try:
        stored = spark.read.parquet(f"{tables}/records")
    except AnalysisException as exc:  # an empty write leaves no Parquet file
        if "UNABLE_TO_INFER_SCHEMA" not in str(exc):
            raise
        stored = None
    if stored is None or "kind_part" not in stored.columns:
        raise NoRecords(f"no records found in {', '.join(cfg.run_dirs)}")

    stage("rejected records")
    rejected = write(
        stored.where(F.col("kind_part") == REJECTED).select(
            "run_dir", "source", "reject_reason", "raw", "run", "system", "node", "kind", "ts"
        ),
        "rejected",
        small=False,
    )
    rej_by_source = _rows(
        write(
            rejected.groupBy("run_dir", "source", "reject_reason").agg(
                F.count("*").alias("records")
            ),
            "rejected_counts",
        )
    )
    by_reason: dict[str, int] = {}
    by_dir: dict[tuple[str, str], int] = {}
    for r in rej_by_source:
        n = int(r["records"])
        by_reason[r["reject_reason"]] = by_reason.get(r["reject_reason"], 0) + n
        k = (r["run_dir"], r["reject_reason"])
        by_dir[k] = by_dir.get(k, 0) + n
    rej_counts = tuple(
        {"run_dir": d, "reject_reason": why, "records": n} for (d, why), n in sorted(by_dir.items())
    )
    # every measure reads the valid records: keep them in memory (spilling to
    # disk) instead of scanning the Parquet files again for each table
    rec = (
        stored.where(F.col("kind_part") != REJECTED)
        .drop("raw", "reject_reason", "kind_part", "source", "run_dir")
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    kinds = write(kind_counts(rec), "kinds")
    kind_rows = _rows(kinds)
    n_valid = sum(int(r["records"]) for r in kind_rows)
    n_rejected = sum(by_reason.values())
    stage(f"{n_valid:,} valid records, {n_rejected:,} rejected")
    if n_valid == 0:
        rec.unpersist()
        raise NoRecords(
            f"no valid records found in {', '.join(cfg.run_dirs)} ({n_rejected:,} rejected)"
        )

    stage("subscriptions and deliveries")
    iv = write(subscription_intervals(rec), "subscriptions", small=False)
    dd = write(deliveries(rec), "deliveries", small=False)
    stage("events and coverage per topic")
    topics_df = write(topic_table(rec, dd, iv, cfg.measures), "topics")
    totals_df = write(run_totals(topics_df), "totals")
    stage("latency")
    meta_topics = topics_df.where(F.col("meta")).select(*KEY, "topic")
    workload_dd = dd.join(meta_topics, on=[*KEY, "topic"], how="left_anti")
    lat_df = write(latency_table(workload_dd), "latency")
    stage("RPC messages")
    rpc_topic, rpc_node, rpc_sum = rpc_tables(rec)
    rpc_topic = write(rpc_topic, "rpc_topics")
    write(rpc_node, "rpc_nodes", small=False)
    rpc_sum = write(rpc_sum, "rpc_summary")
    stage("resources")
    res_node, res_run = resource_tables(rec, cfg.measures)
    write(res_node, "resources_nodes", small=False)
    res_run = write(res_run, "resources_summary")

    stage("run comparison")
    nodes = kinds.groupBy(*KEY).agg(F.sum("records").alias("records"))
    lat_all = lat_df.where((F.col("topic") == ALL) & (F.col("class") == "all")).select(
        *KEY, *[F.col(c).alias(f"latency_{c}") for c in ("p50", "p95", "p99", "max")]
    )
    rpc_all = (
        rpc_sum.select(*KEY)
        .join(rpc_topic.where(F.col("topic") == ALL), list(KEY), "left")
        .select(
            *KEY,
            F.coalesce("sent", F.lit(0)).alias("rpc_sent"),
            F.coalesce("bytes_sent", F.lit(0)).alias("rpc_bytes_sent"),
        )
    )
    runs_df = (
        totals_df.join(nodes, list(KEY), "full")
        .join(lat_all, list(KEY), "left")
        .join(rpc_all, list(KEY), "left")
        .join(
            rpc_sum.select(
                *KEY,
                "nodes",
                F.col("sent_mean").alias("rpc_sent_mean"),
                F.col("sent_std").alias("rpc_sent_std"),
                F.col("sent_p95").alias("rpc_sent_p95"),
                F.col("sent_p99").alias("rpc_sent_p99"),
                F.col("sent_max").alias("rpc_sent_max"),
            ),
            list(KEY),
            "left",
        )
        .join(
            res_run.select(
                *KEY,
                "cluster_cpu_mean",
                "cluster_mem_max",
                "node_mem_mean",
                "node_mem_p99",
                "cluster_bytes_out",
            ),
            list(KEY),
            "left",
        )
    )
    # small tables: collected once, sorted on the driver (no Spark sort jobs)
    runs = _sorted(_rows(write(runs_df, "runs")), lambda r: _key(r))
    topics = _sorted(
        _rows(topics_df),
        lambda r: (*_key(r), -int(r["injected"]), -int(r["published"]), r["topic"]),
    )
    latency = _sorted(_rows(lat_df), lambda r: (*_key(r), r["topic"], r["class"]))
    rpc_topics = _sorted(_rows(rpc_topic), lambda r: (*_key(r), -int(r["sent"] or 0), r["topic"]))
    rpc_summary = _sorted(_rows(rpc_sum), lambda r: _key(r))
    resources = _sorted(_rows(res_run), lambda r: _key(r))
    rec.unpersist()

    stage("report and plots")
    plot_dir = local_dir / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)
    plots: list[Path] = []
    if cfg.plots:
        for run in runs:
            s = R.slug(run["run"], run["system"])
            trs = [t for t in topics if (t["run"], t["system"]) == (run["run"], run["system"])]
            if not R.plotted_topics(trs):
                continue  # nothing to draw: the report says so
            title = f"{run['run']} ({run['system']})"
            p1, p2 = plot_dir / f"events_{s}.png", plot_dir / f"coverage_{s}.png"
            R.plot_events(trs, f"Events per topic — {title}", p1)
            R.plot_coverage(trs, f"Subscription coverage per topic — {title}", p2)
            plots += [p1, p2]
        pc = plot_dir / "comparison.png"
        R.plot_comparison(runs, pc)
        plots.append(pc)
    report_path = local_dir / "report.md"
    report_path.write_text(
        _markdown(
            cfg=cfg,
            tables=tables,
            n_valid=n_valid,
            rej_counts=rej_counts,
            damaged=damaged,
            runs=runs,
            topics=topics,
            latency=latency,
            rpc_topics=rpc_topics,
            rpc_summary=rpc_summary,
            resources=resources,
            plots=[p.relative_to(local_dir) for p in plots],
        ),
        encoding="utf-8",
    )
    stage(f"done: {report_path}")
    return ReportResult(
        tables_dir=tables,
        report_path=report_path,
        plots=tuple(plots),
        valid_records=n_valid,
        rejected_records=n_rejected,
        rejected_by_reason=by_reason,
        damaged_files=tuple(damaged),
        runs=runs,
        topics=topics,
        latency=latency,
        rpc_topics=rpc_topics,
        rpc_summary=rpc_summary,
        resources=resources,
    )


_META_COLS = [
    ("topic", "meta topic", ""),
    ("published", "events", "n"),
    ("deliveries", "deliveries", "n"),
    ("rpc_sent", "RPCs sent", "n"),
]


def _no_events_note(run: dict[str, Any], meta: Sequence[dict[str, Any]]) -> str:
    """The note that replaces a topic table of n/a when a run has no workload event."""
    ctl = sum(int(t["published"]) for t in meta)
    parts = [
        f"**No workload events in this run**: no event was injected or published on a "
        f"workload topic ({run.get('records') or 0:,} records from {run.get('nodes') or 0:,} "
        f"nodes; {run.get('topics') or 0:,} workload topic(s) seen).",
        "Coverage and latency are undefined (n/a), not 0 %.",
    ]
    if ctl:
        parts.append(f"Only control traffic was recorded: {ctl:,} meta-topic event(s), below.")
    return " ".join(parts)


_TOPIC_COLS = [
    ("topic", "topic", ""),
    ("subscribers", "subscribers", "n"),
    ("injected", "injected", "n"),
    ("published", "published", "n"),
    ("deliveries", "received", "n"),
    ("duplicates", "duplicates", "n"),
    ("recovered", "recovered", "n"),
    ("expected_injected", "expected (inj.)", "n"),
    ("expected_published", "expected (pub.)", "n"),
    ("received", "counted", "n"),
    ("coverage_injected", "coverage vs injected", "pct"),
    ("coverage_published", "coverage vs published", "pct"),
]


def _markdown(
    *,
    cfg: ReportConfig,
    tables: str,
    n_valid: int,
    rej_counts: Sequence[dict[str, Any]],
    damaged: Sequence[DamagedFile],
    runs: Sequence[dict[str, Any]],
    topics: Sequence[dict[str, Any]],
    latency: Sequence[dict[str, Any]],
    rpc_topics: Sequence[dict[str, Any]],
    rpc_summary: Sequence[dict[str, Any]],
    resources: Sequence[dict[str, Any]],
    plots: Sequence[Path],
) -> str:
    out: list[str] = ["# Pulsarcast metrics report", ""]
    out.append("Inputs: " + ", ".join(f"`{d}`" for d in cfg.run_dirs) + ".")
    n_rej = sum(int(r["records"]) for r in rej_counts)
    out.append(f"Valid records: {n_valid:,}; rejected: {n_rej:,}. Tables (Parquet): `{tables}`.")
    out.append(
        "Definitions: see docs/metrics.md (coverage = received ÷ Σ over events of the "
        "subscribers of the topic at the event's time; n/a = no subscriber, left out of totals"
        + ("; the publishing node is excluded" if cfg.measures.exclude_publisher else "")
        + ")."
    )
    out += ["", "## Rejected records", ""]
    if rej_counts:
        out.append(
            R.markdown_table(
                rej_counts,
                [
                    ("run_dir", "run dir", ""),
                    ("reject_reason", "reason", ""),
                    ("records", "records", "n"),
                ],
            )
        )
        out.append("")
        out.append("Every rejected line is kept, with its file, in the `rejected` table.")
    else:
        out.append("None.")
    if damaged:
        out += ["", "## Damaged input files", ""]
        out.append(
            R.markdown_table(
                [{"path": f.path, "error": f.error, "lines": f.salvaged_lines} for f in damaged],
                [("path", "file", ""), ("error", "error", ""), ("lines", "lines salvaged", "n")],
            )
        )
        out.append("")
        out.append(
            "What could be decompressed before the damage was read (copies under "
            "`salvaged/`); the rest of each file is lost."
        )
    out += ["", "## Runs side by side", ""]
    out.append(
        R.markdown_table(
            runs,
            [
                ("run", "run", ""),
                ("system", "system", ""),
                ("nodes", "nodes", "n"),
                ("injected", "injected", "n"),
                ("published", "published", "n"),
                ("deliveries", "received", "n"),
                ("duplicates", "dup.", "n"),
                ("coverage_injected", "coverage vs inj.", "pct"),
                ("coverage_published", "coverage vs pub.", "pct"),
                ("latency_p50", "lat. p50", "s"),
                ("latency_p99", "lat. p99", "s"),
                ("rpc_sent", "RPCs sent", "n"),
                ("rpc_sent_mean", "RPCs/node", "n"),
                ("rpc_bytes_sent", "RPC bytes", "mib"),
                ("cluster_cpu_mean", "cluster CPU", "n"),
                ("cluster_mem_max", "cluster mem max", "gib"),
                ("cluster_bytes_out", "net out", "mib"),
            ],
        )
    )
    empty = [r for r in runs if not (r.get("injected") or r.get("published"))]
    if empty:
        names = ", ".join(f"`{r['run']}` ({r['system']})" for r in empty)
        out += ["", f"No workload events in {names}: its coverage and latency are n/a."]
    ctl = [r for r in runs if r.get("meta_topics")]
    if ctl:
        out.append("")
        out.append(
            "Workload topics only: "
            + ", ".join(
                f"`{r['run']}` ({r['system']}) also published "
                f"{int(r['meta_events'] or 0):,} topic descriptors "
                f"on {int(r['meta_topics']):,} meta topics"
                for r in ctl
            )
            + " (control traffic, listed per run below)."
        )
    if any(p.name == "comparison.png" for p in plots):
        out += ["", "![runs compared](plots/comparison.png)"]
    for run in runs:
        key = (run["run"], run["system"])
        s = R.slug(*key)
        out += ["", f"## Run `{key[0]}` — system `{key[1]}`", ""]
        trs = [t for t in topics if (t["run"], t["system"]) == key]
        work = [t for t in trs if not t.get("meta")]
        meta = [t for t in trs if t.get("meta")]
        out += ["### Events and subscription coverage per topic", ""]
        no_events = not (run.get("injected") or run.get("published"))
        if no_events:
            out.append(_no_events_note(run, meta))
            if work:
                subs = ", ".join(
                    f"`{t['topic']}` {int(t['subscribers']):,}"
                    for t in sorted(work, key=lambda t: str(t["topic"]))
                )
                out += ["", f"Subscribers per workload topic: {subs}."]
        elif work:
            total = dict(run, topic="**total**", subscribers=None)
            out.append(R.markdown_table([*work, total], _TOPIC_COLS))
            extra = [
                f"{run.get('late') or 0:,} deliveries to nodes not subscribed at publication",
                f"{run.get('unpublished') or 0:,} deliveries of events with no publish record",
            ]
            out += ["", "Not counted in coverage: " + "; ".join(extra) + "."]
        idle = [t for t in work if not (t["injected"] or t["published"])]
        if idle and not no_events:
            out += ["", f"{len(idle):,} topic(s) with no event are listed but not plotted."]
        for name in (f"events_{s}.png", f"coverage_{s}.png"):
            if any(p.name == name for p in plots):
                out += ["", f"![{name}](plots/{name})"]
        if meta:
            out += ["", "### Control traffic (meta topics)", ""]
            out.append(
                "Topic descriptors published on `meta-<topic>` when a topic is created "
                "(docs/protocol.md §5); left out of the workload totals, the coverage and "
                "the plots."
            )
            out.append("")
            rpcs = {r["topic"]: r for r in rpc_topics if (r["run"], r["system"]) == key}
            mrows = [
                dict(t, rpc_sent=(rpcs.get(t["topic"]) or {}).get("sent", 0))
                for t in sorted(meta, key=lambda t: str(t["topic"]))
            ]
            mtotal = {
                "topic": "**total**",
                "published": sum(int(t["published"]) for t in mrows),
                "deliveries": sum(int(t["deliveries"]) for t in mrows),
                "rpc_sent": sum(int(t["rpc_sent"] or 0) for t in mrows),
            }
            out.append(R.markdown_table([*mrows, mtotal], _META_COLS))
        out += ["", "### Delivery latency (first delivery of each (node, event))", ""]
        lrs = [r for r in latency if (r["run"], r["system"]) == key]
        lrs.sort(key=lambda r: (r["topic"] != ALL, r["topic"], r["class"]))
        if not lrs:
            out.append("No deliveries in this run.")
        else:
            out.append(
                R.markdown_table(
                    lrs,
                    [
                        ("topic", "topic", ""),
                        ("class", "deliveries", ""),
                        ("count", "count", "n"),
                        ("p50", "p50", "s"),
                        ("p95", "p95", "s"),
                        ("p99", "p99", "s"),
                        ("max", "max", "s"),
                    ],
                )
            )
        out += ["", "### RPC messages", ""]
        rts = [r for r in rpc_topics if (r["run"], r["system"]) == key]
        if rts:
            out.append(
                R.markdown_table(
                    rts,
                    [
                        ("topic", "topic", ""),
                        ("sent", "sent", "n"),
                        ("received", "received", "n"),
                        ("bytes_sent", "bytes sent", "mib"),
                        ("bytes_received", "bytes received", "mib"),
                    ],
                )
            )
            out.append("")
        for r in rpc_summary:
            if (r["run"], r["system"]) == key:
                out.append(
                    R.markdown_table(
                        [
                            {
                                "what": w,
                                **{k: r[f"{w}_{k}"] for k in ("mean", "std", "p95", "p99", "max")},
                            }
                            for w in ("sent", "received")
                        ],
                        [
                            ("what", f"per node ({r['nodes']} nodes)", ""),
                            ("mean", "mean", "n"),
                            ("std", "sd", "n"),
                            ("p95", "p95", "n"),
                            ("p99", "p99", "n"),
                            ("max", "max", "n"),
                        ],
                    )
                )
        out += ["", "### Resources", ""]
        res = [r for r in resources if (r["run"], r["system"]) == key]
        if not res:
            out.append("No resource samples in this run.")
        for r in res:
            rows = []
            for what, unit in (("cpu", "n"), ("mem", "gib"), ("net", "mib")):
                label = {"cpu": "CPU (CPUs)", "mem": "memory", "net": "network (per s)"}[what]
                rows.append(
                    {
                        "what": label,
                        "_u": unit,
                        **{f"n_{k}": r[f"node_{what}_{k}"] for k in ("mean", "p95", "p99")},
                        **{
                            f"c_{k}": r[f"cluster_{what}_{k}"]
                            for k in ("mean", "p95", "p99", "max")
                        },
                    }
                )
            for row in rows:
                u = row["_u"]
                out.append(
                    f"- {row['what']}: per node mean {R.fmt(row['n_mean'], u)}, "
                    f"p95 {R.fmt(row['n_p95'], u)}, p99 {R.fmt(row['n_p99'], u)}; "
                    f"cluster mean {R.fmt(row['c_mean'], u)}, p95 {R.fmt(row['c_p95'], u)}, "
                    f"p99 {R.fmt(row['c_p99'], u)}, max {R.fmt(row['c_max'], u)}"
                )
            out.append(
                f"- network transmitted by the cluster: {R.fmt(r['cluster_bytes_out'], 'mib')} "
                f"out, {R.fmt(r['cluster_bytes_in'], 'mib')} in ({r['nodes']} nodes sampled)"
            )
            if r["node_cpu_mean"] is None or r["node_net_mean"] is None:
                out.append(
                    "- why n/a: CPU and network are rates between two consecutive samples "
                    "of a process; a node with fewer than two (a run shorter than the "
                    "sidecar's `--resource-interval`, 10 s by default) or samples without "
                    "bandwidth counters (no Kubo PID given to the sidecar) has none"
                )
    out.append("")
    return "\n".join(out)


def default_progress(msg: str) -> None:
    """Print a stage message to stderr."""
    print(msg, file=sys.stderr, flush=True)
