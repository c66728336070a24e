"""The checked-in JSON-Schema file equals what records.FIELDS generates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pulsarcast_ipfs.records import COMMON_FIELDS, FIELDS, RecordKind
from spark import _schema

SCHEMA_PATH = Path(_schema.__file__).with_name(_schema.SCHEMA_FILE)


def test_schema_file_is_generated_from_fields() -> None:
    on_disk = json.loads(SCHEMA_PATH.read_text())
    assert on_disk == _schema.json_schema(), (
        "stale schema file; regenerate: python -m spark._schema > spark/metrics_schema_v1.json"
    )


def test_schema_covers_every_kind_and_field() -> None:
    doc = _schema.load_json_schema()
    common, per_kind = _schema.required_fields(doc)
    assert common == [n for n, (_t, req) in COMMON_FIELDS.items() if req]
    assert set(per_kind) == {k.value for k in RecordKind}
    for kind, fields in FIELDS.items():
        assert per_kind[kind.value] == [n for n, (_t, req) in fields.items() if req]
    cols = _schema.column_types(doc)
    every = set(COMMON_FIELDS) | {n for f in FIELDS.values() for n in f}
    assert set(cols) == every
    assert cols["ts"] == "double" and cols["v"] == "bigint" and cols["recovered"] == "boolean"
    assert cols["children"] == "array<string>"
    assert _schema.spark_schema(doc).endswith(f"`{_schema.CORRUPT_COLUMN}` string")


def test_conflicting_types_are_refused() -> None:
    doc = _schema.json_schema()
    doc["allOf"][0]["then"]["properties"]["topic"] = {"type": "integer"}
    with pytest.raises(ValueError, match="two Spark types"):
        _schema.spark_schema(doc)
