"""Publish-call and delivery latency at ``ack=local`` and ``ack=N`` — not a test.

A small local cluster (``--nodes``, default 3: Kubo daemons with a sidecar each);
node 0 authors one topic, every other node subscribes. Node 0 then publishes
``--events`` events at ``--rate`` events/s, the levels interleaved (even events at
the first level, odd at the second) so that both see the same load. Each publish is
its own task: a call waiting for holders never holds back the next one.

Reported per level: the publish call's duration (p50, p99: from sending the request
to the answer, what an application waits) and the delivery latency at the
subscribers (``delivered_at`` of the sidecar's delivery log minus the time the
publish call was made, p50 and p99), and the libp2p round trip between node 0 and
node 1 (Kubo ``ping``) for the target "publish-call p50 at ack=1 ≤ 2 × local's +
one round trip" (docs/faults.md "Acknowledgement levels").

    .venv/bin/python -m benchmarks.ack_latency --nodes 3 --events 200 --rate 10
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import anyio
import httpx

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.stats import percentile
from pulsarcast_ipfs.testing import wait_until


def _level(text: str) -> int | str:
    if text == "local":
        return "local"
    n = int(text)
    if not 1 <= n <= 64:
        raise argparse.ArgumentTypeError("a level is 'local' or 1..64")
    return n


async def _ok(c: httpx.AsyncClient, method: str, path: str, **kw: Any) -> Any:
    r = await c.request(method, path, **kw)
    r.raise_for_status()
    return r.json()


async def _rtt(sc: LocalSidecarCluster) -> float | None:
    """Kubo's ``ping`` from node 0 to node 1: the mean of 5 round trips (seconds)."""
    async with httpx.AsyncClient(base_url=sc.cluster[0].api_url, timeout=30) as kubo:
        r = await kubo.post("/api/v0/ping", params={"arg": sc.cluster[1].peer_id, "count": 5})
    times = [
        obj["Time"] / 1e9
        for line in r.text.splitlines()
        if line.strip() and (obj := json.loads(line)).get("Success") and obj.get("Time")
    ]
    return sum(times) / len(times) if times else None


def _q(values: list[float], p: float) -> float | None:
    return percentile(values, p)


async def measure(*, nodes: int, events: int, rate: float, levels: list[int | str]) -> None:
    async with LocalSidecarCluster(nodes=nodes, run="ack-latency") as sc:
        clients = [sc.client(i, timeout=60) for i in range(nodes)]
        for c in clients:
            await c.__aenter__()
        try:
            topic = (await _ok(clients[0], "POST", "/v1/topics", json={"name": "ack-latency"}))[
                "cid"
            ]
            for c in clients[1:]:
                await _ok(c, "POST", f"/v1/topics/{topic}/subscribe")

            async def joined() -> bool:
                for c in clients[1:]:
                    st = await _ok(c, "GET", "/v1/status")
                    t = next((t for t in st["topics"] if t["root_cid"] == topic), None)
                    if t is None or t["parent"] is None:
                        return False
                return True

            await wait_until(joined, deadline=60, what="subscribers joined", interval=0.3)
            rtt = await _rtt(sc)
            calls: dict[str, list[float]] = {str(lv): [] for lv in levels}
            sent: dict[str, tuple[str, float]] = {}  # event CID -> (level, sent at)
            refused: dict[str, int] = {str(lv): 0 for lv in levels}

            async def publish(k: int) -> None:
                level = levels[k % len(levels)]
                t0 = time.time()
                p0 = time.perf_counter()
                r = await clients[0].post(
                    f"/v1/topics/{topic}/publish",
                    json={"text": f"{k}", "ack": level, "ack_timeout": 30},
                )
                took = time.perf_counter() - p0
                if r.status_code != 200:
                    refused[str(level)] += 1
                    return
                calls[str(level)].append(took)
                sent[r.json()["event"]] = (str(level), t0)

            t_start = time.monotonic()
            async with anyio.create_task_group() as tg:
                for k in range(events):
                    await anyio.sleep(max(0.0, t_start + k / rate - time.monotonic()))
                    tg.start_soon(publish, k)
            await anyio.sleep(5)
            lat: dict[str, list[float]] = {str(lv): [] for lv in levels}
            for c in clients[1:]:
                r = await c.get(
                    "/v1/deliveries", params={"topic": topic, "after": 0, "follow": "false"}
                )
                for line in r.text.splitlines():
                    if not line.strip():
                        continue
                    d = json.loads(line)
                    if d["cid"] in sent:
                        level, t0 = sent[d["cid"]]
                        lat[level].append(d["delivered_at"] - t0)
        finally:
            for c in clients:
                await c.__aexit__(None, None, None)
    print(f"nodes {nodes}, events {events} at {rate:g}/s, levels {levels}")
    print(f"round trip node0-node1 (Kubo ping): {rtt * 1000:.2f} ms" if rtt else "round trip: ?")
    for lv in levels:
        key = str(lv)
        c50, c99 = _q(calls[key], 0.5), _q(calls[key], 0.99)
        d50, d99 = _q(lat[key], 0.5), _q(lat[key], 0.99)
        print(
            f"ack={key:>5}: calls {len(calls[key])} (refused {refused[key]}), "
            f"call p50 {c50 * 1000 if c50 else float('nan'):.1f} ms "
            f"p99 {c99 * 1000 if c99 else float('nan'):.1f} ms; "
            f"deliveries {len(lat[key])}, latency p50 {d50 * 1000 if d50 else float('nan'):.1f} ms "
            f"p99 {d99 * 1000 if d99 else float('nan'):.1f} ms"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=3, help="Kubo + sidecar pairs (default 3)")
    p.add_argument("--events", type=int, default=200, help="events published (default 200)")
    p.add_argument("--rate", type=float, default=10.0, help="events per second (default 10)")
    p.add_argument(
        "--level",
        type=_level,
        action="append",
        dest="levels",
        help="an acknowledgement level, repeatable (default: local and 1)",
    )
    args = p.parse_args()
    if args.nodes < 2:
        p.error("--nodes must be at least 2 (a holder is another node)")
    anyio.run(
        lambda: measure(
            nodes=args.nodes, events=args.events, rate=args.rate, levels=args.levels or ["local", 1]
        )
    )


if __name__ == "__main__":
    main()
