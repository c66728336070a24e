"""``GET /v1/records``'s pages (``sidecar._record_pages``) over a real
:class:`MetricsWriter`'s rotated files, and ``pulsarcast collect`` into Parquet:
every record written is collected once, across rotation, re-runs and a run stopped
between a part and its cursor; records off the schema are kept as JSON lines."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from pulsarcast_ipfs import collect as collect_mod
from pulsarcast_ipfs.cli import main as cli_main
from pulsarcast_ipfs.collect import STATE_FILE, Collector
from pulsarcast_ipfs.records import MetricRecord, RecordKind
from pulsarcast_ipfs.testing import RecordSources
from sidecar._metrics import MetricsWriter
from sidecar._record_pages import CursorError, parse_cursor, read_page

RUN = "r1"
_OPEN: list[MetricsWriter] = []


@pytest.fixture(autouse=True)
def _close_writers() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def _writer(tmp: Path, node: str, max_bytes: int = 4096) -> MetricsWriter:
    w = MetricsWriter(tmp / "metrics", run=RUN, system="pulsarcast", max_bytes=max_bytes)
    w.open(node)
    _OPEN.append(w)
    return w


def _write(w: MetricsWriter, node: str, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        rec = MetricRecord(
            kind=RecordKind.RPC_SENT,
            ts=1000.0 + i,
            node=node,
            fields={"op": "EVENT", "bytes": i, "peer": "P", "topic": "t"},
        )
        w.write(rec)
    w.flush()


def _all_pages(live: Path, limit: int) -> tuple[list[bytes], str]:
    lines: list[bytes] = []
    cursor = None
    while True:
        page = read_page(live, cursor, limit)
        lines += page.lines
        cursor = parse_cursor(page.next)
        if not page.more:
            return lines, page.next


def test_pages_cover_every_record_once_across_rotation(tmp_path: Path) -> None:
    w = _writer(tmp_path, "A")
    _write(w, "A", 200)
    assert w.path is not None
    rotated = sorted(p.name for p in w.dir.iterdir() if p.name != w.path.name)
    assert len(rotated) >= 3  # several generations
    lines, nxt = _all_pages(w.path, limit=7)
    assert [json.loads(x)["bytes"] for x in lines] == list(range(200))
    # a cursor taken before rotation still points at the same record after it
    _write(w, "A", 100, start=200)  # rotates the live file: its generation keeps its number
    more, _ = _all_pages_from(w.path, nxt)
    assert [json.loads(x)["bytes"] for x in more] == list(range(200, 300))


def _all_pages_from(live: Path, cursor_text: str) -> tuple[list[bytes], str]:
    lines: list[bytes] = []
    cursor = parse_cursor(cursor_text)
    while True:
        page = read_page(live, cursor, 50)
        lines += page.lines
        cursor = parse_cursor(page.next)
        if not page.more:
            return lines, page.next


def test_an_unfinished_line_waits_for_the_next_page(tmp_path: Path) -> None:
    live = tmp_path / "r-A.jsonl"
    live.write_bytes(b'{"a":1}\n\n{"b":2}\n{"c":')
    page = read_page(live, None, 100)
    assert page.lines == [b'{"a":1}', b'{"b":2}'] and not page.more
    with live.open("ab") as f:
        f.write(b"3}\n")
    again = read_page(live, parse_cursor(page.next), 100)
    assert again.lines == [b'{"c":3}']


@pytest.mark.parametrize("bad", ["", "x", "0:0", "1:-1", "1:01", "1:2:3", "a:1"])
def test_cursors_that_do_not_parse(bad: str) -> None:
    with pytest.raises(CursorError):
        parse_cursor(bad)


def test_cursors_past_what_was_written(tmp_path: Path) -> None:
    live = tmp_path / "r-A.jsonl"
    live.write_bytes(b'{"a":1}\n')
    with pytest.raises(CursorError, match="no generation 3"):
        read_page(live, (3, 0), 10)
    with pytest.raises(CursorError, match="past the end"):
        read_page(live, (1, 99), 10)


# -- pulsarcast collect ---------------------------------------------------------------


def _dataset(out: Path) -> list[dict[str, Any]]:
    files = [str(p) for p in sorted(out.rglob("*.parquet"))]
    rows: list[dict[str, Any]] = (
        ds.dataset(files, format="parquet").to_table(columns=["node", "bytes", "kind"]).to_pylist()
    )
    return rows


def _sources(tmp_path: Path, nodes: str = "AB") -> tuple[RecordSources, dict[str, MetricsWriter]]:
    src = RecordSources()
    writers = {}
    for i, n in enumerate(nodes):
        w = _writer(tmp_path / n, n)
        assert w.path is not None
        src.add(f"http://127.0.0.1:{6000 + i}", run=RUN, node=n, live=w.path)
        writers[n] = w
    return src, writers


def test_collect_is_complete_and_a_rerun_adds_only_new_records(tmp_path: Path) -> None:
    src, ws = _sources(tmp_path)
    _write(ws["A"], "A", 300)
    _write(ws["B"], "B", 120)
    out = tmp_path / "out"
    urls = list(src.sources)

    def run() -> list[collect_mod.SourceResult]:
        c = Collector(out, page_limit=40, part_records=100, transport=src.transport())
        return c.collect(urls)

    res = run()
    assert [(r.node, r.records, r.error) for r in res] == [("A", 300, None), ("B", 120, None)]
    assert (out / "run=r1" / "node=A").is_dir() and (out / STATE_FILE).is_file()
    rows = _dataset(out)
    assert Counter((r["node"], r["bytes"]) for r in rows) == Counter(
        [("A", i) for i in range(300)] + [("B", i) for i in range(120)]
    )
    assert [r.records for r in run()] == [0, 0]  # nothing new: nothing written twice
    assert len(_dataset(out)) == 420
    _write(ws["A"], "A", 50, start=300)  # rotates A's live file again
    assert [r.records for r in run()] == [50, 0]
    counts = Counter((r["node"], r["bytes"]) for r in _dataset(out))
    assert len(counts) == 470 and set(counts.values()) == {1}


def test_a_run_stopped_before_saving_its_cursor_duplicates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, ws = _sources(tmp_path, "A")
    _write(ws["A"], "A", 250)
    out = tmp_path / "out"
    saves = 0
    real_save = collect_mod._State.save

    def save_then_stop(self: Any) -> None:
        nonlocal saves
        saves += 1
        if saves == 2:  # the second part is written, its cursor not saved
            raise KeyboardInterrupt
        real_save(self)

    monkeypatch.setattr(collect_mod._State, "save", save_then_stop)
    c = Collector(out, page_limit=30, part_records=100, transport=src.transport())
    with pytest.raises(KeyboardInterrupt):
        c.collect(list(src.sources))
    monkeypatch.setattr(collect_mod._State, "save", real_save)
    c = Collector(out, page_limit=30, part_records=100, transport=src.transport())
    (res,) = c.collect(list(src.sources))
    counts = Counter(r["bytes"] for r in _dataset(out))
    assert sorted(counts) == list(range(250)) and set(counts.values()) == {1}
    assert res.records == 250 - 120  # the first part (4 pages of 30) had its cursor saved


def test_records_off_the_schema_are_kept_as_json_lines(tmp_path: Path) -> None:
    live = tmp_path / "r1-A.jsonl"
    good = {"v": 1, "ts": 1.0, "run": RUN, "system": "s", "node": "A", "kind": "subscribed"}
    lines = [
        good | {"topic": "t"},
        good | {"topic": "t", "extra": 1},  # a field no column holds
        good | {"kind": "rpc_sent", "op": "x", "bytes": 1.5, "peer": "P"},  # not an integer
    ]
    live.write_text("".join(json.dumps(x) + "\n" for x in lines))
    src = RecordSources()
    src.add("http://127.0.0.1:6000", run=RUN, node="A", live=live)
    c = Collector(tmp_path / "out", transport=src.transport())
    (res,) = c.collect(list(src.sources))
    assert (res.records, res.kept_as_json) == (3, 2)
    part = tmp_path / "out" / "run=r1" / "node=A"
    kept = [json.loads(x) for x in (part / "part-start.jsonl").read_text().splitlines()]
    assert kept == lines[1:]
    assert len(_dataset(tmp_path / "out")) == 1


def test_cli_collect_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "out")
    assert cli_main(["collect", out]) == 1
    assert "no sources" in capsys.readouterr().err
    assert cli_main(["collect", out, "--api-file", str(tmp_path / "nope")]) == 1
    assert "cannot read --api-file" in capsys.readouterr().err
    assert cli_main(["collect", out, "--cluster", str(tmp_path)]) == 1
    assert "no sidecar cluster" in capsys.readouterr().err
    assert cli_main(["collect", out, "--api", "ftp://x"]) == 1
    assert "http(s) URL" in capsys.readouterr().err
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / STATE_FILE).write_text("{")
    assert cli_main(["collect", out, "--api", "127.0.0.1:1", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "unreadable collect state" in err and "Traceback" not in err
    (tmp_path / "out" / STATE_FILE).unlink()
    assert cli_main(["collect", out, "--api", "127.0.0.1:1", "--quiet"]) == 1
    cap = capsys.readouterr()
    assert "cannot reach http://127.0.0.1:1" in cap.err and "0 of 1 sources" in cap.out
