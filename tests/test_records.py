from __future__ import annotations

import json
from typing import Any

import pytest

from pulsarcast_ipfs.records import (
    FIELDS,
    MetricRecord,
    RecordError,
    RecordKind,
    validate_record,
)


def _base(kind: str, **fields: Any) -> dict[str, Any]:
    return {"v": 1, "ts": 1.5, "run": "r", "system": "sim", "node": "n1", "kind": kind, **fields}


def test_every_kind_has_fields() -> None:
    assert set(FIELDS) == set(RecordKind)


def test_round_trip_delivered() -> None:
    rec = MetricRecord(
        kind=RecordKind.EVENT_DELIVERED,
        ts=10.0,
        node="n1",
        fields={"topic": "t", "event": "bafy", "latency": 0.25, "recovered": False},
    )
    obj = json.loads(rec.to_json(run="r", system="sim"))
    assert obj["kind"] == "event_delivered" and obj["v"] == 1
    assert validate_record(obj) is RecordKind.EVENT_DELIVERED


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([], "JSON object"),
        ({"v": 1}, "missing field 'ts'"),
        (_base("nope"), "unknown record kind"),
        ({**_base("subscribed", topic="t"), "v": 2}, "unsupported schema version"),
        (
            _base("event_delivered", topic="t", event="e", recovered=False),
            "missing field 'latency'",
        ),
        (_base("event_delivered", topic="t", event="e", latency="1", recovered=False), "'latency'"),
        (
            _base("event_delivered", topic="t", event="e", latency=float("nan"), recovered=0),
            "'latency'",
        ),
        (_base("rpc_sent", op="JOIN", bytes=True, peer="p"), "'bytes'"),
        (_base("subscribed", topic=None), "'topic'"),
        ({**_base("subscribed", topic="t"), "ts": "yesterday"}, "'ts'"),
    ],
)
def test_invalid_records_are_refused_with_a_reason(obj: Any, message: str) -> None:
    with pytest.raises(RecordError, match=message):
        validate_record(obj)


def test_to_json_refuses_a_bad_record() -> None:
    rec = MetricRecord(kind=RecordKind.RPC_SENT, ts=1.0, node="n", fields={"op": "JOIN"})
    with pytest.raises(RecordError):
        rec.to_json(run="r", system="sim")
