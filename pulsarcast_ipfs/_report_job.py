"""The report job's command line, shared by ``pulsarcast report`` (the CLI adds it as
a sub-command) and ``spark-submit spark/report_job.py`` (which runs :func:`main`); see
docs/metrics.md. PySpark is imported only when the job runs, so that the CLI's
``--help`` works without the ``spark`` extra. Neither ``spark/`` nor this module
imports the CLI.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

__all__ = ["DESCRIPTION", "add_arguments", "main", "out_of_memory", "run"]

DESCRIPTION = """\
Compute the measures of the Pulsarcast evaluation from metric records:
events injected / published / received and subscription coverage per topic,
delivery latency, RPC messages per topic and per node, CPU / memory / network,
and a side-by-side comparison of runs. Reads JSON lines (*.jsonl, rotated
*.jsonl.*, gzip allowed) and Parquet (*.parquet) below each RUN_DIR; writes
Parquet tables to OUT/tables, OUT/report.md and PNG plots to OUT/plots.
Malformed or foreign records are kept in OUT/tables/rejected and counted."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="directory (or s3a://... path) holding one run's records",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument(
        "--master",
        default=None,
        metavar="URL",
        help="Spark master (default: local[*], or what spark-submit chose)",
    )
    p.add_argument("--format", default="md", choices=["md"], help="report format (md)")
    p.add_argument(
        "--driver-memory",
        default=None,
        metavar="SIZE",
        help="driver memory when Spark is started here, e.g. 4g (default: a quarter of "
        "this machine's memory, 2g to 8g)",
    )
    p.add_argument(
        "--exclude-publisher",
        action="store_true",
        help="do not expect delivery of an event to the node that published it",
    )
    p.add_argument(
        "--bucket",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="time bucket aligning resource samples across nodes (default 10)",
    )
    p.add_argument(
        "--report-dir",
        default=None,
        metavar="DIR",
        help="local directory for report.md and plots when --out is remote",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def _err(msg: str) -> int:
    print(f"Error: {msg}", file=sys.stderr)
    return 1


def out_of_memory(exc: BaseException) -> bool:
    """Whether a Spark (Py4J) failure was the JVM running out of heap."""
    text = f"{type(exc).__name__}: {exc}"
    return "OutOfMemoryError" in text or "Java heap space" in text


def run(args: argparse.Namespace) -> int:
    """Run the report job; 0 on success, 1 with a message on a clear error."""
    try:
        import spark as job
    except ImportError as exc:
        return _err(f"the report needs the 'spark' extra (pyspark, matplotlib): {exc}")
    if args.bucket <= 0:
        return _err("--bucket must be positive")
    if args.driver_memory is not None and not re.fullmatch(
        r"[1-9][0-9]*[kmgt]?", args.driver_memory.lower()
    ):
        return _err(
            f"--driver-memory: expected a size such as 4g or 512m, got {args.driver_memory!r}"
        )
    cfg = job.ReportConfig(
        run_dirs=tuple(args.run_dirs),
        out=args.out,
        report_dir=args.report_dir,
        measures=job.MeasureConfig(
            exclude_publisher=args.exclude_publisher, bucket_seconds=args.bucket
        ),
        plots=not args.no_plots,
    )
    from pyspark.sql import SparkSession

    owned = SparkSession.getActiveSession() is None
    try:
        job.check_inputs(cfg.run_dirs, cfg.out)
        job.default_progress("starting Spark" if owned else "using the active Spark session")
        session = job.get_session(
            job.SessionConfig(master=args.master, driver_memory=args.driver_memory)
        )
    except (job.ReportError, job.JavaNotFound) as exc:
        return _err(str(exc))
    try:
        result = job.run_report(session, cfg, progress=job.default_progress)
    except job.ReportError as exc:
        return _err(str(exc))
    except Exception as exc:
        if out_of_memory(exc):
            return _err(
                "Spark ran out of memory; give the driver more with --driver-memory "
                "(e.g. --driver-memory 8g), or run the job on a cluster (docs/metrics.md)"
            )
        raise
    finally:
        if owned:
            session.stop()
    print(f"report: {result.report_path}")
    print(f"tables: {result.tables_dir}")
    print(f"records: {result.valid_records:,} valid, {result.rejected_records:,} rejected")
    if result.damaged_files:
        print(
            f"damaged input files: {len(result.damaged_files)} "
            "(read up to the damage; listed in the report)"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry point (``spark-submit spark/report_job.py ...``)."""
    p = argparse.ArgumentParser(
        prog="report_job.py",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    return run(p.parse_args(argv))
