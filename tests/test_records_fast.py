"""``RecordLines``, the per-shape validated record writer, against ``MetricRecord.to_json``.

A differential test of the fast path against the slow one: for every sequence of
records (many of one shape, so that the fast path runs), the same text wherever
``to_json`` gives one, and ``RecordError`` (or the same exception) wherever it raises.
"""

from __future__ import annotations

import enum
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarcast_ipfs.records import FIELDS, MetricRecord, RecordKind, RecordLines


class _Reason(enum.StrEnum):
    BAD = "bad_signature"


_texts = st.text(max_size=12) | st.sampled_from(["", "é", "\x00", '"\\', "\U0001f600", "\ud800"])
_scalars = st.one_of(
    _texts,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.just(_Reason.BAD),
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
_names = st.sampled_from(sorted({n for f in FIELDS.values() for n in f} | {"extra", "v", "node"}))


@st.composite
def _records(draw: st.DrawFn) -> MetricRecord:
    kind = draw(st.sampled_from(list(RecordKind)))
    if draw(st.booleans()):  # a valid-looking record of the kind's own fields
        names = list(FIELDS[kind])
    else:
        names = draw(st.lists(_names, max_size=6, unique=True))
    fields = {name: draw(_values) for name in names}
    ts = draw(st.floats(allow_nan=True, allow_infinity=True) | st.integers(0, 2**40))
    node = draw(st.sampled_from(["12D3KooWA", "n-é"]) | _texts)
    return MetricRecord(kind=kind, ts=ts, node=node, fields=fields)


def _slow(rec: MetricRecord, run: str, system: str) -> tuple[str, Any]:
    try:
        return "ok", rec.to_json(run=run, system=system)
    except Exception as exc:
        return "error", type(exc)


def _fast(lines: RecordLines, rec: MetricRecord) -> tuple[str, Any]:
    try:
        return "ok", lines.line(rec)
    except Exception as exc:
        return "error", type(exc)


def _same_shape(rec: MetricRecord, seed: int) -> MetricRecord:
    """Another record of ``rec``'s shape (same names and types), other values."""

    def vary(v: Any) -> Any:
        if isinstance(v, bool) or v is None or isinstance(v, enum.Enum):
            return v
        if isinstance(v, int):
            return v + seed
        if isinstance(v, float):  # seed 3: a non-finite float where a finite one was
            return math.nan if seed == 3 else v * 3.5 + seed if math.isfinite(v) else v
        if isinstance(v, str):
            return v + "é\n"[seed % 2]
        return v

    return MetricRecord(
        kind=rec.kind,
        ts=vary(rec.ts),
        node=vary(rec.node),
        fields={k: vary(v) for k, v in rec.fields.items()},
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(_records(), min_size=1, max_size=8), _texts, st.sampled_from(["pulsarcast", "s"]))
def test_the_fast_writer_gives_the_bytes_and_errors_of_to_json(
    records: list[MetricRecord], run: str, system: str
) -> None:
    lines = RecordLines(run=run, system=system)
    for rec in records:
        for variant in (rec, rec, *(_same_shape(rec, seed) for seed in (1, 2, 3))):
            assert _fast(lines, variant) == _slow(variant, run, system), variant


def test_the_fast_path_runs_and_matches_for_the_sidecars_records() -> None:
    lines = RecordLines(run="bench-1", system="pulsarcast")
    recs = [
        MetricRecord(
            kind=RecordKind.RPC_SENT,
            ts=1767225600.0 + i / 7,
            node="12D3KooWNode",
            fields={"op": "EVENT", "bytes": 600 + i, "peer": f"12D3KooWPeer{i}", "topic": "t"},
        )
        for i in range(50)
    ]
    calls = 0
    original = MetricRecord.to_json

    def counting(self: MetricRecord, **kw: Any) -> str:
        nonlocal calls
        calls += 1
        return original(self, **kw)

    try:
        MetricRecord.to_json = counting  # type: ignore[method-assign]
        got = [lines.line(r) for r in recs]
    finally:
        MetricRecord.to_json = original  # type: ignore[method-assign]
    assert got == [r.to_json(run="bench-1", system="pulsarcast") for r in recs]
    assert calls == 1  # one shape: validated once, the other 49 written directly


def test_a_non_finite_float_of_a_known_shape_is_still_refused() -> None:
    lines = RecordLines(run="r", system="s")
    ok = MetricRecord(
        kind=RecordKind.EVENT_DELIVERED,
        ts=1.0,
        node="n",
        fields={"topic": "t", "event": "e", "latency": 0.5, "recovered": False},
    )
    assert lines.line(ok) == ok.to_json(run="r", system="s")
    bad = MetricRecord(kind=ok.kind, ts=1.0, node="n", fields={**ok.fields, "latency": math.nan})
    try:
        lines.line(bad)
    except ValueError:
        pass
    else:
        raise AssertionError("a NaN latency was written")
