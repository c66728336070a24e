"""Ingest: read run directories, validate every record, keep what fails.

Theory of operation
-------------------
The issue's rule: "malformed or foreign records are counted and reported, never
silently dropped and never crash the job". Each RUN_DIR is read twice over by
file type, never by file order:

* JSON lines — every ``*.jsonl`` file and rotated ``*.jsonl.*`` file below the
  directory (``.gz`` is decompressed by Spark from the suffix) — is read as
  *text*, one row per line, and parsed with ``from_json`` against the explicit
  schema derived from ``spark/metrics_schema_v1.json`` in ``PERMISSIVE`` mode
  with a ``columnNameOfCorruptRecord``. Reading text first keeps the raw line for
  the ``rejected`` table and rejects lines that are JSON but not an object.
* Parquet (``*.parquet``) is read with its own schema and each known column is
  ``try_cast`` to the schema's type; a value that does not cast is a rejection.

A gzip file that cannot be read to its end (a node killed while writing, a
truncated copy) would make Spark abort the whole job. Local run directories are
therefore checked first (:func:`salvage_damaged_gzip`): every ``.gz`` input is
decompressed once on the driver; a damaged one is left out of the read and what
could be decompressed before the damage is written to ``OUT/salvaged/`` and read
instead (its last, cut line becomes a ``malformed`` rejection). The report lists
every damaged file with its error and the lines salvaged. Remote directories
(``s3a://...``) are not pre-checked.

Every row then gets a ``reject_reason`` (``NULL`` when valid), the first that applies:
``malformed`` (not a JSON object), ``bad_type`` (a field of the wrong type),
``unsupported_version`` (``v`` is not 1), ``missing_field:<name>`` (a required
common field, in schema order), ``unknown_kind``, ``missing_field:<name>`` (a
field the kind requires, per ``FIELDS``). Blank lines are not records and are
skipped. Known leniency of Spark's JSON reader: a number where a string is
expected is kept as its text (``"node": 5`` reads as ``"5"``).
"""

from __future__ import annotations

import fnmatch
import hashlib
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from spark._schema import CORRUPT_COLUMN, column_types, required_fields, spark_schema

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "JSONL_GLOB",
    "PARQUET_GLOB",
    "REJECTED",
    "DamagedFile",
    "read_run_dir",
    "salvage_damaged_gzip",
]

JSONL_GLOB: Final = "{*.jsonl,*.jsonl.*}"
PARQUET_GLOB: Final = "*.parquet"
REJECTED: Final = "_rejected"
"""Value of the ``kind_part`` partition column for rejected rows."""

_JSON_OPTIONS: Final = {
    "mode": "PERMISSIVE",
    "columnNameOfCorruptRecord": CORRUPT_COLUMN,
    "allowNonNumericNumbers": "false",
}


def _reason(base: Column) -> Column:
    """The rejection reason for a parsed row (``base`` is the format-level reason)."""
    from pyspark.sql import functions as F

    common, per_kind = required_fields()
    expr = F.when(base.isNotNull(), base)
    expr = expr.when(F.col("v").isNotNull() & (F.col("v") != 1), F.lit("unsupported_version"))
    for name in common:
        expr = expr.when(F.col(name).isNull(), F.lit(f"missing_field:{name}"))
    expr = expr.when(~F.col("kind").isin(*per_kind), F.lit("unknown_kind"))
    for kind, names in per_kind.items():
        for name in names:
            expr = expr.when(
                (F.col("kind") == kind) & F.col(name).isNull(), F.lit(f"missing_field:{name}")
            )
    return expr.otherwise(F.lit(None).cast("string"))


_JSONL_PATTERNS: Final = ("*.jsonl", "*.jsonl.*")
_CHUNK: Final = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class DamagedFile:
    """A gzip input that could not be read to its end."""

    path: str
    error: str
    salvaged_to: str
    salvaged_lines: int


def _jsonl_files(root: Path) -> list[Path]:
    """The JSON-lines inputs below ``root``, as Spark's recursive lookup sees them
    (names starting with ``.`` or ``_`` are hidden, in files and directories)."""
    found: list[Path] = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).parts
        if any(part.startswith((".", "_")) for part in rel) or not p.is_file():
            continue
        if any(fnmatch.fnmatch(p.name, pat) for pat in _JSONL_PATTERNS):
            found.append(p)
    return found


def salvage_damaged_gzip(run_dir: str, salvage_root: Path) -> list[DamagedFile]:
    """Check every gzip JSON-lines file below the local ``run_dir``; write what can
    be read of each damaged one under ``salvage_root`` (see the module docstring)."""
    damaged: list[DamagedFile] = []
    root = Path(run_dir)
    for p in _jsonl_files(root):
        if not p.name.endswith(".gz"):
            continue
        error, _ = _gzip_check(p)
        if error is None:
            continue
        tag = hashlib.sha256(str(p.resolve()).encode()).hexdigest()[:12]
        target = salvage_root / tag / (p.name[: -len(".gz")] or "salvaged.jsonl")
        target.parent.mkdir(parents=True, exist_ok=True)
        _, lines = _gzip_check(p, sink=target)
        damaged.append(
            DamagedFile(path=str(p), error=error, salvaged_to=str(target), salvaged_lines=lines)
        )
    return damaged


