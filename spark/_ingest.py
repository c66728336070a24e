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

Every row then gets a ``reject_reason`` (``NULL`` when valid), the first that applies:
``malformed`` (not a JSON object), ``bad_type`` (a field of the wrong type),
``unsupported_version`` (``v`` is not 1), ``missing_field:<name>`` (a required
common field, in schema order), ``unknown_kind``, ``missing_field:<name>`` (a
field the kind requires, per ``FIELDS``). Blank lines are not records and are
skipped. Known leniency of Spark's JSON reader: a number where a string is
expected is kept as its text (``"node": 5`` reads as ``"5"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from spark._schema import CORRUPT_COLUMN, column_types, required_fields, spark_schema

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["JSONL_GLOB", "PARQUET_GLOB", "REJECTED", "read_run_dir"]

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


def _read_jsonl(spark: SparkSession, path: str) -> DataFrame:
    from pyspark.sql import functions as F

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


def read_run_dir(spark: SparkSession, path: str) -> DataFrame:
    """Every record below ``path``: the schema's columns plus ``run_dir``,
    ``source`` (file URI), ``raw`` (the line, or the row as JSON; ``NULL`` when
    valid), ``reject_reason`` (``NULL`` when valid) and ``kind_part`` (the kind, or
    :data:`REJECTED`)."""
    from pyspark.sql import functions as F

    df = _read_jsonl(spark, path)
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
