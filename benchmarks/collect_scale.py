"""``pulsarcast collect`` from a whole local cluster: records collected against
records written, and the time it takes (docs/metrics.md "Collecting records").

Starts N real Kubo daemons with a sidecar beside each, makes a topic on node 0,
subscribes every other node, publishes EVENTS events at RATE per second from node 0
(the load of ``pulsarcast bench`` at 20 nodes and 20 events/s), waits GRACE seconds,
collects from every sidecar, collects a second time (only what was written since
comes, none twice), and right after counts the complete lines each sidecar has
written. Equal counts: every record collected, none twice (the cluster is quiet by
then; a difference would be what the sidecars wrote in between).

    PYTHONPATH=. .venv/bin/python benchmarks/collect_scale.py --nodes 20 --events 400
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.collect import STATE_FILE, Collector


def written_lines(metrics_dir: Path, run: str, peer: str) -> int:
    """Complete lines the sidecar wrote to its metric files, rotated ones included."""
    total = 0
    for p in metrics_dir.glob(f"{run}-{peer}.jsonl*"):
        if p.suffix == ".gz":
            continue
        text = p.read_bytes()
        total += text[: text.rfind(b"\n") + 1].count(b"\n")
    return total


def collected_rows(out: Path, run: str, peer: str) -> int:
    return sum(
        pq.read_metadata(p).num_rows
        for p in (out / f"run={run}" / f"node={peer}").glob("*.parquet")
    )


async def _ok(sc: LocalSidecarCluster, i: int, method: str, path: str, **kw: object) -> Any:
    async with sc.client(i, timeout=60.0) as c:
        r = await c.request(method, path, **kw)  # type: ignore[arg-type]
    if r.status_code not in (200, 201):
        raise SystemExit(f"node{i} {method} {path}: {r.status_code} {r.text}")
    return r.json()


async def run(args: argparse.Namespace) -> int:
    run_name = "collect-scale"
    async with LocalSidecarCluster(nodes=args.nodes, run=run_name) as sc:
        print(f"{args.nodes} nodes up", flush=True)
        topic = (await _ok(sc, 0, "POST", "/v1/topics", json={"name": "collect-scale"}))["cid"]
        for i in range(1, args.nodes):
            await _ok(sc, i, "POST", f"/v1/topics/{topic}/subscribe")
        await asyncio.sleep(5)
        gap = 1.0 / args.rate
        started = time.monotonic()
        for n in range(args.events):
            await _ok(
                sc,
                0,
                "POST",
                f"/v1/topics/{topic}/publish",
                params={"ack": "local"},
                json={"n": n, "text": "x" * 1000},
            )
            await asyncio.sleep(max(0.0, started + (n + 1) * gap - time.monotonic()))
        print(f"published {args.events} in {time.monotonic() - started:.1f} s", flush=True)
        await asyncio.sleep(args.grace)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "dataset"
            urls = [sc[i].api_url for i in range(args.nodes)]
            t0 = time.monotonic()
            first = await asyncio.to_thread(Collector(out).collect, urls)
            first_s = time.monotonic() - t0
            t1 = time.monotonic()
            second = await asyncio.to_thread(Collector(out).collect, urls)
            second_s = time.monotonic() - t1
            errors = [r.error for r in [*first, *second] if r.error]
            peers = [sc[i].kubo.peer_id for i in range(args.nodes)]
            written = sum(
                written_lines(sc[i].metrics_dir, run_name, p) for i, p in enumerate(peers)
            )
            rows = sum(collected_rows(out, run_name, p) for p in peers)
            state = json.loads((out / STATE_FILE).read_text())["sources"]
    n_first = sum(r.records for r in first)
    n_second = sum(r.records for r in second)
    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "events": args.events,
                "first_collect_records": n_first,
                "first_collect_seconds": round(first_s, 2),
                "second_collect_records": n_second,
                "second_collect_seconds": round(second_s, 2),
                "collected_rows": rows,
                "written_lines_after_second_collect": written,
                "sources": len(state),
                "errors": errors,
            },
            indent=1,
        )
    )
    return 0 if not errors else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--events", type=int, default=400)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--grace", type=float, default=10.0, help="seconds after the last publish")
    args = ap.parse_args(argv)
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