def _gzip_check(path: Path, sink: Path | None = None) -> tuple[str | None, int]:
    """``(error or None, complete lines)`` of a gzip file, copying its readable
    prefix to ``sink`` when given."""
    lines = 0
    out = sink.open("wb") if sink is not None else None
    try:
        d = zlib.decompressobj(wbits=31)
        started = False  # inside a member
        with path.open("rb") as f:
            while chunk := f.read(_CHUNK):
                while chunk:
                    started = True
                    data = d.decompress(chunk)
                    lines += data.count(b"\n")
                    if out is not None:
                        out.write(data)
                    if not d.eof:
                        break
                    chunk = d.unused_data
                    d = zlib.decompressobj(wbits=31)
                    started = False
        if started:
            return "unexpected end of the gzip stream (truncated file)", lines
        return None, lines
    except zlib.error as exc:
        return f"corrupt gzip data: {exc}", lines
    except OSError as exc:
        return f"cannot read: {exc}", lines
    finally:
        if out is not None:
            out.close()


def _read_jsonl(spark: SparkSession, path: str, damaged: tuple[DamagedFile, ...] = ()) -> DataFrame:
    from pyspark.sql import functions as F

    if damaged:
        skip = {d.path for d in damaged}
        files = [str(p) for p in _jsonl_files(Path(path)) if str(p) not in skip]
        files += [d.salvaged_to for d in damaged]
        text = spark.read.text(files)
    else:
        text = (
            spark.read.option("recursiveFileLookup", "true")
            .option("pathGlobFilter", JSONL_GLOB)
            .text(path)
        )
    parsed = text.where(F.trim("value") != "").select(
        F.col("value").alias("raw"),
        F.input_file_name().alias("source"),
        F.from_json("value", spark_schema(), _JSON_OPTIONS).alias("r"),
    )
    is_object = F.from_json("raw", "map<string,string>", {"allowNonNumericNumbers": "false"})
    version = F.get_json_object("raw", "$.v")
    fmt = (
        F.when(F.col(CORRUPT_COLUMN).isNull(), F.lit(None).cast("string"))
        .when(is_object.isNull(), F.lit("malformed"))
        .when(version.isNotNull() & (version != "1"), F.lit("unsupported_version"))
        .otherwise(F.lit("bad_type"))
    )
    cols = list(column_types())
    flat = parsed.select(
        "raw",
        "source",
        *[F.col(f"r.{c}").alias(c) for c in cols],
        F.col(f"r.{CORRUPT_COLUMN}").alias(CORRUPT_COLUMN),
    )
    return flat.withColumn("reject_reason", _reason(fmt)).drop(CORRUPT_COLUMN)


def _read_parquet(spark: SparkSession, path: str) -> DataFrame | None:
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    try:
        pq = (
            spark.read.option("recursiveFileLookup", "true")
            .option("pathGlobFilter", PARQUET_GLOB)
            .parquet(path)
        )
    except AnalysisException as exc:
        if "UNABLE_TO_INFER_SCHEMA" in str(exc) or "PATH_NOT_FOUND" in str(exc):
            return None  # no Parquet files under this directory
        raise
    present = set(pq.columns)
    types = column_types()
    selected: list[Column] = [
        F.to_json(F.struct(*[F.col(f"`{c}`") for c in pq.columns])).alias("raw"),
        F.input_file_name().alias("source"),
    ]
    bad: Column = F.lit(False)
    for name, typ in types.items():
        if name in present:
            cast = F.col(f"`{name}`").try_cast(typ)
            bad = bad | (F.col(f"`{name}`").isNotNull() & cast.isNull())
        else:
            cast = F.lit(None).cast(typ)
        selected.append(cast.alias(name))
    selected.append(F.when(bad, F.lit("bad_type")).alias("_fmt"))
    flat = pq.select(*selected)
    return flat.withColumn("reject_reason", _reason(F.col("_fmt"))).drop("_fmt")


def read_run_dir(
    spark: SparkSession, path: str, *, damaged: tuple[DamagedFile, ...] = ()
) -> DataFrame:
    """Every record below ``path``: the schema's columns plus ``run_dir``,
    ``source`` (file URI), ``raw`` (the line, or the row as JSON; ``NULL`` when
    valid), ``reject_reason`` (``NULL`` when valid) and ``kind_part`` (the kind, or
    :data:`REJECTED`)."""
    from pyspark.sql import functions as F

    df = _read_jsonl(spark, path, damaged)
    pq = _read_parquet(spark, path)
    if pq is not None:
        df = df.unionByName(pq)
    valid = F.col("reject_reason").isNull()
    return df.select(
        *column_types(),
        F.lit(path).alias("run_dir"),
        "source",
        F.when(valid, F.lit(None).cast("string")).otherwise(F.col("raw")).alias("raw"),
        "reject_reason",
        F.when(valid, F.col("kind")).otherwise(F.lit(REJECTED)).alias("kind_part"),
    )
