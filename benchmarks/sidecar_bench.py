"""Sidecar figures on a local cluster: end-to-end delivery latency (p50/p99), the sustained
publish rate of one sidecar, and the sidecars' resident memory.

Run: ``.venv/bin/python benchmarks/sidecar_bench.py [--nodes 8] [--events 300]``.
Latency is taken from the ``event_delivered`` metric records (delivery time minus the
event's ``created``), over every subscriber; figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import anyio
import psutil

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.stats import percentile


def _pct(values: list[float], q: float) -> float:
    value = percentile(values, q)
    assert value is not None, "no latencies"
    return value


async def bench(nodes: int, events: int, rate: float, burst_seconds: float, routing_k: int) -> None:
    async with LocalSidecarCluster(nodes=nodes, routing_k=routing_k, run="bench") as sc:
        async with sc.client(0) as a:
            topic = (await a.post("/v1/topics", json={"name": "bench"})).json()["cid"]
        for i in range(1, nodes):
            async with sc.client(i) as c:
                await c.post(f"/v1/topics/{topic}/subscribe")
        await anyio.sleep(3)
        # 1. latency at a steady rate
        async with sc.client(0) as a:
            for n in range(events):
                r = await a.post(
                    f"/v1/topics/{topic}/publish", json={"ack": "local", "text": f"e{n}"}
                )
                assert r.status_code == 200, r.text
                await anyio.sleep(1 / rate)
        await anyio.sleep(5)
        latencies = []
        for i in range(1, nodes):
            for f in sc[i].metrics_dir.glob("*.jsonl"):
                for line in f.read_text().splitlines():
                    rec = json.loads(line)
                    if rec["kind"] == "event_delivered" and rec.get("topic") == "bench":
                        latencies.append(rec["latency"])
        print(f"nodes={nodes} subscribers={nodes - 1} events={events} at {rate}/s")
        print(f"deliveries: {len(latencies)} (expected {events * (nodes - 1)})")
        print(
            f"latency p50 {_pct(latencies, 0.5) * 1000:.1f} ms, "
            f"p99 {_pct(latencies, 0.99) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms"
        )
        # 2. sustained publish rate of one sidecar (4 concurrent HTTP clients)
        count = 0
        began = time.monotonic()

        async def worker() -> None:
            nonlocal count
            async with sc.client(0) as c:
                while time.monotonic() - began < burst_seconds:
                    r = await c.post(
                        f"/v1/topics/{topic}/publish", json={"ack": "local", "text": "burst"}
                    )
                    assert r.status_code == 200, r.text
                    count += 1

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(worker)
        elapsed = time.monotonic() - began
        print(f"sustained publish rate (node 0, 4 clients): {count / elapsed:.0f} events/s")
        await anyio.sleep(5)
        # 3. resident memory
        rss = [psutil.Process(sc[i].pid).memory_info().rss for i in sc.sidecars]
        print(
            f"sidecar RSS: mean {statistics.mean(rss) / 2**20:.1f} MiB, "
            f"max {max(rss) / 2**20:.1f} MiB (after {events + count} events)"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--events", type=int, default=300)
    p.add_argument("--rate", type=float, default=20.0, help="events/s for the latency run")
    p.add_argument("--burst-seconds", type=float, default=10.0)
    p.add_argument("--routing-k", type=int, default=1)
    a = p.parse_args()
    anyio.run(bench, a.nodes, a.events, a.rate, a.burst_seconds, a.routing_k)


if __name__ == "__main__":
    main()
