"""PySpark jobs that turn metric records (``pulsarcast_ipfs.records``) into the
measures of the Pulsarcast evaluation: tables, a Markdown report and plots.

Run with ``pulsarcast report RUN_DIR ... --out DIR`` or
``spark-submit spark/report_job.py RUN_DIR ... --out DIR``; see docs/metrics.md.
"""

from __future__ import annotations

from spark._measures import ALL, KEY, MeasureConfig
from spark._pipeline import (
    InputNotFound,
    NoRecords,
    ReportConfig,
    ReportError,
    ReportResult,
    check_inputs,
    default_progress,
    run_report,
)
from spark._schema import json_schema, load_json_schema, spark_schema
from spark._session import (
    JavaNotFound,
    SessionConfig,
    default_driver_memory,
    find_java,
    get_session,
)

__all__ = [
    "ALL",
    "KEY",
    "InputNotFound",
    "JavaNotFound",
    "MeasureConfig",
    "NoRecords",
    "ReportConfig",
    "ReportError",
    "ReportResult",
    "SessionConfig",
    "check_inputs",
    "default_driver_memory",
    "default_progress",
    "find_java",
    "get_session",
    "json_schema",
    "load_json_schema",
    "run_report",
    "spark_schema",
]
