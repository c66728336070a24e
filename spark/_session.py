"""The Spark session: local mode by default, quiet, small shuffles."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "JavaNotFound",
    "SessionConfig",
    "default_driver_memory",
    "find_java",
    "get_session",
]


class JavaNotFound(RuntimeError):
    """Neither ``$JAVA_HOME/bin/java`` nor ``java`` on ``PATH`` exists."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionConfig:
    """How to start Spark when no session is active (spark-submit starts its own)."""

    master: str | None = None
    """``None``: ``local[*]`` unless ``spark-submit --master`` already chose one."""
    driver_memory: str | None = None
    """``None``: :func:`default_driver_memory` (a quarter of this machine's memory)."""
    shuffle_partitions: int | None = None
    """``None``: in local mode, one per core (small local shuffles are dominated
    by per-task cost); on a cluster, Spark's default."""
    app_name: str = "pulsarcast-report"


def default_driver_memory(physical_bytes: int | None = None) -> str:
    """A quarter of the machine's physical memory, 2 to 8 GiB, as a Spark size.

    In local mode the driver's heap holds the cached records and every
    aggregation buffer; 2 GiB ran out of heap on the 7.3 million records of two
    1,000-node simulator runs, while a quarter of a laptop's memory leaves the rest
    to the Python side and the OS page cache.
    """
    if physical_bytes is None:
        try:
            physical_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            physical_bytes = 8 * 2**30
    gib = max(2, min(8, physical_bytes // 4 // 2**30))
    return f"{gib}g"


def find_java() -> str:
    """The java executable Spark will use, or raise :class:`JavaNotFound`."""
    home = os.environ.get("JAVA_HOME")
    if home:
        cand = os.path.join(home, "bin", "java")
        if os.access(cand, os.X_OK):
            return cand
    found = shutil.which("java")
    if found is None:
        raise JavaNotFound(
            "Java not found: set JAVA_HOME or put `java` (17 or newer) on PATH; Spark needs it"
        )
    return found


def _local_cores(master: str) -> int | None:
    """Cores of a ``local``/``local[N]``/``local[*]`` master, ``None`` if not local."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if m is None:
        return None
    if m.group(1) in (None,):
        return 1
    if m.group(1) == "*":
        return os.cpu_count() or 2
    return max(1, int(m.group(1)))


def get_session(config: SessionConfig | None = None) -> SparkSession:
    """The active session, or a new one built from ``config``.

    Under ``spark-submit`` the master, memory and other settings come from the
    command line; ``master`` here only applies when Python starts the JVM.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    cfg = config or SessionConfig()
    if "SPARK_ENV_LOADED" not in os.environ and "PYSPARK_GATEWAY_PORT" not in os.environ:
        find_java()
    builder = SparkSession.builder.appName(cfg.app_name)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if cfg.master is not None:
        builder = builder.master(cfg.master)
    elif not submitted:
        builder = builder.master("local[*]")
    if not submitted:
        memory = cfg.driver_memory or default_driver_memory()
        builder = builder.config("spark.driver.memory", memory)
        parts = cfg.shuffle_partitions
        if parts is None:
            parts = _local_cores(cfg.master or "local[*]")
        if parts is not None:
            builder = builder.config("spark.sql.shuffle.partitions", str(parts))
    builder = (
        builder.config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "true")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
