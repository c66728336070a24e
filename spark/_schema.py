"""The metric-record schema, version 1, in the two forms the Spark jobs need.

Theory of operation
-------------------
:data:`pulsarcast_ipfs.records.FIELDS` is the single source of the schema
(docs/protocol.md §7: "one documented schema shared by the sidecar, the simulator and
the benchmark runner"). :func:`json_schema` turns it into a JSON-Schema document,
which is checked in as ``spark/metrics_schema_v1.json`` (a test keeps the file
equal to the function's output; regenerate it with
``python -m spark._schema > spark/metrics_schema_v1.json``). The ingest stage
reads *the file* and derives from it an explicit Spark ``StructType``
(:func:`spark_schema`, one nullable column per field of any kind) and the
per-kind list of required fields (:func:`required_fields`), so what is
validated on read is exactly what is written down.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from typing import Any, Final

from pulsarcast_ipfs.records import COMMON_FIELDS, FIELDS, SCHEMA_VERSION

__all__ = [
    "CORRUPT_COLUMN",
    "SCHEMA_FILE",
    "json_schema",
    "load_json_schema",
    "required_fields",
    "spark_schema",
]

SCHEMA_FILE: Final = f"metrics_schema_v{SCHEMA_VERSION}.json"
CORRUPT_COLUMN: Final = "_corrupt_record"

# Spark types of the JSON-Schema types; "object" is only used by bw_protocols,
# whose documented shape is protocol -> {"in": int, "out": int}.
_SPARK_TYPES: Final = {
    "string": "string",
    "integer": "bigint",
    "number": "double",
    "boolean": "boolean",
    "array": "array<string>",
    "object": "map<string,map<string,bigint>>",
}


def _json_types(types: tuple[str, ...]) -> str | list[str]:
    return types[0] if len(types) == 1 else list(types)


def json_schema() -> dict[str, Any]:
    """The JSON-Schema (draft 2020-12) form of :data:`records.FIELDS`."""
    common_props: dict[str, Any] = {
        name: {"type": _json_types(types)} for name, (types, _r) in COMMON_FIELDS.items()
    }
    common_props["v"] = {"type": "integer", "const": SCHEMA_VERSION}
    common_props["kind"] = {"type": "string", "enum": [k.value for k in FIELDS]}
    branches: list[dict[str, Any]] = []
    for kind, fields in FIELDS.items():
        branches.append(
            {
                "if": {"properties": {"kind": {"const": kind.value}}},
                "then": {
                    "required": [n for n, (_t, req) in fields.items() if req],
                    "properties": {n: {"type": _json_types(t)} for n, (t, _r) in fields.items()},
                },
            }
        )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"pulsarcast-ipfs/metrics/v{SCHEMA_VERSION}",
        "title": f"Pulsarcast metric record, schema version {SCHEMA_VERSION}",
        "description": "One JSON object per line; generated from pulsarcast_ipfs.records.FIELDS.",
        "type": "object",
        "required": [n for n, (_t, req) in COMMON_FIELDS.items() if req],
        "properties": common_props,
        "allOf": branches,
    }


def load_json_schema() -> dict[str, Any]:
    """The checked-in schema file (``spark/metrics_schema_v1.json``)."""
    text = resources.files("spark").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def _spark_type(prop: dict[str, Any]) -> str:
    t = prop["type"]
    names = [t] if isinstance(t, str) else [x for x in t if x != "null"]
    if len(names) != 1:
        raise ValueError(f"cannot map JSON types {t!r} to one Spark type")
    return _SPARK_TYPES[names[0]]


def _columns(doc: dict[str, Any]) -> dict[str, str]:
    cols: dict[str, str] = {n: _spark_type(p) for n, p in doc["properties"].items()}
    for branch in doc["allOf"]:
        for name, prop in branch["then"]["properties"].items():
            st = _spark_type(prop)
            if cols.setdefault(name, st) != st:
                raise ValueError(f"field {name!r} has two Spark types: {cols[name]} and {st}")
    return cols


def spark_schema(doc: dict[str, Any] | None = None, *, corrupt_column: bool = True) -> str:
    """A Spark DDL schema string: every field of every kind, all nullable."""
    cols = _columns(doc if doc is not None else load_json_schema())
    parts = [f"`{n}` {t}" for n, t in cols.items()]
    if corrupt_column:
        parts.append(f"`{CORRUPT_COLUMN}` string")
    return ", ".join(parts)


def column_types(doc: dict[str, Any] | None = None) -> dict[str, str]:
    """Field name -> Spark SQL type name, in schema order."""
    return _columns(doc if doc is not None else load_json_schema())


def required_fields(doc: dict[str, Any] | None = None) -> tuple[list[str], dict[str, list[str]]]:
    """(common required fields, kind -> its required fields)."""
    d = doc if doc is not None else load_json_schema()
    per_kind = {
        b["if"]["properties"]["kind"]["const"]: list(b["then"]["required"]) for b in d["allOf"]
    }
    return list(d["required"]), per_kind


if __name__ == "__main__":
    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n")
