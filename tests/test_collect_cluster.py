"""``pulsarcast collect --cluster`` against real sidecars beside real Kubo daemons.

Four nodes; node 0 creates a topic, the others subscribe, node 0 publishes. The
collected dataset holds, per node, exactly the records the sidecar wrote up to the
cursor it saved, in order, each once; a second collect adds only what was written
since, and a third right after finds (next to) nothing twice. Prints the counts and
the time (the measurement of docs/metrics.md "Collecting records")."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pyarrow.parquet as pq
import pytest

from pulsarcast_ipfs.cli import main as cli_main
from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.collect import STATE_FILE
from pulsarcast_ipfs.testing import ok, wait_joined

pytestmark = [pytest.mark.kubo, pytest.mark.cluster, pytest.mark.anyio, pytest.mark.timeout(400)]

NODES = 4
EVENTS = 30


@pytest.fixture(scope="module")
async def sc(anyio_backend: str) -> AsyncIterator[LocalSidecarCluster]:
    async with LocalSidecarCluster(nodes=NODES, run="collect") as cluster:
        yield cluster


def _written(metrics_dir: Path, run: str, peer: str) -> list[str]:
    """Every complete line the sidecar wrote, its rotated files first."""
    live = metrics_dir / f"{run}-{peer}.jsonl"
    rotated = sorted(
        (p for p in metrics_dir.glob(f"{live.name}.*") if p.suffix[1:].isdigit()),
        key=lambda p: int(p.suffix[1:]),
    )
    lines: list[str] = []
    for p in [*rotated, live]:
        text = p.read_text()
        lines += [x for x in text[: text.rfind("\n") + 1].splitlines() if x.strip()]
    return lines


def _norm(v: Any) -> Any:
    """One form for a value read from JSON or back from Parquet: maps as ``[key,
    value]`` pairs (Parquet gives tuples), numbers as floats (a ``number`` column
    gives 1.0 for 1)."""
    if isinstance(v, dict):
        return [[k, _norm(x)] for k, x in v.items()]
    if isinstance(v, list | tuple):
        return [_norm(x) for x in v]
    if isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    return v


def _row(obj: dict[str, Any]) -> str:
    """A record without its null fields (Parquet has a column for every field)."""
    return json.dumps({k: _norm(v) for k, v in obj.items() if v is not None}, sort_keys=True)


def _cursor_order(part: Path) -> tuple[int, int]:
    """``part-start`` first, then ``part-GEN-OFFSET`` by cursor."""
    tail = part.stem.removeprefix("part-")
    if tail == "start":
        return (0, 0)
    gen, offset = tail.split("-")
    return (int(gen), int(offset))


def _collected(out: Path, peer: str) -> list[str]:
    rows: list[dict[str, Any]] = []
    parts = (out / "run=collect" / f"node={peer}").glob("*.parquet")
    for part in sorted(parts, key=_cursor_order):
        rows += pq.read_table(part).to_pylist()
    return [_row(r) for r in rows]


def _canon(line: str) -> str:
    return _row(json.loads(line))


async def test_collect_from_a_cluster_is_every_record_once(
    sc: LocalSidecarCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = (await ok(sc, 0, "POST", "/v1/topics", json={"name": "collected"}))["cid"]
    for i in range(1, NODES):
        await ok(sc, i, "POST", f"/v1/topics/{topic}/subscribe")
    await wait_joined(sc, topic, range(1, NODES))
    for n in range(EVENTS):
        await ok(
            sc, 0, "POST", f"/v1/topics/{topic}/publish", json={"ack": "local", "text": f"e{n}"}
        )
    await anyio.sleep(2)
    out = tmp_path / "dataset"
    argv = ["collect", str(out), "--cluster", str(sc.base_dir), "--quiet"]

    started = time.monotonic()
    assert await anyio.to_thread.run_sync(cli_main, argv) == 0
    first_s = time.monotonic() - started
    first = capsys.readouterr().out
    state = json.loads((out / STATE_FILE).read_text())["sources"]
    peers = [sc[i].kubo.peer_id for i in range(NODES)]
    assert sorted(state) == sorted(f"collect/{p}" for p in peers)
    collected = {p: _collected(out, p) for p in peers}
    written = {p: _written(sc[i].metrics_dir, "collect", p) for i, p in enumerate(peers)}
    for p in peers:  # what was written until the cursor: all of it, in order, once
        assert collected[p] == [_canon(x) for x in written[p][: len(collected[p])]]
        assert state[f"collect/{p}"]["records"] == len(collected[p])
    n_first = sum(map(len, collected.values()))
    n_written = sum(map(len, written.values()))
    kinds = {json.loads(x)["kind"] for v in collected.values() for x in v}
    assert {"event_published", "event_delivered", "rpc_sent"} <= kinds, kinds

    await ok(sc, 0, "POST", f"/v1/topics/{topic}/publish", json={"ack": "local", "text": "late"})
    await anyio.sleep(1)
    assert await anyio.to_thread.run_sync(cli_main, argv) == 0
    second = capsys.readouterr().out
    for i, p in enumerate(peers):
        got = _collected(out, p)
        lines = _written(sc[i].metrics_dir, "collect", p)
        assert got == [_canon(x) for x in lines[: len(got)]]  # no duplicate, no gap
        assert len(got) >= len(collected[p])
    print(
        f"\ncollect of {NODES} sidecars: {n_first} records collected in {first_s:.2f} s "
        f"({n_written} written by the time it returned); then {second.splitlines()[-1]}\n"
        f"first run: {first.splitlines()[-1]}"
    )
